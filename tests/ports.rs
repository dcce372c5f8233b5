//! Forwarded ports over the daemon link, against the real engine: servers
//! in the room reached from the host's 127.0.0.1, nothing published.

mod common;

use common::engine_proxy::{Behaviour, EngineProxy};
use common::*;
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// How long a server started in the room may take to listen (python3
/// starts in ~50 ms; a loaded CI box is slower).
const SERVER_READY_WAIT: Duration = Duration::from_secs(30);
/// Bytes pushed through one forwarded connection (and echoed back).
const BIG_TRANSFER: u64 = 1 << 30;
const CONCURRENT: usize = 64;
/// A refused forward must close the client's connection at once, not after
/// some timeout of ours.
const REFUSED_CLOSE_WITHIN: Duration = Duration::from_secs(10);

/// An echo server: each connection gets back what it sends; the client's
/// half-close is answered with ours. Threads, so connections run at once.
/// Writes `/tmp/ready.<port>` once listening.
const ECHO_PY: &str = r#"
import socket, socketserver, sys
class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        s = self.request
        while True:
            b = s.recv(262144)
            if not b:
                break
            s.sendall(b)
        s.shutdown(socket.SHUT_WR)
class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
    # socketserver's default backlog is 5: 64 connections at once would
    # overflow it and some would wait out SYN retransmits.
    request_queue_size = 128
port = int(sys.argv[1])
srv = Server(("127.0.0.1", port), Echo)
open("/tmp/ready.%d" % port, "w").close()
srv.serve_forever()
"#;

/// A host port nobody listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// How long a forwarder may take to link to its room's new start once the
/// room (or the engine) is back: an event, an inspect and one `docker
/// exec`, well under a second; seconds on a loaded machine, and up to the
/// 5 s of its engine pace after the engine was away.
const REJOIN_WAIT: Duration = Duration::from_secs(30);

/// A workspace plus an isolated state folder for its forwarders.
struct Room {
    ws: Workspace,
    state: tempfile::TempDir,
    /// `DOCKER_HOST` for its `workroom` runs (and so its forwarder), when
    /// not the machine's engine.
    engine: Option<String>,
    /// `WORKROOM_SCOPE` for its `workroom` runs: a watcher of this scope
    /// looks after this room and no other test's.
    scope: Option<String>,
}

impl Room {
    fn new(config: serde_json::Value) -> Room {
        let ws = Workspace::new(config);
        std::fs::write(ws.path().join("echo.py"), ECHO_PY).unwrap();
        Room { ws, state: tempfile::tempdir().unwrap(), engine: None, scope: None }
    }

    fn workroom(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(workroom_bin());
        let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
        cmd.args(&args[..split]).args(["--workspace-folder", &self.ws.folder()]).args(&args[split..]);
        self.env(&mut cmd).output().expect("run workroom")
    }

    fn workroom_ok(&self, args: &[&str]) -> String {
        let out = self.workroom(args);
        assert!(out.status.success(), "workroom {args:?}: {}", stderr(&out));
        stdout(&out)
    }

    fn ports(&self) -> String {
        let mut cmd = Command::new(workroom_bin());
        let out = self.env(cmd.arg("ports")).output().expect("run workroom ports");
        assert!(out.status.success(), "workroom ports: {}", stderr(&out));
        stdout(&out)
    }

    fn env<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        // No agent or git helper of the test runner's: ports only.
        cmd.env("XDG_STATE_HOME", self.state.path())
            .env("XDG_CONFIG_HOME", self.state.path())
            .env_remove("SSH_AUTH_SOCK")
            .env("GIT_CONFIG_GLOBAL", "/dev/null");
        if let Some(host) = &self.engine {
            cmd.env("DOCKER_HOST", host);
        }
        if let Some(scope) = &self.scope {
            cmd.env("WORKROOM_SCOPE", scope);
        }
        cmd
    }

    /// This room's entry in `workroom ports --json` (which reads the
    /// forwarders' state files, asking the engine nothing), if any.
    fn status(&self) -> Option<serde_json::Value> {
        let mut cmd = Command::new(workroom_bin());
        let out = self.env(cmd.args(["ports", "--json"])).output().expect("run workroom ports --json");
        assert!(out.status.success(), "workroom ports --json: {}", stderr(&out));
        let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        all.as_array()?.iter().find(|s| s["room"] == self.ws.room_name().as_str()).cloned()
    }

    /// The room's `State.StartedAt`, from the engine.
    fn started_at(&self) -> String {
        docker_ok(&["inspect", "-f", "{{.State.StartedAt}}", &self.ws.room_name()])
    }

    fn exec_ok(&self, cmd: &[&str]) -> String {
        let mut args = vec!["exec", "--"];
        args.extend_from_slice(cmd);
        self.workroom_ok(&args)
    }

    /// Starts a detached shell command in the room and waits for `ready` to exist.
    fn start_server(&self, script: &str, ready: &str) {
        self.exec_ok(&["sh", "-c", &format!("({script}) >/tmp/server.log 2>&1 &")]);
        let wait = format!(
            "i=0; until [ -e {ready} ]; do i=$((i+1)); [ $i -gt {} ] && exit 1; sleep 0.05; done",
            SERVER_READY_WAIT.as_millis() / 50
        );
        let out = self.workroom(&["exec", "--", "sh", "-c", &wait]);
        assert!(
            out.status.success(),
            "the server in the room did not start: {}",
            self.exec_ok(&["cat", "/tmp/server.log"])
        );
    }

    fn start_echo(&self, port: u16) {
        self.start_server(&format!("python3 echo.py {port}"), &format!("/tmp/ready.{port}"));
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.state.path().join("workroom").join(format!("{}.log", self.ws.room_name())))
            .unwrap_or_default()
    }

    fn background_pid(&self) -> Option<u32> {
        let file = self.state.path().join("workroom").join(format!("{}.pid", self.ws.room_name()));
        std::fs::read_to_string(file).ok()?.trim().parse().ok()
    }
}

