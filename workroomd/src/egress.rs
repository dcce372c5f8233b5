//! The room's egress proxy, for rooms in `allowlist` mode: a listener on
//! the room's loopback whose connections go to the host that offered
//! egress ([`Request::OfferEgress`]): each connection's own socket through
//! the host's egress socket when the room has one (a local engine), else
//! its bytes, as they are, over the host's link.
//!
//! Nothing is decided here. The host reads each request, checks it
//! against the room's policy and dials; the room has no route out of its
//! own. So root in the room, who can do anything to this daemon, can at
//! most send the host requests it will check like any other.
//!
//! Only processes of this room reach the listener: it is bound to the
//! room's own loopback, in a network namespace no other room shares.

use std::sync::{Arc, Mutex};

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;
use workroomd::pipe;
use workroomd::proto::{Link, Request, Response, StreamHandle};
use workroomd::room;

use crate::state::State;

/// The offers and the listener, one per daemon, in its [`State`].
#[derive(Default)]
pub struct Egress {
    registry: Mutex<Registry>,
}

#[derive(Default)]
struct Registry {
    /// The links that offered egress, newest last: a forwarder that links
    /// again replaces the one going away.
    offers: Vec<(u64, Link)>,
    next_id: u64,
    /// The listener's task and its port.
    serving: Option<(AbortHandle, u16)>,
}

impl Egress {
    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        workroomd::locks::lock(&self.registry)
    }

    fn current_link(&self) -> Option<Link> {
        self.registry().offers.last().map(|(_, link)| link.clone())
    }
}

/// What a client hears when no host is linked to check its request: the
/// forwarder is between links (a restart of the room, a hand-off) or gone.
const NO_HOST: &str = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nX-Workroom-Egress: failed\r\n\r\nworkroom: no host process is linked to this room to check its egress; `workroom up` on the host starts one\n";

/// Handles `Request::OfferEgress` on `link`: the proxy serves through it
/// until the link closes. The listener stays while the daemon runs, so a
/// client between links gets an answer, not a refused connection.
pub async fn offer(state: Arc<State>, link: Link, handle: StreamHandle, port: u16) {
    let listening = listen(&state, port);
    let reply = match &listening {
        Ok(()) => Response::Ready,
        Err(e) => Response::error(format!("cannot serve the egress proxy on 127.0.0.1:{port}: {e}")),
    };
    let _ = handle.reply(reply).await;
    drop(handle);
    if listening.is_err() {
        return;
    }
    let id = {
        let mut reg = state.egress.registry();
        reg.next_id += 1;
        let id = reg.next_id;
        reg.offers.push((id, link.clone()));
        id
    };
    let reason = link.closed().await;
    tracing::info!(offer = id, "egress offer ended: {reason}");
    state.egress.registry().offers.retain(|(i, _)| *i != id);
}

/// Binds the listener unless it serves `port` already. Bound under the
/// registry's lock (a plain bind does not wait), so two offers at once
/// cannot both bind.
fn listen(state: &Arc<State>, port: u16) -> std::io::Result<()> {
    let mut reg = state.egress.registry();
    match &reg.serving {
        Some((task, served)) if !task.is_finished() && *served == port => return Ok(()),
        Some((task, _)) => task.abort(),
        None => {}
    }
    reg.serving = None;
    let listener = std::net::TcpListener::bind(("127.0.0.1", port))?;
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    let task = tokio::spawn(serve(state.clone(), listener)).abort_handle();
    reg.serving = Some((task, port));
    Ok(())
}

async fn serve(state: Arc<State>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((conn, _)) => {
                tokio::spawn(connection(state.clone(), conn));
            }
            // Out of descriptors and the like: the next accept may work.
            Err(e) => tracing::warn!("egress proxy: accept: {e}"),
        }
    }
}

async fn connection(state: Arc<State>, mut conn: TcpStream) {
    let _ = conn.set_nodelay(true);
    // The host's socket first: the connection itself goes to the host,
    // which then carries its bytes with no exec stream between.
    if hand_to_host(&conn).await.is_ok() {
        return;
    }
    let Some(link) = state.egress.current_link() else {
        let _ = conn.write_all(NO_HOST.as_bytes()).await;
        let _ = conn.shutdown().await;
        return;
    };
    let stream = match pipe::open_ready(&link, Request::Egress).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("egress proxy: {e}");
            let _ = conn.write_all(NO_HOST.as_bytes()).await;
            return;
        }
    };
    let (reader, writer) = conn.into_split();
    if let Err(e) = pipe::splice(&stream, reader, writer).await {
        tracing::debug!("egress proxy: {e}");
    }
}

/// Sends `conn`'s descriptor to the host's egress socket, when the room
/// has one ([`room::EGRESS_SOCKET`]) and a forwarder listens there. Our
/// copy closes when `conn` drops; the host's stays. Any failure (no such
/// socket, nobody listening) leaves the connection to the link.
async fn hand_to_host(conn: &TcpStream) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let host = tokio::net::UnixStream::connect(room::EGRESS_SOCKET).await?;
    let fds = [conn.as_raw_fd()];
    let cmsg = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
    let iov = [std::io::IoSlice::new(b"c")];
    loop {
        host.writable().await?;
        let sent = host.try_io(tokio::io::Interest::WRITABLE, || {
            nix::sys::socket::sendmsg::<()>(host.as_raw_fd(), &iov, &cmsg, nix::sys::socket::MsgFlags::empty(), None)
                .map_err(std::io::Error::from)
        });
        match sent {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}
