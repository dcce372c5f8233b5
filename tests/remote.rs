//! Rooms on an engine that cannot see the workspace (issue 18), against a
//! second real dockerd in a mount namespace of its own
//! (`remote_support`): the workspace goes into a volume, `sync` carries
//! changes both ways, and `down` keeps or removes the volume.

mod common;
mod pty;
mod remote_support;

use common::*;
use pty::Term;
use remote_support::sshd::{FarSide, Sshd};
use remote_support::SecondEngine;
use std::process::Output;
use std::time::{Duration, Instant};

#[test]
fn the_second_engine_cannot_see_a_folder_under_the_hosts_tmp() {
    let engine = SecondEngine::start(&[BUSYBOX]);
    let ws = tempfile::Builder::new().prefix("wr-test-").tempdir().unwrap();
    std::fs::write(ws.path().join("f"), "x").unwrap();
    let mount = format!("type=bind,source={},target=/w", ws.path().display());
    let out = engine.docker(&["create", "--label", TEST_LABEL, "--mount", &mount, BUSYBOX]);
    assert!(!out.status.success(), "the second engine bound {}", ws.path().display());
    assert!(stderr(&out).contains("bind source path does not exist"), "{}", stderr(&out));
    // The main engine sees it: the difference is the namespace, nothing else.
    let id = docker_ok(&["create", "--label", TEST_LABEL, "--mount", &mount, BUSYBOX]);
    remove_container(&id);
}

/// Guards against a hang while waiting for a terminal's output; never a pause.
const GUARD: Duration = Duration::from_secs(60);
/// ctrl-p ctrl-q, the default detach keys.
const DETACH: &[u8] = b"\x10\x11";
/// How long a server started in the room may take to listen.
const SERVER_READY_WAIT: Duration = Duration::from_secs(30);

/// A workspace whose `workroom` runs against `engine`, with state and cache
/// folders of its own (the sync records, the probe's answers, forwarders).
struct RemoteWorkspace {
    ws: Workspace,
    _state: tempfile::TempDir,
}

impl RemoteWorkspace {
    fn new(engine: &SecondEngine, config: serde_json::Value) -> RemoteWorkspace {
        let mut ws = Workspace::new(config);
        let state = tempfile::Builder::new().prefix("wr-test-state-").tempdir().unwrap();
        ws.env.push(("DOCKER_HOST".into(), engine.host.clone()));
        ws.env.push(("XDG_STATE_HOME".into(), state.path().join("state").display().to_string()));
        ws.env.push(("XDG_CACHE_HOME".into(), state.path().join("cache").display().to_string()));
        RemoteWorkspace { ws, _state: state }
    }

