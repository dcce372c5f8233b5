//! The sending side of `proto::splice`: a forwarded connection's bytes go
//! from its socket into a staging pipe of the connection's own, and from
//! there into what the link writes to (in the daemon the exec's stdout
//! pipe, on the host the exec's connection to the engine), without ever
//! being copied into our memory (`splice(2)` both times).
//!
//! Only where the link's output is a descriptor to splice into: a relay
//! that handed its stdio over (`relay.rs`), and on the host the socket of
//! an exec's connection to a local engine (`engine/hijack.rs`). Anything
//! else copies as before (`pipe::splice`).
//!
//! The daemon's writes to its pipe, spliced or not, pause once it is full
//! ([`Pacer`]).

use std::future::Future;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::pipe::SpliceError;
use crate::proto::{Sent, SpliceOut, StreamError, StreamHandle};
use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncWrite, Interest};
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

/// How long a writer that found the exec's pipe full waits before writing
/// again. A pipe wakes its writer as soon as its reader frees one page, and
/// containerd's shim reads an exec's stdout 4 KiB at a time: without the
/// pause the daemon woke and wrote for every 4-16 KiB the shim took (57,000
/// splices and as many wake-ups per GiB through a forwarded port). In a
/// millisecond the shim drains a few hundred KiB of the 1 MiB pipe
/// (`relay::PIPE_SIZE`), so it never runs dry, and the next write moves that
/// much at once. Measured on 1 GiB pulls in turns (docs/performance.md):
/// 4.22 against 4.88 CPU seconds for the whole machine. Nothing waits
/// longer for it than for the full pipe ahead of it.
const PIPE_FULL_PAUSE: Duration = Duration::from_millis(1);

/// A pause after the exec's pipe was found full (see [`PIPE_FULL_PAUSE`]).
/// One pause per time the pipe fills: a pipe still full after it (a host
/// that stopped reading) is waited on as before, not polled every
/// millisecond.
#[derive(Default)]
struct Pacer {
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
    /// A pause ran since the last write that moved bytes.
    paused: bool,
}

impl Pacer {
    /// Ready when no pause is running.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(pause) = self.pause.as_mut() {
            std::task::ready!(pause.as_mut().poll(cx));
            self.pause = None;
        }
        Poll::Ready(())
    }

    /// A write moved `moved` of `wanted` bytes: short means the pipe is full
    /// now, so the next write waits for the pause.
    fn wrote(&mut self, moved: usize, wanted: usize) {
        self.paused = false;
        if moved < wanted {
            self.pause = Some(Box::pin(tokio::time::sleep(PIPE_FULL_PAUSE)));
            self.paused = true;
        }
    }

    /// Notes what a write (or splice) of `wanted` bytes did.
    fn account(&mut self, cx: &mut Context<'_>, result: &Poll<io::Result<usize>>, wanted: usize) {
        match result {
            Poll::Ready(Ok(moved)) => self.wrote(*moved, wanted),
            Poll::Pending => self.blocked(cx),
            Poll::Ready(Err(_)) => {}
        }
    }

    /// A write found the pipe full and moved nothing; the caller returns
    /// `Pending`. The first time, a pause wakes it; after a pause, the
    /// pipe's readiness does (the write registered for it).
    fn blocked(&mut self, cx: &mut Context<'_>) {
        if !self.paused {
            let mut pause = Box::pin(tokio::time::sleep(PIPE_FULL_PAUSE));
            let _ = pause.as_mut().poll(cx);
            self.pause = Some(pause);
            self.paused = true;
        }
    }
}

/// The exec's stdout pipe as the link's writer writes frames to it, pausing
/// once it is full.
pub struct PacedPipe<W> {
    pipe: W,
    pacer: Pacer,
}

impl<W> PacedPipe<W> {
    pub fn new(pipe: W) -> PacedPipe<W> {
        PacedPipe { pipe, pacer: Pacer::default() }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for PacedPipe<W> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        std::task::ready!(this.pacer.poll_ready(cx));
        let written = Pin::new(&mut this.pipe).poll_write(cx, buf);
        this.pacer.account(cx, &written, buf.len());
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        std::task::ready!(this.pacer.poll_ready(cx));
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        let written = Pin::new(&mut this.pipe).poll_write_vectored(cx, bufs);
        this.pacer.account(cx, &written, len);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.pipe.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.pipe).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.pipe).poll_shutdown(cx)
    }
}

