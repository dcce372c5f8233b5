//! One multiplexed stream: the [`StreamHandle`] applications hold, and the
//! per-stream state the link's reader task feeds.
//!
//! # Flow control
//!
//! Each direction of a stream has a credit window of bytes of `Data` and
//! `Stderr` together, [`INITIAL_WINDOW`] at first. A sender spends credit as
//! it queues bytes and waits when it has none; the receiver returns credit
//! with `Window` frames as the application takes bytes out with
//! [`StreamHandle::recv`], in batches of a quarter window. So the bytes a
//! stream buffers never exceed its window, however slow its reader, and the
//! link's reader task never has to wait for one stream to drain before it
//! can deliver frames for another (no head-of-line blocking).
//!
//! A grant may return more than the application took: the receiver widens
//! the window of a stream it is draining, doubling it up to [`MAX_WINDOW`],
//! with bytes from the link's [`MAX_LINK_GROWTH`], which the stream gives
//! back when it is gone. A bulk transfer so reaches the window the path
//! needs in a few grants, while a stream nobody reads holds only its
//! initial window: the link's buffers stay under
//! [`MAX_LINK_BUFFER`](super::MAX_LINK_BUFFER) whatever the peer does. With a peer whose
//! hello names no window (workroom before this), windows are
//! [`FIXED_WINDOW`] and never grow, as that peer expects.
//!
//! Batched grants cannot deadlock: a sender out of credit means the receiver
//! holds a whole window unacknowledged; either the application has not read
//! it (then it is the application's choice to stall this stream) or it has
//! read at least a threshold's worth, which triggers a grant.
//!
//! # Ending
//!
//! A stream is over when both directions are finished (each side sent `Eof`,
//! or the reply ended the exchange, see [`Response::ends_stream`]) or when
//! either side resets it. Dropping the last clone of a handle before that
//! resets the stream, so a host that goes away stops the daemon's work.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;

use serde::Serialize;
use thiserror::Error;
use tokio::sync::mpsc::Permit;
use tokio::sync::{mpsc, oneshot, Notify};

use super::frame::{header, reason_frame, Frame, FrameError, Kind};
use super::message::{ExitStatus, Hello, Reason, Response, Role};
use super::splice::{Outgoing, Sent, Staged};
#[cfg(doc)]
use super::INITIAL_WINDOW;
use super::{FIXED_WINDOW, MAX_DATA_CHUNK, MAX_LINK_GROWTH, MAX_STREAMS, MAX_WINDOW};

/// Data frames are queued as they arrive, but a chunk smaller than this is
/// appended to the previous one instead. That bounds the number of chunks per
/// stream (window / 16 KiB + 1) even when the peer sends one byte per frame,
/// while large frames are handed to the application without a copy.
const COALESCE_BELOW: usize = 16 * 1024;

/// What arrives on a stream, in order. `Eof` and `Reset` are last; after them
/// [`StreamHandle::recv`] returns `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Stdout (daemon to host) or stdin/upload bytes (host to daemon).
    Data(Vec<u8>),
    Stderr(Vec<u8>),
    /// The process ended. More output may follow until `Eof` (a background
    /// child can hold the pipes open).
    Exit(ExitStatus),
    /// The peer will send nothing more on this stream.
    Eof,
    /// The stream was aborted: by the peer, or because the link closed.
    Reset(String),
}

