//! Table tests of the reference's merge, the label and what the room takes
//! from them, over real configuration files.

use super::*;
use crate::config::{load, LoadRequest};
use serde_json::json;
use std::collections::HashMap;

fn loaded(config: &str) -> (tempfile::TempDir, Loaded) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(".devcontainer.json"), config).unwrap();
    let env = HashMap::from([("WR_HOST_VAR".to_string(), "from-host".to_string())]);
    let l = load(&LoadRequest { env, ..LoadRequest::new(dir.path(), None) }).unwrap();
    (dir, l)
}

fn entries(values: &[Value]) -> Vec<Entry> {
    values.iter().map(|v| v.as_object().unwrap().clone()).collect()
}

/// The merged configuration of bare entries on an empty config.
fn merge(values: &[Value]) -> Map<String, Value> {
    let e = entries(values);
    merged_configuration(&Map::new(), &e.iter().collect::<Vec<_>>())
}

#[test]
fn the_label_is_an_array_or_a_single_object_and_anything_else_is_an_error() {
    assert_eq!(parse_label(r#"[{"a": 1}, {"b": 2}]"#).unwrap(), [json!({"a": 1}), json!({"b": 2})]);
    assert_eq!(parse_label(r#"{"a": 1}"#).unwrap(), [json!({"a": 1})]);
    assert_eq!(parse_label("").unwrap(), Vec::<Value>::new());
    assert!(matches!(parse_label("[{"), Err(LabelError::Json(_))));
    assert_eq!(parse_label("42"), Err(LabelError::Shape("a number")));
    assert_eq!(parse_label(r#""x""#), Err(LabelError::Shape("a string")));
}

#[test]
fn each_property_merges_by_the_reference_rule() {
    // (entries in order, property, merged value; null: absent)
    let table: Vec<(Vec<Value>, &str, Value)> = vec![
        (vec![json!({"init": false}), json!({"init": true}), json!({})], "init", json!(true)),
        (vec![json!({}), json!({})], "init", json!(false)),
        (vec![json!({"privileged": true}), json!({"privileged": false})], "privileged", json!(true)),
        (vec![json!({})], "privileged", json!(false)),
        (vec![json!({"capAdd": ["A", "B"]}), json!({"capAdd": ["B", "C"]})], "capAdd", json!(["A", "B", "C"])),
        (vec![json!({})], "capAdd", Value::Null),
        (vec![json!({"securityOpt": ["x"]}), json!({"securityOpt": ["x"]})], "securityOpt", json!(["x"])),
        (
            vec![json!({"containerEnv": {"A": "1", "B": "1"}}), json!({"containerEnv": {"B": "2", "C": "2"}})],
            "containerEnv",
            json!({"A": "1", "B": "2", "C": "2"}),
        ),
        (vec![json!({})], "containerEnv", json!({})),
        (vec![json!({"remoteEnv": {"P": "1"}}), json!({"remoteEnv": {"P": null}})], "remoteEnv", json!({"P": null})),
        (vec![json!({"remoteUser": "a"}), json!({"remoteUser": "b"}), json!({})], "remoteUser", json!("b")),
        // An empty string sets nothing (the reference tests truthiness).
        (vec![json!({"remoteUser": "a"}), json!({"remoteUser": ""})], "remoteUser", json!("a")),
        (vec![json!({"containerUser": "a"}), json!({"containerUser": "b"})], "containerUser", json!("b")),
        (vec![json!({})], "remoteUser", Value::Null),
        (vec![json!({"userEnvProbe": "none"}), json!({})], "userEnvProbe", json!("none")),
        (vec![json!({"waitFor": "postStartCommand"})], "waitFor", json!("postStartCommand")),
        // The last boolean, false included.
        (
            vec![json!({"overrideCommand": true}), json!({"overrideCommand": false}), json!({})],
            "overrideCommand",
            json!(false),
        ),
        (
            vec![json!({"updateRemoteUserUID": false}), json!({"updateRemoteUserUID": true})],
            "updateRemoteUserUID",
            json!(true),
        ),
        (vec![json!({"entrypoint": "/a"}), json!({}), json!({"entrypoint": "/b"})], "entrypoints", json!(["/a", "/b"])),
        (vec![json!({})], "entrypoints", Value::Null),
        (
            vec![
                json!({"postCreateCommand": "a"}),
                json!({"postCreateCommand": ["b"]}),
                json!({"postCreateCommand": ""}),
            ],
            "postCreateCommands",
            json!(["a", ["b"]]),
        ),
        (vec![json!({})], "onCreateCommands", json!([])),
        (vec![json!({"shutdownAction": "none"}), json!({})], "shutdownAction", json!("none")),
        (
            vec![json!({"portsAttributes": {"1": {"label": "a"}}}), json!({"portsAttributes": {"1": {"label": "b"}}})],
            "portsAttributes",
            json!({"1": {"label": "b"}}),
        ),
        (
            vec![json!({"otherPortsAttributes": {"onAutoForward": "silent"}}), json!({})],
            "otherPortsAttributes",
            json!({"onAutoForward": "silent"}),
        ),
        (
            vec![
                json!({"customizations": {"vscode": {"a": 1}, "x": 1}}),
                json!({"customizations": {"vscode": {"b": 2}}}),
            ],
            "customizations",
            json!({"vscode": [{"a": 1}, {"b": 2}], "x": [1]}),
        ),
        (vec![json!({})], "customizations", Value::Null),
    ];
    for (values, property, expected) in table {
        let merged = merge(&values);
        assert_eq!(merged.get(property).cloned().unwrap_or(Value::Null), expected, "{property} of {values:?}");
    }
}

#[test]
fn mounts_merge_by_target_and_the_later_keeps_its_own_place() {
    let merged = merge(&[
        json!({"mounts": ["type=volume,source=a,target=/one", {"type": "bind", "source": "/h", "target": "/two"}]}),
        json!({"mounts": ["type=volume,src=b,dst=/one", "source=c,destination=/three,type=volume"]}),
        json!({"mounts": [{"type": "volume", "source": "d", "target": "/two"}]}),
    ]);
    assert_eq!(
        merged["mounts"],
        json!([
            "type=volume,src=b,dst=/one",
            "source=c,destination=/three,type=volume",
            {"type": "volume", "source": "d", "target": "/two"},
        ])
    );
}

#[test]
fn forward_ports_are_one_union_whether_written_as_numbers_or_localhost_strings() {
    let merged = merge(&[
        json!({"forwardPorts": [3000, "db:5432"]}),
        json!({"forwardPorts": ["localhost:3000", 8080, "db:5432", "localhost:9000"]}),
    ]);
    assert_eq!(merged["forwardPorts"], json!([3000, "db:5432", 8080, 9000]));
    // The reference's unanchored test: `x.localhost:1` is read after its
    // tenth character, where no digit is: null.
    assert_eq!(merge(&[json!({"forwardPorts": ["x.localhost:1"]})])["forwardPorts"], json!([null]));
}

#[test]
fn host_requirements_take_the_largest_of_each_in_bytes() {
    let merged = merge(&[
        json!({"hostRequirements": {"cpus": 2, "memory": "4gb", "gpu": "optional"}}),
        json!({"hostRequirements": {"cpus": 1, "memory": "8gb", "storage": "32gb"}}),
    ]);
    assert_eq!(
        merged["hostRequirements"],
        json!({"cpus": 2, "memory": "8589934592", "storage": "34359738368", "gpu": "optional"})
    );
    let gpus = merge(&[
        json!({"hostRequirements": {"gpu": {"cores": 2, "memory": "1gb"}}}),
        json!({"hostRequirements": {"gpu": true}}),
    ]);
    assert_eq!(gpus["hostRequirements"], json!({"cpus": 0, "gpu": {"cores": 2, "memory": "1073741824"}}));
    assert_eq!(merge(&[json!({"hostRequirements": {"memory": "4GB"}})]).get("hostRequirements"), None);
    // The reference's maximum of nothing: what it prints with no entries at all.
    assert_eq!(merge(&[])["hostRequirements"], json!({"cpus": null, "memory": "-Infinity", "storage": "-Infinity"}));
}

#[test]
fn the_merged_configuration_keeps_the_config_but_replaces_what_the_merge_collects() {
    let config = json!({
        "image": "i", "postCreateCommand": "make", "customizations": {"vscode": {}}, "shutdownAction": "none",
        "remoteUser": "", "initializeCommand": "true", "features": {},
    });
    let config = config.as_object().unwrap();
    let own = config_pick(config);
    let merged = merged_configuration(config, &[&own]);
    assert_eq!(merged["image"], "i");
    assert_eq!(merged["initializeCommand"], "true", "initializeCommand is the config's alone");
    assert_eq!(merged["features"], json!({}));
    assert_eq!(merged.get("postCreateCommand"), None);
    assert_eq!(merged["postCreateCommands"], json!(["make"]));
    assert_eq!(merged["customizations"], json!({"vscode": [{}]}));
    assert_eq!(merged["shutdownAction"], "none");
    assert_eq!(merged.get("remoteUser"), None, "an empty remoteUser merges to nothing, and is dropped");
}

fn config_pick(config: &Map<String, Value>) -> Entry {
    CONFIG_PROPERTIES.iter().filter_map(|k| config.get(*k).map(|v| (k.to_string(), v.clone()))).collect()
}

#[test]
fn hooks_run_the_image_and_features_before_devcontainer_json_each_with_its_origin() {
    let (_d, l) = loaded(r#"{"image": "i", "postCreateCommand": "own", "postStartCommand": ["echo", "own"]}"#);
    let label = json!([
        {"postCreateCommand": "image's"},
        {"id": "ghcr.io/x/feature:1", "postCreateCommand": {"a": "one", "b": ["two"]}, "onCreateCommand": ""},
    ])
    .to_string();
    let m = for_new_room(&l, "img:1", Some(&label), &[]);
    let post_create: Vec<(String, Command)> =
        m.merged.hook(Hook::PostCreate).iter().map(|h| (h.origin.to_string(), h.command.clone())).collect();
    assert_eq!(
        post_create,
        [
            ("image img:1".to_string(), Command::Shell("image's".into())),
            (
                "feature ghcr.io/x/feature:1".to_string(),
                Command::Parallel(vec![
                    ("a".into(), Command::Shell("one".into())),
                    ("b".into(), Command::Exec(vec!["two".into()])),
                ])
            ),
            ("devcontainer.json".to_string(), Command::Shell("own".into())),
        ]
    );
    assert_eq!(m.merged.hook(Hook::OnCreate), [], "an empty command is nothing to run");
    assert_eq!(m.merged.hook(Hook::PostStart).len(), 1);
}

#[test]
fn what_the_room_applies_merges_the_image_label_under_devcontainer_json() {
    let (_d, l) = loaded(
        r#"{"image": "i", "containerEnv": {"A": "config"}, "capAdd": ["NET_ADMIN"], "remoteEnv": {"R": "${localEnv:WR_HOST_VAR}"},
            "mounts": [{"type": "volume", "source": "config", "target": "/data"}]}"#,
    );
    let label = json!([{
        "containerEnv": {"A": "image", "B": "image"},
        "capAdd": ["SYS_PTRACE"],
        "securityOpt": ["seccomp=unconfined"],
        "remoteUser": "dev",
        "containerUser": "dev",
        "userEnvProbe": "loginShell",
        "updateRemoteUserUID": false,
        "overrideCommand": false,
        "entrypoint": "/usr/local/share/start.sh",
        "mounts": ["type=volume,source=image,target=/data", "type=volume,source=cache-${devcontainerId},target=/cache"],
    }])
    .to_string();
    let m = for_new_room(&l, "img", Some(&label), &[]).merged;
    assert_eq!(m.container_env, [("A".to_string(), "config".to_string()), ("B".into(), "image".into())]);
    assert_eq!(m.cap_add, ["SYS_PTRACE", "NET_ADMIN"]);
    assert_eq!(m.security_opt, ["seccomp=unconfined"]);
    assert_eq!((m.remote_user.as_deref(), m.container_user.as_deref()), (Some("dev"), Some("dev")));
    assert_eq!(m.user_env_probe, Some(UserEnvProbe::LoginShell));
    assert_eq!((m.update_remote_user_uid, m.override_command), (Some(false), Some(false)));
    assert_eq!(m.entrypoints, ["/usr/local/share/start.sh"]);
    assert_eq!(m.remote_env, [("R".to_string(), Some("from-host".to_string()))]);
    // The image's variables get the config's passes, `${devcontainerId}` included.
    assert_eq!(
        m.mounts,
        [
            Mount::Spec(format!("type=volume,source=cache-{},target=/cache", l.devcontainer_id)),
            Mount::Object {
                kind: "volume".into(),
                source: Some("config".into()),
                target: "/data".into(),
                external: None
            },
        ]
    );
}

#[test]
fn a_malformed_label_or_property_is_a_warning_naming_the_image_and_is_left_out() {
    let (_d, l) = loaded(r#"{"image": "i", "remoteUser": "own"}"#);
    let m = for_new_room(&l, "img:bad", Some("[{"), &[]);
    assert_eq!(m.warnings.len(), 1);
    assert!(
        m.warnings[0].starts_with("image img:bad: its devcontainer.metadata label is not JSON"),
        "{:?}",
        m.warnings
    );
    assert_eq!(m.entries.len(), 1, "devcontainer.json's entry alone");

    let label =
        json!([7, {"capAdd": "SYS_ADMIN", "privileged": "yes", "remoteUser": "img", "mounts": [{"target": "/x"}]}, {}]);
    let m = for_new_room(&l, "img:odd", Some(&label.to_string()), &[]);
    assert_eq!(
        m.warnings,
        [
            "image img:odd: devcontainer.metadata entry 1 is a number, not an object; ignored",
            "image img:odd: devcontainer.metadata entry 2: `capAdd` must be an array of strings, found a string; ignored",
            "image img:odd: devcontainer.metadata entry 2: `privileged` must be true or false, found a string; ignored",
            "image img:odd: devcontainer.metadata entry 2: `mounts` must be an array of mount strings or {\"type\", \"source\", \"target\"} objects, found an array; ignored",
        ]
    );
    assert!(m.merged.cap_add.is_empty() && m.merged.mounts.is_empty());
    assert_eq!(m.privileged("room", true), (false, None));
    assert_eq!(m.merged.remote_user.as_deref(), Some("own"), "the well-typed properties still merge");
    // The label keeps what the image wrote, for the reference to read as it would.
    let written: Value = serde_json::from_str(&m.label("own")).unwrap();
    assert_eq!(written[0]["capAdd"], "SYS_ADMIN");
}

#[test]
fn the_room_label_is_the_image_entries_then_devcontainer_json_as_written() {
    let (_d, l) =
        loaded(r#"{"image": "i", "postCreateCommand": "echo ${localWorkspaceFolderBasename}", "runArgs": ["-x"]}"#);
    let label = json!([{"id": "f", "remoteUser": "dev", "containerEnv": {"W": "${containerWorkspaceFolder}"}}]);
    let m = for_new_room(&l, "img", Some(&label.to_string()), &[]);
    let written: Value = serde_json::from_str(&m.label("dev")).unwrap();
    assert_eq!(
        written,
        json!([
            {"id": "f", "remoteUser": "dev", "containerEnv": {"W": "${containerWorkspaceFolder}"}},
            {"postCreateCommand": "echo ${localWorkspaceFolderBasename}"},
        ]),
        "unsubstituted, runArgs not recorded"
    );
}

#[test]
fn the_label_names_our_remote_user_when_no_entry_does_and_it_is_not_root() {
    let (_d, l) = loaded(r#"{"image": "i", "containerUser": "dev"}"#);
    let m = for_new_room(&l, "img", None, &[]);
    let written: Value = serde_json::from_str(&m.label("dev")).unwrap();
    assert_eq!(written, json!([{"containerUser": "dev", "remoteUser": "dev"}]));
    let (_d, l) = loaded(r#"{"image": "i"}"#);
    let m = for_new_room(&l, "img", None, &[]);
    assert_eq!(m.label("root"), "[]", "root is what the reference would take anyway");
    assert_eq!(m.label("dev"), r#"[{"remoteUser":"dev"}]"#);
}

#[test]
fn an_existing_room_reads_its_label_then_what_devcontainer_json_may_still_change() {
    let (_d, l) = loaded(r#"{"image": "i", "remoteEnv": {"R": "now"}, "postStartCommand": "new", "capAdd": ["NEW"]}"#);
    let label = json!([{"capAdd": ["OLD"], "remoteEnv": {"R": "then", "S": "then"}}, {"postStartCommand": "old"}]);
    let m = of_container(&l, "workroom-x", Some(&label.to_string()));
    assert_eq!(m.merged.cap_add, ["OLD"]);
    assert_eq!(m.merged.remote_env, [("R".to_string(), Some("now".to_string())), ("S".into(), Some("then".into()))]);
    let hooks: Vec<String> = m.merged.hook(Hook::PostStart).iter().map(|h| h.origin.to_string()).collect();
    assert_eq!(hooks, ["container workroom-x"]);
    // No label: devcontainer.json's whole entry.
    let m = of_container(&l, "workroom-x", None);
    assert_eq!(m.merged.cap_add, ["NEW"]);
}

#[test]
fn privileged_from_metadata_is_applied_loudly_or_refused_by_the_setting() {
    let (_d, l) = loaded(r#"{"image": "i"}"#);
    let label = json!([{"id": "ghcr.io/devcontainers/features/docker-in-docker:2", "privileged": true}]).to_string();
    let m = for_new_room(&l, "img", Some(&label), &[]);
    let (on, line) = m.privileged("workroom-r", true);
    let line = line.unwrap();
    assert!(on);
    assert!(line.contains("PRIVILEGED") && line.contains("feature ghcr.io/devcontainers/features/docker-in-docker:2"));
    assert!(line.contains("metadata_privileged = false"), "it says how to refuse: {line}");
    let (on, line) = m.privileged("workroom-r", false);
    assert!(!on);
    assert!(line.unwrap().contains("not applied"));
    // devcontainer.json's own word needs no line and no setting can refuse it.
    let (_d, l) = loaded(r#"{"image": "i", "privileged": true}"#);
    assert_eq!(for_new_room(&l, "img", Some(&label), &[]).privileged("r", false), (true, None));
    assert_eq!(for_new_room(&l, "img", None, &[]).privileged("r", true), (true, None));
}

#[test]
fn capabilities_metadata_adds_are_named_with_who_asked() {
    let (_d, l) = loaded(r#"{"image": "i", "capAdd": ["NET_ADMIN"]}"#);
    let label = json!([{"capAdd": ["SYS_PTRACE", "NET_ADMIN"]}, {"id": "f", "securityOpt": ["seccomp=unconfined"]}]);
    let m = for_new_room(&l, "img", Some(&label.to_string()), &[]);
    assert_eq!(
        m.widening(),
        ["capability SYS_PTRACE (asked by image img)", "security option seccomp=unconfined (asked by feature f)"]
    );
}

#[test]
fn feature_entries_merge_between_the_image_and_devcontainer_json() {
    let (_d, l) = loaded(r#"{"image": "i", "containerEnv": {"X": "config"}}"#);
    let label = json!([{"containerEnv": {"X": "image", "Y": "image"}}]).to_string();
    let feature = json!({"id": "./local", "containerEnv": {"X": "feature", "Y": "feature"}});
    let m = for_new_room(&l, "img", Some(&label), &[feature]);
    assert_eq!(m.merged.container_env, [("X".to_string(), "config".to_string()), ("Y".into(), "feature".into())]);
    let origins: Vec<String> = m.entries.iter().map(|s| s.origin.to_string()).collect();
    assert_eq!(origins, ["image img", "feature ./local", "devcontainer.json"]);
}
