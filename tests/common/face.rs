//! For the devcontainer face's tests: the reference CLI and workroom linked
//! as `devcontainer`, run side by side; results read as callers read them;
//! a local feature of the test's own; images the tests build, removed.

use super::*;
use serde_json::{json, Value};
use std::process::{Command, Output};

/// The two CLIs: the reference unpacked, and workroom linked as `devcontainer`.
pub struct Clis {
    _unpacked: tempfile::TempDir,
    pub js: PathBuf,
    _link_dir: tempfile::TempDir,
    pub face: PathBuf,
}

impl Clis {
    pub fn new() -> Clis {
        let (_unpacked, js) = reference_cli();
        let _link_dir = tempfile::Builder::new().prefix("wr-test-face-").tempdir().unwrap();
        let face = _link_dir.path().join("devcontainer");
        std::os::unix::fs::symlink(workroom_bin(), &face).unwrap();
        Clis { _unpacked, js, _link_dir, face }
    }

    pub fn reference(&self, args: &[&str]) -> Output {
        self.reference_with(args, &[])
    }

    pub fn ours(&self, args: &[&str]) -> Output {
        self.ours_with(args, &[])
    }

    pub fn reference_with(&self, args: &[&str], env: &[(String, String)]) -> Output {
        let mut node = Command::new("node");
        node.arg(&self.js).args(args).envs(env.iter().map(|(k, v)| (k, v)));
        output_within(node, None)
    }

    pub fn ours_with(&self, args: &[&str], env: &[(String, String)]) -> Output {
        let mut cmd = Command::new(&self.face);
        cmd.args(args).envs(env.iter().map(|(k, v)| (k, v)));
        output_within(cmd, None)
    }
}

/// The last stdout line that starts with `{`, as Coder's agent takes it.
pub fn result_of(out: &Output) -> Value {
    let text = stdout(out);
    let line = text.lines().rev().find(|l| l.starts_with('{')).unwrap_or_default();
    serde_json::from_str(line).unwrap_or(Value::Null)
}

/// A result's keys, in order.
pub fn keys(v: &Value) -> Vec<String> {
    v.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default()
}

/// A JSON value with each workspace's own folder replaced by `<ws>`, so the
/// two sides compare.
pub fn normalised(v: &Value, ws: &Workspace) -> Value {
    let base = ws.path().file_name().unwrap().to_string_lossy().into_owned();
    let text = v.to_string().replace(&ws.folder(), "<ws>").replace(&base, "<base>");
    serde_json::from_str(&text).unwrap()
}

pub fn two(config: Value) -> (Workspace, Workspace) {
    (Workspace::new(config.clone()), Workspace::new(config))
}

pub const HOOKS: [(&str, &str); 5] = [
    ("onCreateCommand", "onCreate"),
    ("updateContentCommand", "updateContent"),
    ("postCreateCommand", "postCreate"),
    ("postStartCommand", "postStart"),
    ("postAttachCommand", "postAttach"),
];

/// A config whose every hook appends its name to hooks.log in the workspace.
pub fn hooked(extra: Value) -> Value {
    let mut config = json!({ "image": DEBIAN, "customizations": { "coder": { "apps": [{ "slug": "face" }] } } });
    for (hook, name) in HOOKS {
        config[hook] = json!(format!("echo {name} >> hooks.log"));
    }
    for (k, v) in extra.as_object().unwrap() {
        config[k] = v.clone();
    }
    config
}

pub fn inspect(id: &str, format: &str) -> Value {
    serde_json::from_str(docker_ok(&["inspect", "-f", format, id]).trim()).unwrap()
}

/// An image's `devcontainer.metadata` label, parsed.
pub fn image_label(image: &str) -> Value {
    let text =
        docker_ok(&["image", "inspect", image, "--format", "{{index .Config.Labels \"devcontainer.metadata\"}}"]);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{image}'s label {text:?}: {e}"))
}

/// A feature of the test's own in `<folder>/wr-face-feature` (`./wr-face-feature`
/// from a config beside it): its install prints a line and writes a file,
/// both naming `unique`, so its image is the test's alone.
pub fn local_feature(folder: &Path, unique: &str) {
    let dir = folder.join("wr-face-feature");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("devcontainer-feature.json"),
        json!({
            "id": "wr-face-feature",
            "version": "1.0.0",
            "containerEnv": { "WR_FACE_FEATURE": "on" },
            "postCreateCommand": "echo featurePostCreate >> hooks.log"
        })
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("install.sh"),
        format!("#!/bin/sh\nset -e\necho 'wr-face-feature installing {unique}'\necho {unique} > /usr/local/share/wr-face-feature\n"),
    )
    .unwrap();
}

