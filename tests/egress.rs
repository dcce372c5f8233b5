//! Egress guardrails against the real engine: rooms in `allowlist` and
//! `none` mode, real servers on the host's loopback (HTTP, HTTPS, a git
//! repository over HTTP), and real clients in the room (python's urllib,
//! git, the real Claude Code), all through the room's proxy and the host's
//! policy. Nothing is mocked.

mod common;

use common::*;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long a host server started by a test may take to listen.
const SERVER_READY_WAIT: Duration = Duration::from_secs(20);
/// How long the real Claude Code gets to try the API once (it retries
/// with backoff; the first CONNECT comes within seconds).
const CLAUDE_TRY: Duration = Duration::from_secs(60);

/// A server process on the host's loopback, ended on drop.
struct HostServer {
    child: Child,
    port: u16,
}

impl HostServer {
    /// `python3 -m http.server` serving `dir` on a free loopback port.
    fn http(dir: &Path) -> HostServer {
        HostServer::http_on(dir, "127.0.0.1")
    }

    /// The same on `bind` (`0.0.0.0`: every address of the host's).
    fn http_on(dir: &Path, bind: &str) -> HostServer {
        let port = free_port();
        let child = Command::new("python3")
            .args(["-m", "http.server", &port.to_string(), "--bind", bind, "--directory"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start python3 http.server");
        HostServer::ready(child, port)
    }

    /// An HTTPS server with a certificate made for it now (self-signed).
    fn https(dir: &Path) -> HostServer {
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        let made = Command::new("openssl")
            .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=host.docker.internal"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .expect("run openssl");
        assert!(made.status.success(), "openssl: {}", stderr(&made));
        std::fs::write(dir.join("index.html"), "secure-hello\n").unwrap();
        let port = free_port();
        let script = format!(
            "import http.server, ssl, functools\n\
             h = functools.partial(http.server.SimpleHTTPRequestHandler, directory={dir:?})\n\
             s = http.server.ThreadingHTTPServer(('127.0.0.1', {port}), h)\n\
             c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain({cert:?}, {key:?})\n\
             s.socket = c.wrap_socket(s.socket, server_side=True)\n\
             s.serve_forever()\n",
            dir = dir.display().to_string(),
            cert = cert.display().to_string(),
            key = key.display().to_string(),
        );
        let child = Command::new("python3")
            .args(["-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the https server");
        HostServer::ready(child, port)
    }

    fn ready(child: Child, port: u16) -> HostServer {
        let server = HostServer { child, port };
        wait_for("a host server to listen", SERVER_READY_WAIT, || TcpStream::connect(("127.0.0.1", port)).is_ok());
        server
    }
}

impl Drop for HostServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The host's address on the engine's default bridge: the IPAM's gateway
/// when the engine names one (Docker 20.10 leaves it out), else the
/// bridge interface's own address.
fn bridge_gateway() -> String {
    let named = docker_ok(&["network", "inspect", "bridge", "-f", "{{range .IPAM.Config}}{{.Gateway}}{{end}}"]);
    if !named.is_empty() {
        return named;
    }
    let bridge =
        docker_ok(&["network", "inspect", "bridge", "-f", "{{index .Options \"com.docker.network.bridge.name\"}}"]);
    let out = Command::new("ip").args(["-4", "-o", "addr", "show", "dev", &bridge]).output().expect("run ip");
    let text = String::from_utf8_lossy(&out.stdout);
    let address = text.split_whitespace().nth(3).and_then(|a| a.split('/').next()).unwrap_or_default().to_string();
    assert!(!address.is_empty(), "no address on the engine's bridge {bridge}: {text}");
    address
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A folder served over HTTP holding `index.html` with `body`.
fn site(body: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), body).unwrap();
    dir
}

/// A room workspace with `egress` settings, its forwarder's files in a
/// state folder of its own.
struct Room {
    ws: Workspace,
    state: tempfile::TempDir,
}

impl Room {
    fn new(config: serde_json::Value, egress: &str) -> Room {
        let ws = Workspace::new(config).with_settings(&format!("peer_messaging = false\n{egress}"), false);
        let state = tempfile::tempdir().unwrap();
        let mut room = Room { ws, state };
        let home = room.state.path().display().to_string();
        room.ws.env = vec![
            ("XDG_STATE_HOME".into(), home.clone()),
            ("XDG_CONFIG_HOME".into(), home),
            ("GIT_CONFIG_GLOBAL".into(), "/dev/null".into()),
        ];
        room
    }

    fn workroom(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = self.ws.command(args);
        cmd.env_remove("SSH_AUTH_SOCK");
        output_within(cmd, None)
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.workroom(args);
        assert!(out.status.success(), "workroom {args:?}: {}{}", stdout(&out), stderr(&out));
        stdout(&out)
    }

    /// Runs a python program in the room as root; its stdout.
    fn python(&self, program: &str) -> String {
        self.ok(&["exec", "--", "python3", "-c", program])
    }

    /// The egress log as JSON objects.
    fn log(&self) -> Vec<serde_json::Value> {
        self.ok(&["egress", "log", "--json"]).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }
}

impl Drop for Room {
    fn drop(&mut self) {
        // The forwarder ends with its room; `down` removes both and the
        // room's policy and log files.
        let _ = self.workroom(&["down"]);
    }
}

/// A python program that GETs each URL and prints `URL -> STATUS BODY`
/// (the proxy's own answers included), one line each.
fn fetch_all(urls: &[String]) -> String {
    format!(
        "import urllib.request, ssl\n\
         ctx = ssl._create_unverified_context()\n\
         for url in {urls:?}:\n\
         \x20   try:\n\
         \x20       r = urllib.request.urlopen(url, timeout=20, context=ctx)\n\
         \x20       print(url, '->', r.status, r.read().decode().strip().replace('\\n', ' | '))\n\
         \x20   except urllib.error.HTTPError as e:\n\
         \x20       print(url, '->', e.code, e.read().decode().strip().replace('\\n', ' | '))\n\
         \x20   except Exception as e:\n\
         \x20       print(url, '->', 'error', e)\n"
    )
}

fn line_for<'a>(out: &'a str, url: &str) -> &'a str {
    out.lines().find(|l| l.starts_with(&format!("{url} "))).unwrap_or_else(|| panic!("no line for {url} in {out}"))
}

