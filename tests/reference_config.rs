//! `workroom config --json` against the reference CLI's `read-configuration`
//! on the same folders: each valid case in fixtures/devcontainers holds the
//! reference's output (`reference.json`) and the command that made it
//! (`reference.cmd`, run with devcontainers CLI 0.89.0 at a fixed path).
//! We rebuild the same folder at the same path, load it with the same
//! environment and compare keys and values.
//!
//! Known, deliberate differences, normalised here: `configFilePath` is a
//! plain path (the reference prints a URI object), and the reference's
//! `ociAuthDiagnostics` is not printed.

use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use workroom::config::{load, LoadRequest};

/// The environment every reference run had (fixtures/devcontainers/README.md).
fn reference_env() -> HashMap<String, String> {
    [
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("HOME", "/root"),
        ("WR_TEST_VAR", "hello"),
        ("WR_TEST_EMPTY", ""),
        ("WR_TEST_COLON", "a:b"),
        ("WR_TEST_NESTED", "${localEnv:WR_TEST_VAR}"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The quoted or bare word after `flag ` in a shell line.
fn arg_after(cmd: &str, flag: &str) -> Option<String> {
    let rest = &cmd[cmd.find(flag)? + flag.len()..];
    let rest = rest.trim_start();
    if let Some(quoted) = rest.strip_prefix('\'') {
        return Some(quoted[..quoted.find('\'')?].to_string());
    }
    Some(rest.split_whitespace().next()?.to_string())
}

/// The container env a case's `docker create` gave (image PATH plus `-e`).
fn container_env(cmd: &str) -> Option<HashMap<String, String>> {
    if !cmd.contains("docker create") {
        return None;
    }
    let mut env = HashMap::from([(
        "PATH".to_string(),
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
    )]);
    let words: Vec<&str> = cmd.split_whitespace().collect();
    for pair in words.windows(2) {
        if pair[0] == "-e" {
            let (k, v) = pair[1].split_once('=').unwrap();
            env.insert(k.to_string(), v.to_string());
        }
    }
    Some(env)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Numbers compared as the doubles both sides mean (the reference prints
/// `12345678901234567000` for what we hold as the double nearest it).
fn numbers_as_doubles(value: &mut Value) {
    match value {
        Value::Number(n) => *value = serde_json::json!(n.as_f64().unwrap()),
        Value::Array(items) => items.iter_mut().for_each(numbers_as_doubles),
        Value::Object(map) => map.values_mut().for_each(numbers_as_doubles),
        _ => {}
    }
}

fn normalise(mut reference: Value) -> Value {
    numbers_as_doubles(&mut reference);
    let top = reference.as_object_mut().unwrap();
    top.remove("ociAuthDiagnostics");
    let config = top.get_mut("configuration").unwrap().as_object_mut().unwrap();
    let fs_path = config["configFilePath"]["fsPath"].clone();
    config.insert("configFilePath".into(), fs_path);
    reference
}

/// The cases holding `file`, each rebuilt at the fixed path its
/// `reference.cmd` used.
fn cases(file: &str) -> Vec<PathBuf> {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/devcontainers");
    let mut cases: Vec<PathBuf> =
        std::fs::read_dir(&fixtures).unwrap().map(|e| e.unwrap().path()).filter(|p| p.join(file).is_file()).collect();
    cases.sort();
    assert!(cases.len() >= 20, "expected the reference fixtures with {file}, found {}", cases.len());
    cases
}

/// The tests rebuild the cases at the same fixed paths: one at a time.
static FIXED_PATHS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Rebuilds `case` where its reference run had it; returns the folder to
/// remove afterwards and the load request the reference run amounts to.
fn prepare(case: &Path) -> (PathBuf, LoadRequest) {
    let cmd = std::fs::read_to_string(case.join("reference.cmd")).unwrap();
    let dir = PathBuf::from(arg_after(&cmd, "mkdir -p").expect("mkdir in reference.cmd"));
    let workspace = PathBuf::from(arg_after(&cmd, "--workspace-folder").expect("workspace folder"));
    let config = arg_after(&cmd, "--config").map(PathBuf::from);
    let _ = std::fs::remove_dir_all(&dir);
    copy_dir(case, &dir);
    if cmd.contains("git init") {
        std::fs::create_dir_all(dir.join(".git")).unwrap();
    }
    let container_env = container_env(&cmd);
    let request = LoadRequest {
        workspace_folder: workspace,
        config,
        env: reference_env(),
        id_without_container: false,
        container_env,
        // As `workroom config` loads: what read-configuration reads.
        runnable_only: false,
        override_config: None,
        mount_git_root: true,
    };
    (dir, request)
}

fn case_name(case: &Path) -> String {
    case.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn config_json_matches_the_reference_read_configuration_on_every_fixture() {
    let _fixed = FIXED_PATHS.lock().unwrap_or_else(|e| e.into_inner());
    let cases = cases("reference.json");
    let mut failures = Vec::new();
    for case in &cases {
        let (dir, request) = prepare(case);
        let expected =
            normalise(serde_json::from_str(&std::fs::read_to_string(case.join("reference.json")).unwrap()).unwrap());
        match load(&request) {
            Ok(loaded) => {
                let mut ours = loaded.reference_json();
                numbers_as_doubles(&mut ours);
                if ours != expected {
                    failures.push(format!("{}:\n  ours:      {ours}\n  reference: {expected}", case_name(case)));
                }
            }
            Err(e) => failures.push(format!("{}: refused: {e}", case_name(case))),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

/// The `devcontainer.metadata` label of a local image, read with the docker CLI.
fn image_label(image: &str) -> Option<String> {
    let out = std::process::Command::new("docker")
        .args(["image", "inspect", image, "--format", "{{index .Config.Labels \"devcontainer.metadata\"}}"])
        .output()
        .expect("run docker");
    assert!(out.status.success(), "inspect {image}: {}", String::from_utf8_lossy(&out.stderr));
    Some(String::from_utf8(out.stdout).unwrap().trim().to_string()).filter(|l| !l.is_empty() && l != "<no value>")
}

/// `reference-merged.json` is the same command's output with
/// `--include-merged-configuration`: the image's metadata (a Dockerfile's
/// base image's) merged under the config. `container-pass`'s container has
/// no metadata label, which the reference reads as the image's (none).
#[test]
fn merged_configuration_matches_the_reference_on_every_fixture() {
    use workroom::config::Source;
    use workroom::plan::{dockerfile, metadata};
    let _fixed = FIXED_PATHS.lock().unwrap_or_else(|e| e.into_inner());
    let cases = cases("reference-merged.json");
    let mut failures = Vec::new();
    for case in &cases {
        let (dir, request) = prepare(case);
        let mut reference: Value =
            serde_json::from_str(&std::fs::read_to_string(case.join("reference-merged.json")).unwrap()).unwrap();
        numbers_as_doubles(&mut reference);
        let mut expected = reference["mergedConfiguration"].clone();
        expected["configFilePath"] = expected["configFilePath"]["fsPath"].clone();
        let loaded = load(&request).unwrap_or_else(|e| panic!("{}: {e}", case_name(case)));
        let image = match &loaded.model.source {
            Source::Image(image) => image.clone(),
            Source::Dockerfile(build) => {
                let text = std::fs::read_to_string(&build.dockerfile).unwrap();
                dockerfile::base_image(&text, &build.args, build.target.as_deref()).expect("a base image")
            }
            // The service's image is compose's to make; no merged fixture has one.
            Source::Compose(_) => panic!("{}: a compose case has no reference-merged.json", case_name(case)),
            Source::Unset => panic!("{}: a case with no image has no reference-merged.json", case_name(case)),
        };
        let m = metadata::for_new_room(&loaded, &image, image_label(&image).as_deref(), &[]);
        let configuration = loaded.reference_json()["configuration"].as_object().unwrap().clone();
        let mut ours = Value::Object(m.configuration(&configuration));
        numbers_as_doubles(&mut ours);
        if ours != expected {
            failures.push(format!("{}:\n  ours:      {ours}\n  reference: {expected}", case_name(case)));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
}
