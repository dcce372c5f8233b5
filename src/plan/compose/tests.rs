//! Table tests of the compose decisions, from real configuration files.

use super::*;
use crate::config::{load, LoadRequest, Loaded};
use crate::plan::create::plan;
use crate::plan::metadata::for_new_room;
use std::collections::HashMap;
use std::path::PathBuf;

#[test]
fn the_project_name_follows_the_references_order_of_sources() {
    let ws = Path::new("/src/My App");
    let in_devcontainer = ws.join(".devcontainer/docker-compose.yml");
    let at_root = ws.join("docker-compose.yml");
    let base = ProjectInputs {
        env: None,
        dot_env: None,
        config_name: None,
        files_name_it: false,
        first_file: &in_devcontainer,
        workspace: ws,
        new_names: true,
        worktree: false,
    };
    // (inputs, expected)
    let table: Vec<(ProjectInputs, &str)> = vec![
        (
            ProjectInputs { env: Some("From_Env"), dot_env: Some("COMPOSE_PROJECT_NAME=dot"), ..base.clone() },
            "from_env",
        ),
        (ProjectInputs { env: Some("!!"), dot_env: Some("COMPOSE_PROJECT_NAME=dot"), ..base.clone() }, "dot"),
        (ProjectInputs { dot_env: Some("export COMPOSE_PROJECT_NAME='Dot Env' # why"), ..base.clone() }, "dotenv"),
        (ProjectInputs { dot_env: Some("OTHER=1"), config_name: Some("named"), ..base.clone() }, "named"),
        // compose 2 prints `devcontainer` for files in `.devcontainer/`:
        // a name only when a file says so.
        (ProjectInputs { config_name: Some("devcontainer"), ..base.clone() }, "myapp_devcontainer"),
        (ProjectInputs { config_name: Some("devcontainer"), files_name_it: true, ..base.clone() }, "devcontainer"),
        (base.clone(), "myapp_devcontainer"),
        (ProjectInputs { first_file: &at_root, ..base.clone() }, "myapp"),
        (ProjectInputs { new_names: false, ..base.clone() }, "myappdevcontainer"),
    ];
    for (inputs, expected) in table {
        assert_eq!(project_name(&inputs), expected, "{inputs:?}");
    }
}

#[test]
fn a_compose_file_outside_dot_devcontainer_names_the_project_after_its_folder() {
    let ws = Path::new("/src/app");
    let file = Path::new("/src/app/deploy/dev/compose.yaml");
    let p = ProjectInputs {
        env: None,
        dot_env: None,
        config_name: None,
        files_name_it: false,
        first_file: file,
        workspace: ws,
        new_names: true,
        worktree: false,
    };
    assert_eq!(project_name(&p), "dev");
}

#[test]
fn worktrees_named_alike_or_of_one_named_project_get_projects_of_their_own() {
    let inputs = |ws: &'static str, file: &'static Path, config_name: Option<&'static str>| ProjectInputs {
        env: None,
        dot_env: None,
        config_name,
        files_name_it: config_name.is_some(),
        first_file: file,
        workspace: Path::new(ws),
        new_names: true,
        worktree: true,
    };
    let a_file = Path::new("/src/a.worktrees/feat/.devcontainer/compose.yml");
    let b_file = Path::new("/src/b.worktrees/feat/.devcontainer/compose.yml");
    let x_file = Path::new("/src/a.worktrees/x/.devcontainer/compose.yml");
    // Two repositories' worktrees `feat`: the reference names both `feat_devcontainer`.
    let a = project_name(&inputs("/src/a.worktrees/feat", a_file, None));
    let b = project_name(&inputs("/src/b.worktrees/feat", b_file, None));
    assert!(a.starts_with("feat_devcontainer-") && a.len() == "feat_devcontainer-".len() + 8, "{a}");
    assert_ne!(a, b);
    // One repository whose compose file says `name: app`: one project per worktree.
    let named_feat = project_name(&inputs("/src/a.worktrees/feat", a_file, Some("app")));
    let named_x = project_name(&inputs("/src/a.worktrees/x", x_file, Some("app")));
    assert!(named_feat.starts_with("app-"), "{named_feat}");
    assert_ne!(named_feat, named_x);
    // Stable, and the person's COMPOSE_PROJECT_NAME still wins as written.
    assert_eq!(a, project_name(&inputs("/src/a.worktrees/feat", a_file, None)));
    let env = ProjectInputs { env: Some("mine"), ..inputs("/src/a.worktrees/feat", a_file, None) };
    assert_eq!(project_name(&env), "mine");
    let old = ProjectInputs { new_names: false, ..inputs("/src/a.worktrees/feat", a_file, None) };
    assert!(project_name(&old).starts_with("featdevcontainer") && !project_name(&old).contains('-'));
}

