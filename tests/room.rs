//! A room's life against the real engine, through the built `workroom`
//! binary: `up` on each fixture image, `exec` as the remote user in the
//! workspace folder, lifecycle hooks in order and only when due, list, stop
//! and down, eight racing `up`s, refused `up`s that leave nothing behind,
//! Dockerfile configs, and the reference CLI finding our room.
//!
//! Hooks report by appending to files in the workspace, which the room sees
//! through its bind mount: the test reads them from the host.

mod common;

use common::*;
use serde_json::{json, Value};
use std::process::{Command, Output};

/// What every hook and `exec` in these tests prints: who, where, and the
/// remote and container environment they saw.
const REPORT: &str = "$(id -un) $PWD $HOOK_VAR $CE";

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or_else(|| panic!("killed by a signal: {}", stderr(out)))
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

/// A `remoteEnv`/`containerEnv` pair every case shares; `PATH` extends the
/// room's own through `${containerEnv:PATH}`.
fn env_config(image: &str) -> Value {
    json!({
        "image": image,
        "containerEnv": { "CE": "from-container-env" },
        "remoteEnv": {
            "HOOK_VAR": "from-remote-env",
            "PATH": "${containerEnv:PATH}:/opt/extra",
        },
    })
}

fn merge(mut base: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().unwrap() {
        base.as_object_mut().unwrap().insert(k.clone(), v.clone());
    }
    base
}

/// The `PATH` an image sets, which `${containerEnv:PATH}` resolves to.
fn image_path(image: &str) -> String {
    let env = docker_ok(&["image", "inspect", image, "--format", "{{range .Config.Env}}{{println .}}{{end}}"]);
    env.lines().find_map(|l| l.strip_prefix("PATH=")).expect("the fixture image sets PATH").to_string()
}

/// A name no other test, nor another run of this file, uses at the same time.
fn unique_name(prefix: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix}-{}-{n}", std::process::id())
}

fn parse_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}\nstderr: {}", stdout(out), stderr(out)))
}

// ---------------------------------------------------------------------------
// up, then exec

/// `up`, then `exec` runs as `user`, in the workspace folder, with the
/// remote and container env; stdin, stdout, stderr and the exit status pass
/// through; Docker's own failures are told apart from the command's.
fn exec_runs_as_the_remote_user_in_the_workspace(image: &str, extra: Value, user: &str) {
    let ws = Workspace::new(merge(env_config(image), extra));
    ws.open_to_room_users();
    ws.up();

    let seen = ws.exec_ok(&["sh", "-c", &format!("echo {REPORT}; echo \"$PATH\"")]);
    assert_eq!(
        lines(&seen),
        [
            format!("{user} {} from-remote-env from-container-env", ws.remote_folder()),
            format!("{}:/opt/extra", image_path(image)),
        ]
    );

    let echoed = ws.workroom_with_stdin(&["exec", "--", "cat"], b"hi\n");
    assert_eq!((code(&echoed), stdout(&echoed).as_str(), stderr(&echoed).as_str()), (0, "hi\n", ""));

    let split = ws.exec(&["sh", "-c", "echo out; echo err >&2; exit 7"]);
    assert_eq!(
        (code(&split), stdout(&split).as_str(), stderr(&split).as_str()),
        (7, "out\n", "err\n"),
        "stdout and stderr stay apart and the status passes through"
    );

    let missing = ws.exec(&["workroom-no-such-program"]);
    assert_eq!(code(&missing), 127, "a program the engine cannot find: {}", stderr(&missing));
    assert!(
        stderr(&missing).lines().any(|l| l.starts_with("workroom:") && l.contains("workroom-no-such-program")),
        "a `workroom:` line names the missing program: {}",
        stderr(&missing)
    );
    assert_eq!(stdout(&missing), "", "the engine's complaint is not the command's output");

    // A shell's own 127 is the command's: no `workroom:` line.
    let own = ws.exec(&["sh", "-c", "exit 127"]);
    assert_eq!((code(&own), stderr(&own).contains("workroom:")), (127, false), "{}", stderr(&own));
}

#[test]
fn exec_runs_as_root_in_the_workspace_with_the_remote_env_on_busybox() {
    exec_runs_as_the_remote_user_in_the_workspace(BUSYBOX, json!({}), "root");
}

#[test]
fn exec_runs_as_root_in_the_workspace_with_the_remote_env_on_debian() {
    exec_runs_as_the_remote_user_in_the_workspace(DEBIAN, json!({}), "root");
}

#[test]
fn exec_runs_as_the_image_user_in_the_workspace_on_debian_user() {
    exec_runs_as_the_remote_user_in_the_workspace(DEBIAN_USER, json!({}), "dev");
}

#[test]
fn exec_runs_as_the_remote_user_the_config_names_on_debian() {
    exec_runs_as_the_remote_user_in_the_workspace(DEBIAN, json!({ "remoteUser": "dev" }), "dev");
}

