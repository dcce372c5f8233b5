//! A feature's versions as the reference's `outdated` and `upgrade` read
//! them: the tags of its repository that are plain semantic versions
//! (`x.y.z`, no pre-release), newest first; the one a reference's tag
//! wants (`1` wants the newest 1.x.y, `1.2` the newest 1.2.y, `1.2.3`
//! itself, `latest` or none the newest of all). Pure.

use std::fmt;

/// `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u64, pub u64, pub u64);

impl Version {
    /// A plain `x.y.z` (digits only, no leading `v`, no pre-release).
    pub fn parse(text: &str) -> Option<Version> {
        let mut parts = text.split('.').map(|p| {
            let digits = !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
            digits.then(|| p.parse::<u64>().ok()).flatten()
        });
        let v = Version(parts.next()??, parts.next()??, parts.next()??);
        parts.next().is_none().then_some(v)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// The tags that are versions, newest first.
pub fn published(tags: &[String]) -> Vec<Version> {
    let mut versions: Vec<Version> = tags.iter().filter_map(|t| Version::parse(t)).collect();
    versions.sort_by(|a, b| b.cmp(a));
    versions.dedup();
    versions
}

/// The newest of `versions` (newest first) that `tag` asks for; `None`
/// when none matches (a tag such as `dev`, or a version not published).
pub fn wanted(tag: Option<&str>, versions: &[Version]) -> Option<Version> {
    let tag = match tag {
        None | Some("latest") => return versions.first().copied(),
        Some(tag) => tag,
    };
    let wanted: Vec<u64> = tag.split('.').map(|p| p.parse::<u64>().ok()).collect::<Option<_>>()?;
    if wanted.is_empty() || wanted.len() > 3 {
        return None;
    }
    versions.iter().copied().find(|v| [v.0, v.1, v.2].iter().zip(&wanted).all(|(have, want)| have == want))
}

/// One feature's line of `outdated`: what the lockfile pins (or, with no
/// lockfile entry, what is wanted), what its tag wants now, and the newest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outdated {
    pub current: Option<String>,
    pub wanted: Option<Version>,
    pub latest: Option<Version>,
}

pub fn outdated(locked: Option<&str>, tag: Option<&str>, tags: &[String]) -> Outdated {
    let versions = published(tags);
    let wanted = wanted(tag, &versions);
    Outdated {
        current: locked.map(str::to_string).or_else(|| wanted.map(|w| w.to_string())),
        wanted,
        latest: versions.first().copied(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(list: &[&str]) -> Vec<String> {
        list.iter().map(|t| t.to_string()).collect()
    }

    #[test]
    fn only_plain_versions_count_newest_first() {
        let t = tags(&["1", "1.0", "1.0.0", "latest", "1.10.0", "1.2.0", "2.0.0-rc.1", "v3.0.0", "2.0.0"]);
        assert_eq!(published(&t), [Version(2, 0, 0), Version(1, 10, 0), Version(1, 2, 0), Version(1, 0, 0)]);
        assert_eq!(Version::parse("01.2.3"), Some(Version(1, 2, 3)));
        for bad in ["1.2", "1.2.3.4", "1..3", "a.b.c", "1.2.3-rc"] {
            assert_eq!(Version::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_tag_wants_the_newest_version_it_covers() {
        let v = published(&tags(&["1.0.0", "1.1.0", "1.1.5", "2.0.0"]));
        assert_eq!(wanted(Some("1"), &v), Some(Version(1, 1, 5)));
        assert_eq!(wanted(Some("1.0"), &v), Some(Version(1, 0, 0)));
        assert_eq!(wanted(Some("1.1.0"), &v), Some(Version(1, 1, 0)));
        assert_eq!(wanted(Some("latest"), &v), Some(Version(2, 0, 0)));
        assert_eq!(wanted(None, &v), Some(Version(2, 0, 0)));
        assert_eq!(wanted(Some("3"), &v), None);
        assert_eq!(wanted(Some("dev"), &v), None);
    }

    #[test]
    fn current_is_the_locked_version_else_the_wanted_one_as_the_reference_shows_it() {
        let t = tags(&["1", "1.0", "1.0.0", "1.1.0", "2.0.0", "latest"]);
        let o = outdated(Some("1.0.0"), Some("1"), &t);
        assert_eq!(
            o,
            Outdated { current: Some("1.0.0".into()), wanted: Some(Version(1, 1, 0)), latest: Some(Version(2, 0, 0)) }
        );
        let o = outdated(None, Some("1.0"), &t);
        assert_eq!(o.current.as_deref(), Some("1.0.0"));
    }
}
