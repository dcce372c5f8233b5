//! The face's commands for users of Features, side by side with the
//! reference CLI against Debian's docker-registry on localhost: a feature
//! published there by the reference at 1.0.0, 1.1.0 and 2.0.0, and a
//! workspace whose lockfile pins 1.0.0. `outdated`, `upgrade`, `features
//! info` and `features resolve-dependencies` must print what the
//! reference prints. No engine needed.

mod common;
mod registry;

use common::face::*;
use common::*;
use registry::Registry;
use serde_json::{json, Value};
use std::process::Output;

/// Publishes `wr-hello` at each version with the reference's `features publish`.
fn publish(registry: &Registry, versions: &[&str]) {
    let src = tempfile::Builder::new().prefix("wr-test-publish-").tempdir().unwrap();
    let dir = src.path().join("wr-hello");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("install.sh"), "#!/bin/sh\necho hello\n").unwrap();
    for version in versions {
        let feature = json!({
            "id": "wr-hello",
            "version": version,
            "name": "Hello",
            "options": { "greeting": { "type": "string", "default": "hi" } }
        });
        std::fs::write(dir.join("devcontainer-feature.json"), feature.to_string()).unwrap();
        let mut node = std::process::Command::new("node");
        node.arg(registry::reference_cli()).args(["features", "publish", "-r", &registry.host(), "-n", "wr/f"]);
        node.arg(src.path());
        let out = output_within(node, None);
        assert!(out.status.success(), "publish {version}: {}", stderr(&out));
    }
}

/// The digest `tag` of `wr-hello` has now, from the reference's `features info`.
fn digest_of(clis: &Clis, feature: &str) -> String {
    let out = clis.reference(&["features", "info", "manifest", feature, "--output-format", "json"]);
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    v["canonicalId"].as_str().unwrap().rsplit_once('@').unwrap().1.to_string()
}

/// Two workspaces naming the feature twice (by `:1` and by `:1.0`), each
/// with a lockfile that pins `:1` at 1.0.0.
fn workspaces(registry: &Registry, pinned: &str) -> (Workspace, Workspace) {
    let feature = |tag: &str| format!("{}/wr/f/wr-hello:{tag}", registry.host());
    let config = json!({ "image": DEBIAN, "features": { feature("1"): {}, feature("1.0"): { "greeting": "x" } } });
    let (ours, theirs) = two(config);
    let lock = json!({ "features": { feature("1"): {
        "version": "1.0.0",
        "resolved": format!("{}/wr/f/wr-hello@{pinned}", registry.host()),
        "integrity": pinned,
    } } });
    for ws in [&ours, &theirs] {
        std::fs::write(
            ws.path().join(".devcontainer-lock.json"),
            format!("{}\n", serde_json::to_string_pretty(&lock).unwrap()),
        )
        .unwrap();
    }
    (ours, theirs)
}

fn run(clis: &Clis, (ours, theirs): (&Workspace, &Workspace), args: &[&str]) -> (Output, Output) {
    let with = |ws: &Workspace| {
        let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        all.extend(["--workspace-folder".into(), ws.folder()]);
        all
    };
    let (a, b) = (with(ours), with(theirs));
    (
        clis.ours(&a.iter().map(String::as_str).collect::<Vec<_>>()),
        clis.reference(&b.iter().map(String::as_str).collect::<Vec<_>>()),
    )
}

fn same_stdout(what: &str, (our, their): &(Output, Output)) -> String {
    assert_eq!(our.status.code(), Some(0), "ours {what}: {}", stderr(our));
    assert_eq!(their.status.code(), Some(0), "reference {what}: {}", stderr(their));
    assert_eq!(stdout(our), stdout(their), "{what}");
    stdout(our)
}

#[test]
fn outdated_upgrade_info_and_resolve_dependencies_print_what_the_reference_prints() {
    let clis = Clis::new();
    let registry = Registry::start();
    publish(&registry, &["1.0.0"]);
    let feature = format!("{}/wr/f/wr-hello:1", registry.host());
    let first = digest_of(&clis, &feature);
    publish(&registry, &["1.1.0", "2.0.0"]);
    let (ours, theirs) = workspaces(&registry, &first);
    let pair = (&ours, &theirs);

    let text = same_stdout("outdated", &run(&clis, pair, &["outdated"]));
    let resource = format!("{}/wr/f/wr-hello", registry.host());
    assert!(text.contains(&format!("{resource}  1.0.0    1.1.0   2.0.0\n")), "{text}");
    let json = same_stdout("outdated json", &run(&clis, pair, &["outdated", "--output-format", "json"]));
    let json: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        json["features"][&feature],
        json!({ "current": "1.0.0", "wanted": "1.1.0", "wantedMajor": "1", "latest": "2.0.0", "latestMajor": "2" })
    );

    // The install order pins what the lockfile pins.
    let order = run(&clis, pair, &["features", "resolve-dependencies"]);
    let json_part = |out: &Output| -> Value {
        let text = stdout(out);
        serde_json::from_str(&text[text.find("\n{").unwrap()..]).unwrap()
    };
    assert_eq!((order.0.status.code(), order.1.status.code()), (Some(0), Some(0)), "{}", stderr(&order.0));
    assert_eq!(json_part(&order.0), json_part(&order.1));
    assert_eq!(json_part(&order.0)["installOrder"][0]["id"], json!(format!("{resource}@{first}")));

    // upgrade --dry-run prints the new lockfile; upgrade writes it.
    let dry = same_stdout("upgrade --dry-run", &run(&clis, pair, &["upgrade", "--dry-run"]));
    let dry: Value = serde_json::from_str(&dry).unwrap();
    assert_eq!(dry["features"][&feature]["version"], "1.1.0");
    assert_eq!(ours.read(".devcontainer-lock.json"), theirs.read(".devcontainer-lock.json"), "untouched by --dry-run");
    same_stdout("upgrade", &run(&clis, pair, &["upgrade"]));
    assert_eq!(ours.read(".devcontainer-lock.json"), theirs.read(".devcontainer-lock.json"));
    assert_eq!(serde_json::from_str::<Value>(&ours.read(".devcontainer-lock.json")).unwrap(), dry);

    // features info, in JSON byte for byte, in text the same lines but for
    // the dependency chart, whose node names are workroom's.
    for mode in ["manifest", "tags", "verbose", "dependencies"] {
        let our = clis.ours(&["features", "info", mode, &feature, "--output-format", "json"]);
        let their = clis.reference(&["features", "info", mode, &feature, "--output-format", "json"]);
        same_stdout(&format!("info {mode} json"), &(our, their));
    }
    for mode in ["manifest", "tags"] {
        let our = clis.ours(&["features", "info", mode, &feature]);
        let their = clis.reference(&["features", "info", mode, &feature]);
        same_stdout(&format!("info {mode}"), &(our, their));
    }
}

#[test]
fn upgrade_of_a_configuration_without_features_fails_as_the_references_does() {
    let clis = Clis::new();
    let (ours, theirs) = two(json!({ "image": DEBIAN }));
    let (our, their) = run(&clis, (&ours, &theirs), &["upgrade", "--dry-run"]);
    assert_eq!((our.status.code(), their.status.code()), (Some(1), Some(1)));
    assert!(stderr(&our).contains("names no features"), "{}", stderr(&our));
    let outdated = run(&clis, (&ours, &theirs), &["outdated", "--output-format", "json"]);
    assert_eq!(same_stdout("outdated", &outdated), "{\"features\":{}}\n");
}
