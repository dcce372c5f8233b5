//! The flags of the face's `up`, `run-user-commands` and `set-up`, side by
//! side with the reference CLI: two workspaces with the same
//! devcontainer.json, the same command line to each; the result lines, the
//! hooks that ran (each appends its name to hooks.log in the workspace),
//! the environment they saw, and the containers' labels and mounts must
//! agree. Real engine, real containers (labelled `workroom.test`, removed
//! by each workspace's drop).

mod common;

use common::face::*;
use common::*;
use serde_json::{json, Value};
use std::process::Output;

/// Runs the command `args[0]` with `--workspace-folder <ws>` and the rest
/// of `args`, each CLI on its own workspace.
fn both(clis: &Clis, (ours, theirs): (&Workspace, &Workspace), args: &[&str]) -> (Output, Output) {
    let with = |ws: &Workspace| {
        let mut all = vec![args[0].to_string(), "--workspace-folder".to_string(), ws.folder()];
        all.extend(args[1..].iter().map(|a| a.to_string()));
        all
    };
    let (our_args, their_args) = (with(ours), with(theirs));
    let our = clis.ours(&our_args.iter().map(String::as_str).collect::<Vec<_>>());
    let their = clis.reference(&their_args.iter().map(String::as_str).collect::<Vec<_>>());
    (our, their)
}

fn succeeded(pair: &(Output, Output)) {
    assert_eq!(pair.0.status.code(), Some(0), "ours: {}\n{}", stdout(&pair.0), stderr(&pair.0));
    assert_eq!(pair.1.status.code(), Some(0), "reference: {}\n{}", stdout(&pair.1), stderr(&pair.1));
}

fn container(out: &Output) -> String {
    result_of(out)["containerId"].as_str().unwrap_or_else(|| panic!("no containerId: {}", stdout(out))).to_string()
}

#[test]
fn remote_env_reaches_the_hooks_under_remote_env_and_is_kept_nowhere_as_the_reference_does() {
    let clis = Clis::new();
    let (ours, theirs) = two(json!({
        "image": DEBIAN,
        "remoteEnv": { "Y": "config" },
        "postCreateCommand": "echo postCreate=$X,$Y >> hooks.log",
        "postStartCommand": "echo postStart=$X,$Y >> hooks.log",
    }));
    let up = both(&clis, (&ours, &theirs), &["up", "--remote-env", "X=flag", "--remote-env", "Y=flag"]);
    succeeded(&up);
    assert_eq!(ours.read("hooks.log"), "postCreate=flag,config\npostStart=flag,config\n");
    assert_eq!(ours.read("hooks.log"), theirs.read("hooks.log"));
    // Not on the room: a later exec without the flag sees none of it.
    let exec = both(&clis, (&ours, &theirs), &["exec", "sh", "-c", "echo $X,$Y"]);
    succeeded(&exec);
    assert_eq!((stdout(&exec.0), stdout(&exec.1)), (",config\n".to_string(), ",config\n".to_string()));
    for (out, ws) in [(&up.0, &ours), (&up.1, &theirs)] {
        let id = container(out);
        let env = inspect(&id, "{{json .Config.Env}}");
        assert!(!env.to_string().contains("X=flag"), "{env}");
        let label = inspect(&id, "{{json .Config.Labels}}")["devcontainer.metadata"].clone();
        assert!(!normalised(&label, ws).to_string().contains("flag"), "{label}");
    }
    // exec's own --remote-env goes under remoteEnv too, as the reference's.
    let exec = both(
        &clis,
        (&ours, &theirs),
        &["exec", "--remote-env", "Y=flag", "--remote-env", "X=flag", "sh", "-c", "echo $X,$Y"],
    );
    succeeded(&exec);
    assert_eq!((stdout(&exec.0), stdout(&exec.1)), ("flag,config\n".to_string(), "flag,config\n".to_string()));
}

