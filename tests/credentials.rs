//! The host's ssh-agent and git credentials, carried into the room by the
//! room's background forwarder, against the real engine.

mod common;

use common::ssh_agent::Agent;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A workspace whose `workroom` runs see only the test's agent, git config
/// and state folder.
struct Room {
    ws: Workspace,
    home: tempfile::TempDir,
    agent_sock: Option<PathBuf>,
    gitconfig: Option<PathBuf>,
}

impl Room {
    fn new(config: serde_json::Value) -> Room {
        Room { ws: Workspace::new(config), home: tempfile::tempdir().unwrap(), agent_sock: None, gitconfig: None }
    }

    fn workroom(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(workroom_bin());
        let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
        cmd.args(&args[..split]).args(["--workspace-folder", &self.ws.folder()]).args(&args[split..]);
        cmd.env("XDG_STATE_HOME", self.home.path()).env("XDG_CONFIG_HOME", self.home.path());
        match &self.agent_sock {
            Some(sock) => cmd.env("SSH_AUTH_SOCK", sock),
            None => cmd.env_remove("SSH_AUTH_SOCK"),
        };
        cmd.env("GIT_CONFIG_GLOBAL", self.gitconfig.as_deref().unwrap_or(Path::new("/dev/null")));
        cmd.output().expect("run workroom")
    }

    fn workroom_ok(&self, args: &[&str]) -> String {
        let out = self.workroom(args);
        assert!(out.status.success(), "workroom {args:?}: {}", stderr(&out));
        stdout(&out)
    }

    fn exec(&self, cmd: &[&str]) -> Output {
        let mut args = vec!["exec", "--"];
        args.extend_from_slice(cmd);
        self.workroom(&args)
    }
}

#[test]
fn ssh_add_in_the_room_lists_the_key_of_the_hosts_agent() {
    let (agent, fingerprint) = Agent::with_key();
    let mut room = Room::new(serde_json::json!({ "image": DEBIAN, "remoteUser": "dev" }));
    room.agent_sock = Some(agent.sock());
    let up = room.workroom(&["up"]);
    assert!(up.status.success(), "{}", stderr(&up));
    let listed = room.exec(&["ssh-add", "-l"]);
    assert!(listed.status.success(), "ssh-add -l in the room: {}{}", stdout(&listed), stderr(&listed));
    assert!(stdout(&listed).contains(&fingerprint), "{} does not list {fingerprint}", stdout(&listed));
    // The sockets are the remote user's alone.
    let owner = room.exec(&["stat", "-c", "%U %a", "/.workroom/agent"]);
    assert_eq!(stdout(&owner).trim(), "dev 700");
}

#[test]
fn ssh_agent_forwarding_is_off_with_forward_ssh_agent_false() {
    let (agent, _) = Agent::with_key();
    let mut room = Room::new(serde_json::json!({ "image": DEBIAN }));
    room.agent_sock = Some(agent.sock());
    std::fs::write(room.ws.path().join(".workroom.toml"), "peer_messaging = false\n[forward]\nssh_agent = false\n")
        .unwrap();
    room.workroom_ok(&["up"]);
    let env = room.exec(&["sh", "-c", "echo \"sock=${SSH_AUTH_SOCK:-none}\"; ssh-add -l"]);
    assert!(stdout(&env).contains("sock=none"), "{}", stdout(&env));
    assert!(!env.status.success(), "ssh-add -l found an agent");
}

#[test]
fn git_credential_fill_in_the_room_returns_what_the_hosts_helper_answered() {
    let mut room = Room::new(serde_json::json!({ "image": DEBIAN, "remoteUser": "dev" }));
    let gitconfig = room.home.path().join("gitconfig");
    // A helper that answers `get` only, with a password no one else knows.
    std::fs::write(
        &gitconfig,
        "[credential]\n\thelper = \"!f() { test \\\"$1\\\" = get && printf 'username=room-tester\\\\npassword=s3cret-from-host\\\\n'; }; f\"\n",
    )
    .unwrap();
    room.gitconfig = Some(gitconfig);
    room.workroom_ok(&["up"]);
    let filled = room.exec(&["sh", "-c", "printf 'protocol=https\\nhost=example.com\\n\\n' | git credential fill"]);
    let out = stdout(&filled);
    assert!(filled.status.success(), "git credential fill: {out}{}", stderr(&filled));
    assert!(out.contains("username=room-tester"), "{out}");
    assert!(out.contains("password=s3cret-from-host"), "{out}");
    assert!(out.contains("host=example.com"), "{out}");
}

