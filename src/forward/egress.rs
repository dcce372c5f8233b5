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
use crate::egress::store::{self, Entry, Outcome};
use crate::notices::Notices;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
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

/// Serves one proxy connection to its end.
pub async fn handle(live: &Live, stream: StreamHandle) {
    if stream.reply(Response::Ready).await.is_err() {
        return;
    }
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
    };
    let (ask, rest) = match tokio::time::timeout(HEAD_WAIT, read_head(&stream)).await {
        Ok(Ok(Some(read))) => read,
        // The client went away before asking anything: nothing to log.
        Ok(Ok(None)) => return,
        Ok(Err(e)) => {
            let _ = stream.send_data(&http::answer(400, "Bad Request", &format!("workroom: {e}\n"))).await;
            let _ = stream.send_eof().await;
            return;
        }
        Err(_) => {
            let _ = stream.reset("no request head within the wait").await;
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
        let _ = stream.send_data(&http::answer(403, "Forbidden", &body)).await;
        let _ = stream.send_eof().await;
        entry.outcome = Outcome::Refused;
        entry.reason = Some(reason);
        return finish(live, entry, started);
    }
    let exact = matches!(&decision, Decision::Allowed(rule) if names_exactly(rule, ask.host()));
    let tcp = match tokio::time::timeout(DIAL_WAIT, dial(ask.host(), ask.port(), exact)).await {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(failure)) => return fail(live, &stream, entry, started, failure).await,
        Err(_) => {
            let failure = DialFailure::Other(format!("no answer within {} s", DIAL_WAIT.as_secs()));
            return fail(live, &stream, entry, started, failure).await;
        }
    };
    let _ = tcp.set_nodelay(true);
    let (reader, mut writer) = tcp.into_split();
    let first = match &ask {
        Ask::Connect { .. } => {
            if stream.send_data(http::ESTABLISHED).await.is_err() {
                return;
            }
            rest
        }
        Ask::Forward { head, .. } => [head.as_slice(), &rest].concat(),
    };
    if writer.write_all(&first).await.is_err() {
        entry.reason = Some("the server closed the connection".into());
        return finish(live, entry, started);
    }
    let sent = Arc::new(AtomicU64::new(first.len() as u64));
    let received = Arc::new(AtomicU64::new(0));
    let result = workroomd::pipe::splice(
        &stream,
        Counted { inner: reader, count: received.clone() },
        Counted { inner: writer, count: sent.clone() },
    )
    .await;
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

async fn fail(live: &Live, stream: &StreamHandle, mut entry: Entry, started: Instant, failure: DialFailure) {
    let reason = failure.to_string();
    let body = format!("workroom: cannot reach {}:{} from the host: {reason}\n", entry.host, entry.port);
    let answer = match failure {
        DialFailure::HostLocal(_) => http::answer(403, "Forbidden", &body),
        _ => http::answer(502, "Bad Gateway", &body),
    };
    let _ = stream.send_data(&answer).await;
    let _ = stream.send_eof().await;
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

/// The request's head, and any bytes the client sent after it; `None`
/// when the client closed before sending a whole head.
async fn read_head(stream: &StreamHandle) -> Result<Option<(Ask, Vec<u8>)>, HeadError> {
    let mut buf = Vec::new();
    loop {
        match stream.recv().await {
            Some(Event::Data(bytes)) => {
                buf.extend_from_slice(&bytes);
                if let Some(end) = http::head_end(&buf)? {
                    let ask = http::parse(&buf[..end])?;
                    return Ok(Some((ask, buf.split_off(end))));
                }
            }
            Some(Event::Stderr(_) | Event::Exit(_)) => {}
            Some(Event::Eof | Event::Reset(_)) | None => return Ok(None),
        }
    }
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
