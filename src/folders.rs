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
//! `XDG_CACHE_HOME` as the current folder, the forwarders' state fell back
//! to a `/tmp` every user shares). Without `HOME` either, there is no
//! folder, and each caller says what that costs it.
//!
//! The state folder is private to its user ([`private`]): it holds what a
//! forwarder logs of the credentials it carries, the compose override files
//! with the room's environment, and the pid files `stop` signals, which
//! another user must not plant.

use std::ffi::OsString;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A folder only its user may enter, as the XDG spec asks of the folders
/// it names.
const PRIVATE_MODE: u32 = 0o700;

#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    #[error("no folder for workroom's {kind} files: HOME is unset, and so is {variable}", kind = kind.name(), variable = kind.variable())]
    NoHome { kind: Kind },
    #[error("cannot make {path}: {error}", path = path.display())]
    Make { path: PathBuf, error: std::io::Error },
    #[error("{path} belongs to uid {owner}, not to this user ({uid}); remove it or set {variable}", path = path.display(), variable = kind.variable())]
    NotOwn { kind: Kind, path: PathBuf, owner: u32, uid: u32 },
}

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

    fn name(self) -> &'static str {
        match self {
            Kind::Cache => "cache",
            Kind::State => "state",
            Kind::Config => "config",
            Kind::Data => "data",
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

/// workroom's folder of `kind`, made when missing, and this user's alone
/// (0700; a wider one of ours is narrowed): one another user made or can
/// enter is refused.
pub fn private(kind: Kind) -> Result<PathBuf, FolderError> {
    let path = workroom(kind).ok_or(FolderError::NoHome { kind })?;
    make_private(kind, &path, nix::unistd::getuid().as_raw())?;
    Ok(path)
}

/// `path` made (its missing parents too, 0700 as the XDG spec asks), owned
/// by `uid` and 0700.
fn make_private(kind: Kind, path: &Path, uid: u32) -> Result<(), FolderError> {
    let make = |error| FolderError::Make { path: path.to_path_buf(), error };
    std::fs::DirBuilder::new().recursive(true).mode(PRIVATE_MODE).create(path).map_err(make)?;
    // Followed: a link the user made to a folder of their own is theirs to
    // make; where it leads is what must be ours.
    let meta = std::fs::metadata(path).map_err(make)?;
    if meta.uid() != uid {
        return Err(FolderError::NotOwn { kind, path: path.to_path_buf(), owner: meta.uid(), uid });
    }
    if meta.mode() & 0o777 != PRIVATE_MODE {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(PRIVATE_MODE)).map_err(make)?;
    }
    Ok(())
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
    fn a_private_folder_is_made_0700_with_its_parents_and_a_wider_one_is_narrowed() {
        let dir = tempfile::tempdir().unwrap();
        let uid = nix::unistd::getuid().as_raw();
        let path = dir.path().join("state/workroom");
        make_private(Kind::State, &path, uid).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), PRIVATE_MODE);
        assert_eq!(mode(&dir.path().join("state")), PRIVATE_MODE);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        make_private(Kind::State, &path, uid).unwrap();
        assert_eq!(mode(&path), PRIVATE_MODE, "an open folder of ours is closed again");
    }

    #[test]
    fn a_folder_of_another_user_is_refused_naming_it_and_the_variable_that_moves_it() {
        let dir = tempfile::tempdir().unwrap();
        let uid = nix::unistd::getuid().as_raw();
        let path = dir.path().join("workroom");
        std::fs::create_dir(&path).unwrap();
        // Another user's, as seen from a uid that is not ours.
        let error = make_private(Kind::State, &path, uid + 1).unwrap_err();
        assert!(matches!(&error, FolderError::NotOwn { owner, .. } if *owner == uid), "{error}");
        assert!(error.to_string().contains("XDG_STATE_HOME"), "{error}");
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
