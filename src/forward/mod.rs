//! Ports and credentials over the daemon link, nothing published.
//!
//! A forwarder is a host process holding ONE link to the room's daemon
//! (`RoomLink`, over `docker exec ... workroomd relay`). It listens on the
//! host's 127.0.0.1 only; each accepted TCP connection becomes a
//! `Request::Connect` stream on that link, which the daemon dials inside the
//! room. The link's per-stream credit gives each connection its own
//! backpressure, so one slow client never stalls another.
//!
//! `up` starts one forwarder per room in the background (detached, its own
//! session, output to a log file; see [`state`]) for `forwardPorts` and the
//! credentials. It follows the room's restarts by itself, keeping its ports
//! and linking to each new start ([`rejoin`]); it ends when the room is
//! removed or stays stopped, and `stop`/`down` end it at once. A host
//! reboot ends it too: `workroom watch` starts it again when the engine
//! starts the room. `workroom forward` runs more by hand.
//!
//! # Layout
//! - [`background`]: the room's detached forwarder, which `up` keeps.
//! - [`rejoin`]: from the end of one start of the room to the next (pure
//!   decisions, and the wait on the engine's events).
//! - [`spec`]: what to forward (pure).
//! - [`settings`]: `[forward]` opt-outs.
//! - [`state`]: pid, log and status files; `workroom ports` reads them.
//! - `host_credentials`: the host's side of ssh-agent and git credentials.
//! - [`egress`]: the host's side of an `allowlist` room's proxy: each
//!   request checked against the room's policy, logged and dialled here.
//! - [`watcher`]: `workroom watch`, which starts the forwarder of a room the
//!   engine started by itself when none serves it (after a host reboot);
//!   [`unit`]: the systemd user unit that runs it at login.

pub mod background;
pub mod egress;
mod host_credentials;
pub mod rejoin;
pub mod settings;
pub mod spec;
pub mod state;
pub mod unit;
pub mod watcher;

use crate::engine::Engine;
use crate::link::RoomLink;
use crate::notices::Notices;
use crate::retry::{Backoff, Pace};
pub use host_credentials::Offer;
use spec::Forward;
use state::{ForwardState, Status};
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use workroomd::pipe;
use workroomd::proto::{Link, Request, Response, RunRequest};
use workroomd::room;

/// What a forwarder does for one room.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The container's name (state files are named by it).
    pub room: String,
    pub container_id: String,
    /// The container's `State.StartedAt`: the start this forwarder serves.
    pub started_at: String,
    pub remote_user: String,
    pub forwards: Vec<Forward>,
    pub offer: Offer,
    /// The room is in `allowlist` mode: its proxy's requests are checked
    /// and dialled here ([`egress`]).
    pub egress: bool,
    pub background: bool,
    /// Where what the forwarder says goes (its log, for one in the
    /// background): streamed, never kept, as it runs for days.
    pub log: Arc<Notices>,
}

