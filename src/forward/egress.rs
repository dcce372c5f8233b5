//! The host's side of a room's egress proxy: each connection a client in
//! the room makes to the proxy arrives here as a [`Request::Egress`]
//! stream. Its request is read, checked against the room's policy, logged,
//! and dialled from the host; the proxy's own answers (403, 502) are
//! written back on the stream for the client to read.
//!
//! Names are looked up here, not in the room (which has no DNS). A name
//! that a wildcard rule lets through but that resolves to an address of
//! this host (loopback, unspecified, link-local) is refused: a rule for
//! `*.example.org` must not become a way to the host's own services
//! through a name someone pointed at 127.0.0.1. Only a rule naming the
//! address itself reaches it, or one naming [`HOST_NAMES`]: the names a
//! room uses for the host (its own `127.0.0.1` is its own loopback), which
//! the proxy dials at the host's loopback.

use crate::egress::http::{self, Ask, HeadError};
use crate::egress::policy::{Decision, Policy};
use crate::egress::store::{self, Entry, Outcome, Via};
use crate::notices::Notices;
use anyhow::Context as _;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use workroomd::proto::{Event, Response, StreamHandle};

/// The names that mean this host's loopback through the proxy: Docker
/// Desktop's, which dev tools already use, and ours. Only a rule that
/// names one exactly (not `*`) lets a request through to it.
pub const HOST_NAMES: &[&str] = &["host.docker.internal", "host.workroom.internal"];

/// How long a client may take to send its request head once connected.
/// Real clients send it at once; past this the connection is dropped so
/// an idle one holds nothing.
const HEAD_WAIT: Duration = Duration::from_secs(30);

/// How long a lookup and a dial may take together before the client gets
/// a 502 naming the timeout, shorter than most clients' own so the reason
/// reaches them.
const DIAL_WAIT: Duration = Duration::from_secs(15);

/// The room's policy, read again from its file when the file changes.
pub struct Live {
    room: String,
    path: PathBuf,
    cached: Mutex<Option<(SystemTime, Arc<Policy>)>>,
    log: Arc<Notices>,
}

impl Live {
    pub fn new(room: &str, log: Arc<Notices>) -> Result<Live, store::StoreError> {
        Ok(Live { room: room.to_string(), path: store::policy_file(room)?, cached: Mutex::new(None), log })
    }

    /// The policy in force; an unreadable or missing file allows nothing
    /// (and says why in the forwarder's log), never everything.
    fn policy(&self) -> Arc<Policy> {
        let modified = std::fs::metadata(&self.path).and_then(|m| m.modified()).ok();
        let mut cached = workroomd::locks::lock(&self.cached);
        if let (Some(m), Some((seen, policy))) = (modified, cached.as_ref()) {
            if *seen == m {
                return policy.clone();
            }
        }
        let policy = match store::read_at(&self.path) {
            Ok(Some(written)) => written.policy().unwrap_or_default(),
            Ok(None) => {
                self.log.warn(format!(
                    "{} has no egress policy file at {}; nothing is allowed",
                    self.room,
                    self.path.display()
                ));
                Policy::default()
            }
            Err(e) => {
                self.log.warn(format!("{e:#}; nothing is allowed until it is mended"));
                Policy::default()
            }
        };
        let policy = Arc::new(policy);
        *cached = modified.map(|m| (m, policy.clone()));
        policy
    }
}

/// Serves one proxy connection that came as a link stream to its end.
pub async fn handle(live: &Live, stream: StreamHandle) {
    if stream.reply(Response::Ready).await.is_err() {
        return;
    }
    serve(live, Client::Link(stream)).await
}

/// Serves one proxy connection whose socket the daemon handed over
/// through the room's egress socket ([`serve_socket`]).
async fn handle_socket(live: &Live, socket: TcpStream) {
    let _ = socket.set_nodelay(true);
    serve(live, Client::Socket(socket)).await
}

/// Why a connection's bytes stopped before both ends closed.
#[derive(Debug, thiserror::Error)]
enum CarryError {
    #[error("{0}")]
    Link(workroomd::pipe::SpliceError),
    #[error("{0}")]
    Socket(std::io::Error),
}

