//! Shared by the integration tests: workspaces in temporary folders whose
//! rooms carry the `workroom.test` label, made by the real `workroom` binary
//! against the real engine, and removed on drop.
#![allow(dead_code)]

pub mod claude;
pub mod engine_proxy;
pub mod face;
pub mod ssh_agent;

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
        std::fs::write(dir.path().join(".devcontainer.json"), labelled(config)).unwrap();
        std::fs::write(dir.path().join(".workroom.toml"), "peer_messaging = false\n").unwrap();
        Workspace { dir, peer: false, env: Vec::new() }
    }

    /// Replaces `.workroom.toml`; `peer` must match what it says.
    pub fn with_settings(mut self, toml: &str, peer: bool) -> Workspace {
        std::fs::write(self.path().join(".workroom.toml"), toml).unwrap();
        self.peer = peer;
        self
    }

    /// A workspace whose config is `.devcontainer/devcontainer.json`, with
    /// `files` (name, content) beside it (a Dockerfile, say).
    pub fn with_devcontainer_folder(config: serde_json::Value, files: &[(&str, &str)]) -> Workspace {
        let dir = tempfile::Builder::new().prefix("wr-test-").tempdir().expect("temp dir");
        let folder = dir.path().join(".devcontainer");
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("devcontainer.json"), labelled(config)).unwrap();
        for (name, content) in files {
            std::fs::write(folder.join(name), content).unwrap();
        }
        std::fs::write(dir.path().join(".workroom.toml"), "peer_messaging = false\n").unwrap();
        Workspace { dir, peer: false, env: Vec::new() }
    }

    /// Lets a non-root remote user enter and write the workspace: the tests
    /// run as root, so the temp folder is root's and 0700, where a real
    /// workspace is the host user's (and `updateRemoteUserUID` maps it).
    pub fn open_to_room_users(&self) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(self.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    }

    /// A name unique to this workspace, for volumes, labels and containers a
    /// test makes beside the room (lower-case: image references need it).
    pub fn unique(&self) -> String {
        self.dir.path().file_name().unwrap().to_string_lossy().to_lowercase()
    }

    /// `/workspaces/<basename>`, the default workspace folder in the room.
    pub fn remote_folder(&self) -> String {
        format!("/workspaces/{}", self.dir.path().file_name().unwrap().to_string_lossy())
    }

    /// A file of the workspace (which the room sees bind-mounted); empty if absent.
    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path().join(name)).unwrap_or_default()
    }

    /// The tag a Dockerfile config's image gets (`workroom-build/<room>`).
    pub fn build_tag(&self) -> String {
        format!("workroom-build/{}", self.room_name().trim_start_matches("workroom-"))
    }

    /// Ids of every container, running or not, whose reference-CLI label
    /// names this workspace: the rooms made for it, whatever their name.
    pub fn containers(&self) -> Vec<String> {
        let filter = format!("label=devcontainer.local_folder={}", self.folder());
        docker_ok(&["ps", "-aq", "--no-trunc", "--filter", &filter]).lines().map(str::to_string).collect()
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
        output_within(self.command(args), None)
    }

    /// `workroom ARGS --workspace-folder <this>` with `input` on its stdin.
    pub fn workroom_with_stdin(&self, args: &[&str], input: &[u8]) -> Output {
        output_within(self.command(args), Some(input))
    }

    /// The command `workroom` runs, to adjust (environment) before running
    /// it with [`output_within`].
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(workroom_bin());
        let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
        cmd.args(&args[..split]).args(["--workspace-folder", &self.folder()]).args(&args[split..]);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
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
        // Every room of this folder, whatever its name: a test that changed
        // the settings (peers fold into the name) must not leak the room.
        let filter = format!("label=devcontainer.local_folder={}", self.folder());
        let ids = docker(&["ps", "-aq", "--filter", &filter]);
        for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
            remove_container(id);
        }
        remove_container(&self.room_name());
        // Files the room wrote into the bind-mounted workspace may be root's;
        // TempDir removes them as we run as root in CI.
    }
}

/// The config with the test label added to its `runArgs`.
pub fn labelled(mut config: serde_json::Value) -> String {
    let run_args = config.as_object_mut().unwrap().entry("runArgs").or_insert_with(|| serde_json::json!([]));
    run_args
        .as_array_mut()
        .unwrap()
        .extend([serde_json::json!("--label"), serde_json::json!(format!("{TEST_LABEL}=1"))]);
    serde_json::to_string_pretty(&config).unwrap()
}

/// How long one `workroom` or `docker` command of a test may take before the
/// test fails instead of hanging: an image build and eight racing `up`s on a
/// loaded two-core machine take well under a minute.
pub const COMMAND_GUARD: std::time::Duration = std::time::Duration::from_secs(300);

/// Runs `cmd` with `input` on its stdin (none: an empty stdin) and collects
/// its output; kills it and fails the test past [`COMMAND_GUARD`].
pub fn output_within(cmd: Command, input: Option<&[u8]>) -> Output {
    output_within_guard(cmd, input, COMMAND_GUARD)
}

