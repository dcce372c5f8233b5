//! Dev Container Features against a real registry and the real engine:
//! fixture features (fixtures/features/src) published with the reference
//! CLI into Debian's docker-registry on localhost, fetched, ordered,
//! validated, installed into a derived image, cached (a second `up` asks
//! the registry nothing and builds nothing; a stopped registry does not
//! matter), locked, refused when they must be, and compared with what the
//! reference CLI installs from the same config.
//!
//! Each test has its own registry and feature cache (`XDG_CACHE_HOME`),
//! so their requests and images are theirs alone; derived images are
//! removed at the end.

mod common;
mod pty;
mod registry;

use common::*;
use registry::{copy_dir, FileServer, Registry};
use serde_json::{json, Value};
use std::time::Duration;

/// Long enough for a cold `up` with a few feature installs on a loaded
/// two-core machine (each install is a container and a commit).
const UP_GUARD: Duration = Duration::from_secs(400);

/// A workspace with its own feature cache; the images its rooms were made
/// from are removed on drop (after the room, which `Workspace` removes).
struct FeatureWorkspace {
    images: std::cell::RefCell<Vec<String>>,
    ws: Workspace,
    _cache: tempfile::TempDir,
}

impl FeatureWorkspace {
    fn new(config: Value) -> FeatureWorkspace {
        FeatureWorkspace::with_files(config, &[])
    }

    /// The config at `.devcontainer/devcontainer.json`, `files` beside it.
    fn with_files(config: Value, files: &[(&str, &str)]) -> FeatureWorkspace {
        let mut ws = Workspace::with_devcontainer_folder(config, files);
        let cache = tempfile::Builder::new().prefix("wr-test-cache-").tempdir().unwrap();
        ws.env.push(("XDG_CACHE_HOME".into(), cache.path().display().to_string()));
        FeatureWorkspace { images: Default::default(), ws, _cache: cache }
    }

    fn config_dir(&self) -> std::path::PathBuf {
        self.ws.path().join(".devcontainer")
    }

    fn lockfile(&self) -> String {
        std::fs::read_to_string(self.config_dir().join("devcontainer-lock.json")).unwrap_or_default()
    }

    fn rewrite(&self, config: Value) {
        std::fs::write(self.config_dir().join("devcontainer.json"), labelled(config)).unwrap();
    }

    fn run(&self, args: &[&str], extra_env: &[(&str, &str)]) -> std::process::Output {
        let mut cmd = self.ws.command(args);
        cmd.envs(extra_env.iter().copied());
        output_within_guard(cmd, None, UP_GUARD)
    }

    /// `up`, which must succeed; remembers the room's image for removal.
    fn up(&self, args: &[&str], extra_env: &[(&str, &str)]) -> std::process::Output {
        let mut all = vec!["up"];
        all.extend_from_slice(args);
        let out = self.run(&all, extra_env);
        assert!(out.status.success(), "up failed: {}\n{}", stdout(&out), stderr(&out));
        self.images.borrow_mut().push(self.room_image());
        out
    }

    fn room_image(&self) -> String {
        docker_ok(&["inspect", &self.ws.room_name(), "--format", "{{.Config.Image}}"])
    }

    fn image_id(&self) -> String {
        docker_ok(&["image", "inspect", &self.room_image(), "--format", "{{.Id}}"])
    }

    /// `workroom config --json --include-merged-configuration`'s merged configuration.
    fn merged_configuration(&self) -> Value {
        let out = self.run(&["config", "--json", "--include-merged-configuration"], &[]);
        assert!(out.status.success(), "config: {}", stderr(&out));
        let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
        merged_of(&printed)
    }

    fn label_entries(&self) -> Vec<Value> {
        let label = docker_ok(&[
            "image",
            "inspect",
            &self.room_image(),
            "--format",
            "{{index .Config.Labels \"devcontainer.metadata\"}}",
        ]);
        serde_json::from_str(&label).unwrap_or_else(|e| panic!("label {label:?}: {e}"))
    }
}

impl std::ops::Deref for FeatureWorkspace {
    type Target = Workspace;
    fn deref(&self) -> &Workspace {
        &self.ws
    }
}

impl Drop for FeatureWorkspace {
    fn drop(&mut self) {
        // The named volumes fixture features mount go with their rooms.
        let mut volumes = Vec::new();
        for id in self.ws.containers() {
            let names = docker(&["inspect", &id, "--format", "{{range .Mounts}}{{.Name}} {{end}}"]);
            volumes.extend(
                String::from_utf8_lossy(&names.stdout)
                    .split_whitespace()
                    .filter(|n| n.starts_with("wr-feature-"))
                    .map(String::from),
            );
            remove_container(&id);
        }
        for volume in volumes {
            let _ = docker(&["volume", "rm", "-f", &volume]);
        }
        let mut images = self.images.borrow().clone();
        images.dedup();
        for image in images.iter().filter(|i| i.starts_with("workroom-features:")) {
            let _ = docker(&["rmi", image]);
            // A room's image with the config's entry stands on the installed image.
            if let Some((installed, _label)) = image.split_once(':').and_then(|(_, tag)| tag.split_once('-')) {
                let _ = docker(&["rmi", &format!("workroom-features:{installed}")]);
            }
        }
    }
}

fn ids(entries: &[Value]) -> Vec<String> {
    entries.iter().filter_map(|e| e["id"].as_str().map(String::from)).collect()
}

