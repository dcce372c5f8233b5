//! The daemon's side of `proto::splice`: a forwarded connection's bytes go
//! from its socket into a staging pipe of the connection's own, and from
//! there into the exec's stdout pipe, which the link writes to, without
//! ever being copied into the daemon's memory (`splice(2)` both times).
//!
//! Only where the link's output is a pipe: a relay that handed its stdio
//! over (`relay.rs`). Anything else copies as before (`pipe::splice`).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::pipe::SpliceError;
use crate::proto::{Sent, SpliceOut, StreamError, StreamHandle};
use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::net::TcpStream;

/// What a staging pipe is asked to hold: one largest data frame
/// (`MAX_DATA_CHUNK`, 127 KiB) fits; the kernel rounds up to pages.
const STAGING_SIZE: usize = 128 * 1024;

/// A connection's staging pipe: the socket's bytes wait here for the link's
/// writer, which takes them all before the next are staged.
pub struct Staging {
    read: Arc<OwnedFd>,
    write: OwnedFd,
    capacity: usize,
}

impl Staging {
    pub fn new() -> io::Result<Staging> {
        let (read, write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        // The default 64 KiB is half a frame. Asking more is refused past
        // `/proc/sys/fs/pipe-max-size` (1 MiB by default) or a user's pipe
        // quota: then frames are as large as the pipe is.
        let capacity = rustix::pipe::fcntl_setpipe_size(&write, STAGING_SIZE)
            .or_else(|_| rustix::pipe::fcntl_getpipe_size(&write))?;
        Ok(Staging { read: Arc::new(read), write, capacity })
    }

    /// Sends `socket`'s bytes on `stream` until the socket's end, then the
    /// stream's `Eof`: the outbound half of a forward whose link splices.
    pub async fn send_socket(&self, stream: &StreamHandle, socket: &TcpStream) -> Result<(), SpliceError> {
        loop {
            let sent = stream
                .send_staged(&self.read, self.capacity, |max| {
                    // `try_io` clears the socket's readiness on `WouldBlock`,
                    // so `readable` below waits for new bytes.
                    socket.try_io(Interest::READABLE, || {
                        rustix::pipe::splice(socket, None, &self.write, None, max, SpliceFlags::NONBLOCK)
                            .map_err(io::Error::from)
                    })
                })
                .await;
            match sent {
                Ok(Sent::Bytes(_)) => {}
                Ok(Sent::End) => return stream.send_eof().await.map_err(SpliceError::Stream),
                Ok(Sent::Nothing) => socket.readable().await.map_err(SpliceError::Read)?,
                Err(StreamError::Source(e)) => return Err(SpliceError::Read(e)),
                Err(e) => return Err(SpliceError::Stream(e)),
            }
        }
    }
}

/// The exec's stdout pipe, as the link's writer splices staged bytes into
/// it (a second descriptor of the pipe the writer writes frames to).
pub struct PipeOut {
    fd: AsyncFd<OwnedFd>,
}

impl PipeOut {
    /// `pipe` is the write end the link writes to; it is non-blocking
    /// already (tokio's pipe sender made it so), which a duplicate shares.
    pub fn new(pipe: BorrowedFd<'_>) -> io::Result<PipeOut> {
        let dup = pipe.try_clone_to_owned()?;
        // SAFETY: `dup` is a descriptor of our own, owned by the `AsyncFd`
        // and closed only when it drops (tokio's I/O-safety rule).
        Ok(PipeOut { fd: unsafe { AsyncFd::register_with_interest(dup, Interest::WRITABLE) }? })
    }
}

impl SpliceOut for PipeOut {
    fn poll_splice(&mut self, cx: &mut Context<'_>, from: BorrowedFd<'_>, len: usize) -> Poll<io::Result<usize>> {
        loop {
            let mut ready = std::task::ready!(self.fd.poll_write_ready(cx))?;
            // The staging pipe holds at least `len` bytes, so `WouldBlock`
            // can only mean the output is full.
            match ready.try_io(|out| {
                rustix::pipe::splice(from, None, out.get_ref().as_fd(), None, len, SpliceFlags::NONBLOCK)
                    .map_err(io::Error::from)
            }) {
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }
}