#[test]
fn a_built_services_image_is_named_as_each_compose_names_it() {
    assert_eq!(default_image_name("p", "app", Some((1, 29, 2))), "p_app");
    assert_eq!(default_image_name("p", "app", Some((2, 8, 0))), "p-app");
    assert_eq!(default_image_name("p", "app", None), "p-app");
}

#[test]
fn run_services_always_include_the_rooms_service_and_none_means_all() {
    assert_eq!(services_to_run("app", None), Vec::<String>::new());
    assert_eq!(services_to_run("app", Some(&[])), Vec::<String>::new());
    assert_eq!(services_to_run("app", Some(&["db".into()])), vec!["db", "app"]);
    assert_eq!(services_to_run("app", Some(&["app".into(), "db".into()])), vec!["app", "db"]);
}

#[test]
fn a_string_command_is_split_as_a_shell_splits_it() {
    let table: [(&str, &[&str]); 6] = [
        ("sleep infinity", &["sleep", "infinity"]),
        ("  sh -c 'echo a b'  ", &["sh", "-c", "echo a b"]),
        (r#"echo "a \"b\" \n""#, &["echo", r#"a "b" \n"#]),
        (r"a\ b c", &["a b", "c"]),
        ("x ''", &["x", ""]),
        ("", &[]),
    ];
    for (line, words) in table {
        assert_eq!(split_words(line), words, "{line:?}");
    }
}

fn printed(yaml_as_json: serde_json::Value) -> Service {
    Service::of(&json!({ "services": { "app": yaml_as_json } }), "app").unwrap()
}

#[test]
fn the_service_is_read_from_the_printed_config_with_dollars_unescaped() {
    let s = printed(json!({
        "image": "img", "build": { "context": "." }, "user": "dev",
        "entrypoint": ["/bin/sh", "-c"], "command": "echo $$HOME"
    }));
    assert_eq!(s.image.as_deref(), Some("img"));
    assert!(s.build);
    assert_eq!(s.user.as_deref(), Some("dev"));
    assert_eq!(s.entrypoint, Some(vec!["/bin/sh".to_string(), "-c".into()]));
    assert_eq!(s.command, Some(vec!["echo".to_string(), "$HOME".into()]));
    assert_eq!(Service::of(&json!({ "services": {} }), "app"), None);
    assert_eq!(service_names(&json!({ "services": { "b": {}, "a": {} } })), vec!["b", "a"]);
}

#[test]
fn compose_entrypoint_and_command_replace_the_images_as_compose_runs_them() {
    let image = ImageFacts {
        user: Some("img".into()),
        entrypoint: vec!["/init".into()],
        cmd: vec!["serve".into()],
        metadata: Some("[]".into()),
        working_dir: None,
    };
    let facts = |s: Service| service_facts(&image, &s);
    let plain = facts(Service::default());
    assert_eq!(
        (plain.entrypoint, plain.cmd, plain.user),
        (vec!["/init".into()], vec!["serve".into()], Some("img".into()))
    );
    let command = facts(Service { command: Some(vec!["run".into()]), ..Default::default() });
    assert_eq!((command.entrypoint, command.cmd), (vec!["/init".to_string()], vec!["run".to_string()]));
    // An entrypoint in the file drops the image's CMD.
    let entry = facts(Service { entrypoint: Some(vec!["/e".into()]), user: Some("svc".into()), ..Default::default() });
    assert_eq!((entry.entrypoint, entry.cmd, entry.user), (vec!["/e".into()], vec![], Some("svc".into())));
    assert_eq!(entry.metadata.as_deref(), Some("[]"));
}

#[test]
fn the_file_version_is_the_first_version_line() {
    assert_eq!(file_version("version: '3.8'\nservices: {}\n").as_deref(), Some("3.8"));
    assert_eq!(file_version("# c\n  version: \"2.4\" # old\n").as_deref(), Some("2.4"));
    assert_eq!(file_version("services:\n  app: {}\n"), None);
}

/// A compose workspace: `.devcontainer/devcontainer.json` and its compose file.
fn compose_ws(config: &str) -> (tempfile::TempDir, Loaded) {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join(".devcontainer");
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(folder.join("devcontainer.json"), config).unwrap();
    std::fs::write(folder.join("docker-compose.yml"), "services:\n  app:\n    image: img\n").unwrap();
    let l = load(&LoadRequest { env: HashMap::new(), ..LoadRequest::new(dir.path(), None) }).unwrap();
    (dir, l)
}

fn inputs<'a>(external: &'a [String]) -> OverrideInputs<'a> {
    OverrideInputs {
        service: "app",
        version: Some("3.8"),
        image: None,
        container_name: "workroom-x-12345678",
        external_volumes: external,
    }
}

