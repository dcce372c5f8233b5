//! The devcontainer face side by side with the reference CLI: the same
//! command line on two workspaces with the same devcontainer.json, one to
//! `node devcontainer.js`, one to workroom run as `devcontainer` through a
//! link; exit statuses, the JSON callers read and the hooks that ran must
//! agree. Real engine, real containers (labelled `workroom.test`, removed
//! by each workspace's drop).

mod common;

use common::face::*;
use common::*;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Command, Output};

#[test]
fn coders_sequence_up_read_configuration_and_exec_by_container_id_agrees_with_the_reference() {
    let clis = Clis::new();
    let (ours, theirs) = two(hooked(json!({ "remoteEnv": { "FROM_CONFIG": "yes" } })));

    // up --log-format json: the last `{` line of stdout is the result.
    let up = |cli: &dyn Fn(&[&str]) -> Output, ws: &Workspace| {
        cli(&["up", "--log-format", "json", "--workspace-folder", &ws.folder()])
    };
    let (our_up, their_up) = (up(&|a| clis.ours(a), &ours), up(&|a| clis.reference(a), &theirs));
    assert_eq!(our_up.status.code(), Some(0), "ours: {}", stderr(&our_up));
    assert_eq!(their_up.status.code(), Some(0), "reference: {}", stderr(&their_up));
    assert_eq!(stdout(&our_up).lines().count(), 1, "one stdout line: {}", stdout(&our_up));
    let (our_result, their_result) = (result_of(&our_up), result_of(&their_up));
    assert_eq!(keys(&our_result), keys(&their_result), "{our_result} vs {their_result}");
    assert_eq!(our_result["outcome"], "success");
    assert_eq!(our_result["remoteUser"], their_result["remoteUser"]);
    assert_eq!(our_result["remoteWorkspaceFolder"], json!(ours.remote_folder()));
    assert_eq!(their_result["remoteWorkspaceFolder"], json!(theirs.remote_folder()));
    assert_eq!(our_result["ociAuthDiagnostics"], their_result["ociAuthDiagnostics"]);
    assert_json_log_lines("ours", &our_up, true);
    assert_json_log_lines("reference", &their_up, false);

    // The same hooks ran, in the same order.
    assert_eq!(ours.read("hooks.log"), theirs.read("hooks.log"));
    assert!(
        ours.read("hooks.log").starts_with("onCreate\nupdateContent\npostCreate\npostStart\n"),
        "{}",
        ours.read("hooks.log")
    );

    // read-configuration --include-merged-configuration, of each room.
    let read = |cli: &dyn Fn(&[&str]) -> Output, ws: &Workspace| {
        cli(&["read-configuration", "--include-merged-configuration", "--workspace-folder", &ws.folder()])
    };
    let (our_read, their_read) = (read(&|a| clis.ours(a), &ours), read(&|a| clis.reference(a), &theirs));
    assert_eq!(our_read.status.code(), Some(0), "ours: {}", stderr(&our_read));
    assert_eq!(their_read.status.code(), Some(0), "reference: {}", stderr(&their_read));
    assert_eq!(stdout(&our_read).lines().count(), 1, "one stdout line: {}", stdout(&our_read));
    let (our_read, their_read) =
        (normalised(&result_of(&our_read), &ours), normalised(&result_of(&their_read), &theirs));
    assert_eq!(our_read["configuration"], their_read["configuration"]);
    assert_eq!(our_read["workspace"], their_read["workspace"]);
    assert_eq!(our_read["mergedConfiguration"], their_read["mergedConfiguration"]);
    assert_eq!(our_read["mergedConfiguration"]["customizations"]["coder"][0]["apps"][0]["slug"], "face", "{our_read}");

    // exec by container id, with --remote-env: output and status passed
    // through. With the workspace folder too, the command runs there in both.
    let script = "echo $FROM_CONFIG $FROM_FLAG; id -un; pwd; exit 7";
    let exec = |cli: &dyn Fn(&[&str]) -> Output, ws: &Workspace, id: &str, with_folder: bool| {
        let folder = ws.folder();
        let mut args = vec!["exec", "--container-id", id, "--remote-env", "FROM_FLAG=flag"];
        if with_folder {
            args.extend(["--workspace-folder", &folder]);
        }
        args.extend(["sh", "-c", script]);
        cli(&args)
    };
    let (our_id, their_id) =
        (our_result["containerId"].as_str().unwrap(), their_result["containerId"].as_str().unwrap());
    for with_folder in [true, false] {
        let our_exec = exec(&|a| clis.ours(a), &ours, our_id, with_folder);
        let their_exec = exec(&|a| clis.reference(a), &theirs, their_id, with_folder);
        assert_eq!(our_exec.status.code(), Some(7), "ours: {}", stderr(&our_exec));
        assert_eq!(their_exec.status.code(), Some(7), "reference: {}", stderr(&their_exec));
        let (our_lines, their_lines) = (lines(&our_exec, &ours), lines(&their_exec, &theirs));
        assert_eq!(our_lines[..2], ["yes flag", "root"]);
        if with_folder {
            assert_eq!(our_lines, their_lines);
        } else {
            // Given only the container, the reference runs the command in
            // the user's home; workroom in the room's workspace folder (not
            // yet the same; docs/guide.md says so).
            assert_eq!(our_lines[..2], their_lines[..2]);
            assert_eq!((our_lines[2].as_str(), their_lines[2].as_str()), ("<ws>", "/root"));
        }
    }
}