#[test]
fn skip_post_create_runs_no_hook_and_leaves_them_all_to_the_next_up_as_the_reference_does() {
    let clis = Clis::new();
    let (ours, theirs) = two(hooked(json!({})));
    let skipped = both(&clis, (&ours, &theirs), &["up", "--skip-post-create"]);
    succeeded(&skipped);
    assert_eq!((ours.read("hooks.log"), theirs.read("hooks.log")), (String::new(), String::new()));
    let up = both(&clis, (&ours, &theirs), &["up"]);
    succeeded(&up);
    assert_eq!(container(&up.0), container(&skipped.0), "the same room");
    assert_eq!(ours.read("hooks.log"), "onCreate\nupdateContent\npostCreate\npostStart\npostAttach\n");
    assert_eq!(ours.read("hooks.log"), theirs.read("hooks.log"));
}

#[test]
fn skip_non_blocking_commands_stops_after_wait_for_and_run_user_commands_runs_the_rest_as_the_reference_does() {
    let clis = Clis::new();
    let (ours, theirs) = two(hooked(json!({})));
    let up = both(&clis, (&ours, &theirs), &["up", "--skip-non-blocking-commands"]);
    succeeded(&up);
    assert_eq!(ours.read("hooks.log"), "onCreate\nupdateContent\n");
    assert_eq!(ours.read("hooks.log"), theirs.read("hooks.log"));

    let run = both(&clis, (&ours, &theirs), &["run-user-commands"]);
    succeeded(&run);
    assert_eq!(result_of(&run.0), json!({ "outcome": "success", "result": "done" }));
    assert_eq!(result_of(&run.0), result_of(&run.1));
    assert_eq!(ours.read("hooks.log"), "onCreate\nupdateContent\npostCreate\npostStart\npostAttach\n");
    assert_eq!(ours.read("hooks.log"), theirs.read("hooks.log"));

    // Again with the flag: nothing is due, and the result says where it stopped.
    let again = both(&clis, (&ours, &theirs), &["run-user-commands", "--skip-non-blocking-commands"]);
    succeeded(&again);
    assert_eq!(result_of(&again.0), json!({ "outcome": "success", "result": "skipNonBlocking" }));
    assert_eq!(result_of(&again.0), result_of(&again.1));
    assert_eq!(ours.read("hooks.log"), theirs.read("hooks.log"));

    // By container id, postAttach runs again, as at every attach.
    let (our_id, their_id) = (container(&up.0), container(&up.1));
    let our = clis.ours(&["run-user-commands", "--container-id", &our_id]);
    let their = clis.reference(&["run-user-commands", "--container-id", &their_id]);
    succeeded(&(our, their));
    assert!(ours.read("hooks.log").ends_with("postAttach\npostAttach\n"), "{}", ours.read("hooks.log"));
    assert_eq!(ours.read("hooks.log"), hooks_of_theirs(&theirs, &their_id));
}

/// What the reference's hooks wrote: given a container alone, it runs them
/// in the remote user's home, where workroom runs them in the room's
/// workspace folder (docs/guide.md says so).
fn hooks_of_theirs(ws: &Workspace, id: &str) -> String {
    let home = stdout(&docker(&["exec", id, "sh", "-c", "cat ~/hooks.log 2>/dev/null"]));
    format!("{}{home}", ws.read("hooks.log"))
}

#[test]
fn run_user_commands_without_a_room_is_the_references_error_result() {
    let clis = Clis::new();
    let (ours, theirs) = two(hooked(json!({})));
    let run = both(&clis, (&ours, &theirs), &["run-user-commands"]);
    assert_eq!((run.0.status.code(), run.1.status.code()), (Some(1), Some(1)));
    let (our, their) = (result_of(&run.0), result_of(&run.1));
    assert_eq!(keys(&our), keys(&their));
    assert_eq!(our["description"], their["description"]);
    assert!(our["message"].as_str().unwrap().starts_with(their["message"].as_str().unwrap()), "{our} vs {their}");
    assert!(ours.containers().is_empty() && theirs.containers().is_empty());
}