impl Drop for Room {
    fn drop(&mut self) {
        // A forwarder ends with its room's removal, unless the test took its
        // engine away: then it would wait minutes for it. Ended here.
        if let Some(pid) = self.background_pid().filter(|pid| is_forwarder(*pid)) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
        }
    }
}

/// Whether `pid` is a `workroom forward` (not a recycled pid).
fn is_forwarder(pid: u32) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    cmdline.split(|b| *b == 0).any(|arg| arg == b"forward")
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ")
}

/// Waits for a process we did not start (it was detached) to go away.
fn wait_gone(pid: u32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if !alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn http_get(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

/// Sends `data` on a fresh connection, half-closes, returns all echoed back.
fn echo_round(port: u16, data: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut w = s.try_clone().unwrap();
    let data = data.to_vec();
    let writer = std::thread::spawn(move || {
        w.write_all(&data).unwrap();
        w.shutdown(Shutdown::Write).unwrap();
    });
    let mut back = Vec::new();
    s.read_to_end(&mut back).unwrap();
    writer.join().unwrap();
    back
}

#[test]
fn a_python_http_server_in_the_room_is_reached_through_forward_ports_started_by_up() {
    let port = free_port();
    let room = Room::new(serde_json::json!({
        "image": DEBIAN,
        "forwardPorts": [port],
        "portsAttributes": { port.to_string(): { "label": "web" } },
    }));
    room.workroom_ok(&["up"]);
    std::fs::write(room.ws.path().join("hello.txt"), "hello through the forward\n").unwrap();
    room.start_server(
        &format!("python3 -c 'import http.server,socketserver,functools; h=functools.partial(http.server.SimpleHTTPRequestHandler); s=socketserver.TCPServer((\"127.0.0.1\",{port}),h); open(\"/tmp/http.ready\",\"w\").close(); s.serve_forever()'"),
        "/tmp/http.ready",
    );
    let reply = http_get(port, "/hello.txt");
    assert!(reply.starts_with("HTTP/1.0 200"), "{reply}");
    assert!(reply.ends_with("hello through the forward\n"), "{reply}");

    let ports = room.ports();
    let row = ports.lines().find(|l| l.contains(&room.ws.room_name())).unwrap_or_else(|| panic!("{ports}"));
    let pid = room.background_pid().expect("up wrote the forwarder's pid");
    for want in [port.to_string(), format!("127.0.0.1:{port}"), "web".into(), pid.to_string(), "listening".into()] {
        assert!(row.contains(&want), "`{want}` missing in {row:?}");
    }

    // A second `up` leaves the running forwarder alone.
    room.workroom_ok(&["up"]);
    assert_eq!(room.background_pid(), Some(pid));

    room.workroom_ok(&["stop"]);
    assert!(wait_gone(pid, Duration::from_secs(10)), "the forwarder outlived `stop`");
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err(), "the port is still served after `stop`");
    assert!(!room.ports().contains(&room.ws.room_name()));
}

#[test]
fn a_busybox_httpd_is_reached_through_workroom_forward_and_down_ends_the_forwarder() {
    let room = Room::new(serde_json::json!({ "image": BUSYBOX }));
    room.workroom_ok(&["up"]);
    room.start_server(
        "mkdir -p /www && echo busybox says hi > /www/index.html && httpd -f -p 127.0.0.1:8080 -h /www & touch /tmp/httpd.ready; wait",
        "/tmp/httpd.ready",
    );
    let host_port = free_port();
    room.workroom_ok(&["forward", "--background", &format!("{host_port}:8080")]);
    let pid = room.background_pid().unwrap();
    // httpd may still be binding: the first tries can be refused in the room.
    let deadline = Instant::now() + SERVER_READY_WAIT;
    let reply = loop {
        let reply = http_get(host_port, "/index.html");
        if reply.contains("200") || Instant::now() > deadline {
            break reply;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(reply.ends_with("busybox says hi\n"), "{reply}");
    room.workroom_ok(&["down"]);
    assert!(wait_gone(pid, Duration::from_secs(10)), "the forwarder outlived `down`");
}

/// xorshift: cheap, deterministic bytes that are not a repeating pattern,
/// so a misplaced or duplicated chunk changes the digest.
fn fill(state: &mut u64, buf: &mut [u8]) {
    for chunk in buf.chunks_mut(8) {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
}

#[test]
fn one_gibibyte_goes_through_one_forwarded_connection_and_back_intact() {
    let port = free_port();
    let room = Room::new(serde_json::json!({ "image": DEBIAN, "forwardPorts": [port] }));
    room.workroom_ok(&["up"]);
    room.start_echo(port);
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut w = s.try_clone().unwrap();
    let started = Instant::now();
    let writer = std::thread::spawn(move || {
        let mut hash = Sha256::new();
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut buf = vec![0u8; 1 << 20];
        for _ in 0..BIG_TRANSFER / buf.len() as u64 {
            fill(&mut state, &mut buf);
            hash.update(&buf);
            w.write_all(&buf).unwrap();
        }
        w.shutdown(Shutdown::Write).unwrap();
        hash.finalize()
    });
    let mut r = s;
    let mut hash = Sha256::new();
    let mut got = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = r.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
        got += n as u64;
    }
    let sent = writer.join().unwrap();
    let secs = started.elapsed().as_secs_f64();
    eprintln!("1 GiB each way in {secs:.1} s ({:.0} MB/s each way)", BIG_TRANSFER as f64 / 1e6 / secs);
    assert_eq!(got, BIG_TRANSFER, "the echo ended early (the half-close came back after {got} bytes)");
    assert_eq!(hash.finalize(), sent, "the bytes came back changed");
}

#[test]
fn sixty_four_connections_are_forwarded_at_once() {
    let port = free_port();
    let room = Room::new(serde_json::json!({ "image": DEBIAN, "forwardPorts": [port] }));
    room.workroom_ok(&["up"]);
    room.start_echo(port);
    // All connect first, then all send: the forwarder must hold 64 streams.
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(CONCURRENT));
    let threads: Vec<_> = (0..CONCURRENT)
        .map(|i| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut data = vec![0u8; 256 * 1024];
                fill(&mut (i as u64 + 1), &mut data);
                barrier.wait();
                echo_round(port, &data) == data
            })
        })
        .collect();
    let intact = threads.into_iter().map(|t| t.join().unwrap()).filter(|ok| *ok).count();
    assert_eq!(intact, CONCURRENT);
}

