//! What workroom needs of Podman's engine (`podman system service`, its
//! Docker-compatible API), pinned where Docker and Podman differ: an image
//! import, and the init every room runs under.
//!
//! The import test runs against the engine the tests are given
//! (`DOCKER_HOST`): Docker in the main run, Podman in `.ci/podman`'s. The
//! catatonit test starts a Podman of its own that lacks catatonit.

mod common;

use common::*;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use workroom::engine::Engine;

/// Removes an image a test made, by the id the engine gave, on drop.
struct ImageGuard(String);

impl Drop for ImageGuard {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            let _ = docker(&["rmi", "-f", &self.0]);
        }
    }
}

/// One file, `hello`, as a root filesystem tar.
fn one_file_rootfs() -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(6);
    header.set_mode(0o644);
    header.set_cksum();
    tar.append_data(&mut header, "hello", &b"hello\n"[..]).unwrap();
    tar.into_inner().unwrap()
}

#[test]
fn podman_named_every_import_latest_with_one_mangled_label_so_an_import_is_named_as_asked_with_a_label_per_change() {
    let repo = format!("workroom-test-import-{}", std::process::id());
    let changes = vec![format!("LABEL {TEST_LABEL}=1"), "LABEL a=1".to_string(), "LABEL b=2".to_string()];
    let id = runtime().block_on(async {
        let engine = Engine::connect().await.expect("engine");
        engine.import_rootfs(one_file_rootfs(), &repo, "t1", changes).await.expect("import")
    });
    let _guard = ImageGuard(id.clone());
    assert!(id.starts_with("sha256:"), "the engine gave no image id: {id:?}");

    let name = format!("{repo}:t1");
    let inspect = docker(&["image", "inspect", "--format", "{{.Id}} {{json .Config.Labels}}", &name]);
    let tags = docker_ok(&["image", "inspect", "--format", "{{json .RepoTags}}", &id]);
    assert!(inspect.status.success(), "no image named {name}; the import is tagged {tags}");
    let (found, labels) = stdout(&inspect).trim().split_once(' ').map(|(a, b)| (a.to_string(), b.to_string())).unwrap();
    assert_eq!(found, id, "{name} names another image");
    let labels: serde_json::Value = serde_json::from_str(&labels).unwrap();
    assert_eq!(labels, serde_json::json!({ TEST_LABEL: "1", "a": "1", "b": "2" }), "the import's labels");
    // Only the name asked for: no `latest` beside it.
    assert!(!tags.contains(":latest"), "{tags}");
}

/// How long Podman's service may take to answer `_ping`: under a second
/// here; a loaded two-core machine can take ten times that.
const PODMAN_READY_WAIT: Duration = Duration::from_secs(60);
/// How long it may take to end after SIGTERM; then it is killed.
const PODMAN_STOP_WAIT: Duration = Duration::from_secs(20);
/// Between two `_ping`s while it starts: a readiness poll.
const PING_INTERVAL: Duration = Duration::from_millis(50);

/// `podman system service` in a mount namespace of its own, with its own
/// storage (vfs: plain folders, no mounts to undo) and its own lock memory
/// (a private `/dev/shm`, so it never shares lock numbers with the
/// machine's podman), where `/usr/libexec/podman`, catatonit's home, is
/// empty: a Podman host without the catatonit package, as Debian's podman
/// (which only recommends it) installs. Stopped and removed on drop.
struct PodmanWithoutCatatonit {
    dir: tempfile::TempDir,
    child: Option<Child>,
    host: String,
    socket: PathBuf,
}

