//! Lifecycle commands. `initializeCommand` runs on the host; the others run
//! in the room through the daemon, as the remote user with `remoteEnv`, in
//! the workspace folder, each hook's commands in the merged metadata's order
//! (the image's and features' before devcontainer.json's, each labelled with
//! its origin when there is more than one):
//! - onCreate, updateContent, postCreate: once per container;
//! - postStart: once per container start (the daemon's boot id);
//! - postAttach: on every attach.
//!
//! "Once" is kept by markers in the daemon, one per hook, claimed with a
//! compare-and-set, so concurrent `up`s of one room run each hook once: the
//! one whose claim wins runs it, the others wait for its marker to say done.
//! A hook that fails releases its claim, so the next `up` tries it again,
//! and later hooks do not run. A hook whose `up` died while running it (the
//! claim is abandoned) is not run again: the claim is the record that it
//! began, as the reference CLI's marker file is (ADR 0004). Beside ours,
//! the reference's marker files are written and read, so `devcontainer up`
//! on a room of ours does not run what we ran, nor we what it ran.

use super::reference_markers as reference;
use crate::config::{substitute, Command, Hook, Loaded};
use crate::link::RoomLink;
use crate::plan::metadata::{Merged, Origin};
use anyhow::{bail, Context as _};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;
use workroomd::proto::RunRequest;

/// The once-per-container hooks, in this order; each has its own marker,
/// named after its property.
const CREATE_HOOKS: [Hook; 3] = [Hook::OnCreate, Hook::UpdateContent, Hook::PostCreate];
/// The one marker of rooms made before each hook had its own: `done` means
/// all three ran.
const LEGACY_CREATE_MARKER: &str = "create-hooks";
/// `updateRemoteUserUID`, once per container. It is idempotent, so a claim
/// its `up` abandoned is taken over and it runs again.
const UID_MARKER: &str = "update-remote-user-uid";
const START_MARKER: &str = "post-start";
const DONE: &str = "done";

/// Test-only: `WORKROOM_TEST_KILL_AT=<event>:<key>` makes `up` SIGKILL
/// itself at that named point (`claimed:postCreateCommand`), so the
/// integration tests (tests/hook_kills.rs) can aim a kill at each marker
/// write of `up` without racing a timer. Nothing sets it outside tests; unset,
/// a point costs one environment lookup.
pub const KILL_AT_ENV: &str = "WORKROOM_TEST_KILL_AT";

fn kill_point(event: &str, key: &str) {
    let Some(at) = std::env::var_os(KILL_AT_ENV) else { return };
    if at.to_str() == Some(&format!("{event}:{key}")) {
        use std::io::Write as _;
        let _ = std::io::stderr().flush();
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
}

/// How long an `up` waits for another `up`'s hooks. Hooks install
/// dependencies and may take long; a claim older than this is taken over.
const CLAIM_WAIT: Duration = Duration::from_secs(30 * 60);

/// What a claim whose `up` died means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnAbandoned {
    /// The work is safe to repeat: run it again.
    RunAgain,
    /// The work began and may have half-happened: never run it twice.
    Interrupted,
}

/// How a `once` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Once {
    /// Done, by us or by another `up`.
    Done,
    /// Begun by an `up` that died; marked done without running it again.
    Interrupted,
}

pub struct HookContext<'a> {
    pub loaded: &'a Loaded,
    /// The room's merged metadata: the hooks, `remoteEnv`, `updateRemoteUserUID`.
    pub metadata: &'a Merged,
    pub user: String,
    pub env: BTreeMap<String, String>,
    pub cwd: String,
    /// The container's `Created` and `State.StartedAt`, as the reference
    /// CLI writes them into its marker files.
    pub created_at: String,
    pub started_at: String,
}

