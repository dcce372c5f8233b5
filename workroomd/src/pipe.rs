//! Splicing a byte connection (a forwarded TCP connection, an ssh-agent
//! socket) onto a streaming [`StreamHandle`], on either side of the link.
//!
//! Both directions run at once and end on their own: a connection's end of
//! input becomes the stream's `Eof`, and the peer's `Eof` becomes a shutdown
//! of the connection's write side, so half-closed protocols (an HTTP client
//! that shuts down after its request, `nc -N`) work through the forward.
//!
//! Backpressure needs no buffer of our own: a reader that stops reading the
//! connection stops our `recv`, so the stream's credit runs out and the far
//! side's `send_data` waits; a connection that does not drain makes our
//! `write_all` wait, which withholds credit the same way.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::proto::{Event, Link, Request, Response, StreamError, StreamHandle, MAX_DATA_CHUNK};

/// Why a stream to splice onto could not be had.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{0}")]
    Stream(StreamError),
    /// The far side answered `Error` (its message as it gave it).
    #[error("{0}")]
    Refused(String),
    #[error("unexpected answer {0}")]
    Unexpected(String),
}

/// Opens a streaming `request` (a forwarded connection, an agent connection)
/// and waits for its `Ready`: the start of every splice, on either side.
pub async fn open_ready(link: &Link, request: Request) -> Result<StreamHandle, OpenError> {
    let stream = link.open(request).await.map_err(OpenError::Stream)?;
    match stream.recv_reply().await.map_err(OpenError::Stream)? {
        Response::Ready => Ok(stream),
        Response::Error { message } => Err(OpenError::Refused(message)),
        other => Err(OpenError::Unexpected(format!("{other:?}"))),
    }
}

/// How a splice ended early. The message is for a log; the stream has been
/// reset (or was reset by the peer) when this is returned.
#[derive(Debug, thiserror::Error)]
pub enum SpliceError {
    #[error("the peer reset the stream: {0}")]
    Reset(String),
    #[error("could not read the connection: {0}")]
    Read(std::io::Error),
    #[error("could not write to the connection: {0}")]
    Write(std::io::Error),
    #[error("the stream failed: {0}")]
    Stream(crate::proto::StreamError),
}

/// Copies bytes both ways between `stream` (whose reply is already settled)
/// and a connection given as its two halves, until both directions are done
/// or either fails. A failure resets the stream, so the far side drops its
/// end of the connection too.
pub async fn splice<R, W>(stream: &StreamHandle, reader: R, writer: W) -> Result<(), SpliceError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    splice_from(stream, copy_out(stream, reader), writer).await
}

/// [`splice`] with the connection-to-stream direction given as a future of
/// the caller's (one that ends with the stream's `Eof`, as [`splice`]'s
/// does): the daemon sends a forwarded socket's bytes staged, never reading
/// them into memory (`proto::splice`).
pub async fn splice_from<W>(
    stream: &StreamHandle,
    outbound: impl std::future::Future<Output = Result<(), SpliceError>>,
    mut writer: W,
) -> Result<(), SpliceError>
where
    W: AsyncWrite + Unpin,
{
    let inbound = async {
        while let Some(event) = stream.recv().await {
            match event {
                Event::Data(bytes) => writer.write_all(&bytes).await.map_err(SpliceError::Write)?,
                Event::Eof => {
                    // A peer that already closed its read side makes the
                    // shutdown fail; its own read error reports that.
                    let _ = writer.shutdown().await;
                    return Ok(());
                }
                Event::Reset(why) => return Err(SpliceError::Reset(why)),
                Event::Stderr(_) | Event::Exit(_) => {}
            }
        }
        Ok(())
    };
    tokio::pin!(outbound, inbound);
    let (mut out_done, mut in_done) = (false, false);
    let result = loop {
        tokio::select! {
            r = &mut outbound, if !out_done => match r {
                Ok(()) => out_done = true,
                Err(e) => break Err(e),
            },
            r = &mut inbound, if !in_done => match r {
                Ok(()) => in_done = true,
                Err(e) => break Err(e),
            },
        }
        if out_done && in_done {
            break Ok(());
        }
    };
    if let Err(e) = &result {
        if !matches!(e, SpliceError::Reset(_)) {
            let _ = stream.reset(&e.to_string()).await;
        }
    }
    result
}

/// The connection's bytes onto the stream, then its `Eof`.
async fn copy_out<R>(stream: &StreamHandle, mut reader: R) -> Result<(), SpliceError>
where
    R: AsyncRead + Unpin,
{
    loop {
        // Read into a buffer that becomes the frame's payload: no copy.
        let mut buf = Vec::with_capacity(MAX_DATA_CHUNK);
        let n = reader.read_buf(&mut buf).await.map_err(SpliceError::Read)?;
        if n == 0 {
            return stream.send_eof().await.map_err(SpliceError::Stream);
        }
        stream.send_data_vec(buf).await.map_err(SpliceError::Stream)?;
    }
}
