//! Data frames whose payload never enters our memory: the sender stages the
//! bytes in a pipe of its own (`splice(2)` from a socket or a pipe), and the
//! link's writer, after the frame's header, moves them from that pipe into
//! the link's output, which is then a pipe too (the daemon's end of `docker
//! exec`). The kernel hands page references from pipe to pipe; nobody copies.
//!
//! Why a staging pipe rather than a splice straight from the socket: the
//! header names the payload's length, so once it is written that many bytes
//! must follow, whatever the socket does. Bytes already staged cannot go
//! missing, and whatever fails before staging (the socket's end, an error)
//! fails before the header, where nothing is promised yet.
//!
//! Measured (docs/performance.md, "Relay and forwards"): on a 1 GiB
//! download through a forwarded port, two thirds of the daemon's CPU was
//! the kernel copying the socket's bytes to us and our copies after it.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use super::frame::{Frame, HEADER_LEN};

/// A link output that can take bytes straight from a pipe (a pipe itself).
/// Given to [`Link::handshake_spliced`](super::Link::handshake_spliced); the
/// same pipe as the link's writer, so the writer flushes before it splices.
pub trait SpliceOut: Send {
    /// Moves up to `len` bytes from the pipe `from` into the output and
    /// returns how many; `Pending` while the output is full.
    fn poll_splice(&mut self, cx: &mut Context<'_>, from: BorrowedFd<'_>, len: usize) -> Poll<io::Result<usize>>;
}

/// A data frame waiting for the writer: its header, and where its `len`
/// bytes wait (the read end of the sender's staging pipe).
pub(super) struct Staged {
    pub(super) header: [u8; HEADER_LEN],
    pub(super) from: Arc<OwnedFd>,
    pub(super) len: usize,
    /// Told when the bytes are in the output (or the link failed), so the
    /// sender stages no more until its pipe is empty again.
    pub(super) done: oneshot::Sender<()>,
}

/// What the link's writer is given to write.
pub(super) enum Outgoing {
    Frame(Frame),
    Staged(Staged),
}

impl From<Frame> for Outgoing {
    fn from(frame: Frame) -> Outgoing {
        Outgoing::Frame(frame)
    }
}

/// What [`StreamHandle::send_staged`](super::StreamHandle::send_staged) did.
#[derive(Debug, PartialEq, Eq)]
pub enum Sent {
    /// This many bytes went out as one frame.
    Bytes(usize),
    /// The source is at its end: nothing was sent (send `Eof` next).
    End,
    /// The source had nothing to give: wait until it is readable.
    Nothing,
}
