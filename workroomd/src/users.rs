//! Accounts read from `/etc/passwd` and `/etc/group` text, in-process.
//!
//! The daemon is a static glibc binary, which cannot use NSS, and it must work
//! on images that have no NSS at all (busybox, alpine), so it reads the files
//! itself. The parsers take text, not paths: the daemon reads the files, the
//! rules stay pure and testable.
//!
//! Tolerance over strictness: these files are edited by hand and by image
//! builds, and one bad line must not make every account unusable. Comments,
//! blank lines, malformed lines and NIS compat lines (`+`/`-`, which name
//! accounts we cannot look up) are skipped.
//!
//! User specs follow `docker exec --user` (moby/sys/user `GetExecUser`), so a
//! `remoteUser` means the same to us as to the reference CLI.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The shell when neither the environment nor the passwd entry names one,
/// which is what login(1) does with an empty shell field.
pub const DEFAULT_SHELL: &str = "/bin/sh";

/// Home for a numeric uid that has no passwd entry (Docker's choice too).
pub const DEFAULT_HOME: &str = "/";

/// One line of `/etc/passwd`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PasswdEntry {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub gecos: String,
    pub home: String,
    /// May be empty: see [`login_shell`].
    pub shell: String,
}

/// One line of `/etc/group`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupEntry {
    pub name: String,
    pub gid: u32,
    /// Names of the supplementary members.
    pub members: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UserError {
    #[error("the user spec is empty")]
    Empty,
    #[error("no user named {0:?} in /etc/passwd")]
    UnknownUser(String),
    #[error("no group named {0:?} in /etc/group")]
    UnknownGroup(String),
}

/// A user spec resolved to what a process needs to run as that user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedUser {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups: the groups listing the user as a member, only
    /// when the spec named no group (what Docker does).
    pub groups: Vec<u32>,
    pub home: String,
    /// The passwd entry, absent for a numeric uid the image does not list.
    pub entry: Option<PasswdEntry>,
}

impl ResolvedUser {
    /// [`login_shell`] for this user.
    pub fn login_shell(&self, env_shell: Option<&str>) -> String {
        login_shell(self.entry.as_ref(), env_shell)
    }
}

/// Every well-formed entry of a passwd file, in file order.
pub fn parse_passwd(text: &str) -> Vec<PasswdEntry> {
    records(text)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            let [name, _password, uid, gid, gecos, home, shell] = fields[..] else {
                return None;
            };
            if name.is_empty() {
                return None;
            }
            Some(PasswdEntry {
                name: name.to_owned(),
                uid: uid.parse().ok()?,
                gid: gid.parse().ok()?,
                gecos: gecos.to_owned(),
                home: home.to_owned(),
                shell: shell.to_owned(),
            })
        })
        .collect()
}

/// Every well-formed entry of a group file, in file order.
pub fn parse_group(text: &str) -> Vec<GroupEntry> {
    records(text)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            let [name, _password, gid, members] = fields[..] else {
                return None;
            };
            if name.is_empty() {
                return None;
            }
            Some(GroupEntry {
                name: name.to_owned(),
                gid: gid.parse().ok()?,
                members: members
                    .split(',')
                    .map(str::trim)
                    .filter(|member| !member.is_empty())
                    .map(str::to_owned)
                    .collect(),
            })
        })
        .collect()
}

/// The lines that can hold an entry: trimmed (CRLF files exist), without
/// blanks, comments and NIS compat lines.
fn records(text: &str) -> impl Iterator<Item = &str> {
    text.lines().map(str::trim).filter(|line| !line.is_empty() && !line.starts_with(['#', '+', '-']))
}