#[test]
fn registry_features_install_in_order_and_a_second_up_fetches_and_builds_nothing() {
    let mut registry = Registry::start();
    registry.publish_fixtures();
    let (dependent, base, service) =
        (registry.feature("dependent", "2"), registry.feature("base", "1"), registry.feature("service", "1"));
    let options = registry.feature("options", "1");
    let config = json!({ "image": DEBIAN, "features": { &dependent: {}, &base: {}, &service: {} } });
    let ws = FeatureWorkspace::new(config.clone());

    let published = registry.requests();
    assert!(published > 0, "the access log counts requests (the publish made some):\n{}", registry.log());
    ws.up(&[], &[]);
    assert!(registry.requests() > published, "the first up fetched from the registry:\n{}", registry.log());
    // dependsOn (options, with the options dependent gives it) and
    // installsAfter (base) before dependent; each round sorted by id.
    assert_eq!(ws.exec_ok(&["cat", "/usr/local/share/wr-order"]), "base\noptions\nservice\ndependent\n");
    assert_eq!(
        ws.exec_ok(&["cat", "/usr/local/share/wr-options/values"]),
        "GREETING=hey\nLOUD=true\nNAME=world\nVERSION=latest\nTAG=\n\
         _REMOTE_USER=root\n_CONTAINER_USER=root\n_REMOTE_USER_HOME=/root\n_CONTAINER_USER_HOME=/root\n"
    );
    // An earlier feature's containerEnv: seen by a later install.sh and by exec.
    assert!(ws.exec_ok(&["cat", "/usr/local/share/wr-dependent/saw"]).starts_with("WR_BASE_HOME=/opt/wr-base\n"));
    assert_eq!(
        ws.exec_ok(&["sh", "-c", "echo $WR_BASE_HOME $WR_OPTIONS_HOME; wr-base"]),
        "/opt/wr-base /usr/local/share/wr-options\nbase tool\n"
    );

    // The lockfile, in the reference's format, pins the dependency too.
    let lock: Value = serde_json::from_str(&ws.lockfile()).unwrap();
    let locked: Vec<&String> = lock["features"].as_object().unwrap().keys().collect();
    assert_eq!(locked, [&base, &dependent, &options, &service]);
    assert_eq!(lock["features"][&dependent]["dependsOn"], json!([options]));
    assert_eq!(lock["features"][&base]["version"], "1.2.0");
    let digest = lock["features"][&base]["integrity"].as_str().unwrap();
    assert_eq!(lock["features"][&base]["resolved"], format!("{}/wr/features/base@{digest}", registry.host()));

    // The derived image's label: one entry per feature, in install order,
    // with what the reference records of each.
    let entries = ws.label_entries();
    assert_eq!(ids(&entries), [base.clone(), options.clone(), service.clone(), dependent.clone()]);
    let svc = &entries[2];
    assert_eq!(svc["entrypoint"], "/usr/local/share/wr-service/start.sh");
    assert_eq!(svc["capAdd"], json!(["SYS_PTRACE"]));
    assert_eq!(svc["mounts"][0]["target"], "/var/lib/wr-service");
    assert_eq!(svc["postCreateCommand"], "echo service-postcreate >> /tmp/wr-service-hooks");
    assert!(entries[0].get("containerEnv").is_none(), "containerEnv is baked in as ENV, not recorded");

    // A second up after down: no request to the registry, no build, and
    // with --json nothing but the result on stdout.
    let image = ws.image_id();
    assert!(ws.workroom(&["down"]).status.success());
    let before = registry.requests();
    let out = ws.up(&["--json"], &[]);
    assert_eq!(registry.requests(), before, "the second up asked the registry:\n{}", registry.log());
    assert!(!stderr(&out).contains("installing"), "nothing is built again: {}", stderr(&out));
    assert_eq!(ws.image_id(), image);
    let result: Value = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("stdout is not the result alone ({e}): {}", stdout(&out)));
    assert_eq!(result["outcome"], "success");

    // --frozen-lockfile: a config that would change the lockfile is refused,
    // naming what changed, and neither the lockfile nor a room is touched.
    let lockfile = ws.lockfile();
    let failing = registry.feature("failing", "1");
    ws.rewrite(json!({ "image": DEBIAN, "features": { &dependent: {}, &base: {}, &service: {}, &failing: {} } }));
    assert!(ws.workroom(&["down"]).status.success());
    let out = ws.run(&["up", "--frozen-lockfile"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("does not match the configuration (--frozen-lockfile)"), "{err}");
    assert!(err.contains(&format!("{failing} is not in the lockfile")), "{err}");
    assert_eq!(ws.lockfile(), lockfile);
    assert!(ws.containers().is_empty(), "a refused up made a room");
    ws.rewrite(config);

    // The registry gone: everything needed is cached.
    registry.stop();
    ws.up(&[], &[]);
    assert_eq!(ws.image_id(), image);
    assert_eq!(ws.exec_ok(&["wr-base"]), "base tool\n");

    // Without the lockfile too: each tag's last resolution stands in, said.
    assert!(ws.workroom(&["down"]).status.success());
    let out = ws.up(&["--no-lockfile"], &[]);
    assert_eq!(ws.image_id(), image);
    assert!(
        stderr(&out).contains(&format!("{base}: the registry cannot be reached; using the cached sha256:")),
        "{}",
        stderr(&out)
    );

    // overrideFeatureInstallOrder (ids without their tag) puts the service
    // first, as far as dependencies allow; still offline, as all is cached.
    let service_id = service.rsplit_once(':').unwrap().0.to_string();
    ws.rewrite(json!({
        "image": DEBIAN,
        "features": { &dependent: {}, &base: {}, &service: {} },
        "overrideFeatureInstallOrder": [service_id]
    }));
    assert!(ws.workroom(&["down"]).status.success());
    ws.up(&[], &[]);
    assert_eq!(ws.exec_ok(&["cat", "/usr/local/share/wr-order"]), "service\nbase\noptions\ndependent\n");
    assert_ne!(ws.image_id(), image, "another order is another image");
}

