//! `workroom stop --all` against the real engine: it stops every room and
//! never a container without our labels.
//!
//! It is ignored by default, on purpose. `--all` acts on the whole engine:
//! run with the rest of the suite it would stop the rooms of tests running
//! beside it (tests of one binary run in parallel), and on a shared engine
//! the rooms of other people. It lives in a binary of its own so that it can
//! run alone, when asked:
//!
//!     cargo test --test room_stop_all -- --ignored
//!
//! The label filter it depends on is pinned without `--all` in
//! `tests/room.rs` (`stop_and_down_refuse_a_container_workroom_did_not_make`).

mod common;

use common::*;

fn state(name: &str) -> String {
    docker_ok(&["inspect", name, "--format", "{{.State.Status}}"])
}

/// A container that is not a room but is named like one; removed on drop.
struct Foreign(String);

impl Drop for Foreign {
    fn drop(&mut self) {
        remove_container(&self.0);
    }
}

#[test]
#[ignore = "stops every room on the engine, other tests' and other people's too; run alone with --ignored"]
fn stop_all_stops_every_room_and_never_a_container_without_our_labels() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let foreign = Foreign(format!("workroom-foreign-{}", std::process::id()));
    let label = format!("{TEST_LABEL}=1");
    docker_ok(&["run", "-d", "--label", &label, "--name", &foreign.0, BUSYBOX, "sleep", "600"]);

    let out = run_workroom(&["stop", "--all"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains(&format!("stopped {}", ws.room_name())), "{}", stderr(&out));
    assert_eq!(state(&ws.room_name()), "exited");
    assert_eq!(state(&foreign.0), "running", "stop --all touched a container workroom did not make");
}
