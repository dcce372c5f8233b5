//! A room's life on the engine: `up` (image, create, daemon upload, start,
//! hooks), and finding, listing and stopping rooms.

pub mod compose;
pub mod daemon;
pub mod handoff;
pub mod hooks;
pub mod image;
pub mod nested;
pub mod peers;
pub mod probe;
pub mod ready;
mod requirements;
pub mod resolve;
pub mod up;

use crate::engine::{Engine, EngineError};
use crate::plan::labels;
use bollard::models::ContainerSummary;

/// Every container with our schema label (and this install's scope, if
/// any): rooms and the peer anchor. Nothing without the label is ever
/// listed, stopped or removed.
pub async fn all_rooms(engine: &Engine) -> Result<Vec<ContainerSummary>, EngineError> {
    engine.list(&scoped(vec![labels::SCHEMA.to_string()])).await
}

fn scoped(mut filters: Vec<String>) -> Vec<String> {
    if let Some(scope) = peers::names_from_env().scope {
        filters.push(format!("{}={scope}", crate::plan::peers::SCOPE_LABEL));
    }
    filters
}

/// The room of a workspace folder (by the reference CLI's label), if any.
pub async fn find_by_folder(engine: &Engine, folder: &std::path::Path) -> Result<Vec<ContainerSummary>, EngineError> {
    engine
        .list(&scoped(vec![labels::SCHEMA.to_string(), format!("{}={}", labels::LOCAL_FOLDER, folder.display())]))
        .await
}

/// The workspace's room: by the name the settings give it, else by the other
/// peer setting (a room made with `up --peer=...` against the files' word).
/// One inspect when the settings agree with the room, two otherwise.
pub async fn locate(
    engine: &Engine,
    loaded: &crate::config::Loaded,
    peer: bool,
) -> Result<Option<bollard::models::ContainerInspectResponse>, EngineError> {
    use crate::plan::identity::room_name;
    let local = &loaded.workspace.local_folder;
    if let Some(c) = engine.inspect_container(&room_name(local, &loaded.config_path, peer)).await? {
        return Ok(Some(c));
    }
    engine.inspect_container(&room_name(local, &loaded.config_path, !peer)).await
}

/// The environment a container was created with (`Config.Env`), as a map:
/// what `${containerEnv:...}` reads.
pub fn container_env(c: &bollard::models::ContainerInspectResponse) -> std::collections::HashMap<String, String> {
    c.config
        .as_ref()
        .and_then(|c| c.env.as_ref())
        .map(|env| env.iter().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect())
        .unwrap_or_default()
}

/// A room's metadata as its `devcontainer.metadata` label recorded it at
/// creation, under what the current devcontainer.json may still change
/// (`remoteUser`, `userEnvProbe`, `remoteEnv`): the reference's reading of
/// an existing container, from the one inspect `exec` makes anyway.
pub fn metadata_of(
    loaded: &crate::config::Loaded,
    c: &bollard::models::ContainerInspectResponse,
) -> crate::plan::metadata::RoomMetadata {
    let name = c.name.as_deref().unwrap_or_default().trim_start_matches('/');
    let label = c.config.as_ref().and_then(|c| c.labels.as_ref()?.get(labels::METADATA)).map(String::as_str);
    crate::plan::metadata::of_container(loaded, name, label)
}