/// Where a proxy connection's client is: at the far end of a link stream,
/// or its own socket, handed over by the daemon.
enum Client {
    Link(StreamHandle),
    Socket(TcpStream),
}

impl Client {
    /// The request's head, and any bytes the client sent after it; `None`
    /// when the client closed before sending a whole head.
    async fn read_head(&mut self) -> Result<Option<(Ask, Vec<u8>)>, HeadError> {
        let mut buf = Vec::new();
        loop {
            match self {
                Client::Link(stream) => match stream.recv().await {
                    Some(Event::Data(bytes)) => buf.extend_from_slice(&bytes),
                    Some(Event::Stderr(_) | Event::Exit(_)) => continue,
                    Some(Event::Eof | Event::Reset(_)) | None => return Ok(None),
                },
                Client::Socket(socket) => {
                    let mut chunk = [0u8; 8 * 1024];
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => return Ok(None),
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            }
            if let Some(end) = http::head_end(&buf)? {
                let ask = http::parse(&buf[..end])?;
                return Ok(Some((ask, buf.split_off(end))));
            }
        }
    }

    async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Client::Link(stream) => stream.send_data(bytes).await.map_err(std::io::Error::other),
            Client::Socket(socket) => socket.write_all(bytes).await,
        }
    }

    /// The proxy's own last answer, then the end.
    async fn answer(&mut self, bytes: &[u8]) {
        let _ = self.send(bytes).await;
        match self {
            Client::Link(stream) => {
                let _ = stream.send_eof().await;
            }
            Client::Socket(socket) => {
                let _ = socket.shutdown().await;
            }
        }
    }

    async fn give_up(&mut self, why: &str) {
        match self {
            Client::Link(stream) => {
                let _ = stream.reset(why).await;
            }
            Client::Socket(socket) => {
                let _ = socket.shutdown().await;
            }
        }
    }

    /// Carries bytes both ways between the client and `server` to the end
    /// of both; counts them into `sent` (to the server) and `received`.
    async fn carry(self, server: TcpStream, sent: &AtomicU64, received: &AtomicU64) -> Result<(), CarryError> {
        match self {
            Client::Link(stream) => {
                let sent_arc = Arc::new(AtomicU64::new(0));
                let received_arc = Arc::new(AtomicU64::new(0));
                let (reader, writer) = server.into_split();
                let result = workroomd::pipe::splice(
                    &stream,
                    Counted { inner: reader, count: received_arc.clone() },
                    Counted { inner: writer, count: sent_arc.clone() },
                )
                .await;
                sent.fetch_add(sent_arc.load(Ordering::Relaxed), Ordering::Relaxed);
                received.fetch_add(received_arc.load(Ordering::Relaxed), Ordering::Relaxed);
                result.map_err(CarryError::Link)
            }
            Client::Socket(client) => {
                crate::egress::splice::both_ways(client, server, sent, received).await.map_err(CarryError::Socket)
            }
        }
    }
}