#[test]
fn the_override_gives_the_service_the_daemon_under_init_as_root_and_the_rooms_labels() {
    let (_d, l) = compose_ws(
        r#"{"dockerComposeFile": "docker-compose.yml", "service": "app", "workspaceFolder": "/w",
            "containerEnv": {"A": "1", "PRICE": "$5"}, "capAdd": ["SYS_PTRACE"], "securityOpt": ["seccomp=unconfined"],
            "privileged": true,
            "mounts": ["type=volume,source=cache,target=/cache", "type=bind,source=/tmp,target=/host-tmp,readonly",
                       {"type": "volume", "source": "shared", "target": "/shared", "external": true}]}"#,
    );
    let p = plan("workroom-x-12345678", "img", &l, &ImageFacts::default()).unwrap();
    let external = vec!["shared".to_string()];
    let file = override_file(&p, &inputs(&external)).unwrap();
    let s = &file["services"]["app"];
    assert_eq!(file["version"], "3.8");
    assert_eq!(s["container_name"], "workroom-x-12345678");
    assert_eq!(s["entrypoint"], json!(["/.workroom/bin/workroomd", "serve"]));
    assert_eq!(s["command"], json!([]), "the file's command must not reach the daemon");
    assert_eq!(s["user"], "0");
    assert_eq!(s["init"], true);
    assert_eq!(s["restart"], "unless-stopped");
    assert_eq!(s["privileged"], true);
    assert_eq!(s["cap_add"], json!(["SYS_PTRACE"]));
    assert_eq!(s["security_opt"], json!(["seccomp=unconfined"]));
    // Compose interpolates `$`: written doubled, it reaches the room as one.
    assert_eq!(s["environment"], json!(["A=1", "PRICE=$$5"]));
    assert_eq!(s["volumes"], json!(["cache:/cache", "/tmp:/host-tmp:ro", "shared:/shared"]));
    assert_eq!(file["volumes"], json!({ "cache": {}, "shared": { "external": true } }));
    let labels = s["labels"].as_object().unwrap();
    assert_eq!(labels["devcontainer.local_folder"], json!(l.workspace.local_folder.display().to_string()));
    assert_eq!(labels["devcontainer.config_file"], json!(l.config_path.display().to_string()));
    assert_eq!(labels["workroom.workspace_folder"], "/w");
    assert!(labels.contains_key("devcontainer.metadata") && labels.contains_key("workroom.schema"), "{labels:?}");
    assert!(s.get("image").is_none(), "the file's image stays unless features extend it");
}