/// Resolves `user`, `uid`, `user:group`, `uid:gid` (and mixes) the way
/// `docker exec --user` does:
/// - a numeric user is a uid: its entry if listed, else that uid with gid 0
///   and home `/`; a name must be listed;
/// - a numeric group is a gid, listed or not; a group name must be listed;
/// - without a group the gid is the entry's, and the supplementary groups are
///   those listing the user's name as a member.
///
/// The first matching line wins, as with getpwnam(3).
pub fn resolve_user(spec: &str, passwd: &[PasswdEntry], groups: &[GroupEntry]) -> Result<ResolvedUser, UserError> {
    let (user_part, group_part) = match spec.split_once(':') {
        Some((user, group)) => (user, Some(group)),
        None => (spec, None),
    };
    if user_part.is_empty() || group_part == Some("") {
        return Err(UserError::Empty);
    }
    let entry = match user_part.parse::<u32>() {
        Ok(uid) => passwd.iter().find(|entry| entry.uid == uid).cloned(),
        Err(_) => Some(
            passwd
                .iter()
                .find(|entry| entry.name == user_part)
                .cloned()
                .ok_or_else(|| UserError::UnknownUser(user_part.to_owned()))?,
        ),
    };
    let uid = match &entry {
        Some(entry) => entry.uid,
        None => user_part.parse().expect("only numeric users lack an entry"),
    };
    let (gid, supplementary) = match group_part {
        Some(group) => (resolve_group(group, groups)?, Vec::new()),
        None => {
            let gid = entry.as_ref().map_or(0, |entry| entry.gid);
            let supplementary = match &entry {
                Some(entry) => member_gids(&entry.name, groups),
                None => Vec::new(),
            };
            (gid, supplementary)
        }
    };
    Ok(ResolvedUser {
        uid,
        gid,
        groups: supplementary,
        home: entry.as_ref().map_or_else(|| DEFAULT_HOME.to_owned(), |entry| entry.home.clone()),
        entry,
    })
}

fn resolve_group(group: &str, groups: &[GroupEntry]) -> Result<u32, UserError> {
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(gid);
    }
    groups
        .iter()
        .find(|entry| entry.name == group)
        .map(|entry| entry.gid)
        .ok_or_else(|| UserError::UnknownGroup(group.to_owned()))
}

fn member_gids(name: &str, groups: &[GroupEntry]) -> Vec<u32> {
    let mut gids: Vec<u32> = groups
        .iter()
        .filter(|group| group.members.iter().any(|member| member == name))
        .map(|group| group.gid)
        .collect();
    gids.sort_unstable();
    gids.dedup();
    gids
}

