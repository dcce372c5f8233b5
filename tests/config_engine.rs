//! What the engine refuses of a devcontainer.json is said as the property
//! and the file that asked for it, and a refused `up` leaves nothing; what
//! the reference accepts (a Dockerfile outside its context, `--read-only`)
//! makes a working room; `hostRequirements` beyond the engine's host warn.
//! All against the real engine.

mod common;

use common::*;
use serde_json::json;
use std::process::Output;

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

/// A refused `up`: exit 2, one line naming the file and `says`, and no
/// container left for the workspace.
fn assert_refused_naming(ws: &Workspace, out: &Output, says: &[&str]) {
    let err = stderr(out);
    assert_eq!(code(out), 2, "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains(&format!("{}/.devcontainer.json: ", ws.folder())), "names the file: {err}");
    for s in says {
        assert!(err.contains(s), "{s:?} missing from: {err}");
    }
    assert_eq!(ws.containers(), Vec::<String>::new(), "a refused up leaves no container");
}

#[test]
fn an_invalid_image_reference_names_image_and_the_file() {
    let ws = Workspace::image("Workroom-Fixture/BusyBox:1");
    let out = ws.workroom(&["up"]);
    assert_refused_naming(
        &ws,
        &out,
        &["`image` \"Workroom-Fixture/BusyBox:1\" is not a valid image reference", "must be lowercase"],
    );
}

#[test]
fn a_bind_mount_source_that_does_not_exist_names_its_mount_property() {
    let ws = Workspace::new(json!({
        "image": BUSYBOX,
        "mounts": ["type=tmpfs,target=/scratch", "type=bind,source=/nonexistent/wr-test-src,target=/x"],
    }));
    let out = ws.workroom(&["up"]);
    assert_refused_naming(
        &ws,
        &out,
        &["`mounts[1]`: the engine refused it: ", "bind source path does not exist: /nonexistent/wr-test-src"],
    );
}

#[test]
fn a_bad_volume_name_names_its_mount_property() {
    let ws = Workspace::new(json!({
        "image": BUSYBOX,
        "mounts": [{ "type": "volume", "source": "bad/name", "target": "/x" }],
    }));
    let out = ws.workroom(&["up"]);
    assert_refused_naming(
        &ws,
        &out,
        &["`mounts[0]`: the engine refused it: ", "invalid characters for a local volume name"],
    );
}

#[test]
fn an_app_port_whose_host_port_is_taken_names_app_port() {
    // Held for the test: the engine cannot bind it.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let ws = Workspace::new(json!({ "image": BUSYBOX, "appPort": [port] }));
    let out = ws.workroom(&["up"]);
    assert_refused_naming(
        &ws,
        &out,
        &["`appPort`: the engine refused it: ", "address already in use", "another program holds"],
    );
    drop(holder);
}

/// Whether this engine runs a privileged container (a sandboxed engine may
/// not hold every capability and refuses).
fn engine_grants_privileged() -> bool {
    docker(&["run", "--rm", "--label", &format!("{TEST_LABEL}=1"), "--privileged", BUSYBOX, "true"]).status.success()
}

/// Either way the engine answers, something is checked: where it grants
/// privilege the room is made privileged from either property; where it
/// refuses, the refusal names the property that asked (the unit test
/// `plan::blame` pins the wording for engines this machine is not).
#[test]
fn privileged_is_applied_where_the_engine_grants_it_and_its_refusal_names_the_property() {
    let granted = engine_grants_privileged();
    for (config, property) in [
        (json!({ "image": BUSYBOX, "runArgs": ["--privileged"] }), "`runArgs`: the engine refused it: "),
        (json!({ "image": BUSYBOX, "privileged": true }), "`privileged`: the engine refused it: "),
    ] {
        let ws = Workspace::new(config);
        let out = ws.workroom(&["up"]);
        if granted {
            assert!(out.status.success(), "{}", stderr(&out));
            assert_eq!(docker_ok(&["inspect", "-f", "{{.HostConfig.Privileged}}", &ws.room_name()]), "true");
        } else {
            assert_refused_naming(&ws, &out, &[property]);
        }
    }
}

#[test]
fn read_only_and_tmpfs_run_args_make_a_working_room_whose_root_is_read_only() {
    let ws = Workspace::new(json!({ "image": BUSYBOX, "runArgs": ["--read-only", "--tmpfs", "/tmp"] }));
    let up = ws.workroom(&["up"]);
    assert!(up.status.success(), "{}", stderr(&up));
    let out = ws.exec_ok(&["sh", "-c", "touch /x 2>/dev/null && echo root-writable; touch /tmp/x && echo tmp-ok"]);
    assert_eq!(out, "tmp-ok\n");
    let down = ws.workroom(&["down", "--volumes"]);
    assert!(down.status.success(), "{}", stderr(&down));
}

/// A workspace whose Dockerfile lives in a folder beside it (a monorepo's
/// shared Dockerfile), outside the build context; removes the image built.
struct SharedDockerfile {
    ws: Workspace,
    _shared: tempfile::TempDir,
    build_label: String,
}

impl Drop for SharedDockerfile {
    fn drop(&mut self) {
        remove_container(&self.ws.room_name());
        let _ = docker(&["rmi", "-f", &self.ws.build_tag()]);
        let filter = format!("label={}", self.build_label);
        for id in docker_ok(&["images", "-aq", "--filter", &filter]).lines() {
            let _ = docker(&["rmi", "-f", id]);
        }
    }
}

#[test]
fn a_dockerfile_outside_the_build_context_is_built_as_the_reference_builds_it() {
    let shared = tempfile::Builder::new().prefix("wr-test-shared-").tempdir().unwrap();
    let shared_name = shared.path().file_name().unwrap().to_string_lossy().into_owned();
    // `../../<shared>/Dockerfile` from `.devcontainer`, context `..`: the
    // join is lexically under the context and really beside it.
    let ws = Workspace::with_devcontainer_folder(
        json!({ "build": { "dockerfile": format!("../../{shared_name}/Dockerfile"), "context": ".." } }),
        &[],
    );
    let build_label = format!("workroom.test.build={}", ws.unique());
    std::fs::write(
        shared.path().join("Dockerfile"),
        format!("FROM {BUSYBOX}\nLABEL {build_label}\nCOPY hello.txt /hello.txt\n"),
    )
    .unwrap();
    std::fs::write(ws.path().join("hello.txt"), "from the context\n").unwrap();
    let guard = SharedDockerfile { ws, _shared: shared, build_label };
    let out = guard.ws.workroom(&["up"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(guard.ws.exec_ok(&["cat", "/hello.txt"]), "from the context\n");
}

#[test]
fn host_requirements_beyond_the_engines_host_warn_and_the_room_is_made() {
    let ws = Workspace::new(json!({
        "image": BUSYBOX,
        "hostRequirements": { "cpus": 4096, "memory": "100000gb", "storage": "100000tb", "gpu": true },
    }));
    let out = ws.workroom(&["up"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    for what in
        ["`hostRequirements.cpus` asks for 4096 CPUs", "`hostRequirements.memory` asks for", "`hostRequirements.gpu`"]
    {
        assert!(err.contains(&format!("warning: {}/.devcontainer.json: {what}", ws.folder())), "{what:?} in {err}");
    }
    // Measured only when the engine's data folder is on this machine.
    let info = docker_ok(&["info", "--format", "{{.DockerRootDir}}"]);
    if std::path::Path::new(&info).is_dir() {
        assert!(err.contains("`hostRequirements.storage` asks for"), "{err}");
    }
}

#[test]
fn host_requirements_the_engines_host_meets_say_nothing() {
    let ws = Workspace::new(json!({
        "image": BUSYBOX,
        // `gpu: "optional"` on an engine without a GPU runtime is a note
        // now (the room starts without GPUs); `false` is met by any host.
        "hostRequirements": { "cpus": 1, "memory": "1mb", "storage": "1kb", "gpu": false },
    }));
    let out = ws.workroom(&["up"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("hostRequirements"), "{}", stderr(&out));
}
