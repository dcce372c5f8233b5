//! A room's egress policy and log on the host, in the state folder:
//! `egress/<room>.json` and `egress/<room>.log`.
//!
//! The policy file keeps the rules from the settings apart from the
//! changes `workroom egress allow|deny` made to the running room: `up`
//! writes the first every time, and the changes stay until the room is
//! removed or `egress reset` drops them. The forwarder reads the file
//! again whenever it changes, so a change applies to the next request.
//!
//! The log is JSON lines, one per request, capped: past [`LOG_CAP`] it is
//! moved to `<room>.log.1` (one older file kept) and a new one begun.

use super::policy::{self, Mode, PatternError, Policy};
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// How large a room's egress log grows before it is rotated: an agent
/// retrying one refused host in a loop writes about 200 bytes a request,
/// so this keeps tens of thousands of requests without filling a disk.
pub const LOG_CAP: u64 = 8 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("no state folder: set HOME or XDG_STATE_HOME")]
    NoFolder,
    #[error("cannot read {path}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is not an egress policy: {source}")]
    Parse { path: PathBuf, source: serde_json::Error },
    #[error("cannot write {path}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Pattern { path: PathBuf, source: PatternError },
    #[error("{room} has no egress policy: it is not in `allowlist` mode, or was made before egress was")]
    None { room: String },
}

/// What the policy file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Written {
    pub mode: Mode,
    /// The patterns and presets of the settings and `--egress-allow`.
    #[serde(default)]
    pub settings: Vec<String>,
    /// Added to the running room by `egress allow`.
    #[serde(default)]
    pub allowed: Vec<String>,
    /// Taken away from the running room by `egress deny`.
    #[serde(default)]
    pub denied: Vec<String>,
}

impl Written {
    /// The rules in force: the settings' and the allowed, less the denied.
    pub fn policy(&self) -> Result<Policy, PatternError> {
        let mut policy = Policy { allow: policy::rules(&self.settings)?, deny: Vec::new() };
        for text in &self.allowed {
            policy.allow(text)?;
        }
        for text in &self.denied {
            policy.deny(text)?;
        }
        Ok(policy)
    }

    /// `egress allow PATTERN`, checked before it is kept.
    pub fn allow(&mut self, pattern: &str) -> Result<(), PatternError> {
        policy::rules(&[pattern])?;
        let pattern = pattern.trim().to_ascii_lowercase();
        self.denied.retain(|d| *d != pattern);
        if !self.allowed.contains(&pattern) && !self.settings.contains(&pattern) {
            self.allowed.push(pattern);
        }
        Ok(())
    }

    /// `egress deny PATTERN`, checked before it is kept.
    pub fn deny(&mut self, pattern: &str) -> Result<(), PatternError> {
        policy::rules(&[pattern])?;
        let pattern = pattern.trim().to_ascii_lowercase();
        self.allowed.retain(|a| *a != pattern);
        if !self.denied.contains(&pattern) {
            self.denied.push(pattern);
        }
        Ok(())
    }
}

fn folder() -> Result<PathBuf, StoreError> {
    crate::folders::workroom(crate::folders::Kind::State).map(|s| s.join("egress")).ok_or(StoreError::NoFolder)
}

pub fn policy_file(room: &str) -> Result<PathBuf, StoreError> {
    Ok(folder()?.join(format!("{room}.json")))
}

pub fn log_file(room: &str) -> Result<PathBuf, StoreError> {
    Ok(folder()?.join(format!("{room}.log")))
}

/// The folder holding the room's egress socket, bound read-only into the
/// room at `workroomd::room::EGRESS_DIR`: a folder of its own, so the room
/// sees nothing else of the host's.
pub fn socket_folder(room: &str) -> Result<PathBuf, StoreError> {
    Ok(folder()?.join(format!("{room}.d")))
}

/// [`socket_folder`], made when missing and private to this host's user
/// (0700): what `up` binds into the room, and where the forwarder listens.
pub fn made_socket_folder(room: &str) -> Result<PathBuf, StoreError> {
    use std::os::unix::fs::PermissionsExt;
    let folder = socket_folder(room)?;
    std::fs::create_dir_all(&folder)
        .and_then(|()| std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o700)))
        .map_err(|source| StoreError::Write { path: folder.clone(), source })?;
    Ok(folder)
}

