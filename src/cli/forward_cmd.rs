//! `workroom forward [ROOM] PORT[:CONTAINER_PORT]...` and `workroom ports`.

use super::WorkspaceArgs;
use crate::config::Loaded;
use crate::engine::Engine;
use crate::forward::{self, spec, state, Plan};
use crate::notices::{Event, Level};
use crate::output;
use crate::room::resolve;
use anyhow::bail;
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
    // The room by name, or the workspace's; with the configuration when it
    // can be read (a named room's from its labels).
    let (found, resolved) = match room_arg.as_deref() {
        Some(name) => resolve::by_name(&engine, name).await?,
        None => {
            let resolved = a.workspace.resolve(Default::default())?;
            (resolved.running(&engine).await?, Some(resolved))
        }
    };
    // The `[forward]` settings as resolved with the configuration, once.
    let settings = resolved.as_ref().map(|r| forward::settings::ForwardSettings::from(&r.settings));
    let loaded: Option<Loaded> = resolved.map(|r| r.loaded);
    let room = found.name.clone();
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
        for line in forward::background::started_lines(&status) {
            eprintln!("{line}");
        }
        return Ok(0);
    }
    let offer = match (&loaded, room_process) {
        (Some(_), true) => forward::host_offer(settings.unwrap_or_default()),
        _ => forward::Offer::default(),
    };
    // An `allowlist` room's proxy is served by its room process alone.
    let egress = room_process
        && crate::plan::egress::mode_of(found.container.config.as_ref().and_then(|c| c.labels.as_ref()))
            == crate::settings::EgressMode::Allowlist;
    if forwards.is_empty() && offer.ssh_agent.is_none() && !offer.git_credentials && !egress {
        bail!("nothing to forward: name ports (`workroom forward 8080`) or add `forwardPorts` to the configuration");
    }
    let plan = Plan {
        room,
        remote_user: found.remote_user(),
        started_at: found.started_at().to_string(),
        container_id: found.id,
        forwards,
        offer,
        egress,
        background: a.detached,
        // The forwarder's lines, on its stderr (a background one's log).
        log: {
            let stderr = super::progress::Stderr::new();
            std::sync::Arc::new(crate::notices::Notices::streamed(move |e| match e {
                Event::Notice(n) if n.level == Level::Said => stderr.line(&format!("workroom: {}", n.text)),
                e => stderr.show(e),
            }))
        },
    };
    forward::run(&engine, plan).await
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
            let state = match s.rejoining {
                true => format!("{} (the room is between starts)", f.shown()),
                false => f.shown(),
            };
            out.push_str(&format!(
                "{:<36} {:<10} {:<26} {:<16} {:<8} {}\n",
                s.room,
                f.forward.host_port,
                format!("{}:{}", f.forward.target_host, f.forward.target_port),
                f.forward.label.as_deref().unwrap_or("-"),
                s.pid,
                state,
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
