//! Compose rooms against the real engine with the real compose program
//! (Debian's docker-compose 1.29): the room is the service devcontainer.json
//! names, its siblings run beside it, `stop` and `down` follow
//! `shutdownAction`, and a refused `up` leaves nothing of the project.
//!
//! Every project is unique to its test (the workspace folder's name is in
//! the project's name), every service carries the `workroom.test` label,
//! and everything of the project (containers, networks, volumes, built
//! images, workroom's override file) is removed on drop.

mod common;
mod pty;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The busybox stand-in for a database: httpd serving `/etc`, so the room
/// can fetch `/hostname` by the service's name.
const DB: &str = r#"  db:
    image: workroom-fixture/busybox:1
    command: ["httpd", "-f", "-p", "8080", "-h", "/etc"]
    labels: ["workroom.test=1"]
"#;

/// The room's service: the debian fixture, the workspace bound at `/workspace`.
const APP: &str = r#"  app:
    image: workroom-fixture/debian:bookworm
    command: sleep infinity
    volumes: ["..:/workspace"]
    labels: ["workroom.test=1"]
"#;

/// A workspace whose `.devcontainer/` holds devcontainer.json and
/// docker-compose.yml; its compose project is removed on drop.
struct ComposeWs {
    dir: tempfile::TempDir,
    env: Vec<(String, String)>,
    /// Peer messaging is on (folded into the room's name).
    peer: bool,
    /// The project's name when a test sets it (`.env`, the environment);
    /// else compose's default for the folder.
    named: Option<String>,
}

impl ComposeWs {
    /// `services` is the body under `services:`; `config` the devcontainer.json.
    fn new(config: Value, services: &str) -> ComposeWs {
        Self::with_files(config, &[("docker-compose.yml", &format!("services:\n{services}"))])
    }

    fn with_files(config: Value, files: &[(&str, &str)]) -> ComposeWs {
        let dir = tempfile::Builder::new().prefix("wr-compose-").tempdir().unwrap();
        let folder = dir.path().join(".devcontainer");
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("devcontainer.json"), serde_json::to_string_pretty(&config).unwrap()).unwrap();
        for (name, text) in files {
            let path = folder.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        std::fs::write(dir.path().join(".workroom.toml"), "peer_messaging = false\n").unwrap();
        ComposeWs { dir, env: Vec::new(), peer: false, named: None }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn folder(&self) -> String {
        self.path().display().to_string()
    }

    /// `<folder>_devcontainer`, as compose and the reference name it.
    fn project(&self) -> String {
        if let Some(named) = &self.named {
            return named.clone();
        }
        let base = self.path().file_name().unwrap().to_string_lossy().to_lowercase();
        format!("{base}_devcontainer")
    }

    fn room_name(&self) -> String {
        let loaded = workroom::config::load(&workroom::config::LoadRequest::new(self.path(), None)).unwrap();
        workroom::plan::identity::room_name(&loaded.workspace.local_folder, &loaded.config_path, self.peer)
    }

    fn workroom(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(workroom_bin());
        let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
        cmd.args(&args[..split]).args(["--workspace-folder", &self.folder()]).args(&args[split..]);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        output_within(cmd, None)
    }

    fn up(&self) -> Output {
        let out = self.workroom(&["up"]);
        assert!(out.status.success(), "workroom up failed: {}", stderr(&out));
        out
    }

    fn exec_ok(&self, cmd: &[&str]) -> String {
        let mut args = vec!["exec", "--"];
        args.extend_from_slice(cmd);
        let out = self.workroom(&args);
        assert!(out.status.success(), "exec {cmd:?}: {}", stderr(&out));
        stdout(&out)
    }

    /// `name state` of every container of the project.
    fn containers(&self) -> Vec<String> {
        let filter = format!("label=com.docker.compose.project={}", self.project());
        docker_ok(&[
            "ps",
            "-a",
            "--filter",
            &filter,
            "--format",
            "{{.Label \"com.docker.compose.service\"}} {{.State}}",
        ])
        .lines()
        .map(str::to_string)
        .collect()
    }

    /// The project's networks and volumes, by compose's label.
    fn networks_and_volumes(&self) -> (String, String) {
        let filter = format!("label=com.docker.compose.project={}", self.project());
        (
            docker_ok(&["network", "ls", "-q", "--filter", &filter]),
            docker_ok(&["volume", "ls", "-q", "--filter", &filter]),
        )
    }
}

impl Drop for ComposeWs {
    fn drop(&mut self) {
        // The room by its folder too: a test that failed before its project
        // got the name it expected must not leak it.
        let folder = format!("label=devcontainer.local_folder={}", self.folder());
        for id in String::from_utf8_lossy(&docker(&["ps", "-aq", "--filter", &folder]).stdout).split_whitespace() {
            remove_container(id);
        }
        let filter = format!("label=com.docker.compose.project={}", self.project());
        for id in String::from_utf8_lossy(&docker(&["ps", "-aq", "--filter", &filter]).stdout).split_whitespace() {
            remove_container(id);
        }
        for kind in ["network", "volume"] {
            let ids = docker(&[kind, "ls", "-q", "--filter", &filter]);
            for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
                let _ = docker(&[kind, "rm", id]);
            }
        }
        let _ = docker(&["rmi", &format!("{}_app", self.project())]);
        let state = override_folder();
        let _ = std::fs::remove_file(state.join(format!("{}.yml", self.room_name())));
    }
}

