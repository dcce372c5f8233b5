//! Shared by the integration tests: workspaces in temporary folders whose
//! rooms carry the `workroom.test` label, made by the real `workroom` binary
//! against the real engine, and removed on drop.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const BUSYBOX: &str = "workroom-fixture/busybox:1";
pub const DEBIAN: &str = "workroom-fixture/debian:bookworm";
pub const DEBIAN_USER: &str = "workroom-fixture/debian-user:bookworm";

/// The label every container a test makes carries, so leftovers can be found
/// (`docker ps -a --filter label=workroom.test`).
pub const TEST_LABEL: &str = "workroom.test";

pub fn workroom_bin() -> &'static str {
    env!("CARGO_BIN_EXE_workroom")
}

/// A workspace folder with a devcontainer.json; its room is removed on drop.
/// Its `.workroom.toml` turns peer messaging off unless the test says
/// otherwise ([`Workspace::with_settings`]), so tests never touch the user's
/// peer anchor, volume or registry.
pub struct Workspace {
    pub dir: tempfile::TempDir,
    /// Whether its room takes part in peer messaging (folded into its name).
    pub peer: bool,
    /// Extra environment for every `workroom` run (e.g. `WORKROOM_SCOPE`).
    pub env: Vec<(String, String)>,
}

impl Workspace {
    /// `config` is the JSON object's body without the braces' test label:
    /// the label is added to `runArgs` here.
    pub fn new(config: serde_json::Value) -> Workspace {
        let dir = tempfile::Builder::new().prefix("wr-test-").tempdir().expect("temp dir");
        let mut config = config;
        let run_args = config.as_object_mut().unwrap().entry("runArgs").or_insert_with(|| serde_json::json!([]));
        run_args
            .as_array_mut()
            .unwrap()
            .extend([serde_json::json!("--label"), serde_json::json!(format!("{TEST_LABEL}=1"))]);
        std::fs::write(dir.path().join(".devcontainer.json"), serde_json::to_string_pretty(&config).unwrap()).unwrap();
        std::fs::write(dir.path().join(".workroom.toml"), "peer_messaging = false\n").unwrap();
        Workspace { dir, peer: false, env: Vec::new() }
    }

    /// Replaces `.workroom.toml`; `peer` must match what it says.
    pub fn with_settings(mut self, toml: &str, peer: bool) -> Workspace {
        std::fs::write(self.path().join(".workroom.toml"), toml).unwrap();
        self.peer = peer;
        self
    }

    pub fn image(image: &str) -> Workspace {
        Workspace::new(serde_json::json!({ "image": image }))
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn folder(&self) -> String {
        self.dir.path().display().to_string()
    }

    /// Runs `workroom ARGS --workspace-folder <this>` (the flag goes after
    /// the subcommand's own arguments but before `--`).
    pub fn workroom(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(workroom_bin());
        let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
        cmd.args(&args[..split]).args(["--workspace-folder", &self.folder()]).args(&args[split..]);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd.output().expect("run workroom")
    }

    pub fn up(&self) -> Output {
        let out = self.workroom(&["up"]);
        assert!(out.status.success(), "workroom up failed: {}", String::from_utf8_lossy(&out.stderr));
        out
    }

    /// The room's name, as `workroom up --json` would find it.
    pub fn room_name(&self) -> String {
        let loaded = workroom::config::load(&workroom::config::LoadRequest::new(self.path(), None)).unwrap();
        workroom::plan::identity::room_name(&loaded.workspace.local_folder, &loaded.config_path, self.peer)
    }

    pub fn exec(&self, cmd: &[&str]) -> Output {
        let mut args = vec!["exec", "--"];
        args.extend_from_slice(cmd);
        self.workroom(&args)
    }

    pub fn exec_ok(&self, cmd: &[&str]) -> String {
        let out = self.exec(cmd);
        assert!(out.status.success(), "exec {cmd:?} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        remove_container(&self.room_name());
        // Files the room wrote into the bind-mounted workspace may be root's;
        // TempDir removes them as we run as root in CI.
    }
}

pub fn remove_container(name: &str) {
    let _ = Command::new("docker").args(["rm", "-f", "-v", name]).output();
}

pub fn docker(args: &[&str]) -> Output {
    Command::new("docker").args(args).output().expect("run docker")
}

pub fn docker_ok(args: &[&str]) -> String {
    let out = docker(args);
    assert!(out.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A current-thread runtime for tests that drive the library directly.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}
