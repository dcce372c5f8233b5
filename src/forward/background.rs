//! The room's background forwarder: one detached `workroom forward
//! --detached ROOM` per room, started by `up` (or `forward --background`,
//! or `workroom watch` for a room the engine started by itself) and kept as
//! long as the room runs. Whoever starts it holds the room's start lock
//! ([`state::lock_start`]), so several at once start one.
//!
//! `up` checks it on every run, the fast path included, from the state
//! files alone (pid file, `/proc/<pid>`, the status's container start): no
//! daemon link. A forwarder follows the room's restarts by itself; one
//! still on an earlier start after a short wait (its link can hang after a
//! restart, ADR 0005) is replaced; a missing one is started when there is
//! anything to carry.

use super::settings::ForwardSettings;
use super::state::{self, Status};
use crate::config::Loaded;
use anyhow::Context as _;
use std::process::Stdio;
use std::time::Duration;

/// How long `up` (or `forward --background`) waits for the detached
/// forwarder to connect and bind its ports. Connecting is one `docker exec`
/// (well under a second); past this something is wrong and the log says what.
const BACKGROUND_READY_WAIT: Duration = Duration::from_secs(20);

/// The forwarder a room has now, if it serves the start `started_at`.
pub fn current(room: &str, started_at: &str) -> Option<Status> {
    let pid = state::background_pid(room)?;
    state::read_status(room, pid).filter(|s| s.started_at == started_at)
}

/// How `up` reached the forwarder check.
pub enum Check {
    /// Nothing else was due: no process is spawned to decide. Whether the
    /// host's git has a credential helper is guessed from git's config
    /// files (no `git config` run); ports and an ssh-agent are seen.
    Fast(ForwardSettings),
    /// The room was made, started or had hooks due: everything is asked.
    Full(OfferProbe),
}

impl Check {
    /// The full check, with what the host offers asked now, on a thread of
    /// its own: `up` makes or starts the room meanwhile.
    pub fn full(loaded: &Loaded, settings: ForwardSettings) -> Check {
        Check::Full(OfferProbe::start(loaded, settings))
    }
}

/// What the host offers a room ([`super::host_offer`]), being asked. Its
/// `git config` run takes 10-25 ms, which `up` spent waiting, after the
/// room's start, before its hooks: started before the room is made, it
/// runs while the engine creates and starts it.
pub struct OfferProbe(Option<tokio::task::JoinHandle<super::host_credentials::Offer>>, ForwardSettings);

impl OfferProbe {
    fn start(loaded: &Loaded, settings: ForwardSettings) -> OfferProbe {
        // With ports to forward the forwarder starts whatever is offered,
        // and asks for itself: nothing to run here.
        if !loaded.model.forward_ports.is_empty() {
            return OfferProbe(None, settings);
        }
        OfferProbe(Some(tokio::task::spawn_blocking(move || super::host_offer(settings))), settings)
    }

    /// Whether the host offers anything (asked again should the thread have
    /// failed).
    async fn offers_anything(self) -> bool {
        let offer = match self.0 {
            Some(asked) => asked.await.ok(),
            None => None,
        };
        let offer = offer.unwrap_or_else(|| super::host_offer(self.1));
        offer.ssh_agent.is_some() || offer.git_credentials
    }
}

/// Whether a room of `loaded` has anything for a forwarder to carry: its
/// `forwardPorts`, or what this host offers (an ssh-agent, git's
/// credentials), everything asked (for `workroom watch`, which is on no
/// one's critical path).
pub async fn carries(loaded: &Loaded, settings: ForwardSettings) -> bool {
    !loaded.model.forward_ports.is_empty() || OfferProbe::start(loaded, settings).offers_anything().await
}

/// What `up` does about the room's forwarder: none when the running one
/// serves this start or there is nothing to carry; otherwise (re)starts it.
/// Returns the new forwarder's status, `None` when nothing was started.
pub async fn ensure_for_up(
    loaded: &Loaded,
    room: &str,
    started_at: &str,
    check: Check,
    egress: bool,
) -> anyhow::Result<Option<Status>> {
    let held = state::lock_start(room).await?;
    let carries = async {
        egress
            || !loaded.model.forward_ports.is_empty()
            || match check {
                Check::Fast(settings) => {
                    super::host_ssh_agent(settings).is_some()
                        || (settings.git_credentials && super::host_credentials::host_git_config_names_a_helper())
                }
                Check::Full(probe) => probe.offers_anything().await,
            }
    };
    ensure(&held, room, started_at, carries).await
}

