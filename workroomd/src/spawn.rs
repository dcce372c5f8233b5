//! Starting a program as a user of the image, with no NSS: the user is
//! resolved from `/etc/passwd` and `/etc/group` read in-process, and the
//! child drops to it between fork and exec.

use std::collections::BTreeMap;
use workroomd::users::{self, ResolvedUser, UserError};

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("user {spec}")]
    User {
        spec: String,
        #[source]
        source: UserError,
    },
    #[error("an empty command")]
    EmptyCommand,
    #[error("the working folder {0} does not exist in the room")]
    NoFolder(String),
    #[error("no shell to run: tried {}; none is an executable file in the room", tried.join(", "))]
    NoShell { tried: Vec<String> },
}

/// Reads the user database and resolves `spec` (`name`, `uid`, `a:b`).
pub fn resolve(spec: &str) -> Result<ResolvedUser, SpawnError> {
    let passwd = users::parse_passwd(&std::fs::read_to_string("/etc/passwd").unwrap_or_default());
    let groups = users::parse_group(&std::fs::read_to_string("/etc/group").unwrap_or_default());
    users::resolve_user(spec, &passwd, &groups).map_err(|source| SpawnError::User { spec: spec.to_string(), source })
}

/// The shell a pane runs, and a note when it is not the first choice.
#[derive(Debug, PartialEq, Eq)]
pub struct Shell {
    pub path: String,
    pub note: Option<String>,
}

/// The shells tried, in order: the user's passwd shell, `$SHELL`, then
/// `/bin/bash` and `/bin/sh` (stock images often set no `SHELL`, and a
/// passwd entry may name a shell the image does not have). `runs` says
/// whether a path is an executable file in the room.
pub fn pick_shell(
    user: Option<&ResolvedUser>,
    env_shell: Option<&str>,
    runs: impl Fn(&str) -> bool,
) -> Result<Shell, SpawnError> {
    let passwd = user.and_then(|u| u.entry.as_ref()).filter(|e| !e.shell.is_empty());
    let mut tried: Vec<(String, String)> = Vec::new();
    if let Some(entry) = passwd {
        tried.push((entry.shell.clone(), format!("the passwd shell of {}", entry.name)));
    }
    if let Some(shell) = env_shell.filter(|s| !s.is_empty()) {
        tried.push((shell.to_string(), "$SHELL".into()));
    }
    tried.push(("/bin/bash".into(), String::new()));
    tried.push(("/bin/sh".into(), String::new()));
    let mut seen: Vec<&str> = Vec::new();
    for (i, (path, _)) in tried.iter().enumerate() {
        if seen.contains(&path.as_str()) {
            continue;
        }
        seen.push(path);
        if runs(path) {
            // Falling back past a shell someone named deserves a word; past
            // the built-in list (bash, then sh) it is just the default.
            let note = tried[..i].iter().find(|(_, why)| !why.is_empty()).map(|(first, why)| {
                format!("[workroom: {first} ({why}) is not an executable file in the room; using {path}]")
            });
            return Ok(Shell { path: path.clone(), note });
        }
    }
    Err(SpawnError::NoShell { tried: seen.into_iter().map(str::to_string).collect() })
}