/// Serves one proxy connection to its end.
async fn serve(live: &Live, mut client: Client) {
    let started = Instant::now();
    let time_ms = workroomd::clock::now_ms();
    let mut entry = Entry {
        time_ms,
        method: String::new(),
        host: String::new(),
        port: 0,
        outcome: Outcome::Failed,
        rule: None,
        reason: None,
        sent: 0,
        received: 0,
        duration_ms: 0,
        via: Some(match &client {
            Client::Link(_) => Via::Link,
            Client::Socket(_) => Via::Socket,
        }),
    };
    let (ask, rest) = match tokio::time::timeout(HEAD_WAIT, client.read_head()).await {
        Ok(Ok(Some(read))) => read,
        // The client went away before asking anything: nothing to log.
        Ok(Ok(None)) => return,
        Ok(Err(e)) => {
            client.answer(&http::answer(400, "Bad Request", &format!("workroom: {e}\n"))).await;
            return;
        }
        Err(_) => {
            client.give_up("no request head within the wait").await;
            return;
        }
    };
    entry.method = match &ask {
        Ask::Connect { .. } => "CONNECT".into(),
        Ask::Forward { head, .. } => {
            String::from_utf8_lossy(head.split(|b| *b == b' ').next().unwrap_or_default()).into()
        }
    };
    entry.host = ask.host().to_string();
    entry.port = ask.port();

    let policy = live.policy();
    let decision = policy.decide(ask.host(), ask.port());
    let refused = match &decision {
        Decision::Allowed(rule) => {
            entry.rule = Some(rule.clone());
            None
        }
        Decision::Denied(rule) => {
            entry.rule = Some(rule.clone());
            Some(format!("denied by the rule `{rule}`"))
        }
        Decision::NotAllowed => Some("no rule allows it".to_string()),
    };
    if let Some(reason) = refused {
        let body = refused_body(ask.host(), ask.port(), &reason);
        client.answer(&http::answer(403, "Forbidden", &body)).await;
        entry.outcome = Outcome::Refused;
        entry.reason = Some(reason);
        return finish(live, entry, started);
    }
    let exact = matches!(&decision, Decision::Allowed(rule) if names_exactly(rule, ask.host()));
    let mut tcp = match tokio::time::timeout(DIAL_WAIT, dial(ask.host(), ask.port(), exact)).await {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(failure)) => return fail(live, &mut client, entry, started, failure).await,
        Err(_) => {
            let failure = DialFailure::Other(format!("no answer within {} s", DIAL_WAIT.as_secs()));
            return fail(live, &mut client, entry, started, failure).await;
        }
    };
    let _ = tcp.set_nodelay(true);
    let first = match &ask {
        Ask::Connect { .. } => {
            if client.send(http::ESTABLISHED).await.is_err() {
                return;
            }
            rest
        }
        Ask::Forward { head, .. } => [head.as_slice(), &rest].concat(),
    };
    if tcp.write_all(&first).await.is_err() {
        entry.reason = Some("the server closed the connection".into());
        return finish(live, entry, started);
    }
    let sent = AtomicU64::new(first.len() as u64);
    let received = AtomicU64::new(0);
    let result = client.carry(tcp, &sent, &received).await;
    entry.outcome = Outcome::Allowed;
    entry.sent = sent.load(Ordering::Relaxed);
    entry.received = received.load(Ordering::Relaxed);
    if let Err(e) = result {
        entry.reason = Some(e.to_string());
    }
    finish(live, entry, started)
}

fn finish(live: &Live, mut entry: Entry, started: Instant) {
    entry.duration_ms = started.elapsed().as_millis() as u64;
    if let Err(e) = store::append(&live.room, &entry) {
        live.log.warn(format!("egress log: {e:#}"));
    }
}

async fn fail(live: &Live, client: &mut Client, mut entry: Entry, started: Instant, failure: DialFailure) {
    let reason = failure.to_string();
    let body = format!("workroom: cannot reach {}:{} from the host: {reason}\n", entry.host, entry.port);
    let answer = match failure {
        DialFailure::HostLocal(_) => http::answer(403, "Forbidden", &body),
        _ => http::answer(502, "Bad Gateway", &body),
    };
    client.answer(&answer).await;
    entry.outcome = if matches!(failure, DialFailure::HostLocal(_)) { Outcome::Refused } else { Outcome::Failed };
    entry.reason = Some(reason);
    finish(live, entry, started)
}

/// What the client reads when it is refused: which rule would let it
/// through, and the two ways to add it.
fn refused_body(host: &str, port: u16, reason: &str) -> String {
    let rule = crate::egress::policy::suggestion(host, port);
    format!(
        "workroom: egress to {rule} is refused in this room ({reason}).\n\
         To allow it now:   workroom egress allow {rule}\n\
         To keep it:        add \"{rule}\" to allow under [egress] in .workroom.toml\n"
    )
}

/// Most connections the room's egress socket carries at once: each holds
/// two sockets and two pipes of ours. Past it a connection is closed
/// unanswered, rather than the forwarder running out of descriptors for
/// the room's other work.
const MAX_HANDED_OVER: usize = 1024;