#[test]
fn a_refused_target_closes_the_client_connection_and_says_why_in_the_log() {
    let port = free_port();
    let room = Room::new(serde_json::json!({ "image": DEBIAN, "forwardPorts": [port] }));
    room.workroom_ok(&["up"]);
    // Nothing listens on `port` in the room.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(REFUSED_CLOSE_WITHIN)).unwrap();
    let mut buf = [0u8; 16];
    let closed = match s.read(&mut buf) {
        Ok(0) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        Ok(_) => false,
    };
    assert!(closed, "the client's connection was not closed");
    let want = format!("connection refused on 127.0.0.1:{port} in the room");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !room.log().contains(&want) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(room.log().contains(&want), "log: {}", room.log());
}

#[test]
fn a_host_port_already_taken_moves_to_a_free_one_which_ports_says_and_the_other_ports_stay() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let free = free_port();
    let room = Room::new(serde_json::json!({ "image": DEBIAN, "forwardPorts": [taken_port, free] }));
    let out = room.workroom(&["up"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains(&format!("(port {taken_port} is taken on the host)")), "{}", stderr(&out));
    let ports = room.ports();
    assert!(ports.contains(&format!("listening (port {taken_port} is taken on the host)")), "{ports}");
    // The moved forward, as `ports --json` records it: another host port, the same target.
    let mut cmd = Command::new(workroom_bin());
    let listed: serde_json::Value =
        serde_json::from_slice(&room.env(cmd.args(["ports", "--json"])).output().unwrap().stdout).unwrap();
    let forwards = listed[0]["forwards"].as_array().unwrap_or_else(|| panic!("{listed}"));
    let moved = forwards.iter().find(|f| f["asked_port"] == taken_port).unwrap_or_else(|| panic!("{listed}"));
    let moved_to = moved["host_port"].as_u64().unwrap() as u16;
    assert!(moved_to != taken_port && moved["target_port"] == taken_port, "{moved}");
    room.start_echo(taken_port);
    assert_eq!(echo_round(moved_to, b"moved"), b"moved");
    room.start_echo(free);
    assert_eq!(echo_round(free, b"still forwarded"), b"still forwarded");
    drop(taken);
}

