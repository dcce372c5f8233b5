//! The labels a room carries. The reference CLI's three let its `exec
//! --workspace-folder` and editors find our rooms; the `workroom.*` ones let
//! `list`, `stop --all` and drift checks work from one `inspect` or `ps`.

use crate::config::Loaded;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

pub type Labels = BTreeMap<String, String>;

pub const LOCAL_FOLDER: &str = "devcontainer.local_folder";
pub const CONFIG_FILE: &str = "devcontainer.config_file";
pub const METADATA: &str = super::metadata::LABEL;
/// Present on every room: what `list` and `stop --all` filter on.
pub const SCHEMA: &str = "workroom.schema";
pub const VERSION: &str = "workroom.version";
pub const CONFIG_HASH: &str = "workroom.config_hash";
pub const REMOTE_USER: &str = "workroom.remote_user";
pub const WORKSPACE_FOLDER: &str = "workroom.workspace_folder";
/// A linked checkout's git folder as mounted (`plan::git::Summary` as JSON),
/// for `up --json` and `list` without reading the host's files again.
pub const GIT: &str = "workroom.git";

/// Bumped when a room made by an older workroom can no longer be driven
/// (layout in the container, labels, daemon protocol); such rooms are named
/// and the user is told to recreate them.
pub const SCHEMA_VERSION: &str = "1";

/// `metadata` is the room's `devcontainer.metadata` label (see
/// [`super::metadata::RoomMetadata::label`]).
pub fn for_room(loaded: &Loaded, metadata: String, remote_user: &str, extra: &[(String, String)]) -> Labels {
    let mut labels: Labels = extra.iter().cloned().collect();
    labels.insert(LOCAL_FOLDER.into(), loaded.workspace.local_folder.display().to_string());
    labels.insert(CONFIG_FILE.into(), loaded.config_path.display().to_string());
    labels.insert(METADATA.into(), metadata);
    labels.insert(SCHEMA.into(), SCHEMA_VERSION.into());
    labels.insert(VERSION.into(), env!("CARGO_PKG_VERSION").into());
    labels.insert(CONFIG_HASH.into(), config_hash(loaded));
    labels.insert(REMOTE_USER.into(), remote_user.into());
    labels.insert(WORKSPACE_FOLDER.into(), loaded.workspace.folder.clone());
    labels
}

/// A hash of what the container was created from: the substituted config and
/// the workspace mount. A change means the room no longer matches its config.
pub fn config_hash(loaded: &Loaded) -> String {
    let mut h = Sha256::new();
    h.update(Value::Object(loaded.json.clone()).to_string());
    h.update(b"\0");
    h.update(loaded.workspace.mount.as_deref().unwrap_or_default());
    h.update(b"\0");
    h.update(&loaded.workspace.folder);
    hex::encode(&h.finalize()[..16])
}