/// The room's policy file, or `None` when it has none.
pub fn read(room: &str) -> Result<Option<Written>, StoreError> {
    read_at(&policy_file(room)?)
}

pub fn read_at(path: &Path) -> Result<Option<Written>, StoreError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(StoreError::Read { path: path.into(), source }),
    };
    let written: Written =
        serde_json::from_slice(&bytes).map_err(|source| StoreError::Parse { path: path.into(), source })?;
    // A hand-edited file is checked as a whole before it is taken.
    written.policy().map_err(|source| StoreError::Pattern { path: path.into(), source })?;
    Ok(Some(written))
}

pub fn write(room: &str, written: &Written) -> Result<(), StoreError> {
    let path = policy_file(room)?;
    let parent = path.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(parent).map_err(|source| StoreError::Write { path: parent.into(), source })?;
    let bytes = serde_json::to_vec_pretty(written).unwrap_or_default();
    workroomd::atomic::write(&path, &bytes).map_err(|source| StoreError::Write { path, source })
}

/// What `up` does: the settings' rules and mode replace the last ones;
/// the running room's own changes stay. Written only when they changed
/// (`up` on a running room runs this each time); then the rules in force
/// now are returned, for `up` to say.
pub fn set_from_settings(room: &str, mode: Mode, settings: &[String]) -> Result<Option<Vec<String>>, StoreError> {
    let path = policy_file(room)?;
    // An unreadable or hand-broken file is replaced by the settings'.
    let mut written = read_at(&path).ok().flatten().unwrap_or_default();
    if written.mode == mode && written.settings == settings && path.exists() {
        return Ok(None);
    }
    written.mode = mode;
    written.settings = settings.to_vec();
    write(room, &written)?;
    let mut now = written.settings.clone();
    now.extend(written.allowed.iter().map(|a| format!("{a} (egress allow)")));
    now.extend(written.denied.iter().map(|d| format!("not {d} (egress deny)")));
    Ok(Some(now))
}

/// The room is gone: its policy and log go with it.
pub fn remove(room: &str) {
    for path in [policy_file(room), log_file(room)].into_iter().flatten() {
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(rotated(&path));
    }
    if let Ok(folder) = socket_folder(room) {
        let _ = std::fs::remove_dir_all(folder);
    }
}

fn rotated(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".1");
    PathBuf::from(name)
}

/// How one request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Dialled and carried.
    Allowed,
    /// Refused by the policy.
    Refused,
    /// Allowed, but the dial failed (DNS, refused, timeout), or the
    /// request could not be read.
    Failed,
}

/// How a request's connection came from the room to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// Its own socket, handed over through the room's egress socket (a
    /// local engine): the bytes go host to room directly.
    Socket,
    /// Its bytes over the daemon's exec link.
    Link,
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Milliseconds since the epoch, when the request came.
    pub time_ms: u64,
    /// `CONNECT`, or the plain request's method.
    pub method: String,
    pub host: String,
    pub port: u16,
    pub outcome: Outcome,
    /// The rule that allowed or denied it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Why it was refused or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// From the room to the server, and back.
    pub sent: u64,
    pub received: u64,
    pub duration_ms: u64,
    /// Absent in lines written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<Via>,
}

/// Appends `entry` to the room's log, rotating it past [`LOG_CAP`].
pub fn append(room: &str, entry: &Entry) -> Result<(), StoreError> {
    let path = log_file(room)?;
    append_at(&path, entry, LOG_CAP)
}

pub fn append_at(path: &Path, entry: &Entry, cap: u64) -> Result<(), StoreError> {
    let write_err = |source| StoreError::Write { path: path.into(), source };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(write_err)?;
    }
    if std::fs::metadata(path).is_ok_and(|m| m.len() >= cap) {
        std::fs::rename(path, rotated(path)).map_err(write_err)?;
    }
    let mut line = serde_json::to_vec(entry).unwrap_or_default();
    line.push(b'\n');
    // One write of a whole line in append mode: concurrent requests'
    // lines never interleave.
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(write_err)?;
    file.write_all(&line).map_err(write_err)
}

