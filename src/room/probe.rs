//! `userEnvProbe`: the environment the remote user's shell would set up
//! (profile, `.bashrc`), which tools installed there (nvm, pyenv, a PATH
//! entry) rely on. As the reference CLI does: the user's shell from passwd
//! runs `cat /proc/self/environ` as a login and/or interactive shell,
//! between markers (an rc file may print), and the result sits under
//! `remoteEnv`. Done once per container start; the result is kept in the
//! host's ready record so `exec` needs no daemon round trip for it.

use crate::config::UserEnvProbe;
use crate::link::RoomLink;
use crate::notices::Notices;
use std::collections::BTreeMap;
use std::time::Duration;
use workroomd::proto::{Event, RunRequest};

/// A profile that waits on something (a prompt, a network mount) must not
/// hold `up` forever; the probe is then skipped with a warning.
const PROBE_DEADLINE: Duration = Duration::from_secs(10);

/// Printed around the environment, so anything an rc file prints is told apart.
const MARKER: &str = "--workroom-env-3a1f--";

/// Variables that describe the probe's own shell, not the user's setup.
const SHELL_STATE: &[&str] = &["PWD", "OLDPWD", "SHLVL", "_"];

/// The shell's flags for a probe mode; `None` for `none`.
pub fn flags(mode: UserEnvProbe) -> Option<&'static str> {
    match mode {
        UserEnvProbe::None => None,
        UserEnvProbe::LoginShell => Some("-lc"),
        UserEnvProbe::LoginInteractiveShell => Some("-lic"),
        UserEnvProbe::InteractiveShell => Some("-ic"),
    }
}

