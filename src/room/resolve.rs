//! From what a command is given (a workspace folder, `--config`, flags) to
//! the room: the configuration, the settings that shape the room (the files,
//! devcontainer.json's `customizations.workroom`, the flags), the options
//! `up` makes it with, and the container on the engine.
//!
//! Every command that starts from a workspace comes through here, so `shell`
//! makes the room `up` would make, and `exec`, `forward` and the pane
//! commands find the room `up` made. Before this module each command read
//! the settings its own way, and `shell` made rooms without the
//! `customizations.workroom` settings.

use super::up::UpOptions;
use crate::config::{self, LoadRequest, Loaded};
use crate::engine::{Engine, EngineError};
use crate::plan::{identity, labels, nested::RoomShape};
use crate::settings::{self, Flags, Settings};
use bollard::models::ContainerInspectResponse;
use std::path::{Path, PathBuf};

/// A workspace's configuration and the settings for its room.
#[derive(Debug)]
pub struct Resolved {
    pub loaded: Loaded,
    pub settings: Settings,
}

/// What the command line says about bringing a room up; the rest of
/// [`UpOptions`] comes from the settings.
#[derive(Debug, Clone, Default)]
pub struct UpFlags {
    pub recreate: bool,
    /// Run postAttachCommand (`up --skip-post-attach` clears it).
    pub post_attach: bool,
    /// `up --name NAME`.
    pub name: Option<String>,
    /// `--frozen-lockfile` / `--no-lockfile`.
    pub lock: crate::features::LockMode,
}

/// Why a command that needs a running room cannot have one.
#[derive(Debug, thiserror::Error)]
pub enum FindError {
    #[error("no room for {folder}; `workroom up` makes one")]
    NoRoom { folder: PathBuf },
    #[error("no room named {name} (`workroom list` shows the rooms)")]
    NoRoomNamed { name: String },
    #[error("a container named {name} exists but was not made by workroom")]
    NotOurs { name: String },
    #[error("{name} is not running; `workroom up` starts it")]
    NotRunning { name: String },
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// A running room made by workroom, as the engine described it.
#[derive(Debug, Clone)]
pub struct Room {
    pub id: String,
    /// The container's name, without the engine's leading `/`.
    pub name: String,
    pub container: ContainerInspectResponse,
}

impl Room {
    /// Checks that `c` is ours and running.
    fn of(c: ContainerInspectResponse, fallback_name: &str) -> Result<Room, FindError> {
        let name = c.name.as_deref().unwrap_or(fallback_name).trim_start_matches('/').to_string();
        if label(&c, labels::SCHEMA).is_none() {
            return Err(FindError::NotOurs { name });
        }
        if c.state.as_ref().and_then(|s| s.running) != Some(true) {
            return Err(FindError::NotRunning { name });
        }
        Ok(Room { id: c.id.clone().unwrap_or_else(|| name.clone()), name, container: c })
    }

    /// Who hooks, exec and panes run as (recorded at create).
    pub fn remote_user(&self) -> String {
        label(&self.container, labels::REMOTE_USER).unwrap_or("root").to_string()
    }

    /// `State.StartedAt`: the engine's name for this start of the room.
    pub fn started_at(&self) -> &str {
        self.container.state.as_ref().and_then(|s| s.started_at.as_deref()).unwrap_or_default()
    }
}

fn label<'a>(c: &'a ContainerInspectResponse, key: &str) -> Option<&'a str> {
    c.config.as_ref()?.labels.as_ref()?.get(key).map(String::as_str)
}

impl Resolved {
    /// Reads the workspace's devcontainer.json (`config` overrides where it
    /// is looked for) and the settings, with `flags` over both.
    pub fn load(folder: &Path, config: Option<PathBuf>, flags: Flags) -> anyhow::Result<Resolved> {
        let loaded = config::load(&LoadRequest::new(folder, config))?;
        let settings = settings::load_with(
            &loaded.workspace.local_folder,
            flags,
            loaded.model.customizations.as_ref(),
            &loaded.config_path,
        )?;
        Ok(Resolved { loaded, settings })
    }