#[test]
fn a_stopped_room_ends_its_forwarder_even_when_stopped_behind_our_back() {
    let port = free_port();
    let room = Room::new(serde_json::json!({ "image": BUSYBOX, "forwardPorts": [port] }));
    room.workroom_ok(&["up"]);
    let pid = room.background_pid().unwrap();
    docker_ok(&["stop", "-t", "1", &room.ws.room_name()]);
    assert!(wait_gone(pid, Duration::from_secs(20)), "the forwarder outlived its room");
}

/// Counts what it receives and answers the count on the client's half-close;
/// `recv_into` a reused buffer so Python is not the bottleneck. Listens on
/// every address: the direct measurement reaches it on the bridge.
const SINK_PY: &str = r#"
import socket, sys
port = int(sys.argv[1])
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", port)); srv.listen(8)
open("/tmp/sink.%d" % port, "w").close()
buf = bytearray(1 << 20)
while True:
    c, _ = srv.accept()
    n = 0
    while True:
        k = c.recv_into(buf)
        if not k:
            break
        n += k
    c.sendall(b"%d\n" % n); c.close()
"#;

/// Sends `total` bytes to `addr`, half-closes, checks the sink's count;
/// returns MB/s.
fn push(addr: (&str, u16), total: u64) -> f64 {
    let mut s = TcpStream::connect(addr).unwrap();
    let buf = vec![0x5au8; 1 << 20];
    let started = Instant::now();
    for _ in 0..total / buf.len() as u64 {
        s.write_all(&buf).unwrap();
    }
    s.shutdown(Shutdown::Write).unwrap();
    let mut count = String::new();
    s.read_to_string(&mut count).unwrap();
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(count.trim(), total.to_string());
    total as f64 / 1e6 / secs
}

/// The design's budget: a forwarded connection moves at least half of what
/// a direct TCP connection to the container's bridge address does. Run with
/// `cargo test --release --test ports -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement; run by hand in release mode"]
fn forwarded_throughput_against_a_direct_connection_to_the_container() {
    let port = free_port();
    let room = Room::new(serde_json::json!({ "image": DEBIAN, "forwardPorts": [port] }));
    std::fs::write(room.ws.path().join("sink.py"), SINK_PY).unwrap();
    room.workroom_ok(&["up"]);
    room.start_server(&format!("python3 sink.py {port}"), &format!("/tmp/sink.{port}"));
    let ip =
        docker_ok(&["inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", &room.ws.room_name()]);
    if ip.is_empty() {
        eprintln!("the room has no bridge address (network none?): no direct figure to compare with");
        return;
    }
    // Warm both paths once, then measure alternately.
    push(("127.0.0.1", port), 64 << 20);
    push((ip.as_str(), port), 64 << 20);
    let (mut fwd, mut direct) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        fwd.push(push(("127.0.0.1", port), BIG_TRANSFER));
        direct.push(push((ip.as_str(), port), BIG_TRANSFER));
    }
    let best = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
    let (f, d) = (best(&fwd), best(&direct));
    eprintln!("forwarded: {fwd:.0?} MB/s; direct {ip}:{port}: {direct:.0?} MB/s; best ratio {:.2}", f / d);
    assert!(f / d >= 0.5, "forwarded {f:.0} MB/s is under half of direct {d:.0} MB/s");
}

#[test]
fn a_host_port_taken_for_the_only_forwarded_port_moves_and_the_hooks_still_run() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let room = Room::new(serde_json::json!({
        "image": BUSYBOX,
        "forwardPorts": [taken_port],
        "postCreateCommand": "touch post-create-ran",
    }));
    let out = room.workroom(&["up"]);
    assert!(out.status.success(), "up failed: {}", stderr(&out));
    assert!(stderr(&out).contains(&format!("port {taken_port} is taken on the host")), "{}", stderr(&out));
    assert!(room.ws.path().join("post-create-ran").exists(), "postCreateCommand did not run: {}", stderr(&out));
    drop(taken);
}

/// Serves `/www/index.html` ("hi") on `port` in a busybox room.
fn start_httpd(room: &Room, port: u16) {
    room.start_server(
        &format!(
            "mkdir -p /www && echo hi > /www/index.html && httpd -f -p 127.0.0.1:{port} -h /www & touch /tmp/httpd.ready; wait"
        ),
        "/tmp/httpd.ready",
    );
}