/// The shell for an interactive session: a non-empty `SHELL` from the
/// session's environment wins (the user or `remoteEnv` chose it), then the
/// passwd entry's shell if non-empty, then [`DEFAULT_SHELL`]. Stock images
/// often leave `SHELL` unset, which is why the passwd entry matters.
///
/// Takes an `Option` entry (the brief had a plain entry) because a numeric
/// uid the image does not list still needs a shell.
pub fn login_shell(entry: Option<&PasswdEntry>, env_shell: Option<&str>) -> String {
    env_shell
        .filter(|shell| !shell.is_empty())
        .or_else(|| entry.map(|entry| entry.shell.as_str()))
        .filter(|shell| !shell.is_empty())
        .unwrap_or(DEFAULT_SHELL)
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "\
# comment
root:x:0:0:root:/root:/bin/bash

daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
vscode:x:1000:1000:VS Code,,,:/home/vscode:/bin/zsh\r
  nosh:x:1001:1001::/home/nosh:
broken line without fields
short:x:1:2
baduid:x:abc:0::/:/bin/sh
+nisuser:x:::::
-excluded::::::
:x:5:5::/:/bin/sh
vscode:x:2000:2000:duplicate:/elsewhere:/bin/sh
";

    const GROUP: &str = "\
root:x:0:
docker:x:998:vscode,nosh
sudo:x:27: vscode , other
vscode:x:1000:
+:::
bad:x:notanumber:vscode
";

    fn passwd() -> Vec<PasswdEntry> {
        parse_passwd(PASSWD)
    }

    fn groups() -> Vec<GroupEntry> {
        parse_group(GROUP)
    }

    #[test]
    fn passwd_parses_good_lines_and_skips_the_rest() {
        let passwd = passwd();
        let names: Vec<&str> = passwd.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["root", "daemon", "vscode", "nosh", "vscode"]);
        assert_eq!(
            passwd[2],
            PasswdEntry {
                name: "vscode".into(),
                uid: 1000,
                gid: 1000,
                gecos: "VS Code,,,".into(),
                home: "/home/vscode".into(),
                shell: "/bin/zsh".into(),
            }
        );
        assert_eq!(passwd[3].shell, "");
    }

    #[test]
    fn group_parses_members_and_skips_bad_lines() {
        let groups = groups();
        let names: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["root", "docker", "sudo", "vscode"]);
        assert_eq!(groups[1].members, ["vscode", "nosh"]);
        assert_eq!(groups[2].members, ["vscode", "other"]);
        assert!(groups[0].members.is_empty());
    }

    #[test]
    fn garbage_never_panics() {
        for text in ["", ":", "::::::", "\n\n\u{0}", "a:b:c:d:e:f:g:h", "x:x:99999999999:0:::"] {
            let _ = parse_passwd(text);
            let _ = parse_group(text);
        }
    }

    #[test]
    fn a_name_resolves_to_its_first_entry_with_member_groups() {
        let user = resolve_user("vscode", &passwd(), &groups()).unwrap();
        assert_eq!((user.uid, user.gid), (1000, 1000));
        assert_eq!(user.home, "/home/vscode");
        assert_eq!(user.groups, [27, 998]);
    }

    #[test]
    fn a_numeric_uid_uses_its_entry_when_listed() {
        let user = resolve_user("1000", &passwd(), &groups()).unwrap();
        assert_eq!(user.entry.unwrap().name, "vscode");
        assert_eq!(user.groups, [27, 998]);
    }

    #[test]
    fn an_unlisted_uid_runs_with_gid_0_and_home_root() {
        let user = resolve_user("4242", &passwd(), &groups()).unwrap();
        assert_eq!((user.uid, user.gid), (4242, 0));
        assert_eq!(user.home, "/");
        assert!(user.entry.is_none() && user.groups.is_empty());
    }

    #[test]
    fn an_unknown_name_is_an_error_naming_it() {
        let err = resolve_user("ghost", &passwd(), &groups()).unwrap_err();
        assert_eq!(err, UserError::UnknownUser("ghost".into()));
        assert_eq!(err.to_string(), "no user named \"ghost\" in /etc/passwd");
    }

    #[test]
    fn an_explicit_group_sets_the_gid_and_drops_supplementary_groups() {
        let by_name = resolve_user("vscode:docker", &passwd(), &groups()).unwrap();
        assert_eq!((by_name.uid, by_name.gid), (1000, 998));
        assert!(by_name.groups.is_empty());
        let by_gid = resolve_user("0:4321", &passwd(), &groups()).unwrap();
        assert_eq!((by_gid.uid, by_gid.gid), (0, 4321));
    }

    #[test]
    fn an_unknown_group_name_is_an_error() {
        let err = resolve_user("root:nogroup", &passwd(), &groups()).unwrap_err();
        assert_eq!(err, UserError::UnknownGroup("nogroup".into()));
    }

    #[test]
    fn empty_specs_are_refused() {
        for spec in ["", ":", ":root", "root:"] {
            assert_eq!(resolve_user(spec, &passwd(), &groups()), Err(UserError::Empty), "{spec:?}");
        }
    }

    #[test]
    fn a_non_empty_shell_variable_wins() {
        let root = &passwd()[0];
        assert_eq!(login_shell(Some(root), Some("/usr/bin/fish")), "/usr/bin/fish");
    }

    #[test]
    fn an_empty_shell_variable_falls_back_to_passwd() {
        let root = &passwd()[0];
        assert_eq!(login_shell(Some(root), Some("")), "/bin/bash");
        assert_eq!(login_shell(Some(root), None), "/bin/bash");
    }

    #[test]
    fn an_empty_passwd_shell_falls_back_to_bin_sh() {
        let nosh = &passwd()[3];
        assert_eq!(login_shell(Some(nosh), None), DEFAULT_SHELL);
        assert_eq!(login_shell(None, None), DEFAULT_SHELL);
        let unlisted = resolve_user("4242", &passwd(), &groups()).unwrap();
        assert_eq!(unlisted.login_shell(Some("")), DEFAULT_SHELL);
    }
}
