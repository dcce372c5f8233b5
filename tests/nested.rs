//! Nested containers (`[containers] nested = true`) and the network mode,
//! against the real engine: the room gets `/dev/fuse` and a capped storage
//! tmpfs but never privilege or an added capability; `up` says what is
//! missing or impossible; the `docker` wrapper says what cannot work.
//!
//! This engine (Docker 20.10, default seccomp profile) refuses
//! `unshare(CLONE_NEWUSER)` to a container without CAP_SYS_ADMIN, so podman
//! cannot start any inner container here: the podman-fixture test shows that
//! exact failure and workroom's message for it.

mod common;

use common::*;
use serde_json::{json, Value};

/// Built by `fixtures/images/build.sh podman`: Debian with podman,
/// fuse-overlayfs, uidmap, user dev (uid 1000) with subordinate ids, and a
/// busybox rootfs tarball to import as an inner image.
const PODMAN: &str = "workroom-fixture/podman:bookworm";
const INNER_TARBALL: &str = "/usr/share/workroom-fixture/busybox-rootfs.tar";

const NESTED: &str = "peer_messaging = false\n[containers]\nnested = true\n";

fn host_config(ws: &Workspace) -> Value {
    serde_json::from_str(&docker_ok(&["inspect", "--format", "{{json .HostConfig}}", &ws.room_name()])).unwrap()
}

fn up_stderr(ws: &Workspace) -> String {
    stderr(&ws.up())
}

