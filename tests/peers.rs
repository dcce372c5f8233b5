//! Peer messaging against the real engine: rooms that take part share one
//! PID namespace (the anchor's), one socket folder and one session registry,
//! so an agent CLI in one room finds and messages an agent in another.
//!
//! Each test runs under its own `WORKROOM_SCOPE`, so it gets its own anchor
//! and socket volume, never touches a user's, and cleans up only what
//! carries its scope label.

mod common;
mod peer_support;

use common::*;
use peer_support::*;
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long an agent started in one room may take to appear in another's
/// `list` (python start-up plus a registry write; well under a second idle).
const AGENT_READY_WAIT: Duration = Duration::from_secs(20);
/// How long a delivered message may take to be printed by the receiver.
const MESSAGE_WAIT: Duration = Duration::from_secs(20);
/// How long the anchor may take to reap 50 exited orphans (SIGCHLD to
/// waitpid is microseconds; the margin is for a loaded CI machine).
const REAP_WAIT: Duration = Duration::from_secs(10);

/// The uid of `dev` in the Debian fixture image: the default group's key.
const DEV: u32 = 1000;

fn dev_room(scope: &PeerScope) -> Workspace {
    scope.workspace(serde_json::json!({ "image": DEBIAN, "remoteUser": "dev" }))
}

#[test]
fn the_gate_a_socket_bound_in_one_room_is_a_socket_in_another_and_its_pids_answer_there() {
    let scope = PeerScope::new("gate");
    let (a, b) = (dev_room(&scope), dev_room(&scope));
    a.up();
    b.up();
    // A real AF_UNIX bind and chmod, as the CLI does: a `touch` would pass
    // where a real bind fails (wrong owner, wrong mode, wrong fs).
    a.exec_ok(&[
        "python3",
        "-c",
        "import os, socket; s = socket.socket(socket.AF_UNIX); s.bind('/tmp/cc-socks/gate.sock'); \
         os.chmod('/tmp/cc-socks/gate.sock', 0o600)",
    ]);
    b.exec_ok(&["test", "-S", "/tmp/cc-socks/gate.sock"]);
    for room in [&a, &b] {
        assert_eq!(room.exec_ok(&["id", "-un"]).trim(), "dev", "the session user");
        assert_eq!(room.exec_ok(&["stat", "-c", "%a %U", "/tmp/cc-socks"]).trim(), "700 dev");
    }
    let pid = a.exec_ok(&["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"]).trim().to_string();
    assert!(pid.parse::<u32>().is_ok(), "{pid:?}");
    b.exec_ok(&["kill", "-0", &pid]);
    // Both rooms joined the anchor, which Docker records by id.
    let anchor_id = inspect(&scope.anchor("default", DEV), "{{.Id}}");
    assert_eq!(inspect(&a.room_name(), "{{.HostConfig.PidMode}}"), format!("container:{anchor_id}"));
}

