//! One real project end to end, all from its own devcontainer.json
//! (fixtures/project): in a room on the Debian image, as user `dev`, with no
//! network, it installs its dependencies from vendored wheels, runs its own
//! test suite, and starts its agent CLI (the fixture agent).

mod common;

use common::*;
use std::path::Path;

/// Copies a folder, following symlinks (the project links the agent in).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if std::fs::metadata(entry.path()).unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn chown_tree(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).unwrap();
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            chown_tree(&entry.unwrap().path(), uid, gid);
        }
    }
}

#[test]
fn the_sample_project_installs_offline_runs_its_tests_and_starts_its_agent() {
    // A workspace of its own: the project copied out of this repository (so
    // its git root is itself), with the test label added to its config.
    let ws = Workspace::image(DEBIAN);
    // The harness's config goes; its settings (peers off) stay.
    std::fs::remove_file(ws.path().join(".devcontainer.json")).unwrap();
    copy_tree(&repo_root().join("fixtures/project"), ws.path());
    let config_path = ws.path().join(".devcontainer/devcontainer.json");
    let text = std::fs::read_to_string(&config_path).unwrap();
    let labelled = text.replacen("\"image\":", "\"runArgs\": [\"--label\", \"workroom.test=1\"],\n\t\"image\":", 1);
    std::fs::write(&config_path, labelled).unwrap();
    // The room's user is uid 1000 (the host runs as root, so its ids are
    // kept): it must be able to write the workspace.
    chown_tree(ws.path(), 1000, 1000);

    let out = ws.workroom(&["up"]);
    let log = stderr(&out);
    assert!(out.status.success(), "up failed: {log}");
    assert!(log.contains("[onCreateCommand] install_wheels: installed 5 wheels"), "{log}");
    assert!(log.contains("[postCreateCommand] 43 passed"), "the project's suite ran in the room: {log}");

    // Its tests run again on demand, as dev, with the vendored pytest.
    let again = ws.exec_ok(&["python3", "-c", "import pytest, os; print(pytest.__version__, os.getuid())"]);
    assert_eq!(again.trim(), "9.2.0 1000");
    let suite = ws.exec(&["python3", "-m", "pytest", "-q"]);
    assert!(stdout(&suite).contains("43 passed"), "{}", stdout(&suite));

    // Its agent started from postStartCommand and takes messages.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let sent = ws.exec(&["python3", "tools/agent.py", "send", "confmerge", "hello from the test"]);
        if sent.status.success() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the agent never answered: {}", stderr(&sent));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let agent_log = ws.exec_ok(&["cat", "/tmp/agent.log"]);
    assert!(agent_log.contains("confmerge got: hello from the test"), "{agent_log}");
    let started = ws.exec_ok(&["cat", "/tmp/confmerge-poststart.log"]);
    assert_eq!(started.trim(), format!("postStart dev /workspaces/{} /workspaces/{}/.deps", base(&ws), base(&ws)));
}

fn base(ws: &Workspace) -> String {
    ws.path().file_name().unwrap().to_string_lossy().into_owned()
}
