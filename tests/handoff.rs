//! Daemon hand-off: the daemon execs a new binary in place and keeps its
//! panes; a binary that cannot take over is refused and the old one serves on.

mod common;

use common::*;
use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};
use workroom::engine::Engine;
use workroom::link::RoomLink;
use workroomd::proto::{Event, PaneRequest, Request, Response, StreamHandle};

/// Guards against a hang while waiting for output; never a pause.
const GUARD: Duration = Duration::from_secs(60);
/// The load pane's screen: tall, so the repaint after a hand-off reaches
/// back past the lines printed while no client was attached.
const ROWS: u16 = 1000;
const COLS: u16 = 20;
/// Counter lines to see after the hand-off before judging.
const LINES_AFTER: u64 = 300;

/// A daemon that differs from the embedded one in digest only: an ELF
/// with bytes after its end still runs.
fn different_daemon(dir: &std::path::Path, tail: &str) -> std::path::PathBuf {
    let path = dir.join(format!("workroomd-{tail}"));
    let mut bytes = workroom::EMBEDDED_DAEMON.to_vec();
    bytes.extend_from_slice(tail.as_bytes());
    std::fs::write(&path, bytes).unwrap();
    path
}

fn hand_off(ws: &Workspace, args: &[&str]) -> std::process::Output {
    let mut all = vec!["hand-off"];
    all.extend_from_slice(args);
    ws.workroom(&all)
}

fn entrypoint_digest(room: &str) -> String {
    docker_ok(&["exec", room, "sha256sum", "/.workroom/bin/workroomd"]).split_whitespace().next().unwrap().to_string()
}

fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

async fn pane_pid(link: &RoomLink, name: &str) -> u32 {
    match link.link().request(Request::ListPanes).await.unwrap() {
        Response::Panes { panes } => panes.iter().find(|p| p.name == name).expect("the pane is listed").pid,
        other => panic!("{other:?}"),
    }
}

async fn attach(link: &RoomLink, pane: &str) -> StreamHandle {
    let handle = link
        .link()
        .open(Request::Attach { pane: pane.into(), rows: ROWS, cols: COLS, history: true, typist: None })
        .await
        .unwrap();
    assert_eq!(handle.recv_reply().await.unwrap(), Response::Ready);
    handle
}

/// The counter values on a rendered screen, top to bottom.
fn counters(screen: &vt100::Parser) -> Vec<u64> {
    screen.screen().contents().lines().filter_map(|l| l.trim().strip_prefix("n=")?.parse().ok()).collect()
}

fn assert_consecutive(values: &[u64], what: &str) {
    for pair in values.windows(2) {
        assert_eq!(pair[1], pair[0] + 1, "{what}: a line was lost or repeated around {}", pair[0]);
    }
}

#[test]
fn a_hand_off_under_load_keeps_the_shell_and_loses_and_repeats_no_line() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let room = ws.room_name();
    let new_daemon = different_daemon(ws.path(), "under-load");
    runtime().block_on(async {
        let engine = Engine::connect().await.unwrap();
        let link = RoomLink::connect(&engine, &room).await.unwrap();
        let open = PaneRequest {
            name: "load".into(),
            argv: Some(vec![
                "sh".into(),
                "-c".into(),
                "i=0; while :; do i=$((i+1)); echo n=$i; usleep 2000; done".into(),
            ]),
            rows: ROWS,
            cols: COLS,
            ..Default::default()
        };
        assert!(matches!(link.link().request(Request::OpenPane(open)).await.unwrap(), Response::PaneOpened { .. }));
        let pid = pane_pid(&link, "load").await;

        // Before: watch until the counter runs, then hand off while it does.
        let before_stream = attach(&link, "load").await;
        let mut before = vt100::Parser::new(ROWS, COLS, 0);
        let deadline = Instant::now() + GUARD;
        while counters(&before).last().copied().unwrap_or(0) < 100 {
            assert!(Instant::now() < deadline, "the counter did not run");
            match tokio::time::timeout(GUARD, before_stream.recv()).await.unwrap() {
                Some(Event::Data(bytes)) => before.process(&bytes),
                other => panic!("the pane stopped before the hand-off: {other:?}"),
            }
        }
        let folder = ws.folder();
        let binary = new_daemon.display().to_string();
        let handing = tokio::task::spawn_blocking(move || {
            std::process::Command::new(workroom_bin())
                .args(["hand-off", "--binary", &binary, "--workspace-folder", &folder])
                .output()
                .unwrap()
        });
        // The old daemon's connection ends with the exec.
        while let Ok(Some(Event::Data(bytes))) = tokio::time::timeout(GUARD, before_stream.recv()).await {
            before.process(&bytes);
        }
        let out = handing.await.unwrap();
        assert!(out.status.success(), "hand-off: {}", stderr(&out));
        assert_eq!(stdout(&out).trim(), "handed off");

        // After: a new connection, a repaint, and the counter going on.
        let link = RoomLink::connect(&engine, &room).await.unwrap();
        assert_eq!(pane_pid(&link, "load").await, pid, "the shell is the same process");
        let after_stream = attach(&link, "load").await;
        let mut after = vt100::Parser::new(ROWS, COLS, 0);
        let seen_before = counters(&before);
        let last_before = *seen_before.last().unwrap();
        while counters(&after).last().copied().unwrap_or(0) < last_before + LINES_AFTER {
            match tokio::time::timeout(GUARD, after_stream.recv()).await.unwrap() {
                Some(Event::Data(bytes)) => after.process(&bytes),
                other => panic!("the pane stopped after the hand-off: {other:?}"),
            }
        }
        // The last line of each screen may be half printed.
        let before_lines = &seen_before[..seen_before.len() - 1];
        let seen_after = counters(&after);
        let after_lines = &seen_after[..seen_after.len() - 1];
        assert_consecutive(before_lines, "before the hand-off");
        assert_consecutive(after_lines, "across and after the hand-off");
        assert!(
            after_lines[0] <= *before_lines.last().unwrap() + 1,
            "the repaint after the hand-off starts at {} but the last line before was {}",
            after_lines[0],
            before_lines.last().unwrap()
        );
    });
}

