//! `workroom stop --all` against the real engine: it stops every room and
//! never a container without our labels.
//!
//! `--all` acts on every room of an install, so the test runs in an install
//! of its own (`WORKROOM_SCOPE`: its rooms carry `workroom.scope=<scope>` and
//! `stop --all` sees only those). Rooms of tests running beside it, and of
//! people sharing the engine, are out of its reach. The foreign container
//! carries the scope label too, and is named like a room, so only the schema
//! label can keep `stop --all` away from it.

mod common;

use common::*;
use std::process::Command;

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
fn stop_all_stops_every_room_and_never_a_container_without_our_labels() {
    let scope = format!("stopall{}", std::process::id());
    let mut ws = Workspace::image(BUSYBOX);
    ws.env.push(("WORKROOM_SCOPE".into(), scope.clone()));
    ws.up();
    let foreign = Foreign(format!("workroom-foreign-{}", std::process::id()));
    let labels = [format!("{TEST_LABEL}=1"), format!("workroom.scope={scope}")];
    docker_ok(&[
        "run", "-d", "--label", &labels[0], "--label", &labels[1], "--name", &foreign.0, BUSYBOX, "sleep", "600",
    ]);

    let out = Command::new(workroom_bin()).args(["stop", "--all"]).env("WORKROOM_SCOPE", &scope).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains(&format!("stopped {}", ws.room_name())), "{}", stderr(&out));
    assert_eq!(state(&ws.room_name()), "exited");
    assert_eq!(state(&foreign.0), "running", "stop --all touched a container workroom did not make");
}