/// Listens on the room's egress socket (`store::socket_folder`, which the
/// room has bound read-only where it was made on an engine that sees this
/// host's folders): the daemon hands each proxy connection's own socket
/// over, and it is served as one from the link. A socket a forwarder
/// before this one left is replaced. The task ends when aborted.
pub fn serve_socket(live: Arc<Live>, room: &str) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let folder = store::made_socket_folder(room)?;
    let path = folder.join(SOCKET_NAME);
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path)
        .with_context(|| format!("listen on the egress socket {}", path.display()))?;
    let limit = Arc::new(tokio::sync::Semaphore::new(MAX_HANDED_OVER));
    Ok(tokio::spawn(async move {
        loop {
            let Ok((conn, _)) = listener.accept().await else { continue };
            let Ok(permit) = limit.clone().try_acquire_owned() else { continue };
            let live = live.clone();
            tokio::spawn(async move {
                let _permit = permit;
                if let Ok(Ok(Some(socket))) = tokio::time::timeout(HEAD_WAIT, handed_over(&conn)).await {
                    drop(conn);
                    handle_socket(&live, socket).await;
                }
            });
        }
    }))
}

/// The socket's name in its folder; the room's `workroomd::room::EGRESS_SOCKET`.
const SOCKET_NAME: &str = "proxy.sock";

