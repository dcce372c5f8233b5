//! The in-room daemon against the real engine: it runs as the room's main
//! process under Docker's init on every fixture image, answers over
//! `docker exec -i ... relay`, carries bytes intact, survives a closed stdin
//! and restarts with a new boot id.

mod common;

use common::*;
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use workroom::engine::Engine;
use workroom::link::RoomLink;
use workroomd::proto::{Event, Hello, Link, LinkError, Request, Response, Role};

/// Guards against a hang in a test that waits on an event; never a pause.
const GUARD: Duration = Duration::from_secs(120);

async fn connect(room: &str) -> RoomLink {
    let engine = Engine::connect().await.expect("engine");
    RoomLink::connect(&engine, room).await.expect("link")
}

fn daemon_is_main_process_under_init_and_answers_status(image: &str) -> Workspace {
    let ws = Workspace::image(image);
    ws.up();
    let room = ws.room_name();
    let inspect = docker_ok(&[
        "inspect",
        &room,
        "--format",
        "{{.Path}} {{.Args}} {{.HostConfig.Init}} {{.HostConfig.RestartPolicy.Name}}",
    ]);
    // From the engine's daemon volume (ADR 0002); execs name the link to it.
    assert_eq!(inspect, "/.workroom/dist/workroomd [serve] true unless-stopped");
    // PID 1 is Docker's init, and the daemon is its child.
    let ppid = docker_ok(&["exec", &room, "/.workroom/bin/workroomd", "version"]);
    assert_eq!(ppid, format!("workroomd {}", workroomd::VERSION));
    let comm = docker_ok(&["exec", &room, "cat", "/proc/1/comm"]);
    assert_eq!(comm, "docker-init");
    let status = runtime().block_on(async { connect(&room).await.status().await.expect("status") });
    assert_eq!(status.version, workroomd::VERSION);
    assert_eq!(status.boot_id.len(), 16);
    let parent = docker_ok(&["exec", &room, "sh", "-c", &format!("cut -d' ' -f4 /proc/{}/stat", status.pid)]);
    assert_eq!(parent, "1", "the daemon's parent is the init process");
    assert_eq!(status.program, workroomd::proto::ProgramStatus::NotConfigured);
    ws
}

#[test]
fn the_daemon_serves_on_the_busybox_only_image() {
    let ws = daemon_is_main_process_under_init_and_answers_status(BUSYBOX);
    let missing =
        docker(&["exec", &ws.room_name(), "ls", "/bin/bash", "/usr/bin/git", "/lib/x86_64-linux-gnu/libc.so.6"]);
    assert!(!missing.status.success(), "the busybox fixture must have no bash, git or libc");
}

#[test]
fn the_daemon_serves_on_the_debian_image() {
    daemon_is_main_process_under_init_and_answers_status(DEBIAN);
}

#[test]
fn the_daemon_serves_as_root_on_the_image_whose_user_is_not_root() {
    let ws = daemon_is_main_process_under_init_and_answers_status(DEBIAN_USER);
    let owner =
        docker_ok(&["exec", &ws.room_name(), "stat", "-c", "%U %a", "/.workroom/run", "/.workroom/run/workroomd.sock"]);
    assert_eq!(owner, "root 700\nroot 600", "only root in the room may reach the daemon");
}

/// Sends `len` random bytes through an echo stream and compares digests.
async fn echo_round_trip(link: &RoomLink, len: usize) {
    let handle = link.link().open(Request::Echo).await.expect("open echo");
    assert_eq!(handle.recv_reply().await.expect("reply"), Response::Ready);
    let sender = handle.clone();
    let send = async move {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut digest = Sha256::new();
        let mut chunk = vec![0u8; 256 * 1024];
        let mut left = len;
        while left > 0 {
            let n = left.min(chunk.len());
            for b in chunk[..n].iter_mut() {
                // xorshift: random-looking bytes without a dependency.
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *b = state as u8;
            }
            digest.update(&chunk[..n]);
            sender.send_data(&chunk[..n]).await.expect("send");
            left -= n;
        }
        sender.send_eof().await.expect("eof");
        digest.finalize()
    };
    let receive = async {
        let mut digest = Sha256::new();
        let mut got = 0usize;
        while let Some(event) = handle.recv().await {
            match event {
                Event::Data(bytes) => {
                    got += bytes.len();
                    digest.update(&bytes);
                }
                Event::Eof => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        (got, digest.finalize())
    };
    let (sent, (got, received)) =
        tokio::time::timeout(GUARD * 5, async { tokio::join!(send, receive) }).await.expect("the echo finished");
    assert_eq!(got, len);
    assert_eq!(sent, received, "bytes changed on the way");
}

#[test]
fn twenty_megabytes_make_the_round_trip_through_the_relay_intact() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    runtime().block_on(async {
        let link = connect(&ws.room_name()).await;
        echo_round_trip(&link, 20 * 1000 * 1000).await;
    });
}

#[test]
fn one_gibibyte_makes_the_round_trip_through_the_relay_intact() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    runtime().block_on(async {
        let link = connect(&ws.room_name()).await;
        let started = Instant::now();
        echo_round_trip(&link, 1 << 30).await;
        eprintln!("1 GiB echoed in {:?}", started.elapsed());
    });
}

