//! Image metadata against the real engine: an image built in the test, FROM
//! a fixture image, carries a `devcontainer.metadata` label; `up` applies it
//! (env, user, capabilities, mounts, an entrypoint starting a service, hooks
//! in order with their origins), the room's own label records it as the
//! reference's does, and the reference CLI, given the same config, makes
//! the same room and prints the same merged configuration.
//!
//! Hooks report by appending to `hooks.log` in the workspace, which the room
//! sees through its bind mount.

mod common;

use common::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::process::{Command, Output};

/// An image FROM `base` with `label` as its `devcontainer.metadata`, tagged
/// uniquely and labelled `workroom.test`; removed on drop (after the rooms
/// made from it, which are declared after it).
struct LabelledImage {
    tag: String,
}

impl LabelledImage {
    fn build(base: &str, unique: &str, label: &Value) -> LabelledImage {
        let tag = format!("workroom-test-meta/{unique}:1");
        let mut build = Command::new("docker");
        // The classic builder: it never pulls a local FROM image.
        build.env("DOCKER_BUILDKIT", "0").args(["build", "-q", "-t", &tag, "--label", &format!("{TEST_LABEL}=1")]);
        build.args(["--label", &format!("devcontainer.metadata={}", label_text(label)), "-"]);
        let out = output_within(build, Some(format!("FROM {base}\n").as_bytes()));
        assert!(out.status.success(), "docker build {tag}: {}", stderr(&out));
        LabelledImage { tag }
    }
}

fn label_text(label: &Value) -> String {
    match label {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Drop for LabelledImage {
    fn drop(&mut self) {
        let _ = docker(&["rmi", "-f", &self.tag]);
    }
}

/// A named volume metadata mounts; removed on drop.
struct Volume(String);

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = docker(&["volume", "rm", "-f", &self.0]);
    }
}

/// A name no other test, nor another run of this file, uses at the same time.
fn unique() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}-{n}", std::process::id())
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

fn inspect(name: &str, format: &str) -> Value {
    serde_json::from_str(&docker_ok(&["inspect", name, "--format", format])).unwrap()
}

fn container_label(name: &str) -> Value {
    let text = docker_ok(&["inspect", name, "--format", "{{index .Config.Labels \"devcontainer.metadata\"}}"]);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}'s label is not JSON ({e}): {text}"))
}

/// The entrypoint a test image's metadata carries: counts the container's
/// starts and leaves a service running in the background (its pid in
/// /tmp/wr-svc.pid), as docker-in-docker's `docker-init.sh` leaves dockerd.
const ENTRYPOINT: &str = "n=$(cat /tmp/wr-ep.count 2>/dev/null || echo 0); echo $((n+1)) > /tmp/wr-ep.count; \
     sleep 86400 >/dev/null 2>&1 & echo $! > /tmp/wr-svc.pid";

/// The label of the main test image: a feature-like entry and an image
/// entry, each with hooks that append `<hook>:<origin> <user>` to hooks.log.
fn image_label(volume: &str) -> Value {
    let log = |what: &str| format!("echo {what} $(id -un) >> hooks.log");
    json!([
        {
            "id": "wr-test/feature-a",
            "containerEnv": { "META_ENV": "from-image", "SHARED": "image" },
            "capAdd": ["SYS_PTRACE"],
            "mounts": [{ "type": "volume", "source": volume, "target": "/meta-data" }],
            "entrypoint": ENTRYPOINT,
            "onCreateCommand": log("onCreate:feature-a"),
            "postCreateCommand": log("postCreate:feature-a"),
            "postStartCommand": "echo postStart:feature-a ep=$(cat /tmp/wr-ep.count) >> hooks.log",
        },
        {
            "remoteUser": "dev",
            "remoteEnv": { "META_REMOTE": "from-image" },
            "postAttachCommand": log("postAttach:image"),
        },
    ])
}

fn config(image: &str) -> Value {
    json!({
        "image": image,
        "containerEnv": { "SHARED": "config" },
        "postCreateCommand": "echo postCreate:config $(id -un) >> hooks.log",
        "postStartCommand": "echo postStart:config >> hooks.log",
    })
}

