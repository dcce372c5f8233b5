//! Rooms on arm64: an arm64 image gets the aarch64 daemon, which an x86_64
//! engine runs through qemu-user (binfmt). The room's image decides which
//! daemon it gets, not the host; a platform workroom carries no daemon for is
//! refused before anything is made.

mod common;
mod peer_support;
mod pty;

use common::*;
use peer_support::PeerScope;
use pty::Term;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::process::Output;
use std::time::Duration;

/// The arm64 fixture (fixtures/images/build.sh busybox-arm64).
const BUSYBOX_ARM64: &str = "workroom-fixture/busybox-arm64:1";
/// Guards a wait on a terminal: under qemu a shell starts in tens of
/// milliseconds, and a loaded two-core machine stretches that a lot.
const GUARD: Duration = Duration::from_secs(120);
/// ctrl-p ctrl-q, the default detach keys.
const DETACH: &[u8] = b"\x10\x11";

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The digest of the daemon binary at the room's entrypoint.
fn room_daemon(room: &str) -> String {
    docker_ok(&["exec", room, "sha256sum", "/.workroom/bin/workroomd"]).split_whitespace().next().unwrap().to_string()
}

fn json_of(out: &Output) -> Value {
    assert!(out.status.success(), "{}", stderr(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(out)))
}

fn shell(ws: &Workspace) -> Term {
    Term::spawn(workroom_bin(), &["shell", "--workspace-folder", &ws.folder()], 24, 80)
}

/// The engine's own platform, as Docker spells it (`linux/amd64`).
fn engine_platform() -> String {
    docker_ok(&["version", "--format", "{{.Server.Os}}/{{.Server.Arch}}"])
}

#[test]
fn an_arm64_room_gets_the_aarch64_daemon_and_up_exec_shell_a_hook_hand_off_and_down_work() {
    let ws = Workspace::new(json!({ "image": BUSYBOX_ARM64, "postCreateCommand": "uname -m > hook-arch.log" }));
    let result = json_of(&ws.workroom(&["up", "--json"]));
    assert_eq!((&result["outcome"], &result["platform"]), (&json!("success"), &json!("linux/arm64")), "{result}");
    let room = ws.room_name();

    assert_eq!(ws.read("hook-arch.log"), "aarch64\n", "the hook ran in the arm64 userland");
    assert_eq!(ws.exec_ok(&["uname", "-m"]), "aarch64\n");
    assert_eq!(room_daemon(&room), sha256(workroom::EMBEDDED_DAEMON_AARCH64), "the room holds the aarch64 daemon");
    // The engine's view of the room's processes: `workroomd serve` runs, and
    // on an x86_64 engine the kernel runs it through qemu (binfmt).
    let top = docker_ok(&["top", &room, "-o", "pid,args"]);
    let serve = top.lines().find(|l| l.contains("workroomd serve") && !l.contains("docker-init"));
    let serve = serve.unwrap_or_else(|| panic!("no workroomd serve in:\n{top}"));
    if engine_platform() == "linux/amd64" {
        assert!(serve.contains("qemu"), "the aarch64 daemon runs through qemu: {serve}");
    }

    let listed = json_of(&run_workroom(&["list", "--json"]));
    let entry = listed.as_array().unwrap().iter().find(|r| r["name"] == room.as_str()).cloned();
    assert_eq!(entry.unwrap_or_else(|| panic!("{room} not in {listed}"))["platform"], "linux/arm64");
    let table = stdout(&run_workroom(&["list"]));
    let row = table.lines().find(|l| l.starts_with(&room)).unwrap_or_else(|| panic!("{room} not in:\n{table}"));
    assert!(row.contains("linux/arm64"), "{row}");

    // A pane, through a real terminal; it outlives a detach and a hand-off.
    let mut term = shell(&ws);
    term.send(b"echo $((6*7))$(uname -m)\r");
    term.expect("42aarch64", GUARD);
    term.send(DETACH);
    term.expect("detached from pane main", GUARD);
    assert_eq!(term.wait(GUARD), 0, "detaching ends `shell` with 0");

    let out = ws.workroom(&["hand-off", "--force"]);
    assert!(out.status.success(), "hand-off: {}", stderr(&out));
    assert_eq!(stdout(&out), "handed off\n");
    assert_eq!(room_daemon(&room), sha256(workroom::EMBEDDED_DAEMON_AARCH64), "handed off to the aarch64 daemon");
    let mut again = shell(&ws);
    again.expect("42aarch64", GUARD);
    again.send(b"echo $((7*7))after\r");
    again.expect("49after", GUARD);
    again.send(b"exit 3\r");
    assert_eq!(again.wait(GUARD), 3, "the pane's exit status ends `shell`");

    // A daemon for the other architecture is refused before any upload.
    let dir = tempfile::tempdir().unwrap();
    let x86 = dir.path().join("workroomd-x86_64");
    std::fs::write(&x86, workroom::EMBEDDED_DAEMON_X86_64).unwrap();
    let out = ws.workroom(&["hand-off", "--binary", x86.to_str().unwrap()]);
    assert!(!out.status.success(), "an x86_64 daemon handed to an arm64 room");
    assert!(
        stderr(&out).contains("is an x86_64 daemon but") && stderr(&out).contains("linux/arm64"),
        "{}",
        stderr(&out)
    );
    assert_eq!(ws.exec_ok(&["uname", "-m"]), "aarch64\n", "the room's daemon serves on");

    let out = ws.workroom(&["down"]);
    assert!(out.status.success(), "down: {}", stderr(&out));
    assert_eq!(ws.containers(), Vec::<String>::new());
}

