//! `workroom agents`: the agent sessions of a room's peer group, with the
//! room each runs in.
//!
//! The group's registry lists sessions by pid, and the pids are the group's
//! PID namespace's, which the host cannot read. So each running room of the
//! group is asked, as the group's uid, through the daemon binary it already
//! holds (`workroomd agents`, no shell or tool of the image needed): which
//! registered sessions are alive, have their socket, and run in this room,
//! and in which of its panes. The branch each room works on is read on this
//! host, from the workspace folder its `devcontainer.local_folder` label
//! names: no engine call per room beyond the one `agents` job.

use crate::engine::{Engine, ExecSpec};
use crate::plan::labels;
use crate::plan::peers::{self as peer_plan, RoomPeerFacts};
use anyhow::{bail, Context as _};
use bollard::models::{ContainerSummary, ContainerSummaryStateEnum};
use std::path::Path;
use tokio::io::AsyncReadExt;
use workroomd::agents::Session;

/// The most a room's answer may hold: [`workroomd`]'s job reads at most
/// 1024 entries of a few hundred bytes each.
const MAX_ANSWER: u64 = 1024 * 1024;

/// A session, the room it runs in and the branch that room works on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agent {
    pub room: String,
    /// The room's workspace branch (`(detached 1a2b3c4)` when HEAD names a
    /// commit); `None` when the folder is not a repository this host sees.
    pub branch: Option<String>,
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
    // Every room is asked at once: each answer is an exec (tens of ms of
    // the engine's), and one after another they made `agents` grow with
    // the group (0.77 s for 10 rooms, against 0.03 s for a `docker ps`).
    let members = super::peers::group_rooms(engine, &names).await?;
    let asks = members.iter().filter(|m| m.state == Some(ContainerSummaryStateEnum::RUNNING)).filter_map(|member| {
        let name = summary_name(member);
        let registry = registry_in_room(member)?;
        // A registry this host holds, with no session in it: nothing to ask
        // (with 50 rooms the asks cost 1.2 s, against 0.02 s for `docker ps`).
        if registry_on_host(member).is_some_and(|folder| holds_no_session(&folder)) {
            return None;
        }
        Some(async move {
            let sessions = ask(engine, member, &name, uid, &registry).await?;
            let folder = member.labels.as_ref().and_then(|l| l.get(labels::LOCAL_FOLDER));
            let branch = folder.and_then(|f| branch_of(Path::new(f)));
            anyhow::Ok(
                sessions
                    .into_iter()
                    .map(|session| Agent { room: name.clone(), branch: branch.clone(), session })
                    .collect::<Vec<_>>(),
            )
        })
    });
    let mut agents = Vec::new();
    for answer in futures_util::future::join_all(asks).await {
        agents.extend(answer?);
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

/// The host folder bound as the room's registry, when it is a bind (an
/// engine that cannot see this host's folders has a volume there).
fn registry_on_host(c: &ContainerSummary) -> Option<std::path::PathBuf> {
    let suffix = format!("/{}", peer_plan::REGISTRY_IN_HOME);
    let mount = c.mounts.iter().flatten().find(|m| m.destination.as_deref().is_some_and(|d| d.ends_with(&suffix)))?;
    let bind = mount.typ.as_deref() == Some("bind");
    bind.then(|| mount.source.clone().map(std::path::PathBuf::from)).flatten()
}

/// Whether a registry folder certainly lists no session: its sessions
/// folder missing or empty. One that cannot be read (another user's) may
/// hold some: the rooms are asked.
fn holds_no_session(registry: &Path) -> bool {
    match std::fs::read_dir(registry.join(workroomd::agents::SESSIONS_DIR)) {
        Ok(mut entries) => entries.next().is_none(),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound && registry.is_dir(),
    }
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

/// The branch checked out in the repository holding `folder`, as `list`
/// reads it (`plan::worktree::checkout_of`): a worktree's or submodule's
/// `.git` file followed, a detached HEAD shown as `(detached abc1234)`.
pub fn branch_of(folder: &Path) -> Option<String> {
    let checkout = super::worktree::checkout_of(folder)?;
    (checkout.head != crate::plan::worktree::Head::Unknown).then(|| checkout.head.shown())
}

/// The agent `wanted` names, as `workroom agents` prints them: a name, a
/// session id or a pid, exactly, else a unique prefix of a name or id.
/// Why no one agent is the one asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FindError {
    #[error("no agent {0:?} in this peer group; `workroom agents` lists them")]
    None(String),
    /// The name, and each agent it could be, as shown.
    #[error("{wanted:?} names {} agents: {}; give more of the name or the pid", .shown.len(), .shown.join(", "))]
    Several { wanted: String, shown: Vec<String> },
}

pub fn find<'a>(agents: &'a [Agent], wanted: &str) -> Result<&'a Agent, FindError> {
    let exact: Vec<&Agent> = agents
        .iter()
        .filter(|a| {
            let s = &a.session;
            s.name.as_deref() == Some(wanted) || s.session_id.as_deref() == Some(wanted) || s.pid.to_string() == wanted
        })
        .collect();
    let matches = match exact.as_slice() {
        [] => agents
            .iter()
            .filter(|a| {
                let s = &a.session;
                [&s.name, &s.session_id].into_iter().flatten().any(|n| n.starts_with(wanted))
            })
            .collect(),
        _ => exact,
    };
    match matches.as_slice() {
        [one] => Ok(one),
        [] => Err(FindError::None(wanted.to_string())),
        several => Err(FindError::Several {
            wanted: wanted.to_string(),
            shown: several
                .iter()
                .map(|a| format!("{} (pid {} in {})", a.session.label(), a.session.pid, a.room))
                .collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registry_with_no_sessions_folder_or_an_empty_one_holds_no_session_and_one_with_an_entry_does() {
        let dir = tempfile::tempdir().unwrap();
        assert!(holds_no_session(dir.path()), "no sessions folder yet");
        std::fs::create_dir(dir.path().join(workroomd::agents::SESSIONS_DIR)).unwrap();
        assert!(holds_no_session(dir.path()), "an empty one");
        std::fs::write(dir.path().join(workroomd::agents::SESSIONS_DIR).join("123.json"), b"{}").unwrap();
        assert!(!holds_no_session(dir.path()));
        assert!(!holds_no_session(&dir.path().join("gone")), "a registry that is not there is not known empty");
    }

    #[test]
    fn the_branch_is_read_from_a_checkout_a_worktrees_git_file_or_a_subfolder_and_missing_is_none() {
        let root = tempfile::tempdir().unwrap();
        let repo = root.path().join("repo");
        std::fs::create_dir_all(repo.join(".git/worktrees/feat")).unwrap();
        std::fs::create_dir_all(repo.join("sub/dir")).unwrap();
        std::fs::write(repo.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        assert_eq!(branch_of(&repo).as_deref(), Some("main"));
        assert_eq!(branch_of(&repo.join("sub/dir")).as_deref(), Some("main"), "a config in a subfolder");

        // A worktree: `.git` is a file naming its folder in the main `.git`.
        std::fs::write(repo.join(".git/worktrees/feat/HEAD"), "ref: refs/heads/feat\n").unwrap();
        let absolute = root.path().join("feat-abs");
        std::fs::create_dir_all(&absolute).unwrap();
        std::fs::write(absolute.join(".git"), format!("gitdir: {}\n", repo.join(".git/worktrees/feat").display()))
            .unwrap();
        assert_eq!(branch_of(&absolute).as_deref(), Some("feat"));
        let relative = root.path().join("feat-rel");
        std::fs::create_dir_all(&relative).unwrap();
        std::fs::write(relative.join(".git"), "gitdir: ../repo/.git/worktrees/feat\n").unwrap();
        assert_eq!(branch_of(&relative).as_deref(), Some("feat"), "git 2.48's --relative-paths");

        let detached = root.path().join("detached");
        std::fs::create_dir_all(detached.join(".git")).unwrap();
        std::fs::write(detached.join(".git/HEAD"), "89abcdef0123456789abcdef0123456789abcdef\n").unwrap();
        assert_eq!(branch_of(&detached).as_deref(), Some("(detached 89abcde)"));

        let nowhere = root.path().join("nowhere");
        std::fs::create_dir_all(&nowhere).unwrap();
        std::fs::write(nowhere.join(".git"), "gitdir: /no/such/folder\n").unwrap();
        assert_eq!(branch_of(&nowhere), None, "a gitdir pointing nowhere");
        assert_eq!(branch_of(Path::new("/no/such/workspace")), None);
    }

    fn agent(room: &str, pid: i32, name: Option<&str>, id: Option<&str>) -> Agent {
        let session = Session {
            pid,
            name: name.map(str::to_string),
            session_id: id.map(str::to_string),
            cwd: None,
            socket: String::new(),
            started_at: None,
            status: None,
            pane: None,
        };
        Agent { room: room.into(), branch: None, session }
    }

    #[test]
    fn an_agent_is_found_by_name_id_or_pid_or_a_unique_prefix() {
        let all = [
            agent("r1", 92, Some("proj-f6"), Some("25f3abcb")),
            agent("r2", 140, Some("proj-a1"), Some("9c0d")),
            agent("r2", 1400, None, Some("25f3ffff")),
        ];
        let pid = |wanted| find(&all, wanted).map(|a| a.session.pid);
        assert_eq!(pid("proj-f6"), Ok(92));
        assert_eq!(pid("9c0d"), Ok(140));
        assert_eq!(pid("140"), Ok(140), "a pid exactly, not a prefix of 1400");
        assert_eq!(pid("proj-a"), Ok(140));
        let several = pid("25f3").unwrap_err().to_string();
        assert!(several.contains("names 2 agents") && several.contains("pid 1400 in r2"), "{several}");
        let none = pid("zed").unwrap_err().to_string();
        assert!(none.contains("no agent \"zed\"") && none.contains("`workroom agents`"), "{none}");
    }
}