impl PodmanWithoutCatatonit {
    /// Starts it with `image` (from the tests' engine) loaded.
    fn start(image: &str) -> PodmanWithoutCatatonit {
        let dir = tempfile::Builder::new().prefix("wr-podman-").tempdir_in("/var/tmp").expect("temp dir");
        let root = dir.path();
        let saved = root.join("image.tar");
        docker_ok(&["save", "-o", &saved.display().to_string(), image]);
        let socket = root.join("podman.sock");
        let host = format!("unix://{}", socket.display());
        let podman = format!(
            "podman --root {root}/storage --runroot {root}/run --tmpdir {root}/tmp --storage-driver vfs",
            root = root.display()
        );
        let script = format!(
            "mount -t tmpfs tmpfs /dev/shm || exit 90\n\
             mount -t tmpfs tmpfs /usr/libexec/podman || exit 91\n\
             {podman} load -q -i {saved} >/dev/null || exit 92\n\
             exec {podman} system service --time=0 {host}",
            saved = saved.display()
        );
        let log = std::fs::File::create(root.join("podman.log")).unwrap();
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("run unshare (util-linux) to start podman");
        let mut podman = PodmanWithoutCatatonit { dir, child: Some(child), host, socket };
        podman.wait_ready();
        podman
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("podman.log")).unwrap_or_default()
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + PODMAN_READY_WAIT;
        loop {
            if engine_pings(&self.socket) {
                return;
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("podman ended ({status}) before it answered (is podman installed?):\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "podman did not answer within {PODMAN_READY_WAIT:?}:\n{}", self.log());
            std::thread::sleep(PING_INTERVAL);
        }
    }

    /// `docker -H <this> ARGS`.
    fn docker_ok(&self, args: &[&str]) -> String {
        let out = Command::new("docker").args(["-H", &self.host]).args(args).output().expect("run docker");
        assert!(out.status.success(), "docker {args:?} on the test's podman: {}", stderr(&out));
        stdout(&out).trim().to_string()
    }
}

impl Drop for PodmanWithoutCatatonit {
    fn drop(&mut self) {
        let listed = Command::new("docker").args(["-H", &self.host, "ps", "-aq"]).output();
        let ids = listed.map(|o| stdout(&o)).unwrap_or_default();
        for id in ids.split_whitespace() {
            let _ = Command::new("docker").args(["-H", &self.host, "rm", "-f", "-v", id]).output();
        }
        if let Some(child) = self.child.take() {
            stop_engine(child, PODMAN_STOP_WAIT);
        }
        // vfs layers are plain folders, some read-only to their owner,
        // which root removes anyway.
        let _ = Command::new("rm").arg("-rf").arg("--one-file-system").arg(self.dir.path()).status();
    }
}

#[test]
fn up_on_a_podman_without_catatonit_says_which_package_to_install_in_one_line_and_leaves_no_container() {
    let podman = PodmanWithoutCatatonit::start(BUSYBOX);
    let mut ws = Workspace::image(BUSYBOX);
    let state = tempfile::Builder::new().prefix("wr-test-state-").tempdir().unwrap();
    ws.env.push(("DOCKER_HOST".into(), podman.host.clone()));
    ws.env.push(("XDG_STATE_HOME".into(), state.path().join("state").display().to_string()));
    ws.env.push(("XDG_CACHE_HOME".into(), state.path().join("cache").display().to_string()));

    let out = ws.workroom(&["up"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "up on a Podman without catatonit: {err}");
    assert!(err.contains("install the catatonit package"), "{err}");
    assert!(err.contains("container-init binary not found"), "the engine's own words are kept: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert_eq!(podman.docker_ok(&["ps", "-aq"]), "", "a refused up leaves no container");
}

/// The volume rooms get on an engine that cannot see the workspace, which
/// `.ci/podman` needs on a local engine: `tests/remote.rs` makes one on a
/// second dockerd only.
struct VolumeGuard(String);

impl Drop for VolumeGuard {
    fn drop(&mut self) {
        let _ = docker(&["volume", "rm", "-f", &self.0]);
    }
}

#[test]
fn a_room_with_its_workspace_in_a_volume_works_on_the_uploaded_files_and_down_volumes_removes_the_volume() {
    let ws = Workspace::new(serde_json::json!({ "image": BUSYBOX, "postCreateCommand": "ls > /tmp/hook-saw" }));
    std::fs::write(ws.path().join("hello.txt"), "from the host\n").unwrap();
    let volume = format!("workroom-ws-{}", ws.room_name().trim_start_matches("workroom-"));
    let _guard = VolumeGuard(volume.clone());

    let out = ws.workroom(&["up", "--workspace", "volume"]);
    assert!(out.status.success(), "up --workspace volume: {}", stderr(&out));
    assert!(stderr(&out).contains(&format!("uploading the workspace into {volume}")), "{}", stderr(&out));
    // Not a bind: the room's copy, which the host's edits do not reach.
    std::fs::write(ws.path().join("hello.txt"), "changed on the host\n").unwrap();
    assert_eq!(ws.exec_ok(&["cat", "hello.txt"]), "from the host\n");
    assert!(ws.exec_ok(&["cat", "/tmp/hook-saw"]).lines().any(|l| l == "hello.txt"), "the hook ran on the upload");
    assert_eq!(ws.exec_ok(&["pwd"]).trim(), ws.remote_folder());

    let out = ws.workroom(&["down"]);
    assert!(out.status.success(), "down: {}", stderr(&out));
    assert!(stderr(&out).contains(&format!("kept the workspace volume {volume}")), "{}", stderr(&out));
    assert!(docker(&["volume", "inspect", &volume]).status.success(), "down keeps {volume}");
    let out = ws.workroom(&["up", "--workspace", "volume"]);
    assert!(out.status.success(), "up again: {}", stderr(&out));
    assert!(stderr(&out).contains(&format!("the workspace volume {volume} exists and is kept")), "{}", stderr(&out));
    assert_eq!(ws.exec_ok(&["cat", "hello.txt"]), "from the host\n", "up overwrote the volume");
    let out = ws.workroom(&["down", "--volumes"]);
    assert!(out.status.success(), "down --volumes: {}", stderr(&out));
    assert!(!docker(&["volume", "inspect", &volume]).status.success(), "down --volumes removes {volume}");
    assert_eq!(ws.containers(), Vec::<String>::new());
}