#[test]
fn an_agent_in_one_room_lists_and_messages_an_agent_in_another_and_a_room_without_peers_sees_neither() {
    let scope = PeerScope::new("e2e");
    let (a, b) = (dev_room(&scope), dev_room(&scope));
    a.up();
    b.up();
    let mut serve = Command::new(workroom_bin());
    serve
        .args(["exec", "--workspace-folder", &b.folder(), "--", "python3", "-u", "agent.py", "serve", "--name", "bee"])
        .envs(b.env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut serve = serve.spawn().unwrap();
    let (lines_tx, lines) = mpsc::channel();
    let stdout = serve.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    eventually("bee in ant's `agent.py list`", AGENT_READY_WAIT, || {
        a.exec_ok(&["python3", "agent.py", "list"]).lines().any(|l| l.starts_with("bee "))
    });
    a.exec_ok(&["python3", "agent.py", "send", "bee", "hello from a", "--from", "ant"]);
    let got = lines.recv_timeout(MESSAGE_WAIT).expect("bee printed the message");
    assert_eq!(got, "bee got: hello from a from ant");

    // The same project with `--peer=false`: another room, apart.
    let mut c = dev_room(&scope);
    let up = c.workroom(&["up", "--peer=false"]);
    assert!(up.status.success(), "{}", stderr(&up));
    c.peer = false;
    let mode = inspect(&c.room_name(), "{{.HostConfig.PidMode}}");
    assert!(own_pid_namespace(&mode), "a room without peers has its own PID namespace: {mode}");
    assert_eq!(c.exec_ok(&["python3", "agent.py", "list"]), "", "no peer is visible without peers");
    let send = c.exec(&["python3", "agent.py", "send", "bee", "hi"]);
    assert_eq!(send.status.code(), Some(1), "{}", stderr(&send));
    let _ = serve.kill();
    let _ = serve.wait();
}

#[test]
fn a_room_that_cannot_get_the_anchor_starts_without_peers_and_reattach_says_it_sees_no_peers() {
    let scope = PeerScope::new("degrade");
    // The anchor's name taken by a container workroom did not make.
    docker_ok(&[
        "create",
        "--name",
        &scope.anchor("default", DEV),
        "--label",
        &format!("workroom.scope={}", scope.scope),
        "--label",
        &format!("{TEST_LABEL}=1"),
        BUSYBOX,
        "true",
    ]);
    let ws = dev_room(&scope);
    let up = ws.workroom(&["up"]);
    assert!(up.status.success(), "up is never blocked by peers: {}", stderr(&up));
    let err = stderr(&up);
    assert!(err.contains("starts without peer messaging") && err.contains("not made by workroom"), "{err}");
    let mode = inspect(&ws.room_name(), "{{.HostConfig.PidMode}}");
    assert!(own_pid_namespace(&mode), "a room without peers has its own PID namespace: {mode}");
    assert_eq!(ws.exec_ok(&["echo", "ok"]).trim(), "ok", "the room works");
    let again = ws.workroom(&["up"]);
    assert!(again.status.success(), "{}", stderr(&again));
    let err = stderr(&again);
    let remake = format!("`workroom up --recreate` makes {} anew", ws.room_name());
    assert!(err.contains("will see no peers") && err.contains(&remake), "{err}");
    // Said on every `up` while it holds, the fast path too.
    let third = ws.workroom(&["up"]);
    assert!(stderr(&third).contains("will see no peers"), "{}", stderr(&third));
}

#[test]
fn list_hides_the_peer_anchor() {
    let scope = PeerScope::new("list");
    let ws = dev_room(&scope);
    ws.up();
    assert_eq!(inspect(&scope.anchor("default", DEV), "{{.State.Running}}"), "true");
    let out = scope.workroom(&["list", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = listed.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, [ws.room_name().as_str()], "only this scope's room, not its anchor");
}

#[test]
fn stop_all_sweeps_the_peer_anchor_and_the_next_up_brings_it_back() {
    let scope = PeerScope::new("stop");
    let ws = dev_room(&scope);
    ws.up();
    // Scoped: stops this test's room and anchor only, not other tests' rooms.
    let out = ws.workroom(&["stop", "--all"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    let anchor = scope.anchor("default", DEV);
    let (room_at, anchor_at) = (err.find(&ws.room_name()).unwrap(), err.find(&anchor).unwrap());
    assert!(room_at < anchor_at, "rooms first, the anchor last: {err}");
    assert_eq!(inspect(&anchor, "{{.State.Running}}"), "false");
    assert_eq!(inspect(&ws.room_name(), "{{.State.Running}}"), "false");
    ws.up();
    assert_eq!(inspect(&anchor, "{{.State.Running}}"), "true");
    assert_eq!(ws.exec_ok(&["echo", "back"]).trim(), "back");
}

#[test]
fn a_room_that_orphans_50_children_leaves_no_zombie() {
    let scope = PeerScope::new("reap");
    let ws = dev_room(&scope);
    ws.up();
    // An orphan's parent is the anchor, PID 1 of the shared namespace: so
    // no zombie below means the anchor reaped them (nothing else could).
    let ppid = ws.exec_ok(&["sh", "-c", "(sleep 30 >/dev/null 2>&1 &); sleep 0.2; ps -o ppid= -C sleep | head -1"]);
    assert_eq!(ppid.trim(), "1", "orphans are the anchor's");
    assert_eq!(ws.exec_ok(&["ps", "-o", "comm=", "-p", "1"]).trim(), "workroomd");
    ws.exec_ok(&["sh", "-c", "for i in $(seq 50); do (sleep 0 &) ; done"]);
    eventually("no zombie in the shared namespace", REAP_WAIT, || {
        ws.exec_ok(&["ps", "-eo", "stat="]).lines().all(|s| !s.starts_with('Z'))
    });
}

#[test]
fn a_room_whose_user_would_not_own_the_socket_folder_is_warned_at_every_up() {
    let scope = PeerScope::new("owner");
    // The group's volume, made by hand for root: dev's agents would fall
    // back to a private folder.
    let volume = scope.volume("default", DEV);
    docker_ok(&[
        "volume",
        "create",
        "--label",
        &format!("workroom.scope={}", scope.scope),
        "--label",
        "workroom.peer.owner=0:0",
        &volume,
    ]);
    let dev = dev_room(&scope);
    let first = dev.up();
    let said = |out: &std::process::Output| {
        let err = stderr(out);
        err.contains("dev runs as 1000:1000") && err.contains("belongs to 0:0")
    };
    assert!(said(&first), "{}", stderr(&first));
    // The fast path (nothing due) says it again, from what `up` kept.
    let again = dev.up();
    assert!(said(&again), "{}", stderr(&again));
}

#[test]
fn a_named_room_with_peers_is_another_container_than_its_plain_namesake() {
    let scope = PeerScope::new("named");
    let tag = &scope.scope;
    let ws = dev_room(&scope);
    let up = ws.workroom(&["up", "--name", &format!("{tag}-infra"), "--peer"]);
    assert!(up.status.success(), "{}", stderr(&up));
    let plain = ws.workroom(&["up", "--name", &format!("{tag}-infra-peer"), "--peer=false"]);
    assert!(plain.status.success(), "{}", stderr(&plain));
    let peer_room = format!("workroom-{tag}-infra.peer");
    let plain_room = format!("workroom-{tag}-infra-peer");
    let anchor_id = inspect(&scope.anchor("default", DEV), "{{.Id}}");
    assert_eq!(inspect(&peer_room, "{{.HostConfig.PidMode}}"), format!("container:{anchor_id}"));
    let mode = inspect(&plain_room, "{{.HostConfig.PidMode}}");
    assert!(own_pid_namespace(&mode), "a room without peers has its own PID namespace: {mode}");
    remove_container(&peer_room);
    remove_container(&plain_room);
}

/// A peer room's restart is the one where the engine kept the dead relay's
/// stream open and the forwarder's link hung (ADR 0005): the forwarder
/// follows the engine's events instead, and links to the new start itself.
#[test]
fn after_a_docker_restart_of_a_peer_room_the_same_forwarder_forwards_its_ports_again_with_no_up() {
    let scope = PeerScope::new("fwd");
    let state = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut ws = scope.workspace(serde_json::json!({ "image": BUSYBOX, "forwardPorts": [port] }));
    ws.env.push(("XDG_STATE_HOME".into(), state.path().display().to_string()));
    ws.env.push(("XDG_CONFIG_HOME".into(), state.path().display().to_string()));
    let httpd = format!(
        "mkdir -p /www && echo hi > /www/index.html && (httpd -f -p 127.0.0.1:{port} -h /www >/dev/null 2>&1 &)"
    );
    ws.up();
    ws.exec_ok(&["sh", "-c", &httpd]);
    eventually("the forwarded port to answer", AGENT_READY_WAIT, || http_get(port, "/index.html").ends_with("hi\n"));
    let pid_file = state.path().join("workroom").join(format!("{}.pid", ws.room_name()));
    let forwarder = || std::fs::read_to_string(&pid_file).unwrap_or_default().trim().to_string();
    let alive = |pid: &str| !pid.is_empty() && std::path::Path::new(&format!("/proc/{pid}")).exists();
    let before = forwarder();
    // A connection held open through the forwarder across the restart: its
    // start's link may hang, so the forwarder closes it when the start ends.
    let mut held = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    held.set_read_timeout(Some(AGENT_READY_WAIT)).unwrap();
    docker_ok(&["restart", "-t", "1", &ws.room_name()]);
    let mut byte = [0u8; 1];
    let closed = std::io::Read::read(&mut held, &mut byte);
    assert!(matches!(closed, Ok(0)), "the connection held across the restart was not closed: {closed:?}");
    // Through the engine alone: no workroom command runs.
    docker_ok(&["exec", &ws.room_name(), "sh", "-c", &httpd]);
    eventually("the forwarded port to answer after the restart", AGENT_READY_WAIT, || {
        http_get(port, "/index.html").ends_with("hi\n")
    });
    assert_eq!(forwarder(), before, "the forwarder was replaced");
    assert!(alive(&before), "the forwarder is gone");
    // The next `up` takes it for this start's.
    ws.up();
    assert_eq!(forwarder(), before, "up replaced a forwarder that had followed the restart");
    docker_ok(&["rm", "-f", &ws.room_name()]);
    eventually("the forwarder to end with its room", AGENT_READY_WAIT, || !alive(&before));
}

/// `workroom ports` (which takes no workspace folder) as the workspace's runs see it.
fn ports_cmd(ws: &Workspace) -> Command {
    let mut cmd = Command::new(workroom_bin());
    cmd.arg("ports").envs(ws.env.iter().map(|(k, v)| (k, v)));
    cmd
}

#[test]
fn after_a_docker_restart_of_a_peer_room_the_same_forwarder_carries_the_ssh_agent_again_and_ports_says_so() {
    let scope = PeerScope::new("agent");
    let state = tempfile::tempdir().unwrap();
    let (agent, fingerprint) = common::ssh_agent::Agent::with_key();
    let mut ws = scope.workspace(serde_json::json!({ "image": DEBIAN, "remoteUser": "dev" }));
    ws.env.push(("XDG_STATE_HOME".into(), state.path().display().to_string()));
    ws.env.push(("XDG_CONFIG_HOME".into(), state.path().display().to_string()));
    ws.env.push(("SSH_AUTH_SOCK".into(), agent.sock().display().to_string()));
    ws.up();
    assert!(ws.exec_ok(&["ssh-add", "-l"]).contains(&fingerprint));
    let pid_file = state.path().join("workroom").join(format!("{}.pid", ws.room_name()));
    let forwarder = || std::fs::read_to_string(&pid_file).unwrap_or_default().trim().to_string();
    let alive = |pid: &str| !pid.is_empty() && std::path::Path::new(&format!("/proc/{pid}")).exists();
    let before = forwarder();
    assert!(alive(&before), "up started no forwarder for the agent");

    docker_ok(&["restart", "-t", "1", &ws.room_name()]);
    // `exec` starts no forwarder: what it reaches is the one that followed.
    eventually("ssh-add -l to list the key after the restart", AGENT_READY_WAIT, || {
        stdout(&ws.exec(&["ssh-add", "-l"])).contains(&fingerprint)
    });
    assert_eq!(forwarder(), before, "the forwarder was replaced");
    let ports = stdout(&output_within(ports_cmd(&ws), None));
    let row = ports.lines().find(|l| l.contains(&ws.room_name()) && l.contains("ssh-agent"));
    assert!(row.is_some_and(|r| r.contains(&before) && !r.contains("between starts")), "{ports}");
    docker_ok(&["rm", "-f", &ws.room_name()]);
    eventually("the forwarder to end with its room", AGENT_READY_WAIT, || !alive(&before));
}

/// `up` in each of `rooms` at once; every one succeeds and joins its group.
fn up_at_once_all_joining(rooms: &[Workspace], what: &str) {
    let ups: Vec<_> = rooms
        .iter()
        .map(|ws| {
            let cmd = ws.command(&["up"]);
            std::thread::spawn(move || output_within(cmd, None))
        })
        .collect();
    for up in ups {
        let out = up.join().unwrap();
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        assert!(!stderr(&out).contains("without peer messaging"), "{what}: {}", stderr(&out));
    }
}

/// Rooms of a new group at once race to create its anchor: the engine
/// reserves the name before the container can be inspected, and a loser
/// used to find nothing and start without peers ("was made by another `up`
/// and is gone again", 1 round in 3 of five rooms).
#[test]
fn rooms_brought_up_at_once_in_a_new_group_all_join_it() {
    for round in 0..3 {
        let scope = PeerScope::new(&format!("race{round}"));
        let rooms: Vec<Workspace> = (0..5).map(|_| scope.workspace(serde_json::json!({ "image": BUSYBOX }))).collect();
        up_at_once_all_joining(&rooms, &format!("round {round}"));
        let anchor_id = inspect(&scope.anchor("default", 0), "{{.Id}}");
        for ws in &rooms {
            let pid_mode = inspect(&room_in(ws, "default"), "{{.HostConfig.PidMode}}");
            assert_eq!(
                pid_mode,
                format!("container:{anchor_id}"),
                "round {round}: every room in the anchor's namespace"
            );
        }
    }
}

/// Ten rooms of a new group at once, as agents started side by side bring
/// them up: every `up` succeeds and joins, the engine holds one anchor, and
/// the group's socket volume is initialised once (each `up` used to find no
/// volume and run the initialising job: ten throwaway containers).
#[test]
fn ten_rooms_brought_up_at_once_in_a_new_group_make_one_anchor_and_initialise_its_volume_once() {
    const ROOMS: usize = 10;
    let scope = PeerScope::new("ten");
    // Events are asked for after the fact, from a second before the ups.
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() - 1;
    let rooms: Vec<Workspace> = (0..ROOMS).map(|_| scope.workspace(serde_json::json!({ "image": BUSYBOX }))).collect();
    up_at_once_all_joining(&rooms, "ten at once");
    let scoped = format!("label=workroom.scope={}", scope.scope);
    // By name: an anchor image imported before it stopped carrying a scope
    // label gives it to every anchor made from it, another scope's too.
    let named = format!("name=^{}$", scope.anchor("default", 0));
    let anchors = docker_ok(&["ps", "-aq", "--filter", &named, "--filter", "label=workroom.role=peer-anchor"]);
    assert_eq!(anchors.split_whitespace().count(), 1, "one anchor: {anchors}");
    let anchor_id = inspect(&scope.anchor("default", 0), "{{.Id}}");
    for ws in &rooms {
        let pid_mode = inspect(&room_in(ws, "default"), "{{.HostConfig.PidMode}}");
        assert_eq!(pid_mode, format!("container:{anchor_id}"), "every room in the anchor's namespace");
    }
    let until = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 1;
    let inits = docker_ok(&[
        "events",
        "--since",
        &since.to_string(),
        "--until",
        &until.to_string(),
        "--filter",
        &scoped,
        "--filter",
        "label=workroom.job=peer-volume-init",
        "--filter",
        "event=create",
        "--format",
        "{{.ID}}",
    ]);
    assert_eq!(inits.split_whitespace().count(), 1, "the volume initialised once: {inits}");
}

#[test]
fn a_missing_remote_or_container_user_with_peers_on_is_refused_in_one_line_without_a_peer_messaging_warning() {
    for property in ["remoteUser", "containerUser"] {
        let scope = PeerScope::new("nouser");
        let ws = scope.workspace(serde_json::json!({ "image": DEBIAN, property: "nosuchuser" }));
        let out = ws.workroom(&["up"]);
        assert_eq!(out.status.code(), Some(2), "{property}: {}", stderr(&out));
        let err = stderr(&out);
        let refusal =
            format!("`{property}` names user \"nosuchuser\", which the image does not have; the image's users are ");
        assert_eq!(err.lines().count(), 1, "{property}: the refusal is the only line: {err}");
        assert!(err.starts_with("workroom: ") && err.contains(&refusal), "{property}: {err}");
        assert_eq!(ws.containers(), Vec::<String>::new(), "{property}: no room is left");
        let filter = format!("label=workroom.scope={}", scope.scope);
        let volumes = docker_ok(&["volume", "ls", "-q", "--filter", &filter]);
        assert_eq!(volumes.trim(), "", "{property}: no volume is left");
    }
}
