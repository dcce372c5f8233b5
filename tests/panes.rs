//! Panes through a real terminal: `workroom shell` runs on a pty made here,
//! as a person's terminal would run it; the test types and reads.

mod common;
mod pty;

use common::*;
use pty::Term;
use std::time::Duration;

/// Guards against a hang while waiting for output; never a pause.
const GUARD: Duration = Duration::from_secs(60);
/// ctrl-p ctrl-q, the default detach keys.
const DETACH: &[u8] = b"\x10\x11";

fn shell(ws: &Workspace, rows: u16, cols: u16) -> Term {
    Term::spawn(workroom_bin(), &["shell", "--workspace-folder", &ws.folder()], rows, cols)
}

fn panes_json(ws: &Workspace) -> Vec<serde_json::Value> {
    let out = ws.workroom(&["panes", "--json"]);
    assert!(out.status.success(), "panes: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("panes --json is JSON")
}

#[test]
fn a_shell_types_reads_resizes_detaches_and_reattaches_with_the_screen_repainted() {
    let ws = Workspace::new(serde_json::json!({ "image": DEBIAN, "remoteUser": "dev" }));
    let mut term = shell(&ws, 30, 100);
    // Typed text is echoed as typed; only the shell's evaluation prints "42ok".
    term.send(b"echo $((6*7))ok\r");
    term.expect("42ok", GUARD);
    // bash from passwd although the image sets no SHELL, as the remote user.
    term.send(b"echo \"[$(ps -o comm= -p $$)] <$(id -un)> {$PWD}\"\r");
    term.expect("[bash] <dev>", GUARD);
    term.expect(&format!("{{/workspaces/{}}}", ws.path().file_name().unwrap().to_string_lossy()), GUARD);
    term.send(b"stty size\r");
    term.expect("30 100", GUARD);
    term.resize(40, 120);
    // The resize travels host pty -> exec resize -> SIGWINCH in the room ->
    // ResizePane; ask until the pane has it.
    let deadline = std::time::Instant::now() + GUARD;
    loop {
        term.send(b"echo \"<$(stty size)>\"\r");
        let text = term.expect(">\r\n", GUARD);
        if text.contains("<40 120>") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the pane never saw the new size:\n{}", term.all());
    }
    term.send(DETACH);
    term.expect("detached from pane main", GUARD);
    assert_eq!(term.wait(GUARD), 0, "detaching ends `shell` with 0");
    let panes = panes_json(&ws);
    assert_eq!(panes.len(), 1, "the pane goes on after a detach: {panes:?}");
    assert_eq!(panes[0]["clients"], 0);

    let mut again = shell(&ws, 40, 120);
    // The repaint shows what was on screen before the detach.
    again.expect("42ok", GUARD);
    again.send(b"exit 3\r");
    assert_eq!(again.wait(GUARD), 3, "the pane's exit status ends `shell`");
    assert!(panes_json(&ws).is_empty(), "an exited pane is gone");
}

#[test]
fn a_pane_on_the_busybox_only_image_runs_its_sh() {
    let ws = Workspace::image(BUSYBOX);
    let mut term = shell(&ws, 24, 80);
    term.send(b"echo \"[$(readlink /proc/$$/exe)]\"\r");
    term.expect("[/bin/busybox]", GUARD);
    term.send(b"exit\r");
    assert_eq!(term.wait(GUARD), 0);
}

#[test]
fn two_clients_on_one_pane_see_the_same_output_and_both_end_with_its_status() {
    let ws = Workspace::image(BUSYBOX);
    let mut first = shell(&ws, 24, 80);
    first.send(b"echo $((40+2))ready\r");
    first.expect("42ready", GUARD);
    let mut second = shell(&ws, 24, 80);
    second.expect("42ready", GUARD);
    let clients = panes_json(&ws)[0]["clients"].as_u64();
    assert_eq!(clients, Some(2), "both clients are attached");
    // Typed in one, seen in both.
    second.send(b"echo $((100+23))both\r");
    first.expect("123both", GUARD);
    second.expect("123both", GUARD);
    first.send(b"exit 5\r");
    assert_eq!(first.wait(GUARD), 5);
    assert_eq!(second.wait(GUARD), 5);
}

#[test]
fn panes_lists_a_pane_and_kill_pane_ends_it() {
    let ws = Workspace::image(BUSYBOX);
    let mut term = Term::spawn(workroom_bin(), &["shell", "--workspace-folder", &ws.folder(), "work"], 24, 80);
    term.send(b"echo $((1+1))up\r");
    term.expect("2up", GUARD);
    let panes = panes_json(&ws);
    assert_eq!(panes.len(), 1);
    assert_eq!(panes[0]["name"], "work");
    assert_eq!(panes[0]["command"], serde_json::json!(["/bin/sh", "-l"]));
    assert_eq!((panes[0]["rows"].as_u64(), panes[0]["cols"].as_u64()), (Some(24), Some(80)));
    let pid = panes[0]["pid"].as_u64().unwrap();
    let table = stdout(&ws.workroom(&["panes"]));
    assert!(table.contains("work") && table.contains(&pid.to_string()), "{table}");
    let killed = ws.workroom(&["kill-pane", "work"]);
    assert!(killed.status.success(), "kill-pane: {}", stderr(&killed));
    assert!(panes_json(&ws).is_empty());
    // The attached client ends too (a hung-up shell: 128+SIGHUP or the shell's own code).
    assert_ne!(term.wait(GUARD), 0);
    let missing = ws.workroom(&["kill-pane", "work"]);
    assert!(!missing.status.success());
    assert!(stderr(&missing).contains("no pane work"), "{}", stderr(&missing));
}

#[test]
fn after_a_restart_reattaching_says_the_pane_ended_and_shows_its_last_screen() {
    let ws = Workspace::image(BUSYBOX);
    let mut term = shell(&ws, 24, 80);
    term.send(b"echo $((7*6))lastscreen\r");
    term.expect("42lastscreen", GUARD);
    // The screen is saved at a bounded rate; wait until it is on disk.
    let room = ws.room_name();
    let deadline = std::time::Instant::now() + GUARD;
    while !docker(&["exec", &room, "grep", "-q", "42lastscreen", "/.workroom/state/panes/main.screen"]).status.success()
    {
        assert!(std::time::Instant::now() < deadline, "the screen was never saved");
        std::thread::sleep(Duration::from_millis(100));
    }
    term.send(DETACH);
    assert_eq!(term.wait(GUARD), 0);
    docker_ok(&["restart", "-t", "1", &room]);
    let mut after = shell(&ws, 24, 80);
    after.expect("42lastscreen", GUARD);
    after.expect("pane main ended when the room restarted at", GUARD);
    after.expect("a new pane main starts", GUARD);
    after.send(b"echo $((5*5))fresh\r");
    after.expect("25fresh", GUARD);
    after.send(b"exit\r");
    assert_eq!(after.wait(GUARD), 0);
}