/// Runs a forwarder until it is told to stop (SIGTERM, SIGINT) or the room
/// will not come back ([`rejoin`]: removed, stopped, its engine gone for
/// good). A restart of the room is followed: the ports stay bound and the
/// forwarder links to the new start. Returns the exit code.
pub async fn run(engine: &Engine, plan: Plan) -> anyhow::Result<i32> {
    let mut room_link = RoomLink::connect(engine, &plan.container_id).await?;
    let pid = std::process::id();
    let log = &plan.log;

    let mut states = Vec::new();
    let mut listeners = Vec::new();
    for forward in &plan.forwards {
        match listen(forward.host_port).await {
            Ok((l, asked_port)) => {
                let mut forward = forward.clone();
                forward.host_port = l.local_addr().map(|a| a.port()).unwrap_or(forward.host_port);
                let moved = asked_port.map(|p| format!(" (port {p} is taken on the host)")).unwrap_or_default();
                log.say(format!("forwarding {forward}{}{moved}", label_suffix(&forward)));
                states.push(ForwardState { forward: forward.clone(), state: "listening".into(), asked_port });
                listeners.push((l, Arc::new(forward)));
            }
            Err(e) => {
                let why = format!("cannot listen on 127.0.0.1:{}: {e}", forward.host_port);
                log.say(format!("not forwarding {forward}: {why}"));
                states.push(ForwardState { forward: forward.clone(), state: why, asked_port: None });
            }
        }
    }

    let offered = offer_credentials(&room_link, &plan).await;
    let live = match plan.egress {
        true => Some(Arc::new(egress::Live::new(&plan.room, log.clone())?)),
        false => None,
    };
    // The room's egress socket, when it has one bound: each connection
    // comes here itself, not over the link. Served across the room's
    // restarts; said in the log when it cannot be (the link still carries).
    let _handed_over = match &live {
        Some(live) => match egress::serve_socket(live.clone(), &plan.room) {
            Ok(task) => Some(AbortOnDrop(task)),
            Err(e) => {
                log.warn(format!("{}: egress connections ride the link: {e:#}", plan.room));
                None
            }
        },
        None => None,
    };
    let proxied = offer_egress(&room_link, &plan).await;
    if listeners.is_empty() && !offered && !proxied {
        let why: Vec<&str> = states.iter().map(|s| s.state.as_str()).collect();
        anyhow::bail!("nothing to forward for {}: {}", plan.room, why.join("; "));
    }
    let mut status = Status {
        room: plan.room.clone(),
        pid,
        background: plan.background,
        forwards: states,
        ssh_agent: offered && plan.offer.ssh_agent.is_some(),
        git_credentials: offered && plan.offer.git_credentials,
        started_at: plan.started_at.clone(),
        rejoining: false,
        egress: proxied,
    };
    state::write_status(&status)?;

    // The link of the start being served; `None` between starts.
    let (current, watching) = watch::channel(Some(room_link.link().clone()));
    let carries_ports = !listeners.is_empty();
    for (listener, forward) in listeners {
        tokio::spawn(accept_loop(listener, forward, watching.clone(), log.clone()));
    }
    let offer = Arc::new(plan.offer.clone());

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut relinks = None;
    let code = loop {
        let linked = std::time::Instant::now();
        let link = room_link.link().clone();
        let serving = tokio::spawn(serve_requests(link.clone(), offer.clone(), live.clone(), log.clone()));
        let ended = tokio::select! {
            reason = link.closed() => format!("closed its link ({reason})"),
            // The link alone does not tell: after a restart of a peer room
            // the engine keeps the dead relay's stream open and the link
            // hangs (ADR 0005).
            ended = engine.wait_exit(&plan.container_id, &status.started_at) => match ended {
                Ok(()) => "stopped or restarted".to_string(),
                Err(e) => format!("cannot be followed ({e})"),
            },
            _ = term.recv() => break 0,
            _ = int.recv() => break 130,
        };
        serving.abort();
        current.send_replace(None);
        // A start's link is not carried past its end: a hung one (ADR 0005)
        // would keep the dead relay's exec open while the room is waited on.
        drop(link);
        drop(room_link);
        log.say(format!("{} {ended}; forwards wait to link to it again", plan.room));
        status.rejoining = true;
        let _ = state::write_status(&status);
        let served = status.started_at.clone();
        let next = tokio::select! {
            next = relink(engine, &plan.container_id, &served, linked.elapsed(), &mut relinks, log) => next,
            _ = term.recv() => break 0,
            _ = int.recv() => break 130,
        };
        let (new_link, started_at) = match next {
            Ok(linked) => linked,
            Err(why) => {
                log.say(format!("{} {why}; forwards end", plan.room));
                break 0;
            }
        };
        room_link = new_link;
        // The new start's daemon knows nothing of the last one's offer.
        let offered = offer_credentials(&room_link, &plan).await;
        let proxied = offer_egress(&room_link, &plan).await;
        if !carries_ports && !offered && !proxied {
            log.say(format!("{} started again, and there is nothing left to forward; forwards end", plan.room));
            break 0;
        }
        status.ssh_agent = offered && plan.offer.ssh_agent.is_some();
        status.git_credentials = offered && plan.offer.git_credentials;
        status.egress = proxied;
        let restarted = started_at != status.started_at;
        status.started_at = started_at;
        status.rejoining = false;
        if let Err(e) = state::write_status(&status) {
            log.warn(format!("cannot write the status of the forwards to {}: {e}", plan.room));
        }
        current.send_replace(Some(room_link.link().clone()));
        match restarted {
            true => log.say(format!("{} started again; forwarding to its new start", plan.room)),
            false => log.say(format!("linked to {} again; forwarding", plan.room)),
        }
    };
    state::remove_own(&plan.room, pid, plan.background);
    Ok(code)
}

/// Waits for the room's start after `served` and links to it: the link and
/// the start's `State.StartedAt`, or why no link will come. A link to the
/// same start again (only the link closed: a hand-off) is paced by
/// `relinks`, which a link that held [`rejoin::LINK_SETTLED`] resets.
async fn relink(
    engine: &Engine,
    id: &str,
    served: &str,
    held: std::time::Duration,
    relinks: &mut Option<Backoff>,
    log: &Notices,
) -> Result<(RoomLink, String), rejoin::Ended> {
    let mut served = served.to_string();
    loop {
        let started_at = rejoin::next_start(engine, id, &served).await?;
        if started_at == served {
            if held >= rejoin::LINK_SETTLED {
                *relinks = None;
            }
            let wait = relinks.get_or_insert_with(|| Backoff::new(Pace::ENGINE_RETURN, rejoin::RELINK_WAIT));
            if wait.expired() {
                return Err(rejoin::Ended::KeptClosing);
            }
            // A room being stopped closes its links before its start ends
            // (the daemon goes first): seen here, rather than linking to a
            // daemon on its way out.
            tokio::select! {
                () = wait.pause() => {}
                Ok(()) = engine.wait_exit(id, &served) => continue,
            }
        } else {
            *relinks = None;
        }
        match connect_when_ready(engine, id).await {
            Ok(link) => return Ok((link, started_at)),
            // Looked at again: restarted once more, stopped, or its daemon
            // broken (then the same start's relinks run out).
            Err(e) => log.say(format!("cannot link to the room again: {:#}", anyhow::Error::new(e))),
        }
        served = started_at;
    }
}