#[test]
fn set_up_runs_the_due_hooks_of_a_room_and_refuses_a_container_workroom_did_not_make() {
    let clis = Clis::new();
    let (ours, theirs) = two(hooked(json!({})));
    let up = both(&clis, (&ours, &theirs), &["up", "--skip-post-create"]);
    succeeded(&up);
    let (our_id, their_id) = (container(&up.0), container(&up.1));
    let our = clis.ours(&["set-up", "--container-id", &our_id, "--include-merged-configuration"]);
    let their = clis.reference(&["set-up", "--container-id", &their_id, "--include-merged-configuration"]);
    let pair = (our, their);
    succeeded(&pair);
    assert_eq!(keys(&result_of(&pair.0)), keys(&result_of(&pair.1)));
    assert_eq!(
        result_of(&pair.0)["mergedConfiguration"]["postCreateCommands"],
        json!(["echo postCreate >> hooks.log"])
    );
    assert_eq!(
        result_of(&pair.0)["mergedConfiguration"]["postCreateCommands"],
        result_of(&pair.1)["mergedConfiguration"]["postCreateCommands"]
    );
    assert_eq!(ours.read("hooks.log"), "onCreate\nupdateContent\npostCreate\npostStart\npostAttach\n");
    assert_eq!(ours.read("hooks.log"), hooks_of_theirs(&theirs, &their_id));

    // A container of no dev container tool: the reference sets it up; a
    // room's hooks run through the daemon workroom gives a room it makes.
    let foreign = format!("wr-test-foreign-{}", ours.unique());
    docker_ok(&["run", "-d", "--name", &foreign, "--label", &format!("{TEST_LABEL}=1"), BUSYBOX, "sleep", "600"]);
    let out = clis.ours(&["set-up", "--container-id", &foreign]);
    remove_container(&foreign);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(result_of(&out)["outcome"], "error");
    assert!(result_of(&out)["message"].as_str().unwrap().contains("was not made by workroom"), "{}", stdout(&out));
}

#[test]
fn include_configuration_puts_the_configuration_and_the_merged_one_in_ups_result_as_the_reference_does() {
    let clis = Clis::new();
    let (ours, theirs) = two(hooked(json!({ "remoteEnv": { "A": "b" } })));
    let up = both(&clis, (&ours, &theirs), &["up", "--include-configuration", "--include-merged-configuration"]);
    succeeded(&up);
    let (our, their) = (normalised(&result_of(&up.0), &ours), normalised(&result_of(&up.1), &theirs));
    assert_eq!(keys(&our), keys(&their));
    assert_eq!(our["configuration"]["remoteEnv"], json!({ "A": "b" }));
    assert_eq!(our["configuration"]["configFilePath"], their["configuration"]["configFilePath"]);
    assert_eq!(our["mergedConfiguration"]["remoteEnv"], their["mergedConfiguration"]["remoteEnv"]);
    assert_eq!(our["mergedConfiguration"]["postStartCommands"], their["mergedConfiguration"]["postStartCommands"]);
}

#[test]
fn the_probe_and_uid_defaults_are_taken_and_a_word_they_do_not_know_is_an_error_for_both() {
    let clis = Clis::new();
    let (ours, theirs) = two(hooked(json!({})));
    let up = both(
        &clis,
        (&ours, &theirs),
        &["up", "--default-user-env-probe", "none", "--update-remote-user-uid-default", "off"],
    );
    succeeded(&up);
    assert_eq!(ours.read("hooks.log"), theirs.read("hooks.log"));
    let bad = both(&clis, (&ours, &theirs), &["up", "--default-user-env-probe", "sometimes"]);
    assert_eq!((bad.0.status.code(), bad.1.status.code()), (Some(1), Some(1)));
    assert_eq!(result_of(&bad.0)["outcome"], "error");
    assert!(result_of(&bad.0)["message"].as_str().unwrap().contains("--default-user-env-probe"), "{}", stdout(&bad.0));
}

/// A repository (`git init`) with the workspace in its subfolder `sub`,
/// whose rooms are removed on drop.
struct Repo {
    ws: Workspace,
}

