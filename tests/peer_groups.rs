//! Peer groups as trust domains, against the real engine: a group is a name
//! and the uid its sessions run as, and rooms share a PID namespace, a
//! socket folder and a registry only within their group.

mod common;
mod peer_support;
mod pty;

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

/// How long the real Claude Code may take to show a screen: offline, its
/// start waits out its network look-ups (10-20 s measured on this machine).
const CLAUDE_WAIT: &str = "120";

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

/// A Claude Code-style session (as `CLAUDE_STYLE`) whose entry says `id`
/// and `status`.
fn claude_style(id: &str, status: &str) -> String {
    CLAUDE_STYLE.replace("'sessionId': 'cc-7f3a'", &format!("'sessionId': {id:?}, 'status': {status:?}"))
}

#[test]
fn agents_shows_each_sessions_room_branch_status_and_pane_and_attach_says_where_one_outside_a_pane_runs() {
    let scope = PeerScope::new("view");
    let one = scope.workspace_with(dev(), &in_group("a"));
    let two = scope.workspace_with(dev(), &in_group("a"));
    // The first workspace is a checkout on a branch; the second is no repository.
    std::fs::create_dir(one.path().join(".git")).unwrap();
    std::fs::write(one.path().join(".git/HEAD"), "ref: refs/heads/feature-one\n").unwrap();
    one.up();
    two.up();

    // The group's folder keeps both agents' state, Codex's in a folder of its own.
    let env = one.exec_ok(&["sh", "-c", "echo \"$CLAUDE_CONFIG_DIR $CODEX_HOME\""]);
    assert_eq!(env.trim(), "/home/dev/.claude /home/dev/.claude/codex");
    let codex = scope.registry_of("a", DEV).join("codex");
    let meta = std::fs::metadata(&codex).unwrap();
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    assert_eq!((meta.uid(), meta.permissions().mode() & 0o777), (DEV, 0o700), "{codex:?}");
    assert_eq!(one.exec_ok(&["sh", "-c", "touch $CODEX_HOME/auth.json && echo ok"]).trim(), "ok");

    // One session as if in a pane of ours (the variable every pane's
    // processes inherit), one started by `exec`.
    let busy = claude_style("cc-one", "busy");
    let in_pane = Running::start(&one, &["env", "WORKROOM_PANE=agent-one", "python3", "-u", "-c", &busy]);
    let waiting = claude_style("cc-two", "waiting");
    let bare = Running::start(&two, &["python3", "-u", "-c", &waiting]);
    for r in [&in_pane, &bare] {
        assert_eq!(r.lines.recv_timeout(AGENT_READY_WAIT).unwrap(), "ready");
    }

    let (r1, r2) = (room_in(&one, "a"), room_in(&two, "a"));
    let listed = |ws: &Workspace| -> Vec<serde_json::Value> {
        let out = ws.workroom(&["agents", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let want = vec![
        serde_json::json!([r1, "feature-one", "cc-one", "busy", "agent-one"]),
        serde_json::json!([r2, null, "cc-two", "waiting", null]),
    ];
    let view = |ws: &Workspace| -> Vec<serde_json::Value> {
        let mut rows: Vec<serde_json::Value> = listed(ws)
            .iter()
            .map(|a| serde_json::json!([a["room"], a["branch"], a["sessionId"], a["status"], a["pane"]]))
            .collect();
        rows.sort_by_key(|r| r.to_string());
        rows
    };
    let mut sorted = want.clone();
    sorted.sort_by_key(|r| r.to_string());
    eventually("both sessions with room, branch, status and pane", AGENT_READY_WAIT, || view(&two) == sorted);
    let first = &listed(&one)[0];
    assert!(first["ageSeconds"].as_u64().is_some_and(|s| s < 600), "{first}");
    assert!(first.as_object().unwrap().contains_key("cwd"), "every key on every agent: {first}");

    let table = stdout(&one.workroom(&["agents"]));
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["ROOM", "BRANCH", "AGENT", "PID", "STATUS", "PANE", "AGE"], "{table}");
    let row = table.lines().find(|l| l.starts_with(&r1)).unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!((cells[1], cells[2], cells[4], cells[5]), ("feature-one", "cc-one", "busy", "agent-one"), "{table}");
    // From outside any workspace, by room.
    let by_room = scope.workroom(&["agents", "--json", "--room", &r2]);
    assert!(by_room.status.success(), "{}", stderr(&by_room));
    assert_eq!(serde_json::from_slice::<Vec<serde_json::Value>>(&by_room.stdout).unwrap().len(), 2);

    // attach: a session outside our panes is said where it runs, in one line.
    let out = one.workroom(&["attach", "cc-tw"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.trim().starts_with(&format!("cc-two runs in {r2} as pid")), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    let out = one.workroom(&["attach", "cc-"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("\"cc-\" names 2 agents"), "{}", stderr(&out));
    drop((in_pane, bare));
}

/// A config for the real Claude Code: the binary bound in read-only, a
/// dummy key (nothing reaches the model), and one workspace folder in
/// every room, since Claude Code asks its trust question per folder.
fn claude_config(binary: &std::path::Path) -> serde_json::Value {
    serde_json::json!({
        "image": DEBIAN,
        "remoteUser": "dev",
        "mounts": [format!("type=bind,source={},target=/usr/local/bin/claude,readonly", binary.display())],
        "containerEnv": { "ANTHROPIC_API_KEY": "sk-ant-workroom-test-0000", "DISABLE_AUTOUPDATER": "1" },
        "workspaceMount": "source=${localWorkspaceFolder},target=/workspaces/app,type=bind",
        "workspaceFolder": "/workspaces/app",
    })
}

/// Starts `claude` in pane `agent` of the workspace's room without a
/// terminal (`shell -d`, stdin /dev/null), as a supervisor would.
fn start_claude(ws: &Workspace) {
    let out = ws.workroom(&["shell", "-d", "agent", "--", "claude"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "agent");
}

/// `workroom wait agent --for REGEX` in the workspace's room.
fn wait_for(ws: &Workspace, pattern: &str) {
    let out = ws.workroom(&["wait", "agent", "--for", pattern, "--timeout", CLAUDE_WAIT]);
    let screen = stdout(&ws.workroom(&["capture", "agent"]));
    assert!(out.status.success(), "no {pattern:?} on the pane ({}):\n{screen}", stderr(&out));
}

/// Sends `key` until `shows` is on the pane: a key sent while Claude Code
/// has drawn its dialog but not yet armed its input is dropped, so each try
/// waits for the effect, not for a time.
fn send_key_until(ws: &Workspace, key: &str, shows: &str) {
    for _ in 0..KEY_TRIES {
        let out = ws.workroom(&["send", "agent", "--keys", "--", key]);
        assert!(out.status.success(), "send {key}: {}", stderr(&out));
        if ws.workroom(&["wait", "agent", "--for", shows, "--timeout", KEY_EFFECT_WAIT]).status.success() {
            return;
        }
    }
    let screen = stdout(&ws.workroom(&["capture", "agent"]));
    panic!("{key} never brought {shows:?} after {KEY_TRIES} tries:\n{screen}");
}

/// How often a key is sent before the test gives up, and how long each try
/// waits for its effect (a drawn dialog arms its keys within a second or
/// two on a loaded machine).
const KEY_TRIES: usize = 10;
const KEY_EFFECT_WAIT: &str = "3";

/// What the real Claude Code shows under its prompt, ready for input: the
/// footer names the shortcuts, or (in auto mode) how to cycle modes.
const CLAUDE_PROMPT: &str = "for shortcuts|for agents|shift\\+tab to cycle";

#[test]
fn claude_code_onboarded_once_in_a_group_starts_at_its_prompt_in_a_new_and_a_recreated_room() {
    let binary = common::claude::binary();
    let scope = PeerScope::new("claude");
    let a = scope.workspace_with(claude_config(&binary), &in_group("c"));
    let b = scope.workspace_with(claude_config(&binary), &in_group("c"));
    for ws in [&a, &b] {
        ws.open_to_room_users();
    }
    a.up();
    // Offline, Claude Code's first-run screens end in a connectivity check
    // that fails; a login made elsewhere has marked them done. The rest it
    // asks (trust, the key) are driven in the pane.
    a.exec_ok(&["sh", "-c", "echo '{\"hasCompletedOnboarding\": true}' > \"$CLAUDE_CONFIG_DIR/.claude.json\""]);
    start_claude(&a);
    wait_for(&a, "Yes, I trust this folder");
    send_key_until(&a, "Down", "❯ Yes, I trust this folder");
    send_key_until(&a, "Enter", "Do you want to use this API key");
    send_key_until(&a, "Up", "❯ Yes");
    send_key_until(&a, "Enter", CLAUDE_PROMPT);

    // Claude Code wrote its answers into the group's folder on the host.
    let state = scope.registry_of("c", DEV).join(".claude.json");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_eq!(json["projects"]["/workspaces/app"]["hasTrustDialogAccepted"], true, "{json}");
    assert!(json["customApiKeyResponses"]["approved"].as_array().is_some_and(|a| !a.is_empty()), "{json}");

    // A new room of the group, and room A recreated: straight at the prompt.
    b.up();
    let recreated = a.workroom(&["up", "--recreate"]);
    assert!(recreated.status.success(), "{}", stderr(&recreated));
    for ws in [&b, &a] {
        start_claude(ws);
        wait_for(ws, CLAUDE_PROMPT);
        let screen = stdout(&ws.workroom(&["capture", "agent"]));
        assert!(!screen.contains("trust this folder") && !screen.contains("API key"), "asked again:\n{screen}");
    }
    // Both sessions are the group's, idle, each in its room.
    let (ra, rb) = (room_in(&a, "c"), room_in(&b, "c"));
    eventually("both Claude Code sessions idle in agents", AGENT_READY_WAIT, || {
        let out = b.workroom(&["agents", "--json"]);
        let listed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let mut rooms: Vec<&str> = listed
            .iter()
            .filter(|s| s["status"] == "idle" && s["pane"] == "agent")
            .filter_map(|s| s["room"].as_str())
            .collect();
        rooms.sort();
        let mut want = [ra.as_str(), rb.as_str()];
        want.sort();
        rooms == want
    });
}

/// Guards a terminal test's `workroom attach` against a hang.
const TERM_GUARD: Duration = Duration::from_secs(60);
/// ctrl-p ctrl-q, the default detach keys.
const DETACH: &[u8] = b"\x10\x11";

#[test]
fn attach_takes_a_terminal_to_the_pane_holding_the_agent_and_detaching_leaves_the_agent_running() {
    let scope = PeerScope::new("attach");
    let ws = scope.workspace_with(dev(), &in_group("a"));
    ws.open_to_room_users();
    ws.up();
    let started = ws.workroom(&["shell", "-d", "agent", "--", "python3", "-u", "agent.py", "serve", "--name", "ant"]);
    assert!(started.status.success(), "{}", stderr(&started));
    eventually("ant listed in the pane agent", AGENT_READY_WAIT, || {
        let out = ws.workroom(&["agents", "--json"]);
        let listed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
        listed.iter().any(|a| a["name"] == "ant" && a["pane"] == "agent")
    });
    let env: Vec<(String, String)> = scope.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let folder = ws.folder();
    let mut term =
        pty::Term::spawn_with_env(workroom_bin(), &["attach", "ant", "--workspace-folder", &folder], 30, 100, &env);
    // The pane's screen, painted on attach: what the agent said when it started.
    term.expect("ant listening on", TERM_GUARD);
    term.send(DETACH);
    term.expect("detached from pane agent", TERM_GUARD);
    assert_eq!(term.wait(TERM_GUARD), 0);
    let panes: Vec<serde_json::Value> = serde_json::from_slice(&ws.workroom(&["panes", "--json"]).stdout).unwrap();
    let agent = panes.iter().find(|p| p["name"] == "agent").expect("the pane agent");
    assert!(agent["exited"].is_null(), "the agent runs on after the detach: {agent}");
}