#[test]
fn workroom_daemon_arch_overrides_the_platform_of_the_image() {
    let mut ws = Workspace::image(BUSYBOX);
    ws.env.push(("WORKROOM_DAEMON_ARCH".into(), "aarch64".into()));
    let result = json_of(&ws.workroom(&["up", "--json"]));
    assert_eq!(result["platform"], "linux/arm64", "{result}");
    assert_eq!(room_daemon(&ws.room_name()), sha256(workroom::EMBEDDED_DAEMON_AARCH64));
    assert_eq!(ws.exec_ok(&["echo", "served"]), "served\n", "the aarch64 daemon serves an amd64 userland");
}

/// An image loaded from a docker-archive whose config names `architecture`
/// (`docker import` would stamp the engine's own); removed on drop.
struct ForeignImage(String);

impl ForeignImage {
    fn load(tag: &str, architecture: &str) -> ForeignImage {
        let mut layer = tar::Builder::new(Vec::new());
        let passwd = b"root:x:0:0:root:/root:/bin/sh\n";
        let mut header = tar::Header::new_gnu();
        header.set_size(passwd.len() as u64);
        header.set_mode(0o644);
        layer.append_data(&mut header, "etc/passwd", &passwd[..]).unwrap();
        let layer = layer.into_inner().unwrap();
        let diff = sha256(&layer);
        let config = json!({
            "architecture": architecture,
            "os": "linux",
            "config": { "Cmd": ["/bin/sh"], "Labels": { (TEST_LABEL): "1" } },
            "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{diff}")] },
        })
        .to_string();
        let config_name = format!("{}.json", sha256(config.as_bytes()));
        let manifest = json!([{ "Config": config_name, "RepoTags": [tag], "Layers": [format!("{diff}/layer.tar")] }]);
        let mut archive = tar::Builder::new(Vec::new());
        for (name, bytes) in [
            ("manifest.json".to_string(), manifest.to_string().into_bytes()),
            (config_name, config.into_bytes()),
            (format!("{diff}/layer.tar"), layer),
        ] {
            let mut header = tar::Header::new_gnu();
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            archive.append_data(&mut header, name, &bytes[..]).unwrap();
        }
        let mut load = std::process::Command::new("docker");
        load.args(["load", "--quiet"]);
        let out = output_within(load, Some(&archive.into_inner().unwrap()));
        assert!(out.status.success(), "docker load: {}", stderr(&out));
        let image = ForeignImage(tag.to_string());
        assert_eq!(docker_ok(&["image", "inspect", tag, "--format", "{{.Architecture}}"]), architecture);
        image
    }
}

impl Drop for ForeignImage {
    fn drop(&mut self) {
        let _ = docker(&["rmi", "-f", &self.0]);
    }
}

fn volume_exists(name: &str) -> bool {
    docker(&["volume", "inspect", name]).status.success()
}