    fn ok(&self, args: &[&str]) -> Output {
        let out = self.ws.workroom(args);
        assert!(out.status.success(), "workroom {args:?} failed: {}", stderr(&out));
        out
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.ws.path().join(name), text).unwrap();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn a_room_on_an_engine_that_cannot_see_the_folder_works_on_an_uploaded_volume_that_syncs_both_ways() {
    let engine = SecondEngine::start(&[BUSYBOX]);
    let room = RemoteWorkspace::new(
        &engine,
        serde_json::json!({ "image": BUSYBOX, "postCreateCommand": "ls -a > /tmp/hook-saw" }),
    );
    room.write("hello.txt", "from the host\n");
    std::fs::create_dir(room.ws.path().join("src")).unwrap();
    room.write("src/lib.txt", "a library\n");

    // up: the engine cannot see the folder, so the workspace is uploaded.
    let out = room.ok(&["up", "--json"]);
    let result: serde_json::Value = serde_json::from_str(stdout(&out).lines().last().unwrap()).unwrap();
    let volume = format!("workroom-ws-{}", room.ws.room_name().trim_start_matches("workroom-"));
    assert_eq!(result["workspace"]["mode"], "volume", "{result}");
    assert_eq!(result["workspace"]["reason"], "engine cannot see the folder", "{result}");
    assert_eq!(result["workspace"]["volume"], volume.as_str(), "{result}");
    assert!(
        stderr(&out).contains(&format!("uploading the workspace into {volume} (every file): 4 files")),
        "{}",
        stderr(&out)
    );
    // `config` shows the room's decision too, from the room's labels.
    let config: serde_json::Value = serde_json::from_str(&stdout(&room.ok(&["config", "--json"]))).unwrap();
    assert_eq!(config["workroom"]["workspace"], result["workspace"], "{config}");

    // The hooks ran on the uploaded files; exec finds them in the workspace folder.
    let saw = room.ws.exec_ok(&["cat", "/tmp/hook-saw"]);
    for name in ["hello.txt", "src", ".devcontainer.json"] {
        assert!(saw.lines().any(|l| l == name), "the hook did not see {name}: {saw}");
    }
    assert_eq!(room.ws.exec_ok(&["cat", "src/lib.txt"]), "a library\n");
    assert_eq!(room.ws.exec_ok(&["pwd"]).trim(), room.ws.remote_folder());

    // A shell through a real terminal.
    let env: Vec<(&str, &str)> = room.ws.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut term =
        Term::spawn_with_env(workroom_bin(), &["shell", "--workspace-folder", &room.ws.folder()], 24, 80, &env);
    term.send(b"echo \"<$(cat hello.txt)>\"\r");
    term.expect("<from the host>", GUARD);
    term.send(DETACH);
    term.expect("detached from pane main", GUARD);
    assert_eq!(term.wait(GUARD), 0);

    // A forward to a server in the room.
    room.ws.exec_ok(&[
        "sh",
        "-c",
        "(mkdir -p /www && echo served from the volume room > /www/index.html && httpd -f -p 127.0.0.1:8080 -h /www) >/dev/null 2>&1 &",
    ]);
    let host_port = free_port();
    room.ok(&["forward", "--background", &format!("{host_port}:8080")]);
    let deadline = Instant::now() + SERVER_READY_WAIT;
    let reply = loop {
        let reply = http_get(host_port, "/index.html");
        if reply.contains(" 200 ") || Instant::now() > deadline {
            break reply;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(reply.ends_with("served from the volume room\n"), "{reply}");

    // sync pull brings back a file made in the room.
    room.ws.exec_ok(&["sh", "-c", "echo made in the room > made.txt"]);
    let out = room.ok(&["sync", "pull"]);
    assert!(stderr(&out).contains("pulled made.txt"), "{}", stderr(&out));
    assert_eq!(room.ws.read("made.txt"), "made in the room\n");

    // sync push sends a local edit.
    room.write("hello.txt", "edited here\n");
    let out = room.ok(&["sync", "push"]);
    assert!(stderr(&out).contains("pushed hello.txt"), "{}", stderr(&out));
    assert_eq!(room.ws.exec_ok(&["cat", "hello.txt"]), "edited here\n");

    // Changed on both sides: reported, neither side touched.
    room.write("made.txt", "changed here\n");
    room.ws.exec_ok(&["sh", "-c", "echo changed in the room > made.txt"]);
    for direction in ["pull", "push"] {
        let out = room.ws.workroom(&["sync", direction]);
        assert_eq!(out.status.code(), Some(1), "sync {direction} with a conflict: {}", stderr(&out));
        assert!(stderr(&out).contains("conflict: made.txt changed here and in"), "{}", stderr(&out));
    }
    assert_eq!(room.ws.read("made.txt"), "changed here\n");
    assert_eq!(room.ws.exec_ok(&["cat", "made.txt"]), "changed in the room\n");

    // down leaves only the volume; up finds it and never overwrites it.
    let out = room.ok(&["down"]);
    assert!(stderr(&out).contains(&format!("kept the workspace volume {volume}")), "{}", stderr(&out));
    assert_eq!(engine.containers(), Vec::<String>::new(), "down leaves no container");
    assert_eq!(engine.volumes(), std::slice::from_ref(&volume), "down leaves the workspace volume only");
    room.write("hello.txt", "changed while the room was down\n");
    let out = room.ok(&["up"]);
    assert!(stderr(&out).contains(&format!("the workspace volume {volume} exists and is kept")), "{}", stderr(&out));
    assert_eq!(room.ws.exec_ok(&["cat", "hello.txt"]), "edited here\n", "up overwrote the volume");

    // down --volumes leaves nothing.
    room.ok(&["down", "--volumes"]);
    assert_eq!(engine.containers(), Vec::<String>::new());
    assert_eq!(engine.volumes(), Vec::<String>::new(), "down --volumes leaves no volume");
}

/// The processes whose command line names `needle` (an ssh master left
/// behind would).
fn processes_naming(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if text.contains(needle) {
            found.push(format!("{}: {text}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

#[test]
fn an_ssh_docker_host_brings_a_room_up_runs_in_it_and_takes_it_down_over_one_ssh_connection() {
    let engine = SecondEngine::start(&[BUSYBOX]);
    let sshd = Sshd::start(FarSide::Engine(&engine.host));
    let mut room = RemoteWorkspace::new(&engine, serde_json::json!({ "image": BUSYBOX }));
    room.ws.env.retain(|(k, _)| k != "DOCKER_HOST");
    room.ws.env.push(("DOCKER_HOST".into(), sshd.docker_host()));
    room.ws.env.push(("WORKROOM_SSH_COMMAND".into(), sshd.ssh_command(true)));
    room.write("hello.txt", "over ssh\n");

    let out = room.ok(&["up", "--json"]);
    let result: serde_json::Value = serde_json::from_str(stdout(&out).lines().last().unwrap()).unwrap();
    assert_eq!(result["outcome"], "success", "{result}");
    assert_eq!(result["workspace"]["mode"], "volume", "the far engine cannot see the folder: {result}");
    let id = result["containerId"].as_str().unwrap().to_string();
    assert_eq!(engine.docker_ok(&["inspect", "-f", "{{.State.Running}}", &id]), "true", "made on the far engine");
    let volumes = engine.docker_ok(&["volume", "ls", "-q"]);
    assert!(
        volumes.lines().any(|v| v.starts_with(workroom::room::daemon_volume::PREFIX)),
        "the far engine's room starts its daemon from that engine's own daemon volume: {volumes}"
    );
    assert_eq!(room.ws.exec_ok(&["cat", "hello.txt"]), "over ssh\n");
    // stdin, stdout and the exit status pass through the ssh session.
    let out = room.ws.workroom_with_stdin(&["exec", "--", "sh", "-c", "cat; exit 3"], b"piped in\n");
    assert_eq!((out.status.code(), stdout(&out).as_str()), (Some(3), "piped in\n"), "{}", stderr(&out));

    room.ok(&["down", "--volumes"]);
    assert_eq!(engine.containers(), Vec::<String>::new());
    assert_eq!(engine.volumes(), Vec::<String>::new());
    // Each command's ssh master went with it.
    assert_eq!(processes_naming(&sshd.ssh_command(true)), Vec::<String>::new(), "an ssh process outlived its command");
}

#[test]
fn a_refused_key_a_far_side_without_docker_and_no_ssh_server_each_say_so_in_one_line() {
    let engine = SecondEngine::start(&[]);
    let sshd = Sshd::start(FarSide::Engine(&engine.host));
    let no_docker = Sshd::start(FarSide::NoDocker);
    let ws = Workspace::image(BUSYBOX);
    let closed_port = free_port();
    let cases = [
        (sshd.docker_host(), sshd.ssh_command(false), "ssh root@127.0.0.1:{port} refused the key (", sshd.port),
        (
            no_docker.docker_host(),
            no_docker.ssh_command(true),
            "root@127.0.0.1:{port} has no docker CLI for `docker system dial-stdio` (",
            no_docker.port,
        ),
        (
            format!("ssh://root@127.0.0.1:{closed_port}"),
            sshd.ssh_command(true),
            "ssh root@127.0.0.1:{port} failed: ssh: connect to host 127.0.0.1 port {port}: Connection refused",
            closed_port,
        ),
    ];
    for (host, command, want, port) in cases {
        let mut cmd = ws.command(&["up"]);
        cmd.env("DOCKER_HOST", &host).env("WORKROOM_SSH_COMMAND", &command);
        let out = output_within(cmd, None);
        let err = stderr(&out);
        let want = want.replace("{port}", &port.to_string());
        assert_eq!(out.status.code(), Some(2), "{host}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{host}: not one line: {err}");
        assert!(err.contains(&want), "{host}: want {want:?} in {err:?}");
    }
    assert!(ws.containers().is_empty());
}
