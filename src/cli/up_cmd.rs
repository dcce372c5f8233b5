//! `workroom up`: the room of a workspace, made or found, started and ready.
//! `--json` prints the reference CLI's result shape, errors included.

use super::WorkspaceArgs;
use crate::config::{self, LoadRequest};
use crate::engine::Engine;
use crate::output;
use crate::room::up::{self, UpOptions};
use crate::settings;
use serde_json::json;

pub async fn run(ws: &WorkspaceArgs, mut options: UpOptions, peer: Option<bool>, as_json: bool) -> anyhow::Result<i32> {
    let result = async {
        let loaded = config::load(&LoadRequest::new(&ws.workspace_folder, ws.config.clone()))?;
        let settings = settings::load_with(
            &loaded.workspace.local_folder,
            settings::Flags { peer },
            loaded.model.customizations.as_ref(),
            &loaded.config_path,
        )?;
        options.shape = crate::plan::nested::RoomShape { nested: settings.nested, network: settings.network };
        options.peer = settings.peer_messaging;
        options.peer_registry = settings.peer_registry;
        for warning in loaded.warnings() {
            eprintln!("warning: {warning}");
        }
        let engine = Engine::connect().await?;
        up::up(&engine, &loaded, &options).await
    }
    .await;
    match (result, as_json) {
        (Ok(r), true) => {
            output::print_json(&json!({
                "outcome": "success",
                "containerId": r.container_id,
                "remoteUser": r.remote_user,
                "remoteWorkspaceFolder": r.remote_workspace_folder,
            }))?;
            Ok(0)
        }
        (Ok(r), false) => {
            eprintln!(
                "{} {} ({}); `workroom shell` opens a pane, `workroom exec -- CMD` runs a command",
                r.name,
                if r.created { "created" } else { "is up" },
                &r.container_id[..r.container_id.len().min(12)]
            );
            Ok(0)
        }
        (Err(e), true) => {
            let message: Vec<String> = e.chain().map(ToString::to_string).collect();
            output::print_json(
                &json!({ "outcome": "error", "message": message.join(": "), "description": e.to_string() }),
            )?;
            Ok(1)
        }
        (Err(e), false) => Err(e),
    }
}