/// The environment between the markers of the probe's output.
pub fn parse(output: &[u8]) -> Option<BTreeMap<String, String>> {
    let text = String::from_utf8_lossy(output);
    let start = text.find(MARKER)? + MARKER.len();
    let end = start + text[start..].find(MARKER)?;
    Some(
        text[start..end]
            .split('\0')
            .filter_map(|kv| kv.split_once('='))
            .filter(|(k, _)| !k.is_empty() && !SHELL_STATE.contains(k))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

/// The reference's `mergePaths`: a login shell's profile (Debian's
/// `/etc/profile`) resets `PATH`, dropping what the image put there (a
/// feature's `/usr/local/go/bin`); the container's entries missing from the
/// probed `PATH` go back in, each after the one it followed in the
/// container's, and `sbin` folders only for root.
pub fn merge_paths(shell: &str, container: &str, root: bool) -> String {
    let mut result: Vec<&str> = shell.split(':').collect();
    let mut insert_at = 0;
    for entry in container.split(':') {
        match result.iter().position(|e| *e == entry) {
            Some(i) => insert_at = i + 1,
            None => {
                let sbin = entry.ends_with("/sbin") || entry.contains("/sbin/");
                if root || !sbin {
                    result.insert(insert_at, entry);
                    insert_at += 1;
                }
            }
        }
    }
    result.join(":")
}

/// The probed environment with the container's `PATH` merged back in.
pub fn with_container_path(
    mut probed: BTreeMap<String, String>,
    container_path: Option<&String>,
    user: &str,
) -> BTreeMap<String, String> {
    if let (Some(shell), Some(container)) = (probed.get("PATH"), container_path) {
        let merged = merge_paths(shell, container, user == "root" || user == "0");
        probed.insert("PATH".into(), merged);
    }
    probed
}

/// A probe that did not finish in its time: a profile that waits on
/// something, or an engine that stopped carrying the link; the caller tells
/// which.
#[derive(Debug, thiserror::Error)]
#[error("userEnvProbe: `{shell} {flags}` did not finish in {}s; using remoteEnv alone", PROBE_DEADLINE.as_secs())]
pub struct ProbeLate {
    shell: String,
    flags: &'static str,
}

/// Runs the probe in the room as `user`; `None` (with a warning) when it
/// gave nothing: the room still works, with `remoteEnv` alone.
pub async fn probe(
    link: &RoomLink,
    user: &str,
    mode: UserEnvProbe,
    cwd: &str,
    say: &Notices,
) -> Result<Option<BTreeMap<String, String>>, ProbeLate> {
    let Some(flags) = flags(mode) else { return Ok(None) };
    let shell = login_shell(link, user).await;
    let script = format!("printf '%s' '{MARKER}'; cat /proc/self/environ; printf '%s' '{MARKER}'");
    let request = RunRequest {
        argv: vec![shell.clone(), flags.into(), script],
        user: Some(user.to_string()),
        cwd: Some(cwd.to_string()),
        ..Default::default()
    };
    let run = async {
        let handle = link.run(request).await.ok()?;
        let _ = handle.send_eof().await;
        let mut out = Vec::new();
        while let Some(event) = handle.recv().await {
            match event {
                Event::Data(bytes) => out.extend_from_slice(&bytes),
                Event::Eof | Event::Reset(_) => break,
                _ => {}
            }
        }
        parse(&out)
    };
    match tokio::time::timeout(PROBE_DEADLINE, run).await {
        Ok(Some(env)) => Ok(Some(env)),
        Ok(None) => {
            say.warn(format!("userEnvProbe: `{shell} {flags}` printed no environment; using remoteEnv alone"));
            Ok(None)
        }
        Err(_) => Err(ProbeLate { shell, flags }),
    }
}

/// The user's shell from the room's passwd (no `$SHELL` there to trust).
async fn login_shell(link: &RoomLink, user: &str) -> String {
    let entries = match link.link().request(workroomd::proto::Request::Users).await {
        Ok(workroomd::proto::Response::Users { users, .. }) => users,
        _ => Vec::new(),
    };
    let entry = entries.iter().find(|e| e.name == user || e.uid.to_string() == user);
    workroomd::users::login_shell(entry, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_that_resets_path_keeps_what_the_image_added() {
        // Debian's /etc/profile for a user; the image (a feature) put /opt/x/bin first.
        let shell = "/usr/local/bin:/usr/bin:/bin:/usr/games";
        let container = "/opt/x/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
        assert_eq!(merge_paths(shell, container, false), "/opt/x/bin:/usr/local/bin:/usr/bin:/bin:/usr/games");
        assert_eq!(
            merge_paths(shell, container, true),
            "/opt/x/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/games"
        );
        let probed = BTreeMap::from([("PATH".to_string(), shell.to_string())]);
        let merged = with_container_path(probed, Some(&container.to_string()), "dev");
        assert!(merged["PATH"].starts_with("/opt/x/bin:"));
    }

    #[test]
    fn the_environment_is_read_between_the_markers_without_the_shells_own_state() {
        let out = format!("welcome from .bashrc\n{MARKER}PATH=/opt/x:/usr/bin\0PWD=/w\0SHLVL=2\0A=b=c\0{MARKER}bye");
        let env = parse(out.as_bytes()).unwrap();
        assert_eq!(env.get("PATH").map(String::as_str), Some("/opt/x:/usr/bin"));
        assert_eq!(env.get("A").map(String::as_str), Some("b=c"));
        assert!(!env.contains_key("PWD") && !env.contains_key("SHLVL"));
    }

    #[test]
    fn output_without_both_markers_is_no_environment() {
        assert_eq!(parse(b"no markers"), None);
        assert_eq!(parse(format!("{MARKER}PATH=/x").as_bytes()), None);
    }

    #[test]
    fn each_mode_has_the_reference_flags() {
        assert_eq!(flags(UserEnvProbe::None), None);
        assert_eq!(flags(UserEnvProbe::LoginShell), Some("-lc"));
        assert_eq!(flags(UserEnvProbe::LoginInteractiveShell), Some("-lic"));
        assert_eq!(flags(UserEnvProbe::InteractiveShell), Some("-ic"));
    }
}