#[test]
fn an_allowlist_room_reaches_what_is_allowed_and_is_refused_the_rest_with_the_rule_to_add() {
    let (a, b, tls) = (site("server-a\n"), site("server-b\n"), tempfile::tempdir().unwrap());
    let (a, b, tls) = (HostServer::http(a.path()), HostServer::http(b.path()), HostServer::https(tls.path()));
    let settings = format!(
        "[egress]\nmode = \"allowlist\"\nallow = [\"host.docker.internal:{}\", \"host.docker.internal:{}\"]\n",
        a.port, tls.port
    );
    let room = Room::new(serde_json::json!({ "image": DEBIAN }), &settings);
    room.ok(&["up"]);

    let urls = [
        format!("http://host.docker.internal:{}/", a.port),
        format!("http://host.docker.internal:{}/", b.port),
        format!("https://host.docker.internal:{}/", tls.port),
    ];
    let out = room.python(&fetch_all(&urls));
    assert!(line_for(&out, &urls[0]).ends_with("-> 200 server-a"), "{out}");
    let refused = line_for(&out, &urls[1]);
    assert!(refused.contains("-> 403"), "{out}");
    assert!(refused.contains(&format!("workroom egress allow host.docker.internal:{}", b.port)), "{out}");
    assert!(line_for(&out, &urls[2]).ends_with("-> 200 secure-hello"), "HTTPS through CONNECT: {out}");

    let log = room.log();
    let entry = |port: u16| {
        log.iter().find(|e| e["port"] == port).unwrap_or_else(|| panic!("no log entry for port {port}: {log:?}"))
    };
    assert_eq!(entry(a.port)["outcome"], "allowed");
    assert_eq!(entry(a.port)["method"], "GET");
    assert!(entry(a.port)["received"].as_u64().unwrap() > 0);
    assert_eq!(entry(b.port)["outcome"], "refused");
    assert_eq!(entry(tls.port)["outcome"], "allowed");
    assert_eq!(entry(tls.port)["method"], "CONNECT");
    let summary = room.ok(&["egress", "log"]);
    assert!(
        summary.contains(&format!("host.docker.internal:{}", b.port)) && summary.contains("refused, by host"),
        "{summary}"
    );
}

