//! The reference CLI's record of which lifecycle hooks ran, kept beside
//! ours so that `devcontainer up` on a room of ours does not run what we
//! ran, nor we what it ran.
//!
//! devcontainers/cli (`runLifecycleHooks`) keeps one file per hook in the
//! remote user's `~/.devcontainer/`: `.onCreateCommandMarker`,
//! `.updateContentCommandMarker` and `.postCreateCommandMarker` hold the
//! container's `Created` time, `.postStartCommandMarker` its
//! `State.StartedAt`. It writes a file, as the remote user, just before it
//! runs the hook, and runs the hook only when the file says another time.
//! We write them at the same moment (after our claim, before the hook) and
//! read them before claiming. Both are best effort: a user with no writable
//! home, or an image with no `sh`, only loses the sharing.

use crate::config::Hook;
use crate::link::RoomLink;
use std::collections::BTreeMap;
use workroomd::proto::RunRequest;

/// The hooks whose marker files are read, by property name.
const HOOKS: [Hook; 4] = [Hook::OnCreate, Hook::UpdateContent, Hook::PostCreate, Hook::PostStart];

/// What the reference's marker files say, by hook property.
pub type Markers = BTreeMap<String, String>;

/// Whether the reference ran (began) `hook` for this container or start.
pub fn ran(markers: &Markers, hook: Hook, time: &str) -> bool {
    !time.is_empty() && markers.get(hook.property()).map(String::as_str) == Some(time)
}

fn run_as(user: &str, script: String, args: Vec<String>) -> RunRequest {
    let argv = ["/bin/sh".to_string(), "-c".to_string(), script, "sh".to_string()].into_iter().chain(args).collect();
    RunRequest { argv, user: Some(user.to_string()), cwd: Some("/".into()), ..Default::default() }
}

/// Reads the marker files of `user` (one command for all four).
pub async fn read(link: &RoomLink, user: &str) -> Markers {
    let script =
        r#"for h in "$@"; do printf '%s=%s\n' "$h" "$(cat "$HOME/.devcontainer/.${h}Marker" 2>/dev/null)"; done"#;
    let args = HOOKS.iter().map(|h| h.property().to_string()).collect();
    match super::nested::capture(link, run_as(user, script.to_string(), args)).await {
        Ok(out) => parse(&out.stdout),
        Err(_) => Markers::new(),
    }
}

fn parse(out: &str) -> Markers {
    out.lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Writes `hook`'s marker file as `user`, holding `time`, as the reference
/// does before it runs the hook.
pub async fn write(link: &RoomLink, user: &str, hook: Hook, time: &str, say: &crate::notices::Notices) {
    if time.is_empty() {
        return;
    }
    let script = r#"mkdir -p "$HOME/.devcontainer" && echo "$2" > "$HOME/.devcontainer/.$1Marker""#;
    let request = run_as(user, script.to_string(), vec![hook.property().to_string(), time.to_string()]);
    if let Ok(out) = super::nested::capture(link, request).await {
        if out.code != Some(0) {
            say.warn(format!(
                "could not record {} for the reference CLI in {user}'s ~/.devcontainer: {}",
                hook.property(),
                out.stderr.trim()
            ));
        }
    }
}

/// Removes `hook`'s marker file, so the reference runs a hook that failed.
pub async fn forget(link: &RoomLink, user: &str, hook: Hook) {
    let script = r#"rm -f "$HOME/.devcontainer/.$1Marker""#;
    let _ = super::nested::capture(link, run_as(user, script.to_string(), vec![hook.property().to_string()])).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_counts_only_for_the_container_time_it_holds() {
        let markers = parse("onCreateCommand=2026-12-01T10:00:00.1Z\npostCreateCommand=\npostStartCommand=b\n");
        assert!(ran(&markers, Hook::OnCreate, "2026-12-01T10:00:00.1Z"));
        assert!(!ran(&markers, Hook::OnCreate, "2026-12-02T10:00:00.1Z"), "another container's");
        assert!(!ran(&markers, Hook::PostCreate, ""), "an empty file or time is no record");
        assert!(!ran(&markers, Hook::UpdateContent, "2026-12-01T10:00:00.1Z"), "no file");
        assert!(ran(&markers, Hook::PostStart, "b"));
    }
}