/// Stdout's lines with the workspace's folder in the room as `<ws>`.
fn lines(out: &Output, ws: &Workspace) -> Vec<String> {
    stdout(out).replace(&ws.remote_folder(), "<ws>").lines().map(str::to_string).collect()
}

#[test]
fn up_with_mount_and_id_label_then_exec_writing_into_the_mount_and_remove_existing_container_agree_with_the_reference()
{
    let clis = Clis::new();
    let (our_volume, their_volume) = (Volume::new("ours"), Volume::new("theirs"));
    let (ours, theirs) = two(hooked(json!({})));
    let up = |cli: &dyn Fn(&[&str]) -> Output, ws: &Workspace, volume: &Volume, extra: &[&str]| {
        let folder = ws.folder();
        let mount = format!("type=volume,source={},target=/data", volume.0);
        let label = format!("wr-test-face={}", ws.unique());
        let mut args = vec!["up", "--workspace-folder", &folder, "--mount", &mount];
        // The reference then finds its container by these labels alone.
        let local = format!("devcontainer.local_folder={folder}");
        args.extend(["--id-label", &label, "--id-label", &local]);
        args.extend(extra);
        let out = cli(&args);
        (out.status.code(), result_of(&out), stderr(&out))
    };
    let (our_code, our_up, said) = up(&|a| clis.ours(a), &ours, &our_volume, &[]);
    assert_eq!(our_code, Some(0), "ours: {said}");
    let (their_code, their_up, said) = up(&|a| clis.reference(a), &theirs, &their_volume, &[]);
    assert_eq!(their_code, Some(0), "reference: {said}");
    let (our_id, their_id) = (our_up["containerId"].as_str().unwrap(), their_up["containerId"].as_str().unwrap());

    // The mount and the id label are on both containers.
    for (id, ws, volume) in [(our_id, &ours, &our_volume), (their_id, &theirs, &their_volume)] {
        let mounts = inspect(id, "{{json .Mounts}}");
        let data = mounts.as_array().unwrap().iter().find(|m| m["Destination"] == "/data");
        assert_eq!(data.map(|m| &m["Name"]), Some(&json!(volume.0)), "{mounts}");
        assert_eq!(inspect(id, "{{json .Config.Labels}}")["wr-test-face"], json!(ws.unique()));
    }

    // exec writes into the mount; the volume holds it.
    for (cli, id, volume) in [(&clis.face, our_id, &our_volume), (&PathBuf::from("node"), their_id, &their_volume)] {
        let mut cmd = Command::new(cli);
        if cli.ends_with("node") {
            cmd.arg(&clis.js);
        }
        cmd.args(["exec", "--container-id", id, "--remote-env", "WORD=written", "sh", "-c", "echo $WORD > /data/f"]);
        let out = output_within(cmd, None);
        assert!(out.status.success(), "{}: {}", cli.display(), stderr(&out));
        let read = docker_ok(&[
            "run",
            "--rm",
            "--label",
            &format!("{TEST_LABEL}=1"),
            "-v",
            &format!("{}:/v", volume.0),
            BUSYBOX,
            "cat",
            "/v/f",
        ]);
        assert_eq!(read, "written", "{}", cli.display());
    }
    // exec finds each room by its id label alone, as `up --id-label` set it.
    let by_label = |ws: &Workspace| format!("wr-test-face={}", ws.unique());
    let (our_label, their_label) = (by_label(&ours), by_label(&theirs));
    for out in [
        clis.ours(&["exec", "--id-label", &our_label, "cat", "/data/f"]),
        clis.reference(&["exec", "--id-label", &their_label, "cat", "/data/f"]),
    ] {
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(stdout(&out), "written\n");
    }
    let first_hooks = ours.read("hooks.log");
    assert_eq!(first_hooks, theirs.read("hooks.log"));

    // --remove-existing-container: a new container, whose create hooks run again.
    let (our_code, our_again, said) = up(&|a| clis.ours(a), &ours, &our_volume, &["--remove-existing-container"]);
    assert_eq!(our_code, Some(0), "ours: {said}");
    let (their_code, their_again, said) =
        up(&|a| clis.reference(a), &theirs, &their_volume, &["--remove-existing-container"]);
    assert_eq!(their_code, Some(0), "reference: {said}");
    assert_ne!(our_again["containerId"], our_up["containerId"]);
    assert_ne!(their_again["containerId"], their_up["containerId"]);
    assert_eq!(ours.read("hooks.log"), theirs.read("hooks.log"));
    assert_eq!(ours.read("hooks.log"), format!("{first_hooks}{first_hooks}"));
    assert_eq!(docker(&["inspect", our_id]).status.code(), Some(1), "the old room is gone");

    // The flags are not the file: a later up without them finds the room
    // as made, with no word of a changed configuration.
    let plain = clis.ours(&["up", "--workspace-folder", &ours.folder()]);
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
    assert_eq!(result_of(&plain)["containerId"], our_again["containerId"]);
    assert!(!stderr(&plain).contains("changed since"), "{}", stderr(&plain));
}