/// Removes, on drop, images a test had built: by name (with the test's
/// containers made from them), and the reference's untagged build stages
/// whose history names `unique`.
/// Made before the workspaces whose rooms use the images, so it drops after them.
pub struct Images {
    pub names: std::cell::RefCell<Vec<String>>,
    markers: Vec<String>,
}

impl Images {
    pub fn new(unique: &str) -> Images {
        Images { names: Default::default(), markers: vec![unique.to_string()] }
    }

    /// The reference's feature builds too: its untagged stages (one from
    /// its temporary image, one that copies and chmods the features) name
    /// no workspace, only its build folder; and its temporary image. Only
    /// one test of a binary may ask this, as the reference names that
    /// temporary image the same for every build.
    pub fn with_reference_feature_stages(mut self) -> Images {
        self.markers.push("/tmp/build-features".into());
        self.add("dev_container_feature_content_temp");
        self
    }

    pub fn add(&self, name: impl Into<String>) {
        self.names.borrow_mut().push(name.into());
    }

    /// The derived images workroom made for `image` (a name it labelled):
    /// the installed features' and their labelled commits, by its key label.
    pub fn add_features_of(&self, image: &str) {
        let key =
            docker(&["image", "inspect", image, "--format", "{{index .Config.Labels \"workroom.features.key\"}}"]);
        let key = stdout(&key).trim().to_string();
        if key.len() < 32 {
            return;
        }
        let tags = docker_ok(&["images", "workroom-features", "--format", "{{.Repository}}:{{.Tag}}"]);
        for tag in tags.lines().filter(|t| t.contains(&key[..32])) {
            self.add(tag);
        }
    }
}

impl Drop for Images {
    fn drop(&mut self) {
        let mut names = self.names.borrow().clone();
        // Labelled commits before the images they stand on.
        names.sort_by_key(|n| std::cmp::Reverse(n.len()));
        names.dedup();
        for name in &names {
            let users =
                docker_ok(&["ps", "-aq", "--filter", &format!("ancestor={name}"), "--filter", "label=workroom.test"]);
            for id in users.lines() {
                remove_container(id);
            }
            let _ = docker(&["rmi", name]);
        }
        // The reference's named build images (`vsc-…`) of the test's own.
        let named = docker_ok(&["images", "--format", "{{.Repository}}:{{.Tag}}"]);
        for name in named.lines().filter(|n| n.starts_with("vsc-")) {
            let history = stdout(&docker(&["history", "--no-trunc", "--format", "{{.CreatedBy}}", name]));
            if self.markers[..1].iter().any(|m| history.contains(m)) {
                let _ = docker(&["rmi", name]);
            }
        }
        // Twice: a stage another one stands on goes once that one is gone.
        for _ in 0..2 {
            let dangling = docker_ok(&["images", "-q", "--no-trunc", "--filter", "dangling=true"]);
            for id in dangling.lines() {
                let history = stdout(&docker(&["history", "--no-trunc", "--format", "{{.CreatedBy}}", id]));
                if self.markers.iter().any(|m| history.contains(m)) {
                    let _ = docker(&["rmi", id]);
                }
            }
        }
    }
}

/// Every stderr line parses as JSON with a `type`; with `all_keys`, with
/// every key of the reference's text lines (its `progress` lines carry
/// neither level nor timestamp, so its own output is held to `type`).
pub fn assert_json_log_lines(who: &str, out: &Output, all_keys: bool) {
    let text = stderr(out);
    assert!(!text.trim().is_empty(), "{who}: no log lines at all");
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{who}: not JSON ({e}): {line:?}"));
        assert!(v["type"].is_string(), "{who}: no type in {line}");
        if all_keys {
            for key in ["type", "level", "timestamp", "text"] {
                assert!(v.get(key).is_some(), "{who}: no {key:?} in {line}");
            }
            assert!(v["timestamp"].is_u64() && v["level"].is_u64(), "{who}: {line}");
        }
    }
}

/// A named volume labelled for the tests, removed on drop (so made before
/// the workspace whose room uses it, which drops first).
pub struct Volume(pub String);

impl Volume {
    pub fn new(side: &str) -> Volume {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("wr-test-face-{side}-{}-{n}", std::process::id());
        docker_ok(&["volume", "create", "--label", &format!("{TEST_LABEL}=1"), &name]);
        Volume(name)
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = docker(&["volume", "rm", "-f", &self.0]);
    }
}

/// What a file in a volume holds, read by a throwaway container.
pub fn volume_file(volume: &str, path: &str) -> String {
    let out = docker(&[
        "run",
        "--rm",
        "--label",
        &format!("{TEST_LABEL}=1"),
        "-v",
        &format!("{volume}:/v"),
        BUSYBOX,
        "cat",
        &format!("/v/{path}"),
    ]);
    stdout(&out)
}
