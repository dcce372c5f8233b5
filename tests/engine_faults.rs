//! The engine failing under workroom, without touching the machine's real
//! dockerd (other tests run beside these): `DOCKER_HOST` points at a unix
//! socket of the test's own, a small proxy in front of the real engine's
//! socket (`common::engine_proxy`), which the test takes away mid-command or
//! which accepts and never answers (an engine stopped with SIGSTOP looks so
//! to a client).

mod common;

use common::engine_proxy::{Behaviour, EngineProxy};
use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Guards against a hang while waiting on a command; never a pause.
const GUARD: Duration = Duration::from_secs(90);

/// The one line workroom says when the engine at `host` is gone.
fn assert_said_only_that_docker_did_not_answer(out: &Output, host: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains(&format!("Docker didn't answer at {host}")), "{err}");
    for raw in ["client error", "hyper", "Connect)"] {
        assert!(!err.contains(raw), "the transport's words ({raw}) reached the user: {err}");
    }
}

#[test]
fn exec_says_docker_did_not_answer_when_the_engine_shuts_down_under_it_not_the_transports_error() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let mut engine = EngineProxy::start(Behaviour::Forward);
    let mut child = ws
        .command(&["exec", "--", "sh", "-c", "echo started; exec sleep 30"])
        .env("DOCKER_HOST", engine.host())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut first).unwrap();
    assert_eq!(first, "started\n", "the command did not start: {first:?}");
    let began = Instant::now();
    engine.stop();
    let out = finish_within(child, "exec with its engine gone", GUARD);
    assert_said_only_that_docker_did_not_answer(&out, &engine.host());
    // It noticed the engine's end, not the command's (a 30 s sleep).
    assert!(began.elapsed() < Duration::from_secs(25), "exec waited {:?}", began.elapsed());
}

#[test]
fn exec_says_docker_did_not_answer_when_the_engines_socket_does_not_exist() {
    let engine = EngineProxy::start(Behaviour::Forward);
    let host = engine.host();
    drop(engine);
    let folder = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(workroom_bin());
    cmd.args(["exec", "--workspace-folder", &folder.path().display().to_string(), "--", "true"]);
    cmd.env("DOCKER_HOST", &host);
    let out = output_within_guard(cmd, None, GUARD);
    assert_said_only_that_docker_did_not_answer(&out, &host);
}

/// How long the tests let workroom wait on a silent engine
/// (`WORKROOM_ENGINE_TIMEOUT`): past the 5 s notice, well short of the guard.
const ENGINE_TIMEOUT_SECONDS: u64 = 8;

/// Runs `cmd` (a `workroom` command) against an engine that accepts and
/// never answers, with the bound set; checks the notice came once and the
/// end in one line.
fn waits_on_a_silent_engine_saying_so_once_then_gives_up(mut cmd: Command) -> Output {
    let engine = EngineProxy::start(Behaviour::Silent);
    cmd.env("DOCKER_HOST", engine.host()).env("WORKROOM_ENGINE_TIMEOUT", ENGINE_TIMEOUT_SECONDS.to_string());
    let began = Instant::now();
    let out = output_within_guard(cmd, None, GUARD);
    let waited = began.elapsed();
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    let notice = format!("waiting for the engine at {} (no answer for 5 s)", engine.host());
    assert_eq!(err.matches(&notice).count(), 1, "the notice, once: {err}");
    let gave_up = format!("Docker at {} gave no answer within {ENGINE_TIMEOUT_SECONDS} s", engine.host());
    assert!(err.contains(&gave_up), "{err}");
    assert_eq!(err.lines().count(), 2, "the notice and the end: {err}");
    assert!(waited >= Duration::from_secs(ENGINE_TIMEOUT_SECONDS), "gave up after {waited:?}");
    out
}

#[test]
fn exec_on_a_hung_engine_says_it_waits_after_5_s_and_gives_up_at_the_bound_instead_of_waiting_silently() {
    let ws = Workspace::image(BUSYBOX);
    let out = waits_on_a_silent_engine_saying_so_once_then_gives_up(ws.command(&["exec", "--", "true"]));
    assert_eq!(out.status.code(), Some(125));
}

#[test]
fn list_on_a_hung_engine_says_it_waits_after_5_s_and_gives_up_at_the_bound_instead_of_waiting_silently() {
    let mut list = Command::new(workroom_bin());
    list.arg("list");
    waits_on_a_silent_engine_saying_so_once_then_gives_up(list);
}

#[test]
fn up_on_a_hung_engine_says_it_waits_after_5_s_and_gives_up_at_the_bound_instead_of_waiting_silently() {
    let ws = Workspace::image(BUSYBOX);
    waits_on_a_silent_engine_saying_so_once_then_gives_up(ws.command(&["up"]));
}

/// Longer than the daemon's hello may take (10 s), as in the report.
const STALL: Duration = Duration::from_secs(15);

#[test]
fn a_15_s_engine_stall_during_a_rooms_first_start_keeps_the_room_and_does_not_blame_the_daemon() {
    let ws = Workspace::new(serde_json::json!({
        "image": BUSYBOX,
        "postCreateCommand": "echo ran >> .post-create-runs",
    }));
    let engine = EngineProxy::start(Behaviour::StallAfterFirstExecStart(STALL));
    let mut up = ws.command(&["up"]);
    up.env("DOCKER_HOST", engine.host());
    let began = Instant::now();
    let out = output_within_guard(up, None, GUARD);
    let err = stderr(&out);
    assert!(began.elapsed() >= STALL, "the stall happened ({:?}): {err}", began.elapsed());
    // The engine came back: `up` carries on, or says it was the engine.
    // Before, it failed on a link the stall had broken, blaming the daemon
    // ("sent no hello", "the daemon closed the connection"), or ran the
    // hooks without the probed environment.
    let engines = err.contains(&format!("the engine at {} stopped answering", engine.host()));
    assert!(out.status.success() || engines, "{err}");
    for blamed in ["sent no hello", "the daemon closed", "did not answer", "was not made", "printed no environment"] {
        assert!(!err.contains(blamed), "{blamed:?}: {err}");
    }
    // Kept, and running: the next `up` (the engine answering again) carries
    // on, and the first hooks run once in all.
    assert_eq!(ws.containers().len(), 1, "{err}");
    let again = ws.up();
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(ws.read(".post-create-runs"), "ran\n", "postCreateCommand ran once: {err}");
    drop(engine);
}
