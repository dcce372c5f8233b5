//! `workroom agents [--json]`: the agent sessions of the workspace room's
//! peer group, and the room each runs in.

use super::WorkspaceArgs;
use crate::engine::Engine;
use crate::output;
use crate::room::agents;

pub async fn run(ws: &WorkspaceArgs, as_json: bool) -> anyhow::Result<i32> {
    let resolved = ws.resolve(Default::default())?;
    let engine = Engine::connect().await?;
    let room = resolved.running(&engine).await?;
    let found = agents::list(&engine, &room.name, &room.container).await?;
    if as_json {
        output::print_json(&serde_json::json!(found))?;
        return Ok(0);
    }
    output::print(&format_agents(&found))?;
    Ok(0)
}

/// The table: room, name (or session id), pid, working folder.
fn format_agents(found: &[agents::Agent]) -> String {
    let rows: Vec<Vec<String>> = found
        .iter()
        .map(|a| {
            vec![
                a.room.clone(),
                a.session.label().to_string(),
                a.session.pid.to_string(),
                a.session.cwd.clone().unwrap_or_default(),
            ]
        })
        .collect();
    output::table(&["ROOM", "AGENT", "PID", "CWD"], &rows)
}