impl Repo {
    fn new(config: Value) -> Repo {
        let ws = Workspace::new(json!({ "image": BUSYBOX }));
        let git = std::process::Command::new("git").args(["init", "-q"]).arg(ws.path()).output().unwrap();
        assert!(git.status.success(), "git init: {}", stderr(&git));
        std::fs::create_dir(ws.path().join("sub")).unwrap();
        std::fs::write(ws.path().join("sub/.devcontainer.json"), labelled(config)).unwrap();
        Repo { ws }
    }

    fn sub(&self) -> String {
        format!("{}/sub", self.ws.folder())
    }
}

impl Drop for Repo {
    fn drop(&mut self) {
        let filter = format!("label=devcontainer.local_folder={}", self.sub());
        for id in docker_ok(&["ps", "-aq", "--filter", &filter]).lines() {
            remove_container(id);
        }
    }
}

#[test]
fn the_git_root_is_mounted_unless_mount_workspace_git_root_is_false_as_the_reference_does() {
    let clis = Clis::new();
    for git_root in ["true", "false"] {
        let (ours, theirs) = (Repo::new(json!({ "image": DEBIAN })), Repo::new(json!({ "image": DEBIAN })));
        let args = |r: &Repo| {
            vec![
                "up".to_string(),
                "--workspace-folder".into(),
                r.sub(),
                "--mount-workspace-git-root".into(),
                git_root.into(),
            ]
        };
        let our = clis.ours(&args(&ours).iter().map(String::as_str).collect::<Vec<_>>());
        let their = clis.reference(&args(&theirs).iter().map(String::as_str).collect::<Vec<_>>());
        let pair = (our, their);
        succeeded(&pair);
        let folder = |r: &Repo, out: &Output| normalised(&result_of(out)["remoteWorkspaceFolder"], &r.ws);
        assert_eq!(folder(&ours, &pair.0), folder(&theirs, &pair.1));
        let wanted = if git_root == "true" { "/workspaces/<base>/sub" } else { "/workspaces/sub" };
        assert_eq!(folder(&ours, &pair.0), json!(wanted));
        let mounts = |r: &Repo, out: &Output| {
            let all = inspect(&container(out), "{{json .Mounts}}");
            let bind =
                all.as_array().unwrap().iter().find(|m| m["Destination"].as_str().unwrap().starts_with("/workspaces/"));
            normalised(&json!([bind.unwrap()["Source"], bind.unwrap()["Destination"]]), &r.ws)
        };
        assert_eq!(mounts(&ours, &pair.0), mounts(&theirs, &pair.1));
        // exec runs in that folder, given the same flag.
        let exec = |r: &Repo| {
            vec![
                "exec".to_string(),
                "--workspace-folder".into(),
                r.sub(),
                "--mount-workspace-git-root".into(),
                git_root.into(),
                "pwd".into(),
            ]
        };
        let our = clis.ours(&exec(&ours).iter().map(String::as_str).collect::<Vec<_>>());
        let their = clis.reference(&exec(&theirs).iter().map(String::as_str).collect::<Vec<_>>());
        let pair = (our, their);
        succeeded(&pair);
        assert_eq!(normalised(&json!(stdout(&pair.0)), &ours.ws), json!(format!("{wanted}\n")));
        assert_eq!(normalised(&json!(stdout(&pair.0)), &ours.ws), normalised(&json!(stdout(&pair.1)), &theirs.ws));
    }
}

