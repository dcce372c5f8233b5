//! Shared by the peer messaging tests: one test's own install on the shared
//! engine. Each test runs under its own `WORKROOM_SCOPE`, so its anchors,
//! socket volumes and registry folders are its own, never a user's or
//! another test's, and it removes everything carrying its scope label.
#![allow(dead_code)]

use crate::common::*;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Between polls of a condition that has no event to await.
pub const POLL: Duration = Duration::from_millis(100);

pub const AGENT: &str = include_str!("../../fixtures/agent/agent.py");

/// One test's own install: scope label, anchors, volumes, registry folders.
pub struct PeerScope {
    pub scope: String,
    /// The root under which each group keeps its registry (`peer_registry`).
    pub registry: tempfile::TempDir,
    /// `XDG_CACHE_HOME` of its `workroom` runs: what `up` keeps about its
    /// rooms (ready records, warnings) goes with it.
    pub cache: tempfile::TempDir,
}

impl PeerScope {
    pub fn new(tag: &str) -> PeerScope {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let scope = format!("t{tag}{}{nanos:x}", std::process::id());
        let registry = tempfile::Builder::new().prefix("wr-peers-reg-").tempdir().unwrap();
        let cache = tempfile::Builder::new().prefix("wr-peers-cache-").tempdir().unwrap();
        PeerScope { scope, registry, cache }
    }

    /// The anchor of `group` for sessions of `uid`.
    pub fn anchor(&self, group: &str, uid: u32) -> String {
        workroom::plan::peers::names(Some(&self.scope), group, uid).anchor
    }

    /// The socket volume of `group` for sessions of `uid`.
    pub fn volume(&self, group: &str, uid: u32) -> String {
        workroom::plan::peers::names(Some(&self.scope), group, uid).volume
    }

    /// The host registry folder of `group` for sessions of `uid`.
    pub fn registry_of(&self, group: &str, uid: u32) -> PathBuf {
        workroom::plan::peers::registry_folder(self.registry.path(), group, uid)
    }

    /// A workspace whose settings turn peers on in the default group.
    pub fn workspace(&self, config: serde_json::Value) -> Workspace {
        self.workspace_with(config, "")
    }

    /// A workspace with peers on and `extra` lines in its `.workroom.toml`
    /// (`peer_group = "a"`, a `[forward]` table).
    pub fn workspace_with(&self, config: serde_json::Value, extra: &str) -> Workspace {
        let settings =
            format!("peer_messaging = true\npeer_registry = {:?}\n{extra}", self.registry.path().display().to_string());
        let mut ws = Workspace::new(config).with_settings(&settings, true);
        ws.env.extend(self.env());
        std::fs::write(ws.path().join("agent.py"), AGENT).unwrap();
        ws
    }

    /// What every `workroom` run of this scope is given.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("WORKROOM_SCOPE".into(), self.scope.clone()),
            ("XDG_CACHE_HOME".into(), self.cache.path().display().to_string()),
        ]
    }

    /// `workroom ARGS` with this scope and no workspace flag.
    pub fn workroom(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = std::process::Command::new(workroom_bin());
        cmd.args(args).envs(self.env());
        output_within(cmd, None)
    }
}

impl Drop for PeerScope {
    fn drop(&mut self) {
        let filter = format!("label=workroom.scope={}", self.scope);
        let ids = docker(&["ps", "-aq", "--filter", &filter]);
        for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
            remove_container(id);
        }
        let volumes = docker(&["volume", "ls", "-q", "--filter", &filter]);
        for v in String::from_utf8_lossy(&volumes.stdout).split_whitespace() {
            let _ = docker(&["volume", "rm", "-f", v]);
        }
    }
}

/// The name of a workspace's room in peer group `group`.
pub fn room_in(ws: &Workspace, group: &str) -> String {
    let loaded = workroom::config::load(&workroom::config::LoadRequest::new(ws.path(), None)).unwrap();
    workroom::plan::identity::room_name_in(&loaded.workspace.local_folder, &loaded.config_path, Some(group))
}

/// `docker exec` in a room (by container name), as `user`; its output.
pub fn docker_exec(room: &str, user: &str, cmd: &[&str]) -> std::process::Output {
    let mut args = vec!["exec", "-u", user, room];
    args.extend_from_slice(cmd);
    docker(&args)
}

/// Starts `sleep` as `user` in `room`, detached; its pid as the room's PID
/// namespace (the group's) numbers it.
pub fn sleeper(room: &str, user: &str) -> String {
    let out = docker_exec(room, user, &["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let pid = stdout(&out).trim().to_string();
    assert!(pid.parse::<u32>().is_ok(), "{pid:?}");
    pid
}

/// Waits for `check` to hold, polling, or fails naming `what`.
pub fn eventually(what: &str, wait: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + wait;
    while !check() {
        assert!(Instant::now() < deadline, "timed out after {wait:?} waiting for {what}");
        std::thread::sleep(POLL);
    }
}

pub fn inspect(name: &str, format: &str) -> String {
    docker_ok(&["inspect", "-f", format, name])
}

/// Whether a room's `HostConfig.PidMode` is a PID namespace of its own, not
/// an anchor's: Docker says `""`, Podman `private`.
pub fn own_pid_namespace(mode: &str) -> bool {
    mode.is_empty() || mode == "private"
}