/// The TCP socket the daemon sent on `conn`, if it sent one. Anything else
/// it could send (a file, a pipe, another kind of socket: root in the room
/// can send what it likes) is closed unread.
async fn handed_over(conn: &tokio::net::UnixStream) -> std::io::Result<Option<TcpStream>> {
    use nix::sys::socket::{self, sockopt, ControlMessageOwned, MsgFlags, SockType, SockaddrLike, SockaddrStorage};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let fds: Vec<OwnedFd> = loop {
        conn.readable().await?;
        let received = conn.try_io(tokio::io::Interest::READABLE, || {
            let mut byte = [0u8; 1];
            let mut iov = [std::io::IoSliceMut::new(&mut byte)];
            let mut space = nix::cmsg_space!([std::os::fd::RawFd; 4]);
            let msg = socket::recvmsg::<()>(conn.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
                .map_err(std::io::Error::from)?;
            let mut fds = Vec::new();
            for cmsg in msg.cmsgs().map_err(std::io::Error::from)? {
                if let ControlMessageOwned::ScmRights(raw) = cmsg {
                    // SAFETY: the kernel just gave us these descriptors;
                    // nothing else owns them.
                    fds.extend(raw.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
                }
            }
            Ok(fds)
        });
        match received {
            Ok(fds) => break fds,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    };
    let Some(fd) = fds.into_iter().next() else { return Ok(None) };
    let stream = socket::getsockopt(&fd, sockopt::SockType).ok() == Some(SockType::Stream);
    let inet = socket::getsockname::<SockaddrStorage>(fd.as_raw_fd())
        .ok()
        .and_then(|a| a.family())
        .is_some_and(|f| matches!(f, socket::AddressFamily::Inet | socket::AddressFamily::Inet6));
    if !(stream && inet) {
        return Ok(None);
    }
    let socket = std::net::TcpStream::from(fd);
    socket.set_nonblocking(true)?;
    Ok(Some(TcpStream::from_std(socket)?))
}

#[derive(Debug, thiserror::Error)]
enum DialFailure {
    #[error("DNS: cannot resolve {0}")]
    Dns(String),
    #[error("{0} resolves to an address of this host ({1}); only a rule naming that address reaches it")]
    HostLocalName(String, IpAddr),
    #[error("{0} is an address of this host; only a rule naming it reaches it")]
    HostLocal(IpAddr),
    #[error("connection refused by {0}")]
    Refused(SocketAddr),
    #[error("{0}")]
    Other(String),
}

/// Whether the rule that allowed a request names its host as written, and
/// the host is an address or one of [`HOST_NAMES`]: then reaching this
/// host is what the person asked for.
fn names_exactly(rule: &str, host: &str) -> bool {
    let bare = rule.trim_start_matches('[');
    let bare = bare.split(']').next().unwrap_or(bare);
    let bare = if rule.starts_with('[') { bare } else { bare.rsplit_once(':').map_or(bare, |(h, _)| h) };
    let host = host.trim_end_matches('.');
    bare.eq_ignore_ascii_case(host)
        && (host.parse::<IpAddr>().is_ok() || HOST_NAMES.iter().any(|n| n.eq_ignore_ascii_case(host)))
}

/// An address that reaches this host rather than another: loopback,
/// unspecified, link-local (the cloud's metadata service among them), or
/// one of this host's own interfaces (the engine's bridge gateway, its LAN
/// address).
fn host_local(ip: IpAddr) -> bool {
    let special = match ip {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_unspecified() || v4.is_link_local(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.is_unspecified() || (v6.segments()[0] & 0xffc0) == 0xfe80,
    };
    special || own_addresses().contains(&ip)
}

/// The addresses of this host's interfaces, asked at each dial: the
/// engine adds a bridge with each network it makes.
fn own_addresses() -> Vec<IpAddr> {
    let Ok(interfaces) = nix::ifaddrs::getifaddrs() else { return Vec::new() };
    interfaces
        .filter_map(|i| i.address)
        .filter_map(|a| match (a.as_sockaddr_in(), a.as_sockaddr_in6()) {
            (Some(v4), _) => Some(IpAddr::V4(v4.ip())),
            (_, Some(v6)) => Some(IpAddr::V6(v6.ip())),
            _ => None,
        })
        .collect()
}

async fn dial(host: &str, port: u16, exact: bool) -> Result<TcpStream, DialFailure> {
    let alias = HOST_NAMES.iter().any(|n| n.eq_ignore_ascii_case(host.trim_end_matches('.')));
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        _ if alias => {
            let loopback = IpAddr::from([127, 0, 0, 1]);
            if !exact {
                return Err(DialFailure::HostLocalName(host.to_string(), loopback));
            }
            vec![SocketAddr::new(loopback, port)]
        }
        Ok(ip) => {
            if host_local(ip) && !exact {
                return Err(DialFailure::HostLocal(ip));
            }
            vec![SocketAddr::new(ip, port)]
        }
        Err(_) => {
            let found = tokio::net::lookup_host((host, port)).await.map_err(|_| DialFailure::Dns(host.to_string()))?;
            let found: Vec<SocketAddr> = found.collect();
            if let Some(local) = found.iter().find(|a| host_local(a.ip())) {
                return Err(DialFailure::HostLocalName(host.to_string(), local.ip()));
            }
            found
        }
    };
    let mut last = DialFailure::Dns(host.to_string());
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(tcp) => return Ok(tcp),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => last = DialFailure::Refused(addr),
            Err(e) => last = DialFailure::Other(format!("{addr}: {e}")),
        }
    }
    Err(last)
}

/// A reader or writer that counts the bytes through it, for the log.
struct Counted<T> {
    inner: T,
    count: Arc<AtomicU64>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        self.count.fetch_add((buf.filled().len() - before) as u64, Ordering::Relaxed);
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &polled {
            self.count.fetch_add(*n as u64, Ordering::Relaxed);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_rule_naming_the_address_or_the_hosts_name_itself_reaches_a_host_local_one() {
        assert!(names_exactly("127.0.0.1:8080", "127.0.0.1"));
        assert!(names_exactly("127.0.0.1", "127.0.0.1"));
        assert!(names_exactly("[::1]:443", "::1"));
        assert!(names_exactly("host.docker.internal:8080", "Host.Docker.Internal."));
        assert!(!names_exactly("*", "127.0.0.1"));
        assert!(!names_exactly("*:8080", "127.0.0.1"));
        assert!(!names_exactly("*.internal", "host.docker.internal"));
        assert!(!names_exactly("localhost:8080", "localhost"), "a name is looked up, and its address checked");
    }

    #[test]
    fn loopback_unspecified_link_local_and_the_interfaces_addresses_are_the_hosts_own() {
        for ip in ["127.0.0.1", "127.8.9.1", "0.0.0.0", "169.254.169.254", "::1", "::", "fe80::1"] {
            assert!(host_local(ip.parse().unwrap()), "{ip}");
        }
        let own = own_addresses();
        assert!(own.iter().any(|ip| ip.is_loopback()), "getifaddrs lists lo: {own:?}");
        for ip in own {
            assert!(host_local(ip), "{ip}");
        }
        for ip in ["192.0.2.77", "8.8.8.8", "2001:db8::77"] {
            assert!(!host_local(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn a_refusal_names_the_rule_to_add_both_ways() {
        let body = refused_body("Example.org", 443, "no rule allows it");
        assert!(body.contains("workroom egress allow example.org:443"), "{body}");
        assert!(body.contains("\"example.org:443\"") && body.contains("[egress]"), "{body}");
    }
}