#[test]
fn the_credential_helper_says_no_host_is_connected_once_the_forwarder_is_gone() {
    let mut room = Room::new(serde_json::json!({ "image": DEBIAN }));
    let gitconfig = room.home.path().join("gitconfig");
    std::fs::write(&gitconfig, "[credential]\n\thelper = \"!f() { echo username=u; echo password=p; }; f\"\n").unwrap();
    room.gitconfig = Some(gitconfig);
    room.workroom_ok(&["up"]);
    let pid: u32 =
        std::fs::read_to_string(room.home.path().join("workroom").join(format!("{}.pid", room.ws.room_name())))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
    // The daemon sees the link close and stops serving; the helper says so.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let said = loop {
        let out =
            room.exec(&["sh", "-c", "echo protocol=https; echo host=x | /.workroom/bin/workroomd git-credential get"]);
        let said = stderr(&out);
        if said.contains("no credentials from the host") || std::time::Instant::now() > deadline {
            break said;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(said.contains("is `workroom up` running for this room?"), "{said}");
}

#[test]
fn an_ssh_agent_started_after_the_room_was_made_is_forwarded_by_the_next_up() {
    let mut room = Room::new(serde_json::json!({ "image": DEBIAN, "remoteUser": "dev" }));
    room.workroom_ok(&["up"]);
    let (agent, fingerprint) = Agent::with_key();
    room.agent_sock = Some(agent.sock());
    // Nothing else is due: the fast path must still start the forwarder.
    room.workroom_ok(&["up"]);
    let listed = room.exec(&["ssh-add", "-l"]);
    assert!(listed.status.success(), "ssh-add -l in the room: {}{}", stdout(&listed), stderr(&listed));
    assert!(stdout(&listed).contains(&fingerprint), "{} does not list {fingerprint}", stdout(&listed));
}

#[test]
fn a_killed_forwarder_that_carried_only_git_credentials_is_started_again_by_a_fast_path_up() {
    let mut room = Room::new(serde_json::json!({ "image": DEBIAN, "remoteUser": "dev" }));
    let gitconfig = room.home.path().join("gitconfig");
    std::fs::write(&gitconfig, "[credential]\n\thelper = \"!f() { echo username=u; echo password=from-host; }; f\"\n")
        .unwrap();
    room.gitconfig = Some(gitconfig);
    room.workroom_ok(&["up"]);
    let pid_file = room.home.path().join("workroom").join(format!("{}.pid", room.ws.room_name()));
    let killed: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(killed), nix::sys::signal::Signal::SIGKILL).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{killed}")).exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The room runs and its hooks are done: this `up` takes the fast path.
    room.workroom_ok(&["up"]);
    let pid: i32 = std::fs::read_to_string(&pid_file).unwrap_or_default().trim().parse().unwrap_or(0);
    assert!(pid != killed && std::path::Path::new(&format!("/proc/{pid}")).exists(), "no live forwarder after up");
    let filled = room.exec(&["sh", "-c", "printf 'protocol=https\\nhost=example.com\\n\\n' | git credential fill"]);
    assert!(stdout(&filled).contains("password=from-host"), "{}{}", stdout(&filled), stderr(&filled));
}

/// How long the forwarder may take to link to the room's new start after a
/// restart: an event, an inspect, one `docker exec` and the credentials'
/// offer, well under a second; seconds on a loaded machine.
const REJOIN_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

#[test]
fn ssh_agent_and_git_credentials_come_back_after_docker_restart_from_the_same_forwarder_with_no_workroom_command() {
    let (agent, fingerprint) = Agent::with_key();
    let mut room = Room::new(serde_json::json!({ "image": DEBIAN, "remoteUser": "dev" }));
    room.agent_sock = Some(agent.sock());
    let gitconfig = room.home.path().join("gitconfig");
    std::fs::write(
        &gitconfig,
        "[credential]\n\thelper = \"!f() { echo username=u; echo password=after-restart; }; f\"\n",
    )
    .unwrap();
    room.gitconfig = Some(gitconfig);
    room.workroom_ok(&["up"]);
    let pid_file = room.home.path().join("workroom").join(format!("{}.pid", room.ws.room_name()));
    let pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_string();

    let name = room.ws.room_name();
    docker_ok(&["restart", "-t", "1", &name]);
    // Asked straight through the engine, as the room's own programs would
    // after a restart nobody followed with a workroom command.
    let agent_socket = format!("SSH_AUTH_SOCK={}", workroomd::room::AGENT_SOCKET);
    let mut said = String::new();
    let listed = wait_until(REJOIN_WAIT, || {
        let out = docker(&["exec", "-u", "dev", "-e", &agent_socket, &name, "ssh-add", "-l"]);
        said = format!("{}{}", stdout(&out), stderr(&out));
        said.contains(&fingerprint).then_some(())
    });
    assert!(listed.is_some(), "ssh-add -l in the restarted room: {said}");
    let fill = "printf 'protocol=https\\nhost=example.com\\n\\n' | git credential fill";
    let filled = docker(&["exec", "-u", "dev", &name, "sh", "-c", fill]);
    assert!(stdout(&filled).contains("password=after-restart"), "{}{}", stdout(&filled), stderr(&filled));
    assert_eq!(std::fs::read_to_string(&pid_file).unwrap().trim(), pid, "the forwarder was replaced");
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists(), "the forwarder is gone");
}
