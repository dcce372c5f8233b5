//! `devcontainer build` through the face, side by side with the reference
//! CLI: the same workspace content and command line to both; the result
//! line, the images' names and `devcontainer.metadata` labels, and what
//! rooms made from the built image merge and run. `--push` goes to Debian's
//! docker-registry on localhost, and a room is made from the pushed image
//! alone. Real engine; every image a test builds is removed by its guard.

mod common;
mod registry;

use common::face::*;
use common::*;
use registry::Registry;
use serde_json::{json, Value};

/// The arm64 fixture (fixtures/images/build.sh busybox-arm64).
const BUSYBOX_ARM64: &str = "workroom-fixture/busybox-arm64:1";

/// A workspace whose config is `.devcontainer/devcontainer.json` with the
/// test's own feature beside it, every hook appending to hooks.log, and
/// `unique` in its remoteEnv (so the reference's build stages name it).
fn with_feature(unique: &str) -> Workspace {
    let config = hooked(json!({
        "features": { "./wr-face-feature": {} },
        "remoteEnv": { "WR_UNIQUE": unique },
    }));
    let ws = Workspace::with_devcontainer_folder(config, &[]);
    local_feature(&ws.path().join(".devcontainer"), unique);
    ws
}

/// Every image id the engine holds now.
fn all_images() -> Vec<String> {
    docker_ok(&["images", "-aq", "--no-trunc"]).lines().map(str::to_string).collect()
}

#[test]
fn build_names_and_labels_the_image_as_the_reference_does_and_up_of_the_same_config_builds_nothing() {
    let clis = Clis::new();
    let unique = Workspace::image(DEBIAN).unique();
    let images = Images::new(&unique).with_reference_feature_stages();
    let (ours, theirs) = (with_feature(&unique), with_feature(&unique));
    let names = |side: &str| [format!("wr-test-built-{side}-{unique}:1"), format!("wr-test-built-{side}-{unique}:2")];
    let (our_names, their_names) = (names("ours"), names("theirs"));
    for name in our_names.iter().chain(&their_names) {
        images.add(name);
    }
    let build = |cli: &dyn Fn(&[&str]) -> std::process::Output, ws: &Workspace, names: &[String; 2]| {
        let folder = ws.folder();
        cli(&[
            "build",
            "--workspace-folder",
            &folder,
            "--image-name",
            &names[0],
            "--image-name",
            &names[1],
            "--label",
            "wr.test.extra=yes",
            "--label",
            &format!("{TEST_LABEL}=1"),
        ])
    };
    let our = build(&|a| clis.ours(a), &ours, &our_names);
    let their = build(&|a| clis.reference(a), &theirs, &their_names);
    assert_eq!(our.status.code(), Some(0), "ours: {}", stderr(&our));
    assert_eq!(their.status.code(), Some(0), "reference: {}", stderr(&their));
    images.add_features_of(&our_names[0]);
    assert_eq!(stdout(&our).lines().count(), 1, "{}", stdout(&our));
    let (our_result, their_result) = (result_of(&our), result_of(&their));
    assert_eq!(keys(&our_result), keys(&their_result), "{our_result} vs {their_result}");
    assert_eq!(our_result["imageName"], json!(our_names));
    assert_eq!(their_result["imageName"], json!(their_names));
    assert_eq!(our_result["ociAuthDiagnostics"], their_result["ociAuthDiagnostics"]);
    assert!(stderr(&our).contains(&format!("wr-face-feature installing {unique}")), "{}", stderr(&our));

    // Every name is the one image, labelled as the reference labels its
    // own: the image's entries, the feature's, devcontainer.json's.
    for names in [&our_names, &their_names] {
        let id = |n: &str| docker_ok(&["image", "inspect", n, "--format", "{{.Id}}"]);
        assert_eq!(id(&names[0]), id(&names[1]));
        assert_eq!(inspect(&names[0], "{{json .Config.Labels}}")["wr.test.extra"], "yes");
    }
    let (our_label, their_label) = (image_label(&our_names[0]), image_label(&their_names[0]));
    assert_eq!(our_label, their_label);
    let ids: Vec<&str> = our_label.as_array().unwrap().iter().filter_map(|e| e["id"].as_str()).collect();
    assert_eq!(ids, ["./wr-face-feature"], "{our_label}");
    assert_eq!(our_label.as_array().unwrap().last().unwrap()["remoteEnv"]["WR_UNIQUE"], json!(unique));

    // A second build, and then `up` of the same config, build nothing: the
    // room is made from an image that was there before it.
    let again = build(&|a| clis.ours(a), &ours, &our_names);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert!(!stderr(&again).contains("wr-face-feature installing"), "{}", stderr(&again));
    let before = all_images();
    let up = clis.ours(&["up", "--workspace-folder", &ours.folder()]);
    assert_eq!(up.status.code(), Some(0), "{}", stderr(&up));
    assert!(!stderr(&up).contains("wr-face-feature installing"), "{}", stderr(&up));
    let room = result_of(&up)["containerId"].as_str().unwrap().to_string();
    let room_image = inspect(&room, "{{json .Image}}");
    assert!(before.contains(&room_image.as_str().unwrap().to_string()), "the room's image {room_image} was made by up");
    assert_eq!(
        ours.read("hooks.log"),
        "onCreate\nupdateContent\nfeaturePostCreate\npostCreate\npostStart\npostAttach\n"
    );
    images.add(inspect(&room, "{{json .Config.Image}}").as_str().unwrap());

    // --no-cache installs the features again.
    let fresh =
        clis.ours(&["build", "--no-cache", "--workspace-folder", &ours.folder(), "--image-name", &our_names[0]]);
    assert_eq!(fresh.status.code(), Some(0), "{}", stderr(&fresh));
    assert!(stderr(&fresh).contains(&format!("wr-face-feature installing {unique}")), "{}", stderr(&fresh));
    images.add_features_of(&our_names[0]);
}