#[derive(Debug, Error)]
pub enum StreamError {
    #[error("the {peer} reset the stream: {message}")]
    Reset { peer: Role, message: String },
    #[error("link closed: {0}")]
    LinkClosed(String),
    #[error("this side reset the stream")]
    LocallyReset,
    #[error("the stream is closed for sending")]
    Closed,
    /// The caller broke a rule of the API (replying twice, sending before
    /// replying, ...): a bug in the program, not in the peer.
    #[error("{0}")]
    Misuse(&'static str),
    #[error("the message does not fit in a frame")]
    TooLarge(#[source] FrameError),
    #[error("could not encode the message")]
    Encode(#[source] serde_json::Error),
    #[error("{MAX_STREAMS} streams are already open on this link")]
    TooManyStreams,
    #[error("this link has used up its stream ids; reconnect")]
    IdsExhausted,
    /// What a staged send was to read failed (its own error, as it gave it).
    #[error("could not read the source")]
    Source(#[source] std::io::Error),
}

/// A frame the peer should never have sent: a bug on its side (both ends are
/// our code), after which the link closes, since framing in doubt cannot be
/// trusted with the next frame.
#[derive(Debug, Error)]
pub enum Violation {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("a second hello")]
    SecondHello,
    #[error("{kind} frame on stream 0")]
    StreamZero { kind: Kind },
    #[error("stream id {stream} is not the {peer}'s to open")]
    NotItsId { stream: u32, peer: Role },
    #[error("stream id {stream} opened twice")]
    OpenedTwice { stream: u32 },
    #[error("a reply on stream {stream}, which it opened itself")]
    ReplyToItself { stream: u32 },
    #[error("unreadable {what} on stream {stream}")]
    Unreadable {
        what: &'static str,
        stream: u32,
        #[source]
        source: serde_json::Error,
    },
    #[error("a second {what} on stream {stream}")]
    Twice { what: &'static str, stream: u32 },
    #[error("{what} after eof on stream {stream}")]
    AfterEof { what: &'static str, stream: u32 },
    #[error("a {length}-byte window frame on stream {stream}")]
    WindowLength { length: usize, stream: u32 },
    #[error("credit beyond the window on stream {stream}")]
    CreditBeyondWindow { stream: u32 },
    #[error("{bytes} bytes beyond the window on stream {stream}")]
    BeyondWindow { bytes: usize, stream: u32 },
}

/// The windows of one link's streams, settled by the two hellos.
#[derive(Clone)]
pub(super) struct Windows {
    /// The credit a new stream starts with for sending: the peer's window.
    send_initial: usize,
    /// The most credit the peer may give one stream.
    send_max: usize,
    /// The window a new stream starts with for receiving: ours.
    receive_initial: usize,
    /// Bytes lent to this link's streams beyond `receive_initial`, at most
    /// [`MAX_LINK_GROWTH`]; `None` when windows do not grow.
    growth: Option<Arc<AtomicUsize>>,
}

impl Windows {
    /// Windows grow when both sides name theirs; otherwise (a peer of
    /// before, or a test playing one) both keep [`FIXED_WINDOW`].
    pub(super) fn settle(ours: &Hello, peer: &Hello) -> Windows {
        match (ours.window, peer.window) {
            (Some(ours), Some(theirs)) => Windows {
                send_initial: (theirs as usize).min(MAX_WINDOW),
                send_max: MAX_WINDOW,
                receive_initial: (ours as usize).min(MAX_WINDOW),
                growth: Some(Arc::new(AtomicUsize::new(0))),
            },
            _ => Windows {
                send_initial: FIXED_WINDOW,
                send_max: FIXED_WINDOW,
                receive_initial: FIXED_WINDOW,
                growth: None,
            },
        }
    }
}

/// One end of a stream. Cheap to clone: clones share the stream, so a daemon
/// can feed stdout, stderr and stdin from separate tasks. All methods take
/// `&self`; sending and receiving may run concurrently.
///
/// Dropping the last clone before the stream is over resets it.
#[derive(Clone)]
pub struct StreamHandle {
    guard: Arc<Guard>,
}

/// What a stream's handle needs of the link that carries it. The link
/// implements it, so this module knows nothing of the link's tasks and
/// tables, and the two do not import each other.
pub(super) trait Carrier: Send + Sync {
    /// The bounded queue to the link's writer; reserving a place in it is
    /// how a sender waits for the pipe.
    fn queue(&self) -> &mpsc::Sender<Outgoing>;
    /// The link's writer can move staged bytes into its output.
    fn splices(&self) -> bool;
    /// Queues a frame without waiting, for drops, which cannot await.
    fn send_soon(&self, frame: Frame);
    /// The stream has credit to return to the peer.
    fn queue_grant(&self, stream: Arc<Stream>);
    /// The stream's last handle is gone; frames for it are ignored from now.
    fn forget(&self, id: u32);
    /// Why the link closed, for a call that found it closed.
    fn close_reason(&self) -> String;
    /// Closes the link (the first reason wins); `graceful` lets the writer
    /// finish what is queued.
    fn close(&self, reason: String, graceful: bool);
}

/// Held by every `Link` clone and stream handle; when the last one drops,
/// the link closes (gracefully: queued frames are still written).
pub(super) struct Keepalive {
    link: Arc<dyn Carrier>,
}

impl Keepalive {
    pub(super) fn new(link: Arc<dyn Carrier>) -> Keepalive {
        Keepalive { link }
    }
}

impl Drop for Keepalive {
    fn drop(&mut self) {
        self.link.close("this side closed the link".to_owned(), true);
    }
}

/// Owns the stream's place in the link; its drop is the handle's drop.
struct Guard {
    stream: Arc<Stream>,
    link: Arc<dyn Carrier>,
    /// Keeps the link's tasks alive while a handle exists (see `Keepalive`).
    /// Declared last so it drops after `Guard::drop` has queued its reset.
    _keepalive: Arc<Keepalive>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.link.forget(self.stream.id);
        if let Some(message) = self.stream.abandon() {
            self.link.send_soon(reason_frame(Kind::Reset, self.stream.id, message));
        }
    }
}

impl StreamHandle {
    pub(super) fn new(stream: Arc<Stream>, link: Arc<dyn Carrier>, keepalive: Arc<Keepalive>) -> StreamHandle {
        StreamHandle { guard: Arc::new(Guard { stream, link, _keepalive: keepalive }) }
    }

    /// The stream id: odd when the host opened it, even for the daemon.
    pub fn id(&self) -> u32 {
        self.stream().id
    }

    /// Answers the request this stream was accepted with. Exactly once, and
    /// before any other frame: the opener learns first whether its request
    /// was taken. A reply that [ends the stream](Response::ends_stream)
    /// finishes it in both directions.
    pub async fn reply(&self, response: Response) -> Result<(), StreamError> {
        let frame = json_frame(Kind::Reply, self.id(), &response)?;
        let stream = self.stream();
        if stream.opener {
            return Err(StreamError::Misuse("only the side that accepted a stream replies"));
        }
        self.send_with(move |state| {
            if state.replied {
                return Err(StreamError::Misuse("the stream already has its reply"));
            }
            state.check_abort(stream.peer)?;
            state.replied = true;
            if response.ends_stream(state.streaming) {
                state.finish_exchange();
            }
            Ok(Some(frame))
        })
        .await
    }

    /// The peer's answer to the request this side opened the stream with.
    /// `Data` that arrives first is kept for [`recv`](Self::recv).
    pub async fn recv_reply(&self) -> Result<Response, StreamError> {
        let stream = self.stream();
        if !stream.opener {
            return Err(StreamError::Misuse("only the side that opened a stream receives a reply"));
        }
        loop {
            let notified = stream.readable.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = stream.lock();
                if let Some(reply) = state.reply.take() {
                    state.reply_taken = true;
                    return Ok(reply);
                }
                if state.reply_taken {
                    return Err(StreamError::Misuse("the reply was already received"));
                }
                state.check_abort(stream.peer)?;
            }
            notified.await;
        }
    }

    /// Sends bytes as `Data`, in chunks, waiting for credit as needed.
    /// Returns once every byte is queued on the link. Like `write_all`, a
    /// cancelled call may have sent a prefix.
    pub async fn send_data(&self, bytes: &[u8]) -> Result<(), StreamError> {
        self.send_bytes(Kind::Data, bytes).await
    }

    /// Whether this stream's link can carry [staged](Self::send_staged)
    /// frames: its output is a pipe the writer splices into.
    pub fn can_splice(&self) -> bool {
        self.guard.link.splices()
    }

    /// Sends one `Data` frame whose bytes never enter this process (see
    /// `splice`): `stage(max)` moves at most `max` bytes from the source
    /// into the staging pipe whose read end is `staged` (a non-blocking
    /// `splice(2)`) and says how many, 0 at the source's end; the link's
    /// writer moves them on into its output after the frame's header.
    /// `capacity` is what the staging pipe holds. Waits for credit first,
    /// and returns once the staging pipe is empty again, so the next call
    /// may fill it. A `WouldBlock` from `stage` is [`Sent::Nothing`]: wait
    /// until the source is readable and call again.
    pub async fn send_staged(
        &self,
        staged: &Arc<OwnedFd>,
        capacity: usize,
        stage: impl FnOnce(usize) -> std::io::Result<usize>,
    ) -> Result<Sent, StreamError> {
        let stream = self.stream();
        stream.lock().check_send(stream)?;
        if !self.guard.link.splices() {
            return Err(StreamError::Misuse("this link's output cannot take staged bytes"));
        }
        if capacity == 0 {
            return Err(StreamError::Misuse("a staging pipe that holds nothing"));
        }
        // From the credit to the send nothing awaits. The credit is taken
        // before the source is read and what was not used is given back, so
        // another sender on this stream can never spend it twice.
        let (permit, max) = self.take_credit(capacity).await?;
        let staged_now = stage(max);
        let used = *staged_now.as_ref().unwrap_or(&0);
        stream.lock().send_credit += max - used.min(max);
        let n = match staged_now {
            Ok(0) => return Ok(Sent::End),
            Ok(n) if n <= max => n,
            Ok(_) => return Err(StreamError::Misuse("staged more bytes than it was allowed")),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(Sent::Nothing),
            Err(e) => return Err(StreamError::Source(e)),
        };
        let (done, sent) = oneshot::channel();
        permit.send(Outgoing::Staged(Staged {
            header: header(Kind::Data, stream.id, n),
            from: staged.clone(),
            len: n,
            done,
        }));
        sent.await.map_err(|_| self.link_closed())?;
        Ok(Sent::Bytes(n))
    }

    /// [`send_data`](Self::send_data) for bytes the caller is done with: a
    /// chunk that fits in one frame and the credit at hand becomes the
    /// frame's payload as it is, without a copy (a forward's socket reads).
    pub async fn send_data_vec(&self, bytes: Vec<u8>) -> Result<(), StreamError> {
        let mut rest = bytes;
        self.send_chunks(Kind::Data, rest.len(), |n| {
            let after = if n < rest.len() { rest.split_off(n) } else { Vec::new() };
            std::mem::replace(&mut rest, after)
        })
        .await
    }

    /// [`send_data`](Self::send_data) for stderr bytes.
    pub async fn send_stderr(&self, bytes: &[u8]) -> Result<(), StreamError> {
        self.send_bytes(Kind::Stderr, bytes).await
    }

    /// This side will send no more `Data`, `Stderr` or `Exit` (a half-close:
    /// receiving goes on). Sending `Eof` again, or after the reply ended the
    /// stream, does nothing.
    pub async fn send_eof(&self) -> Result<(), StreamError> {
        let stream = self.stream();
        self.send_with(|state| {
            state.check_abort(stream.peer)?;
            if state.out_done {
                return Ok(None);
            }
            state.check_send(stream)?;
            state.out_done = true;
            Ok(Some(empty_frame(Kind::Eof, stream.id)))
        })
        .await
    }

    /// Reports how the stream's process ended; at most once, before `Eof`.
    pub async fn send_exit(&self, status: ExitStatus) -> Result<(), StreamError> {
        let frame = json_frame(Kind::Exit, self.id(), &status)?;
        let stream = self.stream();
        self.send_with(|state| {
            state.check_send(stream)?;
            if state.exit_sent {
                return Err(StreamError::Misuse("the exit status was already sent"));
            }
            state.exit_sent = true;
            Ok(Some(frame))
        })
        .await
    }

    /// Aborts the stream in both directions, telling the peer why. Buffered
    /// incoming bytes are dropped; `recv` returns `None` from now on. Does
    /// nothing on a stream that is already over.
    pub async fn reset(&self, message: &str) -> Result<(), StreamError> {
        let stream = self.stream();
        if stream.lock().is_over() {
            return Ok(());
        }
        let frame = reason_frame(Kind::Reset, stream.id, message.to_owned());
        self.send_with(|state| {
            if state.is_over() {
                return Ok(None);
            }
            state.abort = Some(Abort::Local);
            state.clear_inbound();
            Ok(Some(frame))
        })
        .await
    }

    /// The next event, or `None` once the stream is over for receiving.
    /// Taking bytes out returns credit to the sender. Cancel-safe.
    pub async fn recv(&self) -> Option<Event> {
        let stream = self.stream();
        loop {
            let notified = stream.readable.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (next, grant) = stream.lock().next_event(stream.peer);
            if grant {
                self.guard.link.queue_grant(stream.clone());
            }
            match next {
                Poll::Ready(event) => return event,
                Poll::Pending => notified.await,
            }
        }
    }

    /// Bytes received on this stream and not yet taken by `recv`; never more
    /// than [`receive_window`](Self::receive_window). For tests and
    /// diagnostics.
    pub fn buffered(&self) -> usize {
        self.stream().lock().buffered
    }

    /// The window this side gives the peer on this stream now: what it may
    /// have in flight and buffered here. For tests and diagnostics.
    pub fn receive_window(&self) -> usize {
        self.stream().lock().window
    }

    fn stream(&self) -> &Arc<Stream> {
        &self.guard.stream
    }

    fn link_closed(&self) -> StreamError {
        StreamError::LinkClosed(self.guard.link.close_reason())
    }

    /// Reserves room on the link, then lets `decide` update the state and
    /// name the frame to send, all without an await between the decision and
    /// the send: cancelling the call can never leave the state claiming a
    /// frame that was not queued.
    async fn send_with(
        &self,
        decide: impl FnOnce(&mut State) -> Result<Option<Frame>, StreamError>,
    ) -> Result<(), StreamError> {
        let permit = self.guard.link.queue().reserve().await.map_err(|_| self.link_closed())?;
        let frame = decide(&mut self.stream().lock())?;
        if let Some(frame) = frame {
            permit.send(frame.into());
        }
        // The state may have ended a direction: wake whoever waits on it.
        self.stream().wake_all();
        Ok(())
    }

    async fn send_bytes(&self, kind: Kind, bytes: &[u8]) -> Result<(), StreamError> {
        let mut rest = bytes;
        self.send_chunks(kind, bytes.len(), |n| {
            let (chunk, after) = rest.split_at(n);
            rest = after;
            chunk.to_vec()
        })
        .await
    }

    /// Sends `len` bytes in frames as credit allows; `take(n)` gives the next
    /// `n` of them as a frame's payload.
    async fn send_chunks(
        &self,
        kind: Kind,
        mut len: usize,
        mut take: impl FnMut(usize) -> Vec<u8>,
    ) -> Result<(), StreamError> {
        let stream = self.stream();
        stream.lock().check_send(stream)?;
        while len > 0 {
            let (permit, n) = self.take_credit(len).await?;
            let frame = Frame::new(kind, stream.id, take(n)).expect("a data chunk is under the frame cap");
            permit.send(frame.into());
            len -= n;
        }
        Ok(())
    }

    /// Waits for credit and a place in the link's queue, then takes up to
    /// `most` bytes of the credit (and at most one chunk's): never 0.
    async fn take_credit(&self, most: usize) -> Result<(Permit<'_, Outgoing>, usize), StreamError> {
        let stream = self.stream();
        loop {
            self.wait_for_credit().await?;
            let permit = self.guard.link.queue().reserve().await.map_err(|_| self.link_closed())?;
            let mut state = stream.lock();
            state.check_send(stream)?;
            let n = state.send_credit.min(most).min(MAX_DATA_CHUNK);
            if n > 0 {
                state.send_credit -= n;
                return Ok((permit, n));
            }
            // Another task of this stream spent the credit meanwhile.
        }
    }

    async fn wait_for_credit(&self) -> Result<(), StreamError> {
        let stream = self.stream();
        loop {
            let notified = stream.writable.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let state = stream.lock();
                state.check_send(stream)?;
                if state.send_credit > 0 {
                    return Ok(());
                }
            }
            notified.await;
        }
    }
}

/// The state of one stream, shared by its handle clones and the link.
pub(super) struct Stream {
    pub(super) id: u32,
    /// This side sent the `Open`.
    opener: bool,
    /// The other side's role, for messages.
    peer: Role,
    state: Mutex<State>,
    /// The link's pool that widened windows are lent from (see [`Windows`]).
    growth: Option<Arc<AtomicUsize>>,
    /// The most credit the peer may give this stream.
    send_max: usize,
    /// Something for `recv`/`recv_reply` arrived, or the stream ended.
    readable: Notify,
    /// Credit arrived, or the stream ended.
    writable: Notify,
}

/// Why a stream was aborted.
enum Abort {
    /// This side reset it (or dropped its handle).
    Local,
    /// The peer sent `Reset`.
    Peer(String),
    /// The link closed.
    Link(String),
}

#[derive(Default)]
struct State {
    /// From the request: bytes flow after the reply.
    streaming: bool,
    /// The reply was sent (acceptor) or received (opener).
    replied: bool,
    /// The opener's received reply, until `recv_reply` takes it.
    reply: Option<Response>,
    reply_taken: bool,
    /// This side sends nothing more but credit.
    out_done: bool,
    exit_sent: bool,
    /// Nothing more is expected from the peer (its `Eof`, or the reply ended
    /// the exchange). Bytes arriving anyway (pipelined before our error
    /// reply reached the peer) are dropped.
    in_done: bool,
    /// The peer sent `Eof`: a clean end, whose buffered events are delivered
    /// even if the stream is reset or the link closes afterwards.
    eof_received: bool,
    abort: Option<Abort>,
    abort_reported: bool,
    /// Bytes this side may still send.
    send_credit: usize,
    /// Bytes the peer may still send (what we granted minus what came).
    peer_credit: usize,
    /// Bytes taken by the application and not yet granted back.
    unacked: usize,
    /// The receive window: `peer_credit + buffered + unacked`.
    window: usize,
    /// What of `window` is lent from the link's growth pool.
    lent: usize,
    /// A grant for this stream waits for the writer task.
    grant_queued: bool,
    stdout: Chunks,
    stderr: Chunks,
    /// Bytes in `stdout` and `stderr`.
    buffered: usize,
    /// Alternate between the two queues so neither starves the other.
    stderr_next: bool,
    exit: Option<ExitStatus>,
    exit_reported: bool,
    eof_reported: bool,
}

impl Stream {
    pub(super) fn new(id: u32, opener: bool, peer: Role, streaming: bool, windows: &Windows) -> Stream {
        let state = State {
            streaming,
            // A request that does not stream carries no bytes from the
            // opener: only the reply is left.
            out_done: opener && !streaming,
            in_done: !opener && !streaming,
            send_credit: windows.send_initial,
            peer_credit: windows.receive_initial,
            window: windows.receive_initial,
            ..State::default()
        };
        Stream {
            id,
            opener,
            peer,
            state: Mutex::new(state),
            growth: windows.growth.clone(),
            send_max: windows.send_max,
            readable: Notify::new(),
            writable: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        crate::locks::lock(&self.state)
    }

    fn wake_all(&self) {
        self.readable.notify_waiters();
        self.writable.notify_waiters();
    }

    /// Applies a frame the peer sent on this stream. An error is a protocol
    /// violation (the link closes with it).
    pub(super) fn on_frame(&self, kind: Kind, payload: Vec<u8>) -> Result<(), Violation> {
        let id = self.id;
        let result = match kind {
            Kind::Reply => self.on_reply(&payload),
            Kind::Data | Kind::Stderr => self.lock().on_bytes(id, kind, payload),
            Kind::Eof => self.lock().on_eof(id),
            Kind::Exit => self.on_exit(&payload),
            Kind::Window => self.on_window(&payload),
            Kind::Reset => self.on_reset(&payload),
            Kind::Hello | Kind::Refuse | Kind::Open => {
                unreachable!("the link handles {kind} frames itself")
            }
        };
        self.wake_all();
        result
    }

    fn on_reply(&self, payload: &[u8]) -> Result<(), Violation> {
        let stream = self.id;
        if !self.opener {
            return Err(Violation::ReplyToItself { stream });
        }
        let response: Response = serde_json::from_slice(payload).map_err(|source| Violation::Unreadable {
            what: "reply",
            stream,
            source,
        })?;
        let mut state = self.lock();
        if state.replied {
            return Err(Violation::Twice { what: "reply", stream });
        }
        state.replied = true;
        if response.ends_stream(state.streaming) {
            state.finish_exchange();
        }
        state.reply = Some(response);
        Ok(())
    }

    fn on_exit(&self, payload: &[u8]) -> Result<(), Violation> {
        let stream = self.id;
        let status: ExitStatus = serde_json::from_slice(payload).map_err(|source| Violation::Unreadable {
            what: "exit status",
            stream,
            source,
        })?;
        let mut state = self.lock();
        if state.eof_received {
            return Err(Violation::AfterEof { what: "an exit status", stream });
        }
        if state.exit.is_some() {
            return Err(Violation::Twice { what: "exit status", stream });
        }
        state.exit = Some(status);
        Ok(())
    }

    fn on_window(&self, payload: &[u8]) -> Result<(), Violation> {
        let stream = self.id;
        let bytes: [u8; 4] =
            payload.try_into().map_err(|_| Violation::WindowLength { length: payload.len(), stream })?;
        let mut state = self.lock();
        state.send_credit += u32::from_be_bytes(bytes) as usize;
        if state.send_credit > self.send_max {
            // An honest receiver returns what it received and widens up to
            // the widest window only: the peer's accounting is broken.
            return Err(Violation::CreditBeyondWindow { stream });
        }
        Ok(())
    }

    fn on_reset(&self, payload: &[u8]) -> Result<(), Violation> {
        let reason: Reason = serde_json::from_slice(payload).map_err(|source| Violation::Unreadable {
            what: "reset",
            stream: self.id,
            source,
        })?;
        let mut state = self.lock();
        if state.abort.is_none() {
            state.abort = Some(Abort::Peer(reason.message));
            state.drop_unfinished_inbound();
        }
        Ok(())
    }

    /// The link closed: every operation on the stream now ends.
    pub(super) fn link_lost(&self, reason: &str) {
        {
            let mut state = self.lock();
            if state.abort.is_none() {
                state.abort = Some(Abort::Link(reason.to_owned()));
                state.drop_unfinished_inbound();
            }
        }
        self.wake_all();
    }

    /// For the writer task: the credit to grant now, if any: what the
    /// application took, plus what widens the window (see [`Windows`]).
    pub(super) fn take_grant(&self) -> Option<u32> {
        let mut state = self.lock();
        state.grant_queued = false;
        let credit = std::mem::take(&mut state.unacked);
        if credit == 0 || state.in_done || state.abort.is_some() {
            return None;
        }
        let wider = self.widen(&mut state);
        state.peer_credit += credit + wider;
        Some(u32::try_from(credit + wider).expect("credit is at most the widest window"))
    }

    /// Doubles the window, up to [`MAX_WINDOW`], with what the link's pool
    /// has left; returns the bytes added.
    fn widen(&self, state: &mut State) -> usize {
        let Some(pool) = &self.growth else { return 0 };
        let want = state.window.min(MAX_WINDOW.saturating_sub(state.window));
        if want == 0 {
            return 0;
        }
        let lent = pool.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            (used < MAX_LINK_GROWTH).then(|| used + want.min(MAX_LINK_GROWTH - used))
        });
        let got = match lent {
            Ok(used) => want.min(MAX_LINK_GROWTH - used),
            Err(_) => 0,
        };
        state.window += got;
        state.lent += got;
        got
    }

    /// The handle's last clone is gone: the reset message to send, if the
    /// stream was not over.
    fn abandon(&self) -> Option<String> {
        let mut state = self.lock();
        if state.is_over() {
            return None;
        }
        state.abort = Some(Abort::Local);
        Some(if !self.opener && !state.replied {
            "the request was dropped without an answer".to_owned()
        } else {
            "the stream was dropped before it finished".to_owned()
        })
    }
}

impl Drop for Stream {
    /// The stream's buffers go with it: so does what its window borrowed.
    fn drop(&mut self) {
        let lent = self.state.get_mut().map_or_else(|poison| poison.into_inner().lent, |state| state.lent);
        if let (Some(pool), true) = (&self.growth, lent > 0) {
            pool.fetch_sub(lent, Ordering::AcqRel);
        }
    }
}

impl State {
    fn is_over(&self) -> bool {
        self.abort.is_some() || (self.out_done && self.in_done)
    }

