//! `workroom agents`: the agent sessions of a room's peer group, with the
//! room each runs in.
//!
//! The group's registry lists sessions by pid, and the pids are the group's
//! PID namespace's, which the host cannot read. So each running room of the
//! group is asked, as the group's uid, through the daemon binary it already
//! holds (`workroomd agents`, no shell or tool of the image needed): which
//! registered sessions are alive, have their socket, and run in this room.

use crate::engine::{Engine, ExecSpec};
use crate::plan::peers::{self as peer_plan, RoomPeerFacts};
use anyhow::{bail, Context as _};
use bollard::models::{ContainerSummary, ContainerSummaryStateEnum};
use tokio::io::AsyncReadExt;
use workroomd::agents::Session;

/// The most a room's answer may hold: [`workroomd`]'s job reads at most
/// 1024 entries of a few hundred bytes each.
const MAX_ANSWER: u64 = 1024 * 1024;

/// A session and the room it runs in.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Agent {
    pub room: String,
    #[serde(flatten)]
    pub session: Session,
}

/// The live sessions of the peer group `room` (its inspect) belongs to.
pub async fn list(
    engine: &Engine,
    room: &str,
    c: &bollard::models::ContainerInspectResponse,
) -> anyhow::Result<Vec<Agent>> {
    let facts = RoomPeerFacts::of(c);
    let (Some(group), Some(uid)) = (facts.group.as_deref(), facts.uid) else {
        bail!("{room} takes part in no peer group (`workroom up --peer` makes a room that does)");
    };
    let names = peer_plan::names(super::peers::scope_from_env().as_deref(), group, uid);
    let mut agents = Vec::new();
    for member in super::peers::group_rooms(engine, &names).await? {
        if member.state != Some(ContainerSummaryStateEnum::RUNNING) {
            continue;
        }
        let name = summary_name(&member);
        let Some(registry) = registry_in_room(&member) else { continue };
        let sessions = ask(engine, &member, &name, uid, &registry).await?;
        agents.extend(sessions.into_iter().map(|session| Agent { room: name.clone(), session }));
    }
    agents
        .sort_by(|a, b| (&a.room, a.session.label(), a.session.pid).cmp(&(&b.room, b.session.label(), b.session.pid)));
    Ok(agents)
}

fn summary_name(c: &ContainerSummary) -> String {
    c.names.as_ref().and_then(|n| n.first()).map(|n| n.trim_start_matches('/').to_string()).unwrap_or_default()
}

/// Where the room sees its group's registry (the bind at `~/.claude`).
fn registry_in_room(c: &ContainerSummary) -> Option<String> {
    let suffix = format!("/{}", peer_plan::REGISTRY_IN_HOME);
    c.mounts.iter().flatten().filter_map(|m| m.destination.clone()).find(|d| d.ends_with(&suffix))
}

async fn ask(
    engine: &Engine,
    c: &ContainerSummary,
    name: &str,
    uid: u32,
    registry: &str,
) -> anyhow::Result<Vec<Session>> {
    let spec = ExecSpec {
        argv: vec![workroomd::room::DAEMON_PATH.into(), "agents".into(), registry.into()],
        user: Some(uid.to_string()),
        ..Default::default()
    };
    let mut exec = engine.exec(c.id.as_deref().unwrap_or(name), &spec).await?;
    let mut out = Vec::new();
    (&mut exec.output)
        .take(MAX_ANSWER + 1)
        .read_to_end(&mut out)
        .await
        .with_context(|| format!("read the agents of {name}"))?;
    if out.len() as u64 > MAX_ANSWER {
        bail!("{name} answered with more than {MAX_ANSWER} bytes of agents");
    }
    match engine.exec_exit_code(&exec.id).await? {
        Some(0) => {}
        // A daemon from before this job answers with its usage line.
        code => bail!(
            "{name} could not list its agents (exit {code:?}); `workroom hand-off` gives it this workroom's daemon"
        ),
    }
    serde_json::from_slice(&out).with_context(|| format!("{name} answered with something other than its agents"))
}
