//! A real OpenSSH server on 127.0.0.1 at a free port, started by the test
//! with its own host key and config, key authentication only, whose
//! sessions reach the engine named at start (`SetEnv DOCKER_HOST`), or no
//! docker at all (`SetEnv PATH`). Killed and removed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long sshd may take to accept connections: it binds at once; a
/// loaded machine can take a few seconds to run it at all.
const SSHD_READY_WAIT: Duration = Duration::from_secs(30);

/// The interval between two connection attempts while waiting.
const CONNECT_INTERVAL: Duration = Duration::from_millis(50);

pub struct Sshd {
    dir: tempfile::TempDir,
    child: Child,
    pub port: u16,
}

/// What the far side's sessions get.
pub enum FarSide<'a> {
    /// `DOCKER_HOST` set to this engine.
    Engine(&'a str),
    /// A `PATH` without docker.
    NoDocker,
}

impl Sshd {
    pub fn start(far: FarSide) -> Sshd {
        let dir = tempfile::Builder::new().prefix("wr-sshd-").tempdir().unwrap();
        let d = dir.path();
        for key in ["host_key", "client_key", "other_key"] {
            let out = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C", key, "-f"])
                .arg(d.join(key))
                .output()
                .expect("run ssh-keygen (openssh-client)");
            assert!(out.status.success(), "ssh-keygen: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::fs::copy(d.join("client_key.pub"), d.join("authorized_keys")).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let env = match far {
            FarSide::Engine(host) => format!("SetEnv DOCKER_HOST={host}"),
            FarSide::NoDocker => "SetEnv PATH=/nonexistent".to_string(),
        };
        // StrictModes off: the folder is under /tmp, which is world-writable.
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\n\
             AuthorizedKeysFile {d}/authorized_keys\nPubkeyAuthentication yes\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n{env}\n",
            d = d.display()
        );
        std::fs::write(d.join("sshd_config"), config).unwrap();
        let host_pub = std::fs::read_to_string(d.join("host_key.pub")).unwrap();
        let mut fields = host_pub.split_whitespace();
        let (kind, key) = (fields.next().unwrap(), fields.next().unwrap());
        std::fs::write(d.join("known_hosts"), format!("[127.0.0.1]:{port} {kind} {key}\n")).unwrap();
        for (name, key) in [("ssh_config", "client_key"), ("ssh_config_other_key", "other_key")] {
            let client = format!(
                "Host *\n  IdentityFile {d}/{key}\n  IdentitiesOnly yes\n  IdentityAgent none\n  \
                 UserKnownHostsFile {d}/known_hosts\n  StrictHostKeyChecking yes\n  BatchMode yes\n",
                d = d.display()
            );
            std::fs::write(d.join(name), client).unwrap();
        }
        // The privilege separation folder Debian's service would make.
        std::fs::create_dir_all("/run/sshd").unwrap();
        let log = std::fs::File::create(d.join("sshd.log")).unwrap();
        let child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("run /usr/sbin/sshd (openssh-server; fixtures/images/build.sh installs it)");
        let mut sshd = Sshd { dir, child, port };
        sshd.wait_ready();
        sshd
    }

    fn wait_ready(&mut self) {
        use std::io::Read;
        let deadline = Instant::now() + SSHD_READY_WAIT;
        loop {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let mut banner = [0u8; 8];
                if s.read_exact(&mut banner).is_ok() && banner.starts_with(b"SSH-2.0") {
                    return;
                }
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("sshd ended ({status}):\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "sshd did not listen within {SSHD_READY_WAIT:?}:\n{}", self.log());
            std::thread::sleep(CONNECT_INTERVAL);
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `DOCKER_HOST` for this server, as root.
    pub fn docker_host(&self) -> String {
        format!("ssh://root@127.0.0.1:{}", self.port)
    }

    /// `WORKROOM_SSH_COMMAND` with the key sshd accepts, or (`authorized`
    /// false) a key it does not know.
    pub fn ssh_command(&self, authorized: bool) -> String {
        let config: PathBuf = self.dir.path().join(if authorized { "ssh_config" } else { "ssh_config_other_key" });
        format!("ssh -F {}", config.display())
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