#[test]
fn direct_attempts_from_root_in_an_allowlist_room_find_no_route_and_nothing_is_logged_as_allowed() {
    let a = site("server-a\n");
    let a = HostServer::http(a.path());
    let room = Room::new(serde_json::json!({ "image": DEBIAN }), "[egress]\nmode = \"allowlist\"\nallow = []\n");
    room.ok(&["up"]);
    let gateway = bridge_gateway();
    let host_address = String::from_utf8(Command::new("hostname").arg("-I").output().unwrap().stdout).unwrap();
    let host_address = host_address.split_whitespace().next().unwrap().to_string();
    let program = format!(
        "import socket\n\
         for addr in [({gateway:?}, {port}), ({host_address:?}, {port}), ('127.0.0.1', {port})]:\n\
         \x20   s = socket.socket(); s.settimeout(5)\n\
         \x20   try:\n\
         \x20       s.connect(addr); print(addr[0], 'connected')\n\
         \x20   except OSError as e:\n\
         \x20       print(addr[0], 'refused', e.errno)\n\
         u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3)\n\
         try:\n\
         \x20   u.sendto(b'\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x07example\\x03com\\x00\\x00\\x01\\x00\\x01', ('8.8.8.8', 53))\n\
         \x20   u.recvfrom(512); print('dns answered')\n\
         except OSError as e:\n\
         \x20   print('dns refused', e.errno)\n\
         print('interfaces', sorted(n for _, n in socket.if_nameindex()))\n",
        port = a.port
    );
    let out = room.python(&program);
    // ENETUNREACH (101) for every address outside: no route at all. The
    // room's own loopback has nothing on that port (ECONNREFUSED, 111).
    let said = |addr: &str| out.lines().find(|l| l.split(' ').next() == Some(addr)).unwrap_or_default().to_string();
    for addr in [gateway.as_str(), host_address.as_str()] {
        assert!(!addr.is_empty());
        assert_eq!(said(addr), format!("{addr} refused 101"), "{out}");
    }
    assert_eq!(said("127.0.0.1"), "127.0.0.1 refused 111", "{out}");
    assert!(out.contains("dns refused 101"), "{out}");
    assert!(out.contains("interfaces ['lo']"), "{out}");
    let whoami = room.ok(&["exec", "--", "id", "-u"]);
    assert_eq!(whoami.trim(), "0", "the attempts ran as root");
    let caps = room.ok(&["exec", "--", "grep", "CapEff", "/proc/self/status"]);
    // CAP_NET_ADMIN is bit 12: without it no interface or route can be added.
    let eff = u64::from_str_radix(caps.split_whitespace().last().unwrap(), 16).unwrap();
    assert_eq!(eff & (1 << 12), 0, "root in the room has no NET_ADMIN: {caps}");
    assert!(room.log().iter().all(|e| e["outcome"] != "allowed"), "{:?}", room.log());
}

#[test]
fn egress_allow_on_a_running_room_lets_the_next_request_through_and_deny_takes_it_back() {
    let a = site("server-a\n");
    let a = HostServer::http(a.path());
    let room = Room::new(serde_json::json!({ "image": DEBIAN }), "[egress]\nmode = \"allowlist\"\n");
    room.ok(&["up"]);
    let url = format!("http://host.docker.internal:{}/", a.port);
    let rule = format!("host.docker.internal:{}", a.port);
    let fetch = fetch_all(std::slice::from_ref(&url));
    assert!(line_for(&room.python(&fetch), &url).contains("-> 403"));
    let shown = room.ok(&["egress", "allow", &rule]);
    assert!(shown.contains(&format!("allow {rule}")) && shown.contains("(egress allow)"), "{shown}");
    assert!(line_for(&room.python(&fetch), &url).ends_with("-> 200 server-a"));
    room.ok(&["egress", "deny", &rule]);
    assert!(line_for(&room.python(&fetch), &url).contains("-> 403"));
    let policy: serde_json::Value = serde_json::from_str(&room.ok(&["egress", "--json"])).unwrap();
    assert_eq!(policy["denied"], serde_json::json!([rule]));
    assert_eq!(policy["mode"], "allowlist");
    let bad = room.workroom(&["egress", "allow", "*.*.example"]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("*.*.example"), "{}", stderr(&bad));
}

