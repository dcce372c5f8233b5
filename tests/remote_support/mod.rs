//! A second, real Docker engine on this machine that cannot see the
//! workspace: `dockerd` in a mount namespace of its own whose `/tmp` is a
//! private tmpfs, with its own data root, exec root, pidfile and socket, no
//! bridge and no iptables rules, vfs storage, and the containerd it starts
//! itself. Test workspaces live under the host's `/tmp`, which it cannot
//! see, so a bind of one fails there as on an engine on another machine.
//!
//! Stopped and removed on drop: its containers, the daemon (its containerd
//! ends with it, its mounts with its namespace) and its folders.
#![allow(dead_code)]

pub mod sshd;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the second engine may take to answer `_ping`: dockerd with vfs
/// starts in about a second here; a loaded two-core machine can take ten
/// times that, and past a minute it is not coming up.
const ENGINE_READY_WAIT: Duration = Duration::from_secs(60);

/// How long `dockerd` may take to end after SIGTERM (it stops its
/// containerd first); then it is killed.
const ENGINE_STOP_WAIT: Duration = Duration::from_secs(20);

/// The interval between two `_ping`s while waiting: a readiness poll, not
/// a guess at how long it takes.
const PING_INTERVAL: Duration = Duration::from_millis(50);

/// The private `/tmp` of the engine's namespace: only what dockerd itself
/// puts there.
const PRIVATE_TMP_SIZE: &str = "64m";

pub struct SecondEngine {
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// `unix:///var/tmp/wr-e2-…/docker.sock`.
    pub host: String,
    pub socket: PathBuf,
}

impl SecondEngine {
    /// Starts it and loads `images` (from the main engine) into it; panics
    /// with the daemon's log when it does not come up.
    pub fn start(images: &[&str]) -> SecondEngine {
        // Not under /tmp: the engine's namespace hides that, and the socket
        // must be reachable from both sides. Short: unix socket paths are
        // limited to 108 bytes, and containerd's lies two folders deeper.
        let dir = tempfile::Builder::new().prefix("wr-e2-").tempdir_in("/var/tmp").expect("temp dir in /var/tmp");
        let root = dir.path();
        for sub in ["data", "exec"] {
            std::fs::create_dir(root.join(sub)).unwrap();
        }
        // Its own (empty) config file: the machine's daemon.json names a
        // data root, which dockerd refuses beside the flag.
        std::fs::write(root.join("daemon.json"), "{}").unwrap();
        let socket = root.join("docker.sock");
        let host = format!("unix://{}", socket.display());
        let log = std::fs::File::create(root.join("dockerd.log")).unwrap();
        let script = format!(
            "ip link set lo up || exit 91\n\
             mount -t tmpfs -o size={PRIVATE_TMP_SIZE},mode=1777 tmpfs /tmp || exit 90\n\
             exec dockerd --config-file {root}/daemon.json --data-root {root}/data --exec-root {root}/exec \
             --pidfile {root}/docker.pid -H {host} --bridge=none --iptables=false --ip-masq=false \
             --storage-driver=vfs",
            root = root.display()
        );
        let child = Command::new("unshare")
            // LEAD NOTE: its own network namespace too. In the host's, this
            // dockerd (--bridge=none) deleted the main engine's docker0 and
            // broke every other container start on the machine (seen
            // 00:58 UTC). Its containers get only lo; reach them by exec.
            .args(["--net", "--mount", "--propagation", "private", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("run unshare (util-linux) to start a second dockerd");
        let mut engine = SecondEngine { dir, child: Some(child), host, socket };
        engine.wait_ready();
        for image in images {
            engine.load(image);
        }
        engine
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir().join("dockerd.log")).unwrap_or_default()
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + ENGINE_READY_WAIT;
        loop {
            if crate::common::engine_pings(&self.socket) {
                return;
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("the second dockerd ended ({status}) before it answered:\n{}", self.log());
            }
            if Instant::now() >= deadline {
                panic!("the second dockerd did not answer within {ENGINE_READY_WAIT:?}:\n{}", self.log());
            }
            std::thread::sleep(PING_INTERVAL);
        }
    }

    /// `docker save IMAGE | docker -H <this> load`.
    fn load(&self, image: &str) {
        let mut save =
            Command::new("docker").args(["save", image]).stdout(Stdio::piped()).spawn().expect("run docker save");
        let out = Command::new("docker")
            .args(["-H", &self.host, "load", "-q"])
            .stdin(save.stdout.take().unwrap())
            .output()
            .expect("run docker load");
        let saved = save.wait().unwrap();
        assert!(saved.success() && out.status.success(), "load {image}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// `docker -H <this> ARGS`.
    pub fn docker(&self, args: &[&str]) -> std::process::Output {
        Command::new("docker").args(["-H", &self.host]).args(args).output().expect("run docker")
    }

    pub fn docker_ok(&self, args: &[&str]) -> String {
        let out = self.docker(args);
        assert!(out.status.success(), "docker {args:?} on the second engine: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Names of its volumes.
    /// Its volumes but the daemon volume, which is the engine's (kept for
    /// every room of its daemon, like the anchor's image) and no room's.
    pub fn volumes(&self) -> Vec<String> {
        let daemon = workroom::room::daemon_volume::PREFIX;
        self.docker_ok(&["volume", "ls", "-q"]).lines().filter(|v| !v.starts_with(daemon)).map(str::to_string).collect()
    }

    /// Ids of its containers, running or not.
    pub fn containers(&self) -> Vec<String> {
        self.docker_ok(&["ps", "-aq"]).lines().map(str::to_string).collect()
    }
}

impl Drop for SecondEngine {
    fn drop(&mut self) {
        // Containers first, so no shim outlives the daemon.
        let ids = self.docker(&["ps", "-aq"]);
        for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
            let _ = self.docker(&["rm", "-f", "-v", id]);
        }
        if let Some(child) = self.child.take() {
            crate::common::stop_engine(child, ENGINE_STOP_WAIT);
        }
        // Its mounts went with its namespace; vfs layers are plain folders,
        // some read-only to their owner, which root removes anyway.
        let _ = Command::new("rm").arg("-rf").arg("--one-file-system").arg(self.dir.path()).status();
    }
}