/// The log's entries, the rotated file's first; lines that do not read
/// (a line cut by a crash) are skipped.
pub fn entries(room: &str) -> Result<Vec<Entry>, StoreError> {
    let path = log_file(room)?;
    let mut out = Vec::new();
    for p in [rotated(&path), path] {
        let text = match std::fs::read_to_string(&p) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(StoreError::Read { path: p, source }),
        };
        out.extend(text.lines().filter_map(|l| serde_json::from_str(l).ok()));
    }
    Ok(out)
}

/// Refusals counted by `host:port`, most first: what an agent tried to
/// reach and could not.
pub fn refusals(entries: &[Entry]) -> Vec<(String, usize)> {
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for e in entries.iter().filter(|e| e.outcome == Outcome::Refused) {
        *counts.entry(policy::suggestion(&e.host, e.port)).or_default() += 1;
    }
    let mut out: Vec<_> = counts.into_iter().collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(host: &str, outcome: Outcome) -> Entry {
        Entry {
            time_ms: 1,
            method: "CONNECT".into(),
            host: host.into(),
            port: 443,
            outcome,
            rule: None,
            reason: None,
            sent: 0,
            received: 0,
            duration_ms: 0,
            via: None,
        }
    }

    #[test]
    fn the_policy_in_force_is_the_settings_and_the_allowed_less_the_denied() {
        let mut w = Written { mode: Mode::Allowlist, settings: vec!["*.github.com".into()], ..Default::default() };
        w.allow("pypi.org").unwrap();
        w.deny("gist.github.com").unwrap();
        let p = w.policy().unwrap();
        assert!(p.decide("api.github.com", 443).allowed());
        assert!(p.decide("pypi.org", 443).allowed());
        assert!(!p.decide("gist.github.com", 443).allowed());
        w.allow("gist.github.com").unwrap();
        assert!(w.denied.is_empty());
        assert!(w.policy().unwrap().decide("gist.github.com", 443).allowed());
    }

    #[test]
    fn a_bad_pattern_is_refused_before_it_is_kept() {
        let mut w = Written::default();
        assert!(w.allow("a..b").is_err());
        assert!(w.deny("@nope").is_err());
        assert_eq!(w, Written::default());
    }

    #[test]
    fn allowing_what_the_settings_allow_adds_nothing() {
        let mut w = Written { settings: vec!["pypi.org".into()], ..Default::default() };
        w.allow("PyPI.org").unwrap();
        assert!(w.allowed.is_empty());
    }

    #[test]
    fn a_hand_edited_policy_file_with_a_bad_pattern_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("room.json");
        std::fs::write(&path, r#"{"mode":"allowlist","settings":["*.*.com"]}"#).unwrap();
        let err = read_at(&path).unwrap_err();
        assert!(matches!(err, StoreError::Pattern { .. }), "{err:?}");
        assert!(err.to_string().contains("room.json") && err.to_string().contains("*.*.com"), "{err}");
        std::fs::write(&path, "{").unwrap();
        assert!(matches!(read_at(&path).unwrap_err(), StoreError::Parse { .. }));
        assert_eq!(read_at(&dir.path().join("absent.json")).unwrap(), None);
    }

    #[test]
    fn the_log_is_rotated_past_its_cap_and_read_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.log");
        append_at(&path, &entry("a.example", Outcome::Refused), 10).unwrap();
        append_at(&path, &entry("b.example", Outcome::Allowed), 10).unwrap();
        let older = std::fs::read_to_string(rotated(&path)).unwrap();
        let newer = std::fs::read_to_string(&path).unwrap();
        assert!(older.contains("a.example") && !older.contains("b.example"));
        assert!(newer.contains("b.example") && newer.lines().count() == 1);
    }

    #[test]
    fn refusals_are_counted_by_host_and_port_most_first() {
        let entries = [
            entry("a.example", Outcome::Refused),
            entry("b.example", Outcome::Refused),
            entry("b.example", Outcome::Refused),
            entry("c.example", Outcome::Allowed),
            entry("d.example", Outcome::Failed),
        ];
        assert_eq!(refusals(&entries), vec![("b.example:443".to_string(), 2), ("a.example:443".to_string(), 1)]);
    }
}
