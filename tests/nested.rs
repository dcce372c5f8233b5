//! Nested containers (`[containers] nested = true`) and the network mode,
//! against the real engine: the room gets `/dev/fuse`, a capped storage
//! tmpfs and workroom's seccomp profile (Docker's default plus user and
//! mount namespaces), never privilege or an added capability; on the podman
//! fixture the remote user imports an image, runs it and serves from it on
//! localhost; the `docker`/`podman` wrapper says what cannot work.

mod common;

use common::*;
use serde_json::{json, Value};

/// Built by `fixtures/images/build.sh podman`: Debian with podman,
/// fuse-overlayfs, uidmap, perl, user dev (uid 1000) with subordinate ids,
/// and a busybox rootfs tarball (busybox, `sh`, `/www/index.html`) to
/// import as an inner image.
const PODMAN: &str = "workroom-fixture/podman:bookworm";
const INNER_TARBALL: &str = "/usr/share/workroom-fixture/busybox-rootfs.tar";

const NESTED: &str = "peer_messaging = false\n[containers]\nnested = true\n";

fn host_config(ws: &Workspace) -> Value {
    serde_json::from_str(&docker_ok(&["inspect", "--format", "{{json .HostConfig}}", &ws.room_name()])).unwrap()
}

fn up_stderr(ws: &Workspace) -> String {
    stderr(&ws.up())
}

/// The seccomp `SecurityOpt` workroom sends to this engine.
fn our_security_opt() -> String {
    let arch = docker_ok(&["info", "--format", "{{.Architecture}}"]);
    workroom::plan::seccomp::security_opt(&workroom::plan::seccomp::profile(arch.trim()).unwrap())
}

fn a_nested_podman_room() -> Workspace {
    let ws = Workspace::new(json!({ "image": PODMAN, "remoteUser": "dev" })).with_settings(NESTED, false);
    ws.open_to_room_users();
    ws
}

/// `perl -e syscall(...)` in the room, as the remote user (`workroom
/// exec`) or as root (`docker exec -u 0`): the call's return and errno text.
fn syscall_in_room(ws: &Workspace, root: bool, nr: u32, args: &str) -> String {
    let script = format!("$! = 0; my $r = syscall({nr}, {args}); print \"$r $!\"");
    match root {
        true => docker_ok(&["exec", "-u", "0", &ws.room_name(), "perl", "-e", &script]),
        false => ws.exec_ok(&["perl", "-e", &script]),
    }
}

#[test]
fn a_nested_room_has_fuse_exec_storage_and_our_profile_but_no_privilege_or_added_capability() {
    let ws = Workspace::image(DEBIAN).with_settings(NESTED, false);
    let err = up_stderr(&ws);
    assert!(err.contains(workroom::plan::seccomp::WIDENING), "up says what it widens: {err}");
    let h = host_config(&ws);
    assert_eq!(h["Privileged"], json!(false));
    assert!(h["CapAdd"].is_null() || h["CapAdd"] == json!([]), "CapAdd: {}", h["CapAdd"]);
    assert_eq!(h["SecurityOpt"], json!([our_security_opt()]));
    assert_eq!(h["Devices"][0]["PathOnHost"], json!("/dev/fuse"), "{}", h["Devices"]);
    let storage = workroom::plan::nested::INNER_STORAGE;
    let options = h["Tmpfs"][storage].as_str().expect("the storage tmpfs");
    assert!(options.contains(&format!("size={}", workroom::plan::nested::INNER_STORAGE_BYTES)), "{options}");
    let mount = ws.exec_ok(&["sh", "-c", &format!("grep ' {storage} ' /proc/mounts")]);
    assert!(mount.starts_with("tmpfs ") && !mount.contains("noexec"), "inner programs run from it: {mount}");
}