#[test]
fn git_clones_over_http_through_the_proxy_only_from_an_allowed_host() {
    let served = tempfile::tempdir().unwrap();
    let work = served.path().join("work");
    let git = |dir: &Path, args: &[&str]| {
        let out =
            Command::new("git").current_dir(dir).args(args).env("GIT_CONFIG_GLOBAL", "/dev/null").output().unwrap();
        assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
    };
    std::fs::create_dir(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    std::fs::write(work.join("README"), "cloned-through-the-proxy\n").unwrap();
    git(&work, &["add", "README"]);
    git(&work, &["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "one"]);
    git(served.path(), &["clone", "-q", "--bare", "work", "repo.git"]);
    git(&served.path().join("repo.git"), &["update-server-info"]);
    let server = HostServer::http(served.path());
    let room = Room::new(
        serde_json::json!({ "image": DEBIAN }),
        &format!("[egress]\nmode = \"allowlist\"\nallow = [\"host.docker.internal:{}\"]\n", server.port),
    );
    room.ok(&["up"]);
    let url = format!("http://host.docker.internal:{}/repo.git", server.port);
    room.ok(&["exec", "--", "git", "clone", "-q", &url, "/tmp/cloned"]);
    assert_eq!(room.ok(&["exec", "--", "cat", "/tmp/cloned/README"]), "cloned-through-the-proxy\n");
    let denied =
        room.workroom(&["exec", "--", "git", "clone", "-q", "http://host.docker.internal:9/repo.git", "/tmp/no"]);
    assert!(!denied.status.success());
    assert!(stderr(&denied).contains("403"), "git names the proxy's refusal: {}", stderr(&denied));
}

#[test]
fn the_real_claude_code_is_refused_the_api_without_the_preset_and_dialled_with_it() {
    let claude = common::claude::binary();
    let config = serde_json::json!({
        "image": DEBIAN,
        "mounts": [format!("type=bind,source={},target=/usr/local/bin/claude,readonly", claude.display())],
        "containerEnv": { "ANTHROPIC_API_KEY": "sk-ant-workroom-test-0000", "DISABLE_AUTOUPDATER": "1" },
    });
    let room = Room::new(config, "[egress]\nmode = \"allowlist\"\n");
    room.ok(&["up"]);
    let api = |room: &Room| -> Vec<serde_json::Value> {
        room.log().into_iter().filter(|e| e["host"] == "api.anthropic.com" && e["port"] == 443).collect()
    };
    // Claude Code retries with backoff for minutes: it is stopped once the
    // log shows what it asked, or after its try.
    // Its requests after `since` (ms since the epoch, the host's clock,
    // which the forwarder's log uses too): the first run's late retries
    // are not the second's.
    let ask = |room: &Room, since: u64| {
        let pid = room.ok(&["exec", "--", "sh", "-c", "claude -p hello </dev/null >/tmp/claude.out 2>&1 & echo $!"]);
        let after = |a: Vec<serde_json::Value>| -> Vec<serde_json::Value> {
            a.into_iter().filter(|e| e["time_ms"].as_u64().is_some_and(|t| t >= since)).collect()
        };
        let asked = wait_until(CLAUDE_TRY, || Some(after(api(room))).filter(|a| !a.is_empty()));
        room.ok(&["exec", "--", "kill", pid.trim()]);
        asked.unwrap_or_else(|| {
            panic!("Claude Code asked nothing of the proxy: {}", room.ok(&["exec", "--", "cat", "/tmp/claude.out"]))
        })
    };

    let first = ask(&room, 0);
    assert!(first.iter().all(|e| e["method"] == "CONNECT" && e["outcome"] == "refused"), "{first:?}");

    room.ok(&["egress", "allow", "@claude"]);
    let allowed_at = workroomd::clock::now_ms();
    let after = ask(&room, allowed_at);
    let dialled: Vec<_> = after.iter().filter(|e| e["outcome"] != "refused").collect();
    assert!(!dialled.is_empty(), "with @claude the CONNECT is dialled: {after:?}");
    // Offline here: the host cannot resolve the name, and says so.
    assert!(
        dialled.iter().all(|e| e["outcome"] == "failed" && e["reason"].as_str().unwrap_or_default().contains("DNS")),
        "{dialled:?}"
    );
    assert_eq!(dialled[0]["rule"], "api.anthropic.com:443");
}

#[test]
fn a_none_room_has_no_route_and_no_proxy() {
    let room = Room::new(serde_json::json!({ "image": DEBIAN }), "[egress]\nmode = \"none\"\n");
    room.ok(&["up"]);
    let env = room.ok(&["exec", "--", "env"]);
    assert!(!env.to_ascii_lowercase().contains("proxy="), "{env}");
    let out = room.python(
        "import socket\n\
         s = socket.socket(); s.settimeout(3)\n\
         try:\n    s.connect(('127.0.0.1', 3128)); print('proxy')\n\
         except OSError as e:\n    print('no proxy', e.errno)\n\
         print(sorted(n for _, n in socket.if_nameindex()))\n",
    );
    assert_eq!(out, "no proxy 111\n['lo']\n");
    let shown = room.workroom(&["egress"]);
    assert!(!shown.status.success() && stderr(&shown).contains("`none`"), "{}", stderr(&shown));
}

#[test]
fn a_bad_allow_pattern_is_refused_naming_the_file_and_line_and_nothing_is_made() {
    let room = Room::new(
        serde_json::json!({ "image": DEBIAN }),
        "[egress]\nmode = \"allowlist\"\nallow = [\n  \"ok.example\",\n  \"a..b\",\n]\n",
    );
    let out = room.workroom(&["up"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(".workroom.toml") && err.contains("a..b") && err.contains("line 6"), "{err}");
    assert!(room.ws.containers().is_empty());
}

#[test]
fn a_room_made_open_is_not_taken_for_an_allowlist_room() {
    let room = Room::new(serde_json::json!({ "image": BUSYBOX }), "");
    room.ok(&["up"]);
    let out = room.workroom(&["up", "--egress", "allowlist"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--recreate") && stderr(&out).contains("`open`"), "{}", stderr(&out));
    let remade = room.ok(&["up", "--egress", "allowlist", "--recreate", "--json"]);
    let result: serde_json::Value = serde_json::from_str(remade.lines().last().unwrap()).unwrap();
    assert_eq!(result["egress"], serde_json::json!({ "mode": "allowlist", "proxy": "http://127.0.0.1:3128" }));
    let id = result["containerId"].clone();
    let mode = docker_ok(&[
        "inspect",
        "-f",
        "{{.HostConfig.NetworkMode}} {{index .Config.Labels \"workroom.egress\"}}",
        id.as_str().unwrap(),
    ]);
    assert_eq!(mode, "none allowlist");
}

/// How long the forwarder may take to link to the room's new start, or to
/// its new daemon after a hand-off, and offer egress again.
const REJOIN_WAIT: Duration = Duration::from_secs(30);

#[test]
fn the_proxy_comes_back_by_itself_after_a_restart_of_the_room_and_a_hand_off() {
    let a = site("server-a\n");
    let a = HostServer::http(a.path());
    let room = Room::new(
        serde_json::json!({ "image": DEBIAN }),
        &format!("[egress]\nmode = \"allowlist\"\nallow = [\"host.docker.internal:{}\"]\n", a.port),
    );
    room.ok(&["up"]);
    let url = format!("http://host.docker.internal:{}/", a.port);
    let fetch = fetch_all(std::slice::from_ref(&url));
    let through = || {
        let out = room.workroom(&["exec", "--", "python3", "-c", &fetch]);
        (out.status.success() && line_for(&stdout(&out), &url).ends_with("-> 200 server-a")).then_some(())
    };
    assert!(through().is_some());

    docker_ok(&["restart", "-t", "1", &room.ws.room_name()]);
    assert!(wait_until(REJOIN_WAIT, through).is_some(), "no way out after the restart, with no workroom command run");

    room.ok(&["hand-off", "--force"]);
    assert!(wait_until(REJOIN_WAIT, through).is_some(), "no way out after the hand-off");
    let allowed = room.log().iter().filter(|e| e["outcome"] == "allowed").count();
    assert!(allowed >= 3, "{:?}", room.log());
}

#[test]
fn curl_and_pip_reach_an_allowed_server_through_the_proxy_and_are_refused_another() {
    // A package index of one wheel, as PyPI's simple API lays it out.
    let index = tempfile::tempdir().unwrap();
    let files = index.path().join("files");
    let project = index.path().join("simple/wrprobe");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    let wheel = "wrprobe-1.0-py3-none-any.whl";
    let made = Command::new("python3")
        .args(["-c", "import sys, zipfile\n\
              z = zipfile.ZipFile(sys.argv[1], 'w')\n\
              z.writestr('wrprobe/__init__.py', 'probe = 42\\n')\n\
              z.writestr('wrprobe-1.0.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: wrprobe\\nVersion: 1.0\\n')\n\
              z.writestr('wrprobe-1.0.dist-info/WHEEL', 'Wheel-Version: 1.0\\nGenerator: workroom-test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n\
              z.writestr('wrprobe-1.0.dist-info/RECORD', '')\n\
              z.close()\n"])
        .arg(files.join(wheel))
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", stderr(&made));
    std::fs::write(project.join("index.html"), format!("<a href=\"../../files/{wheel}\">{wheel}</a>\n")).unwrap();
    let allowed = HostServer::http(index.path());
    let other = site("server-b\n");
    let other = HostServer::http(other.path());
    let room = Room::new(
        serde_json::json!({ "image": DEBIAN }),
        &format!("[egress]\nmode = \"allowlist\"\nallow = [\"host.docker.internal:{}\"]\n", allowed.port),
    );
    room.ok(&["up"]);

    let host = |port: u16| format!("http://host.docker.internal:{port}");
    let pip = |port: u16| {
        room.workroom(&[
            "exec",
            "--",
            "python3",
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "--trusted-host",
            "host.docker.internal",
            "--index-url",
            &format!("{}/simple/", host(port)),
            "-d",
            "/tmp/dl",
            "wrprobe",
        ])
    };
    let got = pip(allowed.port);
    assert!(got.status.success(), "pip through the proxy: {}{}", stdout(&got), stderr(&got));
    assert_eq!(room.ok(&["exec", "--", "ls", "/tmp/dl"]).trim(), wheel);
    // pip reads the proxy's 403 for the index page as an index with no
    // versions; the log says what happened.
    let refused = pip(other.port);
    assert!(!refused.status.success(), "{}", stdout(&refused));
    assert!(stderr(&refused).contains("No matching distribution"), "{}", stderr(&refused));

    let curl = |url: String| room.ok(&["exec", "--", "curl", "-sS", "-w", " %{http_code}", &url]);
    assert!(curl(format!("{}/simple/wrprobe/", host(allowed.port))).ends_with(" 200"));
    let said = curl(format!("{}/", host(other.port)));
    assert!(said.ends_with(" 403"), "{said}");
    assert!(said.contains(&format!("workroom egress allow host.docker.internal:{}", other.port)), "{said}");
    let log = room.log();
    assert!(log.iter().any(|e| e["port"] == allowed.port && e["outcome"] == "allowed"), "{log:?}");
    assert!(log.iter().filter(|e| e["port"] == other.port).all(|e| e["outcome"] == "refused"), "{log:?}");
}

#[test]
fn on_a_local_engine_each_connection_is_handed_to_the_host_and_rides_the_link_when_the_socket_is_gone() {
    let a = site("server-a\n");
    let a = HostServer::http(a.path());
    let settings = format!("[egress]\nmode = \"allowlist\"\nallow = [\"host.docker.internal:{}\"]\n", a.port);
    let room = Room::new(serde_json::json!({ "image": DEBIAN }), &settings);
    room.ok(&["up"]);
    let url = format!("http://host.docker.internal:{}/", a.port);
    let fetch = fetch_all(std::slice::from_ref(&url));
    assert!(line_for(&room.python(&fetch), &url).ends_with("-> 200 server-a"));
    // Root in the room cannot put anything of its own in the host's folder.
    let touched = room.workroom(&["exec", "--", "touch", "/.workroom/egress/mine"]);
    assert!(!touched.status.success(), "the egress socket's folder is read-only in the room");

    // The forwarder's socket gone: the daemon's connect fails, and the
    // same request goes over the link.
    let socket = room.state.path().join("workroom/egress").join(format!("{}.d/proxy.sock", room.ws.room_name()));
    assert!(socket.exists(), "the forwarder listens at {}", socket.display());
    std::fs::remove_file(&socket).unwrap();
    assert!(line_for(&room.python(&fetch), &url).ends_with("-> 200 server-a"));

    let via: Vec<String> = room.log().iter().map(|e| e["via"].as_str().unwrap_or("none").to_string()).collect();
    assert_eq!(via, ["socket", "link"], "how each request came to the host");
    let log = room.log();
    assert_eq!(log[0]["received"], log[1]["received"], "both ways count the same answer's bytes: {log:?}");
}

/// A compose room in a workspace of its own: `.devcontainer/` holds
/// devcontainer.json and docker-compose.yml (`app`, the room, and what
/// `siblings` adds), `.workroom.toml` the egress settings, and the state
/// folder (override file, policy, log) is the test's. `down` on drop, then
/// whatever of the project is left, by compose's label.
struct ComposeRoom {
    dir: tempfile::TempDir,
    state: tempfile::TempDir,
}

/// The room's service: the debian fixture, the workspace at `/workspace`.
const COMPOSE_APP: &str = "  app:\n    image: workroom-fixture/debian:bookworm\n    command: sleep infinity\n    \
                           volumes: [\"..:/workspace\"]\n    labels: [\"workroom.test=1\"]\n";
/// A sibling: busybox httpd serving `/etc` on 8080, so the room fetches
/// `/hostname` by the service's name.
const COMPOSE_DB: &str = "  db:\n    image: workroom-fixture/busybox:1\n    \
                          command: [\"httpd\", \"-f\", \"-p\", \"8080\", \"-h\", \"/etc\"]\n    \
                          labels: [\"workroom.test=1\"]\n";

impl ComposeRoom {
    fn new(services: &str, egress: &str) -> ComposeRoom {
        let dir = tempfile::Builder::new().prefix("wr-egress-compose-").tempdir().unwrap();
        let folder = dir.path().join(".devcontainer");
        std::fs::create_dir(&folder).unwrap();
        let config = serde_json::json!({
            "dockerComposeFile": "docker-compose.yml", "service": "app", "workspaceFolder": "/workspace",
        });
        std::fs::write(folder.join("devcontainer.json"), config.to_string()).unwrap();
        std::fs::write(folder.join("docker-compose.yml"), format!("services:\n{services}")).unwrap();
        std::fs::write(dir.path().join(".workroom.toml"), format!("peer_messaging = false\n{egress}")).unwrap();
        ComposeRoom { dir, state: tempfile::tempdir().unwrap() }
    }

    /// `<folder>_devcontainer`, as compose names it.
    fn project(&self) -> String {
        format!("{}_devcontainer", self.dir.path().file_name().unwrap().to_string_lossy().to_lowercase())
    }

    fn workroom(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = Command::new(workroom_bin());
        let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
        cmd.args(&args[..split]).arg("--workspace-folder").arg(self.dir.path()).args(&args[split..]);
        let home = self.state.path();
        cmd.env("XDG_STATE_HOME", home).env("XDG_CONFIG_HOME", home).env_remove("SSH_AUTH_SOCK");
        output_within(cmd, None)
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.workroom(args);
        assert!(out.status.success(), "workroom {args:?}: {}{}", stdout(&out), stderr(&out));
        stdout(&out)
    }

    /// `kind` (`ps -a`, `network ls`) of the project, by compose's label.
    fn objects(&self, kind: &[&str]) -> Vec<String> {
        let filter = format!("label=com.docker.compose.project={}", self.project());
        let mut args = kind.to_vec();
        args.extend(["-q", "--filter", &filter]);
        docker_ok(&args).lines().map(str::to_string).collect()
    }

    /// The container of service `service`.
    fn service(&self, service: &str) -> String {
        let filter = format!("label=com.docker.compose.service={service}");
        let project = format!("label=com.docker.compose.project={}", self.project());
        docker_ok(&["ps", "-q", "--filter", &project, "--filter", &filter])
    }
}

impl Drop for ComposeRoom {
    fn drop(&mut self) {
        let _ = self.workroom(&["down"]);
        for id in self.objects(&["ps", "-a"]) {
            let _ = docker(&["rm", "-f", "-v", &id]);
        }
        for id in self.objects(&["network", "ls"]) {
            let _ = docker(&["network", "rm", &id]);
        }
    }
}

/// A python program run as root in a room: a TCP connect to each address,
/// all at once (`ADDR connected`, or `ADDR errno N`), then whether a
/// packet socket, which hand-made frames need, can be made.
fn direct_attempts(addresses: &[(String, u16)]) -> String {
    format!(
        "import socket, os, threading\n\
         print('uid', os.getuid())\n\
         said = {{}}\n\
         def attempt(addr):\n\
         \x20   s = socket.socket(); s.settimeout(8)\n\
         \x20   try:\n\
         \x20       s.connect(addr); said[addr] = 'connected'\n\
         \x20   except OSError as e:\n\
         \x20       said[addr] = 'errno %s' % e.errno\n\
         ts = [threading.Thread(target=attempt, args=(a,)) for a in {addresses:?}]\n\
         [t.start() for t in ts]; [t.join() for t in ts]\n\
         for addr in {addresses:?}:\n\
         \x20   print(addr[0], said[addr])\n\
         try:\n\
         \x20   socket.socket(socket.AF_PACKET, socket.SOCK_RAW); print('packet socket made')\n\
         except OSError as e:\n\
         \x20   print('packet socket errno', e.errno)\n"
    )
}

/// The host's first address (`hostname -I`).
fn host_address() -> String {
    let out = String::from_utf8(Command::new("hostname").arg("-I").output().unwrap().stdout).unwrap();
    out.split_whitespace().next().expect("the host has an address").to_string()
}

/// What no service of an egress-held project may reach: the project
/// network's gateway, the engine's default bridge, the host's address
/// (`port` is a host server listening on every address) and 8.8.8.8.
fn outside(room: &ComposeRoom, port: u16) -> Vec<(String, u16)> {
    let network = format!("{}_default", room.project());
    let gateway = docker_ok(&["network", "inspect", &network, "-f", "{{range .IPAM.Config}}{{.Gateway}}{{end}}"]);
    assert!(!gateway.is_empty(), "{network} names its gateway");
    vec![(gateway, port), (bridge_gateway(), port), (host_address(), port), ("8.8.8.8".to_string(), 53)]
}

/// EHOSTUNREACH (113: no one answers for the gateway on a bridge where
/// the host has no address) or ENETUNREACH (101).
fn unreachable(line: &str) -> bool {
    line.ends_with(" errno 113") || line.ends_with(" errno 101")
}

#[test]
fn a_compose_room_in_allowlist_mode_reaches_its_sibling_by_name_and_the_host_only_through_the_proxy() {
    let (a, b) = (site("server-a\n"), site("server-b\n"));
    let (a, b) = (HostServer::http(a.path()), HostServer::http(b.path()));
    // One more, on every address of the host, for the direct attempts.
    let wide = site("wide-open\n");
    let wide = HostServer::http_on(wide.path(), "0.0.0.0");
    let room = ComposeRoom::new(
        &format!("{COMPOSE_APP}{COMPOSE_DB}"),
        &format!("[egress]\nmode = \"allowlist\"\nallow = [\"host.docker.internal:{}\"]\n", a.port),
    );
    room.ok(&["up"]);
    let network = format!("{}_default", room.project());
    let made = docker_ok(&["network", "inspect", &network, "-f", "{{.Internal}} {{.EnableIPv6}} {{json .Options}}"]);
    assert_eq!(made, "true false {\"com.docker.network.bridge.inhibit_ipv4\":\"true\"}");

    let env = room.ok(&["exec", "--", "sh", "-c", "echo $NO_PROXY"]);
    assert_eq!(env.trim(), "localhost,127.0.0.1,::1,app,db");
    // The sibling directly, by name (NO_PROXY); the host through the proxy.
    let urls = [
        "http://db:8080/hostname".to_string(),
        format!("http://host.docker.internal:{}/", a.port),
        format!("http://host.docker.internal:{}/", b.port),
    ];
    let out = room.ok(&["exec", "--", "python3", "-c", &fetch_all(&urls)]);
    assert!(line_for(&out, &urls[0]).contains("-> 200 "), "{out}");
    assert!(line_for(&out, &urls[1]).ends_with("-> 200 server-a"), "{out}");
    assert!(line_for(&out, &urls[2]).contains("-> 403"), "{out}");
    let log: Vec<serde_json::Value> =
        room.ok(&["egress", "log", "--json"]).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(log.iter().all(|e| e["host"] != "db"), "the sibling is not reached through the proxy: {log:?}");
    assert!(log.iter().all(|e| e["via"] == "socket"), "handed to the host through the room's socket: {log:?}");

    // Root in the room, directly: no route to anything outside.
    let targets = outside(&room, wide.port);
    let out = room.ok(&["exec", "--", "python3", "-c", &direct_attempts(&targets)]);
    assert!(out.starts_with("uid 0\n"), "{out}");
    for (address, _) in &targets {
        let line = out.lines().find(|l| l.starts_with(&format!("{address} "))).unwrap_or_default();
        assert!(unreachable(line), "{address}: {out}");
    }
    assert!(out.contains("packet socket errno 1"), "NET_RAW is dropped: {out}");

    // The sibling cannot get out either, nor make frames of its own.
    let db = room.service("db");
    let tries: Vec<String> =
        targets.iter().map(|(a, p)| format!("(nc -w 8 {a} {p} </dev/null && echo {a} reached) &")).collect();
    let tried = docker(&["exec", &db, "sh", "-c", &format!("{} wait", tries.join(" "))]);
    assert!(tried.status.success(), "{}", stderr(&tried));
    assert_eq!(stdout(&tried), "", "the sibling reached an address outside");
    assert_eq!(stderr(&tried).matches("can't connect").count(), targets.len(), "{}", stderr(&tried));
    let caps = docker_ok(&["exec", &db, "grep", "CapEff", "/proc/self/status"]);
    let eff = u64::from_str_radix(caps.split_whitespace().last().unwrap(), 16).unwrap();
    // CAP_NET_RAW is bit 13.
    assert_eq!(eff & (1 << 13), 0, "the sibling has no NET_RAW: {caps}");

    room.ok(&["down"]);
    assert_eq!(room.objects(&["network", "ls"]), Vec::<String>::new(), "down removes the project's network");
}

#[test]
fn a_compose_room_in_none_mode_reaches_its_siblings_and_nothing_else() {
    let wide = site("wide-open\n");
    let wide = HostServer::http_on(wide.path(), "0.0.0.0");
    let room = ComposeRoom::new(&format!("{COMPOSE_APP}{COMPOSE_DB}"), "[egress]\nmode = \"none\"\n");
    room.ok(&["up"]);
    let env = room.ok(&["exec", "--", "env"]);
    assert!(!env.to_ascii_lowercase().contains("proxy="), "{env}");
    let sibling = "import urllib.request; print(urllib.request.urlopen('http://db:8080/hostname', timeout=10).status)";
    assert_eq!(room.ok(&["exec", "--", "python3", "-c", sibling]), "200\n");
    let mut targets = outside(&room, wide.port);
    targets.push(("127.0.0.1".to_string(), 3128));
    let out = room.ok(&["exec", "--", "python3", "-c", &direct_attempts(&targets)]);
    for (address, _) in &targets[..targets.len() - 1] {
        let line = out.lines().find(|l| l.starts_with(&format!("{address} "))).unwrap_or_default();
        assert!(unreachable(line), "{address}: {out}");
    }
    assert!(out.contains("127.0.0.1 errno 111"), "no proxy on the room's loopback: {out}");
    assert!(out.contains("packet socket errno 1"), "{out}");
}

#[test]
fn a_compose_service_with_a_way_around_the_internal_network_is_refused_in_one_line_and_nothing_is_made() {
    let host_db = COMPOSE_DB.replace("    labels:", "    network_mode: host\n    labels:");
    let room = ComposeRoom::new(&format!("{COMPOSE_APP}{host_db}"), "[egress]\nmode = \"allowlist\"\n");
    let out = room.workroom(&["up"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("docker-compose.yml") && err.contains("service \"db\" has `network_mode: host`"), "{err}");
    assert!(err.contains("--egress open"), "{err}");
    assert_eq!(room.objects(&["ps", "-a"]), Vec::<String>::new());
    assert_eq!(room.objects(&["network", "ls"]), Vec::<String>::new());
}