fn override_folder() -> PathBuf {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".local/state"));
    base.join("workroom/compose")
}

fn inspect(container: &str, format: &str) -> Value {
    serde_json::from_str(&docker_ok(&["inspect", container, "--format", format])).unwrap()
}

fn config(extra: Value) -> Value {
    let mut c = json!({ "dockerComposeFile": "docker-compose.yml", "service": "app", "workspaceFolder": "/workspace" });
    c.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    c
}

#[test]
fn a_two_service_project_is_a_room_that_reaches_its_sibling_by_name() {
    let ws = ComposeWs::new(
        config(json!({ "containerEnv": { "GREETING": "hi $HOME" }, "postCreateCommand": "echo made > /tmp/made" })),
        &format!("{APP}{DB}"),
    );
    ws.up();
    let room = ws.room_name();
    // The room is the compose service, with the room's labels beside compose's.
    let labels = inspect(&room, "{{json .Config.Labels}}");
    assert_eq!(labels["com.docker.compose.project"], json!(ws.project()));
    assert_eq!(labels["com.docker.compose.service"], "app");
    assert_eq!(labels["devcontainer.local_folder"], json!(ws.folder()));
    assert_eq!(labels["workroom.workspace_folder"], "/workspace");
    assert_eq!(inspect(&room, "{{json .Path}}"), "/.workroom/bin/workroomd", "the daemon is the main process");
    assert_eq!(inspect(&room, "{{json .HostConfig.Init}}"), true);
    assert_eq!(inspect(&room, "{{json .HostConfig.RestartPolicy.Name}}"), "unless-stopped");
    // Hooks ran, exec runs in the workspace folder with containerEnv as written.
    assert_eq!(ws.exec_ok(&["sh", "-c", "pwd; cat /tmp/made; echo \"$GREETING\""]), "/workspace\nmade\nhi $HOME\n");
    // The sibling, by its service name.
    let fetch = "import urllib.request; print(urllib.request.urlopen('http://db:8080/hostname').status)";
    assert_eq!(ws.exec_ok(&["python3", "-c", fetch]), "200\n");
    // `list` shows the room with its project.
    let listed: Value = serde_json::from_str(&stdout(&run_workroom(&["list", "--json"]))).unwrap();
    let ours = listed.as_array().unwrap().iter().find(|r| r["name"] == json!(room)).expect("listed");
    assert_eq!(ours["compose_project"], json!(ws.project()));
    // workroom's override is in its state folder, never in the repository.
    assert!(override_folder().join(format!("{room}.yml")).is_file());
    let files: Vec<_> =
        std::fs::read_dir(ws.path().join(".devcontainer")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(files.len(), 2, "only the user's files: {files:?}");
}

#[test]
fn a_compose_rooms_caps_come_from_the_settings_through_the_override_and_its_own_limits_are_not_drift() {
    // The file limits the service itself (pids); the settings cap the rest.
    let own = APP.replace("    command: sleep infinity\n", "    command: sleep infinity\n    pids_limit: 300\n");
    let ws = ComposeWs::new(config(json!({})), &own);
    std::fs::write(
        ws.path().join(".workroom.toml"),
        "peer_messaging = false\n[caps]\ncpus = 1.5\nmemory = \"256m\"\ntmp = \"64m\"\n",
    )
    .unwrap();
    ws.up();
    let h = inspect(&ws.room_name(), "{{json .HostConfig}}");
    assert_eq!((h["Memory"].clone(), h["MemorySwap"].clone()), (json!(268435456), json!(268435456)));
    assert_eq!((h["NanoCpus"].clone(), h["PidsLimit"].clone()), (json!(1_500_000_000), json!(300)));
    assert_eq!(h["OomScoreAdj"], json!(workroomd::room::OOM_SCORE_GAP));
    assert_eq!(h["Tmpfs"]["/tmp"], json!("rw,exec,nosuid,nodev,mode=1777,size=67108864"));
    assert_eq!(ws.exec_ok(&["cat", "/proc/self/oom_score_adj"]).trim(), "500");
    let again = stderr(&ws.up());
    assert!(!again.contains("was made with"), "the file's own pids_limit is not a changed cap: {again}");
}

#[test]
fn run_services_start_the_named_services_and_the_room_only() {
    let extra = "  extra:\n    image: workroom-fixture/busybox:1\n    command: [\"sleep\", \"600\"]\n    labels: [\"workroom.test=1\"]\n";
    let ws = ComposeWs::new(config(json!({ "runServices": ["db"] })), &format!("{APP}{DB}{extra}"));
    ws.up();
    let mut running = ws.containers();
    running.sort();
    assert_eq!(running, vec!["app running", "db running"], "extra is neither created nor started");
}

#[test]
fn a_second_up_takes_the_fast_path_without_running_compose() {
    let ws = ComposeWs::new(config(json!({})), APP);
    ws.up();
    // A docker-compose first on PATH that records being run.
    let bin = tempfile::tempdir().unwrap();
    let marker = bin.path().join("ran");
    let fake = bin.path().join("docker-compose");
    std::fs::write(&fake, format!("#!/bin/sh\ntouch {}\nexec /usr/bin/docker-compose \"$@\"\n", marker.display()))
        .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.path().display(), std::env::var("PATH").unwrap());
    let mut ws = ws;
    ws.env = vec![("PATH".into(), path)];
    let started = std::time::Instant::now();
    let out = ws.up();
    assert!(stderr(&out).contains("is up"), "{}", stderr(&out));
    assert!(!marker.exists(), "the second up ran compose (in {:?})", started.elapsed());
}

