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
//! credentials; it ends with the link (the room stopped or removed), and
//! `stop`/`down` end it at once. `workroom forward` runs more by hand.
//!
//! # Layout
//! - [`background`]: the room's detached forwarder, which `up` keeps.
//! - [`spec`]: what to forward (pure).
//! - [`settings`]: `[forward]` opt-outs.
//! - [`state`]: pid, log and status files; `workroom ports` reads them.
//! - `host_credentials`: the host's side of ssh-agent and git credentials.

pub mod background;
mod host_credentials;
pub mod settings;
pub mod spec;
pub mod state;

use crate::engine::Engine;
use crate::link::RoomLink;
pub use host_credentials::Offer;
use spec::Forward;
use state::{ForwardState, Status};
use std::path::Path;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
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
    pub background: bool,
}

/// Runs a forwarder until its link closes or it is told to stop (SIGTERM,
/// SIGINT). Returns the exit code.
pub async fn run(engine: &Engine, plan: Plan) -> anyhow::Result<i32> {
    let room_link = RoomLink::connect(engine, &plan.container_id).await?;
    let link = room_link.link().clone();
    let pid = std::process::id();

    let mut states = Vec::new();
    let mut listeners = Vec::new();
    for forward in &plan.forwards {
        match listen(forward.host_port).await {
            Ok((l, asked_port)) => {
                let mut forward = forward.clone();
                forward.host_port = l.local_addr().map(|a| a.port()).unwrap_or(forward.host_port);
                let moved = asked_port.map(|p| format!(" (port {p} is taken on the host)")).unwrap_or_default();
                eprintln!("workroom: forwarding {forward}{}{moved}", label_suffix(&forward));
                states.push(ForwardState { forward: forward.clone(), state: "listening".into(), asked_port });
                listeners.push((l, Arc::new(forward)));
            }
            Err(e) => {
                let why = format!("cannot listen on 127.0.0.1:{}: {e}", forward.host_port);
                eprintln!("workroom: not forwarding {forward}: {why}");
                states.push(ForwardState { forward: forward.clone(), state: why, asked_port: None });
            }
        }
    }

    let offered = offer_credentials(&room_link, &plan).await;
    if listeners.is_empty() && !offered {
        let why: Vec<&str> = states.iter().map(|s| s.state.as_str()).collect();
        anyhow::bail!("nothing to forward for {}: {}", plan.room, why.join("; "));
    }
    let status = Status {
        room: plan.room.clone(),
        pid,
        background: plan.background,
        forwards: states,
        ssh_agent: offered && plan.offer.ssh_agent.is_some(),
        git_credentials: offered && plan.offer.git_credentials,
        started_at: plan.started_at.clone(),
    };
    state::write_status(&status)?;

    for (listener, forward) in listeners {
        tokio::spawn(accept_loop(listener, forward, link.clone()));
    }
    let offer = Arc::new(plan.offer.clone());
    let serving = link.clone();
    tokio::spawn(async move {
        while let Some((request, stream)) = serving.accept().await {
            let offer = offer.clone();
            tokio::spawn(async move { host_credentials::handle(&offer, request, stream).await });
        }
    });

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let code = tokio::select! {
        reason = link.closed() => {
            eprintln!("workroom: the link to {} closed ({reason}); forwards end", plan.room);
            0
        }
        // The link alone does not tell: after a restart of a peer room the
        // engine keeps the dead relay's stream open and the link hangs.
        ended = engine.wait_exit(&plan.container_id, &plan.started_at) => {
            match ended {
                Ok(()) => eprintln!("workroom: {} stopped or restarted; forwards end (`workroom up` starts them again)", plan.room),
                Err(e) => eprintln!("workroom: cannot follow {}: {e}; forwards end", plan.room),
            }
            0
        }
        _ = term.recv() => 0,
        _ = int.recv() => 130,
    };
    state::remove_own(&plan.room, pid, plan.background);
    Ok(code)
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

async fn accept_loop(listener: TcpListener, forward: Arc<Forward>, link: Link) {
    loop {
        match listener.accept().await {
            Ok((tcp, _)) => {
                tokio::spawn(carry(tcp, forward.clone(), link.clone()));
            }
            // Out of descriptors and the like: say it, keep serving.
            Err(e) => eprintln!("workroom: {forward}: accept: {e}"),
        }
    }
}

/// One forwarded connection. A refusal in the room closes the client's
/// connection (it sees the close, as with a refused direct connection once
/// accepted) and is said on our stderr: the log of a background forwarder.
async fn carry(tcp: TcpStream, forward: Arc<Forward>, link: Link) {
    let _ = tcp.set_nodelay(true);
    let request = Request::Connect { host: forward.target_host.clone(), port: forward.target_port };
    let stream = match pipe::open_ready(&link, request).await {
        Ok(s) => s,
        Err(e) => return eprintln!("workroom: {forward}: {e}"),
    };
    // The client's bytes reach the engine's connection without passing
    // through our memory where the link splices (workroomd's staging.rs).
    if let Err(e) = workroomd::staging::carry(&stream, tcp).await {
        eprintln!("workroom: {forward}: {e}");
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
            eprintln!("warning: credentials are not forwarded to {}: {message}", plan.room);
            return false;
        }
        Ok(other) => {
            eprintln!("warning: credentials are not forwarded to {}: unexpected answer {other:?}", plan.room);
            return false;
        }
        Err(e) => {
            eprintln!("warning: credentials are not forwarded to {}: {e}", plan.room);
            return false;
        }
    }
    if offer.git_credentials {
        configure_git_helper(room_link, &plan.remote_user).await;
    }
    true
}

/// Makes the remote user's git ask the host: only when git is in the image
/// and the user has no credential helper of their own (theirs wins).
async fn configure_git_helper(room_link: &RoomLink, user: &str) {
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
    match room_link.run_prefixed(request, "git credential helper").await {
        Ok(status) if status.code == Some(0) => {}
        Ok(status) => eprintln!("warning: could not configure git's credential helper in the room ({status:?})"),
        Err(e) => {
            eprintln!("warning: could not configure git's credential helper in the room: {:#}", anyhow::Error::new(e))
        }
    }
}

/// The credentials a room's host process would offer from this host, with
/// the workspace's settings.
pub fn host_offer(workspace: &Path) -> Offer {
    let settings = settings::load(workspace);
    let ssh_agent = settings.ssh_agent.then(agent_socket).flatten();
    let git_credentials = settings.git_credentials && host_credentials::host_git_has_helper();
    Offer { ssh_agent, git_credentials }
}

/// The host's ssh-agent a room's forwarder would offer, without asking git
/// anything (no process spawned).
pub fn host_ssh_agent(workspace: &Path) -> Option<std::path::PathBuf> {
    settings::load(workspace).ssh_agent.then(agent_socket).flatten()
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