/// `KEY=value` lines of `env` in the room, for the given keys.
fn env_of(output: &str, keys: &[&str]) -> BTreeMap<String, String> {
    output
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| keys.contains(k))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const METADATA_ENV: &[&str] = &["META_ENV", "SHARED", "META_REMOTE"];

fn service_pid(ws: &Workspace) -> String {
    let out = ws.exec_ok(&["sh", "-c", "p=$(cat /tmp/wr-svc.pid) && test -d /proc/$p && echo $p"]);
    out.trim().to_string()
}

#[test]
fn an_image_label_gives_the_room_its_env_user_caps_mounts_entrypoint_and_hooks() {
    let unique = unique();
    let volume = Volume(format!("wr-test-meta-{unique}"));
    let image = LabelledImage::build(DEBIAN, &unique, &image_label(&volume.0));
    let ws = Workspace::new(config(&image.tag));
    ws.open_to_room_users();
    let out = ws.up();
    let said = stderr(&out);
    let name = ws.room_name();

    // The create request: capabilities, the metadata's volume, the env.
    let caps = inspect(&name, "{{json .HostConfig.CapAdd}}");
    assert!(caps.as_array().unwrap().iter().any(|c| c.as_str().unwrap().ends_with("SYS_PTRACE")), "{caps}");
    let mounts = inspect(&name, "{{json .HostConfig.Mounts}}");
    assert!(
        mounts.as_array().unwrap().iter().any(|m| m["Target"] == "/meta-data" && m["Source"] == volume.0.as_str()),
        "{mounts}"
    );
    assert!(said.contains("capability SYS_PTRACE (asked by feature wr-test/feature-a)"), "widening is said: {said}");

    // exec: the image's remote user and the merged env (devcontainer.json's
    // containerEnv over the image's).
    let env = ws.exec_ok(&["sh", "-c", "id -un; env"]);
    assert_eq!(env.lines().next(), Some("dev"));
    assert_eq!(
        env_of(&env, METADATA_ENV),
        BTreeMap::from([
            ("META_ENV".into(), "from-image".into()),
            ("META_REMOTE".into(), "from-image".into()),
            ("SHARED".into(), "config".into()),
        ])
    );

    // Hooks: metadata's before devcontainer.json's, as the remote user, the
    // entrypoint done before postStart; each labelled with its origin.
    let first = [
        "onCreate:feature-a dev",
        "postCreate:feature-a dev",
        "postCreate:config dev",
        "postStart:feature-a ep=1",
        "postStart:config",
        "postAttach:image dev",
    ];
    assert_eq!(lines(&ws.read("hooks.log")), first);
    for label in [
        "[onCreateCommand from feature wr-test/feature-a]",
        "[postCreateCommand from devcontainer.json]",
        "[postAttachCommand from image workroom-test-meta/",
    ] {
        assert!(said.contains(label), "{label} missing from: {said}");
    }

    // The entrypoint's service runs, as root.
    let pid = service_pid(&ws);
    assert_eq!(ws.exec_ok(&["sh", "-c", &format!("stat -c %U /proc/{pid}")]).trim(), "root");

    // Once-only holds across origins: a second `up` runs postAttach alone.
    ws.up();
    assert_eq!(lines(&ws.read("hooks.log")), [&first[..], &["postAttach:image dev"]].concat());

    // After a restart the entrypoint runs again before postStart, and its
    // service is back.
    docker_ok(&["restart", "-t", "1", &name]);
    ws.up();
    assert_eq!(
        lines(&ws.read("hooks.log"))[first.len() + 1..],
        ["postStart:feature-a ep=2", "postStart:config", "postAttach:image dev"]
    );
    let again = service_pid(&ws);
    assert!(!again.is_empty(), "the service runs after the restart");

    // The room's label: the image's entries as written, then devcontainer.json's.
    let mut expected = image_label(&volume.0).as_array().unwrap().clone();
    expected.push(json!({
        "postCreateCommand": "echo postCreate:config $(id -un) >> hooks.log",
        "postStartCommand": "echo postStart:config >> hooks.log",
        "containerEnv": { "SHARED": "config" },
    }));
    assert_eq!(container_label(&name), Value::Array(expected));
    drop(ws);
}