/// The decision of [`ensure_for_up`], for whoever holds the room's start
/// lock (`up`, or `workroom watch` for a room the engine started):
/// nothing when the running forwarder serves `started_at` (or follows the
/// room to it) or `carries` says there is nothing to carry; otherwise the
/// room's forwarder is (re)started, the same process whoever asks.
pub async fn ensure(
    _held: &state::StartLock,
    room: &str,
    started_at: &str,
    carries: impl std::future::Future<Output = bool>,
) -> anyhow::Result<Option<Status>> {
    if let Some(pid) = state::background_pid(room) {
        if follows(room, pid, started_at).await {
            return Ok(None);
        }
        state::end_background(room).await;
    }
    if !carries.await {
        return Ok(None);
    }
    // Named by its container name, not by its workspace folder and config
    // (which find "the workspace's room" again): a room made with `up
    // --name`, or one a watcher found with no workspace at hand, is then
    // the one forwarded, with the configuration its labels name.
    spawn(room, &[room.to_string()]).await.map(Some)
}

/// Whether the running forwarder `pid` serves the start at `started_at`,
/// or is still starting (another `up`'s). One that served an earlier start
/// follows the restart by itself ([`super::rejoin`]) and is given
/// [`FORWARDER_REJOIN_WAIT`] to; one that does not (stuck, or of a
/// workroom that did not follow restarts) is to be replaced.
async fn follows(room: &str, pid: u32, started_at: &str) -> bool {
    let mut wait = crate::retry::Backoff::new(crate::retry::Pace::FORWARDER, FORWARDER_REJOIN_WAIT);
    loop {
        match state::read_status(room, pid) {
            None => return true,
            Some(s) if s.started_at == started_at && !s.rejoining => return true,
            Some(_) if !state::is_forwarder(pid) || wait.expired() => return false,
            Some(_) => wait.pause().await,
        }
    }
}

/// How long `up` waits for a forwarder of an earlier start to link to the
/// room's new one. It notices the restart from the engine's events at once,
/// and linking is one `docker exec` and the credentials' offer, well under
/// a second; past this it is not coming, and `up` replaces it.
const FORWARDER_REJOIN_WAIT: Duration = Duration::from_secs(10);

/// Starts the room's background forwarder, or returns the status of the one
/// already running. `forward_args` are the `workroom forward` arguments that
/// find the room and its forwards again (the child reloads them).
pub async fn start(room: &str, forward_args: &[String]) -> anyhow::Result<Status> {
    let _held = state::lock_start(room).await?;
    if let Some(status) = state::background_pid(room).and_then(|pid| state::read_status(room, pid)) {
        return Ok(status);
    }
    spawn(room, forward_args).await
}

/// Spawns `workroom forward --detached FORWARD_ARGS` and waits for it to
/// link and bind its ports; the caller holds the room's start lock.
async fn spawn(room: &str, forward_args: &[String]) -> anyhow::Result<Status> {
    let dir = state::made()?;
    let log_path = state::log_file_in(&dir, room);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("cannot open {}", log_path.display()))?;
    let exe = std::env::current_exe().context("cannot find the workroom executable")?;
    // tokio's, not std's: a child handle dropped unfinished is reaped by
    // the runtime when it ends, so a watcher that runs for days and starts
    // forwarders that end with their rooms leaves no zombies (`up` exits,
    // and init adopts its forwarder).
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("forward").arg("--detached").args(forward_args).stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
    // SAFETY: setsid is async-signal-safe; in its own session the forwarder
    // outlives the terminal `up` ran in and gets none of its signals.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("cannot start the background forwarder")?;
    let pid = child.id().context("the background forwarder ended as it started")?;
    std::fs::write(state::pid_file_in(&dir, room), format!("{pid}\n"))?;
    let mut wait = crate::retry::Backoff::new(crate::retry::Pace::FORWARDER, BACKGROUND_READY_WAIT);
    loop {
        if let Some(status) = state::read_status(room, pid) {
            // Not waited for: it is detached (see above for who reaps it).
            drop(child);
            return Ok(status);
        }
        if let Ok(Some(exit)) = child.try_wait() {
            let _ = std::fs::remove_file(state::pid_file_in(&dir, room));
            let tail = log_tail(&log_path);
            anyhow::bail!("the background forwarder for {room} ended ({exit}): {tail}");
        }
        if wait.expired() {
            anyhow::bail!(
                "the background forwarder for {room} was not ready within {} s; see {}",
                BACKGROUND_READY_WAIT.as_secs(),
                log_path.display()
            );
        }
        // Async: `up` holds a daemon link on this same thread, whose frames
        // (window updates, pings) must keep flowing while we wait.
        wait.pause().await;
    }
}

/// What a forwarder carries, one line each, as `up` and `forward
/// --background` say it.
pub fn started_lines(status: &Status) -> Vec<String> {
    let mut lines: Vec<String> =
        status.forwards.iter().map(|f| format!("{}: {} {}", status.room, f.forward, f.shown())).collect();
    if status.ssh_agent {
        lines.push(format!("{}: ssh-agent forwarded", status.room));
    }
    if status.git_credentials {
        lines.push(format!("{}: git credentials forwarded", status.room));
    }
    if status.egress {
        lines.push(format!("{}: egress through the allowlist proxy (`workroom egress` shows the policy)", status.room));
    }
    lines
}

fn log_tail(path: &std::path::Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("(no output)").to_string()
}
