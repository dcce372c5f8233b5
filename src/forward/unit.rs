//! `workroom watch --install`: the systemd user unit that runs the watcher
//! (`forward::watcher`) at each login, so a host reboot gives the rooms the
//! engine restarts their forwards with nobody typing anything.
//!
//! The unit goes where systemd's user manager reads units of the user's
//! own, `$XDG_CONFIG_HOME/systemd/user/` (`~/.config/systemd/user/`), and
//! names this binary by its absolute path. When a user manager answers,
//! `systemctl --user` loads, enables and starts it; when none does (a
//! container, a host without systemd, no login session), the file is
//! written anyway and the caller is told the command to run where one
//! does. `--uninstall` reverses both.
//!
//! What a login's environment holds that the user manager's lacks is
//! carried into the unit as `Environment=` lines ([`CARRIED`]): the engine
//! the watcher must watch, and the folders the forwarders' state files are
//! in, which `up` typed in a shell must find the same.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The unit's name, in `systemctl --user` commands.
pub const UNIT_NAME: &str = "workroom-watch.service";

/// The variables a login shell may set that the user manager would not
/// give the watcher, carried into the unit when set at install: the engine
/// (`DOCKER_HOST`, a docker context and its config and TLS files), the
/// folders (a state folder elsewhere holds the forwarders' pid files: a
/// watcher reading another would start a second forwarder beside `up`'s),
/// and this install's scope. Not `SSH_AUTH_SOCK`: an agent's socket is
/// made anew at each login, and one written into the unit would be stale
/// at the next; the watcher's forwarders offer the agent of the user
/// manager's environment (`systemctl --user import-environment
/// SSH_AUTH_SOCK`, or an agent run as a user unit, puts it there).
pub const CARRIED: [&str; 10] = [
    "DOCKER_HOST",
    "DOCKER_CONTEXT",
    "DOCKER_CONFIG",
    "DOCKER_CERT_PATH",
    "DOCKER_TLS_VERIFY",
    "XDG_STATE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    crate::plan::peers::SCOPE_ENV,
];

/// Why the unit cannot be installed or removed.
#[derive(Debug, thiserror::Error)]
pub enum UnitError {
    #[error("no folder for systemd user units: neither XDG_CONFIG_HOME nor HOME is set")]
    NoFolder,
    #[error("cannot find the workroom executable to name in the unit: {0}")]
    NoExecutable(std::io::Error),
    #[error("{path} was replaced or removed since this workroom started; run `workroom watch --install` with the workroom to keep")]
    ExecutableGone { path: PathBuf },
    #[error("{name} holds a line break, which a unit's `Environment=` line cannot carry")]
    Unwritable { name: String },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cannot remove {path}: {source}")]
    Remove { path: PathBuf, source: std::io::Error },
    #[error("`systemctl --user {args}` failed: {why}")]
    Systemctl { args: String, why: String },
}

/// The unit's text: the watcher at `exe` (absolute), with `env` (name,
/// value) as its environment.
pub fn text(exe: &Path, env: &[(String, String)]) -> Result<String, UnitError> {
    let mut environment = String::new();
    for (name, value) in env {
        if name.contains('\n') || value.contains('\n') {
            return Err(UnitError::Unwritable { name: name.clone() });
        }
        environment.push_str(&format!("Environment={}\n", quoted(&format!("{name}={value}"), false)));
    }
    Ok(format!(
        "# Written by `workroom watch --install`; `workroom watch --uninstall` removes it.\n\
         [Unit]\n\
         Description=workroom watch: forwards ports and credentials to the rooms the engine starts (after a reboot)\n\
         \n\
         [Service]\n\
         Type=simple\n\
         ExecStart={} watch\n\
         Restart=on-failure\n\
         RestartSec=5\n\
         # The forwarders it starts outlive it, as those `up` starts outlive `up`:\n\
         # stopping or upgrading the watcher must not end the rooms' forwards.\n\
         KillMode=process\n\
         {environment}\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
        quoted(&exe.display().to_string(), true)
    ))
}

