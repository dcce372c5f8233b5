//! A real registry for the feature tests: Debian's `docker-registry`
//! (distribution 2.8) on 127.0.0.1 at a free port, with its own config and
//! storage in a temporary folder, optionally behind htpasswd Basic auth
//! or over TLS with a certificate signed by a throwaway authority the host
//! does not trust; killed on drop. Fixture features are published into it with the
//! reference CLI's `features publish`, so our fetch reads what a real
//! publisher wrote. Its access log counts the requests we make.
#![allow(dead_code)]

use crate::common::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A registry binds its port in well under a second; on a loaded machine
/// it may take a few.
const READY_WAIT: Duration = Duration::from_secs(30);

/// The namespace fixture features are published under.
pub const NAMESPACE: &str = "wr/features";

pub struct Registry {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    auth: Option<(String, String)>,
    tls: bool,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Registry {
    pub fn start() -> Registry {
        Registry::start_with(None, false)
    }

    /// A registry that refuses anonymous requests (htpasswd, bcrypt).
    pub fn with_basic_auth(user: &str, password: &str) -> Registry {
        Registry::start_with(Some((user.to_string(), password.to_string())), false)
    }

    /// A registry over HTTPS at `127.0.0.1:PORT`, its certificate signed by
    /// an authority made for it (`ca_file`), which nothing trusts unless told.
    pub fn with_untrusted_tls() -> Registry {
        Registry::start_with(None, true)
    }

    fn start_with(auth: Option<(String, String)>, tls: bool) -> Registry {
        let dir = tempfile::Builder::new().prefix("wr-test-registry-").tempdir().unwrap();
        let port = free_port();
        let mut config = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: workroom-test\n",
            dir.path().join("data").display()
        );
        if let Some((user, password)) = &auth {
            let out =
                Command::new("htpasswd").args(["-Bbn", user, password]).output().expect("htpasswd (apache2-utils)");
            assert!(out.status.success(), "htpasswd: {}", stderr(&out));
            std::fs::write(dir.path().join("htpasswd"), &out.stdout).unwrap();
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: workroom-test\n    path: {}\n",
                dir.path().join("htpasswd").display()
            ));
        }
        if tls {
            make_certificates(dir.path());
            config.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                dir.path().join("registry.crt").display(),
                dir.path().join("registry.key").display()
            ));
        }
        std::fs::write(dir.path().join("config.yml"), config).unwrap();
        let log = std::fs::File::create(dir.path().join("access.log")).unwrap();
        let mut cmd = Command::new("docker-registry");
        cmd.arg("serve")
            .arg(dir.path().join("config.yml"))
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log));
        // A test run killed outright (a CI step cut short) runs no Drop: the
        // registry then ends with the test's thread instead of outliving it.
        // SAFETY: prctl is async-signal-safe and touches no memory of ours.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM).map_err(std::io::Error::from)
            });
        }
        let child = cmd.spawn().expect("docker-registry (the Debian package) must be installed");
        let registry = Registry { child: Some(child), port, dir, auth, tls };
        registry.wait_ready();
        registry
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + READY_WAIT;
        loop {
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = s.write_all(b"GET /v2/ HTTP/1.0\r\n\r\n");
                let mut buf = [0u8; 12];
                if s.read_exact(&mut buf).is_ok() && buf.starts_with(b"HTTP/1.") {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "the registry on port {} did not answer: {}", self.port, self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `localhost:PORT`: the reference and we speak plain HTTP to it; with
    /// TLS `127.0.0.1:PORT`, which both speak HTTPS to.
    pub fn host(&self) -> String {
        let name = if self.tls { "127.0.0.1" } else { "localhost" };
        format!("{name}:{}", self.port)
    }

    /// The authority that signed a TLS registry's certificate (PEM).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// A fixture feature's reference in this registry.
    pub fn feature(&self, id: &str, tag: &str) -> String {
        format!("{}/{NAMESPACE}/{id}:{tag}", self.host())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default()
    }

    /// Requests the registry answered so far (its access log's lines), readiness probes aside.
    pub fn requests(&self) -> usize {
        self.log().lines().filter(|l| l.contains(" /v2/") && l.contains("HTTP/1.1\"")).count()
    }

    /// Publishes fixtures/features/src with the reference CLI, its
    /// `localhost:REGISTRY` references pointing here.
    pub fn publish_fixtures(&self) {
        let src = self.dir.path().join("src");
        copy_dir(&repo_root().join("fixtures/features/src"), &src);
        for entry in std::fs::read_dir(&src).unwrap() {
            let json = entry.unwrap().path().join("devcontainer-feature.json");
            let text = std::fs::read_to_string(&json).unwrap();
            std::fs::write(&json, text.replace("localhost:REGISTRY", &self.host())).unwrap();
        }
        let mut node = Command::new("node");
        node.arg(reference_cli()).args(["features", "publish", "-r", &self.host(), "-n", NAMESPACE]).arg(&src);
        if self.tls {
            node.env("NODE_EXTRA_CA_CERTS", self.ca_file());
        }
        if let Some((user, password)) = &self.auth {
            node.env("DEVCONTAINERS_OCI_AUTH", format!("{}|{user}|{password}", self.host()));
        }
        let out = output_within(node, None);
        assert!(out.status.success(), "features publish: {}\n{}", stdout(&out), stderr(&out));
    }

    /// A docker config folder whose `auths` hold this registry's credentials.
    pub fn docker_config(&self) -> tempfile::TempDir {
        let (user, password) = self.auth.clone().expect("a registry with auth");
        self.docker_config_with(&user, &password)
    }

    /// A docker config folder whose `auths` hold `user` and `password` for this registry.
    pub fn docker_config_with(&self, user: &str, password: &str) -> tempfile::TempDir {
        let dir = tempfile::Builder::new().prefix("wr-test-dockercfg-").tempdir().unwrap();
        let auth = base64(format!("{user}:{password}").as_bytes());
        std::fs::write(
            dir.path().join("config.json"),
            format!(r#"{{"auths":{{"{}":{{"auth":"{auth}"}}}}}}"#, self.host()),
        )
        .unwrap();
        dir
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A throwaway certificate authority (`ca.crt`) and, signed by it, a
/// certificate for 127.0.0.1 (`registry.crt`, `registry.key`) in `dir`.
fn make_certificates(dir: &Path) {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", stderr(&out));
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=workroom test authority",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "registry.key",
        "-out",
        "registry.csr",
    ]);
    std::fs::write(
        dir.join("registry.ext"),
        "basicConstraints=critical,CA:FALSE\nsubjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "registry.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "registry.ext",
        "-out",
        "registry.crt",
    ]);
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The reference CLI's entry point, unpacked once per test binary from
/// `shared/peers` beside the repository (as in CI) or beside the folder of
/// worktrees it is checked out in.
pub fn reference_cli() -> PathBuf {
    static UNPACKED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    UNPACKED
        .get_or_init(|| {
            let peers = ["../shared/peers", "../../shared/peers"]
                .iter()
                .map(|p| repo_root().join(p))
                .find(|p| p.is_dir())
                .unwrap_or_else(|| repo_root().join("../shared/peers"));
            let tgz = std::fs::read_dir(&peers)
                .unwrap_or_else(|e| panic!("{}: {e} (the reference CLI is expected there)", peers.display()))
                .filter_map(|e| e.ok().map(|e| e.path()))
                .find(|p| {
                    let name = p.file_name().unwrap().to_string_lossy();
                    name.starts_with("devcontainers-cli-") && name.ends_with(".tgz")
                })
                .unwrap_or_else(|| panic!("no devcontainers-cli-*.tgz in {}", peers.display()));
            // Unpacked once into cargo's test scratch folder (target/tmp), named
            // after the tarball, so runs reuse it and nothing lands in /tmp.
            let name = tgz.file_stem().unwrap().to_string_lossy().into_owned();
            let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(&name);
            if !dir.join("package/devcontainer.js").is_file() {
                let staging = tempfile::Builder::new().prefix(&name).tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
                let out = Command::new("tar").arg("-xzf").arg(&tgz).arg("-C").arg(staging.path()).output().unwrap();
                assert!(out.status.success(), "unpack {}: {}", tgz.display(), stderr(&out));
                // Another test binary may have won the race: theirs is the same.
                let _ = std::fs::rename(staging.path(), &dir);
            }
            dir.join("package/devcontainer.js")
        })
        .clone()
}

/// A one-file HTTP server on 127.0.0.1 (the tarball host): answers every
/// GET with `body`, counts requests; stops with the test process.
pub struct FileServer {
    pub port: u16,
    pub hits: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl FileServer {
    pub fn serve(body: Vec<u8>) -> FileServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = hits.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(&body));
            }
        });
        FileServer { port, hits }
    }
}
