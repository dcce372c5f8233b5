//! A room's life on the engine: `up` (image, create, daemon upload, start,
//! hooks), and finding, listing and stopping rooms.

pub mod agents;
pub mod build;
pub mod compose;
pub mod creating;
pub mod daemon;
pub mod daemon_volume;
pub mod features;
mod forwarder;
pub mod handoff;
pub mod hooks;
pub mod image;
mod make;
pub mod nested;
pub mod notes;
pub mod peers;
pub mod probe;
pub mod program;
pub mod ready;
mod reattach;
mod reference_markers;
mod requirements;
pub mod resolve;
pub mod sync;
pub mod up;
pub mod users;
pub mod workspace_volume;
pub mod worktree;

use crate::engine::{Engine, EngineError};
use crate::plan::labels;
use bollard::models::ContainerSummary;

/// This host's environment and files, as `runArgs` reads them (`-e NAME`,
/// `--env-file`, `--label-file`): the plan's one window on the host, opened
/// here so that `plan` does no I/O.
pub struct HostFiles;

impl crate::plan::run_args::Host for HostFiles {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
    fn read(&self, path: &std::path::Path) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }
}

/// Every container with our schema label (and this install's scope, if
/// any): rooms and the peer anchor. Nothing without the label is ever
/// listed, stopped or removed.
pub async fn all_rooms(engine: &Engine) -> Result<Vec<ContainerSummary>, EngineError> {
    engine.list(&scoped(vec![labels::SCHEMA.to_string()])).await
}

/// `filters` and this install's scope, if any.
pub(crate) fn scoped(mut filters: Vec<String>) -> Vec<String> {
    if let Some(scope) = peers::scope_from_env() {
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

/// The workspace's room: by the name the settings give it (`group`: its peer
/// group, `None` with peers off), else the workspace's room made with
/// another peer setting or group (`up --peer=...` against the files' word),
/// a running one first. One inspect when the settings agree with the room.
pub async fn locate(
    engine: &Engine,
    loaded: &crate::config::Loaded,
    group: Option<&str>,
) -> Result<Option<bollard::models::ContainerInspectResponse>, EngineError> {
    use crate::plan::identity::room_name_in;
    let local = &loaded.workspace.local_folder;
    if let Some(c) = engine.inspect_container(&room_name_in(local, &loaded.config_path, group)).await? {
        return Ok(Some(c));
    }
    let mut others = workspace_rooms(engine, loaded).await?;
    others.sort_by_key(|c| c.state != Some(bollard::models::ContainerSummaryStateEnum::RUNNING));
    match others.first().and_then(|c| c.id.as_deref()) {
        Some(id) => engine.inspect_container(id).await,
        None => Ok(None),
    }
}

/// Every room made for this workspace and config as its own room (not
/// `up --name` rooms), whatever peer setting or group made it.
pub async fn workspace_rooms(
    engine: &Engine,
    loaded: &crate::config::Loaded,
) -> Result<Vec<ContainerSummary>, EngineError> {
    let local = &loaded.workspace.local_folder;
    let mut found = find_by_folder(engine, local).await?;
    found.retain(|c| {
        let labels = c.labels.as_ref();
        let config = labels.and_then(|l| l.get(labels::CONFIG_FILE)).map(String::as_str);
        let made = crate::plan::peers::RoomPeerFacts::of_labels(labels);
        let name = c.names.as_ref().and_then(|n| n.first()).map(|n| n.trim_start_matches('/'));
        config == Some(loaded.config_path.display().to_string().as_str())
            && name == Some(crate::plan::identity::room_name_in(local, &loaded.config_path, made.made_in()).as_str())
    });
    Ok(found)
}

/// The rooms `up --name` made of the same NAME under any peer setting or
/// group (`plain`: its name with peers off), from any workspace.
pub async fn named_rooms(engine: &Engine, plain: &str) -> Result<Vec<ContainerSummary>, EngineError> {
    let mut found = engine.list(&scoped(vec![labels::SCHEMA.to_string()])).await?;
    found.retain(|c| {
        let name = c.names.as_ref().and_then(|n| n.first()).map(|n| n.trim_start_matches('/'));
        name.is_some_and(|n| crate::plan::identity::is_named_variant(n, plain))
    });
    Ok(found)
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

/// The rooms of this workspace (or of this `--name`) made with another peer
/// setting or group than `wanted`, with their ids.
pub(super) async fn siblings(
    engine: &Engine,
    loaded: &crate::config::Loaded,
    named: Option<&str>,
    wanted: &str,
) -> anyhow::Result<Vec<(crate::plan::peers::Sibling, String)>> {
    let rooms = match named.and_then(|n| crate::plan::identity::named_room_name_in(n, None)) {
        Some(plain) => named_rooms(engine, &plain).await?,
        None => workspace_rooms(engine, loaded).await?,
    };
    let mut found = Vec::new();
    for c in rooms {
        let Some(name) = c.names.as_ref().and_then(|n| n.first()).map(|n| n.trim_start_matches('/').to_string()) else {
            continue;
        };
        if name == wanted {
            continue;
        }
        let made = crate::plan::peers::RoomPeerFacts::of_labels(c.labels.as_ref()).made_in().map(str::to_string);
        let running = c.state == Some(bollard::models::ContainerSummaryStateEnum::RUNNING);
        let id = c.id.clone().unwrap_or_else(|| name.clone());
        found.push((crate::plan::peers::Sibling { name, running, made }, id));
    }
    Ok(found)
}