/// `docker inspect` shows no privilege, no capability and workroom's
/// profile; in the room a user and mount namespace can be made, a network
/// namespace cannot, and calls Docker's default refuses stay refused.
/// `keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0)` needs no
/// capability: unfiltered, the kernel answers with a key id, so EPERM is
/// the filter's; `bpf(BPF_MAP_CREATE, NULL, 0)` answers EINVAL unfiltered
/// on this machine's kernel (both seen with `seccomp=unconfined`).
#[test]
fn the_profile_widens_user_and_mount_namespaces_only_and_still_refuses_keyctl_and_bpf() {
    let ws = a_nested_podman_room();
    ws.up();
    let h = host_config(&ws);
    assert_eq!(h["Privileged"], json!(false));
    assert!(h["CapAdd"].is_null() || h["CapAdd"] == json!([]), "CapAdd: {}", h["CapAdd"]);
    assert_eq!(h["SecurityOpt"], json!([our_security_opt()]));

    assert_eq!(ws.exec_ok(&["unshare", "--user", "--map-root-user", "--mount", "id", "-u"]), "0\n");
    for closed in ["--net", "--pid", "--ipc", "--uts"] {
        let out = ws.exec(&["unshare", "--user", closed, "true"]);
        assert!(!out.status.success(), "unshare --user {closed} was allowed");
        assert!(stderr(&out).contains("Operation not permitted"), "{closed}: {}", stderr(&out));
    }
    for root in [false, true] {
        assert_eq!(syscall_in_room(&ws, root, 250, "0, -3, 0"), "-1 Operation not permitted", "keyctl, root {root}");
        assert_eq!(syscall_in_room(&ws, root, 321, "0, 0, 0"), "-1 Operation not permitted", "bpf, root {root}");
    }
    // Mounting is allowed only in a mount namespace one made: not in the
    // room's, even for root.
    let out = docker(&["exec", "-u", "0", &ws.room_name(), "mount", "-t", "tmpfs", "none", "/mnt"]);
    assert!(!out.status.success(), "root mounted in the room's own mount namespace");
}

/// What the guide shows an agent doing: a Containerfile in the workspace,
/// built into an image from the imported rootfs and served.
const CONTAINERFILE: &str = "FROM localhost/inner\n\
    RUN echo built in the room > /www/index.html\n\
    CMD [\"busybox\", \"httpd\", \"-f\", \"-p\", \"8099\", \"-h\", \"/www\"]\n";
const BUILT_PAGE: &str = "built in the room\n";

/// The whole of it as the remote user, on the podman fixture: import a
/// rootfs tarball, run a command, build an image and serve from it, reach
/// the service on localhost from another inner container, from `workroom
/// exec` and from the host through `workroom forward`, the wrapper's words,
/// and the storage gone after `stop`.
#[test]
fn podman_in_a_nested_room_imports_builds_runs_and_serves_on_localhost() {
    let mut ws = a_nested_podman_room();
    // The forwarder's state apart from the test runner's.
    let state = tempfile::tempdir().unwrap();
    ws.env.push(("XDG_STATE_HOME".into(), state.path().display().to_string()));
    std::fs::write(ws.path().join("Containerfile"), CONTAINERFILE).unwrap();
    let err = up_stderr(&ws);
    assert!(!err.contains("cannot start") && !err.contains("has no podman"), "{err}");

    // One id mapped (the fixture's ranges need CAP_SYS_ADMIN, set aside),
    // fuse-overlayfs storage in the room's tmpfs.
    let info = ws.exec_ok(&["podman", "info", "--format", "{{.Host.IDMappings.UIDMap}} {{.Store.GraphDriverName}}"]);
    assert_eq!(info, "[{0 1000 1}] overlay\n");
    let subuid = ws.exec_ok(&["cat", "/etc/subuid"]);
    assert!(
        subuid.starts_with("#workroom: unusable without CAP_SYS_ADMIN") && subuid.contains("dev:100000:65536"),
        "{subuid}"
    );
    let storage = ws.exec_ok(&["cat", "/home/dev/.config/containers/storage.conf"]);
    assert!(storage.contains("graphroot = \"/var/lib/workroom-containers/dev/storage\""), "{storage}");

    let out = ws.exec(&["podman", "import", INNER_TARBALL, "inner"]);
    assert!(out.status.success(), "podman import: {}", stderr(&out));
    assert_eq!(ws.exec_ok(&["podman", "run", "--rm", "inner", "busybox", "echo", "inner-ok"]), "inner-ok\n");
    let out = ws.exec(&["podman", "build", "-t", "svc", "."]);
    assert!(out.status.success(), "podman build: {}", stderr(&out));

    let out = ws.exec(&["docker", "run", "-d", "--name", "web", "-p", "8080:8099", "svc"]);
    assert!(out.status.success(), "docker run -d: {}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "workroom: -p/--publish has no effect in a nested container: inner containers share the room's network; \
             the service is on localhost:8099"
        ),
        "{}",
        stderr(&out)
    );
    // Ready when it accepts a connection.
    let get = "for i in $(seq 100); do exec 3<>/dev/tcp/127.0.0.1/8099 && break; sleep 0.1; done 2>/dev/null; \
               printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3";
    let reply = ws.exec_ok(&["bash", "-c", get]);
    assert!(reply.starts_with("HTTP/1.") && reply.ends_with(BUILT_PAGE), "from workroom exec: {reply}");
    let from_inner =
        ws.exec_ok(&["podman", "run", "--rm", "inner", "busybox", "wget", "-qO-", "http://127.0.0.1:8099/"]);
    assert_eq!(from_inner, BUILT_PAGE, "from another inner container");
    let host_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = ws.workroom(&["forward", "--background", &format!("{host_port}:8099")]);
    assert!(out.status.success(), "workroom forward: {}", stderr(&out));
    assert!(http_get(host_port).ends_with(BUILT_PAGE), "from the host through workroom forward");

    let out = ws.exec(&["podman", "network", "create", "mine"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("workroom: user-defined networks are not available in a nested container"),
        "{}",
        stderr(&out)
    );
    assert!(!ws.exec_ok(&["podman", "network", "ls"]).contains("mine"), "the network was made anyway");

    // Inner storage lives only as long as the room runs.
    assert!(ws.workroom(&["stop"]).status.success());
    let err = up_stderr(&ws);
    assert!(!err.contains("cannot start"), "{err}");
    assert_eq!(ws.exec_ok(&["podman", "images", "--noheading", "--format", "{{.Repository}}"]), "");
    assert_eq!(ws.exec_ok(&["stat", "-c", "%U", "/var/lib/workroom-containers/dev/storage"]), "dev\n");
    assert!(ws.workroom(&["down"]).status.success());
    assert!(ws.containers().is_empty(), "the room is gone after down");
}