/// `GET /index.html` through the forwarded `port` until it answers (httpd
/// may still be binding); the reply.
fn http_get_when_served(port: u16) -> String {
    let deadline = Instant::now() + SERVER_READY_WAIT;
    loop {
        // Not `http_get`: a refused connect is expected here and retried.
        let reply = TcpStream::connect(("127.0.0.1", port))
            .and_then(|mut s| {
                s.set_read_timeout(Some(Duration::from_secs(30)))?;
                write!(s, "GET /index.html HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
                let mut body = String::new();
                s.read_to_string(&mut body)?;
                Ok(body)
            })
            .unwrap_or_default();
        if reply.contains("200") || Instant::now() > deadline {
            return reply;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn up_starts_the_forwarder_again_when_it_was_killed_even_with_nothing_else_due() {
    let port = free_port();
    let room = Room::new(serde_json::json!({ "image": BUSYBOX, "forwardPorts": [port] }));
    room.workroom_ok(&["up"]);
    let killed = room.background_pid().expect("up started a forwarder");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(killed as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(wait_gone(killed, Duration::from_secs(10)));
    // The room runs and its hooks are done: this `up` takes the fast path.
    room.workroom_ok(&["up"]);
    let pid = room.background_pid().expect("up started no forwarder");
    assert!(pid != killed && alive(pid), "no live forwarder after up");
    start_httpd(&room, port);
    assert!(http_get_when_served(port).ends_with("hi\n"), "the port is not forwarded again");
}

/// Serves `/www/index.html` ("hi") on `port` in the room through the engine
/// alone (`docker exec -d`): no workroom command runs.
fn start_httpd_by_docker(room: &Room, port: u16) {
    let script = format!("mkdir -p /www && echo hi > /www/index.html && exec httpd -f -p 127.0.0.1:{port} -h /www");
    docker_ok(&["exec", "-d", &room.ws.room_name(), "sh", "-c", &script]);
}

/// Once the forwarder `pid` has linked to the room's start now: its status
/// names that start and it is not between starts.
fn wait_for_the_forwarder_to_follow(room: &Room, pid: u32) -> serde_json::Value {
    let start = room.started_at();
    let status = wait_until(REJOIN_WAIT, || {
        room.status().filter(|s| s["pid"] == pid && s["started_at"] == start.as_str() && s["rejoining"] == false)
    });
    status.unwrap_or_else(|| {
        panic!("the forwarder never followed the start {start}: {:?}\n{}", room.status(), room.log())
    })
}

#[test]
fn a_room_restarted_by_docker_restart_gets_its_forwarded_port_back_from_the_same_forwarder_with_no_workroom_command() {
    let port = free_port();
    let room = Room::new(serde_json::json!({ "image": BUSYBOX, "forwardPorts": [port] }));
    room.workroom_ok(&["up"]);
    let pid = room.background_pid().expect("up started a forwarder");
    start_httpd(&room, port);
    assert!(http_get_when_served(port).ends_with("hi\n"), "the port was not forwarded before the restart");
    let before = room.started_at();

    docker_ok(&["restart", "-t", "1", &room.ws.room_name()]);
    assert_ne!(room.started_at(), before, "docker restart made no new start");
    start_httpd_by_docker(&room, port);
    let reply = http_get_when_served(port);
    assert!(reply.ends_with("hi\n"), "the port is not forwarded again after the restart: {reply:?}\n{}", room.log());

    assert_eq!(room.background_pid(), Some(pid), "the forwarder was replaced");
    assert!(alive(pid), "the forwarder is gone");
    wait_for_the_forwarder_to_follow(&room, pid);
    let ports = room.ports();
    let row = ports.lines().find(|l| l.contains(&room.ws.room_name())).unwrap_or_else(|| panic!("{ports}"));
    for want in [port.to_string(), pid.to_string(), "listening".into()] {
        assert!(row.contains(&want), "`{want}` missing in {row:?}");
    }
    assert!(!row.contains("between starts"), "{row:?}");
    // The next `up` takes it for this start's: no second forwarder.
    room.workroom_ok(&["up"]);
    assert_eq!(room.background_pid(), Some(pid), "up replaced a forwarder that had followed the restart");
    assert!(http_get_when_served(port).ends_with("hi\n"));
}

#[test]
fn a_forwarder_whose_engine_went_away_links_to_the_start_the_room_got_meanwhile_once_the_engine_is_back() {
    let mut engine = EngineProxy::start(Behaviour::Forward);
    let port = free_port();
    let mut room = Room::new(serde_json::json!({ "image": BUSYBOX, "forwardPorts": [port] }));
    room.engine = Some(engine.host());
    room.workroom_ok(&["up"]);
    let pid = room.background_pid().expect("up started a forwarder");
    start_httpd(&room, port);
    assert!(http_get_when_served(port).ends_with("hi\n"), "the port was not forwarded before the engine went away");

    // The engine shuts down: its socket goes, every connection (the
    // forwarder's link and its event stream) is cut.
    engine.stop();
    let waiting = wait_until(REJOIN_WAIT, || room.status().filter(|s| s["rejoining"] == true));
    assert!(waiting.is_some(), "the forwarder did not notice its engine go: {:?}\n{}", room.status(), room.log());
    assert!(alive(pid), "the forwarder ended with its engine away\n{}", room.log());
    // Meanwhile the room restarts, as the engine's restart policy starts it
    // again when the engine comes back.
    docker_ok(&["restart", "-t", "1", &room.ws.room_name()]);
    start_httpd_by_docker(&room, port);
    engine.restart();

    let reply = http_get_when_served(port);
    assert!(
        reply.ends_with("hi\n"),
        "the port is not forwarded again after the engine came back: {reply:?}\n{}",
        room.log()
    );
    assert_eq!(room.background_pid(), Some(pid), "the forwarder was replaced");
    wait_for_the_forwarder_to_follow(&room, pid);

    room.workroom_ok(&["down"]);
    assert!(wait_gone(pid, Duration::from_secs(10)), "the forwarder outlived `down`");
}

#[test]
fn a_room_made_with_up_name_gets_its_forwarded_ports_from_up() {
    // The forwarder used to find "the workspace's room" again from the
    // folder, which a named room is not: it ended with "no room for …".
    let port = free_port();
    let room = Room::new(serde_json::json!({ "image": BUSYBOX, "forwardPorts": [port] }));
    let name = format!("named-{}", room.ws.unique());
    let said = room.workroom(&["up", "--name", &name]);
    assert!(said.status.success(), "{}", stderr(&said));
    assert!(!stderr(&said).contains("not forwarded"), "{}", stderr(&said));
    let full = format!("workroom-{name}");
    let script = format!("mkdir -p /www && echo hi > /www/index.html && exec httpd -f -p 127.0.0.1:{port} -h /www");
    docker_ok(&["exec", "-d", &full, "sh", "-c", &script]);
    assert!(http_get_when_served(port).ends_with("hi\n"), "the named room's port is not forwarded");
    let pid = std::fs::read_to_string(room.state.path().join("workroom").join(format!("{full}.pid"))).unwrap();
    assert_eq!(forwarders_of(&full), vec![pid.trim().parse::<u32>().unwrap()]);
}

// `workroom watch`: a room the engine starts by itself (after a host
// reboot) gets its forwarder from the watcher, with no workroom command.

/// How long the watcher may take to say it watches: one engine connect.
const WATCHER_READY_WAIT: Duration = Duration::from_secs(30);

/// A `workroom watch` process of a room's environment (its state folder,
/// engine and scope), its stderr in a file; ended on drop.
struct Watcher {
    child: std::process::Child,
    log: tempfile::NamedTempFile,
}

impl Watcher {
    /// Starts it and waits until it watches the engine.
    fn start(room: &Room) -> Watcher {
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut cmd = Command::new(workroom_bin());
        room.env(cmd.arg("watch")).stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
        let child = cmd.stderr(log.reopen().unwrap()).spawn().expect("start workroom watch");
        let watcher = Watcher { child, log };
        watcher.wait_for_line("watching the engine", WATCHER_READY_WAIT);
        watcher
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// The first line holding `want`, once said; fails the test past `within`.
    fn wait_for_line(&self, want: &str, within: Duration) -> String {
        let line = wait_until(within, || self.log().lines().find(|l| l.contains(want)).map(str::to_string));
        line.unwrap_or_else(|| panic!("the watcher never said {want:?}:\n{}", self.log()))
    }

    /// Its line on the room's start now, once said: the forwarder's pid it
    /// names (one it started or one that serves the start).
    fn handled(&self, room: &Room) -> u32 {
        let want = format!("{} started at {}: ", room.ws.room_name(), room.started_at());
        let line = self.wait_for_line(&want, REJOIN_WAIT);
        let pid = line.split("(pid ").nth(1).and_then(|rest| rest.split(')').next()).and_then(|p| p.parse().ok());
        pid.unwrap_or_else(|| panic!("no forwarder named in {line:?}"))
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = finish_within_quietly(&mut self.child, Duration::from_secs(10));
    }
}

/// Waits for a child we started to end, killing it past `within`.
fn finish_within_quietly(child: &mut std::process::Child, within: Duration) -> Option<std::process::ExitStatus> {
    let status = wait_until(within, || child.try_wait().ok().flatten());
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    status
}

/// The live `workroom forward` processes of the room `name`, from /proc.
fn forwarders_of(name: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else { continue };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if args.contains(&&b"forward"[..]) && args.contains(&name.as_bytes()) && alive(pid) {
            found.push(pid);
        }
    }
    found
}

/// A room with a forwarded port, brought up in a scope of its own, whose
/// forwarder is then killed and its state folder removed: what a host
/// reboot leaves (the engine keeps the room; the forwarder and, under
/// /run or /tmp, its files are gone).
fn room_after_a_reboot(port: u16) -> Room {
    let mut room = Room::new(serde_json::json!({ "image": BUSYBOX, "forwardPorts": [port] }));
    room.scope = Some(format!("watch-{}", room.ws.unique()));
    room.workroom_ok(&["up"]);
    let killed = room.background_pid().expect("up started a forwarder");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(killed as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(wait_gone(killed, Duration::from_secs(10)), "the forwarder outlived SIGKILL");
    std::fs::remove_dir_all(room.state.path().join("workroom")).unwrap();
    room
}

#[test]
fn after_a_reboot_the_watcher_forwards_the_room_the_engine_starts_again_with_no_workroom_command() {
    let port = free_port();
    let room = room_after_a_reboot(port);
    // Down at the watcher's start, as before the engine starts its rooms.
    docker_ok(&["stop", "-t", "1", &room.ws.room_name()]);
    let watcher = Watcher::start(&room);

    // The engine starts the room, as its restart policy does at boot.
    docker_ok(&["restart", "-t", "1", &room.ws.room_name()]);
    start_httpd_by_docker(&room, port);
    let reply = http_get_when_served(port);
    assert!(reply.ends_with("hi\n"), "the port is not forwarded after the start: {reply:?}\n{}", watcher.log());
    let pid = watcher.handled(&room);
    assert_eq!(room.background_pid(), Some(pid), "the watcher's forwarder is not the room's: {}", watcher.log());
    wait_for_the_forwarder_to_follow(&room, pid);
    let line = watcher.wait_for_line(&format!("{} started at", room.ws.room_name()), REJOIN_WAIT);
    let carried = format!("started its forwarder (pid {pid}): 127.0.0.1:{port} -> 127.0.0.1:{port} listening");
    assert!(line.ends_with(&carried), "{line}");
    assert!(watcher.log().lines().all(|l| !l.contains("warning")), "{}", watcher.log());
}

#[test]
fn two_watchers_and_an_up_at_once_start_one_forwarder_for_a_room_that_has_none() {
    let port = free_port();
    let room = room_after_a_reboot(port);
    let name = room.ws.room_name();
    // The room runs with no forwarder: both watchers find it at their first
    // look, while an `up` typed meanwhile finds it too.
    let mut cmd = Command::new(workroom_bin());
    room.env(cmd.args(["up", "--workspace-folder", &room.ws.folder()]));
    let up = cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let (first, second) = std::thread::scope(|s| {
        let other = s.spawn(|| Watcher::start(&room));
        (Watcher::start(&room), other.join().unwrap())
    });
    let up = finish_within(up, "workroom up", Duration::from_secs(60));
    assert!(up.status.success(), "{}", stderr(&up));

    let (a, b) = (first.handled(&room), second.handled(&room));
    assert_eq!(a, b, "the watchers name two forwarders:\n{}\n{}", first.log(), second.log());
    assert_eq!(forwarders_of(&name), vec![a], "not one forwarder:\n{}\n{}\n{}", first.log(), second.log(), stderr(&up));
    assert_eq!(room.background_pid(), Some(a));
    start_httpd(&room, port);
    assert!(http_get_when_served(port).ends_with("hi\n"), "the port is not forwarded");

    // A restart seen by both: the forwarder follows it, nobody starts another.
    docker_ok(&["restart", "-t", "1", &name]);
    assert_eq!((first.handled(&room), second.handled(&room)), (a, a));
    assert_eq!(forwarders_of(&name), vec![a], "a second forwarder after the restart");
}

#[test]
fn the_watcher_never_touches_a_container_without_our_labels_even_one_naming_a_workspace() {
    let port = free_port();
    let room = room_after_a_reboot(port);
    // Everything a room carries but workroom's schema label: the reference
    // CLI's labels naming a workspace with forwardPorts, and our scope.
    let foreign = format!("wr-foreign-{}", room.ws.unique());
    let config = room.ws.path().join(".devcontainer.json");
    let scope_label = format!("workroom.scope={}", room.scope.as_deref().unwrap());
    let folder_label = format!("devcontainer.local_folder={}", room.ws.folder());
    let config_label = format!("devcontainer.config_file={}", config.display());
    docker_ok(&[
        "run",
        "-d",
        "--name",
        &foreign,
        "--label",
        TEST_LABEL,
        "--label",
        &scope_label,
        "--label",
        &folder_label,
        "--label",
        &config_label,
        BUSYBOX,
        "sleep",
        "3600",
    ]);
    struct Removed(String);
    impl Drop for Removed {
        fn drop(&mut self) {
            remove_container(&self.0);
        }
    }
    let _removed = Removed(foreign.clone());
    docker_ok(&["stop", "-t", "1", &room.ws.room_name()]);
    let watcher = Watcher::start(&room);

    // Its start first, then the room's: by the time the room's start is
    // handled, the foreign one was reported (were it reported at all).
    docker_ok(&["restart", "-t", "1", &foreign]);
    docker_ok(&["restart", "-t", "1", &room.ws.room_name()]);
    let pid = watcher.handled(&room);
    assert_eq!(room.background_pid(), Some(pid));

    let id = docker_ok(&["inspect", "-f", "{{.Id}}", &foreign]);
    assert!(!watcher.log().contains(&foreign) && !watcher.log().contains(&id), "{}", watcher.log());
    assert_eq!(docker_ok(&["inspect", "-f", "{{len .ExecIDs}}", &foreign]), "0", "something ran in the container");
    assert!(forwarders_of(&foreign).is_empty(), "a forwarder for the foreign container");
    let files: Vec<String> = walk(room.state.path()).into_iter().filter(|f| f.contains(&foreign)).collect();
    assert!(files.is_empty(), "state files for the foreign container: {files:?}");
}

/// Every file under `dir`, as paths.
fn walk(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        match path.is_dir() {
            true => found.extend(walk(&path)),
            false => found.push(path.display().to_string()),
        }
    }
    found
}

#[test]
fn a_watcher_whose_engine_went_away_forwards_the_room_it_started_meanwhile_once_the_engine_is_back() {
    let mut engine = EngineProxy::start(Behaviour::Forward);
    let port = free_port();
    let mut room = Room::new(serde_json::json!({ "image": BUSYBOX, "forwardPorts": [port] }));
    room.engine = Some(engine.host());
    room.scope = Some(format!("watch-{}", room.ws.unique()));
    room.workroom_ok(&["up"]);
    let killed = room.background_pid().expect("up started a forwarder");
    let watcher = Watcher::start(&room);
    assert_eq!(watcher.handled(&room), killed, "the watcher did not take up's forwarder for the room's");

    // The engine goes away; meanwhile the room's forwarder and its state go
    // (the host reboots) and the room restarts (its policy, at the engine's
    // return).
    engine.stop();
    watcher.wait_for_line("waiting for it to answer", REJOIN_WAIT);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(killed as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(wait_gone(killed, Duration::from_secs(10)), "the forwarder outlived SIGKILL");
    std::fs::remove_dir_all(room.state.path().join("workroom")).unwrap();
    docker_ok(&["restart", "-t", "1", &room.ws.room_name()]);
    start_httpd_by_docker(&room, port);
    engine.restart();

    watcher.wait_for_line("answers again", REJOIN_WAIT);
    let pid = watcher.handled(&room);
    assert_ne!(pid, killed);
    let reply = http_get_when_served(port);
    assert!(
        reply.ends_with("hi\n"),
        "the port is not forwarded after the engine came back: {reply:?}\n{}",
        watcher.log()
    );
    assert_eq!(room.background_pid(), Some(pid));
}

#[test]
fn watch_install_writes_the_unit_and_says_the_command_when_no_user_manager_answers_and_uninstall_removes_it() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config");
    let run = |flag: &str| {
        let mut cmd = Command::new(workroom_bin());
        cmd.args(["watch", flag])
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", &config)
            // No user manager reachable, whatever this machine runs.
            .env("XDG_RUNTIME_DIR", home.path())
            .env("DBUS_SESSION_BUS_ADDRESS", format!("unix:path={}/no-bus", home.path().display()))
            .env("DOCKER_HOST", "unix:///run/test-engine.sock")
            .env_remove("WORKROOM_SCOPE");
        output_within(cmd, None)
    };
    let unit = config.join("systemd/user/workroom-watch.service");
    let out = run("--install");
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stderr(&out);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.contains(&unit.display().to_string())
            && said.contains("systemctl --user enable --now workroom-watch.service"),
        "{said}"
    );
    let text = std::fs::read_to_string(&unit).expect("no unit written");
    let exe = std::fs::canonicalize(workroom_bin()).unwrap();
    assert!(text.contains(&format!("ExecStart=\"{}\" watch\n", exe.display())), "{text}");
    assert!(text.contains("Environment=\"DOCKER_HOST=unix:///run/test-engine.sock\"\n"), "{text}");

    let out = run("--uninstall");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!unit.exists(), "the unit is still there");
    assert!(stderr(&out).starts_with(&format!("removed {}", unit.display())), "{}", stderr(&out));
    let out = run("--uninstall");
    assert!(stderr(&out).contains("nothing to remove"), "{}", stderr(&out));
}