#[test]
fn a_registry_with_basic_auth_is_read_with_the_docker_configs_credentials() {
    let registry = Registry::with_basic_auth("wr-user", "wr-secret");
    registry.publish_fixtures();
    let options = registry.feature("options", "1");
    let ws = FeatureWorkspace::new(
        json!({ "image": DEBIAN, "features": { &options: { "greeting": "hey", "name": ws_name() } } }),
    );
    // No credentials (an empty docker config): refused, saying what to do.
    let empty = tempfile::tempdir().unwrap();
    let out = ws.run(&["up"], &[("DOCKER_CONFIG", &empty.path().display().to_string())]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains(&format!("`docker login {}`", registry.host())), "{}", stderr(&out));
    assert!(ws.containers().is_empty());

    let config = registry.docker_config();
    ws.up(&[], &[("DOCKER_CONFIG", &config.path().display().to_string())]);
    let values = ws.exec_ok(&["cat", "/usr/local/share/wr-options/values"]);
    assert!(values.starts_with(&format!("GREETING=hey\nLOUD=false\nNAME={}\n", ws_name())), "{values}");
}

#[test]
fn credentials_the_registry_rejects_are_said_to_be_rejected_naming_the_docker_config_they_came_from() {
    let registry = Registry::with_basic_auth("wr-user", "wr-secret");
    let options = registry.feature("options", "1");
    let ws = FeatureWorkspace::new(json!({ "image": DEBIAN, "features": { &options: {} } }));
    let config = registry.docker_config_with("wr-user", "not-the-password");
    let file = config.path().join("config.json");
    let out = ws.run(&["up"], &[("DOCKER_CONFIG", &config.path().display().to_string())]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("workroom: ")).collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(
        lines[0].contains(&format!(
            "{options}: {host} rejected the credentials from {file}; `docker login {host}`",
            host = registry.host(),
            file = file.display()
        )),
        "{err}"
    );
    assert!(!err.contains("refused us"), "{err}");
    assert!(ws.containers().is_empty());
}

#[test]
fn a_registry_whose_certificate_is_not_trusted_is_said_to_be_untrusted_not_unreachable_even_with_a_cached_copy() {
    let registry = Registry::with_untrusted_tls();
    registry.publish_fixtures();
    let options = registry.feature("options", "1");
    let ws = FeatureWorkspace::new(json!({ "image": DEBIAN, "features": { &options: {} } }));
    let untrusted = format!(
        "{options}: the registry is not trusted: its certificate is signed by an authority this machine does not trust (UnknownIssuer); add"
    );

    // Nothing cached: refused with one line naming the certificate and the fix.
    let out = ws.run(&["up"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("workroom: ")).collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(lines[0].contains(&untrusted), "{err}");
    assert!(lines[0].contains("update-ca-certificates"), "{err}");
    assert!(!err.contains("cannot be reached"), "{err}");
    assert!(ws.containers().is_empty());

    // Trusted once (SSL_CERT_FILE names its authority): fetched and cached.
    ws.up(&[], &[("SSL_CERT_FILE", &registry.ca_file().display().to_string())]);
    assert!(ws.workroom(&["down"]).status.success());

    // Untrusted again, the cache stands in, and the warning says why.
    let out = ws.up(&["--no-lockfile"], &[]);
    let err = stderr(&out);
    let warning = err.lines().find(|l| l.contains("using the cached sha256:")).unwrap_or_default();
    assert!(warning.contains(&untrusted), "{err}");
    assert!(!err.contains("cannot be reached"), "{err}");
}

fn ws_name() -> &'static str {
    "auth-room"
}