impl<'a> HookContext<'a> {
    /// `remoteEnv` with `${containerEnv:...}` resolved against the room's
    /// environment; a `null` value is left out.
    pub fn new(loaded: &'a Loaded, metadata: &'a Merged, user: &str, container_env: &HashMap<String, String>) -> Self {
        let ctx = substitute::Context { container_env: Some(container_env), ..Default::default() };
        let env = metadata
            .remote_env
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), substitute::substitute_str(&ctx, v.as_ref()?).unwrap_or_default())))
            .collect();
        HookContext {
            loaded,
            metadata,
            user: user.to_string(),
            env,
            cwd: loaded.workspace.folder.clone(),
            created_at: String::new(),
            started_at: String::new(),
        }
    }
}

pub async fn run_due(link: &RoomLink, ctx: &HookContext<'_>, post_attach: bool) -> anyhow::Result<()> {
    let has = |hook: Hook| !ctx.metadata.hook(hook).is_empty();
    let status = link.status().await?;
    let markers = link.markers().await?;
    let done = |key: &str| markers.get(key).map(String::as_str) == Some(DONE);
    let legacy_done = done(LEGACY_CREATE_MARKER);
    let create_due = !legacy_done && CREATE_HOOKS.iter().any(|h| has(*h) && !done(h.property()));
    let started_for = markers.get(START_MARKER).cloned();
    let start_due = started_for.as_deref() != Some(&status.boot_id);
    let theirs = match create_due || start_due {
        true => reference::read(link, &ctx.user).await,
        false => Default::default(),
    };
    if !legacy_done {
        if !done(UID_MARKER) {
            once(link, UID_MARKER, None, DONE, OnAbandoned::RunAgain, || update_remote_user_uid(link, ctx)).await?;
        }
        for hook in CREATE_HOOKS {
            if !has(hook) || done(hook.property()) {
                continue;
            }
            let ran_by_reference = reference::ran(&theirs, hook, &ctx.created_at);
            let outcome = once(link, hook.property(), None, DONE, OnAbandoned::Interrupted, || async {
                if ran_by_reference {
                    eprintln!("[{}] already run by the reference CLI (devcontainer up)", hook.property());
                    return Ok(());
                }
                run_recorded(link, ctx, hook, &ctx.created_at).await
            })
            .await?;
            say_interrupted(outcome, hook);
        }
    }
    if start_due {
        let ran_by_reference = reference::ran(&theirs, Hook::PostStart, &ctx.started_at);
        // postStart runs at every start, so it is made to be repeated; and an
        // abandoned claim may be of an earlier start, which says nothing
        // about this one.
        once(link, START_MARKER, started_for, &status.boot_id, OnAbandoned::RunAgain, || async {
            if !has(Hook::PostStart) {
                Ok(())
            } else if ran_by_reference {
                eprintln!("[postStartCommand] already run by the reference CLI (devcontainer up)");
                Ok(())
            } else {
                run_recorded(link, ctx, Hook::PostStart, &ctx.started_at).await
            }
        })
        .await?;
    }
    if post_attach {
        run_hook(link, ctx, Hook::PostAttach).await?;
    }
    Ok(())
}

/// Every command of `hook`, one after the other; the first failure stops
/// the rest. Origins are named when another than devcontainer.json has a say.
async fn run_hook(link: &RoomLink, ctx: &HookContext<'_>, hook: Hook) -> anyhow::Result<()> {
    let commands = ctx.metadata.hook(hook);
    let name_origins = commands.iter().any(|c| !c.origin.is_config());
    for c in commands {
        run_in_room(link, ctx, hook, name_origins.then_some(&c.origin), &c.command).await?;
    }
    Ok(())
}

/// Runs a hook with the reference's marker file written first, as the
/// reference does; a failed hook takes the file back, since it is to run
/// again (our claim is released too).
async fn run_recorded(link: &RoomLink, ctx: &HookContext<'_>, hook: Hook, time: &str) -> anyhow::Result<()> {
    reference::write(link, &ctx.user, hook, time).await;
    let result = run_hook(link, ctx, hook).await;
    if result.is_err() {
        reference::forget(link, &ctx.user, hook).await;
    }
    result
}

