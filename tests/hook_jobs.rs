//! Lifecycle hooks under kills aimed at `up`'s marker writes, against the
//! real engine: the built `workroom` kills itself (SIGKILL) at a named point
//! when `WORKROOM_TEST_KILL_AT` names it, and the next `up` must end with
//! every once-per-container hook run exactly once and postStart once for
//! the start. Hooks count themselves by appending a line to a file of the
//! bind-mounted workspace, which the test reads from the host.

mod common;

use common::*;
use serde_json::json;
use std::os::unix::process::ExitStatusExt;
use std::process::Output;

const KILL_AT: &str = "WORKROOM_TEST_KILL_AT";

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

/// How often each hook ran, in the order of `names`.
fn counts(ws: &Workspace, names: &[&str]) -> Vec<usize> {
    let log = ws.read("hooks.log");
    names.iter().map(|n| log.lines().filter(|l| l == n).count()).collect()
}

/// `up` with a kill aimed at `point`; it must have died there.
fn up_killed_at(ws: &Workspace, point: &str) -> Output {
    let mut cmd = ws.command(&["up"]);
    cmd.env(KILL_AT, point);
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
    let hooks = ["onCreate", "updateContent", "postCreate", "postStart"];
    assert_eq!(
        counts(&ws, &hooks),
        [1, 1, 1, 1],
        "hooks.log:\n{}\nthe second up said:\n{}",
        ws.read("hooks.log"),
        stderr(&out)
    );
}
