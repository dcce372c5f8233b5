//! What every command that starts from a workspace shares (one way to find
//! the room and to make it), and the small things a script or a person
//! notices.

mod common;
mod pty;

use common::*;
use pty::Term;
use serde_json::json;
use std::time::Duration;

/// Guards against a hang while waiting for output; never a pause.
const GUARD: Duration = Duration::from_secs(60);

fn label(container: &str, key: &str) -> String {
    docker_ok(&["inspect", "-f", &format!("{{{{index .Config.Labels \"{key}\"}}}}"), container])
}

/// `shell` used to build its own `UpOptions` from the settings files alone:
/// a room it made lacked devcontainer.json's `customizations.workroom`
/// settings, and the unknown-property warnings `up` prints were skipped.
#[test]
fn shell_on_a_fresh_workspace_makes_the_room_with_customizations_workroom_and_warns_of_unknown_properties() {
    let ws = Workspace::new(json!({
        "image": BUSYBOX,
        "customizations": { "workroom": { "nested": true } },
        "postCreateComand": "misspelled on purpose",
    }));
    let mut term = Term::spawn(workroom_bin(), &["shell", "--workspace-folder", &ws.folder()], 24, 80);
    term.send(b"echo in-pane-$((40+2))\r");
    term.expect("in-pane-42", GUARD);
    term.send(b"exit\r");
    assert_eq!(term.wait(GUARD), 0, "{}", term.all());
    let shown = term.all();
    let nested = label(&ws.room_name(), "workroom.nested");
    let warned = shown.contains("unknown property `postCreateComand`");
    assert!(nested == "1" && warned, "nested label {nested:?}, warned {warned}; the terminal showed:\n{shown}");
}