/// A word of a unit file, double-quoted as systemd reads it: `\` and `"`
/// escaped, `%` (a specifier) doubled, and in a command line `$` (a
/// variable) doubled too, so a path with spaces or any of these is the
/// path.
fn quoted(word: &str, command: bool) -> String {
    let mut out = String::from("\"");
    for c in word.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '%' => out.push_str("%%"),
            '$' if command => out.push_str("$$"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Where the unit goes in the environment `env` gives:
/// `$XDG_CONFIG_HOME/systemd/user/workroom-watch.service`.
pub fn path_in(env: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    crate::folders::base_in(crate::folders::Kind::Config, env).map(|c| c.join("systemd/user").join(UNIT_NAME))
}

/// The [`CARRIED`] variables `env` sets (non-empty), in that order.
pub fn carried_in(env: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    CARRIED.iter().filter_map(|name| env(name).filter(|v| !v.is_empty()).map(|v| (name.to_string(), v))).collect()
}

/// What `--install` did.
#[derive(Debug)]
pub enum Installed {
    /// Written, and the user manager runs it now and at each login.
    Enabled { unit: PathBuf },
    /// Written; no user manager answered (why): the commands are the
    /// caller's to give.
    Written { unit: PathBuf, why: String },
}

/// What `--uninstall` did.
#[derive(Debug)]
pub enum Removed {
    /// Stopped, disabled and removed.
    Disabled { unit: PathBuf },
    /// Removed; no user manager answered (why).
    Removed { unit: PathBuf, why: String },
    /// There was no unit.
    Absent { unit: PathBuf },
}

/// Writes the unit for this binary and this environment, and has the user
/// manager run it when one answers.
pub fn install() -> Result<Installed, UnitError> {
    let unit = path_in(|k| std::env::var_os(k)).ok_or(UnitError::NoFolder)?;
    let exe = std::env::current_exe().map_err(UnitError::NoExecutable)?;
    // A binary replaced under a running process reads as "PATH (deleted)".
    if !exe.is_file() {
        return Err(UnitError::ExecutableGone { path: exe });
    }
    let text = text(&exe, &carried_in(|k| std::env::var(k).ok()))?;
    let before = std::fs::read_to_string(&unit).ok();
    let write = |source| UnitError::Write { path: unit.clone(), source };
    if let Some(folder) = unit.parent() {
        std::fs::create_dir_all(folder).map_err(write)?;
    }
    use std::os::unix::fs::PermissionsExt as _;
    workroomd::atomic::write_with_permissions(&unit, text.as_bytes(), std::fs::Permissions::from_mode(0o644))
        .map_err(write)?;
    if let Err(e) = manager_answers() {
        return Ok(Installed::Written { unit, why: e.reason() });
    }
    systemctl(&["enable", "--now", UNIT_NAME])?;
    // A watcher of an earlier unit (another binary's path) runs on until
    // restarted; its forwarders are not its children (KillMode=process).
    if before.is_some_and(|b| b != text) {
        systemctl(&["restart", UNIT_NAME])?;
    }
    Ok(Installed::Enabled { unit })
}

/// Stops and disables the unit when a user manager answers, and removes
/// its file.
pub fn uninstall() -> Result<Removed, UnitError> {
    let unit = path_in(|k| std::env::var_os(k)).ok_or(UnitError::NoFolder)?;
    if !unit.exists() {
        return Ok(Removed::Absent { unit });
    }
    let manager = manager_answers();
    if manager.is_ok() {
        systemctl(&["disable", "--now", UNIT_NAME])?;
    }
    std::fs::remove_file(&unit).map_err(|source| UnitError::Remove { path: unit.clone(), source })?;
    match manager {
        Ok(()) => {
            systemctl(&["daemon-reload"])?;
            Ok(Removed::Disabled { unit })
        }
        Err(e) => Ok(Removed::Removed { unit, why: e.reason() }),
    }
}

/// Whether a systemd user manager answers: `daemon-reload` (which it needs
/// anyway to see a new or changed unit) works. The error is its first line.
fn manager_answers() -> Result<(), UnitError> {
    systemctl(&["daemon-reload"])
}

impl UnitError {
    /// Why, in a few words: systemctl's own first line when it ran.
    fn reason(&self) -> String {
        match self {
            UnitError::Systemctl { why, .. } => why.clone(),
            other => other.to_string(),
        }
    }
}

fn systemctl(args: &[&str]) -> Result<(), UnitError> {
    let failed = |why: String| UnitError::Systemctl { args: args.join(" "), why };
    let out = Command::new("systemctl").arg("--user").args(args).stdin(std::process::Stdio::null()).output().map_err(
        |e| match e.kind() {
            std::io::ErrorKind::NotFound => failed("systemctl is not installed".to_string()),
            _ => failed(e.to_string()),
        },
    )?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("no output");
    Err(failed(format!("{line} ({})", out.status)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_runs_this_binary_by_its_absolute_path_restarts_it_on_failure_and_starts_at_login() {
        let text = text(Path::new("/opt/workroom/bin/workroom"), &[]).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for want in [
            "[Unit]",
            "[Service]",
            "ExecStart=\"/opt/workroom/bin/workroom\" watch",
            "Restart=on-failure",
            "KillMode=process",
            "[Install]",
            "WantedBy=default.target",
        ] {
            assert!(lines.contains(&want), "`{want}` missing in:\n{text}");
        }
        assert!(!text.contains("Environment="), "{text}");
        // Sections in order, every setting under its section.
        let at = |l: &str| lines.iter().position(|x| *x == l).unwrap();
        assert!(at("[Unit]") < at("[Service]") && at("[Service]") < at("[Install]"));
        assert!(at("Restart=on-failure") > at("[Service]") && at("Restart=on-failure") < at("[Install]"));
    }

    #[test]
    fn a_path_with_spaces_quotes_and_specifiers_is_quoted_as_systemd_reads_it() {
        let text = text(Path::new("/home/a b/100%/$x/\"q\"\\/workroom"), &[]).unwrap();
        assert!(text.contains(r#"ExecStart="/home/a b/100%%/$$x/\"q\"\\/workroom" watch"#), "{text}");
    }

    #[test]
    fn the_engine_and_the_folders_of_the_install_are_carried_into_the_unit() {
        let env = |k: &str| match k {
            "DOCKER_HOST" => Some("unix:///run/user/1000/docker.sock".to_string()),
            "XDG_STATE_HOME" => Some("/data/state".to_string()),
            "XDG_CACHE_HOME" => Some(String::new()),
            "SSH_AUTH_SOCK" => Some("/tmp/ssh-x/agent.1".to_string()),
            "PATH" => Some("/usr/bin".to_string()),
            _ => None,
        };
        let carried = carried_in(env);
        assert_eq!(
            carried,
            vec![
                ("DOCKER_HOST".to_string(), "unix:///run/user/1000/docker.sock".to_string()),
                ("XDG_STATE_HOME".to_string(), "/data/state".to_string()),
            ]
        );
        let text = text(Path::new("/usr/bin/workroom"), &carried).unwrap();
        assert!(text.contains("Environment=\"DOCKER_HOST=unix:///run/user/1000/docker.sock\"\n"), "{text}");
        assert!(text.contains("Environment=\"XDG_STATE_HOME=/data/state\"\n"), "{text}");
        assert!(!text.contains("SSH_AUTH_SOCK"), "an agent socket of this login would be stale at the next");
        let environment = text.find("Environment=").unwrap();
        assert!(environment > text.find("[Service]").unwrap() && environment < text.find("[Install]").unwrap());
    }

    #[test]
    fn a_variable_with_a_line_break_is_refused_by_name() {
        let err = text(Path::new("/usr/bin/workroom"), &[("DOCKER_HOST".into(), "a\nb".into())]).unwrap_err();
        assert_eq!(err.to_string(), "DOCKER_HOST holds a line break, which a unit's `Environment=` line cannot carry");
    }

    #[test]
    fn the_unit_goes_where_the_user_manager_reads_the_users_own_units() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| OsString::from(v))
        };
        assert_eq!(
            path_in(env(&[("HOME", "/home/a")])),
            Some(PathBuf::from("/home/a/.config/systemd/user/workroom-watch.service"))
        );
        assert_eq!(
            path_in(env(&[("HOME", "/home/a"), ("XDG_CONFIG_HOME", "/cfg")])),
            Some(PathBuf::from("/cfg/systemd/user/workroom-watch.service"))
        );
        assert_eq!(path_in(env(&[])), None);
    }
}