/// `GET /` on the host's 127.0.0.1:`port`, the whole reply.
fn http_get(port: u16) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to the forwarded port");
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    reply
}

/// Many images leave the remote user root: root in the room has no
/// CAP_SYS_ADMIN either, and podman makes a user namespace for it too.
#[test]
fn podman_in_a_nested_room_runs_for_a_root_remote_user_too() {
    let ws = Workspace::image(PODMAN).with_settings(NESTED, false);
    let err = up_stderr(&ws);
    assert!(!err.contains("cannot start"), "{err}");
    let conf = ws.exec_ok(&["cat", "/etc/containers/containers.conf.d/workroom.conf"]);
    assert!(conf.contains("pidns = \"host\""), "{conf}");
    let out = ws.exec(&["podman", "import", INNER_TARBALL, "inner"]);
    assert!(out.status.success(), "podman import: {}", stderr(&out));
    assert_eq!(ws.exec_ok(&["podman", "run", "--rm", "inner", "busybox", "echo", "root-ok"]), "root-ok\n");
}

/// Where FUSE cannot mount, storage falls back to vfs, and a container still
/// runs (here fuse-overlayfs is hidden behind /dev/null).
#[test]
fn without_a_working_fuse_overlayfs_inner_storage_is_vfs_and_containers_still_run() {
    let ws = Workspace::new(json!({
        "image": PODMAN,
        "remoteUser": "dev",
        "mounts": ["type=bind,source=/dev/null,target=/usr/bin/fuse-overlayfs"],
    }))
    .with_settings(NESTED, false);
    ws.open_to_room_users();
    let err = up_stderr(&ws);
    assert!(!err.contains("cannot start"), "{err}");
    assert_eq!(ws.exec_ok(&["podman", "info", "--format", "{{.Store.GraphDriverName}}"]), "vfs\n");
    let out = ws.exec(&["podman", "import", INNER_TARBALL, "inner"]);
    assert!(out.status.success(), "podman import: {}", stderr(&out));
    assert_eq!(ws.exec_ok(&["podman", "run", "--rm", "inner", "busybox", "echo", "vfs-ok"]), "vfs-ok\n");
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
fn a_room_without_nested_gets_no_fuse_storage_profile_or_wrapper() {
    let ws = Workspace::image(DEBIAN);
    let err = up_stderr(&ws);
    assert!(!err.contains("podman") && !err.contains("nested"), "{err}");
    let h = host_config(&ws);
    assert!(h["Devices"].is_null() || h["Devices"] == json!([]), "{}", h["Devices"]);
    assert!(h["SecurityOpt"].is_null(), "{}", h["SecurityOpt"]);
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
fn the_wrapper_says_publish_does_nothing_and_refuses_other_networks_and_pid_namespaces() {
    let ws = Workspace::image(DEBIAN).with_settings(NESTED, false);
    ws.up();
    let out = ws.exec(&["docker", "run", "-d", "-p", "8080:80", "inner"]);
    let err = stderr(&out);
    assert!(
        err.contains(
            "workroom: -p/--publish has no effect in a nested container: inner containers share the room's network; \
             the service is on localhost:80"
        ),
        "{err}"
    );
    // Docker lets a bridge-networked room's processes listen below 1024.
    assert!(!err.contains("below"), "{err}");
    // No podman in this image: the wrapper says so rather than `not found`.
    assert!(err.contains("the image has no podman"), "{err}");
    assert_eq!(out.status.code(), Some(127));

    let err = stderr(&ws.exec(&["docker", "run", "--publish=8080:8080/tcp", "inner"]));
    assert!(err.contains("the service is on localhost:8080"), "{err}");

    for (args, says) in [
        (
            &["docker", "network", "create", "mine"][..],
            "workroom: user-defined networks are not available in a nested container",
        ),
        (
            &["docker", "run", "--network", "bridge", "inner"][..],
            "workroom: --network bridge: inner containers can only share the room's network",
        ),
        (
            &["podman", "run", "--pid=private", "inner"][..],
            "workroom: --pid private: inner containers share the room's PID namespace",
        ),
    ] {
        let out = ws.exec(args);
        assert_eq!(out.status.code(), Some(125), "{args:?}");
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }

    // What follows the image is the inner command's, not the wrapper's.
    let err = stderr(&ws.exec(&["docker", "run", "--rm", "-e", "A=1", "inner", "nc", "-p", "80", "--network", "x"]));
    assert!(!err.contains("-p/--publish") && !err.contains("--network"), "{err}");
}

/// A docker CLI of the image's own (talking to some engine) is not shadowed
/// by the wrapper; podman still goes through it.
#[test]
fn an_images_own_docker_stays_itself_in_a_nested_room() {
    let ws = Workspace::new(json!({
        "image": DEBIAN,
        "mounts": ["type=bind,source=${localWorkspaceFolder}/own-docker,target=/usr/bin/docker"],
    }))
    .with_settings(NESTED, false);
    let own = ws.path().join("own-docker");
    std::fs::write(&own, "#!/bin/sh\necho the own docker of the image\n").unwrap();
    std::fs::set_permissions(&own, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    ws.up();
    assert_eq!(ws.exec_ok(&["docker", "run", "-p", "8080:80", "x"]), "the own docker of the image\n");
    let out = ws.exec(&["podman", "network", "create", "mine"]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
}

/// On the host network the room's processes may listen only from the
/// host's `ip_unprivileged_port_start` (1024 on this machine) up: a low
/// inner port fails before podman runs.
#[test]
fn on_the_host_network_the_wrapper_refuses_a_port_below_the_unprivileged_start() {
    let ws = Workspace::image(DEBIAN).with_settings(&format!("{NESTED}[network]\nmode = \"host\"\n"), false);
    ws.up();
    let low = ws.exec_ok(&["cat", "/proc/sys/net/ipv4/ip_unprivileged_port_start"]);
    let low: u16 = low.trim().parse().unwrap();
    assert!(low > 80, "this test needs a host where port 80 is privileged (start {low})");
    let out = ws.exec(&["docker", "run", "-p", "8080:80", "inner"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains(&format!(
            "workroom: port 80 is below {low} (net.ipv4.ip_unprivileged_port_start in this room): an inner container cannot listen on it"
        )),
        "{}",
        stderr(&out)
    );
}
