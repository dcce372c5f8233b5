//! An attached exec's byte stream, taken over from the engine's HTTP
//! connection (what the docker CLI calls hijacking), and Docker's
//! multiplexing of stdout and stderr on it, read by us.
//!
//! Why not bollard's `start_exec`: it reads the upgraded connection through
//! a `FramedRead` whose every poll zero-fills the whole unread capacity
//! (`ReadBuf::initialize_unfilled` over fresh `BytesMut` room) before the
//! read, and hands the output out one Docker message (at most 32 KiB) at a
//! time. Profiled on a 1 GiB download through a forwarded port, that
//! zero-filling was a third of the forwarder's CPU (docs/performance.md,
//! "Relay and forwards"). Here the request is sent with hyper (the HTTP
//! client bollard itself sits on), the upgraded connection is taken back
//! as the plain socket it is, and its bytes are read into one buffer that
//! lives as long as the exec.
//!
//! The request goes over a connection of its own, as the docker CLI's
//! does: unix and tcp engines get a new socket, ssh engines a new
//! `docker system dial-stdio` session of the engine's ssh master.

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use super::ssh;

/// A connection to the engine, whatever carries it.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

pub type BoxIo = Box<dyn Io>;

/// How a new connection to the engine is made.
pub enum Transport {
    Unix(PathBuf),
    /// `host:port`, plain HTTP (workroom speaks no TLS to engines).
    Tcp(String),
    Ssh(Arc<ssh::Master>),
}

impl Transport {
    /// The transport for an engine address as `host::resolve` gives it
    /// (`unix://`, `tcp://`, `http://`, `ssh://`); `None` for anything else.
    pub fn for_host(host: &str, ssh: Option<&Arc<ssh::Master>>) -> Option<Transport> {
        if let Some(path) = host.strip_prefix("unix://") {
            return Some(Transport::Unix(PathBuf::from(path)));
        }
        if let Some(rest) = host.strip_prefix("tcp://").or_else(|| host.strip_prefix("http://")) {
            let authority = rest.split('/').next().unwrap_or_default();
            return (!authority.is_empty()).then(|| Transport::Tcp(authority.to_string()));
        }
        if host.starts_with("ssh://") {
            return ssh.map(|master| Transport::Ssh(master.clone()));
        }
        None
    }

    /// A new connection, and a second descriptor of its socket where it is
    /// one (unix and tcp engines), for bytes spliced into it.
    async fn connect(&self) -> std::io::Result<(BoxIo, Option<OwnedFd>)> {
        Ok(match self {
            Transport::Unix(path) => {
                let stream = tokio::net::UnixStream::connect(path).await?;
                let fd = stream.as_fd().try_clone_to_owned()?;
                (Box::new(stream), Some(fd))
            }
            Transport::Tcp(authority) => {
                let stream = tokio::net::TcpStream::connect(authority.as_str()).await?;
                // Keystrokes and their echoes ride this connection.
                stream.set_nodelay(true)?;
                let fd = stream.as_fd().try_clone_to_owned()?;
                (Box::new(stream), Some(fd))
            }
            Transport::Ssh(master) => (Box::new(master.dial()?), None),
        })
    }
}

/// Why an exec could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The engine could not be reached, or the connection broke.
    #[error("{0}")]
    Connection(String),
    /// The engine answered with an error status (its message as it gave it).
    #[error("{message}")]
    Refused { status: u16, message: String },
    #[error("no answer within {} s", .0.as_secs())]
    TimedOut(std::time::Duration),
}

/// An exec's connection, taken over.
pub struct Started {
    pub io: BoxIo,
    /// The bytes the HTTP reader had already taken past the response's head
    /// (the stream's first bytes, when the engine was quick).
    pub already_read: Bytes,
    /// A second descriptor of the connection's socket, where it is one: a
    /// link's writer splices staged bytes into it (`workroomd::staging`).
    pub socket: Option<OwnedFd>,
}