#[test]
fn a_malformed_metadata_label_is_a_warning_naming_the_image_and_up_goes_on() {
    let image = LabelledImage::build(BUSYBOX, &unique(), &json!("[{not json"));
    let ws = Workspace::new(json!({ "image": image.tag, "remoteEnv": { "R": "1" } }));
    let out = ws.up();
    let said = stderr(&out);
    assert!(
        said.contains(&format!("warning: image {}: its devcontainer.metadata label is not JSON", image.tag)),
        "{said}"
    );
    assert_eq!(ws.exec_ok(&["sh", "-c", "echo $R"]), "1\n");
    drop(ws);
}

#[test]
fn privileged_from_metadata_is_applied_with_a_loud_line_and_the_setting_refuses_it() {
    let label = json!([{ "id": "wr-test/dind-like", "privileged": true }]);
    let image = LabelledImage::build(BUSYBOX, &unique(), &label);

    let ws = Workspace::new(json!({ "image": image.tag }));
    let out = ws.workroom(&["up"]);
    let said = stderr(&out);
    assert!(said.contains("runs PRIVILEGED because feature wr-test/dind-like asks for it"), "{said}");
    assert!(said.contains("metadata_privileged = false"), "it says how to refuse: {said}");
    if out.status.success() {
        assert_eq!(inspect(&ws.room_name(), "{{json .HostConfig.Privileged}}"), json!(true));
    } else {
        // An engine that cannot start privileged containers (this test
        // machine's cannot apply all capabilities): the privileged create
        // was refused at its start, after the line saying who asked.
        assert!(said.contains("was not made (removed again)") && said.contains("caps"), "{said}");
        assert_eq!(ws.containers(), Vec::<String>::new());
    }
    drop(ws);

    let ws = Workspace::new(json!({ "image": image.tag }))
        .with_settings("peer_messaging = false\n[containers]\nmetadata_privileged = false\n", false);
    let said = stderr(&ws.up());
    assert!(said.contains("not applied"), "{said}");
    assert_eq!(inspect(&ws.room_name(), "{{json .HostConfig.Privileged}}"), json!(false));
    drop(ws);
}

// ---------------------------------------------------------------------------
// the reference CLI, side by side

/// `node devcontainer.js ARGS` with the reference CLI; stdout as JSON.
fn reference(js: &std::path::Path, args: &[&str]) -> (Output, Value) {
    let mut node = Command::new("node");
    node.arg(js).args(args);
    let out = output_within(node, None);
    let last = stdout(&out).lines().last().unwrap_or_default().to_string();
    let value = serde_json::from_str(&last).unwrap_or(Value::Null);
    (out, value)
}

/// Removes the containers the reference made with our id label.
struct ReferenceRooms(String);

impl Drop for ReferenceRooms {
    fn drop(&mut self) {
        let filter = format!("label={}", self.0);
        for id in docker_ok(&["ps", "-aq", "--filter", &filter]).split_whitespace() {
            remove_container(id);
        }
    }
}

/// The merged configuration as both print it, with the reference's
/// `configFilePath` URI reduced to its path.
fn merged_of(printed: &Value) -> Value {
    let mut merged = printed["mergedConfiguration"].clone();
    if let Some(uri) = merged.get("configFilePath").and_then(|p| p.get("fsPath")).cloned() {
        merged["configFilePath"] = uri;
    }
    merged
}

