//! The proxy's side of HTTP: the head of what a client in the room sends
//! (`CONNECT host:port`, or a plain request in absolute form), and the
//! answers the proxy itself gives (established, refused, failed).
//!
//! Only the head is read here; after it, bytes go through untouched. A
//! plain request is forwarded with `Connection: close`, so each client
//! connection carries one request to one host and the policy is checked
//! for every host a client names (a kept-alive connection could name
//! another host in its next request).

/// The longest head a client may send before its request is refused. Real
/// clients send well under 8 KiB; the cap keeps one connection from
/// holding memory without bound (a frame-sized buffer per connection).
pub const MAX_HEAD: usize = 32 * 1024;

/// The headers only a proxy reads: not sent on to the origin.
const HOP_HEADERS: &[&str] = &["proxy-connection", "proxy-authorization", "connection", "keep-alive"];

/// The most headers a head may have; httparse needs the room up front.
const MAX_HEADERS: usize = 128;

/// What a client asked the proxy for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// A tunnel: answer 200, then carry bytes both ways.
    Connect { host: String, port: u16 },
    /// A plain request: send `head` (rewritten to origin form) to the
    /// host, then carry bytes both ways.
    Forward { host: String, port: u16, head: Vec<u8> },
}

impl Ask {
    pub fn host(&self) -> &str {
        match self {
            Ask::Connect { host, .. } | Ask::Forward { host, .. } => host,
        }
    }

    pub fn port(&self) -> u16 {
        match self {
            Ask::Connect { port, .. } | Ask::Forward { port, .. } => *port,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HeadError {
    #[error("the request head is longer than {MAX_HEAD} bytes")]
    TooLong,
    #[error("not an HTTP request: {0}")]
    Malformed(String),
    #[error("`{0}` is not a host:port to connect to")]
    BadAuthority(String),
    #[error("`{0}` is not an absolute http:// URL; a proxy is asked with the full URL (https goes through CONNECT)")]
    NotAbsolute(String),
}

/// Where the head ends (the index just past its blank line), once it has
/// all arrived; `Ok(None)` while more bytes are needed.
pub fn head_end(buf: &[u8]) -> Result<Option<usize>, HeadError> {
    match buf.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(at) if at + 4 <= MAX_HEAD => Ok(Some(at + 4)),
        Some(_) => Err(HeadError::TooLong),
        None if buf.len() >= MAX_HEAD => Err(HeadError::TooLong),
        None => Ok(None),
    }
}

/// Read a whole head (as [`head_end`] found it).
pub fn parse(head: &[u8]) -> Result<Ask, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(HeadError::Malformed("the head ends early".into())),
        Err(e) => return Err(HeadError::Malformed(e.to_string())),
    }
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(HeadError::Malformed("no request line".into()));
    };
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = authority(target, None).ok_or_else(|| HeadError::BadAuthority(target.into()))?;
        return Ok(Ask::Connect { host, port });
    }
    let Some(rest) = strip_scheme(target, "http://") else {
        return Err(HeadError::NotAbsolute(target.into()));
    };
    let (authority_text, path) = match rest.find(['/', '?']) {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    // Credentials in the URL stay with the origin's own Authorization
    // header, if the client sends one; the authority is the host alone.
    let authority_text = authority_text.rsplit('@').next().unwrap_or(authority_text);
    let (host, port) = authority(authority_text, Some(80)).ok_or_else(|| HeadError::BadAuthority(target.into()))?;
    let path = if path.starts_with('?') { format!("/{path}") } else { path.to_string() };

    let mut out = Vec::with_capacity(head.len());
    out.extend_from_slice(format!("{method} {path} HTTP/1.{version}\r\n").as_bytes());
    let mut has_host = false;
    for h in req.headers.iter() {
        if HOP_HEADERS.iter().any(|hop| h.name.eq_ignore_ascii_case(hop)) {
            continue;
        }
        has_host |= h.name.eq_ignore_ascii_case("host");
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    if !has_host {
        out.extend_from_slice(format!("Host: {authority_text}\r\n").as_bytes());
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Ask::Forward { host, port, head: out })
}

fn strip_scheme<'a>(target: &'a str, scheme: &str) -> Option<&'a str> {
    let head = target.get(..scheme.len())?;
    head.eq_ignore_ascii_case(scheme).then(|| &target[scheme.len()..])
}

/// `host:port`, `[v6]:port`, or a host alone when `default` is given.
fn authority(text: &str, default: Option<u16>) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (addr, after) = rest.split_once(']')?;
        match after.strip_prefix(':') {
            Some(port) => (addr, Some(port)),
            None if after.is_empty() => (addr, None),
            None => return None,
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => (host, Some(port)),
            Some(_) => return None,
            None => (text, None),
        }
    };
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0)?,
        None => default?,
    };
    let ok =
        !host.is_empty() && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b':' | b'_'));
    ok.then(|| (host.to_ascii_lowercase(), port))
}