#[test]
fn hand_off_twice_in_a_row_then_current_then_forced_keeps_the_panes() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let room = ws.room_name();
    let first = different_daemon(ws.path(), "first");
    let second = different_daemon(ws.path(), "second");
    let (pane, daemon_pid) = runtime().block_on(async {
        let engine = Engine::connect().await.unwrap();
        let link = RoomLink::connect(&engine, &room).await.unwrap();
        let open = PaneRequest { name: "keep".into(), ..Default::default() };
        link.link().request(Request::OpenPane(open)).await.unwrap();
        (pane_pid(&link, "keep").await, link.status().await.unwrap().pid)
    });
    for (args, said, binary) in [
        (vec!["--binary", first.to_str().unwrap()], "handed off", std::fs::read(&first).unwrap()),
        (vec!["--binary", second.to_str().unwrap()], "handed off", std::fs::read(&second).unwrap()),
        (vec!["--binary", second.to_str().unwrap()], "current", std::fs::read(&second).unwrap()),
        (vec!["--binary", second.to_str().unwrap(), "--force"], "handed off", std::fs::read(&second).unwrap()),
        (vec![], "handed off", workroom::EMBEDDED_DAEMON.to_vec()),
    ] {
        let out = hand_off(&ws, &args);
        assert!(out.status.success(), "hand-off {args:?}: {}", stderr(&out));
        assert_eq!(stdout(&out).trim(), said, "hand-off {args:?}");
        // The entrypoint is the running binary, so a restart runs it too.
        assert_eq!(entrypoint_digest(&room), digest(&binary), "after hand-off {args:?}");
    }
    let leftovers = docker_ok(&["exec", &room, "ls", "/.workroom/bin"]);
    assert_eq!(leftovers, "workroomd", "no uploaded binary is left behind");
    runtime().block_on(async {
        let engine = Engine::connect().await.unwrap();
        let link = RoomLink::connect(&engine, &room).await.unwrap();
        assert_eq!(pane_pid(&link, "keep").await, pane, "the pane's shell survived every hand-off");
        assert_eq!(link.status().await.unwrap().pid, daemon_pid, "the daemon execs in place");
    });
}

#[test]
fn a_corrupt_new_daemon_is_refused_and_the_old_one_keeps_serving() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let room = ws.room_name();
    let truncated = ws.path().join("workroomd-truncated");
    std::fs::write(&truncated, &workroom::EMBEDDED_DAEMON[..workroom::EMBEDDED_DAEMON.len() / 3]).unwrap();
    let pane = runtime().block_on(async {
        let engine = Engine::connect().await.unwrap();
        let link = RoomLink::connect(&engine, &room).await.unwrap();
        link.link()
            .request(Request::OpenPane(PaneRequest { name: "keep".into(), ..Default::default() }))
            .await
            .unwrap();
        pane_pid(&link, "keep").await
    });
    let out = hand_off(&ws, &["--binary", truncated.to_str().unwrap()]);
    assert!(!out.status.success(), "a truncated daemon must be refused");
    assert!(stderr(&out).contains("refused the hand-off"), "{}", stderr(&out));
    assert!(stderr(&out).contains("keeps serving"), "{}", stderr(&out));
    assert_eq!(entrypoint_digest(&room), digest(workroom::EMBEDDED_DAEMON));
    assert_eq!(docker_ok(&["exec", &room, "ls", "/.workroom/bin"]), "workroomd");
    runtime().block_on(async {
        let engine = Engine::connect().await.unwrap();
        let link = RoomLink::connect(&engine, &room).await.unwrap();
        assert_eq!(pane_pid(&link, "keep").await, pane);
    });
    let current = hand_off(&ws, &[]);
    assert_eq!(stdout(&current).trim(), "current", "the old daemon still runs: {}", stderr(&current));
}

#[test]
fn a_hand_off_holds_across_a_restart_of_a_room_started_from_the_daemon_volume() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let room = ws.room_name();
    let entrypoint = docker_ok(&["inspect", "--format", "{{index .Config.Entrypoint 0}}", &room]);
    assert_eq!(entrypoint, "/.workroom/dist/workroomd", "a new image room starts its daemon from the volume");
    let linked = docker_ok(&["exec", &room, "readlink", "/.workroom/bin/workroomd"]);
    assert_eq!(linked, "/.workroom/dist/workroomd", "the path every exec names leads to the volume's daemon");
    let first = different_daemon(ws.path(), "first");
    let out = hand_off(&ws, &["--binary", first.to_str().unwrap()]);
    assert!(out.status.success(), "hand-off: {}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "handed off");
    assert_eq!(entrypoint_digest(&room), digest(&std::fs::read(&first).unwrap()), "installed over the link");

    docker_ok(&["restart", &room]);
    ws.up();
    // The volume's daemon started, found the hand-off's binary and ran it.
    let out = hand_off(&ws, &["--binary", first.to_str().unwrap()]);
    assert!(out.status.success(), "hand-off after the restart: {}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "current", "the handed-off daemon serves after a restart");
    let volume = docker_ok(&[
        "inspect",
        "--format",
        "{{range .Mounts}}{{if eq .Destination \"/.workroom/dist\"}}{{.Name}} {{.RW}}{{end}}{{end}}",
        &room,
    ]);
    assert!(volume.starts_with("workroom-daemon.") && volume.ends_with(" false"), "read-only daemon volume: {volume}");
}
