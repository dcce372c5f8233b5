//! `workroom up`: the room of a workspace, made or found, started and ready.
//! `--json` prints the reference CLI's result shape, errors included.

use super::{print_warnings, WorkspaceArgs};
use crate::engine::Engine;
use crate::output;
use crate::room::resolve::UpFlags;
use crate::room::up;
use crate::settings;
use serde_json::json;

pub async fn run(ws: &WorkspaceArgs, flags: UpFlags, peer: settings::Flags, as_json: bool) -> anyhow::Result<i32> {
    let result = async {
        let resolved = ws.resolve(peer)?;
        print_warnings(&resolved);
        let engine = Engine::connect().await?;
        up::up(&engine, &resolved.loaded, &resolved.up_options(flags)).await
    }
    .await;
    match (result, as_json) {
        (Ok(r), true) => {
            output::print_json_line(&success_json(&r))?;
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
            output::print_json_line(
                &json!({ "outcome": "error", "message": message.join(": "), "description": e.to_string() }),
            )?;
            Ok(1)
        }
        (Err(e), false) => Err(e),
    }
}

/// The reference CLI's `up` result, key for key, so a script can swap one
/// tool for the other (`| tail -n1 | jq .containerId`).
fn success_json(r: &up::UpResult) -> serde_json::Value {
    json!({
        "outcome": "success",
        "containerId": r.container_id,
        "remoteUser": r.remote_user,
        "remoteWorkspaceFolder": r.remote_workspace_folder,
        // The reference's report on its own registry client's credential
        // lookups. workroom pulls through the engine and looks up no
        // credentials itself, so none of these can happen.
        "ociAuthDiagnostics": {
            "authLookupWouldBeBlocked": false,
            "registryRedirectWouldPreventCredentialForwarding": false,
            "authServerRedirect": false,
        },
        // Not the reference's, so after its keys: the platform of the room's daemon.
        "platform": r.platform,
        // And how the room got its workspace: bound, or uploaded into a volume.
        "workspace": r.workspace.json(),
        // A worktree's or submodule's git folder, as mounted (null otherwise).
        "git": r.git,
    })
}
