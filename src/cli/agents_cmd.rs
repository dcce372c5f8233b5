//! `workroom agents [--json]`: the agent sessions of the room's peer group,
//! with the room and branch each works in, what it says it does, the pane
//! of ours it runs in and its age. `workroom attach AGENT`: that pane, as
//! `workroom shell --room ROOM PANE` opens it.

use super::RoomArgs;
use crate::engine::Engine;
use crate::output;
use crate::room::agents::{self, Agent};

/// What a session is doing when its entry does not say.
const UNKNOWN_STATUS: &str = "unknown";

pub async fn run(args: &RoomArgs, as_json: bool) -> anyhow::Result<i32> {
    let engine = Engine::connect().await?;
    let room = args.running(&engine).await?;
    let found = agents::list(&engine, &room.name, &room.container).await?;
    let now = now_ms();
    if as_json {
        output::print_json(&serde_json::Value::Array(found.iter().map(|a| to_json(a, now)).collect()))?;
        return Ok(0);
    }
    output::print(&format_agents(&found, now))?;
    Ok(0)
}

/// Takes this terminal to the pane that holds `wanted`, through exactly
/// what `workroom shell --room ROOM PANE` does.
pub async fn attach(args: &RoomArgs, wanted: &str, detach_keys: Option<&str>) -> anyhow::Result<i32> {
    let engine = Engine::connect().await?;
    let room = args.running(&engine).await?;
    let found = agents::list(&engine, &room.name, &room.container).await?;
    let agent = agents::find(&found, wanted)?;
    let Some(pane) = agent.session.pane.clone() else {
        eprintln!("{}", not_in_a_pane(agent));
        return Ok(1);
    };
    let target = RoomArgs { workspace: args.workspace.clone(), room: Some(agent.room.clone()) };
    super::shell_cmd::shell(&target, &pane, detach_keys).await
}

/// The one line for an agent that no pane of ours holds.
fn not_in_a_pane(a: &Agent) -> String {
    format!(
        "{} runs in {} as pid {}, started outside workroom's panes (`workroom exec`, `docker exec`), so there is no \
         pane to attach to",
        a.session.label(),
        a.room,
        a.session.pid
    )
}

/// One agent as `--json` prints it: every key always present (null when
/// unknown), so scripts can rely on the shape.
fn to_json(a: &Agent, now_ms: u64) -> serde_json::Value {
    let s = &a.session;
    serde_json::json!({
        "room": a.room,
        "branch": a.branch,
        "name": s.name,
        "sessionId": s.session_id,
        "pid": s.pid,
        "status": s.status.as_deref().unwrap_or(UNKNOWN_STATUS),
        "pane": s.pane,
        "cwd": s.cwd,
        "startedAt": s.started_at,
        "ageSeconds": s.started_at.map(|t| now_ms.saturating_sub(t) / 1000),
        "socket": s.socket,
    })
}

/// The table: room, branch, agent (name or session id), pid, status, pane
/// and age; `-` where there is nothing to show.
fn format_agents(found: &[Agent], now_ms: u64) -> String {
    let or_dash = |v: Option<&str>| v.unwrap_or("-").to_string();
    let rows: Vec<Vec<String>> = found
        .iter()
        .map(|a| {
            let s = &a.session;
            vec![
                a.room.clone(),
                or_dash(a.branch.as_deref()),
                s.label().to_string(),
                s.pid.to_string(),
                s.status.clone().unwrap_or_else(|| UNKNOWN_STATUS.into()),
                or_dash(s.pane.as_deref()),
                s.started_at.map_or("-".into(), |t| super::shell_cmd::age(now_ms.saturating_sub(t) / 1000)),
            ]
        })
        .collect();
    output::table(&["ROOM", "BRANCH", "AGENT", "PID", "STATUS", "PANE", "AGE"], &rows)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use workroomd::agents::Session;

    fn agent(room: &str, branch: Option<&str>, session: Session) -> Agent {
        Agent { room: room.into(), branch: branch.map(str::to_string), session }
    }

    fn claude() -> Session {
        Session {
            pid: 92,
            name: Some("proj-f6".into()),
            session_id: Some("25f3abcb".into()),
            cwd: Some("/workspaces/app".into()),
            socket: "/tmp/cc-socks/92.sock".into(),
            started_at: Some(1_000_000),
            status: Some("busy".into()),
            pane: Some("agent".into()),
        }
    }

    fn bare() -> Session {
        Session {
            pid: 7,
            name: None,
            session_id: Some("cc-7f3a".into()),
            cwd: None,
            socket: "/tmp/cc-socks/7.sock".into(),
            started_at: None,
            status: None,
            pane: None,
        }
    }

    #[test]
    fn the_table_aligns_room_branch_agent_status_pane_and_age_and_dashes_what_is_unknown() {
        let found = [agent("workroom-app-1", Some("feature/x"), claude()), agent("workroom-b", None, bare())];
        let table = format_agents(&found, 1_000_000 + 125_000);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3, "{table}");
        let cells = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        assert_eq!(cells(lines[0]), ["ROOM", "BRANCH", "AGENT", "PID", "STATUS", "PANE", "AGE"]);
        assert_eq!(cells(lines[1]), ["workroom-app-1", "feature/x", "proj-f6", "92", "busy", "agent", "2m"]);
        assert_eq!(cells(lines[2]), ["workroom-b", "-", "cc-7f3a", "7", "unknown", "-", "-"]);
        // Aligned: every column starts where its header does.
        let at = |l: &str, word: &str| l.find(word).unwrap();
        assert_eq!(at(lines[0], "STATUS"), at(lines[1], "busy"));
        assert_eq!(at(lines[0], "STATUS"), at(lines[2], "unknown"));
        assert_eq!(at(lines[0], "PANE"), at(lines[1], "agent"));
    }

    #[test]
    fn the_json_has_every_key_on_every_agent_with_the_status_as_written_or_unknown() {
        let a = to_json(&agent("r", Some("main"), claude()), 1_000_000 + 5_000);
        assert_eq!(a["room"], "r");
        assert_eq!(a["branch"], "main");
        assert_eq!(a["status"], "busy");
        assert_eq!(a["pane"], "agent");
        assert_eq!(a["ageSeconds"], 5);
        let b = to_json(&agent("r", None, bare()), 0);
        assert_eq!(b["status"], UNKNOWN_STATUS);
        let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&a), keys(&b), "the same keys, null when unknown");
        assert!(b["pane"].is_null() && b["branch"].is_null() && b["name"].is_null());
    }

    #[test]
    fn an_agent_outside_our_panes_is_told_where_it_runs_in_one_line() {
        let line = not_in_a_pane(&agent("workroom-b", None, bare()));
        assert!(line.starts_with("cc-7f3a runs in workroom-b as pid 7"), "{line}");
        assert!(!line.contains('\n'));
    }
}