#[test]
fn a_workspace_with_no_devcontainer_json_is_brought_up_and_used_through_override_config_as_the_reference_does() {
    let clis = Clis::new();
    let (ours, theirs) = two(json!({ "image": BUSYBOX }));
    // Put back before the workspaces go, which read it to find their rooms.
    let _back = Restore([&ours, &theirs].map(|ws| ws.path().join(".devcontainer.json")).to_vec());
    for ws in [&ours, &theirs] {
        std::fs::remove_file(ws.path().join(".devcontainer.json")).unwrap();
    }
    let over = tempfile::Builder::new().prefix("wr-test-override-").tempdir().unwrap();
    let over_file = over.path().join("override.json");
    std::fs::write(&over_file, labelled(hooked(json!({ "remoteEnv": { "FROM": "override" } })))).unwrap();
    let over_arg = over_file.to_str().unwrap();
    let up = both(&clis, (&ours, &theirs), &["up", "--override-config", over_arg]);
    succeeded(&up);
    assert_eq!(ours.read("hooks.log"), theirs.read("hooks.log"));
    let exec = both(&clis, (&ours, &theirs), &["exec", "--override-config", over_arg, "sh", "-c", "echo $FROM; pwd"]);
    succeeded(&exec);
    assert_eq!(stdout(&exec.0).lines().next(), Some("override"));
    assert_eq!(
        stdout(&exec.0).replace(&ours.remote_folder(), "<ws>"),
        stdout(&exec.1).replace(&theirs.remote_folder(), "<ws>")
    );
    // Without it there is no configuration to find the room by, for either.
    let bare = both(&clis, (&ours, &theirs), &["exec", "true"]);
    assert_eq!((bare.0.status.code(), bare.1.status.code()), (Some(1), Some(1)));
}

#[test]
fn override_config_and_additional_features_make_the_room_the_reference_makes() {
    let clis = Clis::new();
    let unique = Workspace::image(DEBIAN).unique();
    let images = Images::new(&unique).with_reference_feature_stages();
    // The workspace's own file names another image and no hooks: the
    // override's text is what both read; the feature is beside the
    // workspace's file, where relative paths start.
    let own = json!({ "image": BUSYBOX });
    let (ours, theirs) =
        (Workspace::with_devcontainer_folder(own.clone(), &[]), Workspace::with_devcontainer_folder(own, &[]));
    for ws in [&ours, &theirs] {
        local_feature(&ws.path().join(".devcontainer"), &unique);
    }
    let over = tempfile::Builder::new().prefix("wr-test-override-").tempdir().unwrap();
    let over_file = over.path().join("override.json");
    std::fs::write(&over_file, labelled(hooked(json!({ "remoteEnv": { "WR_UNIQUE": unique } })))).unwrap();
    let features = r#"{"./wr-face-feature": {}}"#;
    let up = both(
        &clis,
        (&ours, &theirs),
        &["up", "--override-config", over_file.to_str().unwrap(), "--additional-features", features],
    );
    for out in [&up.0, &up.1] {
        if let Some(id) = result_of(out)["containerId"].as_str() {
            let image = inspect(id, "{{json .Config.Image}}");
            images.add(image.as_str().unwrap());
            images.add_features_of(image.as_str().unwrap());
        }
    }
    succeeded(&up);
    let hooks = "onCreate\nupdateContent\nfeaturePostCreate\npostCreate\npostStart\npostAttach\n";
    assert_eq!(ours.read("hooks.log"), hooks);
    assert_eq!(theirs.read("hooks.log"), hooks);
    for out in [&up.0, &up.1] {
        let id = container(out);
        assert!(inspect(&id, "{{json .Config.Image}}").as_str().unwrap() != BUSYBOX, "the override's image");
    }
    let exec = both(
        &clis,
        (&ours, &theirs),
        &["exec", "sh", "-c", "echo $WR_FACE_FEATURE $WR_UNIQUE; cat /usr/local/share/wr-face-feature"],
    );
    succeeded(&exec);
    assert_eq!(stdout(&exec.0), format!("on {unique}\n{unique}\n"));
    assert_eq!(stdout(&exec.0), stdout(&exec.1));
    // Both record the workspace's own file as the configuration.
    let config_file = |out: &Output, ws: &Workspace| {
        normalised(&inspect(&container(out), "{{json .Config.Labels}}")["devcontainer.config_file"], ws)
    };
    assert_eq!(config_file(&up.0, &ours), config_file(&up.1, &theirs));
    assert_eq!(config_file(&up.0, &ours), json!("<ws>/.devcontainer/devcontainer.json"));
    let label = |out: &Output, ws: &Workspace| {
        let text = inspect(&container(out), "{{json .Config.Labels}}")["devcontainer.metadata"].clone();
        normalised(&serde_json::from_str::<Value>(text.as_str().unwrap()).unwrap(), ws)
    };
    assert_eq!(label(&up.0, &ours), label(&up.1, &theirs));
}

