//! `workroom forward [ROOM] PORT[:CONTAINER_PORT]...` and `workroom ports`.

use super::WorkspaceArgs;
use crate::config::{self, LoadRequest, Loaded};
use crate::engine::Engine;
use crate::forward::{self, spec, state, Plan};
use crate::output;
use crate::plan::{identity, labels};
use anyhow::{bail, Context as _};
use serde_json::json;

pub struct ForwardArgs {
    pub workspace: WorkspaceArgs,
    /// `[ROOM] SPEC...`
    pub args: Vec<String>,
    pub background: bool,
    /// Set on the child `--background` starts: it is the room's host process.
    pub detached: bool,
}

pub async fn forward(a: ForwardArgs) -> anyhow::Result<i32> {
    // A first word that is not a forward names the room.
    let (room_arg, specs) = match a.args.split_first() {
        Some((first, rest)) if spec::parse(first).is_err() => (Some(first.clone()), rest.to_vec()),
        _ => (None, a.args.clone()),
    };
    let mut forwards = specs.iter().map(|s| spec::parse(s)).collect::<Result<Vec<_>, _>>()?;
    let engine = Engine::connect().await?;
    let (room, loaded) = find_room(&engine, room_arg.as_deref(), &a.workspace).await?;
    let c = engine.inspect_container(&room).await?.with_context(|| format!("no room named {room}"))?;
    if c.state.as_ref().and_then(|s| s.running) != Some(true) {
        bail!("{room} is not running; `workroom up` starts it");
    }
    let container_labels = c.config.as_ref().and_then(|c| c.labels.clone()).unwrap_or_default();
    if !container_labels.contains_key(labels::SCHEMA) {
        bail!("{room} was not made by workroom");
    }
    let attributes = loaded.as_ref().map(|l| l.model.ports_attributes.clone()).unwrap_or_default();
    if forwards.is_empty() {
        forwards = loaded
            .as_ref()
            .map(|l| spec::from_config(&l.model.forward_ports, &l.model.ports_attributes))
            .unwrap_or_default();
    } else {
        forwards.iter_mut().for_each(|f| spec::label(f, &attributes));
    }
    let room_process = a.background || a.detached;

    if a.background {
        // The detached child finds the room and its forwards again itself.
        let mut child_args = vec!["--workspace-folder".to_string(), a.workspace.workspace_folder.display().to_string()];
        if let Some(cfg) = &a.workspace.config {
            child_args.extend(["--config".to_string(), cfg.display().to_string()]);
        }
        child_args.extend(a.args.iter().cloned());
        let status = forward::background::start(&room, &child_args).await?;
        forward::background::print_started(&status);
        return Ok(0);
    }
    let offer = match (&loaded, room_process) {
        (Some(l), true) => forward::host_offer(&l.workspace.local_folder),
        _ => forward::Offer::default(),
    };
    if forwards.is_empty() && offer.ssh_agent.is_none() && !offer.git_credentials {
        bail!("nothing to forward: name ports (`workroom forward 8080`) or add `forwardPorts` to the configuration");
    }
    let plan = Plan {
        room: room.clone(),
        container_id: c.id.clone().unwrap_or(room),
        started_at: c.state.as_ref().and_then(|s| s.started_at.clone()).unwrap_or_default(),
        remote_user: container_labels.get(labels::REMOTE_USER).cloned().unwrap_or_else(|| "root".into()),
        forwards,
        offer,
        background: a.detached,
    };
    forward::run(&engine, plan).await
}

/// The room by name, or the workspace's; with the configuration when it can
/// be read (a named room's from its labels).
async fn find_room(
    engine: &Engine,
    name: Option<&str>,
    ws: &WorkspaceArgs,
) -> anyhow::Result<(String, Option<Loaded>)> {
    match name {
        None => {
            let loaded = config::load(&LoadRequest::new(&ws.workspace_folder, ws.config.clone()))?;
            let settings = crate::settings::load(&loaded.workspace.local_folder, Default::default())?;
            let room = match crate::room::locate(engine, &loaded, settings.peer_messaging).await? {
                Some(c) => c.name.as_deref().unwrap_or_default().trim_start_matches('/').to_string(),
                None => {
                    identity::room_name(&loaded.workspace.local_folder, &loaded.config_path, settings.peer_messaging)
                }
            };
            Ok((room, Some(loaded)))
        }
        Some(name) => {
            let c = engine
                .inspect_container(name)
                .await?
                .with_context(|| format!("no room named {name} (`workroom list` shows the rooms)"))?;
            let l = c.config.as_ref().and_then(|c| c.labels.clone()).unwrap_or_default();
            let loaded = match (l.get(labels::LOCAL_FOLDER), l.get(labels::CONFIG_FILE)) {
                (Some(folder), Some(file)) => {
                    config::load(&LoadRequest::new(std::path::Path::new(folder), Some(file.into()))).ok()
                }
                _ => None,
            };
            let room = c.name.as_deref().unwrap_or(name).trim_start_matches('/').to_string();
            Ok((room, loaded))
        }
    }
}

/// `workroom ports [ROOM]`: what every running forwarder carries.
pub async fn ports(room: Option<&str>, as_json: bool) -> anyhow::Result<i32> {
    let statuses = state::running(room);
    if as_json {
        output::print_json(&json!(statuses))?;
        return Ok(0);
    }
    let mut out = format!(
        "{:<36} {:<10} {:<26} {:<16} {:<8} {}\n",
        "ROOM", "HOST PORT", "TARGET (IN THE ROOM)", "LABEL", "PID", "STATE"
    );
    for s in &statuses {
        for f in &s.forwards {
            out.push_str(&format!(
                "{:<36} {:<10} {:<26} {:<16} {:<8} {}\n",
                s.room,
                f.forward.host_port,
                format!("{}:{}", f.forward.target_host, f.forward.target_port),
                f.forward.label.as_deref().unwrap_or("-"),
                s.pid,
                f.state,
            ));
        }
        for (on, what) in [(s.ssh_agent, "ssh-agent"), (s.git_credentials, "git credentials")] {
            if on {
                out.push_str(&format!(
                    "{:<36} {:<10} {:<26} {:<16} {:<8} {}\n",
                    s.room, "-", what, "-", s.pid, "forwarded"
                ));
            }
        }
    }
    output::print(&out)?;
    Ok(0)
}