#[test]
fn override_command_false_runs_the_services_program_under_the_daemon() {
    let (_d, l) =
        compose_ws(r#"{"dockerComposeFile": "docker-compose.yml", "service": "app", "overrideCommand": false}"#);
    let service = Service { command: Some(vec!["sleep".into(), "$X".into()]), ..Default::default() };
    let facts = service_facts(&ImageFacts { entrypoint: vec!["/init".into()], ..Default::default() }, &service);
    let p = plan("room", "img", &l, &facts).unwrap();
    let file = override_file(&p, &inputs(&[])).unwrap();
    assert_eq!(
        file["services"]["app"]["entrypoint"],
        json!(["/.workroom/bin/workroomd", "serve", "--", "/init", "sleep", "$$X"])
    );
    assert_eq!(file["services"]["app"]["command"], json!([]));
}

#[test]
fn the_derived_image_of_features_is_named_in_the_override() {
    let (_d, l) = compose_ws(r#"{"dockerComposeFile": "docker-compose.yml", "service": "app"}"#);
    let p = plan("room", "derived", &l, &ImageFacts::default()).unwrap();
    let file = override_file(&p, &OverrideInputs { image: Some("derived:1"), ..inputs(&[]) }).unwrap();
    assert_eq!(file["services"]["app"]["image"], "derived:1");
}

#[test]
fn peers_nested_and_gpus_become_compose_keys() {
    let (_d, l) = compose_ws(r#"{"dockerComposeFile": "docker-compose.yml", "service": "app"}"#);
    let metadata = for_new_room(&l, "img", None, &[]);
    let join = crate::plan::peers::PeerJoin {
        anchor: "workroom-anchor".into(),
        volume: "socks".into(),
        registry: "/home/u/.claude".into(),
        home: "/root".into(),
    };
    let mut p = crate::plan::create::plan_with_peers(
        &l,
        &crate::plan::create::Inputs {
            peer: Some(&join),
            ..crate::plan::create::Inputs::of("room", "img", &ImageFacts::default(), &metadata)
        },
    )
    .unwrap();
    let host = p.body.host_config.as_mut().unwrap();
    host.devices = Some(vec![bollard::models::DeviceMapping {
        path_on_host: Some("/dev/fuse".into()),
        path_in_container: Some("/dev/fuse".into()),
        cgroup_permissions: Some("rwm".into()),
    }]);
    host.tmpfs = Some(HashMap::from([("/inner".to_string(), "exec,size=2g".to_string())]));
    crate::plan::create::request_all_gpus(&mut p);
    let external = vec!["socks".to_string()];
    let file = override_file(&p, &inputs(&external)).unwrap();
    let s = &file["services"]["app"];
    assert_eq!(s["pid"], "container:workroom-anchor");
    assert_eq!(s["init"], false, "the anchor reaps in a shared PID namespace");
    assert_eq!(s["volumes"], json!(["socks:/tmp/cc-socks", "/home/u/.claude:/root/.claude"]));
    assert_eq!(file["volumes"]["socks"], json!({ "external": true }));
    assert_eq!(s["devices"], json!(["/dev/fuse:/dev/fuse:rwm"]));
    assert_eq!(s["tmpfs"], json!(["/inner:exec,size=2g"]));
    assert_eq!(
        s["deploy"]["resources"]["reservations"]["devices"],
        json!([{ "capabilities": ["gpu"], "count": "all" }])
    );
}

#[test]
fn caps_become_compose_keys_in_bytes_and_cpus() {
    let (_d, l) = compose_ws(r#"{"dockerComposeFile": "docker-compose.yml", "service": "app"}"#);
    let mut p = plan("room", "img", &l, &ImageFacts::default()).unwrap();
    let caps = crate::settings::parse(
        "[caps]\ncpus = 1.5\nmemory = \"256m\"\npids = 200\ntmp = \"64m\"\n",
        std::path::Path::new("p"),
    )
    .unwrap()
    .caps;
    let asked = crate::plan::caps::asked(&[(&caps, crate::plan::caps::Source::Project)]);
    crate::plan::caps::apply(&mut p, &asked).unwrap();
    let file = override_file(&p, &inputs(&[])).unwrap();
    let s = &file["services"]["app"];
    assert_eq!(s["cpus"], json!(1.5));
    assert_eq!((s["mem_limit"].clone(), s["memswap_limit"].clone()), (json!(268435456), json!(268435456)));
    assert_eq!(s["pids_limit"], json!(200));
    assert_eq!(s["oom_score_adj"], json!(workroomd::room::OOM_SCORE_GAP));
    assert_eq!(s["tmpfs"], json!(["/tmp:rw,exec,nosuid,nodev,mode=1777,size=67108864"]));
    assert!(s["labels"]["workroom.caps"].as_str().unwrap().contains("\"pids\":200"), "{s}");
}

#[test]
fn what_the_override_cannot_say_is_refused_by_name_not_dropped() {
    let (_d, l) = compose_ws(r#"{"dockerComposeFile": "docker-compose.yml", "service": "app"}"#);
    let mut p = plan("room", "img", &l, &ImageFacts::default()).unwrap();
    p.body.host_config.as_mut().unwrap().readonly_rootfs = Some(true);
    let e = override_file(&p, &inputs(&[])).unwrap_err();
    assert_eq!(e.to_string(), "a compose room cannot carry the engine settings ReadonlyRootfs");
    let empty = CreatePlan { body: Default::default(), ..p };
    let file = override_file(&empty, &inputs(&[])).unwrap();
    assert_eq!(file["services"]["app"], json!({ "container_name": "workroom-x-12345678" }));
}

#[test]
fn compose_files_are_found_beside_the_config_or_by_composes_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::write(ws.join(".devcontainer.json"), r#"{"dockerComposeFile": [], "service": "app"}"#).unwrap();
    std::fs::write(ws.join("docker-compose.yml"), "services: {}\n").unwrap();
    std::fs::write(ws.join("docker-compose.override.yml"), "services: {}\n").unwrap();
    let files = |env: HashMap<String, String>| match load(&LoadRequest { env, ..LoadRequest::new(ws, None) })
        .unwrap()
        .model
        .source
    {
        crate::config::Source::Compose(c) => (c.files, c.env_file),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        files(HashMap::new()),
        (vec![ws.join("docker-compose.yml"), ws.join("docker-compose.override.yml")], None)
    );
    std::fs::write(ws.join("other.yml"), "services: {}\n").unwrap();
    std::fs::write(ws.join(".env"), "COMPOSE_FILE=other.yml\n").unwrap();
    assert_eq!(files(HashMap::new()), (vec![ws.join("other.yml")], Some(ws.join(".env"))));
    let env = HashMap::from([("COMPOSE_FILE".to_string(), "docker-compose.yml:other.yml".to_string())]);
    let expected: Vec<PathBuf> = vec![ws.join("docker-compose.yml"), ws.join("other.yml")];
    assert_eq!(files(env).0, expected);
}