#[test]
fn an_image_of_a_platform_workroom_has_no_daemon_for_is_refused_naming_it_before_anything_is_made() {
    let probe = Workspace::image(BUSYBOX);
    let tag = format!("workroom-test-s390x/{}:1", probe.unique());
    let _image = ForeignImage::load(&tag, "s390x");
    let volume = format!("{}-data", probe.unique());
    let ws = Workspace::new(json!({
        "image": tag,
        "mounts": [format!("source={volume},target=/data,type=volume")],
    }));
    let out = ws.workroom(&["up"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("no daemon for image {tag}: the image's platform is linux/s390x")),
        "{}",
        stderr(&out)
    );
    assert_eq!(ws.containers(), Vec::<String>::new(), "no container");
    assert!(!volume_exists(&volume), "no volume");
}

#[test]
fn a_dockerfile_built_for_a_platform_without_a_daemon_is_refused_and_its_image_removed() {
    let probe = Workspace::image(BUSYBOX);
    let base = format!("workroom-test-s390x/{}:1", probe.unique());
    let _image = ForeignImage::load(&base, "s390x");
    let ws = Workspace::with_devcontainer_folder(
        json!({ "build": { "dockerfile": "Dockerfile" } }),
        &[("Dockerfile", &format!("FROM {base}\nLABEL {TEST_LABEL}=1 step=ours\n"))],
    );
    let out = ws.workroom(&["up"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("linux/s390x"), "{}", stderr(&out));
    assert_eq!(ws.containers(), Vec::<String>::new(), "no container");
    assert!(!docker(&["image", "inspect", &ws.build_tag()]).status.success(), "the built image is removed");
}

#[test]
fn an_override_naming_no_daemon_is_refused_before_anything_is_made() {
    let mut ws = Workspace::image(BUSYBOX);
    ws.env.push(("WORKROOM_DAEMON_ARCH".into(), "mips".into()));
    let out = ws.workroom(&["up"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("WORKROOM_DAEMON_ARCH=mips names no daemon"), "{}", stderr(&out));
    assert_eq!(ws.containers(), Vec::<String>::new());
}

#[test]
fn rooms_of_both_platforms_share_one_anchor_that_runs_the_engines_own_daemon() {
    // Its own scope: anchors, socket volumes and registry, all removed by
    // the scope's label when it drops.
    let scope = PeerScope::new("arm");
    let (arm, amd) = (scope.workspace(json!({ "image": BUSYBOX_ARM64 })), scope.workspace(json!({ "image": BUSYBOX })));
    for ws in [&arm, &amd] {
        let out = ws.workroom(&["up"]);
        assert!(out.status.success(), "up: {}", stderr(&out));
        let err = stderr(&out);
        assert!(!err.contains("without peer messaging") && !err.contains("another workroom build"), "{err}");
    }
    assert_eq!(room_daemon(&arm.room_name()), sha256(workroom::EMBEDDED_DAEMON_AARCH64));
    assert_eq!(room_daemon(&amd.room_name()), sha256(workroom::EMBEDDED_DAEMON_X86_64));
    // The anchor only reaps and is shared, so it takes the engine's platform
    // (no emulation), whatever the first room was: it is never replaced.
    // Both rooms run as root: one group, one uid, one anchor.
    let anchor = workroom::plan::peers::names(Some(&scope.scope), "default", 0).anchor;
    let native = match engine_platform().as_str() {
        "linux/arm64" => workroom::EMBEDDED_DAEMON_AARCH64,
        _ => workroom::EMBEDDED_DAEMON_X86_64,
    };
    let anchor_daemon = docker_ok(&["inspect", &anchor, "--format", "{{index .Config.Labels \"workroom.daemon\"}}"]);
    assert_eq!(anchor_daemon, sha256(native)[..16]);
    let anchor_id = docker_ok(&["inspect", &anchor, "--format", "{{.Id}}"]);
    for ws in [&arm, &amd] {
        let mode = docker_ok(&["inspect", &ws.room_name(), "--format", "{{.HostConfig.PidMode}}"]);
        assert_eq!(mode, format!("container:{anchor_id}"), "{} joined the anchor", ws.room_name());
    }
    // One PID namespace: the arm64 room sees the amd64 room's daemon.
    let seen = arm.exec_ok(&["ps", "-o", "args"]);
    assert!(seen.lines().filter(|l| l.contains("workroomd serve")).count() >= 2, "{seen}");
}