    fn finish_exchange(&mut self) {
        self.out_done = true;
        self.in_done = true;
    }

    fn check_abort(&self, peer: Role) -> Result<(), StreamError> {
        match &self.abort {
            None => Ok(()),
            Some(Abort::Local) => Err(StreamError::LocallyReset),
            Some(Abort::Peer(message)) => Err(StreamError::Reset { peer, message: message.clone() }),
            Some(Abort::Link(reason)) => Err(StreamError::LinkClosed(reason.clone())),
        }
    }

    /// Whether this side may send stream bytes now.
    fn check_send(&self, stream: &Stream) -> Result<(), StreamError> {
        self.check_abort(stream.peer)?;
        if self.out_done {
            return Err(StreamError::Closed);
        }
        if !stream.opener && !self.replied {
            return Err(StreamError::Misuse("reply to an accepted stream before sending on it"));
        }
        Ok(())
    }

    fn on_bytes(&mut self, stream: u32, kind: Kind, payload: Vec<u8>) -> Result<(), Violation> {
        if self.eof_received {
            let what = if kind == Kind::Stderr { "stderr" } else { "data" };
            return Err(Violation::AfterEof { what, stream });
        }
        let n = payload.len();
        if n > self.peer_credit {
            return Err(Violation::BeyondWindow { bytes: n, stream });
        }
        self.peer_credit -= n;
        if n == 0 || self.in_done || self.abort.is_some() {
            return Ok(());
        }
        self.buffered += n;
        match kind {
            Kind::Stderr => self.stderr.push(payload),
            _ => self.stdout.push(payload),
        }
        Ok(())
    }