#[test]
fn the_reference_cli_makes_the_same_room_from_a_labelled_image() {
    let unique = unique();
    let volume = Volume(format!("wr-test-meta-{unique}"));
    let image = LabelledImage::build(DEBIAN, &unique, &image_label(&volume.0));
    let ours = Workspace::new(config(&image.tag));
    let theirs = Workspace::new(config(&image.tag));
    ours.open_to_room_users();
    theirs.open_to_room_users();
    let (_unpacked, js) = reference_cli();
    let id_label = format!("wr-test-meta-ref={unique}");
    let _reference_rooms = ReferenceRooms(id_label.clone());

    ours.up();
    let (out, up) = reference(
        &js,
        &[
            "up",
            "--workspace-folder",
            &theirs.folder(),
            "--id-label",
            &format!("{TEST_LABEL}=1"),
            "--id-label",
            &id_label,
            // Else it builds an image to move the user's uid (we are root,
            // so it would change nothing) and leaves it behind.
            "--update-remote-user-uid-default",
            "never",
        ],
    );
    assert_eq!(up["outcome"], "success", "reference up: {}\n{}", stdout(&out), stderr(&out));
    let reference_room = up["containerId"].as_str().unwrap().to_string();

    // The same remote user, and the same metadata env in the room.
    assert_eq!(up["remoteUser"], "dev");
    assert_eq!(ours.exec_ok(&["id", "-un"]), "dev\n");
    let (out, _) = reference(
        &js,
        &[
            "exec",
            "--workspace-folder",
            &theirs.folder(),
            "--id-label",
            &format!("{TEST_LABEL}=1"),
            "--id-label",
            &id_label,
            "env",
        ],
    );
    assert!(out.status.success(), "reference exec: {}", stderr(&out));
    assert_eq!(env_of(&ours.exec_ok(&["env"]), METADATA_ENV), env_of(&stdout(&out), METADATA_ENV));

    // The same container env, as created.
    let created_env = |name: &str| {
        let mut env: Vec<String> = serde_json::from_value(inspect(name, "{{json .Config.Env}}")).unwrap();
        env.sort();
        env
    };
    assert_eq!(created_env(&ours.room_name()), created_env(&reference_room));

    // The same merged label.
    assert_eq!(container_label(&ours.room_name()), container_label(&reference_room));

    // And the same merged configuration read back from each room.
    let (_, read) = reference(
        &js,
        &[
            "read-configuration",
            "--workspace-folder",
            &theirs.folder(),
            "--id-label",
            &id_label,
            "--include-merged-configuration",
        ],
    );
    let out = ours.workroom(&["config", "--json", "--include-merged-configuration"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ours_read: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut theirs_merged = merged_of(&read);
    // The one path in it: each workspace's own config file.
    theirs_merged["configFilePath"] = merged_of(&ours_read)["configFilePath"].clone();
    assert_eq!(merged_of(&ours_read), theirs_merged);
    drop(ours);
    drop(theirs);
}

#[test]
fn config_include_merged_configuration_agrees_with_the_reference_before_and_after_up() {
    let unique = unique();
    let volume = Volume(format!("wr-test-meta-{unique}"));
    let label = json!([
        {
            "id": "wr-test/feature-b",
            "containerEnv": { "SHARED": "image", "META_ENV": "${localWorkspaceFolderBasename}" },
            "capAdd": ["SYS_PTRACE", "NET_ADMIN"],
            "mounts": [format!("type=volume,source={},target=/meta-data", volume.0)],
            "forwardPorts": ["localhost:3000", 9000],
            "postCreateCommand": "true",
            "hostRequirements": { "cpus": 2, "memory": "1gb" },
            "customizations": { "vscode": { "extensions": ["b"] } },
        },
        { "remoteEnv": { "R": "image", "S": "image" }, "userEnvProbe": "none" },
    ]);
    let image = LabelledImage::build(BUSYBOX, &unique, &label);
    let ws = Workspace::new(json!({
        "image": image.tag,
        "containerEnv": { "SHARED": "config", "WHERE": "${containerWorkspaceFolder}" },
        "remoteEnv": { "R": "${containerEnv:SHARED}" },
        "forwardPorts": [3000, "localhost:8080"],
        "capAdd": ["NET_ADMIN"],
        "customizations": { "vscode": { "extensions": ["a"] } },
    }));
    let (_unpacked, js) = reference_cli();
    let compare = |when: &str| {
        let out = ws.workroom(&["config", "--json", "--include-merged-configuration"]);
        assert!(out.status.success(), "{when}: {}", stderr(&out));
        let ours: Value = serde_json::from_slice(&out.stdout).unwrap();
        let (out, theirs) = reference(
            &js,
            &["read-configuration", "--workspace-folder", &ws.folder(), "--include-merged-configuration"],
        );
        assert!(out.status.success(), "{when}: reference: {}", stderr(&out));
        assert_eq!(merged_of(&ours), merged_of(&theirs), "{when}");
    };
    compare("no room yet");
    ws.up();
    // The room exists: both read its label, then what the config may change.
    compare("the room exists");
    drop(ws);
}
