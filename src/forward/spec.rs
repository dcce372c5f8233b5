//! What to forward: a pure decision from `forwardPorts`, `portsAttributes`
//! and the command line.

use crate::config::{ForwardPort, PortAttributes};
use std::fmt;

/// Where a plain port is dialled in the room: its loopback, which is what
/// a server started for development listens on.
pub const ROOM_LOOPBACK: &str = "127.0.0.1";

/// One forward: the host's 127.0.0.1:`host_port` to `target_host`:
/// `target_port` as seen from inside the room.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Forward {
    pub host_port: u16,
    pub target_host: String,
    pub target_port: u16,
    #[serde(default)]
    pub label: Option<String>,
}

impl fmt::Display for Forward {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "127.0.0.1:{} -> {}:{}", self.host_port, self.target_host, self.target_port)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("`{spec}` is not a forward; write PORT, HOST_PORT:PORT or HOST_PORT:HOST:PORT (ports 1-65535)")]
pub struct SpecError {
    pub spec: String,
}

/// `PORT`, `HOST_PORT:PORT` or `HOST_PORT:HOST:PORT` from the command line.
pub fn parse(spec: &str) -> Result<Forward, SpecError> {
    let err = || SpecError { spec: spec.to_string() };
    let port = |s: &str| s.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(err);
    let parts: Vec<&str> = spec.splitn(2, ':').collect();
    let (host_port, rest) = match parts.as_slice() {
        [p] => return Ok(Forward::loopback(port(p)?, port(p)?)),
        [p, rest] => (port(p)?, *rest),
        _ => return Err(err()),
    };
    match rest.rsplit_once(':') {
        None => Ok(Forward::loopback(host_port, port(rest)?)),
        Some((host, p)) if !host.is_empty() => Ok(Forward {
            host_port,
            target_host: host.trim_start_matches('[').trim_end_matches(']').to_string(),
            target_port: port(p)?,
            label: None,
        }),
        Some(_) => Err(err()),
    }
}

/// How many ports above a taken one are tried before any free port will do:
/// a neighbour (8081 for 8080) is easier to read and remember, as editors
/// choose; past these the kernel picks one.
pub const NEARBY_PORTS: u16 = 20;

/// The host ports tried, in order, when `taken` is taken: its neighbours
/// above, then 0 (the kernel's choice, always free).
pub fn alternatives(taken: u16) -> Vec<u16> {
    let last = taken.saturating_add(NEARBY_PORTS);
    (taken.saturating_add(1)..=last).filter(|p| *p != taken).chain(std::iter::once(0)).collect()
}

impl Forward {
    fn loopback(host_port: u16, target_port: u16) -> Forward {
        Forward { host_port, target_host: ROOM_LOOPBACK.to_string(), target_port, label: None }
    }
}

/// The forwards `forwardPorts` asks for, labelled from `portsAttributes`.
/// A `host:port` entry is served on the host at the same port number, as
/// the reference's editors do.
pub fn from_config(ports: &[ForwardPort], attributes: &[(String, PortAttributes)]) -> Vec<Forward> {
    ports
        .iter()
        .map(|p| {
            let (mut forward, key) = match p {
                ForwardPort::Port(n) => (Forward::loopback(*n, *n), n.to_string()),
                ForwardPort::HostPort { host, port } => (
                    Forward { host_port: *port, target_host: host.clone(), target_port: *port, label: None },
                    format!("{host}:{port}"),
                ),
            };
            forward.label = label_for(attributes, &key, forward.target_port);
            forward
        })
        .collect()
}

/// Labels a forward typed by hand, from the same attributes.
pub fn label(forward: &mut Forward, attributes: &[(String, PortAttributes)]) {
    if forward.label.is_none() {
        let key = if forward.target_host == ROOM_LOOPBACK {
            forward.target_port.to_string()
        } else {
            format!("{}:{}", forward.target_host, forward.target_port)
        };
        forward.label = label_for(attributes, &key, forward.target_port);
    }
}

/// `portsAttributes` keys are a port, `host:port`, or a range `a-b`; the
/// exact key wins over a range.
fn label_for(attributes: &[(String, PortAttributes)], key: &str, port: u16) -> Option<String> {
    let exact = attributes.iter().find(|(k, _)| k == key);
    let ranged = || {
        attributes.iter().find(|(k, _)| {
            k.split_once('-').is_some_and(|(a, b)| {
                matches!((a.trim().parse::<u16>(), b.trim().parse::<u16>()), (Ok(a), Ok(b)) if (a..=b).contains(&port))
            })
        })
    };
    exact.or_else(ranged).and_then(|(_, a)| a.label.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(pairs: &[(&str, &str)]) -> Vec<(String, PortAttributes)> {
        pairs
            .iter()
            .map(|(k, l)| {
                (k.to_string(), PortAttributes { label: Some(l.to_string()), protocol: None, on_auto_forward: None })
            })
            .collect()
    }

    #[test]
    fn a_taken_port_moves_to_a_neighbour_above_then_to_any_free_port() {
        let tried = alternatives(8080);
        assert_eq!(tried.len(), NEARBY_PORTS as usize + 1);
        assert_eq!((tried[0], tried[NEARBY_PORTS as usize - 1]), (8081, 8080 + NEARBY_PORTS));
        assert_eq!(tried.last(), Some(&0));
        assert_eq!(alternatives(65535), vec![0], "no port above the last one");
        assert_eq!(alternatives(65530), vec![65531, 65532, 65533, 65534, 65535, 0]);
    }

    #[test]
    fn command_line_forwards_take_three_forms() {
        assert_eq!(parse("8080").unwrap(), Forward::loopback(8080, 8080));
        assert_eq!(parse("9000:80").unwrap(), Forward::loopback(9000, 80));
        let named = parse("15432:db:5432").unwrap();
        assert_eq!((named.host_port, named.target_host.as_str(), named.target_port), (15432, "db", 5432));
        assert_eq!(parse("1:[::1]:22").unwrap().target_host, "::1");
    }

    #[test]
    fn bad_forwards_are_refused_with_the_accepted_forms() {
        for bad in ["", "0", "70000", "x", "80:", ":80", "80::81", "80:db:"] {
            let e = parse(bad).unwrap_err();
            assert!(e.to_string().contains("HOST_PORT:PORT"), "{bad}: {e}");
        }
    }

    #[test]
    fn config_forwards_are_labelled_exactly_before_by_range() {
        let ports =
            [ForwardPort::Port(3000), ForwardPort::HostPort { host: "db".into(), port: 5432 }, ForwardPort::Port(4005)];
        let forwards = from_config(&ports, &attrs(&[("4000-4010", "range"), ("3000", "web"), ("db:5432", "postgres")]));
        let labels: Vec<_> = forwards.iter().map(|f| f.label.as_deref()).collect();
        assert_eq!(labels, [Some("web"), Some("postgres"), Some("range")]);
        assert_eq!(forwards[1].to_string(), "127.0.0.1:5432 -> db:5432");
    }
}