    fn on_eof(&mut self, stream: u32) -> Result<(), Violation> {
        if self.eof_received {
            return Err(Violation::Twice { what: "eof", stream });
        }
        self.eof_received = true;
        self.in_done = true;
        Ok(())
    }

    /// After an abort: what the peer finished sending is still delivered,
    /// anything else is dropped (an aborted transfer has no use).
    fn drop_unfinished_inbound(&mut self) {
        if !self.eof_received {
            self.clear_inbound();
        }
    }

    fn clear_inbound(&mut self) {
        self.stdout = Chunks::default();
        self.stderr = Chunks::default();
        self.buffered = 0;
        self.exit = None;
    }

    /// The next event for `recv`, and whether a grant must now be queued.
    fn next_event(&mut self, peer: Role) -> (Poll<Option<Event>>, bool) {
        match self.abort {
            Some(Abort::Local) => return (Poll::Ready(None), false),
            Some(_) if !self.eof_received => {
                if self.abort_reported {
                    return (Poll::Ready(None), false);
                }
                self.abort_reported = true;
                let error = self.check_abort(peer).expect_err("the stream is aborted");
                return (Poll::Ready(Some(Event::Reset(error.to_string()))), false);
            }
            _ => {}
        }
        if let Some(event) = self.next_chunk() {
            return (Poll::Ready(Some(event)), self.wants_grant());
        }
        if let (Some(status), false) = (self.exit, self.exit_reported) {
            self.exit_reported = true;
            return (Poll::Ready(Some(Event::Exit(status))), false);
        }
        if self.eof_received && !self.eof_reported {
            self.eof_reported = true;
            return (Poll::Ready(Some(Event::Eof)), false);
        }
        if self.in_done {
            return (Poll::Ready(None), false);
        }
        (Poll::Pending, false)
    }