fn say_interrupted(outcome: Once, hook: Hook) {
    if outcome == Once::Interrupted {
        eprintln!(
            "warning: {} began under an `up` that died before it ended; it is not run twice (`workroom up --recreate` makes the room afresh)",
            hook.property()
        );
    }
}

/// `updateRemoteUserUID` (default true on Linux): before the first hook, the
/// remote user gets the host user's uid and gid, so files in the workspace
/// mount have one owner on both sides. Skipped, as the reference does, for
/// root and numeric users, and when the host user is root.
async fn update_remote_user_uid(link: &RoomLink, ctx: &HookContext<'_>) -> anyhow::Result<()> {
    let wanted = ctx.metadata.update_remote_user_uid.unwrap_or(true);
    let (uid, gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
    let numeric = ctx.user.chars().all(|c| c.is_ascii_digit());
    if !wanted || !cfg!(target_os = "linux") || ctx.user == "root" || uid == 0 {
        return Ok(());
    }
    if numeric {
        // As the reference: a uid is not remapped. Said, since the workspace
        // then has two owners and a hook writing to it fails.
        let (passwd, _) = link.users().await?;
        if let Some(note) = super::users::numeric_user_note(&ctx.user, uid, &passwd) {
            eprintln!("warning: {note}");
        }
        return Ok(());
    }
    let request = RunRequest {
        argv: vec![
            workroomd::room::DAEMON_PATH.into(),
            "update-uid".into(),
            ctx.user.clone(),
            uid.to_string(),
            gid.to_string(),
        ],
        user: Some("0".into()),
        cwd: Some("/".into()),
        ..Default::default()
    };
    let status = link.run_prefixed(request, "updateRemoteUserUID").await?;
    if status.code != Some(0) {
        bail!("updateRemoteUserUID failed for {} ({status:?})", ctx.user);
    }
    Ok(())
}

/// Runs `work` unless the marker already says `done`, claiming the marker
/// first (from `expected`) so that only one caller runs it. A claim left by
/// an `up` that died is taken over (`RunAgain`) or marked done unrun
/// (`Interrupted`).
async fn once<F, Fut>(
    link: &RoomLink,
    key: &str,
    expected: Option<String>,
    done: &str,
    on_abandoned: OnAbandoned,
    work: F,
) -> anyhow::Result<Once>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let claim = format!("running:{}:{}:{}", host_name(), std::process::id(), nonce());
    let mut wait = crate::retry::Backoff::new(crate::retry::Pace::HOOK, CLAIM_WAIT);
    // A claim the caller read earlier is another `up` at work, not a value to
    // claim from: compare-and-set against it would take its work over while
    // it runs (postStart ran twice under concurrent `up`s). Start from
    // "absent" instead, so the loop waits for that claim like any other.
    let mut expected = expected.filter(|v| !v.starts_with("running:"));
    loop {
        let (applied, current) = link.set_marker(key, Some(claim.clone()), expected.clone()).await?;
        if applied {
            kill_point("claimed", key);
            break;
        }
        match current.as_deref() {
            Some(v) if v == done => return Ok(Once::Done),
            Some(v) if v.starts_with("running:") && is_abandoned(v) && on_abandoned == OnAbandoned::Interrupted => {
                let (applied, _) = link.set_marker(key, Some(done.to_string()), current.clone()).await?;
                if applied {
                    return Ok(Once::Interrupted);
                }
            }
            Some(v) if v.starts_with("running:") && !is_abandoned(v) && !wait.expired() => wait.pause().await,
            // A stale claim, or another value: claim from what is there now.
            _ => expected = current,
        }
    }
    match work().await {
        Ok(()) => {
            link.set_marker(key, Some(done.to_string()), Some(claim)).await?;
            Ok(Once::Done)
        }
        Err(e) => {
            // Release the claim so the next `up` tries again.
            let _ = link.set_marker(key, expected, Some(claim)).await;
            Err(e)
        }
    }
}