/// A link to the room's daemon, retried while the daemon of a start that
/// just began binds its socket.
async fn connect_when_ready(engine: &Engine, id: &str) -> Result<RoomLink, crate::link::RoomLinkError> {
    let mut wait = Backoff::new(Pace::STARTING, rejoin::DAEMON_READY_WAIT);
    loop {
        match RoomLink::connect(engine, id).await {
            Err(e) if e.is_retryable() && !wait.expired() => wait.pause().await,
            linked => return linked,
        }
    }
}

/// Answers the daemon's requests on one link (credentials, the egress
/// proxy's connections), until it closes or its start ends.
async fn serve_requests(link: Link, offer: Arc<Offer>, live: Option<Arc<egress::Live>>, log: Arc<Notices>) {
    while let Some((request, stream)) = link.accept().await {
        if let Request::Egress = request {
            match &live {
                Some(live) => {
                    let live = live.clone();
                    tokio::spawn(async move { egress::handle(&live, stream).await });
                }
                None => {
                    let refusal = Response::error("this host process does not serve the room's egress");
                    tokio::spawn(async move { stream.reply(refusal).await });
                }
            }
            continue;
        }
        let (offer, log) = (offer.clone(), log.clone());
        tokio::spawn(async move {
            if let Err(e) = host_credentials::handle(&offer, request, stream).await {
                log.say(format!("credentials: {e}"));
            }
        });
    }
}

/// Tells the daemon this link checks and dials the room's egress. A
/// failure is said: the room then reaches nothing (it has no route out),
/// which is the safe way to fail.
async fn offer_egress(room_link: &RoomLink, plan: &Plan) -> bool {
    if !plan.egress {
        return false;
    }
    let why = match room_link.link().request(Request::OfferEgress { port: crate::egress::PROXY_PORT }).await {
        Ok(Response::Ready) => return true,
        Ok(Response::Error { message }) => message,
        Ok(other) => format!("unexpected answer {other:?}"),
        Err(e) => e.to_string(),
    };
    plan.log.warn(format!("the egress proxy of {} is not served, so it reaches nothing: {why}", plan.room));
    false
}

/// A listener on 127.0.0.1:`port`, or, when another program holds that port
/// (another worktree's room forwarding the same `forwardPorts`, say), on a
/// free one: then the port asked for is returned too, for `ports` to say.
async fn listen(port: u16) -> std::io::Result<(TcpListener, Option<u16>)> {
    let taken = match TcpListener::bind(("127.0.0.1", port)).await {
        Ok(l) => return Ok((l, None)),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => e,
        Err(e) => return Err(e),
    };
    for other in spec::alternatives(port) {
        if let Ok(l) = TcpListener::bind(("127.0.0.1", other)).await {
            return Ok((l, Some(port)));
        }
    }
    Err(taken)
}

fn label_suffix(forward: &Forward) -> String {
    forward.label.as_ref().map(|l| format!(" ({l})")).unwrap_or_default()
}

/// Accepts on one forwarded port for as long as the forwarder runs, across
/// the room's restarts: each connection is carried on the link of the
/// start being served, and closed at once between starts (as a direct
/// connection to a stopped room would be refused).
async fn accept_loop(
    listener: TcpListener,
    forward: Arc<Forward>,
    mut current: watch::Receiver<Option<Link>>,
    log: Arc<Notices>,
) {
    loop {
        match listener.accept().await {
            Ok((tcp, _)) => {
                // Marked seen with the link taken: the connection's watch
                // wakes on the next change only.
                let link = current.borrow_and_update().clone();
                match link {
                    Some(link) => {
                        tokio::spawn(carry_while_served(tcp, forward.clone(), link, current.clone(), log.clone()));
                    }
                    None => log.say(format!("{forward}: the room is between starts; connection closed")),
                }
            }
            // Out of descriptors and the like: say it, keep serving.
            Err(e) => log.say(format!("{forward}: accept: {e}")),
        }
    }
}

