//! Lifecycle hooks as the daemon's own jobs, against the real engine:
//! kills aimed at each marker write of `up` (the built `workroom` kills
//! itself, SIGKILL, at the point `WORKROOM_TEST_KILL_AT` names), an `up`
//! killed while a hook runs and the next one following it, a failure no
//! `up` saw, a room the engine restarts, and markers left by a workroom of
//! before. Hooks count themselves by appending a line to a file of the
//! bind-mounted workspace, which the test reads from the host.

mod common;

use common::*;
use serde_json::json;
use std::io::BufRead;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use workroom::engine::Engine;
use workroom::link::RoomLink;
use workroom::room::hooks::{KILL_AT_ENV, KILL_POINTS};

/// How long a hook of these tests may take to show what the test waits
/// for: they start in milliseconds; this is a hang, not a slow machine.
const HOOK_GUARD: Duration = Duration::from_secs(120);

const HOOKS: [&str; 4] = ["onCreate", "updateContent", "postCreate", "postStart"];

/// Every hook appends its name; postCreate takes a moment, so a kill right
/// after it began lands while it runs.
fn counted_hooks() -> serde_json::Value {
    json!({
        "image": BUSYBOX,
        "onCreateCommand": "echo onCreate >> hooks.log",
        "updateContentCommand": "echo updateContent >> hooks.log",
        "postCreateCommand": "sleep 0.5; echo postCreate >> hooks.log",
        "postStartCommand": "echo postStart >> hooks.log",
    })
}

/// How often each of `names` appears as a line of `file`.
fn counts(ws: &Workspace, file: &str, names: &[&str]) -> Vec<usize> {
    let log = ws.read(file);
    names.iter().map(|n| log.lines().filter(|l| l == n).count()).collect()
}

/// `up` with a kill aimed at `point`; it must have died there.
fn up_killed_at(ws: &Workspace, point: &str) -> Output {
    let mut cmd = ws.command(&["up"]);
    cmd.env(KILL_AT_ENV, point);
    let out = output_within(cmd, None);
    assert_eq!(
        out.status.signal(),
        Some(9),
        "`up` was to kill itself at {point} but {}; said: {}",
        out.status,
        stderr(&out)
    );
    out
}

#[test]
fn a_post_create_command_is_not_lost_when_up_is_killed_between_its_claim_and_its_start() {
    let ws = Workspace::new(counted_hooks());
    up_killed_at(&ws, "claimed:postCreateCommand");
    let out = ws.up();
    assert_eq!(
        counts(&ws, "hooks.log", &HOOKS),
        [1, 1, 1, 1],
        "hooks.log:\n{}\nthe second up said:\n{}",
        ws.read("hooks.log"),
        stderr(&out)
    );
}

#[test]
fn a_kill_at_any_marker_write_of_up_loses_no_hook_and_runs_none_twice() {
    for point in KILL_POINTS {
        let ws = Workspace::new(counted_hooks());
        up_killed_at(&ws, point);
        let out = ws.up();
        assert_eq!(
            counts(&ws, "hooks.log", &HOOKS),
            [1, 1, 1, 1],
            "killed at {point}; hooks.log:\n{}\nthe next up said:\n{}",
            ws.read("hooks.log"),
            stderr(&out)
        );
        let again = ws.up();
        assert_eq!(counts(&ws, "hooks.log", &HOOKS), [1, 1, 1, 1], "killed at {point}: {}", stderr(&again));
    }
}

/// A spawned `up` whose stderr is collected as it comes, so a test can
/// wait for a line before it acts.
struct Watched {
    child: Child,
    said: Arc<Mutex<String>>,
    reader: std::thread::JoinHandle<()>,
}

impl Watched {
    fn up(ws: &Workspace) -> Watched {
        let mut cmd = ws.command(&["up"]);
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start up");
        let said = Arc::new(Mutex::new(String::new()));
        let lines = std::io::BufReader::new(child.stderr.take().expect("piped"));
        let into = said.clone();
        let reader = std::thread::spawn(move || {
            for line in lines.lines().map_while(Result::ok) {
                let mut said = into.lock().unwrap();
                said.push_str(&line);
                said.push('\n');
            }
        });
        Watched { child, said, reader }
    }

