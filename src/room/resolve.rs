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
        Resolved::load_request(&LoadRequest::new(folder, config), flags)
    }

    /// [`Resolved::load`] as `request` says (the devcontainer face's
    /// `--override-config`, `--mount-workspace-git-root`).
    pub fn load_request(request: &LoadRequest, flags: Flags) -> anyhow::Result<Resolved> {
        let loaded = config::load(request)?;
        Ok(Resolved::of(loaded, flags)?)
    }

    /// The settings for a configuration already read (`workroom config`
    /// reads it its own way, as the reference's read-configuration does).
    pub fn of(loaded: Loaded, flags: Flags) -> Result<Resolved, settings::SettingsError> {
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
        forward: settings.into(),
        egress: settings.egress,
        egress_allow: settings.egress_allow.clone(),
        caps: settings.caps,
        ..Default::default()
    }
}

/// The container names a room argument is tried as, in order. Every room's
/// name starts with `workroom-` (workspace rooms, `up --name`, compose
/// rooms), so the prefix may be left off: `app-1a2b3c4d` and `infra.peer`
/// are tried as `workroom-app-1a2b3c4d` and `workroom-infra.peer` first,
/// then as written (a container id). A name that has the prefix is taken as
/// written only, so it never lands on `workroom-workroom-...`. One rule for
/// every command that takes a room (`--room` of shell, exec, panes, capture,
/// send, wait, kill-pane and hand-off; `forward ROOM`; `stop`, `down` and
/// `logs NAME`).
pub fn candidate_names(arg: &str) -> Vec<String> {
    if arg.starts_with(identity::NAME_PREFIX) {
        vec![arg.to_string()]
    } else {
        vec![format!("{}{arg}", identity::NAME_PREFIX), arg.to_string()]
    }
}

/// Whether a room argument names the container `name` (without the
/// engine's leading `/`) with id `id`, by [`candidate_names`]: for the
/// commands that pick from the listed rooms (`stop`, `down`, `logs`).
pub fn names(arg: &str, name: &str, id: Option<&str>) -> bool {
    candidate_names(arg).iter().any(|c| c == name) || id == Some(arg)
}

/// The container a room argument names ([`candidate_names`]), running or
/// not, made by workroom.
pub async fn named(engine: &Engine, arg: &str) -> Result<ContainerInspectResponse, FindError> {
    for candidate in candidate_names(arg) {
        let Some(c) = engine.inspect_container(&candidate).await? else { continue };
        if label(&c, labels::SCHEMA).is_none() {
            return Err(FindError::NotOurs { name: candidate });
        }
        return Ok(c);
    }
    Err(FindError::NoRoomNamed { name: arg.to_string() })
}

/// A room by its name ([`candidate_names`]), running and made by workroom.
pub async fn running_named(engine: &Engine, arg: &str) -> Result<Room, FindError> {
    Room::of(named(engine, arg).await?, arg)
}

/// A room by its name ([`candidate_names`]), running and made by workroom,
/// with its configuration when the files its labels name can still be read.
pub async fn by_name(engine: &Engine, arg: &str) -> Result<(Room, Option<Resolved>), FindError> {
    let room = running_named(engine, arg).await?;
    let resolved = config_of(&room).ok();
    Ok((room, resolved))
}

/// A running room and its configuration: the one named (`--room`), else
/// the workspace's. A named room's configuration is the one its labels
/// name; when it cannot be read, the error says which file.
pub async fn running(
    engine: &Engine,
    name: Option<&str>,
    folder: &Path,
    config: Option<PathBuf>,
) -> anyhow::Result<(Room, Resolved)> {
    running_from(engine, name, &LoadRequest::new(folder, config)).await
}

/// [`running`], the workspace's configuration read as `request` says.
pub async fn running_from(
    engine: &Engine,
    name: Option<&str>,
    request: &LoadRequest,
) -> anyhow::Result<(Room, Resolved)> {
    match name {
        Some(name) => {
            let room = running_named(engine, name).await?;
            let resolved = config_of(&room)?;
            Ok((room, resolved))
        }
        None => {
            let resolved = Resolved::load_request(request, Flags::default())?;
            Ok((resolved.running(engine).await?, resolved))
        }
    }
}

/// The configuration a room was made from, read again from the files its
/// labels name.
fn config_of(room: &Room) -> anyhow::Result<Resolved> {
    let (Some(folder), Some(file)) =
        (label(&room.container, labels::LOCAL_FOLDER), label(&room.container, labels::CONFIG_FILE))
    else {
        anyhow::bail!("{} names no devcontainer.json in its labels; use it from its workspace folder", room.name);
    };
    Resolved::load(Path::new(folder), Some(file.into()), Flags::default())
        .map_err(|e| e.context(format!("{} was made from {file}, which cannot be read now", room.name)))
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
            worktrees: None,
            egress: Default::default(),
            egress_allow: Vec::new(),
            caps: Default::default(),
        }
    }

    #[test]
    fn up_options_carry_the_egress_mode_and_patterns() {
        let s = Settings {
            egress: crate::settings::EgressMode::Allowlist,
            egress_allow: vec!["@pypi".into()],
            ..settings()
        };
        let o = up_options(&s, UpFlags::default());
        assert_eq!((o.egress, o.egress_allow), (crate::settings::EgressMode::Allowlist, vec!["@pypi".to_string()]));
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
    fn a_room_name_may_leave_off_the_workroom_prefix_and_is_tried_with_it_first() {
        assert_eq!(candidate_names("app-1a2b3c4d"), ["workroom-app-1a2b3c4d", "app-1a2b3c4d"]);
        assert_eq!(candidate_names("infra.peer"), ["workroom-infra.peer", "infra.peer"]);
        // An id (or its prefix) is tried as written after the prefixed name.
        assert_eq!(candidate_names("3f2a9c"), ["workroom-3f2a9c", "3f2a9c"]);
    }

    #[test]
    fn a_listed_room_is_named_by_its_name_with_or_without_the_prefix_or_by_its_id() {
        let (name, id) = ("workroom-app-1a2b3c4d", Some("3f2a9c00"));
        for arg in ["workroom-app-1a2b3c4d", "app-1a2b3c4d", "3f2a9c00"] {
            assert!(names(arg, name, id), "{arg}");
        }
        for arg in ["app", "workroom-app", "1a2b3c4d", "3f2a9c", "workroom-workroom-app-1a2b3c4d"] {
            assert!(!names(arg, name, id), "{arg}");
        }
    }

    #[test]
    fn a_room_name_with_the_prefix_is_taken_as_written_only() {
        assert_eq!(candidate_names("workroom-app-1a2b3c4d"), ["workroom-app-1a2b3c4d"]);
        assert_eq!(candidate_names("workroom-infra"), ["workroom-infra"], "never workroom-workroom-infra");
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