/// A local engine's exec connection is a socket, so the host's side of the
/// link splices a forwarded connection's bytes into it, as the daemon does
/// into its pipe (`workroomd::staging`); only an ssh engine's copies.
#[test]
fn a_link_through_a_local_engine_splices_on_both_sides() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    runtime().block_on(async {
        let engine = Engine::connect().await.expect("engine");
        assert!(!engine.host().starts_with("ssh://"), "run with a local engine");
        let link = RoomLink::connect(&engine, &ws.room_name()).await.expect("link");
        let handle = link.link().open(Request::Status).await.expect("open");
        assert!(handle.can_splice(), "the host's link to {} copies every forwarded byte", engine.host());
    });
}

#[test]
fn closing_stdin_mid_stream_ends_the_relay_and_leaves_the_daemon_serving() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let room = ws.room_name();
    let mut relay = Command::new("docker")
        .args(["exec", "-i", "-u", "0", &room, "/.workroom/bin/workroomd", "relay"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("docker exec relay");
    // A preamble cut in the middle of the hello frame: then stdin closes.
    let mut stdin = relay.stdin.take().unwrap();
    stdin.write_all(b"WORKROOM\x01\x00\x00").unwrap();
    drop(stdin);
    let deadline = Instant::now() + GUARD;
    let status = loop {
        if let Some(status) = relay.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the relay did not end after its stdin closed");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "relay exit {status}");
    let mut out = Vec::new();
    relay.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    assert!(out.starts_with(b"WORKROOM"), "only the daemon's bytes come out of the relay");
    // The daemon is unhurt: a new link answers.
    let status = runtime().block_on(async { connect(&room).await.status().await.expect("status") });
    assert_eq!(status.version, workroomd::VERSION);
}

#[test]
fn after_a_docker_restart_the_daemon_serves_with_a_new_boot_id() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let room = ws.room_name();
    let before = runtime().block_on(async { connect(&room).await.status().await.unwrap() });
    docker_ok(&["restart", "-t", "1", &room]);
    // `up` waits for the daemon to answer (a readiness probe).
    ws.up();
    let after = runtime().block_on(async { connect(&room).await.status().await.unwrap() });
    assert_ne!(before.boot_id, after.boot_id);
    assert_ne!(before.started_at_unix_ms, after.started_at_unix_ms);
}

#[test]
fn a_host_speaking_another_protocol_is_refused_naming_both_versions() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let room = ws.room_name();
    runtime().block_on(async {
        let engine = Engine::connect().await.unwrap();
        let spec = workroom::engine::ExecSpec {
            argv: vec!["/.workroom/bin/workroomd".into(), "relay".into()],
            user: Some("0".into()),
            stdin: true,
            ..Default::default()
        };
        let exec = engine.exec(&room, &spec).await.unwrap();
        let ours = Hello { protocol: 999, version: "9.9.9".into(), ..Hello::new(Role::Host) };
        let err = match Link::handshake_with(exec.output, exec.input, ours).await {
            Err(e) => e,
            Ok(_) => panic!("a protocol-999 host was accepted"),
        };
        assert!(matches!(err, LinkError::ProtocolMismatch { .. }), "{err}");
        let message = err.to_string();
        assert!(message.contains(&format!("workroomd {} speaks protocol 1", workroomd::VERSION)), "{message}");
        assert!(message.contains("9.9.9") && message.contains("999"), "{message}");
    });
}

#[test]
fn the_image_program_runs_supervised_when_override_command_is_false() {
    let ws = Workspace::new(serde_json::json!({
        "image": DEBIAN,
        "overrideCommand": false,
    }));
    ws.up();
    let room = ws.room_name();
    // The debian fixture's CMD is bash, which ends at once without a tty:
    // the daemon reports its exit instead of dying with it.
    let status = runtime().block_on(async {
        let link = connect(&room).await;
        let deadline = Instant::now() + GUARD;
        loop {
            let s = link.status().await.unwrap();
            if matches!(s.program, workroomd::proto::ProgramStatus::Exited(_)) || Instant::now() > deadline {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    assert_eq!(
        status.program,
        workroomd::proto::ProgramStatus::Exited(workroomd::proto::ExitStatus { code: Some(0), signal: None })
    );
    assert_eq!(docker_ok(&["inspect", &room, "--format", "{{.State.Running}}"]), "true");
}

#[test]
fn the_daemons_log_lines_carry_a_level_and_workroom_log_in_the_room_sets_it() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let logs = docker(&["logs", &ws.room_name()]);
    let said = format!("{}{}", stdout(&logs), stderr(&logs));
    let serving = format!(" INFO workroomd {} serving boot=", workroomd::VERSION);
    assert!(said.lines().any(|l| l.contains(&serving)), "{said}");

    let quiet = Workspace::new(serde_json::json!({ "image": BUSYBOX, "containerEnv": { "WORKROOM_LOG": "warn" } }));
    quiet.up();
    let logs = docker(&["logs", &quiet.room_name()]);
    let said = format!("{}{}", stdout(&logs), stderr(&logs));
    assert!(!said.contains("serving"), "an info line at WORKROOM_LOG=warn: {said}");
    quiet.exec_ok(&["true"]);
}
