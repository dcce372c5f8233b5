//! `workroom config` on the broken fixtures: each class of bad input is
//! refused with one line that names the file and the line:column or the
//! property, and exits 2. (The reference CLI accepts most of these silently.)

mod common;

use common::*;

fn config(case: &str) -> (i32, String) {
    let (code, err, _) = run_in_case("config", case);
    (code, err)
}

/// `workroom COMMAND --workspace-folder` on a broken fixture: exit code,
/// stderr and stdout.
fn run_in_case(command: &str, case: &str) -> (i32, String, String) {
    let folder = repo_root().join("fixtures/devcontainers/broken").join(case);
    let out = std::process::Command::new(workroom_bin())
        .args([command, "--workspace-folder"])
        .arg(&folder)
        .env("WORKROOM_SCOPE", "config-cli-no-room")
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), stderr(&out), stdout(&out))
}

fn refused_with(case: &str, fragments: &[&str]) {
    refused_by("config", case, fragments)
}

fn refused_by(command: &str, case: &str, fragments: &[&str]) {
    let (code, err, _) = run_in_case(command, case);
    assert_eq!(code, 2, "{case}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{case}: one line expected: {err}");
    let config_file = repo_root().join("fixtures/devcontainers/broken").join(case);
    assert!(err.contains(&config_file.display().to_string()), "{case}: names the file: {err}");
    for f in fragments {
        assert!(err.contains(f), "{case}: expected {f:?} in {err}");
    }
}

#[test]
fn a_missing_comma_is_refused_with_line_and_column() {
    refused_with("malformed-missing-comma", &["devcontainer.json:4:2: ", "comma"]);
}

#[test]
fn an_unclosed_object_is_refused_with_line_and_column() {
    refused_with("malformed-unclosed", &["devcontainer.json:5:11: ", "ends too early", "the object opened at 4:18"]);
}

#[test]
fn a_port_out_of_range_names_the_property_and_the_range() {
    refused_with("wrong-type-port", &["`forwardPorts[0]`", "1 to 65535", "70000"]);
}

#[test]
fn a_string_where_ports_belong_names_the_expected_type() {
    refused_with("wrong-type-forward-ports-string", &["`forwardPorts` must be an array of ports"]);
}

#[test]
fn a_non_string_env_value_names_the_variable() {
    refused_with("wrong-type-env", &["`containerEnv.PORT` must be a string, found the number 8080"]);
}

#[test]
fn feature_options_of_a_wrong_type_name_the_feature() {
    refused_with("wrong-type-feature-options", &["`features[\"./local-feature\"]` must be an object of options"]);
}

#[test]
fn up_refuses_a_missing_compose_file_naming_the_path_tried() {
    refused_by(
        "up",
        "compose-missing-file",
        &["`dockerComposeFile` names ", ".devcontainer/docker-compose.missing.yml, which does not exist"],
    );
}

#[test]
fn up_refuses_a_config_without_image_or_build_naming_the_properties() {
    refused_by("up", "no-image-or-build", &["no container source: set `image`, or `build.dockerfile`"]);
}

/// numpy/numpy's devcontainer.json names no image (Codespaces gives a
/// default one); the reference's read-configuration prints it, so `config`
/// does, while `up` refuses it (above).
#[test]
fn config_prints_a_config_with_no_image_as_the_reference_reads_it_instead_of_refusing() {
    let (code, err, out) = run_in_case("config", "no-image-or-build");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("source            none (no `image`, `build` or `dockerComposeFile`"), "{out}");
    let (code, err, out) = {
        let folder = repo_root().join("fixtures/devcontainers/broken/no-image-or-build");
        let out = std::process::Command::new(workroom_bin())
            .args(["config", "--json", "--workspace-folder"])
            .arg(&folder)
            .env("WORKROOM_SCOPE", "config-cli-no-room")
            .output()
            .unwrap();
        (out.status.code().unwrap_or(-1), stderr(&out), stdout(&out))
    };
    assert_eq!(code, 0, "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["configuration"]["name"], "no-image-or-build", "{json}");
    // The folder is under the repository's root, as the reference mounts it.
    let folder = json["workspace"]["workspaceFolder"].as_str().unwrap_or_default();
    assert!(folder.starts_with("/workspaces/") && folder.ends_with("/no-image-or-build"), "{json}");
}

