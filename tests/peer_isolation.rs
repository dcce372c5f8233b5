//! What rooms of one peer group can and cannot reach of each other. They
//! share a PID namespace, so a process of one room can name paths through
//! `/proc/<pid>/root` of a process of another. The credentials a room was
//! given (ssh-agent, git credentials) and its daemon stay its own; what
//! remains reachable, as ADR 0005 says, is pinned here too.

mod common;
mod peer_support;

use common::ssh_agent::Agent;
use common::*;
use peer_support::*;
use std::time::Duration;

/// How long the daemon's log may take to show a refusal it just made.
const LOG_WAIT: Duration = Duration::from_secs(10);

/// A client of the daemon's credential socket, as `workroomd git-credential`
/// is, but at a path of the caller's choosing: `fill` for example.com.
const CREDENTIAL_CLIENT: &str = "import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b'fill\\nprotocol=https\\nhost=example.com\\n\\n')
s.shutdown(socket.SHUT_WR)
s.settimeout(30)
got = b''
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    got += chunk
sys.stdout.write(got.decode(errors='replace'))";

/// Connects to a daemon socket, says the protocol's magic as a host does
/// (the daemon waits for a client's first byte: it may be a relay handing
/// over its pipes), and prints the first bytes the daemon says before it
/// closes (nothing: `b''`) or goes quiet: an admitted client is greeted
/// with the magic.
const GREETING_CLIENT: &str = "import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.settimeout(5)
got = b''
try:
    s.sendall(b'WORKROOM')
    while len(got) < 8:
        chunk = s.recv(8 - len(got))
        if not chunk:
            break
        got += chunk
except socket.timeout:
    got = b'(silent)'
except (BrokenPipeError, ConnectionResetError):
    got = b''
print(got)";

fn daemon_log_says(room: &str, what: &str) -> bool {
    let logs = docker(&["logs", room]);
    stderr(&logs).contains(what) || stdout(&logs).contains(what)
}

#[test]
fn the_agent_and_git_credential_sockets_reached_through_proc_root_from_another_room_refuse() {
    let (agent, fingerprint) = Agent::with_key();
    let scope = PeerScope::new("creds");
    let dev = serde_json::json!({ "image": DEBIAN, "remoteUser": "dev" });
    let mut holder = scope.workspace(dev.clone());
    let gitconfig = holder.path().join("gitconfig");
    std::fs::write(
        &gitconfig,
        "[credential]\n\thelper = \"!f() { test \\\"$1\\\" = get && printf 'username=holder\\\\npassword=s3cret-of-the-holder\\\\n'; }; f\"\n",
    )
    .unwrap();
    holder.env.push(("SSH_AUTH_SOCK".into(), agent.sock().display().to_string()));
    holder.env.push(("GIT_CONFIG_GLOBAL".into(), gitconfig.display().to_string()));
    let mut thief = scope.workspace_with(dev, "[forward]\nssh_agent = false\ngit_credentials = false\n");
    thief.env.push(("SSH_AUTH_SOCK".into(), String::new()));
    holder.up();
    thief.up();

    // The holder's own processes use its credentials.
    assert!(holder.exec_ok(&["ssh-add", "-l"]).contains(&fingerprint));
    let own = holder.exec_ok(&["python3", "-c", CREDENTIAL_CLIENT, "/.workroom/agent/git-credential.sock"]);
    assert!(own.contains("password=s3cret-of-the-holder"), "{own}");

    // A process of the holder's uid whose root the thief can name.
    let pid = sleeper(&holder.room_name(), "dev");
    let through = format!("/proc/{pid}/root/.workroom/agent");
    thief.exec_ok(&["test", "-S", &format!("{through}/agent.sock")]);
    let listed = thief.exec(&["sh", "-c", &format!("SSH_AUTH_SOCK={through}/agent.sock ssh-add -l")]);
    assert!(!listed.status.success(), "ssh-add reached the holder's agent: {}", stdout(&listed));
    assert!(!stdout(&listed).contains(&fingerprint), "{}", stdout(&listed));
    let stolen = thief.exec(&["python3", "-c", CREDENTIAL_CLIENT, &format!("{through}/git-credential.sock")]);
    assert!(!stdout(&stolen).contains("s3cret"), "git credentials left the room: {}", stdout(&stolen));
    eventually("the holder's daemon to log the refusals", LOG_WAIT, || {
        daemon_log_says(&holder.room_name(), "refused a connection on /.workroom/agent/agent.sock: pid")
    });
    assert!(daemon_log_says(&holder.room_name(), "refused a connection on /.workroom/agent/git-credential.sock"));
}

