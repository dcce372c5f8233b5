//! Starting a program as a user of the image, with no NSS: the user is
//! resolved from `/etc/passwd` and `/etc/group` read in-process, and the
//! child drops to it between fork and exec.

use std::collections::BTreeMap;
use workroomd::users::{self, ResolvedUser};

/// Reads the user database and resolves `spec` (`name`, `uid`, `a:b`).
pub fn resolve(spec: &str) -> Result<ResolvedUser, String> {
    let passwd = users::parse_passwd(&std::fs::read_to_string("/etc/passwd").unwrap_or_default());
    let groups = users::parse_group(&std::fs::read_to_string("/etc/group").unwrap_or_default());
    users::resolve_user(spec, &passwd, &groups).map_err(|e| e.to_string())
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
) -> Result<tokio::process::Command, String> {
    let (program, args) = argv.split_first().ok_or("an empty command")?;
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
        return Err(format!("the working folder {cwd} does not exist in the room"));
    }
    cmd.current_dir(&cwd);
    let ids: Option<(libc::uid_t, libc::gid_t, Vec<libc::gid_t>)> =
        user.map(|u| (u.uid, u.gid, u.groups.iter().map(|g| *g as libc::gid_t).collect()));
    // SAFETY: between fork and exec only async-signal-safe calls are made
    // (setsid, setgroups, setgid, setuid); the group list is allocated before.
    unsafe {
        cmd.pre_exec(move || {
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