    fn next_chunk(&mut self) -> Option<Event> {
        let stderr_first = self.stderr_next;
        let (chunk, was_stderr) = if stderr_first {
            self.stderr.pop().map(|c| (c, true)).or_else(|| self.stdout.pop().map(|c| (c, false)))?
        } else {
            self.stdout.pop().map(|c| (c, false)).or_else(|| self.stderr.pop().map(|c| (c, true)))?
        };
        self.stderr_next = !was_stderr;
        self.buffered -= chunk.len();
        self.unacked += chunk.len();
        Some(if was_stderr { Event::Stderr(chunk) } else { Event::Data(chunk) })
    }

    fn wants_grant(&mut self) -> bool {
        // A quarter window: a bulk transfer costs one 13-byte `Window` frame
        // per quarter instead of one per chunk, and three quarters of the
        // window stay usable while the grant is on its way.
        let wanted = !self.grant_queued && self.unacked >= self.window / 4 && !self.in_done && self.abort.is_none();
        if wanted {
            self.grant_queued = true;
        }
        wanted
    }
}

/// Received chunks of one byte stream (see [`COALESCE_BELOW`]).
#[derive(Default)]
struct Chunks(VecDeque<Vec<u8>>);

impl Chunks {
    fn push(&mut self, bytes: Vec<u8>) {
        match self.0.back_mut() {
            Some(last) if last.len() < COALESCE_BELOW => last.extend_from_slice(&bytes),
            _ => self.0.push_back(bytes),
        }
    }

    fn pop(&mut self) -> Option<Vec<u8>> {
        self.0.pop_front()
    }
}

fn json_frame<T: Serialize>(kind: Kind, id: u32, value: &T) -> Result<Frame, StreamError> {
    let payload = serde_json::to_vec(value).map_err(StreamError::Encode)?;
    Frame::new(kind, id, payload).map_err(StreamError::TooLarge)
}

fn empty_frame(kind: Kind, id: u32) -> Frame {
    Frame::new(kind, id, Vec::new()).expect("an empty payload is under the cap")
}