#[test]
fn exec_without_a_room_fails_with_125_and_says_to_run_up() {
    let ws = Workspace::image(BUSYBOX);
    let out = ws.exec(&["true"]);
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with("workroom: no room for") && stderr(&out).contains("workroom up"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn up_json_prints_the_reference_result_shape() {
    let ws = Workspace::image(DEBIAN_USER);
    let out = ws.workroom(&["up", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let result = parse_json(&out);
    let id = docker_ok(&["inspect", &ws.room_name(), "--format", "{{.Id}}"]);
    // The reference's keys, the platform of the room's daemon and the
    // workspace decision.
    let platform = docker_ok(&["image", "inspect", DEBIAN_USER, "--format", "{{.Os}}/{{.Architecture}}"]);
    assert_eq!(
        result,
        json!({
            "outcome": "success",
            "containerId": id,
            "remoteUser": "dev",
            "remoteWorkspaceFolder": ws.remote_folder(),
            "platform": platform,
            "ociAuthDiagnostics": {
                "authLookupWouldBeBlocked": false,
                "registryRedirectWouldPreventCredentialForwarding": false,
                "authServerRedirect": false,
            },
            // How the room got its workspace: a local engine sees the folder.
            "workspace": { "mode": "bind", "volume": null, "reason": "engine sees the folder" },
            // Its resource caps: none asked.
            "caps": {},
        })
    );
}

// ---------------------------------------------------------------------------
// lifecycle hooks

/// Every hook in one of the three forms, each appending a report line to
/// `hooks.log`; `initializeCommand` writes where it ran on the host.
fn all_hooks(image: &str) -> Value {
    let line = |name: &str| format!("echo {name} {REPORT} >> hooks.log");
    merge(
        env_config(image),
        json!({
            "initializeCommand": "echo initialize $(pwd) > init.log",
            "onCreateCommand": line("onCreate"),
            "updateContentCommand": ["sh", "-c", line("updateContent")],
            "postCreateCommand": {
                "first": line("postCreate:first"),
                "second": ["sh", "-c", line("postCreate:second")],
            },
            "postStartCommand": line("postStart"),
            "postAttachCommand": ["sh", "-c", line("postAttach")],
        }),
    )
}

fn hooks_run_in_order_as_the_remote_user(image: &str, extra: Value, user: &str) {
    let ws = Workspace::new(merge(all_hooks(image), extra));
    ws.open_to_room_users();
    let out = ws.up();

    assert_eq!(ws.read("init.log"), format!("initialize {}\n", ws.folder()), "initializeCommand runs on the host");
    let report = |hook: &str| format!("{hook} {user} {} from-remote-env from-container-env", ws.remote_folder());
    let log = ws.read("hooks.log");
    let got = lines(&log);
    assert_eq!(got.len(), 6, "{log}");
    assert_eq!(got[..2], [report("onCreate"), report("updateContent")]);
    // The parallel object's commands run at once: either order.
    let mut parallel = got[2..4].to_vec();
    parallel.sort();
    assert_eq!(parallel, [report("postCreate:first"), report("postCreate:second")]);
    assert_eq!(got[4..], [report("postStart"), report("postAttach")]);

    // Output is streamed with the hook's name.
    let said = stderr(&out);
    for label in ["[initializeCommand]", "[onCreateCommand]", "[postCreateCommand:first]", "[postAttachCommand]"] {
        assert!(said.contains(label), "{label} missing from: {said}");
    }
}

#[test]
fn hooks_run_in_order_as_root_in_the_workspace_with_the_remote_env_on_busybox() {
    hooks_run_in_order_as_the_remote_user(BUSYBOX, json!({}), "root");
}

#[test]
fn hooks_run_in_order_as_root_in_the_workspace_with_the_remote_env_on_debian() {
    hooks_run_in_order_as_the_remote_user(DEBIAN, json!({}), "root");
}

#[test]
fn hooks_run_in_order_as_the_image_user_on_debian_user() {
    hooks_run_in_order_as_the_remote_user(DEBIAN_USER, json!({}), "dev");
}

#[test]
fn hooks_run_as_the_remote_user_the_config_names_on_debian() {
    hooks_run_in_order_as_the_remote_user(DEBIAN, json!({ "remoteUser": "dev" }), "dev");
}

#[test]
fn a_failing_hook_stops_the_later_hooks_and_up_names_it() {
    let ws = Workspace::new(json!({
        "image": BUSYBOX,
        "onCreateCommand": "echo onCreate >> hooks.log",
        "updateContentCommand": ["sh", "-c", "echo failing >&2; exit 3"],
        "postCreateCommand": "echo postCreate >> hooks.log",
        "postStartCommand": "echo postStart >> hooks.log",
        "postAttachCommand": "echo postAttach >> hooks.log",
    }));
    let out = ws.workroom(&["up"]);
    assert!(!out.status.success());
    let said = stderr(&out);
    assert!(said.contains("[updateContentCommand] failing"), "the hook's output is shown: {said}");
    assert!(
        said.lines().last().unwrap_or("").contains("updateContentCommand failed with exit code 3"),
        "the last line names the hook: {said}"
    );
    assert_eq!(ws.read("hooks.log"), "onCreate\n");

    // Again, with --json: the error in the reference shape, a non-zero exit,
    // and still none of the later hooks.
    let out = ws.workroom(&["up", "--json"]);
    assert_ne!(code(&out), 0);
    let result = parse_json(&out);
    assert_eq!(result["outcome"], "error");
    assert!(result["message"].as_str().unwrap().contains("updateContentCommand failed"), "{result}");
    assert!(!ws.read("hooks.log").contains("post"), "{}", ws.read("hooks.log"));
}

#[test]
fn a_failing_command_of_a_parallel_hook_is_named_and_stops_the_later_hooks() {
    let ws = Workspace::new(json!({
        "image": BUSYBOX,
        "postCreateCommand": { "fine": "true", "broken": ["sh", "-c", "exit 4"] },
        "postStartCommand": "echo postStart >> hooks.log",
    }));
    let out = ws.workroom(&["up"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("postCreateCommand:broken failed with exit code 4"), "{}", stderr(&out));
    assert_eq!(ws.read("hooks.log"), "");
}

#[test]
fn a_failing_initialize_command_makes_no_room() {
    let ws = Workspace::new(json!({
        "image": BUSYBOX,
        "initializeCommand": ["sh", "-c", "exit 5"],
        "onCreateCommand": "echo onCreate >> hooks.log",
    }));
    let out = ws.workroom(&["up"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("initializeCommand failed"), "{}", stderr(&out));
    assert_eq!(ws.containers(), Vec::<String>::new());
}

#[test]
fn post_start_reruns_after_a_restart_and_once_only_hooks_never_rerun() {
    let mark = |name: &str| format!("echo {name} >> hooks.log");
    let ws = Workspace::new(json!({
        "image": DEBIAN,
        "onCreateCommand": mark("onCreate"),
        "updateContentCommand": mark("updateContent"),
        "postCreateCommand": mark("postCreate"),
        "postStartCommand": mark("postStart"),
        "postAttachCommand": mark("postAttach"),
    }));
    let first = ["onCreate", "updateContent", "postCreate", "postStart", "postAttach"];
    ws.up();
    assert_eq!(lines(&ws.read("hooks.log")), first);

    // A plain second `up` (reattach) runs postAttach alone.
    ws.up();
    assert_eq!(lines(&ws.read("hooks.log")), [&first[..], &["postAttach"]].concat());

    // After the container restarts, postStart is due once more.
    docker_ok(&["restart", "-t", "1", &ws.room_name()]);
    ws.up();
    assert_eq!(lines(&ws.read("hooks.log")), [&first[..], &["postAttach", "postStart", "postAttach"]].concat());

    // `--skip-post-attach` skips it; nothing else is due.
    let out = ws.workroom(&["up", "--skip-post-attach"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(lines(&ws.read("hooks.log")).len(), 8);
}

// ---------------------------------------------------------------------------
// list, stop, down

fn listed(name: &str) -> Option<Value> {
    let out = run_workroom(&["list", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rooms = parse_json(&out);
    rooms.as_array().expect("list --json prints an array").iter().find(|r| r["name"] == name).cloned()
}

fn state(name: &str) -> String {
    docker_ok(&["inspect", name, "--format", "{{.State.Status}}"])
}

#[test]
fn list_shows_the_room_stop_stops_it_up_starts_it_and_down_removes_it() {
    let ws = Workspace::new(json!({ "image": BUSYBOX, "postStartCommand": "echo postStart >> hooks.log" }));
    ws.up();
    let name = ws.room_name();

    let table = run_workroom(&["list"]);
    assert!(table.status.success());
    let row = stdout(&table).lines().find(|l| l.starts_with(&name)).map(str::to_string);
    let row = row.unwrap_or_else(|| panic!("{name} not in: {}", stdout(&table)));
    // The workspace is a column of its own; others (a branch, shown when
    // any listed room has one, as rooms of tests beside this one may) can
    // follow it.
    let cells: Vec<&str> = row.split_whitespace().collect();
    // The image as the engine names it (Podman prefixes `localhost/`).
    let image = cells.iter().any(|c| image_name(c) == BUSYBOX);
    assert!(cells.contains(&"running") && image && cells.contains(&ws.folder().as_str()), "{row}");
    let room = listed(&name).expect("list --json shows the room");
    assert_eq!(
        (&room["state"], &json!(image_name(room["image"].as_str().unwrap_or_default())), &room["workspace"]),
        (&json!("running"), &json!(BUSYBOX), &json!(ws.folder()))
    );

    let out = ws.workroom(&["stop"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(state(&name), "exited");
    assert_eq!(listed(&name).expect("a stopped room is listed")["state"], "exited");
    let out = ws.exec(&["true"]);
    assert_eq!(code(&out), 125, "exec on a stopped room");
    assert!(stderr(&out).contains("not running"), "{}", stderr(&out));

    ws.up();
    assert_eq!(state(&name), "running");
    assert_eq!(ws.exec_ok(&["echo", "back"]), "back\n");
    assert_eq!(ws.read("hooks.log"), "postStart\npostStart\n", "a start after stop is a new boot");

    let out = ws.workroom(&["down"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(ws.containers(), Vec::<String>::new());
    assert!(listed(&name).is_none());
}

/// A container that is not a room, named like one so that only the label
/// filter (not a name prefix) can keep workroom off it; removed on drop.
struct Foreign {
    name: String,
}

impl Foreign {
    fn start() -> Foreign {
        let name = unique_name("workroom-foreign");
        let label = format!("{TEST_LABEL}=1");
        docker_ok(&["run", "-d", "--label", &label, "--name", &name, BUSYBOX, "sleep", "600"]);
        Foreign { name }
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        remove_container(&self.name);
    }
}

// `stop --all` itself is not run here: tests of this file run in parallel,
// and other people's rooms may share the engine, so `--all` would stop rooms
// it is not this test's business to stop. The filter it relies on (our
// schema label, never the name) is the one `stop NAME` and `down NAME` use,
// pinned here; `tests/room_stop_all.rs` runs `--all` itself, on request.
#[test]
fn stop_and_down_refuse_a_container_workroom_did_not_make() {
    let foreign = Foreign::start();

    for verb in ["stop", "down"] {
        let out = run_workroom(&[verb, &foreign.name]);
        assert_ne!(code(&out), 0, "{verb} touched a foreign container");
        assert!(stderr(&out).contains(&format!("no room named {}", foreign.name)), "{}", stderr(&out));
        assert_eq!(state(&foreign.name), "running", "after {verb}");
    }
    assert!(listed(&foreign.name).is_none(), "list shows only rooms");
}

// ---------------------------------------------------------------------------
// concurrent up

#[test]
fn eight_concurrent_ups_of_one_workspace_all_succeed_with_one_room_and_hooks_run_once() {
    let ws = Workspace::new(json!({
        "image": DEBIAN,
        // Hooks slow enough that the other `up`s find them running, and must
        // wait for them rather than run them again.
        "onCreateCommand": "sleep 1; echo created >> once.log",
        "postStartCommand": "sleep 1; echo started >> start.log",
        "postAttachCommand": "echo attached >> attach.log",
    }));
    let barrier = std::sync::Barrier::new(8);
    let outs: Vec<Output> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    ws.workroom(&["up"])
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, out) in outs.iter().enumerate() {
        assert!(out.status.success(), "up #{i} failed: {}", stderr(out));
    }
    assert_eq!(ws.containers().len(), 1, "one room for the workspace");
    assert_eq!(ws.read("once.log"), "created\n", "onCreate ran once");
    assert_eq!(ws.read("start.log"), "started\n", "postStart ran once for the one boot");
    assert_eq!(lines(&ws.read("attach.log")).len(), 8, "postAttach ran for every up");
}

#[test]
fn only_the_up_that_recreates_says_it_removes_the_room() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let before = ws.containers();
    let outs = four_recreates_at_once(&ws);
    let saying: Vec<String> = outs.iter().map(stderr).filter(|e| e.contains("to recreate it")).collect();
    assert_eq!(saying.len(), 1, "one up says it removed the room: {saying:#?}");
    assert!(saying[0].contains(&format!("removed {} to recreate it", ws.room_name())), "{}", saying[0]);
    let after = ws.containers();
    assert_eq!(after.len(), 1, "one room for the workspace");
    assert_ne!(after, before, "the room was recreated");
}

// ---------------------------------------------------------------------------
// refused `up`s leave nothing behind

/// A named volume a test's config mounts; removed on drop in case the
/// product left it.
struct Volume(String);

impl Volume {
    fn new() -> Volume {
        Volume(unique_name("wr-test-vol"))
    }

    fn mount(&self) -> String {
        format!("source={},target=/data,type=volume", self.0)
    }

    fn exists(&self) -> bool {
        docker(&["volume", "inspect", &self.0]).status.success()
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = docker(&["volume", "rm", "-f", &self.0]);
    }
}

/// A workspace whose config builds a Dockerfile: the room is removed first,
/// then the image its build tagged, then any image a failed build left with
/// the test's label.
struct Built {
    ws: Workspace,
    build_label: String,
}

impl Built {
    /// `dockerfile` may use `{label}` for a `LABEL` that marks the build's
    /// layers as this test's.
    fn new(config: Value, dockerfile: &str) -> Built {
        let config = merge(json!({ "build": { "dockerfile": "Dockerfile" } }), config);
        let ws = Workspace::with_devcontainer_folder(config, &[]);
        let build_label = format!("workroom.test.build={}", ws.unique());
        std::fs::write(ws.path().join(".devcontainer/Dockerfile"), dockerfile.replace("{label}", &build_label))
            .unwrap();
        Built { ws, build_label }
    }

    /// Images, tagged or not, carrying the test's build label.
    fn labelled_images(&self) -> Vec<String> {
        let filter = format!("label={}", self.build_label);
        docker_ok(&["images", "-aq", "--filter", &filter]).lines().map(str::to_string).collect()
    }

    fn tag_exists(&self) -> bool {
        docker(&["image", "inspect", &self.ws.build_tag()]).status.success()
    }
}

impl Drop for Built {
    fn drop(&mut self) {
        remove_container(&self.ws.room_name());
        let _ = docker(&["rmi", "-f", &self.ws.build_tag()]);
        for id in self.labelled_images() {
            let _ = docker(&["rmi", "-f", &id]);
        }
    }
}

fn assert_refused(out: &Output, says: &[&str]) {
    assert_ne!(code(out), 0, "up was not refused: {}", stderr(out));
    for s in says {
        assert!(stderr(out).contains(s), "{s:?} missing from: {}", stderr(out));
    }
}

/// `up --json` of a refused config: the error in the reference shape.
fn assert_refused_json(ws: &Workspace, says: &str) {
    let out = ws.workroom(&["up", "--json"]);
    assert_ne!(code(&out), 0);
    let result = parse_json(&out);
    assert_eq!(result["outcome"], "error", "{result}");
    assert!(result["message"].as_str().unwrap().contains(says), "{result}");
}

#[test]
fn an_unsupported_run_arg_is_refused_by_name_and_leaves_nothing() {
    let volume = Volume::new();
    let ws = Workspace::new(json!({
        "image": BUSYBOX,
        "runArgs": ["--cidfile", "/tmp/wr-test.cid"],
        "mounts": [volume.mount()],
    }));
    let out = ws.workroom(&["up"]);
    assert_refused(&out, &["`--cidfile` cannot apply to a room"]);
    assert_eq!(stderr(&out).matches("--cidfile").count(), 1, "said once: {}", stderr(&out));
    assert_refused_json(&ws, "`--cidfile` cannot apply to a room");
    assert_eq!(ws.containers(), Vec::<String>::new());
    assert!(!volume.exists());
}

#[test]
fn a_missing_image_is_named_and_leaves_nothing() {
    let volume = Volume::new();
    let ws = Workspace::new(json!({ "image": "workroom-fixture/nope:1", "mounts": [volume.mount()] }));
    let out = ws.workroom(&["up"]);
    // No registry is reachable here: the pull fails, and the message says
    // the image is missing rather than only what the pull hit.
    assert_refused(&out, &["image workroom-fixture/nope:1 is not present"]);
    assert_refused_json(&ws, "workroom-fixture/nope:1 is not present");
    assert_eq!(ws.containers(), Vec::<String>::new());
    assert!(!volume.exists());
    assert!(!docker(&["image", "inspect", "workroom-fixture/nope:1"]).status.success());
}

#[test]
fn a_failing_dockerfile_build_leaves_no_container_volume_or_image() {
    let volume = Volume::new();
    // Two steps succeed before the failing one: a classic build keeps their
    // layers unless the failed `up` removes them.
    let built = Built::new(
        json!({ "mounts": [volume.mount()] }),
        &format!("FROM {DEBIAN}\nLABEL {{label}}\nRUN echo step > /step.txt\nRUN exit 9\n"),
    );
    let out = built.ws.workroom(&["up"]);
    assert_refused(&out, &["building", "Dockerfile failed"]);
    // The step's status, as Docker's builder or Podman's says it.
    let err = stderr(&out);
    assert!(err.contains("returned a non-zero code: 9") || err.contains("exit status 9"), "{err}");
    assert_eq!(built.ws.containers(), Vec::<String>::new());
    assert!(!volume.exists());
    assert!(!built.tag_exists());
    assert_eq!(built.labelled_images(), Vec::<String>::new(), "the build's layers were left behind");
}

#[test]
fn an_unsupported_run_arg_is_refused_before_the_dockerfile_is_built() {
    let built =
        Built::new(json!({ "runArgs": ["--cidfile", "/tmp/id"] }), &format!("FROM {DEBIAN}\nLABEL {{label}}\n"));
    let out = built.ws.workroom(&["up"]);
    assert_refused(&out, &["`--cidfile` cannot apply to a room"]);
    assert!(!stderr(&out).contains("Step 1/"), "the build ran: {}", stderr(&out));
    assert!(!built.tag_exists());
    assert_eq!(built.labelled_images(), Vec::<String>::new());
}

#[test]
fn run_args_rm_and_name_as_real_configs_have_them_are_not_refused_and_up_warns_the_room_keeps_its_name_and_life() {
    let ws = Workspace::new(json!({ "image": BUSYBOX, "runArgs": ["--rm", "--name", "x"] }));
    let out = ws.up();
    let err = stderr(&out);
    assert!(err.contains("warning: runArgs: `--rm` is ignored: a room outlives its stops"), "{err}");
    let name = ws.room_name();
    assert!(err.contains(&format!("warning: runArgs: `--name x` is ignored: the room keeps its name {name}")), "{err}");
    let named = docker_ok(&["inspect", "--format", "{{.Name}} {{.HostConfig.AutoRemove}}", &name]);
    assert_eq!(named.trim(), format!("/{name} false"));
    assert_eq!(ws.exec_ok(&["echo", "in"]), "in\n");
}

#[test]
fn a_workspace_folder_outside_the_workspace_mount_is_warned_at_up_and_exec_says_the_folder_is_missing_not_sh() {
    let ws = Workspace::new(json!({ "image": BUSYBOX, "workspaceFolder": "/w" }));
    let out = ws.up();
    let err = stderr(&out);
    let target = format!("/workspaces/{}", ws.path().file_name().unwrap().to_str().unwrap());
    assert!(
        err.contains(&format!("warning: `workspaceFolder` /w is not inside the workspace mount at {target}: ")),
        "{err}"
    );
    let name = ws.room_name();
    for argv in [&["true"][..], &["sh", "-c", "true"]] {
        let out = ws.exec(argv);
        assert_eq!(code(&out), 126, "{}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.starts_with(&format!(
                "workroom: cannot run `{}` in {name}: its working folder /w does not exist in the room; ",
                argv[0]
            )),
            "{said}"
        );
        assert_eq!(said.lines().count(), 1, "{said}");
    }
}

#[test]
fn a_refused_up_in_volume_mode_leaves_no_workspace_volume_behind() {
    for (config, says) in [
        (json!({ "image": BUSYBOX, "remoteUser": "nosuchuser" }), "`remoteUser` names user \"nosuchuser\""),
        (json!({ "image": BUSYBOX, "runArgs": ["--memory", "1k"] }), "emory"),
    ] {
        let ws = Workspace::new(config);
        let volume = format!("workroom-ws-{}", ws.room_name().trim_start_matches("workroom-"));
        let out = ws.workroom(&["up", "--workspace", "volume"]);
        let left = docker(&["volume", "inspect", &volume]).status.success();
        let _ = docker(&["volume", "rm", "-f", &volume]);
        assert_ne!(code(&out), 0, "{}", stderr(&out));
        assert!(stderr(&out).contains(says), "{}", stderr(&out));
        assert_eq!(ws.containers(), Vec::<String>::new());
        assert!(!left, "{volume} was left behind by: {}", stderr(&out));
    }
}

#[test]
fn a_room_whose_start_fails_is_removed_with_the_volume_it_made() {
    let volume = Volume::new();
    // The engine creates the container (and the volume), then cannot start
    // it: the device does not exist.
    let ws = Workspace::new(json!({
        "image": BUSYBOX,
        "runArgs": ["--device", "/dev/workroom-no-such-device"],
        "mounts": [volume.mount()],
    }));
    let out = ws.workroom(&["up"]);
    assert_refused(&out, &["was not made (removed again)", "/dev/workroom-no-such-device"]);
    assert_eq!(ws.containers(), Vec::<String>::new());
    assert!(!volume.exists(), "the volume the create made is removed");
}

// ---------------------------------------------------------------------------
// Dockerfile configs

#[test]
fn a_dockerfile_config_is_built_through_the_engine_api_and_the_room_runs() {
    let built = Built::new(
        json!({ "remoteUser": "dev" }),
        &format!("FROM {DEBIAN}\nLABEL {{label}}\nRUN echo built > /built.txt\n"),
    );
    // No docker CLI on PATH: the build, create and start go through the API.
    let mut up = built.ws.command(&["up"]);
    up.env("PATH", "/nonexistent");
    let out = output_within(up, None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("Successfully tagged"), "the build's progress is shown: {}", stderr(&out));

    let tag = built.ws.build_tag();
    assert_eq!(image_name(&docker_ok(&["inspect", &built.ws.room_name(), "--format", "{{.Config.Image}}"])), tag);
    assert_eq!(docker_ok(&["image", "inspect", &tag, "--format", "{{index .Config.Labels \"workroom.build\"}}"]), "1");
    assert_eq!(built.ws.exec_ok(&["sh", "-c", "cat /built.txt; id -un"]), "built\ndev\n");
}

// ---------------------------------------------------------------------------
// the reference CLI

#[test]
fn the_reference_cli_finds_a_room_made_by_workroom_and_runs_as_its_user() {
    let ws = Workspace::image(DEBIAN_USER);
    ws.open_to_room_users();
    ws.up();
    let (_unpacked, js) = reference_cli();
    let reference = |cmd: &[&str]| {
        let mut node = Command::new("node");
        node.arg(&js).args(["exec", "--workspace-folder", &ws.folder()]).args(cmd);
        let out = output_within(node, None);
        assert!(out.status.success(), "devcontainer exec {cmd:?}: {}\n{}", stdout(&out), stderr(&out));
        stdout(&out)
    };
    assert_eq!(lines(&reference(&["echo", "ok"])), ["ok"]);
    assert_eq!(lines(&reference(&["sh", "-c", "id -un; pwd"])), ["dev".to_string(), ws.remote_folder()]);
    assert_eq!(ws.containers().len(), 1, "the reference CLI made no container of its own");
}

// ---------------------------------------------------------------------------
// users the image lacks

#[test]
fn a_remote_user_the_image_lacks_is_refused_at_up_naming_the_users_it_has_and_leaves_nothing() {
    let volume = Volume::new();
    let ws = Workspace::new(json!({ "image": BUSYBOX, "remoteUser": "ghost", "mounts": [volume.mount()] }));
    let out = ws.workroom(&["up"]);
    assert_refused(&out, &["`remoteUser` names user \"ghost\"", "the image's users are root", "removed again"]);
    assert_eq!(ws.containers(), Vec::<String>::new());
    assert!(!volume.exists(), "the volume the create made is removed");
}

#[test]
fn a_container_user_the_image_lacks_is_refused_at_up_and_leaves_nothing() {
    let ws = Workspace::new(json!({ "image": DEBIAN, "containerUser": "nobody-here" }));
    let out = ws.workroom(&["up"]);
    assert_refused(&out, &["`containerUser` names user \"nobody-here\"", "dev"]);
    assert_eq!(ws.containers(), Vec::<String>::new());
}

#[test]
fn four_concurrent_up_recreates_all_succeed_with_one_new_room_whose_hooks_ran_once() {
    let ws = Workspace::new(json!({ "image": BUSYBOX, "postCreateCommand": "echo ran >> /tmp/post-create.log" }));
    ws.up();
    let first = ws.containers();
    four_recreates_at_once(&ws);
    let now = ws.containers();
    assert_eq!(now.len(), 1, "one room for the workspace");
    assert_ne!(now, first, "the room was recreated");
    assert_eq!(docker_ok(&["exec", &now[0], "cat", "/tmp/post-create.log"]), "ran");
}

/// Starts `up` and SIGKILLs it the moment the engine reports its room
/// created (an event, not a poll: a `docker inspect` every ~50 ms missed the
/// window on a loaded machine); true if the room was then still unstarted
/// (the kill landed between create and start). Not SIGSTOP: a stopped client
/// mid-upload holds the container's lock in the engine, and every inspect of
/// it waits.
/// How long one try waits for its room's create event: an `up` of a present
/// busybox image creates within a second or two even on a loaded machine.
const EVENT_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

fn kill_up_between_create_and_start(ws: &Workspace) -> bool {
    use nix::sys::signal::{kill, Signal};
    use std::io::BufRead;
    let name = ws.room_name();
    // From a moment before `up` starts (so no subscription race), and
    // ending by itself: a missed event cannot hang the test.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let (since, until) = (format!("{:.3}", now - 1.0), format!("{:.3}", now + EVENT_WAIT.as_secs_f64()));
    let mut events = Command::new("docker")
        .args(["events", "--since", &since, "--until", &until])
        .args(["--filter", "type=container", "--filter", "event=create"])
        .args(["--filter", &format!("container={name}"), "--format", "{{.Action}}"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("docker events");
    let mut created = std::io::BufReader::new(events.stdout.take().unwrap()).lines();
    let mut up = ws.command(&["up"]);
    up.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    let mut up = up.spawn().expect("start up");
    let pid = nix::unistd::Pid::from_raw(up.id() as i32);
    let seen = matches!(created.next(), Some(Ok(line)) if line == "create");
    kill(pid, Signal::SIGKILL).unwrap();
    up.wait().unwrap();
    let _ = events.kill();
    let _ = events.wait();
    let state =
        String::from_utf8_lossy(&docker(&["inspect", "-f", "{{.State.Status}}", &name]).stdout).trim().to_string();
    seen && state == "created"
}

#[test]
fn an_up_killed_before_its_room_started_is_taken_over_by_the_next_up() {
    // The window between create and start is short: try a few rooms.
    let ws = (0..8)
        .map(|_| Workspace::image(BUSYBOX))
        .find(kill_up_between_create_and_start)
        .expect("never caught an up between its create and its start");
    let out = output_within_guard(ws.command(&["up"]), None, std::time::Duration::from_secs(30));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("left unstarted by an `up` that died"), "{}", stderr(&out));
    assert_eq!(ws.exec_ok(&["echo", "in"]), "in\n");
    assert_eq!(ws.containers().len(), 1);
}

#[test]
fn the_reference_cli_up_on_a_room_made_by_workroom_does_not_run_its_hooks_again() {
    let ws = Workspace::new(json!({
        "image": DEBIAN_USER,
        "onCreateCommand": "echo onCreate >> hooks.log",
        "postCreateCommand": "echo postCreate >> hooks.log",
        "postStartCommand": "echo postStart >> hooks.log",
    }));
    ws.open_to_room_users();
    ws.up();
    assert_eq!(ws.read("hooks.log"), "onCreate\npostCreate\npostStart\n");
    let (_unpacked, js) = reference_cli();
    let mut node = Command::new("node");
    node.arg(&js).args(["up", "--workspace-folder", &ws.folder()]);
    let out = output_within(node, None);
    assert!(out.status.success(), "devcontainer up: {}\n{}", stdout(&out), stderr(&out));
    assert_eq!(ws.containers().len(), 1, "the reference CLI made no container of its own");
    assert_eq!(ws.read("hooks.log"), "onCreate\npostCreate\npostStart\n", "the reference ran our hooks again");
}

// ---------------------------------------------------------------------------
// overrideCommand: false

/// Polls `check` until it holds or `wait` passes; whether it held.
fn within(wait: std::time::Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + wait;
    loop {
        if check() {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn the_image_program_runs_in_its_workdir_and_is_restarted_and_shown_when_it_dies() {
    let built = Built::new(
        json!({ "overrideCommand": false }),
        &format!(
            "FROM {DEBIAN}\nLABEL {{label}}\nWORKDIR /srv/site\nRUN echo served-from-workdir > index.html\n\
             CMD [\"python3\", \"-m\", \"http.server\", \"8000\", \"--bind\", \"127.0.0.1\"]\n"
        ),
    );
    let ws = &built.ws;
    let up = ws.workroom(&["up"]);
    assert!(up.status.success(), "{}", stderr(&up));
    let fetch = || {
        let script =
            "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8000/index.html').read().decode().strip())";
        let out = ws.exec(&["python3", "-c", script]);
        stdout(&out).trim().to_string()
    };
    let wait = std::time::Duration::from_secs(30);
    assert!(within(wait, || fetch() == "served-from-workdir"), "the program does not serve its WORKDIR: {:?}", fetch());

    // Killed behind our back: restarted as Docker's policy would, and said.
    ws.exec_ok(&["pkill", "-f", "^python3 -m http.server"]);
    assert!(within(wait, || fetch() == "served-from-workdir"), "the program was not restarted");
    let room = listed(&ws.room_name()).expect("the room is listed");
    let program = room["program"].as_str().unwrap_or_default().to_string();
    assert!(program.starts_with("running (pid ") && program.contains("restarted once"), "list says: {room}");
    let up = ws.workroom(&["up"]);
    assert!(stderr(&up).contains("the image's program running"), "up says: {}", stderr(&up));
    let logs = ws.workroom(&["logs"]);
    let said = format!("{}{}", stdout(&logs), stderr(&logs));
    assert!(said.contains("program python3 exited") && said.contains("restarting it in"), "logs: {said}");
}

#[test]
fn workroom_up_does_not_run_a_hook_the_reference_cli_already_ran_in_its_room() {
    // postCreateCommand fails under workroom's first `up` (so it is due
    // again), then the reference's `up` runs it to success.
    let ws = Workspace::new(json!({
        "image": DEBIAN_USER,
        "postCreateCommand": "echo postCreate >> hooks.log; [ -e fail-no-more ] || { touch fail-no-more; exit 1; }",
    }));
    ws.open_to_room_users();
    assert!(!ws.workroom(&["up"]).status.success(), "the first postCreateCommand fails");
    assert_eq!(ws.read("hooks.log"), "postCreate\n");
    let (_unpacked, js) = reference_cli();
    let mut node = Command::new("node");
    node.arg(&js).args(["up", "--workspace-folder", &ws.folder()]);
    let out = output_within(node, None);
    assert!(out.status.success(), "devcontainer up: {}\n{}", stdout(&out), stderr(&out));
    assert_eq!(ws.read("hooks.log"), "postCreate\npostCreate\n", "the reference ran the failed hook again");
    let out = ws.workroom(&["up"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(ws.read("hooks.log"), "postCreate\npostCreate\n", "workroom ran the reference's hook again");
    assert!(stderr(&out).contains("[postCreateCommand] already run by the reference CLI"), "{}", stderr(&out));
}

/// This engine has no GPU runtime: `--gpus all` is refused by the engine
/// with "could not select device driver", which names neither the property
/// nor the missing runtime.
#[test]
fn gpus_asked_of_an_engine_without_a_gpu_runtime_are_refused_naming_run_args_and_leave_no_container() {
    let ws = Workspace::new(json!({ "image": BUSYBOX, "runArgs": ["--gpus", "all"] }));
    let out = ws.workroom(&["up"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("`runArgs`") && err.contains("`--gpus` asks for GPUs and the engine has no GPU runtime"),
        "{err}"
    );
    assert!(err.contains("`hostRequirements.gpu` \"optional\""), "names the next action: {err}");
    assert_eq!(ws.containers(), Vec::<String>::new(), "no container left");
}

#[test]
fn optional_gpus_on_an_engine_without_a_gpu_runtime_are_left_out_with_a_note_and_the_room_starts() {
    let ws = Workspace::new(json!({
        "image": BUSYBOX,
        "runArgs": ["--gpus", "all"],
        "hostRequirements": { "gpu": "optional" },
    }));
    let out = ws.up();
    let err = stderr(&out);
    assert!(
        err.contains("note: ")
            && err.contains("`hostRequirements.gpu` is \"optional\" and the engine has no GPU runtime: the room starts without GPUs"),
        "{err}"
    );
    assert_eq!(ws.exec_ok(&["echo", "in"]).trim(), "in");
}

/// Four `up --recreate` of `ws` let go at once; each must succeed.
fn four_recreates_at_once(ws: &Workspace) -> Vec<Output> {
    let barrier = std::sync::Barrier::new(4);
    let outs: Vec<Output> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    ws.workroom(&["up", "--recreate"])
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, out) in outs.iter().enumerate() {
        assert!(out.status.success(), "up --recreate #{i} failed: {}", stderr(out));
    }
    outs
}

#[test]
fn up_takes_the_reference_clis_remote_env_mount_id_label_and_skip_post_create_flags() {
    let ws = Workspace::new(serde_json::json!({
        "image": BUSYBOX,
        "postCreateCommand": "echo \"created with ${FROM_FLAG:-nothing}\" > /mnt/flag/said",
    }));
    let shared = tempfile::tempdir().unwrap();
    let mount = format!("type=bind,source={},target=/mnt/flag", shared.path().display());
    let label = format!("workroom.flag.{}=yes", ws.unique());

    // Skipped: the hook stays due.
    let out = ws.workroom(&["up", "--skip-post-create", "--mount", &mount, "--id-label", &label]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!shared.path().join("said").exists(), "postCreateCommand ran under --skip-post-create");
    let key = label.split('=').next().unwrap();
    assert_eq!(
        docker_ok(&["inspect", "-f", &format!("{{{{index .Config.Labels \"{key}\"}}}}"), &ws.room_name()]),
        "yes"
    );

    // The next `up` runs it, with this run's environment.
    let out = ws.workroom(&["up", "--remote-env", "FROM_FLAG=the-command-line"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(shared.path().join("said")).unwrap(), "created with the-command-line\n");

    // Refused before anything is asked of the engine, naming the word.
    let out = ws.workroom(&["up", "--remote-env", "=x"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("\"=x\" is not NAME=VALUE"), "{}", stderr(&out));
}
