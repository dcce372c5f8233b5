//! The load pipeline end to end on files in a temporary folder.

use super::*;
use std::fs;

struct Ws {
    dir: tempfile::TempDir,
}

impl Ws {
    fn new(config: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("app/.devcontainer")).unwrap();
        fs::write(dir.path().join("app/.devcontainer/devcontainer.json"), config).unwrap();
        Ws { dir }
    }
    fn folder(&self) -> PathBuf {
        self.dir.path().join("app")
    }
    fn load(&self) -> Result<Loaded, ConfigError> {
        let env = HashMap::from([("WR_USER".to_string(), "ann".to_string())]);
        load(&LoadRequest { env, ..LoadRequest::new(self.folder(), None) })
    }
    fn err(&self) -> String {
        self.load().unwrap_err().to_string()
    }
    fn config_path(&self) -> String {
        self.folder().join(".devcontainer/devcontainer.json").display().to_string()
    }
}

#[test]
fn an_image_config_loads_with_its_workspace_defaults() {
    let ws = Ws::new(r#"{ "image": "debian", "remoteUser": "${localEnv:WR_USER}", }"#);
    let loaded = ws.load().unwrap();
    assert_eq!(loaded.model.source, Source::Image("debian".into()));
    assert_eq!(loaded.model.remote_user.as_deref(), Some("ann"));
    assert_eq!(loaded.workspace.folder, "/workspaces/app");
    assert_eq!(loaded.json["remoteUser"], "ann");
}

#[test]
fn devcontainer_id_is_substituted_from_the_id_labels() {
    let ws = Ws::new(r#"{ "image": "debian", "containerEnv": { "ID": "${devcontainerId}" } }"#);
    let loaded = ws.load().unwrap();
    let expected = devcontainer_id(&id_labels(ws.folder().to_str().unwrap(), &ws.config_path()));
    assert_eq!(loaded.model.container_env, vec![("ID".to_string(), expected.clone())]);
    assert_eq!(expected.len(), 52);
}

#[test]
fn container_env_stays_literal_until_a_container_exists() {
    let ws = Ws::new(r#"{ "image": "debian", "remoteEnv": { "P": "${containerEnv:PATH}:/x" } }"#);
    assert_eq!(ws.load().unwrap().model.remote_env, vec![("P".into(), Some("${containerEnv:PATH}:/x".into()))]);
}

#[test]
fn workspace_folder_may_use_variables_and_other_properties_see_the_result() {
    let ws = Ws::new(
        r#"{ "image": "debian", "workspaceFolder": "/src/${localWorkspaceFolderBasename}",
             "workspaceMount": "type=bind,source=${localWorkspaceFolder},target=/src/${localWorkspaceFolderBasename}",
             "postCreateCommand": "ls ${containerWorkspaceFolder}" }"#,
    );
    let loaded = ws.load().unwrap();
    assert_eq!(loaded.workspace.folder, "/src/app");
    assert_eq!(
        loaded.workspace.mount.as_deref(),
        Some(format!("type=bind,source={},target=/src/app", ws.folder().display()).as_str())
    );
    assert_eq!(loaded.model.lifecycle.get(Hook::PostCreate), Some(&Command::Shell("ls /src/app".into())));
}

#[test]
fn an_empty_workspace_mount_means_no_mount() {
    let ws = Ws::new(r#"{ "image": "debian", "workspaceMount": "", "workspaceFolder": "/w" }"#);
    assert_eq!(ws.load().unwrap().workspace.mount, None);
}

#[test]
fn a_relative_workspace_folder_is_refused() {
    let ws = Ws::new(r#"{ "image": "debian", "workspaceFolder": "src" }"#);
    assert!(ws.err().contains("`workspaceFolder` must be an absolute path"), "{}", ws.err());
}

#[test]
fn lifecycle_commands_in_all_three_forms() {
    let ws = Ws::new(
        r#"{ "image": "debian",
             "onCreateCommand": "echo one",
             "updateContentCommand": ["echo", "two"],
             "postCreateCommand": { "a": "echo a", "b": ["echo", "b"] } }"#,
    );
    let lifecycle = ws.load().unwrap().model.lifecycle;
    assert_eq!(lifecycle.get(Hook::OnCreate), Some(&Command::Shell("echo one".into())));
    assert_eq!(lifecycle.get(Hook::UpdateContent), Some(&Command::Exec(vec!["echo".into(), "two".into()])));
    assert_eq!(
        lifecycle.get(Hook::PostCreate),
        Some(&Command::Parallel(vec![
            ("a".into(), Command::Shell("echo a".into())),
            ("b".into(), Command::Exec(vec!["echo".into(), "b".into()])),
        ]))
    );
    assert_eq!(lifecycle.get(Hook::PostStart), None);
}

#[test]
fn a_port_over_65535_names_the_property_and_the_range() {
    let ws = Ws::new(r#"{ "image": "debian", "forwardPorts": [3000, 70000] }"#);
    assert_eq!(
        ws.err(),
        format!(
            "{}: `forwardPorts[1]` must be a port number from 1 to 65535, found the number 70000",
            ws.config_path()
        )
    );
}

#[test]
fn forward_ports_take_numbers_and_host_port_strings() {
    let ws = Ws::new(r#"{ "image": "debian", "forwardPorts": [3000, "db:5432"] }"#);
    assert_eq!(
        ws.load().unwrap().model.forward_ports,
        vec![ForwardPort::Port(3000), ForwardPort::HostPort { host: "db".into(), port: 5432 }]
    );
}

#[test]
fn a_non_string_env_value_names_the_variable() {
    let ws = Ws::new(r#"{ "image": "debian", "containerEnv": { "A": "x", "N": 5 } }"#);
    assert_eq!(ws.err(), format!("{}: `containerEnv.N` must be a string, found the number 5", ws.config_path()));
}

#[test]
fn a_wrong_type_inside_build_names_the_nested_property() {
    let ws = Ws::new(r#"{ "build": { "dockerfile": "Dockerfile", "args": { "V": true } } }"#);
    fs::write(ws.folder().join(".devcontainer/Dockerfile"), "FROM scratch\n").unwrap();
    assert!(ws.err().ends_with("`build.args.V` must be a string, found the boolean true"), "{}", ws.err());
}

#[test]
fn features_are_read_with_their_options_in_the_order_written() {
    let ws = Ws::new(
        r#"{ "image": "debian", "features": { "ghcr.io/devcontainers/features/node:1": { "version": "18" },
            "./local": true, "ghcr.io/x/y/z": "2" }, "overrideFeatureInstallOrder": ["./local"] }"#,
    );
    let model = ws.load().unwrap().model;
    let ids: Vec<&str> = model.features.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["ghcr.io/devcontainers/features/node:1", "./local", "ghcr.io/x/y/z"]);
    assert_eq!(model.features[0].1["version"], "18");
    assert_eq!(model.features[1].1, Value::Bool(true));
    assert_eq!(model.override_feature_install_order, ["./local"]);
}

#[test]
fn feature_options_of_a_wrong_type_name_the_feature() {
    let ws = Ws::new(r#"{ "image": "debian", "features": { "./f": 5 } }"#);
    assert!(
        ws.err().ends_with(
            "`features[\"./f\"]` must be an object of options, a version string or true, found the number 5"
        ),
        "{}",
        ws.err()
    );
    let ws = Ws::new(r#"{ "image": "debian", "overrideFeatureInstallOrder": "./f" }"#);
    assert!(ws.err().contains("`overrideFeatureInstallOrder` must be an array of strings"), "{}", ws.err());
}

#[test]
fn empty_features_are_accepted() {
    assert!(Ws::new(r#"{ "image": "debian", "features": {} }"#).load().is_ok());
}

impl Ws {
    /// With `compose.yml` beside the config.
    fn compose(config: &str) -> Self {
        let ws = Ws::new(config);
        fs::write(ws.folder().join(".devcontainer/compose.yml"), "services:\n  app:\n    image: debian\n").unwrap();
        ws
    }
}

#[test]
fn a_compose_config_names_its_files_beside_the_config_and_has_no_workspace_mount() {
    let ws = Ws::compose(
        r#"{ "dockerComposeFile": ["compose.yml"], "service": "app", "runServices": ["app", "db"],
             "workspaceFolder": "/src/${localWorkspaceFolderBasename}" }"#,
    );
    let loaded = ws.load().unwrap();
    let Source::Compose(c) = &loaded.model.source else { panic!("expected compose: {:?}", loaded.model.source) };
    assert_eq!(c.files, vec![ws.folder().join(".devcontainer/compose.yml")]);
    assert_eq!((c.service.as_str(), c.run_services.clone()), ("app", Some(vec!["app".into(), "db".into()])));
    assert_eq!((loaded.workspace.folder.as_str(), loaded.workspace.mount.as_deref()), ("/src/app", None));
    let printed = loaded.reference_json();
    assert_eq!(printed["workspace"], serde_json::json!({ "workspaceFolder": "/src/app" }));
}

#[test]
fn a_compose_rooms_workspace_folder_is_the_root_unless_set() {
    let ws = Ws::compose(r#"{ "dockerComposeFile": "compose.yml", "service": "app" }"#);
    assert_eq!(ws.load().unwrap().workspace.folder, "/");
}

#[test]
fn a_missing_compose_file_is_named_with_the_path_tried() {
    let ws = Ws::compose(r#"{ "dockerComposeFile": ["compose.yml", "../nope.yml"], "service": "app" }"#);
    let missing = ws.folder().join(".devcontainer/../nope.yml");
    assert_eq!(
        ws.err(),
        format!("{}: `dockerComposeFile` names {}, which does not exist", ws.config_path(), missing.display())
    );
}

#[test]
fn a_compose_config_without_service_is_refused_by_name() {
    let ws = Ws::compose(r#"{ "dockerComposeFile": "compose.yml" }"#);
    assert!(
        ws.err().ends_with("`dockerComposeFile` needs `service`: the compose service that is the room"),
        "{}",
        ws.err()
    );
    let ws = Ws::compose(r#"{ "dockerComposeFile": 3, "service": "app" }"#);
    assert!(ws.err().contains("`dockerComposeFile` must be a string or an array of strings"), "{}", ws.err());
}

#[test]
fn a_compose_config_reads_its_features_as_an_image_config_does() {
    let ws = Ws::compose(
        r#"{ "dockerComposeFile": "compose.yml", "service": "app", "features": { "ghcr.io/devcontainers/features/node:1": {} } }"#,
    );
    let loaded = ws.load().unwrap();
    assert!(matches!(loaded.model.source, Source::Compose(_)), "{:?}", loaded.model.source);
    assert_eq!(
        loaded.model.features,
        vec![("ghcr.io/devcontainers/features/node:1".to_string(), serde_json::json!({}))]
    );
}

#[test]
fn stop_container_is_refused_for_a_compose_config() {
    let ws =
        Ws::compose(r#"{ "dockerComposeFile": "compose.yml", "service": "app", "shutdownAction": "stopContainer" }"#);
    assert!(ws.err().contains("a compose config takes \"stopCompose\" (the default) or \"none\""), "{}", ws.err());
}

#[test]
fn an_image_beside_docker_compose_file_makes_an_image_config_as_the_reference_reads_it() {
    let ws = Ws::compose(r#"{ "image": "debian", "dockerComposeFile": "compose.yml", "service": "app" }"#);
    assert_eq!(ws.load().unwrap().model.source, Source::Image("debian".into()));
}

#[test]
fn a_config_without_image_or_build_is_refused() {
    let ws = Ws::new(r#"{ "name": "x" }"#);
    assert!(ws.err().contains("no container source: set `image`, or `build.dockerfile`"), "{}", ws.err());
}

#[test]
fn a_dockerfile_that_is_a_folder_says_it_is_a_folder_not_that_it_does_not_exist() {
    let ws = Ws::new(r#"{ "build": { "dockerfile": "." } }"#);
    let err = ws.err();
    assert!(err.contains("`build.dockerfile` names "), "{err}");
    assert!(err.contains(", which is a folder; name the Dockerfile itself"), "{err}");
}

#[test]
fn a_missing_dockerfile_is_refused_naming_it() {
    let ws = Ws::new(r#"{ "build": { "dockerfile": "Nope.Dockerfile" } }"#);
    let missing = ws.folder().join(".devcontainer/Nope.Dockerfile");
    assert!(ws.err().ends_with(&format!("`build.dockerfile` names {}, which does not exist", missing.display())));
}

#[test]
fn a_missing_build_context_is_refused_naming_it() {
    let ws = Ws::new(r#"{ "build": { "dockerfile": "Dockerfile", "context": "../nope" } }"#);
    fs::write(ws.folder().join(".devcontainer/Dockerfile"), "FROM scratch\n").unwrap();
    assert!(ws.err().contains("`build.context` names"), "{}", ws.err());
}

#[test]
fn the_build_context_defaults_to_the_dockerfile_folder() {
    let ws = Ws::new(r#"{ "build": { "dockerfile": "docker/Dockerfile", "args": { "A": "1" } } }"#);
    fs::create_dir_all(ws.folder().join(".devcontainer/docker")).unwrap();
    fs::write(ws.folder().join(".devcontainer/docker/Dockerfile"), "FROM scratch\n").unwrap();
    let Source::Dockerfile(build) = ws.load().unwrap().model.source else { panic!("expected a Dockerfile source") };
    assert_eq!(build.context, ws.folder().join(".devcontainer/docker"));
    assert_eq!(build.args, vec![("A".into(), "1".into())]);
}

#[test]
fn the_legacy_top_level_dockerfile_and_context_are_read() {
    let ws = Ws::new(r#"{ "dockerFile": "Dockerfile", "context": ".." }"#);
    fs::write(ws.folder().join(".devcontainer/Dockerfile"), "FROM scratch\n").unwrap();
    let Source::Dockerfile(build) = ws.load().unwrap().model.source else { panic!("expected a Dockerfile source") };
    assert_eq!(build.dockerfile, ws.folder().join(".devcontainer/Dockerfile"));
    assert_eq!(build.context, ws.folder().join(".devcontainer/.."));
}

#[test]
fn a_malformed_file_names_line_and_column() {
    let ws = Ws::new("{\n  \"image\": \"debian\"\n  \"remoteUser\": \"dev\"\n}\n");
    assert!(ws.err().starts_with(&format!("{}:3:3: ", ws.config_path())), "{}", ws.err());
}

#[test]
fn unknown_properties_are_reported_not_fatal() {
    let ws = Ws::new(r#"{ "image": "debian", "postCreateComand": "x" }"#);
    assert_eq!(ws.load().unwrap().model.unknown, vec!["postCreateComand".to_string()]);
}

#[test]
fn legacy_vscode_properties_move_under_customizations() {
    let ws = Ws::new(r#"{ "image": "debian", "extensions": ["a.b"], "settings": { "x": 1 } }"#);
    let json = ws.load().unwrap().json;
    assert!(!json.contains_key("extensions"));
    assert_eq!(json["customizations"]["vscode"]["extensions"][0], "a.b");
    assert_eq!(json["customizations"]["vscode"]["settings"]["x"], 1);
}

#[test]
fn an_enum_property_lists_what_it_accepts() {
    let ws = Ws::new(r#"{ "image": "debian", "waitFor": "later" }"#);
    assert!(ws.err().contains("`waitFor` must be one of \"initializeCommand\""), "{}", ws.err());
}

#[test]
fn a_mount_object_needs_type_and_target() {
    let ws = Ws::new(r#"{ "image": "debian", "mounts": [ { "source": "x" } ] }"#);
    assert!(ws.err().contains("`mounts[0]` needs \"type\""), "{}", ws.err());
}

#[test]
fn a_missing_workspace_folder_is_its_own_error() {
    let err = load(&LoadRequest::new("/nonexistent/wr", None)).unwrap_err().to_string();
    assert_eq!(err, "workspace folder /nonexistent/wr does not exist or is not a folder");
}

#[test]
fn host_requirements_are_read_rather_than_ignored() {
    let ws = Ws::new(
        r#"{ "image": "i", "hostRequirements": { "cpus": 4, "memory": "8gb", "storage": "32GB", "gpu": "optional" } }"#,
    );
    let req = ws.load().unwrap().model.host_requirements.unwrap();
    assert_eq!(
        req,
        HostRequirements { cpus: Some(4), memory: Some(8 << 30), storage: Some(32 << 30), gpu: Gpu::Optional }
    );
    let ws = Ws::new(r#"{ "image": "i", "hostRequirements": { "gpu": { "cores": 2 } } }"#);
    assert_eq!(ws.load().unwrap().model.host_requirements.unwrap().gpu, Gpu::Required);
    let ws = Ws::new(r#"{ "image": "i", "hostRequirements": { "memory": "8 gigs" } }"#);
    assert!(ws.err().contains("`hostRequirements.memory` must be a size such as \"8gb\""), "{}", ws.err());
    let ws = Ws::new(r#"{ "image": "i", "hostRequirements": { "cpus": 0 } }"#);
    assert!(ws.err().contains("`hostRequirements.cpus` must be a whole number of CPUs from 1"), "{}", ws.err());
}

#[test]
fn an_override_config_gives_the_text_and_the_workspaces_file_stays_the_configuration() {
    let ws = Ws::new(r#"{ "image": "debian" }"#);
    let over = ws.dir.path().join("over.json");
    fs::write(&over, r#"{ "image": "alpine", "remoteUser": "ann" }"#).unwrap();
    let load =
        |folder: PathBuf| load(&LoadRequest { override_config: Some(over.clone()), ..LoadRequest::new(folder, None) });
    let loaded = load(ws.folder()).unwrap();
    assert_eq!(loaded.model.source, Source::Image("alpine".into()));
    assert_eq!(loaded.config_path.display().to_string(), ws.config_path());
    // With no devcontainer.json at all, the configuration is where it would be.
    let bare = ws.dir.path().join("bare");
    fs::create_dir(&bare).unwrap();
    let loaded = load(bare.clone()).unwrap();
    assert_eq!(loaded.config_path, bare.join(".devcontainer/devcontainer.json"));
    assert_eq!(loaded.model.remote_user.as_deref(), Some("ann"));
}

#[test]
fn without_the_git_root_the_workspace_folder_itself_is_mounted() {
    let ws = Ws::new(r#"{ "image": "debian" }"#);
    fs::create_dir(ws.dir.path().join(".git")).unwrap();
    let root = load(&LoadRequest::new(ws.folder(), None)).unwrap();
    assert_eq!(root.workspace.mount_root, ws.dir.path());
    assert_eq!(
        root.workspace.folder,
        format!("/workspaces/{}/app", ws.dir.path().file_name().unwrap().to_string_lossy())
    );
    let own = load(&LoadRequest { mount_git_root: false, ..LoadRequest::new(ws.folder(), None) }).unwrap();
    assert_eq!(own.workspace.mount_root, ws.folder());
    assert_eq!(own.workspace.folder, "/workspaces/app");
}
