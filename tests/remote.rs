//! Rooms on an engine that cannot see the workspace (issue 18), against a
//! second real dockerd in a mount namespace of its own
//! (`remote_support`): the workspace goes into a volume, `sync` carries
//! changes both ways, and `down` keeps or removes the volume.

mod common;
mod remote_support;

use common::*;
use remote_support::SecondEngine;

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