#[test]
fn prebuild_runs_on_create_and_update_content_again_at_each_call_and_leaves_the_rest_as_the_reference_does() {
    let clis = Clis::new();
    let (ours, theirs) = two(hooked(json!({})));
    succeeded(&both(&clis, (&ours, &theirs), &["up", "--prebuild"]));
    assert_eq!(ours.read("hooks.log"), "onCreate\nupdateContent\n");
    assert_eq!(ours.read("hooks.log"), theirs.read("hooks.log"));
    succeeded(&both(&clis, (&ours, &theirs), &["up", "--prebuild"]));
    assert_eq!(ours.read("hooks.log"), "onCreate\nupdateContent\nupdateContent\n");
    assert_eq!(ours.read("hooks.log"), theirs.read("hooks.log"));
    let run = both(&clis, (&ours, &theirs), &["run-user-commands", "--prebuild"]);
    succeeded(&run);
    assert_eq!(result_of(&run.0), json!({ "outcome": "success", "result": "prebuild" }));
    assert_eq!(result_of(&run.0), result_of(&run.1));
    assert_eq!(ours.read("hooks.log"), theirs.read("hooks.log"));
    succeeded(&both(&clis, (&ours, &theirs), &["up"]));
    assert!(ours.read("hooks.log").ends_with("postCreate\npostStart\npostAttach\n"), "{}", ours.read("hooks.log"));
    assert_eq!(ours.read("hooks.log"), theirs.read("hooks.log"));
}

#[test]
fn dotfiles_are_cloned_and_installed_after_post_create_and_before_post_start_as_the_reference_does() {
    let clis = Clis::new();
    let mut config = hooked(json!({}));
    config["postStartCommand"] =
        json!("test -e ~/dotfiles-ran && echo dotfiles >> hooks.log; echo postStart >> hooks.log");
    let (ours, theirs) = two(config);
    let mut outs = Vec::new();
    for (ws, reference) in [(&ours, false), (&theirs, true)] {
        // A repository in the workspace, which the room clones by its path.
        let dots = ws.path().join("dots");
        std::fs::create_dir(&dots).unwrap();
        std::fs::write(dots.join("install.sh"), "#!/bin/sh\necho installed >> ~/dotfiles-ran\n").unwrap();
        for git in [
            &["init", "-q"][..],
            &["add", "install.sh"],
            &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "dots"],
        ] {
            let out = std::process::Command::new("git").arg("-C").arg(&dots).args(git).output().unwrap();
            assert!(out.status.success(), "git {git:?}: {}", stderr(&out));
        }
        let repository = format!("{}/dots", ws.remote_folder());
        let folder = ws.folder();
        let args = ["up", "--workspace-folder", &folder, "--dotfiles-repository", &repository];
        outs.push(if reference { clis.reference(&args) } else { clis.ours(&args) });
    }
    let pair = (outs.remove(0), outs.remove(0));
    succeeded(&pair);
    assert_eq!(ours.read("hooks.log"), "onCreate\nupdateContent\npostCreate\ndotfiles\npostStart\npostAttach\n");
    assert_eq!(ours.read("hooks.log"), theirs.read("hooks.log"));
    let exec = both(&clis, (&ours, &theirs), &["exec", "sh", "-c", "cat ~/dotfiles-ran; ls ~/dotfiles"]);
    succeeded(&exec);
    assert_eq!(stdout(&exec.0), "installed\ninstall.sh\n");
    assert_eq!(stdout(&exec.0), stdout(&exec.1));
}

/// Files written back on drop, as a config the test took away.
struct Restore(Vec<std::path::PathBuf>);

impl Drop for Restore {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::write(path, labelled(json!({ "image": BUSYBOX })));
        }
    }
}
