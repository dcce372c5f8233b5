//! Dev Container Features: what `features` names, fetched, cached, locked,
//! ordered and validated as the reference CLI does, ready to be installed
//! into a derived image by `room::features`.
//!
//! # Layout
//!
//! Pure decisions, each with its table tests:
//! - `reference`: a key of `features` → an OCI ref, a local folder or a tarball;
//! - `options`: the user's values over the declared defaults, checked, and
//!   `devcontainer-features.env`;
//! - `order`: the dependency worklist's install rounds;
//! - `lockfile`: `devcontainer-lock.json`;
//! - `metadata`: the `devcontainer.metadata` entries features contribute;
//! - `recipe`: the derived image's Dockerfile, context and cache key;
//! - `collate`: the reference's string order;
//! - `versions`: the semantic versions among a feature's tags, and which
//!   one a tag wants (`outdated`, `upgrade`).
//!
//! The edges: `cache` (the content-addressed store in the user's cache
//! folder), `fetch` (OCI distribution and tarballs over HTTP), and
//! `resolve`, which walks the config with them.

mod cache;
mod collate;
mod error;
mod fetch;
pub mod lockfile;
pub mod metadata;
pub mod options;
pub mod order;
pub mod recipe;
pub mod reference;
mod resolve;
pub mod versions;

pub use cache::{digest_of, Cache};
pub use error::FeatureError;
pub use fetch::{FetchError, Fetcher};
pub use resolve::{lockfile_of, resolve, write_lockfile, Feature, LockMode, Resolved};

use crate::config::Loaded;
use serde_json::Value;

/// What resolving tells a person while it works. Everything defaults to
/// silence but warnings, which must reach the user.
pub trait Report: Sync {
    /// A download starts (a cache miss).
    fn fetching(&self, _what: &str) {}
    /// A download finished.
    fn fetched(&self, _what: &str, _bytes: usize) {}
    fn warning(&self, text: &str);
}

/// The `devcontainer.metadata` entries of the resolved features, in install
/// order, in the label's format: what a derived image's label holds after
/// the base image's own entries.
pub fn entries(resolved: &Resolved) -> Vec<Value> {
    resolved.features.iter().map(|f| metadata::entry(&f.user_id, &f.json)).collect()
}

/// The features' metadata entries for a config, without building anything
/// or writing the lockfile (it pins, as for `up`): for `workroom config
/// --include-merged-configuration`. Fetches what the cache lacks. An empty
/// list when the config has no features.
pub async fn metadata_entries(loaded: &Loaded, cache: &Cache, report: &dyn Report) -> Result<Vec<Value>, FeatureError> {
    let fetcher = Fetcher::default();
    let resolved = resolve(loaded, LockMode::ReadOnly, cache, &fetcher, report).await?;
    Ok(resolved.as_ref().map(entries).unwrap_or_default())
}

/// What each feature's install needs, in order: its folder, its env file,
/// and its place in the image (`<id>_<index>`, as the reference names it).
pub fn installs(resolved: &Resolved) -> Vec<recipe::Install> {
    resolved
        .features
        .iter()
        .enumerate()
        .map(|(i, f)| recipe::Install {
            consecutive_id: format!("{}_{i}", f.id),
            id_without_version: f.id_without_version(),
            feature: f.json.clone(),
            folder: f.folder.clone(),
            env: options::env_file(&f.values),
        })
        .collect()
}

/// The users `install.sh` is told about (`findContainerUsers`): the last
/// `containerUser` of the base image's entries and the config, else the
/// image's user; the last `remoteUser`, else the container user.
/// (Features' own entries never carry users.)
pub fn users(base_entries: &[Value], loaded: &Loaded, image_user: Option<&str>) -> recipe::Users {
    let image_user = image_user.filter(|u| !u.is_empty()).unwrap_or("root").to_string();
    let last = |key: &str, config: Option<&String>| {
        config.cloned().or_else(|| {
            base_entries
                .iter()
                .rev()
                .find_map(|e| e.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()).map(String::from))
        })
    };
    let container_user =
        last("containerUser", loaded.model.container_user.as_ref()).unwrap_or_else(|| image_user.clone());
    let remote_user = last("remoteUser", loaded.model.remote_user.as_ref()).unwrap_or_else(|| container_user.clone());
    recipe::Users { image_user, container_user, remote_user }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load, LoadRequest};

    #[test]
    fn metadata_entries_come_without_a_build_in_install_order_and_write_no_lockfile() {
        let dir = tempfile::tempdir().unwrap();
        let config_dir = dir.path().join(".devcontainer");
        for (id, extra) in [("svc", r#", "entrypoint": "/start.sh", "capAdd": ["SYS_PTRACE"]"#), ("tool", "")] {
            let folder = config_dir.join(id);
            std::fs::create_dir_all(&folder).unwrap();
            let json = format!(r#"{{ "id": "{id}", "version": "1.0.0", "containerEnv": {{ "X": "1" }}{extra} }}"#);
            std::fs::write(folder.join("devcontainer-feature.json"), json).unwrap();
            std::fs::write(folder.join("install.sh"), "#!/bin/sh\n").unwrap();
        }
        std::fs::write(
            config_dir.join("devcontainer.json"),
            r#"{ "image": "x", "features": { "./tool": {}, "./svc": {} }, "overrideFeatureInstallOrder": ["./svc"] }"#,
        )
        .unwrap();
        let loaded = load(&LoadRequest::new(dir.path(), None)).unwrap();
        let cache = Cache::at(dir.path().join("cache"));
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let entries = runtime.block_on(metadata_entries(&loaded, &cache, &crate::notices::Notices::kept())).unwrap();
        assert_eq!(
            entries,
            vec![
                serde_json::json!({ "id": "./svc", "capAdd": ["SYS_PTRACE"], "entrypoint": "/start.sh" }),
                serde_json::json!({ "id": "./tool" }),
            ]
        );
        assert!(!config_dir.join("devcontainer-lock.json").exists());
    }
}