/// Sends `POST {path}` with `body` and the upgrade headers and returns the
/// raw connection. Bounded as bollard's requests are.
pub async fn start(transport: &Transport, path: &str, body: String) -> Result<Started, StartError> {
    let upgraded = upgrade(transport, path, body);
    let bound = super::request_timeout();
    tokio::time::timeout(bound, upgraded).await.unwrap_or(Err(StartError::TimedOut(bound)))
}

async fn upgrade(transport: &Transport, path: &str, body: String) -> Result<Started, StartError> {
    let lost = |e: &dyn std::fmt::Display| StartError::Connection(e.to_string());
    let (io, socket) = transport.connect().await.map_err(|e| lost(&e))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake::<_, String>(TokioIo::new(io)).await.map_err(|e| lost(&e))?;
    // The connection task ends when the upgrade hands the socket over (or
    // when it fails, which the response below reports).
    let connection = tokio::spawn(connection.with_upgrades());
    let request = hyper::Request::post(path)
        .header(hyper::header::HOST, "docker")
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::CONNECTION, "Upgrade")
        .header(hyper::header::UPGRADE, "tcp")
        .body(body)
        .map_err(|e| lost(&e))?;
    let mut response = sender.send_request(request).await.map_err(|e| lost(&e))?;
    let status = response.status();
    if status != hyper::StatusCode::SWITCHING_PROTOCOLS {
        let body = response.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        connection.abort();
        return Err(StartError::Refused { status: status.as_u16(), message: engine_message(&body) });
    }
    let upgraded = hyper::upgrade::on(&mut response).await.map_err(|e| lost(&e))?;
    match upgraded.downcast::<TokioIo<BoxIo>>() {
        Ok(parts) => Ok(Started { io: parts.io.into_inner(), already_read: parts.read_buf, socket }),
        // Cannot happen: the connection was made above with this type.
        Err(_) => Err(StartError::Connection("the upgraded connection is not the one that was made".into())),
    }
}

/// The engine's error text: the `message` of its JSON body, else the body.
fn engine_message(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Message {
        message: String,
    }
    match serde_json::from_slice::<Message>(body) {
        Ok(m) => m.message,
        Err(_) => String::from_utf8_lossy(body).trim().to_string(),
    }
}

/// Which of the exec's streams a piece of output belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    Stdout,
    Stderr,
    /// Stdin echoed back, or a kind this program does not know: dropped.
    Other,
}

/// Bytes in the header Docker puts before each piece of a non-tty exec's
/// output: the stream (1 byte), three zeros, the length (u32 BE).
const HEADER: usize = 8;

/// Docker's multiplexed stream, one header at a time. Pure: it is told the
/// bytes at hand and says what they are; the caller moves the bytes.
#[derive(Debug, Default)]
pub struct Demux {
    /// Bytes of the current piece still to come, and whose they are.
    left: usize,
    channel: Option<Channel>,
    /// A tty exec's stream has no headers: all of it is stdout.
    raw: bool,
}

/// What the bytes at the front of the input are.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// `len` bytes of the channel's output (at most what was at hand).
    Output { channel: Channel, len: usize },
    /// A header was read: skip this many bytes.
    Header(usize),
    /// Not enough bytes to say: read more.
    More,
}

impl Demux {
    pub fn new(raw: bool) -> Demux {
        Demux { raw, ..Demux::default() }
    }

    /// What the front of `input` is.
    pub fn next(&mut self, input: &[u8]) -> Next {
        if self.raw {
            return match input.len() {
                0 => Next::More,
                len => Next::Output { channel: Channel::Stdout, len },
            };
        }
        if self.left == 0 {
            let Some(header) = input.get(..HEADER) else { return Next::More };
            self.channel = Some(match header[0] {
                1 => Channel::Stdout,
                2 => Channel::Stderr,
                _ => Channel::Other,
            });
            self.left = u32::from_be_bytes(header[4..8].try_into().expect("4 bytes")) as usize;
            return Next::Header(HEADER);
        }
        match input.len().min(self.left) {
            0 => Next::More,
            len => Next::Output { channel: self.channel.unwrap_or(Channel::Other), len },
        }
    }

