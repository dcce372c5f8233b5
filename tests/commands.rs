//! What every command that starts from a workspace shares (one way to find
//! the room and to make it), and the small things a script or a person
//! notices: `up --json`'s one line, `down`'s leftovers.

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

/// The reference prints its result on one line (`| tail -n1 | jq` in
/// scripts); workroom printed pretty JSON over several.
#[test]
fn up_json_prints_one_line_with_the_reference_clis_keys() {
    let ws = Workspace::image(BUSYBOX);
    let out = ws.workroom(&["up", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1, "one line: {text}");
    let v: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    // As `devcontainer up` 0.89.0 printed them for an image config (checked
    // with `node /work/ref/package/devcontainer.js up --workspace-folder`).
    // Then workroom's own: the platform of the room's daemon, how the
    // room got its workspace (a local engine sees the folder: a bind), and
    // its resource caps.
    assert_eq!(
        keys,
        [
            "outcome",
            "containerId",
            "remoteUser",
            "remoteWorkspaceFolder",
            "ociAuthDiagnostics",
            "platform",
            "workspace",
            "caps"
        ]
    );
    assert_eq!(v["workspace"]["mode"], "bind", "{v}");
    assert_eq!(v["outcome"], "success");
    assert_eq!(v["remoteUser"], "root");
    assert_eq!(v["remoteWorkspaceFolder"], json!(ws.remote_folder()));
    let id = v["containerId"].as_str().unwrap();
    assert_eq!(docker_ok(&["inspect", "-f", "{{.Name}}", id]), format!("/{}", ws.room_name()));
    let diagnostics: Vec<&str> = v["ociAuthDiagnostics"].as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        diagnostics,
        ["authLookupWouldBeBlocked", "registryRedirectWouldPreventCredentialForwarding", "authServerRedirect"]
    );
}

#[test]
fn up_json_prints_an_error_on_one_line_too() {
    let ws = Workspace::new(json!({ "image": BUSYBOX, "runArgs": ["--workroom-no-such-flag"] }));
    let out = ws.workroom(&["up", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1, "one line: {text}");
    let v: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["outcome", "message", "description"]);
    assert_eq!(v["outcome"], "error");
}

/// `up` keeps a record per container in `~/.cache/workroom/ready/<id>`;
/// `down` used to leave it behind.
#[test]
fn down_removes_the_rooms_ready_record() {
    let cache = tempfile::tempdir().unwrap();
    let mut ws = Workspace::image(BUSYBOX);
    ws.env.push(("XDG_CACHE_HOME".into(), cache.path().display().to_string()));
    ws.up();
    let id = docker_ok(&["inspect", "-f", "{{.Id}}", &ws.room_name()]);
    let record = cache.path().join("workroom/ready").join(&id);
    assert!(record.exists(), "up records the room ready at {}", record.display());
    let out = ws.workroom(&["down"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!record.exists(), "down leaves {}", record.display());
}

/// `capture`, `send` and `wait` took a room's name without its `workroom-`
/// prefix, `forward ROOM` only the whole name, and `exec` and `shell` no
/// name at all: one rule now (`room::resolve::candidate_names`), for every
/// command that takes a room, run here from a folder that is no workspace.
#[test]
fn every_command_that_takes_a_room_finds_it_by_its_name_without_the_workroom_prefix() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let name = ws.room_name();
    let short = name.strip_prefix("workroom-").expect("every room's name has the prefix").to_string();
    let elsewhere = tempfile::tempdir().unwrap();
    let in_elsewhere = |args: &[&str]| {
        let mut cmd = std::process::Command::new(workroom_bin());
        cmd.args(args).current_dir(elsewhere.path());
        output_within(cmd, None)
    };

    let out = in_elsewhere(&["exec", "--room", &short, "--", "sh", "-c", "echo in-$((40+2)) $PWD"]);
    assert!(out.status.success(), "exec --room: {}", stderr(&out));
    assert_eq!(stdout(&out).trim(), format!("in-42 {}", ws.remote_folder()), "the room's user and folder");

    let args = ["shell", "--room", short.as_str(), "by-name"];
    let mut term = Term::spawn(workroom_bin(), &args, 24, 80);
    term.send(b"echo pane-$((6*7))\r");
    term.expect("pane-42", GUARD);
    // ctrl-p ctrl-q: detached, the pane goes on for the commands below.
    term.send(b"\x10\x11");
    assert_eq!(term.wait(GUARD), 0, "{}", term.all());

    let out = in_elsewhere(&["panes", "--room", &short]);
    assert!(stdout(&out).lines().any(|l| l.starts_with("by-name ")), "panes --room: {}{}", stdout(&out), stderr(&out));
    let out = in_elsewhere(&["capture", "--room", &short, "by-name"]);
    assert!(stdout(&out).contains("pane-42"), "capture --room: {}{}", stdout(&out), stderr(&out));
    let out = in_elsewhere(&["kill-pane", "--room", &short, "by-name"]);
    assert!(out.status.success(), "kill-pane --room: {}", stderr(&out));
    let out = in_elsewhere(&["logs", &short]);
    assert!(out.status.success(), "logs NAME: {}", stderr(&out));
    let out = in_elsewhere(&["stop", &short]);
    assert!(out.status.success(), "stop NAME: {}", stderr(&out));
    assert_eq!(docker_ok(&["inspect", "-f", "{{.State.Running}}", &name]), "false", "stop stopped {name}");
}

/// `WORKROOM_LOG=debug` shows each Engine API call `up` makes, with the
/// room's name and the time it took; without it, stderr holds only what a
/// person is told, and no log line.
#[test]
fn workroom_log_debug_shows_the_engine_calls_of_up_with_their_times_and_is_silent_unset() {
    let ws = Workspace::image(BUSYBOX);
    let name = ws.room_name();
    let mut cmd = ws.command(&["up"]);
    cmd.env("WORKROOM_LOG", "debug");
    let out = output_within(cmd, None);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stderr(&out);
    let calls: Vec<&str> = said.lines().filter(|l| l.contains("DEBUG workroom::engine:")).collect();
    // `inspect_volume`: the daemon volume a new room's daemon comes from.
    for call in ["inspect_container", "inspect_volume", "create_container", "start_container", "create_exec"] {
        let line = calls.iter().find(|l| l.contains(&format!("call={call} ")));
        let line = line.unwrap_or_else(|| panic!("no {call} line in:\n{said}"));
        assert!(line.contains("elapsed_ms="), "{line}");
    }
    assert!(calls.iter().any(|l| l.contains(&name)), "a call names the room {name}:\n{said}");

    // Again, unset: the fast path's calls happen, and nothing is logged.
    let mut cmd = ws.command(&["up"]);
    cmd.env_remove("WORKROOM_LOG");
    let out = output_within(cmd, None);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(!said.contains("workroom::engine") && !said.contains("elapsed_ms"), "log lines unasked:\n{said}");
}