#[test]
fn stop_compose_stops_the_project_and_down_volumes_leaves_nothing_of_it() {
    let app = APP.replace("[\"..:/workspace\"]", "[\"..:/workspace\", \"data:/data\"]");
    let with_volume = format!("{app}{DB}volumes:\n  data: {{}}\n");
    let ws = ComposeWs::new(
        config(json!({ "shutdownAction": "stopCompose", "mounts": ["type=volume,source=cache,target=/cache"] })),
        &with_volume,
    );
    ws.up();
    let (networks, volumes) = ws.networks_and_volumes();
    assert!(!networks.is_empty(), "compose made the project's network");
    assert_eq!(volumes.lines().count(), 2, "the file's volume and the config's mount: {volumes}");
    let out = ws.workroom(&["stop"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut states = ws.containers();
    states.sort();
    assert_eq!(states, vec!["app exited", "db exited"]);
    // `up` starts the project again.
    ws.up();
    let mut states = ws.containers();
    states.sort();
    assert_eq!(states, vec!["app running", "db running"]);
    let out = ws.workroom(&["down", "--volumes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(ws.containers(), Vec::<String>::new());
    assert_eq!(ws.networks_and_volumes(), (String::new(), String::new()));
    assert!(!override_folder().join(format!("{}.yml", ws.room_name())).exists(), "the override goes with the room");
}

#[test]
fn shutdown_action_none_stops_and_removes_the_room_alone() {
    let ws = ComposeWs::new(config(json!({ "shutdownAction": "none" })), &format!("{APP}{DB}"));
    ws.up();
    let out = ws.workroom(&["stop"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut states = ws.containers();
    states.sort();
    assert_eq!(states, vec!["app exited", "db running"]);
    let out = ws.workroom(&["down"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(ws.containers(), vec!["db running"]);
}

#[test]
fn a_service_built_from_a_dockerfile_is_the_room() {
    let ws = ComposeWs::with_files(
        config(json!({})),
        &[
            (
                "docker-compose.yml",
                "services:\n  app:\n    build: .\n    volumes: [\"..:/workspace\"]\n    labels: [\"workroom.test=1\"]\n",
            ),
            ("Dockerfile", "FROM workroom-fixture/debian:bookworm\nRUN echo built > /built\n"),
        ],
    );
    ws.up();
    assert_eq!(ws.exec_ok(&["cat", "/built"]), "built\n");
    let image = inspect(&ws.room_name(), "{{json .Config.Image}}");
    assert_eq!(image, json!(format!("{}_app", ws.project())), "compose 1 names the built image");
}

#[test]
fn a_refused_up_leaves_no_container_network_or_volume_of_the_project() {
    // The sibling's image is nowhere (no registry): compose's `up` fails
    // after it made the network, the volume and the room's container.
    let missing = "  db:\n    image: workroom-fixture/not-there:1\n    labels: [\"workroom.test=1\"]\n    volumes: [\"data:/data\"]\nvolumes:\n  data: {}\n";
    let ws = ComposeWs::new(config(json!({})), &format!("{APP}{missing}"));
    let out = ws.workroom(&["up"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let last = stderr(&out).trim_end().lines().last().unwrap_or_default().to_string();
    assert!(last.starts_with("workroom: ") && last.contains("was not made"), "{last}");
    assert_eq!(ws.containers(), Vec::<String>::new());
    assert_eq!(ws.networks_and_volumes(), (String::new(), String::new()));
}

#[test]
fn a_service_not_in_the_file_is_refused_listing_those_that_are() {
    let ws = ComposeWs::new(config(json!({ "service": "web" })), &format!("{APP}{DB}"));
    let out = ws.workroom(&["up"]);
    assert_eq!(out.status.code(), Some(2));
    let said = stderr(&out);
    assert_eq!(said.trim_end().lines().count(), 1, "{said}");
    assert!(
        said.contains("`service` names \"web\", which is not a service of ")
            && said.ends_with("its services: app, db\n"),
        "{said}"
    );
}

#[test]
fn a_file_compose_refuses_is_said_in_its_first_error_line() {
    let ws = ComposeWs::new(config(json!({})), &format!("{APP}    bogus: 1\n"));
    let out = ws.workroom(&["up"]);
    assert_eq!(out.status.code(), Some(2));
    let said = stderr(&out);
    assert_eq!(said.trim_end().lines().count(), 1, "{said}");
    assert!(said.contains("docker-compose.yml: compose refuses it: ") && said.contains("'bogus'"), "{said}");
}

#[test]
fn no_compose_program_says_which_package_provides_it() {
    let mut ws = ComposeWs::new(config(json!({})), APP);
    let empty = tempfile::tempdir().unwrap();
    ws.env = vec![("PATH".into(), empty.path().display().to_string())];
    let out = ws.workroom(&["up"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no compose program") && stderr(&out).contains("docker-compose package"),
        "{}",
        stderr(&out)
    );
    assert_eq!(ws.containers(), Vec::<String>::new());
}

#[test]
fn a_compose_room_joins_the_peers_and_down_volumes_keeps_their_socket_volume() {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let scope = format!("tcompose{}{nanos:x}", std::process::id());
    let registry = tempfile::Builder::new().prefix("wr-compose-reg-").tempdir().unwrap();
    let mut ws = ComposeWs::new(config(json!({})), APP);
    let settings = format!("peer_messaging = true\npeer_registry = {:?}\n", registry.path().display().to_string());
    std::fs::write(ws.path().join(".workroom.toml"), settings).unwrap();
    ws.peer = true;
    ws.env = vec![("WORKROOM_SCOPE".into(), scope.clone())];
    struct Scope(String);
    impl Drop for Scope {
        fn drop(&mut self) {
            let filter = format!("label=workroom.scope={}", self.0);
            for id in String::from_utf8_lossy(&docker(&["ps", "-aq", "--filter", &filter]).stdout).split_whitespace() {
                remove_container(id);
            }
            let filter = format!("label=workroom.scope={}", self.0);
            for v in
                String::from_utf8_lossy(&docker(&["volume", "ls", "-q", "--filter", &filter]).stdout).split_whitespace()
            {
                let _ = docker(&["volume", "rm", "-f", v]);
            }
        }
    }
    let _scope = Scope(scope.clone());
    ws.up();
    // The anchor of the default group for the room's uid.
    let uid: u32 = ws.exec_ok(&["id", "-u"]).trim().parse().unwrap();
    let names = workroom::plan::peers::names(Some(&scope), "default", uid);
    let anchor = docker_ok(&["inspect", &names.anchor, "--format", "{{.Id}}"]);
    assert_eq!(inspect(&ws.room_name(), "{{json .HostConfig.PidMode}}"), json!(format!("container:{anchor}")));
    // PID 1 is the anchor's reaper; the socket folder is the shared volume.
    assert_eq!(ws.exec_ok(&["sh", "-c", "tr '\\0' ' ' < /proc/1/cmdline"]), "/.workroom/bin/workroomd anchor ");
    assert_eq!(ws.exec_ok(&["stat", "-c", "%a", "/tmp/cc-socks"]), "700\n");
    let out = ws.workroom(&["down", "--volumes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let volume = names.volume.clone();
    assert!(docker(&["volume", "inspect", &volume]).status.success(), "the peers' volume is not the project's");
}

// ---------------------------------------------------------------------------
// the reference CLI, side by side

fn node(js: &Path, args: &[&str]) -> (Output, Value) {
    let mut cmd = Command::new("node");
    cmd.arg(js).args(args);
    let out = output_within(cmd, None);
    let last = stdout(&out).lines().last().unwrap_or_default().to_string();
    let value = serde_json::from_str(&last).unwrap_or(Value::Null);
    (out, value)
}

#[test]
fn the_reference_cli_exec_finds_the_compose_room() {
    let ws = ComposeWs::new(config(json!({ "postCreateCommand": "echo made > /tmp/made" })), APP);
    ws.up();
    let (_unpacked, js) = reference_cli();
    let (out, _) = node(&js, &["exec", "--workspace-folder", &ws.folder(), "cat", "/tmp/made"]);
    assert!(out.status.success(), "reference exec: {}", stderr(&out));
    assert_eq!(stdout(&out), "made\n");
}

/// What the two sides are compared on: the labels both write, the env, the
/// remote user and the workspace folder.
fn service_container_facts(container: &str) -> Value {
    let labels = inspect(container, "{{json .Config.Labels}}");
    let keep = [
        "com.docker.compose.project",
        "com.docker.compose.service",
        "devcontainer.local_folder",
        "devcontainer.config_file",
        "workroom.test",
    ];
    let mut facts: serde_json::Map<String, Value> = keep.iter().map(|k| (k.to_string(), labels[*k].clone())).collect();
    let metadata: Value = serde_json::from_str(labels["devcontainer.metadata"].as_str().unwrap()).unwrap();
    facts.insert("metadata".into(), metadata);
    let mut env: Vec<Value> = inspect(container, "{{json .Config.Env}}").as_array().unwrap().clone();
    env.sort_by_key(|v| v.to_string());
    facts.insert("env".into(), Value::Array(env));
    Value::Object(facts)
}

#[test]
fn the_reference_and_workroom_make_the_same_service_container() {
    let ws = ComposeWs::new(
        config(json!({ "containerEnv": { "GREETING": "hi $HOME", "N": "1" }, "remoteUser": "root" })),
        &format!("{APP}{DB}"),
    );
    let (_unpacked, js) = reference_cli();
    let (out, up) = node(&js, &["up", "--workspace-folder", &ws.folder()]);
    assert_eq!(up["outcome"], "success", "reference up: {}\n{}", stdout(&out), stderr(&out));
    let theirs = service_container_facts(up["containerId"].as_str().unwrap());
    let (their_user, their_folder) = (up["remoteUser"].clone(), up["remoteWorkspaceFolder"].clone());
    // The same project on the same files: the reference's goes first.
    let filter = format!("label=com.docker.compose.project={}", ws.project());
    for id in docker_ok(&["ps", "-aq", "--filter", &filter]).split_whitespace() {
        remove_container(id);
    }

    let out = ws.workroom(&["up", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ours_up: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    let ours = service_container_facts(&ws.room_name());
    assert_eq!(ours, theirs);
    assert_eq!((&ours_up["remoteUser"], &ours_up["remoteWorkspaceFolder"]), (&their_user, &their_folder));
    assert_eq!(their_folder, "/workspace");
}

/// The devcontainer face (issue 29): `devcontainer up` of a compose room
/// adds `composeProjectName` to its result, as the reference's does.
#[test]
fn the_devcontainer_face_up_of_a_compose_room_prints_the_compose_project_name_as_the_reference_does() {
    let ws = ComposeWs::new(config(json!({ "postCreateCommand": "echo made >> /workspace/hooks.log" })), APP);
    let (_unpacked, js) = reference_cli();
    let (out, theirs) = node(&js, &["up", "--workspace-folder", &ws.folder()]);
    assert_eq!(out.status.code(), Some(0), "reference up: {}\n{}", stdout(&out), stderr(&out));
    let filter = format!("label=com.docker.compose.project={}", ws.project());
    for id in docker_ok(&["ps", "-aq", "--filter", &filter]).split_whitespace() {
        remove_container(id);
    }
    let mut face = Command::new(workroom_bin());
    face.args(["devcontainer", "up", "--workspace-folder", &ws.folder()]);
    let out = output_within(face, None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ours: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&ours), keys(&theirs), "{ours} vs {theirs}");
    assert_eq!(ours["composeProjectName"], theirs["composeProjectName"]);
    assert_eq!(ours["composeProjectName"], json!(ws.project()));
    assert_eq!(
        (&ours["remoteUser"], &ours["remoteWorkspaceFolder"]),
        (&theirs["remoteUser"], &theirs["remoteWorkspaceFolder"])
    );
    // Each ran postCreateCommand in its own new container.
    assert_eq!(std::fs::read_to_string(ws.path().join("hooks.log")).unwrap(), "made\nmade\n");
}

#[test]
fn a_local_feature_extends_the_service_image_and_the_override_names_the_derived_image() {
    let feature_json = r#"{ "id": "hello", "version": "1.0.0", "name": "Hello",
        "options": { "greeting": { "type": "string", "default": "hi" } },
        "containerEnv": { "WR_HELLO": "from-feature" } }"#;
    let install = "#!/bin/sh\nset -e\necho \"$GREETING\" > /etc/wr-hello\n";
    let ws = ComposeWs::with_files(
        config(json!({ "features": { "./hello": { "greeting": "hey" } } })),
        &[
            ("docker-compose.yml", &format!("services:\n{APP}{DB}")),
            ("hello/devcontainer-feature.json", feature_json),
            ("hello/install.sh", install),
        ],
    );
    let out = ws.up();
    let room = ws.room_name();
    // The service runs the derived image, not the one the compose file names.
    let image = inspect(&room, "{{json .Config.Image}}");
    let image = image.as_str().unwrap().to_string();
    assert!(image.starts_with("workroom-features:"), "the derived image: {image}; up said {}", stderr(&out));
    assert_eq!(ws.exec_ok(&["sh", "-c", "cat /etc/wr-hello; echo \"$WR_HELLO\""]), "hey\nfrom-feature\n");
    // Still the compose service, its sibling beside it.
    assert_eq!(inspect(&room, "{{json .Config.Labels}}")["com.docker.compose.service"], "app");
    let fetch = "import urllib.request; print(urllib.request.urlopen('http://db:8080/hostname').status)";
    assert_eq!(ws.exec_ok(&["python3", "-c", fetch]), "200\n");
    let down = ws.workroom(&["down"]);
    assert!(down.status.success(), "down: {}", stderr(&down));
    let _ = docker(&["rmi", &image]);
}

/// How long a forwarded port or a pane may take to answer in a compose room
/// (a `docker exec` and a python start-up; seconds on a loaded machine).
const ANSWER_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

#[test]
fn a_compose_room_has_panes_forwarded_ports_and_the_hosts_ssh_agent_like_any_room() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (agent, fingerprint) = common::ssh_agent::Agent::with_key();
    let mut ws = ComposeWs::new(config(json!({ "forwardPorts": [port] })), &format!("{APP}{DB}"));
    ws.env.push(("SSH_AUTH_SOCK".into(), agent.sock().display().to_string()));
    ws.up();
    std::fs::write(ws.path().join("index.html"), "from the compose room\n").unwrap();

    // A forwarded port, served by the room on its own loopback.
    let serve = format!("(python3 -m http.server {port} --bind 127.0.0.1 -d /workspace >/dev/null 2>&1 &)");
    ws.exec_ok(&["sh", "-c", &serve]);
    let deadline = std::time::Instant::now() + ANSWER_WAIT;
    let body = loop {
        let body = http_get(port, "/index.html");
        if body.ends_with("from the compose room\n") || std::time::Instant::now() > deadline {
            break body;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(body.ends_with("from the compose room\n"), "the forwarded port answered {body:?}");

    // The host's agent, in the service container.
    let listed = ws.exec_ok(&["ssh-add", "-l"]);
    assert!(listed.contains(&fingerprint), "{listed}");

    // A pane, through a real terminal.
    let mut term = pty::Term::spawn(workroom_bin(), &["shell", "--workspace-folder", &ws.folder()], 24, 80);
    term.send(b"echo $((6*7))-$(hostname)-$PWD\r");
    term.expect("42-", ANSWER_WAIT);
    term.expect("-/workspace", ANSWER_WAIT);
    term.send(b"exit 3\r");
    assert_eq!(term.wait(ANSWER_WAIT), 3, "the pane's exit status ends `shell`");
}

#[test]
fn the_project_name_from_dot_env_or_the_environment_is_the_one_compose_makes_and_down_removes() {
    // The workspace folder's `.env`, as the reference reads it.
    for source in ["dot-env", "environment"] {
        let mut ws = ComposeWs::new(config(json!({})), &format!("{APP}{DB}"));
        let name = format!("wr{}{source}", ws.path().file_name().unwrap().to_string_lossy().to_lowercase())
            .replace(|c: char| !c.is_ascii_alphanumeric(), "");
        match source {
            "dot-env" => std::fs::write(ws.path().join(".env"), format!("COMPOSE_PROJECT_NAME={name}\n")).unwrap(),
            _ => ws.env.push(("COMPOSE_PROJECT_NAME".into(), name.clone())),
        }
        ws.named = Some(name.clone());
        ws.up();
        let labels = inspect(&ws.room_name(), "{{json .Config.Labels}}");
        assert_eq!(labels["com.docker.compose.project"], json!(name), "from {source}");
        let mut states = ws.containers();
        states.sort();
        assert_eq!(states, vec!["app running", "db running"], "from {source}");
        let out = ws.workroom(&["down", "--volumes"]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(ws.containers(), Vec::<String>::new(), "down removed the project compose made, from {source}");
        assert_eq!(ws.networks_and_volumes(), (String::new(), String::new()));
    }
}

/// A docker-compose first on PATH that waits before every `up -d`, so a
/// room stays in the engine's `created` state for a while after compose
/// created it: the window a second `up` must not mistake for a dead one's.
fn slow_start_compose(bin: &Path) -> String {
    let fake = bin.join("docker-compose");
    std::fs::write(
        &fake,
        "#!/bin/sh\ncase \" $* \" in *\" -d \"*) sleep 2;; esac\nexec /usr/bin/docker-compose \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap())
}

/// The engine's state of `container`, or "" when there is none.
fn container_state(container: &str) -> String {
    let out = docker(&["inspect", container, "--format", "{{.State.Status}}"]);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn a_second_up_during_a_compose_rooms_create_waits_for_it_and_removes_nothing() {
    let bin = tempfile::tempdir().unwrap();
    let path = slow_start_compose(bin.path());
    for round in 0..4 {
        let mut ws = ComposeWs::new(config(json!({})), APP);
        ws.env = vec![("PATH".into(), path.clone())];
        let room = ws.room_name();
        let (first, second) = std::thread::scope(|s| {
            let first = s.spawn(|| ws.workroom(&["up"]));
            // The second starts once compose has created the room and
            // before it is started: its first look finds it `created`.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
            while container_state(&room) != "created" {
                assert!(!first.is_finished(), "round {round}: the first up ended before its room was created");
                assert!(std::time::Instant::now() < deadline, "round {round}: the room was never seen created");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let id = || {
                String::from_utf8_lossy(&docker(&["inspect", &room, "--format", "{{.Id}}"]).stdout).trim().to_string()
            };
            let created_id = id();
            let second = ws.workroom(&["up"]);
            let first = first.join().unwrap();
            assert_eq!(id(), created_id, "round {round}: the room compose created is the room that runs");
            (first, second)
        });
        for (which, out) in [("first", &first), ("second", &second)] {
            assert!(out.status.success(), "round {round}: the {which} up failed: {}", stderr(out));
            assert!(!stderr(out).contains("left unstarted"), "round {round}: the {which} up: {}", stderr(out));
        }
        assert_eq!(container_state(&room), "running", "round {round}");
        assert_eq!(ws.containers(), vec!["app running".to_string()], "round {round}: one room");
    }
}