    fn said(&self) -> String {
        self.said.lock().unwrap().clone()
    }

    fn wait_for_line(&self, text: &str) {
        wait_for(&format!("`up` to say {text:?} (it said: {})", self.said()), HOOK_GUARD, || {
            self.said().contains(text)
        });
    }

    /// Its exit status and everything it said.
    fn finish(self) -> (std::process::ExitStatus, String) {
        let out = finish_within(self.child, "up", COMMAND_GUARD);
        self.reader.join().unwrap();
        let said = self.said.lock().unwrap().clone();
        (out.status, said)
    }
}

/// onCreate writes `begun`, says its first words, waits for the test's
/// `release` file, then says its last words and writes `ended`.
const HELD_HOOK: &str = "echo begun >> hooks.log; echo first-words; \
    while [ ! -e release ]; do sleep 0.05; done; echo last-words; echo ended >> hooks.log";

fn kill_up_once_the_hook_began(ws: &Workspace) {
    let mut first = ws.command(&["up"]);
    first.stdout(Stdio::null()).stderr(Stdio::null());
    let mut first = first.spawn().expect("start the first up");
    wait_for("onCreateCommand to begin", HOOK_GUARD, || ws.read("hooks.log").contains("begun"));
    first.kill().unwrap();
    first.wait().unwrap();
}

#[test]
fn an_up_killed_during_a_hook_leaves_it_running_and_the_next_up_follows_it_to_its_end_with_its_output() {
    let ws = Workspace::new(json!({
        "image": BUSYBOX,
        "onCreateCommand": HELD_HOOK,
        "postCreateCommand": "echo postCreate >> hooks.log",
    }));
    kill_up_once_the_hook_began(&ws);

    let next = Watched::up(&ws);
    // The output the hook wrote before this `up` came, kept by the daemon.
    next.wait_for_line("[onCreateCommand] first-words");
    assert!(next.said().contains("[onCreateCommand] runs already"), "{}", next.said());
    std::fs::write(ws.path().join("release"), "").unwrap();
    let (status, said) = next.finish();
    assert!(status.success(), "{said}");
    assert!(said.contains("[onCreateCommand] last-words"), "followed to its end: {said}");
    assert_eq!(ws.read("hooks.log"), "begun\nended\npostCreate\n", "ran once, to its end, and the next hook after it");
    let again = ws.up();
    assert_eq!(ws.read("hooks.log"), "begun\nended\npostCreate\n", "{}", stderr(&again));
}

#[test]
fn a_hook_that_fails_after_its_up_died_fails_the_up_following_it_and_runs_again_at_the_next_up() {
    let ws = Workspace::new(json!({
        "image": BUSYBOX,
        "onCreateCommand": "echo begun >> hooks.log; while [ ! -e release ]; do sleep 0.05; done; \
            [ -e failed-once ] || { touch failed-once; echo broken >&2; exit 3; }",
        "postCreateCommand": "echo postCreate >> hooks.log",
    }));
    kill_up_once_the_hook_began(&ws);

    let next = Watched::up(&ws);
    next.wait_for_line("[onCreateCommand] runs already");
    std::fs::write(ws.path().join("release"), "").unwrap();
    let (status, said) = next.finish();
    assert!(!status.success(), "{said}");
    assert!(said.contains("[onCreateCommand] broken"), "its output is shown: {said}");
    assert!(
        said.lines().last().unwrap_or("").contains("onCreateCommand failed with exit code 3"),
        "the last line names the hook: {said}"
    );
    assert_eq!(ws.read("hooks.log"), "begun\n", "no later hook ran");

    let out = ws.up();
    assert_eq!(ws.read("hooks.log"), "begun\nbegun\npostCreate\n", "run again: {}", stderr(&out));
}