/// [`output_within`] with a guard of the caller's.
pub fn output_within_guard(mut cmd: Command, input: Option<&[u8]>, guard: std::time::Duration) -> Output {
    use std::io::Write;
    use std::process::Stdio;
    cmd.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    if let (Some(mut stdin), Some(input)) = (child.stdin.take(), input) {
        let input = input.to_vec();
        // A thread, so a command that does not read its stdin cannot block us.
        std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
    }
    finish_within(child, &format!("{cmd:?}"), guard)
}

/// Waits for a spawned `child`'s end and collects its output; kills it and
/// fails the test, naming `what`, past `guard`.
pub fn finish_within(child: std::process::Child, what: &str, guard: std::time::Duration) -> Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(guard) {
        Ok(out) => out.expect("collect the output"),
        Err(_) => {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
            panic!("{what} did not finish within {guard:?}");
        }
    }
}

/// How often [`wait_until`] looks again: what it waits on (a process, a
/// port, a file) is a look of a millisecond or so, and 50 ms between looks
/// costs nothing while answering soon after the fact.
pub const WAIT_LOOK_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// Looks with `look` until it gives a value or `within` has passed: the
/// value, or `None` once a look at or after the deadline gave none.
pub fn wait_until<T>(within: std::time::Duration, mut look: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(found) = look() {
            return Some(found);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(WAIT_LOOK_EVERY);
    }
}

/// [`wait_until`] for a condition: fails the test naming `what` past
/// `guard`. For a state the test can only observe, not be told of (a file
/// a hook writes in the room).
pub fn wait_for(what: &str, guard: std::time::Duration, mut done: impl FnMut() -> bool) {
    assert!(wait_until(guard, || done().then_some(())).is_some(), "{what}: not within {guard:?}");
}

/// `workroom ARGS` with no workspace flag (`list`, `stop NAME`).
pub fn run_workroom(args: &[&str]) -> Output {
    let mut cmd = Command::new(workroom_bin());
    cmd.args(args);
    output_within(cmd, None)
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

/// An image name as Docker reports a local image's: Podman reports the
/// same image fully qualified (`localhost/workroom-fixture/busybox:1`,
/// `docker.io/workroom-build/x:latest`).
pub fn image_name(reported: &str) -> String {
    let name = reported.strip_prefix("localhost/").or_else(|| reported.strip_prefix("docker.io/")).unwrap_or(reported);
    name.strip_suffix(":latest").unwrap_or(name).to_string()
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

/// The reference CLI unpacked from `../shared/peers` (beside the repository
/// in CI; `WORKROOM_REFERENCE_PEERS` names another folder, as a worktree
/// needs); removed with the returned folder.
pub fn reference_cli() -> (tempfile::TempDir, PathBuf) {
    let peers = std::env::var_os("WORKROOM_REFERENCE_PEERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("../shared/peers"));
    let tgz = std::fs::read_dir(&peers)
        .unwrap_or_else(|e| panic!("{}: {e} (the reference CLI is expected there)", peers.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("devcontainers-cli-") && name.ends_with(".tgz")
        })
        .unwrap_or_else(|| panic!("no devcontainers-cli-*.tgz in {}", peers.display()));
    let dir = tempfile::Builder::new().prefix("wr-test-refcli-").tempdir().unwrap();
    let mut untar = Command::new("tar");
    untar.arg("-xzf").arg(&tgz).arg("-C").arg(dir.path());
    let out = output_within(untar, None);
    assert!(out.status.success(), "unpack {}: {}", tgz.display(), stderr(&out));
    let js = dir.path().join("package/devcontainer.js");
    assert!(js.is_file(), "{} holds no package/devcontainer.js", tgz.display());
    (dir, js)
}

/// How long a test's HTTP GET waits for the whole answer (a forwarded port
/// crosses the daemon link; seconds on a loaded machine).
pub const HTTP_READ_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// `GET path` from 127.0.0.1:port over HTTP/1.0: the whole answer (status
/// line, headers and body), empty when nothing listens there yet.
pub fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return String::new() };
    s.set_read_timeout(Some(HTTP_READ_WAIT)).unwrap();
    let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body
}

/// One `GET /_ping` over an engine's unix socket: true on the engine's `OK`.
pub fn engine_pings(socket: &std::path::Path) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::os::unix::net::UnixStream::connect(socket) else { return false };
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    if stream.write_all(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n").is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.") && answer.contains(" 200 ") && answer.ends_with("OK")
}

/// Ends an engine the test started: SIGTERM, then SIGKILL if it is still
/// there after `within`, looking every [`WAIT_LOOK_EVERY`].
pub fn stop_engine(mut child: std::process::Child, within: std::time::Duration) {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    if wait_until(within, || child.try_wait().map_or(Some(()), |s| s.map(drop))).is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
}