/// The proxy's answer to CONNECT once the tunnel is dialled.
pub const ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

/// A whole answer from the proxy itself, with a plain-text body a person
/// (or an agent) reads in its tool's error output.
pub fn answer(status: u16, reason: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\nX-Workroom-Egress: {}\r\n\r\n{body}",
        body.len(),
        if status == 403 { "refused" } else { "failed" },
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connect_names_the_host_and_port_to_tunnel_to() {
        let ask = parse(b"CONNECT API.anthropic.com:443 HTTP/1.1\r\nHost: api.anthropic.com:443\r\n\r\n").unwrap();
        assert_eq!(ask, Ask::Connect { host: "api.anthropic.com".into(), port: 443 });
        let ask = parse(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(ask, Ask::Connect { host: "::1".into(), port: 8443 });
    }

    #[test]
    fn a_connect_without_a_port_or_with_a_bad_one_is_refused() {
        for target in ["example.com", "example.com:0", "example.com:99999", ":443", "a b:443"] {
            let head = format!("CONNECT {target} HTTP/1.1\r\n\r\n");
            let err = parse(head.as_bytes()).unwrap_err();
            assert!(matches!(err, HeadError::BadAuthority(_) | HeadError::Malformed(_)), "{target}: {err:?}");
        }
    }

    #[test]
    fn a_plain_request_is_sent_on_in_origin_form_with_the_proxys_headers_dropped() {
        let head = b"GET http://Pypi.Local:8080/simple/pkg/?x=1 HTTP/1.1\r\nHost: pypi.local:8080\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\nConnection: keep-alive\r\nAccept: */*\r\n\r\n";
        let Ask::Forward { host, port, head } = parse(head).unwrap() else { panic!("not forwarded") };
        assert_eq!((host.as_str(), port), ("pypi.local", 8080));
        let text = String::from_utf8(head).unwrap();
        assert_eq!(
            text,
            "GET /simple/pkg/?x=1 HTTP/1.1\r\nHost: pypi.local:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn a_plain_request_without_a_path_or_host_header_gets_both() {
        let Ask::Forward { host, port, head } = parse(b"HEAD http://example.org HTTP/1.0\r\n\r\n").unwrap() else {
            panic!("not forwarded")
        };
        assert_eq!((host.as_str(), port), ("example.org", 80));
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "HEAD / HTTP/1.0\r\nHost: example.org\r\nConnection: close\r\n\r\n"
        );
        let Ask::Forward { head, .. } = parse(b"GET http://u:p@example.org?q HTTP/1.1\r\n\r\n").unwrap() else {
            panic!("not forwarded")
        };
        assert!(String::from_utf8(head).unwrap().starts_with("GET /?q HTTP/1.1\r\nHost: example.org\r\n"));
    }

    #[test]
    fn a_request_in_origin_form_or_for_https_is_refused_naming_the_target() {
        for target in ["/index.html", "https://example.org/", "ftp://example.org/"] {
            let head = format!("GET {target} HTTP/1.1\r\nHost: example.org\r\n\r\n");
            let err = parse(head.as_bytes()).unwrap_err();
            assert_eq!(err, HeadError::NotAbsolute(target.into()));
            assert!(err.to_string().contains(target));
        }
    }

    #[test]
    fn the_head_ends_at_its_blank_line_and_not_past_the_cap() {
        assert_eq!(head_end(b"GET http://a/ HTTP/1.1\r\n").unwrap(), None);
        let whole = b"GET http://a/ HTTP/1.1\r\n\r\nbody";
        assert_eq!(head_end(whole).unwrap(), Some(whole.len() - 4));
        let long = vec![b'a'; MAX_HEAD];
        assert_eq!(head_end(&long), Err(HeadError::TooLong));
        let mut late = vec![b'a'; MAX_HEAD];
        late.extend_from_slice(b"\r\n\r\n");
        assert_eq!(head_end(&late), Err(HeadError::TooLong));
    }

    #[test]
    fn bytes_that_are_not_http_are_malformed_not_a_panic() {
        for junk in
            [&b"\x16\x03\x01\x02\x00\r\n\r\n"[..], b"\r\n\r\n", b"GET\r\n\r\n", b"\xff\xfe http://a/ HTTP/1.1\r\n\r\n"]
        {
            assert!(parse(junk).is_err(), "{junk:?}");
        }
    }

    #[test]
    fn the_proxys_own_answer_carries_its_length_and_says_who_answered() {
        let a = String::from_utf8(answer(403, "Forbidden", "no rule\n")).unwrap();
        assert!(a.starts_with("HTTP/1.1 403 Forbidden\r\n"));
        assert!(a.contains("Content-Length: 8\r\n") && a.contains("X-Workroom-Egress: refused\r\n"));
        assert!(a.ends_with("\r\n\r\nno rule\n"));
    }
}