#[test]
fn docker_restart_runs_post_start_in_the_room_by_itself_and_the_next_up_does_not_run_it_again() {
    let ws = Workspace::new(counted_hooks());
    ws.up();
    assert_eq!(counts(&ws, "hooks.log", &HOOKS), [1, 1, 1, 1]);

    docker_ok(&["restart", "-t", "1", &ws.room_name()]);
    wait_for("postStartCommand after `docker restart`, with no workroom command", HOOK_GUARD, || {
        counts(&ws, "hooks.log", &["postStart"]) == [2]
    });
    let out = ws.up();
    assert_eq!(counts(&ws, "hooks.log", &HOOKS), [1, 1, 1, 2], "the up after the restart: {}", stderr(&out));
    let out = ws.up();
    assert_eq!(counts(&ws, "hooks.log", &HOOKS), [1, 1, 1, 2], "{}", stderr(&out));
}

/// The host name as a workroom of before wrote it into its claims.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().replace(':', "_")
}

/// Sets `markers` in `ws`'s room as an `up` of before would have.
fn set_markers(ws: &Workspace, markers: &[(&str, &str)]) {
    let room = ws.room_name();
    runtime().block_on(async {
        let engine = Engine::connect().await.expect("engine");
        let link = RoomLink::connect(&engine, &room).await.expect("link");
        for (key, value) in markers {
            link.set_marker(key, Some(value.to_string()), None).await.expect("set a marker");
        }
    });
}

#[test]
fn markers_of_a_workroom_before_hook_jobs_still_hold() {
    let config = json!({
        "image": BUSYBOX,
        "onCreateCommand": "echo onCreate >> hooks.log",
        "postCreateCommand": "echo postCreate >> hooks.log",
        "postStartCommand": "echo postStart >> hooks.log",
    });
    // A room whose hooks are all due: its `up` died before asking for one.
    let ws = Workspace::new(config.clone());
    up_killed_at(&ws, "asking:onCreateCommand");
    // The one marker of all three create hooks, from rooms of before.
    set_markers(&ws, &[("create-hooks", "done")]);
    let out = ws.up();
    assert_eq!(ws.read("hooks.log"), "postStart\n", "`create-hooks: done` covers them all: {}", stderr(&out));

    // A claim by an `up` of before that died (its pid beyond pid_max, so
    // no process has it): the hook began, and is not run twice.
    let ws = Workspace::new(config);
    up_killed_at(&ws, "asking:onCreateCommand");
    let dead = format!("running:{}:{}:1", host_name(), 1u32 << 23);
    set_markers(&ws, &[("onCreateCommand", &dead)]);
    let out = ws.up();
    assert_eq!(ws.read("hooks.log"), "postCreate\npostStart\n", "{}", stderr(&out));
    assert!(stderr(&out).contains("onCreateCommand began under an `up` that died"), "{}", stderr(&out));
    let again = ws.up();
    assert!(!stderr(&again).contains("began under"), "said once: {}", stderr(&again));
    assert_eq!(ws.read("hooks.log"), "postCreate\npostStart\n");
}

#[test]
fn a_hand_off_is_refused_while_a_hook_runs_and_the_hook_runs_on() {
    let ws = Workspace::new(json!({
        "image": BUSYBOX,
        "onCreateCommand": HELD_HOOK,
        "postCreateCommand": "echo postCreate >> hooks.log",
    }));
    kill_up_once_the_hook_began(&ws);
    let out = ws.workroom(&["hand-off", "--force"]);
    assert!(!out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("onCreateCommand runs in the room"), "{}", stderr(&out));

    std::fs::write(ws.path().join("release"), "").unwrap();
    let out = ws.up();
    assert_eq!(ws.read("hooks.log"), "begun\nended\npostCreate\n", "{}", stderr(&out));
    let out = ws.workroom(&["hand-off", "--force"]);
    assert!(out.status.success(), "once it ended: {}", stderr(&out));
}