/// A compose file named outside the workspace folder and not there (the
/// checkout holds only part of a project) is read by the reference.
#[test]
fn config_prints_a_config_whose_compose_file_is_not_there_instead_of_refusing() {
    let (code, err, out) = run_in_case("config", "compose-missing-file");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("compose service ") && out.contains("docker-compose.missing.yml"), "{out}");
}

#[test]
fn a_missing_dockerfile_is_refused_before_anything_is_made() {
    refused_with("missing-dockerfile", &["`build.dockerfile` names", "Does-Not-Exist.Dockerfile", "does not exist"]);
}

#[test]
fn a_missing_build_context_is_refused_before_anything_is_made() {
    refused_with("missing-context", &["`build.context` names", "no-such-context-dir"]);
}

#[test]
fn a_top_level_array_is_refused() {
    refused_with("not-an-object", &["`(top level)` must be an object"]);
}

#[test]
fn an_empty_file_is_refused_with_an_example() {
    refused_with("empty-file", &["the file is empty"]);
}

#[test]
fn a_variable_without_a_name_names_the_property() {
    refused_with("substitution-no-name", &["`containerEnv.X`", "${localEnv}"]);
}

#[test]
fn no_config_found_names_every_path_tried() {
    let (code, err) = config("no-config");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(".devcontainer/devcontainer.json") && err.contains("no-config/.devcontainer.json;"), "{err}");
    assert!(err.contains("--config FILE"), "{err}");
}

/// `workroom COMMAND --workspace-folder DIR` on a config of raw bytes.
fn run_on(command: &str, bytes: &[u8]) -> (i32, String, String) {
    let dir = tempfile::Builder::new().prefix("wr-config-").tempdir().unwrap();
    std::fs::write(dir.path().join(".devcontainer.json"), bytes).unwrap();
    let out = std::process::Command::new(workroom_bin())
        .args([command, "--workspace-folder"])
        .arg(dir.path())
        .env("WORKROOM_SCOPE", "config-cli-no-room")
        .output()
        .unwrap();
    let err = stderr(&out).replace(&dir.path().display().to_string(), "DIR");
    (out.status.code().unwrap_or(-1), err, stdout(&out))
}

#[test]
fn arrays_nested_100000_deep_are_refused_in_one_line_by_config_and_up_instead_of_aborting() {
    let text = format!("{{\"image\": \"x\", \"a\": {}{}}}", "[".repeat(100_000), "]".repeat(100_000));
    for command in ["config", "up"] {
        let (code, err, _) = run_on(command, text.as_bytes());
        assert_eq!(code, 2, "{command}: {err}");
        assert_eq!(
            err.trim_end(),
            "workroom: DIR/.devcontainer.json:1:148: nested deeper than 128 levels; \
             a devcontainer.json needs a handful (an unclosed `[` or `{` repeated?)",
            "{command}"
        );
    }
}

#[test]
fn a_byte_that_is_not_utf8_is_named_by_line_and_column_once() {
    let (code, err, _) = run_on("config", b"{\n  \"image\": \"x\xff\"\n}\n");
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.trim_end(), "workroom: DIR/.devcontainer.json:2:14: not UTF-8");
}

#[test]
fn an_unclosed_block_comment_points_where_it_opened_not_at_1_1() {
    let (code, err, _) = run_on("config", b"{\n  \"image\": \"x\", /* here\n  \"name\": \"a\"\n}\n");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("devcontainer.json:4:2: the file ends too early: the block comment opened at 2:17"), "{err}");
}

