//! `Request::Connect`: the daemon's end of a forwarded port. It dials the
//! target from inside the room, so the room's loopback and its network
//! names are reached without publishing anything on the engine.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::net::TcpStream;
use workroomd::proto::{Response, StreamError, StreamHandle};

/// Why a forwarded port could not be dialled in the room.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("unknown host {host:?}")]
    UnknownHost { host: String },
    #[error("no address")]
    NoAddress,
    #[error("connection refused")]
    Refused,
    #[error("cannot connect to {addr}")]
    Connect { addr: SocketAddr, source: std::io::Error },
    #[error("no answer from {addr} within {} s", CONNECT_TIMEOUT.as_secs())]
    Timeout { addr: SocketAddr },
}

/// How long a dial may take. Loopback answers (or refuses) at once; a named
/// host on the room's network that does not answer within this is reported
/// rather than leaving the host's client hanging on a half-open forward.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn connect(handle: &StreamHandle, host: String, port: u16) -> Result<(), StreamError> {
    let dialled = match resolve(&host, port).await {
        Ok(addrs) => dial(&addrs).await,
        Err(e) => Err(e),
    };
    let socket = match dialled {
        Ok(s) => s,
        Err(why) => {
            let why = crate::report::chain(&why);
            return handle.reply(Response::error(format!("{why} on {host}:{port} in the room"))).await;
        }
    };
    // Forwarded traffic is mostly request/response: do not hold small
    // writes back.
    let _ = socket.set_nodelay(true);
    handle.reply(Response::Ready).await?;
    // Where the link's output is a pipe, the socket's bytes reach it
    // without passing through our memory (staging.rs).
    let spliced = workroomd::staging::carry(handle, socket).await;
    if let Err(e) = spliced {
        tracing::warn!("forward to {host}:{port}: {e}");
    }
    Ok(())
}

async fn dial(addrs: &[SocketAddr]) -> Result<TcpStream, DialError> {
    let mut last = DialError::NoAddress;
    for &addr in addrs {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => last = DialError::Refused,
            Ok(Err(source)) => last = DialError::Connect { addr, source },
            Err(_) => last = DialError::Timeout { addr },
        }
    }
    Err(last)
}

/// The addresses of `host`: an IP literal, a name from `/etc/hosts` (where
/// Docker writes the room's own name and `--add-host` entries), then the C
/// library's resolver. A static glibc resolves through DNS only when the
/// image happens to ship glibc's NSS modules, so the file comes first and
/// needs no library at all.
async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, DialError> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let mut found = hosts_lookup(&hosts, host);
    if host == "localhost" && found.is_empty() {
        found.push("127.0.0.1".parse().expect("literal"));
    }
    if !found.is_empty() {
        return Ok(found.into_iter().map(|ip| SocketAddr::new(ip, port)).collect());
    }
    match tokio::net::lookup_host((host, port)).await {
        Ok(addrs) => {
            let addrs: Vec<_> = addrs.collect();
            if addrs.is_empty() {
                Err(DialError::UnknownHost { host: host.to_string() })
            } else {
                Ok(addrs)
            }
        }
        Err(_) => Err(DialError::UnknownHost { host: host.to_string() }),
    }
}

fn hosts_lookup(text: &str, name: &str) -> Vec<IpAddr> {
    text.lines()
        .map(|line| line.split('#').next().unwrap_or(""))
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let ip = fields.next()?.parse::<IpAddr>().ok()?;
            fields.any(|n| n.eq_ignore_ascii_case(name)).then_some(ip)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etc_hosts_names_resolve_with_comments_and_aliases_ignored_correctly() {
        let hosts =
            "127.0.0.1 localhost\n# 10.0.0.9 db\n172.17.0.2 abc123 room.local # mine\n::1 localhost ip6-localhost\n";
        assert_eq!(hosts_lookup(hosts, "room.local"), vec!["172.17.0.2".parse::<IpAddr>().unwrap()]);
        assert_eq!(hosts_lookup(hosts, "db"), Vec::<IpAddr>::new());
        assert_eq!(hosts_lookup(hosts, "localhost").len(), 2);
    }
}