#[test]
fn an_image_from_build_gives_the_reference_and_ours_the_same_configuration_and_hooks_from_the_image_alone() {
    let clis = Clis::new();
    let unique = Workspace::image(DEBIAN).unique();
    let images = Images::new(&unique);
    let source = with_feature(&unique);
    let name = format!("wr-test-built-{unique}:1");
    images.add(&name);
    let out = clis.ours(&["build", "--workspace-folder", &source.folder(), "--image-name", &name]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    images.add_features_of(&name);

    // Rooms of another config, which names the image alone.
    let (ours, theirs) = two(json!({ "image": name, "remoteEnv": { "FROM_NEW_CONFIG": "yes" } }));
    let our_up = clis.ours(&["up", "--workspace-folder", &ours.folder()]);
    let their_up = clis.reference(&["up", "--workspace-folder", &theirs.folder()]);
    assert_eq!(our_up.status.code(), Some(0), "ours: {}", stderr(&our_up));
    assert_eq!(their_up.status.code(), Some(0), "reference: {}", stderr(&their_up));
    let (our_id, their_id) = (
        result_of(&our_up)["containerId"].as_str().unwrap().to_string(),
        result_of(&their_up)["containerId"].as_str().unwrap().to_string(),
    );
    // The built config's hooks and the feature's ran in both, in one order.
    let hooks = "onCreate\nupdateContent\nfeaturePostCreate\npostCreate\npostStart\npostAttach\n";
    assert_eq!(ours.read("hooks.log"), hooks);
    assert_eq!(theirs.read("hooks.log"), hooks);
    // The same container label, and the same merged configuration.
    let label = |id: &str| -> Value {
        serde_json::from_str(inspect(id, "{{json .Config.Labels}}")["devcontainer.metadata"].as_str().unwrap()).unwrap()
    };
    assert_eq!(label(&our_id), label(&their_id));
    let merged = |cli: &dyn Fn(&[&str]) -> std::process::Output, ws: &Workspace| {
        let out = cli(&["read-configuration", "--include-merged-configuration", "--workspace-folder", &ws.folder()]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        normalised(&result_of(&out)["mergedConfiguration"], ws)
    };
    let (our_merged, their_merged) = (merged(&|a| clis.ours(a), &ours), merged(&|a| clis.reference(a), &theirs));
    assert_eq!(our_merged, their_merged);
    assert_eq!(our_merged["remoteEnv"], json!({ "WR_UNIQUE": unique, "FROM_NEW_CONFIG": "yes" }));
    // The feature's environment is in the image.
    for out in [
        clis.ours(&["exec", "--container-id", &our_id, "sh", "-c", "echo $WR_FACE_FEATURE"]),
        clis.reference(&["exec", "--container-id", &their_id, "sh", "-c", "echo $WR_FACE_FEATURE"]),
    ] {
        assert_eq!(stdout(&out), "on\n", "{}", stderr(&out));
    }
}

#[test]
fn build_push_sends_the_image_to_a_registry_and_up_from_the_pushed_name_pulls_it_and_installs_no_feature() {
    let clis = Clis::new();
    let registry = Registry::start();
    let unique = Workspace::image(DEBIAN).unique();
    let images = Images::new(&unique);
    let source = with_feature(&unique);
    let name = format!("{}/wr-test/{unique}:1", registry.host());
    images.add(&name);
    let out = clis.ours(&["build", "--workspace-folder", &source.folder(), "--image-name", &name, "--push"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(result_of(&out)["imageName"], json!([name]));
    assert!(stderr(&out).contains(&format!("pushed {name}")), "{}", stderr(&out));
    images.add_features_of(&name);

    // The reference pushes through BuildKit, which this engine has not (it
    // says so before it builds anything).
    let theirs = Workspace::new(json!({ "image": DEBIAN, "remoteEnv": { "WR_UNIQUE": unique } }));
    let their = clis.reference(&["build", "--workspace-folder", &theirs.folder(), "--image-name", &name, "--push"]);
    assert_eq!(their.status.code(), Some(1), "{}", stderr(&their));
    assert!(result_of(&their)["description"].as_str().unwrap_or_default().contains("BuildKit"), "{}", stdout(&their));

    // Nothing of it is left here: the room's image comes from the registry.
    drop(images);
    assert_eq!(docker(&["image", "inspect", &name]).status.code(), Some(1), "{name} is still here");
    let images = Images::new(&unique);
    images.add(&name);
    let ws = Workspace::new(json!({ "image": name }));
    let up = clis.ours(&["up", "--workspace-folder", &ws.folder()]);
    assert_eq!(up.status.code(), Some(0), "{}", stderr(&up));
    assert!(stderr(&up).contains(&format!("pulling {name}")), "{}", stderr(&up));
    assert!(!stderr(&up).contains("wr-face-feature installing"), "{}", stderr(&up));
    assert_eq!(ws.exec_ok(&["cat", "/usr/local/share/wr-face-feature"]), format!("{unique}\n"));
    assert_eq!(ws.read("hooks.log"), "onCreate\nupdateContent\nfeaturePostCreate\npostCreate\npostStart\npostAttach\n");
}

#[test]
fn build_platform_makes_the_image_for_that_platform_where_the_reference_needs_buildkit() {
    let clis = Clis::new();
    let unique = Workspace::image(DEBIAN).unique();
    let images = Images::new(&unique);
    let (ours, theirs) = two(json!({ "image": BUSYBOX_ARM64, "postCreateCommand": "echo made" }));
    let name = format!("wr-test-built-{unique}:arm64");
    images.add(&name);
    let args = |ws: &Workspace| {
        vec![
            "build".to_string(),
            "--workspace-folder".into(),
            ws.folder(),
            "--platform".into(),
            "linux/arm64".into(),
            "--image-name".into(),
            name.clone(),
        ]
    };
    let our = clis.ours(&args(&ours).iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(our.status.code(), Some(0), "{}", stderr(&our));
    assert_eq!(inspect(&name, "{{json .Architecture}}"), "arm64");
    assert_eq!(image_label(&name), json!([{ "postCreateCommand": "echo made" }]));
    let their = clis.reference(&args(&theirs).iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(their.status.code(), Some(1), "{}", stderr(&their));
    assert!(result_of(&their)["description"].as_str().unwrap_or_default().contains("BuildKit"), "{}", stdout(&their));

    // --log-format json: every stderr line is a JSON log line.
    let logged =
        clis.ours(&["build", "--log-format", "json", "--log-level", "debug", "--workspace-folder", &ours.folder()]);
    assert_eq!(logged.status.code(), Some(0), "{}", stderr(&logged));
    assert_json_log_lines("build", &logged, true);
    images.add(result_of(&logged)["imageName"][0].as_str().unwrap());

    // A platform that is not os/arch is one line and an error result.
    let bad = clis.ours(&["build", "--workspace-folder", &ours.folder(), "--platform", "arm64"]);
    assert_eq!(bad.status.code(), Some(1));
    assert_eq!(result_of(&bad)["outcome"], "error");
    assert!(result_of(&bad)["message"].as_str().unwrap().contains("is not os/arch"), "{}", stdout(&bad));
}

#[test]
fn the_devcontainers_ci_sequence_build_then_up_with_remote_env_and_mount_then_exec_writing_into_the_mount_agrees_with_the_reference(
) {
    let clis = Clis::new();
    let unique = Workspace::image(DEBIAN).unique();
    let images = Images::new(&unique);
    let (our_volume, their_volume) = (Volume::new("ours"), Volume::new("theirs"));
    let dockerfile = format!("FROM {DEBIAN}\nRUN echo {unique} > /built\n");
    let mut config = hooked(
        json!({ "build": { "dockerfile": "Dockerfile" }, "postCreateCommand": "echo postCreate=$CI_VAR >> hooks.log" }),
    );
    // A Dockerfile config alone: given `image` too, the reference tags what
    // it builds with that name, here the fixture's.
    config.as_object_mut().unwrap().remove("image");
    let ours = Workspace::with_devcontainer_folder(config.clone(), &[("Dockerfile", &dockerfile)]);
    let theirs = Workspace::with_devcontainer_folder(config, &[("Dockerfile", &dockerfile)]);
    images.add(ours.build_tag());
    let (our_name, their_name) = (format!("wr-test-ci-ours-{unique}:1"), format!("wr-test-ci-theirs-{unique}:1"));
    images.add(&our_name);
    images.add(&their_name);

    // As the action runs them: build, up, exec.
    let sequence = |cli: &dyn Fn(&[&str]) -> std::process::Output, ws: &Workspace, name: &str, volume: &Volume| {
        let folder = ws.folder();
        let build = cli(&["build", "--workspace-folder", &folder, "--image-name", name]);
        let before = all_images();
        let mount = format!("type=volume,source={},target=/mnt/ci", volume.0);
        let up = cli(&["up", "--workspace-folder", &folder, "--remote-env", "CI_VAR=from-ci", "--mount", &mount]);
        let exec = cli(&[
            "exec",
            "--workspace-folder",
            &folder,
            "--remote-env",
            "OUT=/mnt/ci/out",
            "sh",
            "-c",
            "cat /built > $OUT; echo exec=$CI_VAR >> $OUT",
        ]);
        (build, before, up, exec)
    };
    let ours_ran = sequence(&|a| clis.ours(a), &ours, &our_name, &our_volume);
    let theirs_ran = sequence(&|a| clis.reference(a), &theirs, &their_name, &their_volume);
    for (who, (build, _, up, exec)) in [("ours", &ours_ran), ("reference", &theirs_ran)] {
        for (step, out) in [("build", build), ("up", up), ("exec", exec)] {
            assert_eq!(out.status.code(), Some(0), "{who} {step}: {}\n{}", stdout(out), stderr(out));
        }
    }
    assert_eq!(keys(&result_of(&ours_ran.0)), keys(&result_of(&theirs_ran.0)));
    assert_eq!(result_of(&ours_ran.0)["imageName"], json!([our_name]));
    assert_eq!(image_label(&our_name), image_label(&their_name));
    assert_eq!(keys(&result_of(&ours_ran.2)), keys(&result_of(&theirs_ran.2)));
    // up started from the image build made: nothing new was built.
    let room = result_of(&ours_ran.2)["containerId"].as_str().unwrap().to_string();
    let room_image = inspect(&room, "{{json .Image}}").as_str().unwrap().to_string();
    assert!(ours_ran.1.contains(&room_image), "the room's image {room_image} was made by up");
    // The hooks saw --remote-env; exec wrote into the mount, with its own.
    let hooks = "onCreate\nupdateContent\npostCreate=from-ci\npostStart\npostAttach\n";
    assert_eq!(ours.read("hooks.log"), hooks);
    assert_eq!(theirs.read("hooks.log"), hooks);
    assert_eq!(volume_file(&our_volume.0, "out"), format!("{unique}\nexec=\n"));
    assert_eq!(volume_file(&our_volume.0, "out"), volume_file(&their_volume.0, "out"));
}

#[test]
fn build_of_a_compose_configuration_labels_the_services_image_as_the_reference_does() {
    let clis = Clis::new();
    let unique = Workspace::image(DEBIAN).unique();
    let images = Images::new(&unique);
    let compose = format!(
        "services:\n  app:\n    image: {DEBIAN}\n    command: sleep infinity\n    labels:\n      {TEST_LABEL}: \"1\"\n"
    );
    let config = json!({
        "dockerComposeFile": "docker-compose.yml",
        "service": "app",
        "workspaceFolder": "/w",
        "postCreateCommand": format!("echo {unique}"),
    });
    let (ours, theirs) = two(config);
    let mut names = Vec::new();
    for (ws, side) in [(&ours, "ours"), (&theirs, "theirs")] {
        std::fs::write(ws.path().join("docker-compose.yml"), &compose).unwrap();
        let name = format!("wr-test-compose-{side}-{unique}:1");
        images.add(&name);
        names.push(name);
    }
    let our = clis.ours(&["build", "--workspace-folder", &ours.folder(), "--image-name", &names[0]]);
    let their = clis.reference(&["build", "--workspace-folder", &theirs.folder(), "--image-name", &names[1]]);
    assert_eq!(our.status.code(), Some(0), "ours: {}", stderr(&our));
    assert_eq!(their.status.code(), Some(0), "reference: {}", stderr(&their));
    assert_eq!(keys(&result_of(&our)), keys(&result_of(&their)));
    assert_eq!(image_label(&names[0]), json!([{ "postCreateCommand": format!("echo {unique}") }]));
    assert_eq!(image_label(&names[0]), image_label(&names[1]));
    // --push is refused for compose, by both.
    let push = clis.ours(&["build", "--workspace-folder", &ours.folder(), "--image-name", &names[0], "--push"]);
    assert_eq!(push.status.code(), Some(1));
    assert!(result_of(&push)["message"].as_str().unwrap().contains("not provided for a compose configuration"));
}
