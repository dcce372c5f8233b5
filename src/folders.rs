//! The host folders workroom keeps its files in, resolved by one rule.
//!
//! Each is the XDG base folder of its kind with `workroom` under it:
//! - cache (`$XDG_CACHE_HOME`, else `~/.cache`): Features, the ready
//!   records, kept notes, the "room being made" locks; all can be rebuilt;
//! - state (`$XDG_STATE_HOME`, else `~/.local/state`): the forwarders'
//!   pid, status and log files;
//! - config (`$XDG_CONFIG_HOME`, else `~/.config`): `config.toml`; and,
//!   beside workroom's own folder, the systemd user unit `workroom watch
//!   --install` writes (`systemd/user/`, where systemd looks);
//! - data (`$XDG_DATA_HOME`, else `~/.local/share`): the peer registries,
//!   which outlive rooms.
//!
//! The rule, the XDG Base Directory spec's: a variable that is unset, empty
//! or not an absolute path is ignored and the default under `HOME` is
//! used. Five hand copies of it once differed (one took an empty
//! `XDG_CACHE_HOME` as the current folder). Without `HOME` either, there is
//! no folder, and each caller says what that costs it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// A kind of host folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Cache,
    State,
    Config,
    Data,
}

impl Kind {
    fn variable(self) -> &'static str {
        match self {
            Kind::Cache => "XDG_CACHE_HOME",
            Kind::State => "XDG_STATE_HOME",
            Kind::Config => "XDG_CONFIG_HOME",
            Kind::Data => "XDG_DATA_HOME",
        }
    }

    fn under_home(self) -> &'static str {
        match self {
            Kind::Cache => ".cache",
            Kind::State => ".local/state",
            Kind::Config => ".config",
            Kind::Data => ".local/share",
        }
    }
}

/// The XDG base folder of `kind` itself (`~/.config`, not
/// `~/.config/workroom`) in the environment `env` gives: where files that
/// other programs read go (systemd's user units under `systemd/user`).
pub fn base_in(kind: Kind, env: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let absolute = |v: OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    match env(kind.variable()).and_then(absolute) {
        Some(base) => Some(base),
        None => env("HOME").filter(|h| !h.is_empty()).map(|h| Path::new(&h).join(kind.under_home())),
    }
}

/// [`base_in`] this process's environment.
pub fn base(kind: Kind) -> Option<PathBuf> {
    base_in(kind, |k| std::env::var_os(k))
}

/// workroom's folder of `kind` in the environment `env` gives.
pub fn workroom_in(kind: Kind, env: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    base_in(kind, env).map(|base| base.join("workroom"))
}

/// workroom's folder of `kind` in this process's environment.
pub fn workroom(kind: Kind) -> Option<PathBuf> {
    workroom_in(kind, |k| std::env::var_os(k))
}

/// `$XDG_CACHE_HOME/workroom/<name>` (else `~/.cache/workroom/<name>`).
pub fn cache(name: &str) -> Option<PathBuf> {
    workroom(Kind::Cache).map(|c| c.join(name))
}

/// A file of a room in a cache folder keyed by container id (the ready
/// record, the kept notes): ids are hex, and anything else is not ours to
/// turn into a path.
pub fn room_file(folder: &Path, container_id: &str) -> Option<PathBuf> {
    (!container_id.is_empty() && container_id.chars().all(|c| c.is_ascii_alphanumeric()))
        .then(|| folder.join(container_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |k| vars.iter().find(|(name, _)| *name == k).map(|(_, v)| OsString::from(v))
    }

    #[test]
    fn each_kind_is_its_variable_else_its_place_under_home() {
        let set = [
            ("HOME", "/h"),
            ("XDG_CACHE_HOME", "/c"),
            ("XDG_STATE_HOME", "/s"),
            ("XDG_CONFIG_HOME", "/f"),
            ("XDG_DATA_HOME", "/d"),
        ];
        let got = |kind, vars| workroom_in(kind, env(vars)).map(|p| p.display().to_string());
        assert_eq!(got(Kind::Cache, &set).as_deref(), Some("/c/workroom"));
        assert_eq!(got(Kind::State, &set).as_deref(), Some("/s/workroom"));
        assert_eq!(got(Kind::Config, &set).as_deref(), Some("/f/workroom"));
        assert_eq!(got(Kind::Data, &set).as_deref(), Some("/d/workroom"));
        let home = [("HOME", "/h")];
        assert_eq!(got(Kind::Cache, &home).as_deref(), Some("/h/.cache/workroom"));
        assert_eq!(got(Kind::State, &home).as_deref(), Some("/h/.local/state/workroom"));
        assert_eq!(got(Kind::Config, &home).as_deref(), Some("/h/.config/workroom"));
        assert_eq!(got(Kind::Data, &home).as_deref(), Some("/h/.local/share/workroom"));
    }

    #[test]
    fn an_empty_or_relative_variable_is_ignored_as_the_xdg_spec_says_not_taken_as_the_current_folder() {
        let empty = [("HOME", "/h"), ("XDG_CACHE_HOME", "")];
        assert_eq!(workroom_in(Kind::Cache, env(&empty)), Some(PathBuf::from("/h/.cache/workroom")));
        let relative = [("HOME", "/h"), ("XDG_CACHE_HOME", "cache")];
        assert_eq!(workroom_in(Kind::Cache, env(&relative)), Some(PathBuf::from("/h/.cache/workroom")));
    }

    #[test]
    fn a_base_folder_is_the_variable_or_its_place_under_home_without_workroom_under_it() {
        let set = [("HOME", "/h"), ("XDG_CONFIG_HOME", "/f")];
        assert_eq!(base_in(Kind::Config, env(&set)), Some(PathBuf::from("/f")));
        assert_eq!(base_in(Kind::Config, env(&[("HOME", "/h")])), Some(PathBuf::from("/h/.config")));
        assert_eq!(
            base_in(Kind::Config, env(&[("HOME", "/h"), ("XDG_CONFIG_HOME", "rel")])),
            Some(PathBuf::from("/h/.config"))
        );
        assert_eq!(base_in(Kind::Config, env(&[])), None);
    }

    #[test]
    fn without_home_or_variable_there_is_no_folder() {
        assert_eq!(workroom_in(Kind::Cache, env(&[])), None);
        assert_eq!(workroom_in(Kind::State, env(&[("HOME", "")])), None);
        assert_eq!(workroom_in(Kind::Data, env(&[("XDG_DATA_HOME", "/d")])), Some(PathBuf::from("/d/workroom")));
    }

    #[test]
    fn a_room_file_is_named_by_a_hex_id_only() {
        let folder = Path::new("/c/ready");
        assert_eq!(room_file(folder, "abc123"), Some(PathBuf::from("/c/ready/abc123")));
        assert_eq!(room_file(folder, ""), None);
        assert_eq!(room_file(folder, "../etc"), None);
        assert_eq!(room_file(folder, "a/b"), None);
    }
}