#[test]
fn a_key_given_twice_is_a_warning_naming_both_lines() {
    let (code, err, out) = run_on("config", b"{\n  \"image\": \"a\",\n  \"image\": \"b\"\n}\n");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("image b"), "{out}");
    assert_eq!(
        err.trim_end(),
        "warning: DIR/.devcontainer.json:3:3: `image` is also set at line 2; the last one is used"
    );
}

#[test]
fn json5_only_syntax_is_a_warning_that_the_reference_reads_the_file_differently() {
    let (code, err, _) = run_on("config", b"{\n  \"image\": \"a\",\n  \"x\": 0x10,\n  y: +1,\n  \"z\": 'q'\n}\n");
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("reads this file differently")).collect();
    assert_eq!(lines.len(), 4, "{err}");
    for (line, what) in [
        ("3:8", "a hexadecimal number"),
        ("4:3", "an unquoted key"),
        ("4:6", "a number with a leading `+`"),
        ("5:8", "a single-quoted string"),
    ] {
        let expected = format!("warning: DIR/.devcontainer.json:{line}: {what}");
        assert!(lines.iter().any(|l| l.starts_with(&expected)), "{expected:?} in {err}");
    }
}

#[test]
fn config_refuses_the_run_args_and_workspace_mount_that_up_refuses_with_the_same_line() {
    for body in [
        r#"{"image": "workroom-fixture/busybox:1", "runArgs": ["--memory", "lots"]}"#,
        r#"{"image": "workroom-fixture/busybox:1", "workspaceMount": "type=bind,source=/tmp"}"#,
    ] {
        let (code, config_err, _) = run_on("config", body.as_bytes());
        assert_eq!(code, 2, "config exits 2 on {body}: {config_err}");
        assert_eq!(config_err.trim_end().lines().count(), 1, "{config_err}");
        assert!(config_err.contains("DIR/.devcontainer.json: "), "{config_err}");
        let (code, up_err, _) = run_on("up", body.as_bytes());
        assert_eq!(code, 2, "up exits 2 on {body}: {up_err}");
        assert_eq!(config_err, up_err);
    }
}

#[test]
fn a_dockerfile_that_is_a_folder_says_it_is_a_folder_not_that_it_does_not_exist() {
    let (code, err, _) = run_on("config", br#"{"build": {"dockerfile": "."}}"#);
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        err.trim_end(),
        "workroom: DIR/.devcontainer.json: `build.dockerfile` names DIR/., which is a folder; \
         name the Dockerfile itself, such as \"Dockerfile\""
    );
}

/// Before any room exists, `config` says where `up` would take the
/// workspace from, without making the probe's throwaway container.
#[test]
fn config_shows_where_a_new_rooms_workspace_would_come_from_without_probing() {
    let dir = tempfile::Builder::new().prefix("wr-config-ws-").tempdir().unwrap();
    std::fs::write(dir.path().join(".devcontainer.json"), r#"{ "image": "workroom-fixture/busybox:1" }"#).unwrap();
    let workspace = |toml: Option<&str>| {
        if let Some(toml) = toml {
            std::fs::write(dir.path().join(".workroom.toml"), toml).unwrap();
        }
        let out = std::process::Command::new(workroom_bin())
            .args(["config", "--json", "--workspace-folder"])
            .arg(dir.path())
            .env("WORKROOM_SCOPE", "config-cli-no-room")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        json["workroom"]["workspace"].clone()
    };
    let auto = workspace(None);
    assert_eq!((auto["mode"].as_str(), auto["volume"].is_null()), (Some("auto"), true), "{auto}");
    let volume = workspace(Some("workspace = \"volume\"\n"));
    assert_eq!((volume["mode"].as_str(), volume["reason"].as_str()), (Some("volume"), Some("setting")), "{volume}");
    assert!(volume["volume"].as_str().is_some_and(|v| v.starts_with("workroom-ws-")), "{volume}");
    let bind = workspace(Some("workspace = \"bind\"\n"));
    assert_eq!((bind["mode"].as_str(), bind["reason"].as_str()), (Some("bind"), Some("setting")), "{bind}");
}