    /// `len` bytes of the current piece were taken.
    pub fn took(&mut self, len: usize) {
        if !self.raw {
            self.left -= len;
        }
    }

    /// In the middle of a header or a piece: the stream cannot end here
    /// without losing bytes.
    pub fn mid_piece(&self) -> bool {
        self.left > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(channel: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![channel, 0, 0, 0];
        out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(bytes);
        out
    }

    /// Feeds `input` split at `cut` and returns stdout and stderr as the
    /// demultiplexer sorts them.
    fn sort(input: &[u8], cut: usize) -> (Vec<u8>, Vec<u8>) {
        let mut demux = Demux::new(false);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut at = 0;
        let mut end = cut.min(input.len());
        loop {
            match demux.next(&input[at..end]) {
                Next::Header(n) => at += n,
                Next::Output { channel, len } => {
                    match channel {
                        Channel::Stdout => out.extend_from_slice(&input[at..at + len]),
                        Channel::Stderr => err.extend_from_slice(&input[at..at + len]),
                        Channel::Other => {}
                    }
                    demux.took(len);
                    at += len;
                }
                Next::More if end < input.len() => end = input.len(),
                Next::More => break,
            }
        }
        assert!(!demux.mid_piece(), "the input ends between pieces");
        (out, err)
    }

    #[test]
    fn stdout_and_stderr_pieces_are_sorted_wherever_the_reads_cut_them() {
        let mut input = piece(1, b"hello ");
        input.extend(piece(2, b"oops\n"));
        input.extend(piece(1, b""));
        input.extend(piece(0, b"stdin echo"));
        input.extend(piece(1, b"world\n"));
        for cut in 0..=input.len() {
            let (out, err) = sort(&input, cut);
            assert_eq!(out, b"hello world\n", "cut at {cut}");
            assert_eq!(err, b"oops\n", "cut at {cut}");
        }
    }

    #[test]
    fn a_tty_exec_is_all_stdout_with_no_headers() {
        let mut demux = Demux::new(true);
        assert_eq!(demux.next(b"\x01\x00\x00\x00raw"), Next::Output { channel: Channel::Stdout, len: 7 });
        demux.took(7);
        assert_eq!(demux.next(b""), Next::More);
        assert!(!demux.mid_piece());
    }

    #[test]
    fn a_stream_cut_inside_a_piece_is_seen_as_such() {
        let mut demux = Demux::new(false);
        let input = piece(1, b"abcdef");
        assert_eq!(demux.next(&input), Next::Header(HEADER));
        assert_eq!(demux.next(&input[HEADER..HEADER + 2]), Next::Output { channel: Channel::Stdout, len: 2 });
        demux.took(2);
        assert!(demux.mid_piece());
    }

    #[test]
    fn engine_addresses_map_to_the_connection_they_need() {
        assert!(matches!(Transport::for_host("unix:///var/run/docker.sock", None),
            Some(Transport::Unix(p)) if p == std::path::Path::new("/var/run/docker.sock")));
        assert!(matches!(Transport::for_host("tcp://box:2375", None), Some(Transport::Tcp(a)) if a == "box:2375"));
        assert!(matches!(Transport::for_host("http://box:2375/", None), Some(Transport::Tcp(a)) if a == "box:2375"));
        assert!(Transport::for_host("ssh://box", None).is_none(), "an ssh engine needs its master");
        assert!(Transport::for_host("npipe:////./pipe/docker_engine", None).is_none());
    }

    #[test]
    fn the_engines_error_message_is_read_from_its_json_body() {
        assert_eq!(engine_message(br#"{"message":"No such exec instance: abc"}"#), "No such exec instance: abc");
        assert_eq!(engine_message(b"page not found\n"), "page not found");
    }
}
