//! Table tests of the create plan, from real configuration files.

use super::create::{plan, remote_user, ImageFacts};
use super::labels;
use super::metadata::for_new_room;
use crate::config::Loaded;
use std::collections::HashMap;

use crate::config::loaded_for_test as loaded;

fn image_user(user: &str) -> ImageFacts {
    ImageFacts { user: Some(user.into()), ..Default::default() }
}

/// The remote user of a room made from `image` (and its label).
fn remote_user_of(l: &Loaded, image: &ImageFacts) -> String {
    remote_user(&for_new_room(l, "img", image.metadata.as_deref(), &[]).merged, image)
}

#[test]
fn the_daemon_is_the_main_process_as_root_under_init_restarting_unless_stopped() {
    let (_d, l) = loaded(r#"{"image": "img", "containerUser": "dev"}"#);
    let p = plan("room", "img", &l, &ImageFacts::default()).unwrap();
    assert_eq!(p.body.entrypoint.as_deref(), Some(&["/.workroom/bin/workroomd".to_string(), "serve".into()][..]));
    assert_eq!(p.body.cmd.as_deref(), Some(&[][..]), "the image's CMD must not reach the daemon");
    assert_eq!(p.body.user.as_deref(), Some("0"));
    let host = p.body.host_config.unwrap();
    assert_eq!(host.init, Some(true));
    assert_eq!(host.restart_policy.unwrap().name, Some(bollard::models::RestartPolicyNameEnum::UNLESS_STOPPED));
    assert_eq!(host.privileged, Some(false));
}

#[test]
fn the_remote_user_falls_back_from_remote_to_container_to_image_to_root() {
    let (_d, l) = loaded(r#"{"image": "i", "remoteUser": "r", "containerUser": "c"}"#);
    assert_eq!(remote_user_of(&l, &image_user("img")), "r");
    let (_d, l) = loaded(r#"{"image": "i", "containerUser": "c"}"#);
    assert_eq!(remote_user_of(&l, &image_user("img")), "c");
    let (_d, l) = loaded(r#"{"image": "i"}"#);
    assert_eq!(remote_user_of(&l, &image_user("img")), "img");
    assert_eq!(remote_user_of(&l, &ImageFacts::default()), "root");
}

#[test]
fn override_command_false_hands_the_image_program_to_the_daemon_as_the_container_user() {
    let (_d, l) = loaded(r#"{"image": "i", "overrideCommand": false}"#);
    let facts = ImageFacts {
        user: Some("dev".into()),
        entrypoint: vec!["/init".into()],
        cmd: vec!["run".into()],
        ..Default::default()
    };
    let p = plan("room", "i", &l, &facts).unwrap();
    assert_eq!(
        p.body.entrypoint.unwrap(),
        ["/.workroom/bin/workroomd", "serve", "--program-user", "dev", "--", "/init", "run"]
    );
}

#[test]
fn the_image_program_starts_in_the_images_workdir_while_the_container_stays_at_the_root() {
    let (_d, l) = loaded(r#"{"image": "i", "overrideCommand": false}"#);
    let facts = ImageFacts { cmd: vec!["serve".into()], working_dir: Some("/srv/app".into()), ..Default::default() };
    let p = plan("room", "i", &l, &facts).unwrap();
    assert_eq!(
        p.body.entrypoint.unwrap(),
        ["/.workroom/bin/workroomd", "serve", "--program-cwd", "/srv/app", "--", "serve"]
    );
    assert_eq!(p.body.working_dir.as_deref(), Some("/"));
}

#[test]
fn the_image_program_does_not_run_by_default() {
    let (_d, l) = loaded(r#"{"image": "i"}"#);
    let facts = ImageFacts { entrypoint: vec!["/init".into()], ..Default::default() };
    assert_eq!(plan("room", "i", &l, &facts).unwrap().body.entrypoint.unwrap().len(), 2);
}

#[test]
fn the_workspace_and_config_mounts_become_engine_mounts_and_named_volumes_are_listed() {
    let (d, l) = loaded(
        r#"{"image": "i", "mounts": ["source=cache,target=/cache,type=volume", {"type": "bind", "source": "/etc/hosts", "target": "/h"}]}"#,
    );
    let p = plan("room", "i", &l, &ImageFacts::default()).unwrap();
    let mounts = p.body.host_config.unwrap().mounts.unwrap();
    assert_eq!(mounts.len(), 3);
    assert_eq!(mounts[0].source.as_deref(), Some(d.path().to_str().unwrap()));
    assert_eq!(mounts[0].typ, Some(bollard::models::MountType::BIND));
    assert_eq!(mounts[1].typ, Some(bollard::models::MountType::VOLUME));
    assert_eq!(p.named_volumes, ["cache"]);
}

#[test]
fn a_workspace_folder_outside_the_workspace_mount_is_a_warning_naming_both_paths() {
    let (d, l) = loaded(r#"{"image": "i", "workspaceFolder": "/w"}"#);
    let p = plan("room", "i", &l, &ImageFacts::default()).unwrap();
    let target = format!("/workspaces/{}", d.path().file_name().unwrap().to_str().unwrap());
    let said: Vec<_> = p.warnings.iter().filter(|w| w.contains("workspaceFolder")).collect();
    assert_eq!(said.len(), 1, "{:?}", p.warnings);
    assert!(said[0].contains("`workspaceFolder` /w is not inside the workspace mount"), "{}", said[0]);
    assert!(said[0].contains(&target), "{} names {target}", said[0]);

    // Inside the mount, or inside another mount, or with no workspace mount
    // (the image's own folder): nothing to say.
    for config in [
        r#"{"image": "i"}"#.to_string(),
        r#"{"image": "i", "workspaceFolder": "/workspaces/${localWorkspaceFolderBasename}/sub"}"#.into(),
        r#"{"image": "i", "workspaceFolder": "/data/x", "mounts": ["source=v,target=/data,type=volume"]}"#.into(),
        r#"{"image": "i", "workspaceFolder": "/app", "workspaceMount": ""}"#.into(),
    ] {
        let (_d, l) = loaded(&config);
        let p = plan("room", "i", &l, &ImageFacts::default()).unwrap();
        assert!(!p.warnings.iter().any(|w| w.contains("workspaceFolder")), "{config}: {:?}", p.warnings);
    }
    // A folder beside the mount that only shares its prefix is outside it.
    let (_d, l) = loaded(r#"{"image": "i", "workspaceFolder": "/workspaces/${localWorkspaceFolderBasename}-other"}"#);
    let p = plan("room", "i", &l, &ImageFacts::default()).unwrap();
    assert!(p.warnings.iter().any(|w| w.contains("workspaceFolder")), "{:?}", p.warnings);
}

#[test]
fn container_env_cap_add_and_security_opt_reach_the_request() {
    let (_d, l) = loaded(
        r#"{"image": "i", "containerEnv": {"A": "1"}, "capAdd": ["SYS_PTRACE"], "securityOpt": ["seccomp=unconfined"],
            "runArgs": ["--cap-add=NET_ADMIN", "-e", "B=2"], "privileged": true}"#,
    );
    let p = plan("room", "i", &l, &ImageFacts::default()).unwrap();
    assert_eq!(p.body.env.unwrap(), ["A=1", "B=2"]);
    let host = p.body.host_config.unwrap();
    assert_eq!(host.cap_add.unwrap(), ["SYS_PTRACE", "NET_ADMIN"]);
    assert_eq!(host.security_opt.unwrap(), ["seccomp=unconfined"]);
    assert_eq!(host.privileged, Some(true));
}

#[test]
fn app_port_numbers_publish_on_loopback_only() {
    let (_d, l) = loaded(r#"{"image": "i", "appPort": [3000, "8080:80"]}"#);
    let host = plan("room", "i", &l, &ImageFacts::default()).unwrap().body.host_config.unwrap();
    let b = host.port_bindings.unwrap();
    let p3000 = b["3000/tcp"].as_ref().unwrap();
    assert_eq!(p3000[0].host_ip.as_deref(), Some("127.0.0.1"));
    assert_eq!(b["80/tcp"].as_ref().unwrap()[0].host_port.as_deref(), Some("8080"));
}

#[test]
fn an_unsupported_run_arg_is_refused_naming_the_config_and_flag() {
    let (_d, l) = loaded(r#"{"image": "i", "runArgs": ["--cidfile", "/tmp/id"]}"#);
    let err = plan("room", "i", &l, &ImageFacts::default()).unwrap_err().to_string();
    assert!(err.contains(".devcontainer.json: runArgs: `--cidfile` cannot apply to a room: "), "{err}");
}

#[test]
fn run_args_rm_and_name_are_not_refused_and_each_gets_a_warning_that_the_room_keeps_its_own_name_and_life() {
    let (_d, l) = loaded(r#"{"image": "i", "runArgs": ["--rm", "--name", "mine"]}"#);
    let p = plan("workroom-room", "i", &l, &ImageFacts::default()).unwrap();
    assert_eq!(p.name, "workroom-room", "the room keeps the name workroom gives it");
    assert!(p.warnings.iter().any(|w| w.starts_with("runArgs: `--rm` is ignored: ")), "{:?}", p.warnings);
    assert!(
        p.warnings
            .iter()
            .any(|w| w.starts_with("runArgs: `--name mine` is ignored: the room keeps its name workroom-room")),
        "{:?}",
        p.warnings
    );
}

#[test]
fn a_read_only_room_keeps_its_daemon_folder_on_a_volume_and_its_tmpfs() {
    let (_d, l) = loaded(r#"{"image": "i", "runArgs": ["--read-only", "--tmpfs", "/tmp"]}"#);
    let host = plan("room", "i", &l, &ImageFacts::default()).unwrap().body.host_config.unwrap();
    assert_eq!(host.readonly_rootfs, Some(true));
    assert_eq!(host.tmpfs, Some(HashMap::from([("/tmp".to_string(), String::new())])));
    let daemon_folder = host.mounts.unwrap().into_iter().find(|m| m.target.as_deref() == Some("/.workroom")).unwrap();
    assert_eq!((daemon_folder.typ, daemon_folder.source), (Some(bollard::models::MountType::VOLUME), None));
    let p = plan("room", "i", &l, &ImageFacts::default()).unwrap();
    assert_eq!(p.upload_folder(), "/.workroom");
    let (_d, l) = loaded(r#"{"image": "i"}"#);
    assert_eq!(plan("room", "i", &l, &ImageFacts::default()).unwrap().upload_folder(), "/");
}

#[test]
fn run_args_reach_the_request_beside_the_rooms_own_settings() {
    let (_d, l) = loaded(
        r#"{"image": "i", "overrideCommand": false, "runArgs": ["--restart=no", "-w", "/src", "--ulimit", "nofile=10",
            "--net", "n1", "--ip=10.0.0.9", "--platform", "linux/arm64", "--entrypoint", "/app", "--expose", "7"],
            "appPort": [3000]}"#,
    );
    let facts = ImageFacts { entrypoint: vec!["/init".into()], cmd: vec!["run".into()], ..Default::default() };
    let p = plan("room", "i", &l, &facts).unwrap();
    assert_eq!(p.platform.as_deref(), Some("linux/arm64"));
    assert_eq!(p.body.entrypoint.unwrap(), ["/.workroom/bin/workroomd", "serve", "--", "/app"]);
    assert_eq!(p.body.working_dir.as_deref(), Some("/src"));
    assert_eq!(p.body.exposed_ports.unwrap(), ["7/tcp", "3000/tcp"]);
    let endpoints = p.body.networking_config.unwrap().endpoints_config.unwrap();
    assert_eq!(endpoints["n1"].ipam_config.as_ref().unwrap().ipv4_address.as_deref(), Some("10.0.0.9"));
    let host = p.body.host_config.unwrap();
    assert_eq!(host.init, Some(true));
    assert_eq!(host.restart_policy.unwrap().name, Some(bollard::models::RestartPolicyNameEnum::NO));
    assert_eq!(host.network_mode.as_deref(), Some("n1"));
    assert_eq!(host.ulimits.unwrap()[0].hard, Some(10));
}

#[test]
fn a_bad_mount_names_its_property() {
    let (_d, l) = loaded(r#"{"image": "i", "mounts": ["type=bind,target=/x"]}"#);
    let err = plan("room", "i", &l, &ImageFacts::default()).unwrap_err().to_string();
    assert!(err.contains("`mounts[0]`: mount \"type=bind,target=/x\": a bind mount needs a source"), "{err}");
}

#[test]
fn labels_let_the_reference_cli_find_the_room() {
    let (d, l) = loaded(r#"{"image": "i", "remoteUser": "dev", "postCreateCommand": "make"}"#);
    let p = plan("room", "i", &l, &ImageFacts::default()).unwrap();
    let labels = p.body.labels.unwrap();
    assert_eq!(labels[labels::LOCAL_FOLDER], d.path().to_str().unwrap());
    assert_eq!(labels[labels::CONFIG_FILE], d.path().join(".devcontainer.json").to_str().unwrap());
    let meta: serde_json::Value = serde_json::from_str(&labels[labels::METADATA]).unwrap();
    assert_eq!(meta[0]["remoteUser"], "dev");
    assert_eq!(meta[0]["postCreateCommand"], "make");
    assert_eq!(labels[labels::SCHEMA], labels::SCHEMA_VERSION);
}

#[test]
fn the_config_hash_changes_with_the_config_and_not_otherwise() {
    let (_d1, a) = loaded(r#"{"image": "i"}"#);
    let (_d2, b) = loaded(r#"{"image": "j"}"#);
    assert_eq!(labels::config_hash(&a), labels::config_hash(&a.clone()));
    assert_ne!(labels::config_hash(&a), labels::config_hash(&b));
}

#[test]
fn a_peer_room_joins_the_anchor_and_a_room_without_peers_does_not() {
    use super::create::plan_with_peers;
    use super::peers::{PeerJoin, PEER_LABEL, SOCKS_DIR};
    let (_d, l) = loaded(r#"{"image": "img", "remoteUser": "dev"}"#);
    let j = PeerJoin { anchor: "anc".into(), volume: "vol".into(), registry: "/r".into(), home: "/home/dev".into() };
    let metadata = for_new_room(&l, "img", None, &[]);
    let p = plan_with_peers(
        &l,
        &crate::plan::create::Inputs {
            peer: Some(&j),
            ..crate::plan::create::Inputs::of("room", "img", &ImageFacts::default(), &metadata)
        },
    )
    .unwrap();
    let host = p.body.host_config.as_ref().unwrap();
    assert_eq!(host.pid_mode.as_deref(), Some("container:anc"));
    assert_eq!(host.init, Some(false), "the engine inserts no docker-init into a shared PID namespace");
    let targets: Vec<_> = host.mounts.iter().flatten().filter_map(|m| m.target.as_deref()).collect();
    assert!(targets.contains(&SOCKS_DIR) && targets.contains(&"/home/dev/.claude"), "{targets:?}");
    assert_eq!(p.body.labels.as_ref().unwrap().get(PEER_LABEL).map(String::as_str), Some("1"));
    let p = plan_with_peers(&l, &crate::plan::create::Inputs::of("room", "img", &ImageFacts::default(), &metadata))
        .unwrap();
    assert_eq!(p.body.host_config.as_ref().unwrap().pid_mode, None);
    assert_eq!(p.body.labels.as_ref().unwrap().get(PEER_LABEL).map(String::as_str), Some("0"));
}

#[test]
fn a_peer_rooms_agents_keep_their_state_in_the_groups_folder_unless_the_config_says_otherwise() {
    use super::create::plan_with_peers;
    use super::peers::PeerJoin;
    let j = PeerJoin { anchor: "anc".into(), volume: "vol".into(), registry: "/r".into(), home: "/home/dev".into() };
    let env_of = |config: &str, peer: Option<&PeerJoin>| {
        let (_d, l) = loaded(config);
        let metadata = for_new_room(&l, "img", None, &[]);
        let p = plan_with_peers(
            &l,
            &crate::plan::create::Inputs {
                peer,
                ..crate::plan::create::Inputs::of("room", "img", &ImageFacts::default(), &metadata)
            },
        )
        .unwrap();
        (p.body.env.unwrap_or_default(), p.warnings)
    };
    let (env, warnings) = env_of(r#"{"image": "img", "remoteUser": "dev"}"#, Some(&j));
    assert!(env.contains(&"CLAUDE_CONFIG_DIR=/home/dev/.claude".to_string()), "{env:?}");
    assert!(env.contains(&"CODEX_HOME=/home/dev/.claude/codex".to_string()), "{env:?}");
    assert!(warnings.is_empty(), "{warnings:?}");
    let (env, _) = env_of(r#"{"image": "img", "remoteUser": "dev"}"#, None);
    assert!(!env.iter().any(|e| e.starts_with("CLAUDE_CONFIG_DIR=") || e.starts_with("CODEX_HOME=")), "{env:?}");

    // The user's own, from containerEnv, remoteEnv or `runArgs -e`, wins.
    for config in [
        r#"{"image": "img", "containerEnv": {"CLAUDE_CONFIG_DIR": "/mine"}}"#,
        r#"{"image": "img", "remoteEnv": {"CLAUDE_CONFIG_DIR": "/mine"}}"#,
        r#"{"image": "img", "runArgs": ["-e", "CLAUDE_CONFIG_DIR=/mine"]}"#,
    ] {
        let (env, warnings) = env_of(config, Some(&j));
        assert!(!env.contains(&"CLAUDE_CONFIG_DIR=/home/dev/.claude".to_string()), "{config}: {env:?}");
        assert!(env.contains(&"CODEX_HOME=/home/dev/.claude/codex".to_string()), "{config}: {env:?}");
        assert!(warnings.iter().any(|w| w.contains("peers may not see each other")), "{config}: {warnings:?}");
    }
    let (env, warnings) = env_of(r#"{"image": "img", "containerEnv": {"CODEX_HOME": "/c"}}"#, Some(&j));
    assert!(env.contains(&"CODEX_HOME=/c".to_string()) && !env.iter().any(|e| e.starts_with("CODEX_HOME=/home")));
    assert!(warnings.is_empty(), "{warnings:?}");
}

// ---------------------------------------------------------------------------
// the image's devcontainer.metadata, applied

fn labelled(label: serde_json::Value) -> ImageFacts {
    ImageFacts { metadata: Some(label.to_string()), ..Default::default() }
}

#[test]
fn the_image_metadata_shapes_the_create_request_under_devcontainer_json() {
    let (_d, l) = loaded(
        r#"{"image": "i", "containerEnv": {"A": "config"}, "capAdd": ["NET_ADMIN"], "runArgs": ["--cap-add=SYS_NICE"],
            "mounts": ["type=volume,source=config,target=/data"]}"#,
    );
    let facts = labelled(serde_json::json!([
        {"containerEnv": {"A": "image", "B": "image"}, "capAdd": ["SYS_PTRACE"], "securityOpt": ["seccomp=unconfined"],
         "mounts": ["type=volume,source=image,target=/data", "type=volume,source=img-cache,target=/cache"],
         "remoteUser": "dev"},
    ]));
    let p = plan("room", "i", &l, &facts).unwrap();
    assert_eq!(p.remote_user, "dev");
    assert_eq!(p.body.env.as_deref().unwrap(), ["A=config", "B=image"]);
    let host = p.body.host_config.unwrap();
    assert_eq!(host.cap_add.unwrap(), ["SYS_PTRACE", "NET_ADMIN", "SYS_NICE"]);
    assert_eq!(host.security_opt.unwrap(), ["seccomp=unconfined"]);
    let mounts: Vec<(Option<String>, Option<String>)> =
        host.mounts.unwrap().into_iter().skip(1).map(|m| (m.source, m.target)).collect();
    assert_eq!(
        mounts,
        [(Some("img-cache".into()), Some("/cache".into())), (Some("config".into()), Some("/data".into()))],
        "by target, devcontainer.json's wins"
    );
    assert_eq!(p.named_volumes, ["img-cache", "config"]);
    assert_eq!(
        p.warnings,
        [
            "image metadata widens room: capability SYS_PTRACE (asked by image i), security option seccomp=unconfined (asked by image i)"
        ]
    );
}

#[test]
fn metadata_entrypoints_are_handed_to_the_daemon_in_order_before_the_image_program() {
    let (_d, l) = loaded(r#"{"image": "i", "overrideCommand": false}"#);
    let facts = ImageFacts {
        entrypoint: vec!["/init".into()],
        ..labelled(serde_json::json!([{"entrypoint": "/a.sh"}, {"id": "f", "entrypoint": "/b.sh --x"}]))
    };
    let p = plan("room", "i", &l, &facts).unwrap();
    assert_eq!(
        p.body.entrypoint.unwrap(),
        ["/.workroom/bin/workroomd", "serve", "--entrypoint", "/a.sh", "--entrypoint", "/b.sh --x", "--", "/init"]
    );
}

#[test]
fn override_command_and_the_container_user_may_come_from_the_image_metadata() {
    let (_d, l) = loaded(r#"{"image": "i"}"#);
    let facts = ImageFacts {
        entrypoint: vec!["/init".into()],
        ..labelled(serde_json::json!({"overrideCommand": false, "containerUser": "svc"}))
    };
    let p = plan("room", "i", &l, &facts).unwrap();
    assert_eq!(p.remote_user, "svc");
    assert_eq!(
        p.body.entrypoint.unwrap(),
        ["/.workroom/bin/workroomd", "serve", "--program-user", "svc", "--", "/init"]
    );
}

#[test]
fn privileged_from_the_image_metadata_is_applied_with_a_loud_line_unless_the_setting_refuses_it() {
    use super::create::plan_with_peers;
    let (_d, l) = loaded(r#"{"image": "i"}"#);
    let facts = labelled(serde_json::json!([{"id": "docker-in-docker", "privileged": true}]));
    let p = plan("room", "i", &l, &facts).unwrap();
    assert_eq!(p.body.host_config.unwrap().privileged, Some(true));
    assert!(
        p.warnings[0].contains("room runs PRIVILEGED because feature docker-in-docker asks for it"),
        "{:?}",
        p.warnings
    );
    let metadata = for_new_room(&l, "i", facts.metadata.as_deref(), &[]);
    let p = plan_with_peers(
        &l,
        &crate::plan::create::Inputs {
            metadata_privileged: false,
            ..crate::plan::create::Inputs::of("room", "i", &facts, &metadata)
        },
    )
    .unwrap();
    assert_eq!(p.body.host_config.unwrap().privileged, Some(false));
    assert!(p.warnings[0].contains("not applied"), "{:?}", p.warnings);
}

#[test]
fn a_bad_mount_from_the_image_metadata_is_a_warning_and_not_mounted() {
    let (_d, l) = loaded(r#"{"image": "i"}"#);
    let facts = labelled(serde_json::json!([{"mounts": ["type=nfs,target=/x", "type=volume,source=v,target=/v"]}]));
    let p = plan("room", "i", &l, &facts).unwrap();
    assert_eq!(p.named_volumes, ["v"]);
    assert!(
        p.warnings.iter().any(|w| w.contains("type=nfs,target=/x") && w.contains("not mounted")),
        "{:?}",
        p.warnings
    );
}

#[test]
fn the_room_label_records_the_image_entries_then_devcontainer_json() {
    let (_d, l) = loaded(r#"{"image": "i", "postCreateCommand": "make"}"#);
    let facts = labelled(serde_json::json!([{"id": "f", "remoteUser": "dev"}]));
    let labels = plan("room", "i", &l, &facts).unwrap().body.labels.unwrap();
    let meta: serde_json::Value = serde_json::from_str(&labels[labels::METADATA]).unwrap();
    assert_eq!(meta, serde_json::json!([{"id": "f", "remoteUser": "dev"}, {"postCreateCommand": "make"}]));
}