#[test]
fn a_failing_install_is_refused_naming_the_feature_and_leaves_nothing_behind() {
    let registry = Registry::start();
    registry.publish_fixtures();
    let failing = registry.feature("failing", "1");
    // A local feature installs first and commits a layer, marked so the
    // test can look for anything of this build left in the engine.
    let mark = format!("wr-fail-{}", std::process::id());
    let ws = FeatureWorkspace::new(json!({
        "image": DEBIAN,
        "features": { "./marked": {}, &failing: {} },
        "overrideFeatureInstallOrder": ["./marked"]
    }));
    let marked = ws.config_dir().join("marked");
    std::fs::create_dir_all(&marked).unwrap();
    std::fs::write(
        marked.join("devcontainer-feature.json"),
        format!(r#"{{ "id": "marked", "version": "1.0.0", "containerEnv": {{ "WR_FAIL_MARK": "{mark}" }} }}"#),
    )
    .unwrap();
    std::fs::write(marked.join("install.sh"), "#!/bin/sh\necho marked installed\n").unwrap();

    let out = ws.run(&["up"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    let last = err.lines().rev().find(|l| l.starts_with("workroom: ")).unwrap_or_default();
    assert!(last.contains(&format!("feature \"{failing}\" failed to install (its install.sh exited with 3)")), "{err}");
    assert!(err.contains("failing: the disk is made of cheese"), "its last lines are shown: {err}");
    assert!(ws.containers().is_empty(), "no room");
    let marked_env = format!("WR_FAIL_MARK={mark}");
    let holds_mark = |kind: &str, ids: String| {
        ids.lines().filter(|id| !id.is_empty()).any(|id| {
            docker(&[kind, "inspect", id, "--format", "{{json .Config.Env}}"])
                .stdout
                .windows(marked_env.len())
                .any(|w| w == marked_env.as_bytes())
        })
    };
    assert!(!holds_mark("image", docker_ok(&["images", "-aq", "--no-trunc"])), "a layer of the failed build was left");
    assert!(!holds_mark("container", docker_ok(&["ps", "-aq", "--no-trunc"])), "a build container was left");
}

#[test]
fn features_are_refused_before_anything_is_made_naming_the_cause() {
    let registry = Registry::start();
    registry.publish_fixtures();
    let refused = |features: Value, extra: Value, fragments: &[&str]| {
        let mut config = json!({ "image": DEBIAN, "features": features });
        config.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let ws = FeatureWorkspace::new(config);
        let out = ws.run(&["up"], &[]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().filter(|l| l.starts_with("workroom: ")).count(), 1, "{err}");
        for f in fragments {
            assert!(err.contains(f), "expected {f:?} in: {err}");
        }
        assert!(ws.containers().is_empty(), "a refused up made a room");
        assert_eq!(ws.lockfile(), "", "a refused up wrote the lockfile");
    };
    let options = registry.feature("options", "1");
    refused(
        json!({ &options: { "greeting": "yo" } }),
        json!({}),
        &[&format!(r#"features["{options}"].greeting must be one of "hi", "hey"; found "yo""#)],
    );
    refused(json!({ &options: { "loud": "very" } }), json!({}), &[".loud must be true or false; found \"very\""]);
    let (a, b) = (registry.feature("cycle-a", "1"), registry.feature("cycle-b", "1"));
    refused(json!({ &a: {} }), json!({}), &[&format!("the features depend on each other in a cycle: {a} → {b} → {a}")]);
    refused(json!({ registry.feature("nope", "1"): {} }), json!({}), &["was not found in its registry"]);
    refused(json!({ "../outside": {} }), json!({}), &["features[\"../outside\"]", "must be a folder inside"]);
    refused(json!({ "fish": {} }), json!({}), &["legacy feature \"fish\" is not supported"]);
    refused(
        json!({ &options: {} }),
        json!({ "overrideFeatureInstallOrder": ["/abs"] }),
        &["overrideFeatureInstallOrder[0]"],
    );
}

/// Packs a fixture feature as `devcontainer-feature-<id>.tgz`.
fn tarball(id: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&repo_root().join("fixtures/features/src").join(id), dir.path());
    let out =
        std::process::Command::new("tar").arg("-czf").arg("-").arg("-C").arg(dir.path()).arg(".").output().unwrap();
    assert!(out.status.success());
    out.stdout
}

#[test]
fn a_local_feature_and_a_tarball_over_http_install_with_progress_on_a_terminal() {
    let server = FileServer::serve(tarball("base"));
    let url = format!("https://localhost:{}/dl/devcontainer-feature-base.tgz", server.port);
    let ws = FeatureWorkspace::new(json!({
        "image": DEBIAN,
        "features": { "./local-options": "2.0", &url: {} }
    }));
    copy_dir(&repo_root().join("fixtures/features/src/options"), &ws.config_dir().join("local-options"));

    // On a terminal: a line per feature, then a one-line summary with the time.
    let cache = ws.env.iter().find(|(k, _)| k == "XDG_CACHE_HOME").unwrap().1.clone();
    let mut term = pty::Term::spawn(
        "env",
        &[&format!("XDG_CACHE_HOME={cache}"), workroom_bin(), "up", "--workspace-folder", &ws.folder()],
        30,
        120,
    );
    term.expect("fetching", UP_GUARD);
    term.expect("installing ./local-options", UP_GUARD);
    term.expect("[local-options] options: greeting hi", UP_GUARD);
    let summary = term.expect(" in ", UP_GUARD);
    assert!(summary.contains("features: 2 installed into workroom-features:"), "{summary}");
    assert_eq!(term.wait(UP_GUARD), 0, "{}", term.all());
    assert!(term.all().contains("✓ installed ./local-options ("), "{}", term.all());
    ws.images.borrow_mut().push(ws.room_image());

    // The string is the version shorthand; the tarball's env reached exec.
    assert!(ws.exec_ok(&["cat", "/usr/local/share/wr-options/values"]).contains("VERSION=2.0\n"));
    assert_eq!(ws.exec_ok(&["wr-base"]), "base tool\n");
    let lock: Value = serde_json::from_str(&ws.lockfile()).unwrap();
    let keys: Vec<&String> = lock["features"].as_object().unwrap().keys().collect();
    assert_eq!(keys, [&url], "local features are not locked");
    assert_eq!(lock["features"][&url]["resolved"], url);
    let hits = server.hits.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(hits, 1);

    // Not a terminal: plain lines; and the tarball comes from the cache.
    assert!(ws.workroom(&["down"]).status.success());
    let out = ws.up(&[], &[]);
    assert_eq!(server.hits.load(std::sync::atomic::Ordering::SeqCst), hits, "fetched again");
    assert!(!stderr(&out).contains('\u{1b}'), "no escape codes off a terminal: {}", stderr(&out));

    // --no-lockfile neither reads the lockfile (so the URL is asked again)
    // nor writes it.
    let lockfile = ws.config_dir().join("devcontainer-lock.json");
    let locked = std::fs::read_to_string(&lockfile).unwrap();
    std::fs::remove_file(&lockfile).unwrap();
    assert!(ws.workroom(&["down"]).status.success());
    ws.up(&["--no-lockfile"], &[]);
    assert!(!lockfile.exists(), "--no-lockfile wrote the lockfile");
    assert_eq!(server.hits.load(std::sync::atomic::Ordering::SeqCst), hits + 1);

    // A pinned digest is checked: a lockfile naming other content refuses
    // the tarball (with a cache of its own, so the tarball is fetched).
    let wrong = format!("sha256:{}", "0".repeat(64));
    let digest =
        serde_json::from_str::<Value>(&locked).unwrap()["features"][&url]["integrity"].as_str().unwrap().to_string();
    std::fs::write(&lockfile, locked.replace(&digest, &wrong)).unwrap();
    assert!(ws.workroom(&["down"]).status.success());
    let fresh = tempfile::tempdir().unwrap();
    let out = ws.run(&["up"], &[("XDG_CACHE_HOME", &fresh.path().display().to_string())]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("{url}: the content's digest is {digest}, not the {wrong} the lockfile names")),
        "{}",
        stderr(&out)
    );
    assert!(ws.containers().is_empty());
}

#[test]
fn the_reference_cli_and_workroom_install_the_same_features_from_the_same_config() {
    let registry = Registry::start();
    registry.publish_fixtures();
    // Features with a dependency, a capability, a mount and hooks, under a
    // config with entries of its own for the label and the merge.
    let config = json!({
        "image": DEBIAN,
        "features": {
            registry.feature("dependent", "2"): {},
            registry.feature("base", "1"): {},
            registry.feature("service", "1"): {}
        },
        "remoteUser": "dev",
        "containerEnv": { "WR_CONFIG_ENV": "from-config" },
        "remoteEnv": { "WR_REMOTE": "${containerEnv:WR_BASE_HOME}/remote" },
        "postCreateCommand": "echo config-postcreate >> /tmp/wr-service-hooks"
    });
    let ours = FeatureWorkspace::new(config.clone());
    let theirs = FeatureWorkspace::new(config);
    ours.open_to_room_users();
    theirs.open_to_room_users();
    let reference = |args: &[&str]| {
        let mut node = std::process::Command::new("node");
        // Its options first: what follows `exec`'s command is the command's.
        node.arg(registry::reference_cli()).args(&args[..1]).args(["--workspace-folder", &theirs.folder()]);
        node.args(&args[1..]);
        node.envs(theirs.env.iter().map(|(k, v)| (k, v)));
        output_within_guard(node, None, UP_GUARD)
    };
    // Read before either room exists: both resolve the features themselves.
    let merged_before = (
        ours.merged_configuration(),
        merged_of(&reference_json(&reference(&["read-configuration", "--include-merged-configuration"]))),
    );
    ours.up(&[], &[]);

    // Else it builds one more image to move dev's uid (we are root, so it
    // would change nothing) and leaves it behind.
    let _their_stages = ReferenceStages::before_its_build();
    let out = reference(&["up", "--update-remote-user-uid-default", "never"]);
    let their_container = theirs.containers();
    let their_image = their_container
        .first()
        .map(|c| docker_ok(&["inspect", c, "--format", "{{.Config.Image}}"]))
        .unwrap_or_default();
    // Removed with the test whatever happens below (tagged by the reference),
    // with the temporary image its classic build leaves behind.
    let _their_image = ImageGuard(their_image.clone());
    let _their_temp = ImageGuard("dev_container_feature_content_temp".into());
    let _their_volume = their_container.first().and_then(|c| feature_volume(c));
    let _our_volume = feature_volume(&ours.room_name());
    assert!(out.status.success(), "devcontainer up: {}\n{}", stdout(&out), stderr(&out));
    let up = reference_json(&out);
    assert_eq!(up["outcome"], "success", "{up}");

    // The same remote user: the one both exec as.
    assert_eq!(up["remoteUser"], "dev");
    let theirs_exec = |cmd: &str| {
        let out = reference(&["exec", "sh", "-c", cmd]);
        assert!(out.status.success(), "devcontainer exec {cmd}: {}", stderr(&out));
        stdout(&out)
    };
    // The same files, the same order, the same hooks, the same user.
    for cmd in [
        "cat /usr/local/share/wr-order",
        "cat /usr/local/share/wr-options/values",
        "cat /usr/local/share/wr-dependent/saw",
        "wr-base",
        "id -un",
    ] {
        assert_eq!(ours.exec_ok(&["sh", "-c", cmd]), theirs_exec(cmd), "{cmd}");
    }
    // The same hooks in the same order. Under load the reference's last
    // hook may still be writing when its `up` has answered: read its file
    // (with docker, in a few ms) until it says what ours does, or time out.
    let ours_hooks = ours.exec_ok(&["cat", "/tmp/wr-service-hooks"]);
    let deadline = std::time::Instant::now() + HOOKS_WAIT;
    loop {
        let theirs_hooks = docker(&["exec", &their_container[0], "cat", "/tmp/wr-service-hooks"]);
        if stdout(&theirs_hooks) == ours_hooks || std::time::Instant::now() >= deadline {
            assert_eq!(stdout(&theirs_hooks), ours_hooks, "the hooks' file");
            break;
        }
    }
    assert_eq!(ours_hooks, "service-postcreate\nconfig-postcreate\nservice-poststart\n");
    // The same env in exec: the features', the config's and the remote
    // env, as the user's login shell gives it. Aside: the container's name;
    // what a shell of theirs adds (PWD, SHLVL) and the login variables we
    // set (USER, LOGNAME, SHELL); and PATH past the image's entries, since
    // the reference rewrites the room's /etc/profile so that a login shell
    // keeps the image's PATH, where we leave the image's files alone and
    // merge the login shell's PATH under the image's (as its probe does).
    let env = |text: String, ws: &Workspace| -> Vec<String> {
        const ASIDE: &[&str] = &["HOSTNAME", "_", "PWD", "SHLVL", "USER", "LOGNAME", "SHELL"];
        let mut lines: Vec<String> = text
            .lines()
            .filter(|l| !ASIDE.iter().any(|k| l.starts_with(&format!("{k}="))))
            .map(|l| match l.strip_prefix("PATH=") {
                Some(path) => format!("PATH={}:…", path.split(':').next().unwrap_or_default()),
                None => l.replace(&ws.remote_folder(), "/workspaces/WS"),
            })
            .collect();
        lines.sort();
        lines
    };
    let our_env = env(ours.exec_ok(&["env"]), &ours.ws);
    for var in
        ["WR_REMOTE=/opt/wr-base/remote", "WR_CONFIG_ENV=from-config", "PATH=/opt/wr-base/bin:…", "HOME=/home/dev"]
    {
        assert!(our_env.contains(&var.to_string()), "{var} in {our_env:?}");
    }
    assert_eq!(our_env, env(theirs_exec("env"), &theirs.ws));
    // The same lockfile, byte for byte.
    assert_eq!(ours.lockfile(), theirs.lockfile());
    // The same image label: the base image's entries, the features', then
    // devcontainer.json's; and the same container label.
    let image_label = |image: &str| {
        docker_ok(&["image", "inspect", image, "--format", "{{index .Config.Labels \"devcontainer.metadata\"}}"])
    };
    let (our_label, their_label) = (image_label(&ours.room_image()), image_label(&their_image));
    assert!(our_label.contains("\"remoteUser\":\"dev\""), "the config's entry is in the image label: {our_label}");
    assert_eq!(
        serde_json::from_str::<Value>(&our_label).unwrap(),
        serde_json::from_str::<Value>(&their_label).unwrap()
    );
    let container_label = |c: &str| -> Value {
        serde_json::from_str(&docker_ok(&[
            "inspect",
            c,
            "--format",
            "{{index .Config.Labels \"devcontainer.metadata\"}}",
        ]))
        .unwrap()
    };
    assert_eq!(container_label(&ours.room_name()), container_label(&their_container[0]));

    // The same merged configuration, before the rooms and read back from them.
    let (ours_before, theirs_before) = merged_before;
    assert_eq!(ours_before, with_config_path(theirs_before, &ours_before));
    let theirs_after =
        merged_of(&reference_json(&reference(&["read-configuration", "--include-merged-configuration"])));
    let ours_after = ours.merged_configuration();
    assert_eq!(ours_after, with_config_path(theirs_after, &ours_after));
    assert_eq!(ours_after["remoteUser"], "dev");
    assert_eq!(ours_after["capAdd"], json!(["SYS_PTRACE"]));
}

/// How long the reference's hooks may take to finish after its `up`
/// answered, on a loaded machine.
const HOOKS_WAIT: Duration = Duration::from_secs(60);

/// The last JSON line a reference command printed on stdout.
fn reference_json(out: &std::process::Output) -> Value {
    let text = stdout(out);
    let line = text.lines().rev().find(|l| l.trim_start().starts_with('{')).unwrap_or("null");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("reference output ({e}): {text}\n{}", stderr(out)))
}

/// The merged configuration as both print it, with the reference's
/// `configFilePath` URI reduced to its path.
fn merged_of(printed: &Value) -> Value {
    let mut merged = printed["mergedConfiguration"].clone();
    if let Some(uri) = merged.get("configFilePath").and_then(|p| p.get("fsPath")).cloned() {
        merged["configFilePath"] = uri;
    }
    merged
}

/// `theirs` with `ours`'s config path and the service feature's volume
/// name: in a merged configuration these name each workspace (its own file,
/// its `${devcontainerId}`).
fn with_config_path(mut theirs: Value, ours: &Value) -> Value {
    theirs["configFilePath"] = ours["configFilePath"].clone();
    let volume = |m: &Value| m["mounts"].as_array()?.iter().find(|m| m["target"] == "/var/lib/wr-service").cloned();
    if let (Some(their_mount), Some(our_mount)) = (volume(&theirs), volume(ours)) {
        assert!(their_mount["source"].as_str().is_some_and(|s| s.starts_with("wr-feature-service-")), "{their_mount}");
        for m in theirs["mounts"].as_array_mut().unwrap().iter_mut().filter(|m| **m == their_mount) {
            m["source"] = our_mount["source"].clone();
        }
    }
    theirs
}

/// The service feature's volume on a container, removed on drop.
fn feature_volume(container: &str) -> Option<VolumeGuard> {
    let mounts: Vec<Value> =
        serde_json::from_slice(docker(&["inspect", container, "--format", "{{json .Mounts}}"]).stdout.trim_ascii())
            .ok()?;
    let volume = mounts.iter().find(|m| m["Destination"] == "/var/lib/wr-service")?["Name"].as_str()?.to_string();
    Some(VolumeGuard { volume, room: container.to_string() })
}

/// Removes an image the test made (or had the reference make), with the
/// test's containers made from it.
struct ImageGuard(String);

impl Drop for ImageGuard {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let users =
            docker_ok(&["ps", "-aq", "--filter", &format!("ancestor={}", self.0), "--filter", "label=workroom.test"]);
        for id in users.lines() {
            remove_container(id);
        }
        let _ = docker(&["rmi", &self.0]);
    }
}

/// The untagged images the reference's classic build of its features
/// leaves: its Dockerfile has stages before the last (one FROM its
/// temporary image, one FROM the base that copies and chmods the features),
/// and the classic builder keeps the top of each such stage untagged, with
/// the labels of the fixture it was built on (and the temporary image
/// under the first). Those that appeared during the test and were made by
/// its steps are removed on drop, taking their untagged parents with them.
struct ReferenceStages {
    before: Vec<String>,
}

impl ReferenceStages {
    fn before_its_build() -> ReferenceStages {
        ReferenceStages { before: dangling_images() }
    }
}

impl Drop for ReferenceStages {
    fn drop(&mut self) {
        for id in dangling_images().into_iter().filter(|id| !self.before.contains(id)) {
            let history = stdout(&docker(&["history", "--no-trunc", "--format", "{{.CreatedBy}}", &id]));
            if history.contains("/tmp/build-features") {
                let _ = docker(&["rmi", &id]);
            }
        }
    }
}

fn dangling_images() -> Vec<String> {
    docker_ok(&["images", "-q", "--no-trunc", "--filter", "dangling=true"]).lines().map(str::to_string).collect()
}

#[test]
fn a_base_image_pull_shows_a_line_per_layer_then_a_summary_on_a_terminal() {
    // The engine pulls from the test's registry (localhost is insecure-allowed).
    let registry = Registry::start();
    let ws = FeatureWorkspace::new(json!({}));
    // A layer of its own, so the engine has something to download (a pull
    // of layers it holds already says nothing about them).
    let image = format!("{}/wr/busybox-{}:1", registry.host(), ws.unique());
    let _image = ImageGuard(image.clone());
    let mut build = std::process::Command::new("docker");
    build.args(["build", "-q", "-t", &image, "-"]).env("DOCKER_BUILDKIT", "0");
    let dockerfile = format!("FROM {BUSYBOX}\nRUN echo {} > /unique\nLABEL workroom.test=1\n", ws.unique());
    let built = output_within(build, Some(dockerfile.as_bytes()));
    assert!(built.status.success(), "docker build: {}", stderr(&built));
    let pushed = docker(&["push", &image]);
    assert!(pushed.status.success(), "docker push: {}", stderr(&pushed));
    docker_ok(&["rmi", &image]);
    ws.rewrite(json!({ "image": image }));

    let mut term = pty::Term::spawn(workroom_bin(), &["up", "--workspace-folder", &ws.folder()], 30, 120);
    term.expect(&format!("pulling {image}"), UP_GUARD);
    term.expect("layer ", UP_GUARD);
    term.expect(&format!("pulled {image} in "), UP_GUARD);
    assert_eq!(term.wait(UP_GUARD), 0, "{}", term.all());
    assert!(term.all().contains("✓ layer "), "{}", term.all());
    assert!(term.all().contains(": pull complete ("), "{}", term.all());
}

#[test]
fn two_ups_of_the_same_features_at_once_build_the_image_once() {
    // Two workspaces with the same local feature and one cache: the same key.
    let mark = format!("wr-race-{}", std::process::id());
    let make = || {
        let ws = FeatureWorkspace::new(json!({ "image": DEBIAN, "features": { "./race": {} } }));
        let folder = ws.config_dir().join("race");
        std::fs::create_dir_all(&folder).unwrap();
        let json = format!(r#"{{ "id": "race", "version": "1.0.0", "containerEnv": {{ "WR_RACE": "{mark}" }} }}"#);
        std::fs::write(folder.join("devcontainer-feature.json"), json).unwrap();
        std::fs::write(folder.join("install.sh"), "#!/bin/sh\necho racing\n").unwrap();
        ws
    };
    let (a, mut b) = (make(), make());
    let cache = a.env.iter().find(|(k, _)| k == "XDG_CACHE_HOME").unwrap().clone();
    b.ws.env.retain(|(k, _)| k != "XDG_CACHE_HOME");
    b.ws.env.push(cache);
    let (up_a, up_b) = (a.ws.command(&["up"]), b.ws.command(&["up"]));
    let ta = std::thread::spawn(move || output_within_guard(up_a, None, UP_GUARD));
    let tb = std::thread::spawn(move || output_within_guard(up_b, None, UP_GUARD));
    let (out_a, out_b) = (ta.join().unwrap(), tb.join().unwrap());
    assert!(out_a.status.success(), "{}", stderr(&out_a));
    assert!(out_b.status.success(), "{}", stderr(&out_b));
    a.images.borrow_mut().push(a.room_image());
    let builds = [&out_a, &out_b].iter().filter(|o| stderr(o).contains("installing ./race")).count();
    assert_eq!(builds, 1, "a:\n{}\nb:\n{}", stderr(&out_a), stderr(&out_b));
    assert_eq!(a.image_id(), b.image_id());
    // No second image of the same content left dangling.
    let env = format!("WR_RACE={mark}");
    let images = docker_ok(&["images", "-q", "--no-trunc"]);
    let holding: Vec<&str> = images
        .lines()
        .filter(|id| {
            docker(&["image", "inspect", id, "--format", "{{json .Config.Env}}"])
                .stdout
                .windows(env.len())
                .any(|w| w == env.as_bytes())
        })
        .collect();
    assert_eq!(holding.len(), 1, "{holding:?}");
}

/// Reads the service feature's heartbeat until it moves: a loop that writes
/// it is alive now (every process of a room dies with its stop, so after a
/// restart only that start's entrypoint can have started it).
fn heartbeat_moves(ws: &FeatureWorkspace) -> String {
    let read = || ws.exec(&["cat", "/tmp/wr-service-heartbeat"]);
    let deadline = std::time::Instant::now() + HEARTBEAT_WAIT;
    let mut first: Option<String> = None;
    loop {
        let out = read();
        if out.status.success() {
            let now = stdout(&out).trim().to_string();
            match &first {
                Some(before) if *before != now => return now,
                Some(_) => {}
                None => first = Some(now),
            }
        }
        assert!(std::time::Instant::now() < deadline, "the heartbeat did not move within {HEARTBEAT_WAIT:?}");
    }
}

/// The heartbeat loop writes every second; a few seconds of slack for a
/// loaded machine.
const HEARTBEAT_WAIT: Duration = Duration::from_secs(20);

/// A named volume a room's metadata made, and the room using it: both
/// removed on drop (the room first, or the volume is in use).
struct VolumeGuard {
    volume: String,
    room: String,
}

impl Drop for VolumeGuard {
    fn drop(&mut self) {
        remove_container(&self.room);
        let _ = docker(&["volume", "rm", "-f", &self.volume]);
    }
}

#[test]
fn a_features_entrypoint_capability_mount_and_hooks_take_effect_in_the_room_and_again_after_a_restart() {
    let ws = FeatureWorkspace::new(json!({
        "image": DEBIAN,
        "features": { "./service": {} },
        "postCreateCommand": "echo config-postcreate >> /tmp/wr-service-hooks"
    }));
    copy_dir(&repo_root().join("fixtures/features/src/service"), &ws.config_dir().join("service"));
    let out = ws.up(&[], &[]);
    let room = ws.room_name();
    let mounts: Vec<Value> =
        serde_json::from_str(&docker_ok(&["inspect", &room, "--format", "{{json .Mounts}}"])).unwrap();
    let mount = mounts.iter().find(|m| m["Destination"] == "/var/lib/wr-service").cloned();
    let _volume = mount
        .as_ref()
        .map(|m| VolumeGuard { volume: m["Name"].as_str().unwrap_or_default().to_string(), room: room.clone() });
    let err = stderr(&out);

    // The mount: the feature's named volume, its ${devcontainerId} substituted.
    let mount = mount.unwrap_or_else(|| panic!("no mount at /var/lib/wr-service: {mounts:?}"));
    assert_eq!(mount["Type"], "volume");
    let name = mount["Name"].as_str().unwrap();
    assert!(name.starts_with("wr-feature-service-") && !name.contains('$'), "{name}");
    ws.exec_ok(&["sh", "-c", "echo kept > /var/lib/wr-service/kept"]);

    // The capability, said once as it widens the room, and applied.
    let caps = docker_ok(&["inspect", &room, "--format", "{{json .HostConfig.CapAdd}}"]);
    assert!(caps.contains("SYS_PTRACE"), "{caps}");
    assert!(err.contains("capability SYS_PTRACE (asked by feature ./service)"), "{err}");
    let effective = ws.exec_ok(&["sh", "-c", "grep CapBnd /proc/self/status"]);
    let bounding = u64::from_str_radix(effective.split_whitespace().last().unwrap(), 16).unwrap();
    const CAP_SYS_PTRACE: u32 = 19;
    assert_ne!(bounding & (1 << CAP_SYS_PTRACE), 0, "SYS_PTRACE is in the room's bounding set: {effective}");

    // The entrypoint started the service as root; the daemon stays PID 1's child.
    heartbeat_moves(&ws);
    assert_eq!(ws.exec_ok(&["stat", "-c", "%U", "/tmp/wr-service-heartbeat"]), "root\n");
    let main = ws.exec_ok(&["sh", "-c", "tr '\\0' ' ' < /proc/1/cmdline"]);
    assert!(main.contains("workroomd serve --entrypoint /usr/local/share/wr-service/start.sh"), "{main}");

    // The hooks: the feature's before the config's, each named by its origin.
    assert_eq!(
        ws.exec_ok(&["cat", "/tmp/wr-service-hooks"]),
        "service-postcreate\nconfig-postcreate\nservice-poststart\n"
    );
    assert!(err.contains("[postCreateCommand from feature ./service]"), "{err}");
    assert!(err.contains("[postCreateCommand from devcontainer.json]"), "{err}");

    // A restart: the entrypoint runs again (a live heartbeat), postStart
    // again, postCreate not; the volume keeps its file.
    docker_ok(&["restart", "-t", "1", &room]);
    let again = ws.workroom(&["up"]);
    assert!(again.status.success(), "up after the restart: {}", stderr(&again));
    heartbeat_moves(&ws);
    assert_eq!(
        ws.exec_ok(&["cat", "/tmp/wr-service-hooks"]),
        "service-postcreate\nconfig-postcreate\nservice-poststart\nservice-poststart\n"
    );
    assert_eq!(ws.exec_ok(&["cat", "/var/lib/wr-service/kept"]), "kept\n");
}