#[test]
fn expect_existing_container_with_no_room_is_an_error_result_and_exit_1_as_the_reference_makes_none() {
    let clis = Clis::new();
    let (ours, theirs) = two(json!({ "image": DEBIAN }));
    let our = clis.ours(&["up", "--expect-existing-container", "--workspace-folder", &ours.folder()]);
    let their = clis.reference(&["up", "--expect-existing-container", "--workspace-folder", &theirs.folder()]);
    assert_eq!(our.status.code(), Some(1));
    assert_eq!(their.status.code(), Some(1));
    let (our, their) = (result_of(&our), result_of(&their));
    assert_eq!(our, their, "the same outcome, message and description");
    assert_eq!(our["outcome"], "error");
    assert_eq!(ours.containers(), Vec::<String>::new());
    assert_eq!(theirs.containers(), Vec::<String>::new());
}

#[test]
fn skip_post_attach_runs_every_hook_but_post_attach_as_the_reference_does() {
    let clis = Clis::new();
    let (ours, theirs) = two(hooked(json!({})));
    let our = clis.ours(&["up", "--skip-post-attach", "--workspace-folder", &ours.folder()]);
    let their = clis.reference(&["up", "--skip-post-attach", "--workspace-folder", &theirs.folder()]);
    assert_eq!(our.status.code(), Some(0), "{}", stderr(&our));
    assert_eq!(their.status.code(), Some(0), "{}", stderr(&their));
    assert_eq!(ours.read("hooks.log"), "onCreate\nupdateContent\npostCreate\npostStart\n");
    assert_eq!(ours.read("hooks.log"), theirs.read("hooks.log"));

    // exec --log-format json: not yet the reference's. It sends the
    // command's output, stdout too, as `raw` JSON lines on stderr; workroom
    // passes the command's stdout and stderr through as they are.
    let script = "echo out; echo err >&2";
    let our = clis.ours(&["exec", "--log-format", "json", "--workspace-folder", &ours.folder(), "sh", "-c", script]);
    let their =
        clis.reference(&["exec", "--log-format", "json", "--workspace-folder", &theirs.folder(), "sh", "-c", script]);
    assert_eq!((our.status.code(), their.status.code()), (Some(0), Some(0)));
    assert_eq!((stdout(&our), stderr(&our)), ("out\n".to_string(), "err\n".to_string()));
    // Its two streams' lines arrive in either order.
    let mut raw: Vec<String> = stderr(&their)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "raw")
        .filter_map(|v| v["text"].as_str().map(str::to_string))
        .collect();
    raw.sort();
    assert_eq!((stdout(&their), raw), (String::new(), vec!["err\n".to_string(), "out\n".to_string()]));
}

