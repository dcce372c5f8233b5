//! The engine going away and coming back, without touching the machine's
//! real dockerd (other tests run beside these): `DOCKER_HOST` points at a
//! unix socket of the test's own, a small proxy in front of the real
//! engine's socket, which the test takes away (as an engine shutting down
//! does: no socket, every connection cut), brings back at the same address
//! (as an engine restarted), or which accepts and never answers (an engine
//! stopped with SIGSTOP looks so to a client).

use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The real engine behind the proxy: the one the tests point at
/// (`DOCKER_HOST`, a unix socket: Podman's in CI's Podman run), else
/// Docker's.
pub fn real_engine() -> String {
    std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|h| h.strip_prefix("unix://").map(str::to_string))
        .unwrap_or_else(|| "/var/run/docker.sock".to_string())
}

#[derive(Clone, Copy, PartialEq)]
pub enum Behaviour {
    /// Every connection is carried to the real engine.
    Forward,
    /// Connections are accepted and held, and nothing is ever answered.
    Silent,
    /// Carried, until the first exec started after a container's start
    /// (the host's link to a new room's daemon): then every byte, both ways
    /// and on every connection, is held for this long, as by an engine
    /// stopped with SIGSTOP and continued.
    StallAfterFirstExecStart(Duration),
}

/// The stall of [`Behaviour::StallAfterFirstExecStart`], shared by the
/// threads carrying bytes.
#[derive(Default)]
struct Stall {
    length: Duration,
    /// A container start went by: the next exec start stalls the engine.
    armed: AtomicBool,
    fired: AtomicBool,
    until: Mutex<Option<Instant>>,
}

impl Stall {
    /// Looks at a request's bytes, and starts the stall after the exec.
    fn saw_request(&self, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let Some(line) = text.lines().next().filter(|l| l.starts_with("POST ")) else { return };
        if line.contains("/containers/") && line.contains("/start") {
            self.armed.store(true, Ordering::SeqCst);
        } else if line.contains("/exec/")
            && line.contains("/start")
            && self.armed.load(Ordering::SeqCst)
            && !self.fired.swap(true, Ordering::SeqCst)
        {
            *self.until.lock().unwrap() = Some(Instant::now() + self.length);
        }
    }

    /// Holds the calling carrier while the engine is stalled: the fault
    /// itself, not a wait for readiness.
    fn hold(&self) {
        let until = *self.until.lock().unwrap();
        if let Some(remaining) = until.and_then(|u| u.checked_duration_since(Instant::now())) {
            std::thread::sleep(remaining);
        }
    }
}

/// A unix socket in a temporary folder standing for the engine. Stopping it
/// (or dropping it) removes the socket and cuts every connection it carried.
pub struct EngineProxy {
    _dir: tempfile::TempDir,
    path: PathBuf,
    behaviour: Behaviour,
    serving: Option<Serving>,
}

/// One spell of the proxy answering, from a start to a stop.
struct Serving {
    stopped: Arc<AtomicBool>,
    /// Both ends of every connection, to cut them when stopped.
    connections: Arc<Mutex<Vec<UnixStream>>>,
    acceptor: std::thread::JoinHandle<()>,
}

impl EngineProxy {
    pub fn start(behaviour: Behaviour) -> EngineProxy {
        let dir = tempfile::Builder::new().prefix("wr-engine-").tempdir().unwrap();
        let path = dir.path().join("docker.sock");
        let mut proxy = EngineProxy { _dir: dir, path, behaviour, serving: None };
        proxy.restart();
        proxy
    }

    /// `unix://<socket>`, for `DOCKER_HOST`.
    pub fn host(&self) -> String {
        format!("unix://{}", self.path.display())
    }

    /// The engine comes back at the same address (after [`stop`](Self::stop)).
    pub fn restart(&mut self) {
        assert!(self.serving.is_none(), "the proxy is already serving");
        let listener = UnixListener::bind(&self.path).unwrap();
        let stopped = Arc::new(AtomicBool::new(false));
        let connections = Arc::new(Mutex::new(Vec::new()));
        let real = real_engine();
        let acceptor = {
            let (stopped, connections, behaviour) = (stopped.clone(), connections.clone(), self.behaviour);
            let stall = match behaviour {
                Behaviour::StallAfterFirstExecStart(length) => Some(Arc::new(Stall { length, ..Default::default() })),
                _ => None,
            };
            std::thread::spawn(move || {
                for client in listener.incoming() {
                    if stopped.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(client) = client else { continue };
                    let mut held = connections.lock().unwrap();
                    held.push(client.try_clone().unwrap());
                    if behaviour == Behaviour::Silent {
                        continue;
                    }
                    let Ok(engine) = UnixStream::connect(&real) else { continue };
                    held.push(engine.try_clone().unwrap());
                    match &stall {
                        None => {
                            carry(client.try_clone().unwrap(), engine.try_clone().unwrap());
                            carry(engine, client);
                        }
                        Some(stall) => {
                            carry_stalling(client.try_clone().unwrap(), engine.try_clone().unwrap(), stall, true);
                            carry_stalling(engine, client, stall, false);
                        }
                    }
                }
            })
        };
        self.serving = Some(Serving { stopped, connections, acceptor });
    }

    /// The engine goes away: no socket, and every connection cut.
    pub fn stop(&mut self) {
        let Some(serving) = self.serving.take() else { return };
        serving.stopped.store(true, Ordering::SeqCst);
        // Wakes the acceptor so it sees the flag and ends.
        let _ = UnixStream::connect(&self.path);
        let _ = serving.acceptor.join();
        let _ = std::fs::remove_file(&self.path);
        for connection in serving.connections.lock().unwrap().drain(..) {
            let _ = connection.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for EngineProxy {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Copies `from` into `to` on a thread of its own until either side ends.
fn carry(mut from: UnixStream, mut to: UnixStream) {
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from, &mut to);
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
}

/// [`carry`] through a [`Stall`]: each chunk waits out a stall before it
/// is passed on, and requests (`requests`: the client's side) are watched
/// for the exec that starts it.
fn carry_stalling(mut from: UnixStream, mut to: UnixStream, stall: &Arc<Stall>, requests: bool) {
    use std::io::{Read, Write};
    let stall = Arc::clone(stall);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            stall.hold();
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
            if requests {
                stall.saw_request(&buf[..n]);
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
}