    /// What a command that makes the room says about the file before it
    /// does (commands that only use the room stay quiet).
    pub fn warnings(&self) -> Vec<String> {
        self.loaded.warnings()
    }

    /// How `up` makes and starts this workspace's room.
    pub fn up_options(&self, flags: UpFlags) -> UpOptions {
        up_options(&self.settings, flags)
    }

    /// The name the settings give the workspace's room.
    pub fn room_name(&self) -> String {
        let local = &self.loaded.workspace.local_folder;
        identity::room_name_in(local, &self.loaded.config_path, self.settings.wanted_group())
    }

    /// The workspace's container, running or not.
    pub async fn find(&self, engine: &Engine) -> Result<Option<ContainerInspectResponse>, EngineError> {
        super::locate(engine, &self.loaded, self.settings.wanted_group()).await
    }

    /// The workspace's room, made by workroom and running.
    pub async fn running(&self, engine: &Engine) -> Result<Room, FindError> {
        match self.find(engine).await? {
            Some(c) => Room::of(c, &self.room_name()),
            None => Err(FindError::NoRoom { folder: self.loaded.workspace.local_folder.clone() }),
        }
    }
}

/// [`Resolved::up_options`], over plain data.
pub fn up_options(settings: &Settings, flags: UpFlags) -> UpOptions {
    UpOptions {
        recreate: flags.recreate,
        post_attach: flags.post_attach,
        peer: settings.peer_messaging,
        peer_group: settings.peer_group.clone(),
        peer_registry: settings.peer_registry.clone(),
        name: flags.name,
        shape: RoomShape { nested: settings.nested, network: settings.network },
        refuse_metadata_privileged: !settings.metadata_privileged,
        lock: flags.lock,
        workspace: settings.workspace,
    }
}

/// A room by its container name or id (`workroom forward ROOM ...`), running
/// and made by workroom, with its configuration when the files its labels
/// name can still be read.
pub async fn by_name(engine: &Engine, name: &str) -> Result<(Room, Option<Resolved>), FindError> {
    let c = engine.inspect_container(name).await?.ok_or_else(|| FindError::NoRoomNamed { name: name.to_string() })?;
    let room = Room::of(c, name)?;
    let resolved = match (label(&room.container, labels::LOCAL_FOLDER), label(&room.container, labels::CONFIG_FILE)) {
        (Some(folder), Some(file)) => Resolved::load(Path::new(folder), Some(file.into()), Flags::default()).ok(),
        _ => None,
    };
    Ok((room, resolved))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::NetworkMode;

    fn settings() -> Settings {
        Settings {
            peer_messaging: false,
            peer_group: "default".into(),
            peer_registry: "/r".into(),
            ssh_agent: true,
            git_credentials: true,
            nested: false,
            network: NetworkMode::default(),
            metadata_privileged: true,
            history_lines: None,
            history_bytes: None,
            workspace: Default::default(),
        }
    }

    #[test]
    fn up_options_carry_the_nested_and_network_settings_into_the_room_shape() {
        let s = Settings { nested: true, network: NetworkMode::Host, peer_messaging: true, ..settings() };
        let o = up_options(&s, UpFlags { post_attach: true, ..Default::default() });
        assert_eq!(o.shape, RoomShape { nested: true, network: NetworkMode::Host });
        assert!(o.peer && o.post_attach && !o.recreate);
        assert_eq!(o.peer_group, "default", "the settings' group");
        assert_eq!(o.peer_registry, PathBuf::from("/r"));
    }

    #[test]
    fn up_options_take_recreate_and_name_from_the_flags_only() {
        let flags = UpFlags { recreate: true, post_attach: false, name: Some("n".into()), ..Default::default() };
        let o = up_options(&settings(), flags);
        assert!(o.recreate && !o.post_attach);
        assert_eq!(o.name.as_deref(), Some("n"));
        assert_eq!(o.shape, RoomShape::default());
    }
}