#[test]
fn a_nested_room_has_fuse_and_capped_storage_but_no_privilege_or_added_capability() {
    let ws = Workspace::image(DEBIAN).with_settings(NESTED, false);
    ws.up();
    let h = host_config(&ws);
    assert_eq!(h["Privileged"], json!(false));
    assert!(h["CapAdd"].is_null() || h["CapAdd"] == json!([]), "CapAdd: {}", h["CapAdd"]);
    assert!(h["SecurityOpt"].is_null(), "SecurityOpt: {}", h["SecurityOpt"]);
    assert_eq!(h["Devices"][0]["PathOnHost"], json!("/dev/fuse"), "{}", h["Devices"]);
    let storage = h["Mounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["Target"] == json!(workroom::plan::nested::INNER_STORAGE))
        .cloned()
        .expect("the storage tmpfs");
    assert_eq!(storage["Type"], json!("tmpfs"));
    assert_eq!(storage["TmpfsOptions"]["SizeBytes"], json!(workroom::plan::nested::INNER_STORAGE_BYTES));
    let df = ws.exec_ok(&["sh", "-c", &format!("df -k {} | tail -1", workroom::plan::nested::INNER_STORAGE)]);
    assert!(df.starts_with("tmpfs"), "{df}");
}

#[test]
fn nested_on_an_image_without_podman_starts_and_says_what_to_install() {
    let ws = Workspace::image(DEBIAN).with_settings(NESTED, false);
    let err = up_stderr(&ws);
    assert!(
        err.contains("the image has no podman: install podman, fuse-overlayfs and uidmap (apt-get install podman fuse-overlayfs uidmap)"),
        "{err}"
    );
    assert_eq!(ws.exec_ok(&["echo", "up"]), "up\n");
}

#[test]
fn a_room_without_nested_gets_no_fuse_storage_or_wrapper() {
    let ws = Workspace::image(DEBIAN);
    let err = up_stderr(&ws);
    assert!(!err.contains("podman"), "{err}");
    let h = host_config(&ws);
    assert!(h["Devices"].is_null() || h["Devices"] == json!([]), "{}", h["Devices"]);
    assert_eq!(ws.exec_ok(&["sh", "-c", "test -e /usr/local/bin/docker && echo yes || echo no"]), "no\n");
}

#[test]
fn turning_nested_on_for_an_existing_room_says_that_recreate_applies_it() {
    let ws = Workspace::image(DEBIAN);
    ws.up();
    let ws = ws.with_settings(NESTED, false);
    let err = up_stderr(&ws);
    assert!(
        err.contains(
            "was made with nested containers off; `workroom up --recreate` applies [containers] nested = true"
        ),
        "{err}"
    );
    let err = stderr(&ws.workroom(&["up", "--recreate"]));
    assert!(err.contains("the image has no podman"), "{err}");
    assert_eq!(host_config(&ws)["Devices"][0]["PathOnHost"], json!("/dev/fuse"));
}

#[test]
fn host_network_with_nested_from_devcontainer_json_warns_that_inner_containers_share_it() {
    let ws = Workspace::new(json!({
        "image": DEBIAN,
        "customizations": { "workroom": { "nested": true, "network": "host" } },
    }));
    let err = up_stderr(&ws);
    assert!(err.contains("inner containers share the host network too"), "{err}");
    assert_eq!(host_config(&ws)["NetworkMode"], json!("host"));
}

#[test]
fn host_network_alone_gives_no_nested_warning() {
    let ws = Workspace::image(DEBIAN).with_settings("peer_messaging = false\n[network]\nmode = \"host\"\n", false);
    let err = up_stderr(&ws);
    assert!(!err.contains("inner containers"), "{err}");
    assert_eq!(host_config(&ws)["NetworkMode"], json!("host"));
}

#[test]
fn the_docker_wrapper_reports_publish_low_ports_and_networks_loudly() {
    let ws = Workspace::image(DEBIAN).with_settings(NESTED, false);
    ws.up();
    let out = ws.exec(&["docker", "run", "-d", "-p", "80:8080", "inner"]);
    let err = stderr(&out);
    assert!(
        err.contains("workroom: -p/--publish has no effect in a nested container: inner containers share the room's network; reach the service on localhost"),
        "{err}"
    );
    assert!(err.contains("workroom: port 80 is below 1024"), "{err}");
    // No podman in this image: the wrapper says so rather than `not found`.
    assert!(err.contains("the image has no podman"), "{err}");
    assert_eq!(out.status.code(), Some(127));

    let err = stderr(&ws.exec(&["docker", "run", "--publish=8080:8080", "inner"]));
    assert!(err.contains("-p/--publish has no effect"), "{err}");
    assert!(!err.contains("below 1024"), "{err}");

    let err = stderr(&ws.exec(&["docker", "network", "create", "mine"]));
    assert!(err.contains("workroom: user-defined networks are not available in a nested container"), "{err}");

    let err = stderr(&ws.exec(&["docker", "run", "--rm", "inner", "true"]));
    assert!(!err.contains("-p/--publish") && !err.contains("networks"), "{err}");
}

/// The real attempt on an image with podman, as the remote user: import the
/// inner image from the tarball in the image. This engine refuses the user
/// namespace podman needs; `up` says so, in podman's words, and the import
/// fails with the same words. On an engine that allows it this test fails:
/// the success path (serve with busybox httpd, reach it on localhost) is
/// then the one to assert.
#[test]
fn on_this_engine_podman_cannot_make_a_user_namespace_and_up_says_why() {
    let ws = Workspace::new(json!({ "image": PODMAN, "remoteUser": "dev" })).with_settings(NESTED, false);
    let err = up_stderr(&ws);
    assert!(
        err.contains(
            "nested containers are not possible on this engine: cannot clone: Operation not permitted: Error: cannot re-exec process; they need unprivileged user namespaces"
        ),
        "{err}"
    );
    assert!(!err.contains("has no podman"), "{err}");

    // The configuration was written for dev: storage in the room's tmpfs.
    let storage = ws.exec_ok(&["cat", "/home/dev/.config/containers/storage.conf"]);
    assert!(storage.contains("graphroot = \"/var/lib/workroom-containers/dev/storage\""), "{storage}");
    assert!(storage.contains("mount_program = \"/usr/bin/fuse-overlayfs\""), "{storage}");
    let conf = ws.exec_ok(&["cat", "/home/dev/.config/containers/containers.conf"]);
    assert!(conf.contains("netns = \"host\"") && conf.contains("cgroups = \"disabled\""), "{conf}");

    let out = ws.exec(&["podman", "import", INNER_TARBALL, "inner"]);
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(err.contains("cannot clone: Operation not permitted"), "{err}");

    // The same refusal without podman: the kernel call itself.
    let out = ws.exec(&["unshare", "--user", "true"]);
    assert!(stderr(&out).contains("unshare failed: Operation not permitted"), "{}", stderr(&out));

    // Inner storage lives only as long as the room runs: what is in it is
    // gone after a stop, and the next `up` makes dev's folders again.
    let layer = "/var/lib/workroom-containers/dev/storage/layer";
    ws.exec_ok(&["sh", "-c", &format!("echo x > {layer}")]);
    assert!(ws.workroom(&["stop"]).status.success());
    ws.up();
    assert_eq!(ws.exec_ok(&["sh", "-c", &format!("test -e {layer} && echo kept || echo gone")]), "gone\n");
    assert_eq!(ws.exec_ok(&["stat", "-c", "%U", "/var/lib/workroom-containers/dev/storage"]), "dev\n");
    assert!(ws.workroom(&["down"]).status.success());
    assert!(ws.containers().is_empty(), "the room and its storage are gone after down");
}
