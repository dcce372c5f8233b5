//! `workroom config` on the broken fixtures: each class of bad input is
//! refused with one line that names the file and the line:column or the
//! property, and exits 2. (The reference CLI accepts most of these silently.)

mod common;

use common::*;

fn config(case: &str) -> (i32, String) {
    let folder = repo_root().join("fixtures/devcontainers/broken").join(case);
    let out = std::process::Command::new(workroom_bin())
        .args(["config", "--workspace-folder"])
        .arg(&folder)
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), stderr(&out))
}

fn refused_with(case: &str, fragments: &[&str]) {
    let (code, err) = config(case);
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
    refused_with("malformed-unclosed", &["devcontainer.json:4:18: ", "ends too early"]);
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
fn docker_compose_is_refused_as_not_supported_yet() {
    refused_with("compose", &["`dockerComposeFile` is not supported yet"]);
}

#[test]
fn a_config_without_image_or_build_is_refused() {
    refused_with("no-image-or-build", &["no container source"]);
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