/// Whether `path` is a file someone may execute.
pub fn executable(path: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A command for `argv` as `user`, with the daemon's environment (the
/// container's, so `containerEnv` holds) plus the user's `HOME`, `USER`,
/// `LOGNAME`, `SHELL`, then `env` on top, in `cwd` (default: home), in a
/// session of its own (so its whole process group can be signalled).
pub fn command(
    argv: &[String],
    user: Option<&ResolvedUser>,
    env: &BTreeMap<String, String>,
    cwd: Option<&str>,
    login_shell: bool,
) -> Result<tokio::process::Command, SpawnError> {
    let (program, args) = argv.split_first().ok_or(SpawnError::EmptyCommand)?;
    let shell = user.map(|u| u.login_shell(env.get("SHELL").map(String::as_str)));
    let mut cmd = if login_shell {
        // `exec "$@"` keeps argv as given (no re-quoting) while the login
        // shell reads the profile first.
        let shell = shell.clone().unwrap_or_else(|| "/bin/sh".into());
        let mut c = tokio::process::Command::new(&shell);
        c.args(["-lc", "exec \"$@\"", "sh"]).arg(program).args(args);
        c
    } else {
        let mut c = tokio::process::Command::new(program);
        c.args(args);
        c
    };
    if let Some(u) = user {
        cmd.env("HOME", &u.home);
        if let Some(entry) = &u.entry {
            cmd.env("USER", &entry.name).env("LOGNAME", &entry.name);
        }
        if let Some(shell) = &shell {
            cmd.env("SHELL", shell);
        }
    }
    cmd.envs(env);
    let cwd = cwd.map(str::to_string).or_else(|| user.map(|u| u.home.clone())).unwrap_or_else(|| "/".into());
    if !std::path::Path::new(&cwd).is_dir() {
        return Err(SpawnError::NoFolder(cwd));
    }
    cmd.current_dir(&cwd);
    let ids: Option<(libc::uid_t, libc::gid_t, Vec<libc::gid_t>)> =
        user.map(|u| (u.uid, u.gid, u.groups.iter().map(|g| *g as libc::gid_t).collect()));
    // Every child starts above the daemon in the OOM killer's order (`oom`).
    let oom_score = crate::oom::child_line();
    // SAFETY: between fork and exec only async-signal-safe calls are made
    // (open/write/close of the OOM score, setsid, setgroups, setgid,
    // setuid); the group list and the score's line are allocated before.
    unsafe {
        cmd.pre_exec(move || {
            // As root still: the file is root's while the child is not dumpable.
            if let Some(line) = &oom_score {
                crate::oom::raise_own(line);
            }
            libc_check(libc::setsid())?;
            if let Some((uid, gid, groups)) = &ids {
                libc_check(libc::setgroups(groups.len(), groups.as_ptr()))?;
                libc_check(libc::setgid(*gid))?;
                libc_check(libc::setuid(*uid))?;
            }
            Ok(())
        });
    }
    Ok(cmd)
}

fn libc_check(rc: libc::c_int) -> std::io::Result<()> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(shell: &str) -> ResolvedUser {
        let passwd = users::parse_passwd(&format!("dev:x:1000:1000::/home/dev:{shell}\n"));
        users::resolve_user("dev", &passwd, &[]).unwrap()
    }

    #[test]
    fn a_missing_passwd_shell_falls_back_to_sh_with_a_note() {
        let shell = pick_shell(Some(&dev("/bin/nonexistent")), None, |p| p == "/bin/sh").unwrap();
        assert_eq!(shell.path, "/bin/sh");
        let note = shell.note.unwrap();
        assert!(
            note.contains("/bin/nonexistent (the passwd shell of dev)") && note.contains("using /bin/sh"),
            "{note}"
        );
    }

    #[test]
    fn shells_are_tried_passwd_then_dollar_shell_then_bash_then_sh() {
        let all = |_: &str| true;
        assert_eq!(pick_shell(Some(&dev("/bin/zsh")), Some("/bin/fish"), all).unwrap().path, "/bin/zsh");
        let no_zsh = |p: &str| p != "/bin/zsh";
        assert_eq!(pick_shell(Some(&dev("/bin/zsh")), Some("/bin/fish"), no_zsh).unwrap().path, "/bin/fish");
        let only_bash = |p: &str| p == "/bin/bash";
        let picked = pick_shell(Some(&dev("")), None, only_bash).unwrap();
        assert_eq!(picked, Shell { path: "/bin/bash".into(), note: None }, "an empty passwd shell is no fallback");
    }

    #[test]
    fn with_no_shell_at_all_the_error_names_what_was_tried() {
        let err = pick_shell(Some(&dev("/bin/nonexistent")), Some("/bin/sh"), |_| false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no shell to run: tried /bin/nonexistent, /bin/sh, /bin/bash; none is an executable file in the room"
        );
    }
}