/// [`carry`], ended when the start it was carried to ends: that start's
/// link can hang rather than close (ADR 0005), and the client should see
/// its connection close as it would with a direct one.
async fn carry_while_served(
    tcp: TcpStream,
    forward: Arc<Forward>,
    link: Link,
    mut current: watch::Receiver<Option<Link>>,
    log: Arc<Notices>,
) {
    tokio::select! {
        () = carry(tcp, forward.clone(), link, &log) => {}
        _ = current.changed() => log.say(format!("{forward}: the room's start ended; connection closed")),
    }
}

/// One forwarded connection. A refusal in the room closes the client's
/// connection (it sees the close, as with a refused direct connection once
/// accepted) and is said on our stderr: the log of a background forwarder.
async fn carry(tcp: TcpStream, forward: Arc<Forward>, link: Link, log: &Notices) {
    let _ = tcp.set_nodelay(true);
    let request = Request::Connect { host: forward.target_host.clone(), port: forward.target_port };
    let stream = match pipe::open_ready(&link, request).await {
        Ok(s) => s,
        Err(e) => return log.say(format!("{forward}: {e}")),
    };
    // The client's bytes reach the engine's connection without passing
    // through our memory where the link splices (workroomd's staging.rs).
    if let Err(e) = workroomd::staging::carry(&stream, tcp).await {
        log.say(format!("{forward}: {e}"));
    }
}

/// Tells the daemon this link carries the credentials the plan offers, and
/// makes the room's git ask them. Failures are warnings: ports still work.
async fn offer_credentials(room_link: &RoomLink, plan: &Plan) -> bool {
    let offer = &plan.offer;
    if offer.ssh_agent.is_none() && !offer.git_credentials {
        return false;
    }
    let request = Request::OfferCredentials {
        user: plan.remote_user.clone(),
        ssh_agent: offer.ssh_agent.is_some(),
        git_credentials: offer.git_credentials,
    };
    match room_link.link().request(request).await {
        Ok(Response::Ready) => {}
        Ok(Response::Error { message }) => {
            plan.log.warn(format!("credentials are not forwarded to {}: {message}", plan.room));
            return false;
        }
        Ok(other) => {
            plan.log.warn(format!("credentials are not forwarded to {}: unexpected answer {other:?}", plan.room));
            return false;
        }
        Err(e) => {
            plan.log.warn(format!("credentials are not forwarded to {}: {e}", plan.room));
            return false;
        }
    }
    if offer.git_credentials {
        configure_git_helper(room_link, &plan.remote_user, &plan.log).await;
    }
    true
}

/// Makes the remote user's git ask the host: only when git is in the image
/// and the user has no credential helper of their own (theirs wins).
async fn configure_git_helper(room_link: &RoomLink, user: &str, log: &Notices) {
    let script = format!(
        "command -v git >/dev/null 2>&1 || exit 0; \
         [ -n \"$(git config --global --get-all credential.helper)\" ] && exit 0; \
         git config --global credential.helper '{}'",
        room::CREDENTIAL_HELPER
    );
    let request = RunRequest {
        argv: vec!["/bin/sh".into(), "-c".into(), script],
        user: Some(user.to_string()),
        ..Default::default()
    };
    match room_link.run_prefixed(request, "git credential helper", log).await {
        Ok(status) if status.code == Some(0) => {}
        Ok(status) => log.warn(format!("could not configure git's credential helper in the room ({status:?})")),
        Err(e) => {
            log.warn(format!("could not configure git's credential helper in the room: {:#}", anyhow::Error::new(e)))
        }
    }
}

/// The credentials a room's host process would offer from this host, with
/// the workspace's settings.
pub fn host_offer(settings: settings::ForwardSettings) -> Offer {
    let ssh_agent = settings.ssh_agent.then(agent_socket).flatten();
    let git_credentials = settings.git_credentials && host_credentials::host_git_has_helper();
    Offer { ssh_agent, git_credentials }
}

/// The host's ssh-agent a room's forwarder would offer, without asking git
/// anything (no process spawned).
pub fn host_ssh_agent(settings: settings::ForwardSettings) -> Option<std::path::PathBuf> {
    settings.ssh_agent.then(agent_socket).flatten()
}

fn agent_socket() -> Option<std::path::PathBuf> {
    std::env::var_os("SSH_AUTH_SOCK").filter(|v| !v.is_empty()).map(std::path::PathBuf::from)
}

/// Environment for commands in the room (exec, hooks) while the room's
/// background forwarder carries the ssh-agent.
pub fn room_env(room: &str) -> Vec<(String, String)> {
    let carried = state::background_pid(room)
        .and_then(|pid| state::read_status(room, pid))
        .is_some_and(|status| status.ssh_agent);
    if carried {
        vec![("SSH_AUTH_SOCK".to_string(), room::AGENT_SOCKET.to_string())]
    } else {
        Vec::new()
    }
}

/// A task that ends with its owner.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