/// Where the link's writer splices staged bytes: a second descriptor of
/// what it writes frames to. In the daemon, the exec's stdout pipe, whose
/// writes pause once it is full ([`Pacer`]); on the host, the socket of the
/// exec's hijacked connection to the engine, which wakes its writer only
/// once half its buffer is free, so it needs no pause.
pub struct FdOut {
    fd: AsyncFd<OwnedFd>,
    pacer: Option<Pacer>,
}

impl FdOut {
    /// The exec's stdout pipe. `pipe` is the write end the link writes to;
    /// it is non-blocking already (tokio's pipe sender made it so), which a
    /// duplicate shares.
    pub fn pipe(pipe: BorrowedFd<'_>) -> io::Result<FdOut> {
        FdOut::new(pipe.try_clone_to_owned()?, Some(Pacer::default()))
    }

    /// A socket the link writes to, as a descriptor of its own (a
    /// duplicate), non-blocking as the one the link writes through is.
    pub fn socket(socket: OwnedFd) -> io::Result<FdOut> {
        FdOut::new(socket, None)
    }

    fn new(fd: OwnedFd, pacer: Option<Pacer>) -> io::Result<FdOut> {
        // SAFETY: `fd` is a descriptor of our own, owned by the `AsyncFd`
        // and closed only when it drops (tokio's I/O-safety rule).
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::WRITABLE) }?;
        Ok(FdOut { fd, pacer })
    }
}

impl SpliceOut for FdOut {
    fn poll_splice(&mut self, cx: &mut Context<'_>, from: BorrowedFd<'_>, len: usize) -> Poll<io::Result<usize>> {
        if let Some(pacer) = self.pacer.as_mut() {
            std::task::ready!(pacer.poll_ready(cx));
        }
        loop {
            let mut ready = match self.fd.poll_write_ready(cx) {
                Poll::Ready(ready) => ready?,
                Poll::Pending => {
                    if let Some(pacer) = self.pacer.as_mut() {
                        pacer.blocked(cx);
                    }
                    return Poll::Pending;
                }
            };
            // The staging pipe holds at least `len` bytes, so `WouldBlock`
            // can only mean the output is full.
            match ready.try_io(|out| {
                rustix::pipe::splice(from, None, out.get_ref().as_fd(), None, len, SpliceFlags::NONBLOCK)
                    .map_err(io::Error::from)
            }) {
                Ok(moved) => {
                    if let (Ok(n), Some(pacer)) = (&moved, self.pacer.as_mut()) {
                        pacer.wrote(*n, len);
                    }
                    return Poll::Ready(moved);
                }
                // Readiness is cleared; polling it again registers for the
                // output's next room.
                Err(_would_block) => continue,
            }
        }
    }
}

/// Carries a forwarded connection both ways on `handle` (whose reply is
/// settled): where the link splices, the socket's bytes are staged, never
/// read into memory; elsewhere they are copied (`pipe::splice`). The
/// daemon's side and the host's forwarder both carry their sockets so.
pub async fn carry(handle: &StreamHandle, socket: TcpStream) -> Result<(), SpliceError> {
    // A pipe refused (out of descriptors, a pipe quota): copy instead.
    let staging = if handle.can_splice() { Staging::new().ok() } else { None };
    let (reader, writer) = socket.into_split();
    match &staging {
        Some(staging) => crate::pipe::splice_from(handle, staging.send_socket(handle, reader.as_ref()), writer).await,
        None => crate::pipe::splice(handle, reader, writer).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_full_pipe_pauses_the_writer_once_then_its_room_wakes_it() {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut pacer = Pacer::default();
        assert!(pacer.poll_ready(&mut cx).is_ready(), "no pause before the pipe was ever full");
        pacer.wrote(4096, 65536);
        assert!(pacer.poll_ready(&mut cx).is_pending(), "a short write pauses the next one");
        tokio::time::advance(PIPE_FULL_PAUSE).await;
        assert!(pacer.poll_ready(&mut cx).is_ready());
        pacer.blocked(&mut cx);
        assert!(
            pacer.poll_ready(&mut cx).is_ready(),
            "still full after the pause: no second pause, the pipe's readiness wakes the writer"
        );
        pacer.wrote(65536, 65536);
        pacer.blocked(&mut cx);
        assert!(pacer.poll_ready(&mut cx).is_pending(), "full again after progress: a pause again");
    }
}