async fn daemon_pid(room: &str) -> u32 {
    let engine = workroom::engine::Engine::connect().await.unwrap();
    let link = workroom::link::RoomLink::connect(&engine, room).await.unwrap();
    link.status().await.unwrap().pid
}

/// From `from` (as root): whether `/proc/<pid>/root` can be opened.
fn can_open_root_of(from: &Workspace, pid: u32) -> bool {
    docker_exec(&from.room_name(), "0", &["ls", &format!("/proc/{pid}/root/")]).status.success()
}

#[test]
fn the_daemon_socket_and_the_daemons_proc_root_refuse_another_room_also_after_a_hand_off() {
    let scope = PeerScope::new("daemon");
    let root = serde_json::json!({ "image": DEBIAN });
    let (target, thief) = (scope.workspace(root.clone()), scope.workspace(root));
    target.up();
    thief.up();
    let room = target.room_name();
    let daemon = runtime().block_on(daemon_pid(&room));
    // Root in another room of the group sees the daemon's pid...
    assert!(docker_exec(&thief.room_name(), "0", &["kill", "-0", &daemon.to_string()]).status.success());
    // ... but cannot open its root, its fds or its environment.
    assert!(!can_open_root_of(&thief, daemon), "/proc/{daemon}/root of {room} opened from another room");

    // The daemon socket, named through a root process of the target that
    // is not the daemon: the kernel lets root in, the daemon does not.
    let pid = sleeper(&room, "0");
    let socket = format!("/proc/{pid}/root/.workroom/run/workroomd.sock");
    let greeted = |path: &str| stdout(&docker_exec(&thief.room_name(), "0", &["python3", "-c", GREETING_CLIENT, path]));
    assert_eq!(greeted("/.workroom/run/workroomd.sock").trim(), "b'WORKROOM'", "its own daemon greets it");
    assert_eq!(greeted(&socket).trim(), "b''", "the target's daemon must close without a byte");
    eventually("the refusal in the target's log", LOG_WAIT, || {
        daemon_log_says(&room, "refused a connection on /.workroom/run/workroomd.sock")
    });

    // A hand-off execs a new binary in place; the kernel makes a process
    // dumpable again at exec, so the daemon must say it again.
    let out = target.workroom(&["hand-off", "--force"]);
    assert!(out.status.success() && stdout(&out).contains("handed off"), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(runtime().block_on(daemon_pid(&room)), daemon, "the same process");
    assert!(!can_open_root_of(&thief, daemon), "/proc/{daemon}/root opened after the hand-off");
    assert_eq!(greeted(&socket).trim(), "b''", "the handed-off daemon must refuse too");
    assert_eq!(greeted("/.workroom/run/workroomd.sock").trim(), "b'WORKROOM'");
}

#[test]
fn same_uid_processes_of_one_group_can_reach_each_others_files_through_proc_root() {
    // What sharing a PID namespace leaves open (ADR 0005, "Isolation
    // cost"): a process may open `/proc/<pid>/root` of any dumpable
    // process of its own uid. Pinned so the ADR and the guide stay true.
    let scope = PeerScope::new("reach");
    let dev = serde_json::json!({ "image": DEBIAN, "remoteUser": "dev" });
    let (a, b) = (scope.workspace(dev.clone()), scope.workspace(dev));
    a.up();
    b.up();
    let pid = sleeper(&a.room_name(), "dev");
    b.exec_ok(&["sh", "-c", &format!("echo from-b > /proc/{pid}/root/tmp/from-b")]);
    assert_eq!(a.exec_ok(&["cat", "/tmp/from-b"]).trim(), "from-b", "b wrote into a's /tmp");
    // Another uid cannot, nor can a room of the same uid in another group,
    // which does not even see the pid.
    let other = docker_exec(&b.room_name(), "nobody", &["ls", &format!("/proc/{pid}/root/tmp")]);
    assert!(!other.status.success(), "another uid opened it");
    let apart =
        scope.workspace_with(serde_json::json!({ "image": DEBIAN, "remoteUser": "dev" }), "peer_group = \"apart\"\n");
    apart.up();
    let seen = docker_exec(&room_in(&apart, "apart"), "dev", &["kill", "-0", &pid]);
    assert!(!seen.status.success(), "a room of another group sees the pid");
}
