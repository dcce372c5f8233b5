//! The preamble: magic bytes and a `Hello` frame from each side, then the
//! daemon refuses a host whose protocol differs.
//!
//! Both sides write their preamble without waiting for the other's, and read
//! concurrently with writing, so neither order nor pipe buffer sizes can
//! deadlock the exchange. The whole exchange is bounded by the caller's
//! `HANDSHAKE_TIMEOUT`.

use std::io;

use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::frame::{reason_frame, Decoder, Frame, FrameError, Kind, MAGIC};
use super::message::{Hello, Reason, Role};
use super::HANDSHAKE_TIMEOUT;

/// A connection that could not be set up.
#[derive(Debug, Error)]
pub enum LinkError {
    #[error("could not write to the {peer}")]
    Write {
        peer: Role,
        #[source]
        source: io::Error,
    },
    #[error("could not read from the {peer}")]
    Read {
        peer: Role,
        #[source]
        source: io::Error,
    },
    #[error("the {peer} closed the connection before its hello")]
    ClosedEarly { peer: Role },
    #[error("not a workroom {peer} (first bytes were {shown})")]
    NotWorkroom { peer: Role, shown: String },
    #[error("the {peer} sent no hello within {} s", HANDSHAKE_TIMEOUT.as_secs())]
    Timeout { peer: Role },
    #[error("the {peer}'s hello is not readable")]
    BadHello {
        peer: Role,
        #[source]
        source: serde_json::Error,
    },
    #[error("expected the {peer}'s hello, got a frame of kind `{kind}`")]
    NoHello { peer: Role, kind: Kind },
    #[error("the peer says it is a {got}, not a {expected}")]
    WrongRole { expected: Role, got: Role },
    /// `daemon` and `host` are [`Hello::describe`] texts.
    #[error("protocol mismatch: {daemon}; {host}")]
    ProtocolMismatch { daemon: String, host: String },
    #[error("the {peer} refused the connection: {message}")]
    Refused { peer: Role, message: String },
    #[error("the {peer}'s framing is broken")]
    Frame {
        peer: Role,
        #[source]
        source: FrameError,
    },
}

/// Exchanges hellos and checks the peer's. Bytes the peer sent after its
/// hello stay in `decoder` for the link's reader.
pub(super) async fn exchange<R, W>(
    reader: &mut R,
    writer: &mut W,
    decoder: &mut Decoder,
    ours: &Hello,
) -> Result<Hello, LinkError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let peer_role = ours.role.peer();
    let write = async {
        let mut preamble = MAGIC.to_vec();
        let payload = serde_json::to_vec(ours).expect("a hello always encodes");
        Frame::new(Kind::Hello, 0, payload).expect("a hello is far under the cap").encode(&mut preamble);
        writer.write_all(&preamble).await?;
        writer.flush().await
    };
    let (written, read) = tokio::join!(write, read_hello(reader, decoder, peer_role));
    // What the peer said (or that it left) explains more than our failed
    // write to it, so a read error wins.
    let peer = read?;
    written.map_err(|source| LinkError::Write { peer: peer_role, source })?;

    if peer.protocol != ours.protocol {
        let (daemon, host) = match ours.role {
            Role::Daemon => (ours, &peer),
            Role::Host => (&peer, ours),
        };
        let mismatch = LinkError::ProtocolMismatch { daemon: daemon.describe(), host: host.describe() };
        if ours.role == Role::Daemon {
            // Best effort: the host compares versions itself as well, so a
            // refusal that cannot be written loses nothing.
            let mut refusal = Vec::new();
            reason_frame(Kind::Refuse, 0, mismatch.to_string()).encode(&mut refusal);
            let _ = writer.write_all(&refusal).await;
            let _ = writer.shutdown().await;
        }
        return Err(mismatch);
    }
    if peer.role != peer_role {
        return Err(LinkError::WrongRole { expected: peer_role, got: peer.role });
    }
    Ok(peer)
}

async fn read_hello<R>(reader: &mut R, decoder: &mut Decoder, peer: Role) -> Result<Hello, LinkError>
where
    R: AsyncRead + Unpin,
{
    let read_error = |source| LinkError::Read { peer, source };

    // The magic is read byte-exact (not through the decoder), so nothing
    // after it is consumed before we know the peer speaks frames at all.
    let mut magic = [0; MAGIC.len()];
    let mut got = 0;
    while got < magic.len() {
        let n = reader.read(&mut magic[got..]).await.map_err(read_error)?;
        if n == 0 {
            break;
        }
        got += n;
    }
    let seen = &magic[..got];
    if seen != &MAGIC[..got] {
        return Err(LinkError::NotWorkroom { peer, shown: show_bytes(seen) });
    }
    if got < MAGIC.len() {
        return Err(LinkError::ClosedEarly { peer });
    }

    loop {
        let frame = decoder.decode().map_err(|source| LinkError::Frame { peer, source })?;
        if let Some(frame) = frame {
            return match frame.kind() {
                Kind::Hello => {
                    serde_json::from_slice(frame.payload()).map_err(|source| LinkError::BadHello { peer, source })
                }
                Kind::Refuse => {
                    let message = serde_json::from_slice::<Reason>(frame.payload())
                        .map(|reason| reason.message)
                        .unwrap_or_else(|_| "no readable reason".to_owned());
                    Err(LinkError::Refused { peer, message })
                }
                kind => Err(LinkError::NoHello { peer, kind }),
            };
        }
        let n = reader.read(decoder.unfilled_mut()).await.map_err(read_error)?;
        if n == 0 {
            return Err(LinkError::ClosedEarly { peer });
        }
        decoder.advance(n);
    }
}

/// `48 54 54 50 ("HTTP")`: hex for precision, ASCII because the usual
/// culprit is text (a banner, an HTTP answer, an error message).
fn show_bytes(bytes: &[u8]) -> String {
    let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{} (\"{}\")", hex.join(" "), bytes.escape_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_bytes_are_hex_then_escaped_ascii() {
        assert_eq!(show_bytes(b"HT\n\xff"), r#"48 54 0a ff ("HT\n\xff")"#);
    }
}