#[test]
fn log_format_json_makes_every_stderr_line_of_up_json_with_the_references_keys() {
    // Hook output of several lines, a warning (an unknown property) and an
    // ignored flag: each reaches stderr as one JSON line.
    let ws = Workspace::new(json!({
        "image": BUSYBOX,
        "postCreateCommand": "echo one; echo two >&2; printf 'no newline'",
        "postCreateComand": "typo",
    }));
    let mut cmd = Command::new(workroom_bin());
    cmd.args([
        "devcontainer",
        "up",
        "--log-format",
        "json",
        "--log-level",
        "debug",
        "--workspace-folder",
        &ws.folder(),
    ]);
    let out = output_within(cmd, None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_json_log_lines("workroom devcontainer up", &out, true);
    let texts: Vec<String> = stderr(&out)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["text"].as_str().unwrap().to_string())
        .collect();
    for wanted in ["one", "two", "no newline", "postCreateComand", "--log-level is accepted and ignored"] {
        assert!(texts.iter().any(|t| t.contains(wanted)), "{wanted:?} in {texts:?}");
    }
    assert_eq!(result_of(&out)["outcome"], "success");
    assert_eq!(stdout(&out).lines().count(), 1);

    // A refused command line is one JSON line too, and an error result.
    let mut cmd = Command::new(workroom_bin());
    cmd.args(["devcontainer", "up", "--log-format", "json", "--workspace-folder", "/nonexistent-wr-face"]);
    let out = output_within(cmd, None);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(result_of(&out)["outcome"], "error", "{}", stdout(&out));
    assert_json_log_lines("a failed up", &out, true);
}

#[test]
fn unknown_flags_and_commands_and_authoring_commands_are_one_line_and_exit_1() {
    let clis = Clis::new();
    for (args, said) in [
        (&["up", "--frobnicate"][..], "devcontainer up: unknown flag --frobnicate"),
        (&["frobnicate"][..], "devcontainer: unknown command \"frobnicate\""),
        (&["up", "--secrets-file", "s.json"][..], "devcontainer up: --secrets-file is refused: its values"),
        (&["build", "--output", "type=oci"][..], "devcontainer build: --output is refused: workroom builds into"),
        (&["up", "stray"][..], "devcontainer up: unexpected word \"stray\""),
        (&["features", "publish", "./src"][..], "devcontainer features publish: not provided"),
        (&["templates", "apply"][..], "devcontainer templates apply: not provided"),
    ] {
        let out = clis.ours(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(clis.reference(&[args[0], "--frobnicate"]).status.code(), Some(1), "the reference's status too");
        let text = stderr(&out);
        assert_eq!(text.lines().count(), 1, "{args:?}: {text}");
        assert!(text.starts_with(said), "{args:?}: {text}");
        assert_eq!(stdout(&out), "", "{args:?}");
    }
}

#[test]
fn read_configuration_of_a_workspace_without_a_room_agrees_with_the_reference() {
    let clis = Clis::new();
    let (ours, theirs) = two(json!({ "image": DEBIAN, "remoteUser": "root", "forwardPorts": [3000] }));
    let our = clis.ours(&["read-configuration", "--log-format", "json", "--workspace-folder", &ours.folder()]);
    let their = clis.reference(&["read-configuration", "--log-format", "json", "--workspace-folder", &theirs.folder()]);
    assert_eq!(our.status.code(), Some(0), "{}", stderr(&our));
    assert_eq!(their.status.code(), Some(0), "{}", stderr(&their));
    let (our, their) = (normalised(&result_of(&our), &ours), normalised(&result_of(&their), &theirs));
    assert_eq!(our["configuration"], their["configuration"]);
    assert_eq!(our["workspace"], their["workspace"]);
    assert_eq!(our["configuration"]["forwardPorts"], json!([3000]));
}

#[test]
fn version_and_help_alone_answer_on_stdout_and_exit_0_as_callers_probe_them() {
    let clis = Clis::new();
    let version = clis.ours(&["--version"]);
    assert_eq!(version.status.code(), Some(0));
    assert_eq!(stdout(&version), format!("{}\n", env!("CARGO_PKG_VERSION")));
    let help = clis.ours(&["--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(stdout(&help).contains("up, build, exec, read-configuration"), "{}", stdout(&help));
}