/// A claim is abandoned when it was made on this machine by a process that
/// is gone (an `up` killed mid-hook): it is taken over at once instead of
/// after `CLAIM_WAIT`. A claim from another machine (a shared remote engine)
/// cannot be checked and is waited for.
fn is_abandoned(claim: &str) -> bool {
    let mut parts = claim.splitn(4, ':').skip(1);
    let (Some(host), Some(pid)) = (parts.next(), parts.next()) else { return false };
    host == host_name() && pid.parse::<u32>().is_ok_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().replace(':', "_")).unwrap_or_default()
}

fn nonce() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

fn argv(cmd: &Command) -> Vec<String> {
    match cmd {
        Command::Shell(s) => vec!["/bin/sh".into(), "-c".into(), s.clone()],
        Command::Exec(argv) => argv.clone(),
        Command::Parallel(_) => unreachable!("parallel commands are split before"),
    }
}

/// Runs a hook's command in the room, its output on ours with the hook's
/// name (and `origin`, when given); a parallel object runs its commands at
/// once and waits for all.
pub async fn run_in_room(
    link: &RoomLink,
    ctx: &HookContext<'_>,
    hook: Hook,
    origin: Option<&Origin>,
    cmd: &Command,
) -> anyhow::Result<()> {
    let from = origin.map(|o| format!(" from {o}")).unwrap_or_default();
    let jobs: Vec<(String, Vec<String>)> = match cmd {
        Command::Parallel(named) => {
            named.iter().map(|(n, c)| (format!("{}:{n}{from}", hook.property()), argv(c))).collect()
        }
        simple => vec![(format!("{}{from}", hook.property()), argv(simple))],
    };
    let runs = jobs.iter().map(|(label, argv)| async move {
        eprintln!("[{label}] {}", argv.join(" "));
        let request = RunRequest {
            argv: argv.clone(),
            user: Some(ctx.user.clone()),
            env: ctx.env.clone(),
            cwd: Some(ctx.cwd.clone()),
            stdin: false,
            login_shell: false,
        };
        let status = link.run_prefixed(request, label).await?;
        match status.code {
            Some(0) => Ok(()),
            Some(code) => bail!("{label} failed with exit code {code}"),
            None => bail!("{label} was killed by signal {}", status.signal.unwrap_or(0)),
        }
    });
    let results = futures_util::future::join_all(runs).await;
    results.into_iter().collect::<anyhow::Result<Vec<()>>>().map(|_| ())
}

/// `initializeCommand`, on the host, in the workspace folder.
pub async fn run_on_host(cmd: &Command, folder: &Path) -> anyhow::Result<()> {
    let jobs: Vec<(String, Vec<String>)> = match cmd {
        Command::Parallel(named) => named.iter().map(|(n, c)| (format!("initializeCommand:{n}"), argv(c))).collect(),
        simple => vec![("initializeCommand".to_string(), argv(simple))],
    };
    for (label, argv) in jobs {
        eprintln!("[{label}] {}", argv.join(" "));
        let status = tokio::process::Command::new(&argv[0])
            .args(&argv[1..])
            .current_dir(folder)
            .status()
            .await
            .with_context(|| format!("{label}: cannot run {}", argv[0]))?;
        if !status.success() {
            bail!("{label} failed ({status}); nothing was created");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_of_a_dead_local_process_is_abandoned_and_a_live_or_foreign_one_is_not() {
        let me = format!("running:{}:{}:1", host_name(), std::process::id());
        assert!(!is_abandoned(&me));
        // Pids are below /proc/sys/kernel/pid_max (at most 2^22).
        let dead = format!("running:{}:{}:1", host_name(), 1u32 << 23);
        assert!(is_abandoned(&dead));
        assert!(!is_abandoned(&format!("running:another-machine:{}:1", 1u32 << 23)));
        assert!(!is_abandoned("running:garbage"));
    }
}
