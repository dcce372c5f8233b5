//! Peer groups as trust domains, against the real engine: a group is a name
//! and the uid its sessions run as, and rooms share a PID namespace, a
//! socket folder and a registry only within their group.

mod common;
mod peer_support;

use common::*;
use peer_support::*;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a started agent may take to register and bind (python start-up
/// plus a registry write; well under a second idle).
const AGENT_READY_WAIT: Duration = Duration::from_secs(20);
/// How long a delivered message may take to be printed by the receiver.
const MESSAGE_WAIT: Duration = Duration::from_secs(20);

const DEV: u32 = 1000;

fn dev() -> serde_json::Value {
    serde_json::json!({ "image": DEBIAN, "remoteUser": "dev" })
}

fn root() -> serde_json::Value {
    serde_json::json!({ "image": DEBIAN })
}

fn in_group(group: &str) -> String {
    format!("peer_group = {group:?}\n")
}

/// A program running in a room through `workroom exec`, its stdout lines
/// collected; killed on drop (the daemon then ends it in the room).
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Running {
    fn start(ws: &Workspace, argv: &[&str]) -> Running {
        let mut cmd = ws.command(&[&["exec", "--"][..], argv].concat());
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).stdin(Stdio::null()).spawn().unwrap();
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Running { child, lines }
    }

    fn agent(ws: &Workspace, name: &str) -> Running {
        Running::start(ws, &["python3", "-u", "agent.py", "serve", "--name", name])
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn agent_list(ws: &Workspace) -> Vec<String> {
    ws.exec_ok(&["python3", "agent.py", "list"]).lines().map(|l| l.split(' ').next().unwrap().to_string()).collect()
}

#[test]
fn two_uids_and_two_groups_share_sockets_pids_and_agents_only_within_their_own_group_and_uid() {
    let scope = PeerScope::new("two");
    let a_dev = scope.workspace_with(dev(), &in_group("a"));
    let a_dev2 = scope.workspace_with(dev(), &in_group("a"));
    let a_root = scope.workspace_with(root(), &in_group("a"));
    let a_root2 = scope.workspace_with(root(), &in_group("a"));
    let b_dev = scope.workspace_with(dev(), &in_group("b"));
    let rooms = [
        (&a_dev, "dev", DEV),
        (&a_dev2, "dev", DEV),
        (&a_root, "root", 0),
        (&a_root2, "root", 0),
        (&b_dev, "dev", DEV),
    ];
    for (ws, _, _) in rooms {
        ws.up();
    }
    // Each room's socket folder is 0700 and its own uid's: no first-comer.
    for (ws, user, uid) in rooms {
        let owner = ws.exec_ok(&["stat", "-c", "%a %u %U", "/tmp/cc-socks"]);
        assert_eq!(owner.trim(), format!("700 {uid} {user}"), "{}", ws.folder());
    }
    // Three groups (a/1000, a/0, b/1000): three anchors and volumes.
    for (group, uid) in [("a", DEV), ("a", 0), ("b", DEV)] {
        assert_eq!(inspect(&scope.anchor(group, uid), "{{.State.Running}}"), "true");
        assert_eq!(
            docker_ok(&["volume", "inspect", "-f", "{{.Name}}", &scope.volume(group, uid)]),
            scope.volume(group, uid)
        );
    }

    // A real AF_UNIX bind and chmod, as the agent CLI does: a `touch` would
    // pass where a real bind fails (wrong owner, mode or filesystem).
    let bind = |ws: &Workspace, path: &str| {
        let script = format!(
            "import os, socket; s = socket.socket(socket.AF_UNIX); s.bind({path:?}); os.chmod({path:?}, 0o600)"
        );
        ws.exec_ok(&["python3", "-c", &script]);
    };
    let is_socket_at = |ws: &Workspace, path: &str| ws.exec(&["test", "-S", path]).status.success();
    bind(&a_dev, "/tmp/cc-socks/two.sock");
    let is_socket = |ws: &Workspace| is_socket_at(ws, "/tmp/cc-socks/two.sock");
    assert_eq!(rooms.map(|(ws, _, _)| is_socket(ws)), [true, true, false, false, false], "a socket of a/1000 only");
    // And root's group shares within itself just the same.
    bind(&a_root, "/tmp/cc-socks/root.sock");
    let is_root_socket = |ws: &Workspace| is_socket_at(ws, "/tmp/cc-socks/root.sock");
    assert_eq!(rooms.map(|(ws, _, _)| is_root_socket(ws)), [false, false, true, true, false], "a socket of a/0 only");

    // A pid of a/1000 names that process in a/1000 only (other namespaces
    // number their own processes, so the check is by its command line).
    let pid = a_dev.exec_ok(&["sh", "-c", "sleep 612345 >/dev/null 2>&1 & echo $!"]).trim().to_string();
    let names_it = |ws: &Workspace| {
        let out = ws.exec(&["sh", "-c", &format!("cat /proc/{pid}/cmdline 2>/dev/null | tr '\\0' ' '")]);
        stdout(&out).trim() == "sleep 612345"
    };
    assert_eq!(
        rooms.map(|(ws, _, _)| names_it(ws)),
        [true, true, false, false, false],
        "pid {pid} resolves in a/1000 only"
    );

    // The fixture agent lists and delivers within a group, sees nothing across.
    let ant = Running::agent(&a_dev, "ant");
    let _cat = Running::agent(&b_dev, "cat");
    eventually("ant in its group's list", AGENT_READY_WAIT, || agent_list(&a_dev2) == ["ant"]);
    eventually("cat registered in its own group", AGENT_READY_WAIT, || {
        std::fs::read_dir(scope.registry_of("b", DEV).join("sessions")).is_ok_and(|d| d.count() == 1)
    });
    a_dev2.exec_ok(&["python3", "agent.py", "send", "ant", "hello from a", "--from", "bee"]);
    assert_eq!(ant.lines.recv_timeout(MESSAGE_WAIT).unwrap(), "ant got: hello from a from bee");
    assert_eq!(agent_list(&b_dev), ["cat"], "b sees its own agent and none of a's");
    assert_eq!(agent_list(&a_root), Vec::<String>::new(), "root of a sees no agent of dev's a");
    let send = b_dev.exec(&["python3", "agent.py", "send", "ant", "hi"]);
    assert_eq!(send.status.code(), Some(1), "{}", stderr(&send));
    // Nothing root-owned in a dev registry: root's sessions have their own.
    assert!(scope.registry_of("a", 0).is_dir() && scope.registry_of("a", DEV).is_dir());
    let owners = Command::new("find").arg(scope.registry_of("a", DEV)).args(["-not", "-uid", "1000"]).output().unwrap();
    assert_eq!(stdout(&owners), "", "files in a/1000's registry not owned by 1000");
}

/// A Claude Code-style session: an inbox socket at `/tmp/cc-socks/<pid>.sock`
/// and `~/.claude/sessions/<pid>.json` with a session id and no name or
/// socket field.
const CLAUDE_STYLE: &str = "import json, os, socket, time
pid = os.getpid()
path = f'/tmp/cc-socks/{pid}.sock'
s = socket.socket(socket.AF_UNIX)
s.bind(path)
os.chmod(path, 0o600)
s.listen(1)
folder = os.path.expanduser('~/.claude/sessions')
os.makedirs(folder, exist_ok=True)
with open(f'{folder}/{pid}.json', 'w') as f:
    json.dump({'pid': pid, 'sessionId': 'cc-7f3a', 'cwd': os.getcwd(), 'startedAt': int(time.time() * 1000)}, f)
print('ready', flush=True)
time.sleep(600)";

#[test]
fn agents_lists_the_sessions_of_the_rooms_group_with_their_rooms_and_not_another_groups() {
    let scope = PeerScope::new("agents");
    let one = scope.workspace_with(dev(), &in_group("a"));
    let two = scope.workspace_with(dev(), &in_group("a"));
    let other = scope.workspace_with(dev(), &in_group("b"));
    for ws in [&one, &two, &other] {
        ws.up();
    }
    let _ant = Running::agent(&one, "ant");
    let claude = Running::start(&two, &["python3", "-u", "-c", CLAUDE_STYLE]);
    assert_eq!(claude.lines.recv_timeout(AGENT_READY_WAIT).unwrap(), "ready");
    let _cat = Running::agent(&other, "cat");
    // A session whose process is gone stays in the registry, unlisted.
    let sessions = scope.registry_of("a", DEV).join("sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    std::fs::write(sessions.join("4000000.json"), r#"{"pid": 4000000, "name": "gone"}"#).unwrap();

    let agents = |ws: &Workspace| -> Vec<(String, String)> {
        let out = ws.workroom(&["agents", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let listed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        listed
            .iter()
            .map(|a| {
                let label = a["name"].as_str().or(a["sessionId"].as_str()).unwrap_or("?").to_string();
                (a["room"].as_str().unwrap().to_string(), label)
            })
            .collect()
    };
    let (r1, r2) = (room_in(&one, "a"), room_in(&two, "a"));
    let mut want = vec![(r1.clone(), "ant".to_string()), (r2.clone(), "cc-7f3a".to_string())];
    want.sort();
    eventually("both sessions of group a", AGENT_READY_WAIT, || agents(&two) == want);
    assert_eq!(agents(&one), want, "the same from either room of the group");
    eventually("cat in group b", AGENT_READY_WAIT, || agents(&other) == [(room_in(&other, "b"), "cat".to_string())]);
    let table = stdout(&one.workroom(&["agents"]));
    assert!(table.starts_with("ROOM"), "{table}");
    assert!(table.lines().any(|l| l.starts_with(&r2) && l.contains("cc-7f3a")), "{table}");
    assert!(!table.contains("cat") && !table.contains("gone"), "{table}");
}

#[test]
fn toggling_peer_messaging_on_a_workspace_names_its_running_room_and_makes_no_second_one() {
    let scope = PeerScope::new("drift");
    let config =
        serde_json::json!({ "image": DEBIAN, "remoteUser": "dev", "initializeCommand": "echo ran >> init.log" });
    let mut ws = Workspace::new(config);
    ws.env.extend(scope.env());
    ws.up();
    let apart = ws.room_name();
    let peers_on =
        format!("peer_messaging = true\npeer_registry = {:?}\n", scope.registry.path().display().to_string());
    std::fs::write(ws.path().join(".workroom.toml"), &peers_on).unwrap();

    let refused = ws.workroom(&["up"]);
    assert!(!refused.status.success(), "up made a room beside a running one");
    let err = stderr(&refused);
    assert!(err.contains(&format!("already has a running room, {apart}, made with peer messaging off")), "{err}");
    assert!(err.contains(&format!("`workroom up --recreate` replaces {apart}")), "{err}");
    assert!(err.contains(&format!("`workroom stop {apart}`")), "{err}");
    assert_eq!(ws.containers().len(), 1, "no second room");
    assert_eq!(ws.read("init.log"), "ran\n", "a refused `up` runs no initializeCommand");

    // --recreate replaces it with the room the settings want.
    let recreated = ws.workroom(&["up", "--recreate"]);
    assert!(recreated.status.success(), "{}", stderr(&recreated));
    ws.peer = true;
    let joined = ws.room_name();
    assert_ne!(joined, apart);
    assert_eq!(ws.containers().len(), 1, "{apart} replaced, not kept beside");
    assert_eq!(
        inspect(&joined, "{{.HostConfig.PidMode}}"),
        format!("container:{}", inspect(&scope.anchor("default", DEV), "{{.Id}}"))
    );

    // Another group is another room too, and the running one is named.
    std::fs::write(ws.path().join(".workroom.toml"), format!("{peers_on}peer_group = \"b\"\n")).unwrap();
    let refused = ws.workroom(&["up"]);
    assert!(!refused.status.success());
    assert!(stderr(&refused).contains(&format!("{joined}, made in peer group default")), "{}", stderr(&refused));

    // Stopped, it no longer blocks: the new room is made and the old one named.
    let stop = ws.workroom(&["stop"]);
    assert!(stop.status.success(), "{}", stderr(&stop));
    let beside = ws.workroom(&["up"]);
    assert!(beside.status.success(), "{}", stderr(&beside));
    assert!(
        stderr(&beside).contains(&format!("{joined} (made in peer group default) stays stopped")),
        "{}",
        stderr(&beside)
    );
    assert_eq!(ws.containers().len(), 2);
    assert_eq!(inspect(&room_in(&ws, "b"), "{{.State.Running}}"), "true");
}

#[test]
fn list_all_shows_every_groups_anchor_and_stop_all_sweeps_them_with_a_registry_of_the_scopes_own() {
    let scope = PeerScope::new("sweep");
    let data = tempfile::tempdir().unwrap();
    // The group from the flag, over the settings' `default`.
    let a = scope.workspace(dev());
    let bad = a.workroom(&["up", "--peer-group", "Acme.Web"]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("peer group \"Acme.Web\": use lower-case letters"), "{}", stderr(&bad));
    assert!(a.containers().is_empty(), "a refused group makes nothing");
    // No `peer_registry`: the scope's own default, under a data folder of
    // the test's (so nothing lands in the host user's).
    let mut b = Workspace::new(dev()).with_settings("peer_messaging = true\npeer_group = \"b\"\n", true);
    b.env.extend(scope.env());
    b.env.push(("XDG_DATA_HOME".into(), data.path().display().to_string()));
    let up_a = a.workroom(&["up", "--peer-group", "a"]);
    assert!(up_a.status.success(), "{}", stderr(&up_a));
    let first = b.up();
    assert!(stderr(&first).contains("is the first room of peer group b (uid 1000)"), "{}", stderr(&first));
    let registry = data.path().join(format!("workroom/scopes/{}/peers/b/1000", scope.scope));
    assert!(registry.is_dir(), "{registry:?}");
    let bound = inspect(
        &room_in(&b, "b"),
        "{{range .Mounts}}{{if eq .Destination \"/home/dev/.claude\"}}{{.Source}}{{end}}{{end}}",
    );
    assert_eq!(bound, registry.display().to_string());

    let out = scope.workroom(&["list", "--all", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mut anchors: Vec<(String, String, u64)> = listed
        .iter()
        .filter(|c| c["role"] == "peer-anchor")
        .map(|c| {
            (
                c["name"].as_str().unwrap().into(),
                c["peer_group"].as_str().unwrap().into(),
                c["peer_uid"].as_u64().unwrap(),
            )
        })
        .collect();
    anchors.sort();
    assert_eq!(anchors, [(scope.anchor("a", DEV), "a".into(), 1000), (scope.anchor("b", DEV), "b".into(), 1000)]);
    let table = stdout(&scope.workroom(&["list", "--all"]));
    assert!(table.lines().any(|l| l.starts_with(&scope.anchor("b", DEV)) && l.contains("b (uid 1000)")), "{table}");

    let stop = scope.workroom(&["stop", "--all"]);
    assert!(stop.status.success(), "{}", stderr(&stop));
    for anchor in [scope.anchor("a", DEV), scope.anchor("b", DEV)] {
        assert_eq!(inspect(&anchor, "{{.State.Running}}"), "false", "{anchor} swept");
    }
    let said = stderr(&stop);
    let last_room = said.rfind(&room_in(&a, "a")).max(said.rfind(&room_in(&b, "b"))).unwrap();
    let first_anchor = said.find(&scope.anchor("a", DEV)).min(said.find(&scope.anchor("b", DEV))).unwrap();
    assert!(last_room < first_anchor, "rooms first, anchors last: {said}");
}

#[test]
fn turning_peer_messaging_off_on_a_peer_workspace_names_its_running_room_and_makes_no_second_one() {
    // The case that first silently made a second room: on, then off.
    let scope = PeerScope::new("off");
    let ws = scope.workspace(dev());
    ws.up();
    let joined = ws.room_name();
    std::fs::write(ws.path().join(".workroom.toml"), "peer_messaging = false\n").unwrap();

    let refused = ws.workroom(&["up"]);
    assert!(!refused.status.success(), "up made a room beside a running one");
    let err = stderr(&refused);
    assert!(err.contains(&format!("already has a running room, {joined}, made in peer group default")), "{err}");
    assert!(err.contains("the settings now want it with peer messaging off"), "{err}");
    assert_eq!(ws.containers().len(), 1, "no second room");
}

#[test]
fn a_named_room_made_with_other_peer_settings_is_named_and_no_second_one_is_made() {
    let scope = PeerScope::new("named");
    let ws = scope.workspace(dev());
    let name = ws.unique();
    let up = ws.workroom(&["up", "--name", &name]);
    assert!(up.status.success(), "{}", stderr(&up));
    let joined = workroom::plan::identity::named_room_name(&name, true).unwrap();
    assert_eq!(inspect(&joined, "{{.State.Running}}"), "true");

    for other in [&["--peer=false"][..], &["--peer-group", "b"][..]] {
        let refused = ws.workroom(&[&["up", "--name", &name][..], other].concat());
        assert!(!refused.status.success(), "up {other:?} made a room beside a running one");
        let err = stderr(&refused);
        assert!(err.contains(&format!("--name {name} already has a running room, {joined}")), "{err}");
        assert!(err.contains(&format!("`workroom stop {joined}`")), "{err}");
        assert_eq!(ws.containers().len(), 1, "no second room for {other:?}");
    }

    // --recreate replaces it with the room the flag wants.
    let recreated = ws.workroom(&["up", "--name", &name, "--peer=false", "--recreate"]);
    assert!(recreated.status.success(), "{}", stderr(&recreated));
    let apart = workroom::plan::identity::named_room_name(&name, false).unwrap();
    assert_eq!(ws.containers().len(), 1, "{joined} replaced, not kept beside");
    assert_eq!(inspect(&apart, "{{.HostConfig.PidMode}}"), "");
}
