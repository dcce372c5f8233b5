//! The multiplexer: one byte stream carrying many [`StreamHandle`]s.
//!
//! Two tasks per link:
//! - the **writer** owns the write half. Everything to send goes through one
//!   bounded queue of frames ([`OUTGOING_FRAMES`]), so a slow pipe makes
//!   senders wait instead of growing memory; credit grants skip the queue
//!   (they are tiny, order-free, and are what unblocks the peer);
//! - the **reader** owns the read half and the decoder, and hands each frame
//!   to its stream's state without ever waiting: per-stream buffers are
//!   bounded by the credit window, so there is always room. It never waits on
//!   the outgoing queue either (the few frames it originates are queued with
//!   `try_send`, or by a spawned task when the queue is full): if both
//!   readers could block on their writers while both writers block on a full
//!   pipe, the link would deadlock.
//!
//! The link lives while a [`Link`] clone or a stream handle exists, or until
//! the connection fails; then every stream ends with a reset naming the
//! reason, every waiter wakes, and [`Link::accept`] returns `None`.

use std::collections::HashMap;
use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::runtime::Handle;
use tokio::sync::mpsc::error::{TryRecvError, TrySendError};
use tokio::sync::{mpsc, watch, Notify};

use super::frame::{reason_frame, Decoder, Frame, FrameError, Kind, MAX_PAYLOAD};
use super::handshake::{self, LinkError};
use super::message::{Hello, Reason, Request, Response, Role};
use super::splice::{Outgoing, SpliceOut, Staged};
use super::stream::{Carrier, Keepalive, Stream, StreamError, StreamHandle, Violation, Windows};
use super::{HANDSHAKE_TIMEOUT, MAX_STREAMS};

/// Frames waiting for the writer. With [`MAX_DATA_CHUNK`](super::MAX_DATA_CHUNK) chunks that is at
/// most 2 MiB queued per link: enough to keep the pipe busy while senders
/// refill it, small enough for the daemon's memory budget.
const OUTGOING_FRAMES: usize = 8;

/// The writer's buffer, for frames under [`DIRECT_WRITE`]: many small
/// frames (keystrokes, grants, replies) leave in one write. Larger ones
/// leave with their header in one vectored write, so no header is ever
/// written by a syscall of its own.
const WRITE_BUFFER: usize = 4 * DIRECT_WRITE;

/// Payloads at least this large skip the writer's buffer (see
/// `write_frame`); below it, gathering frames saves more syscalls than the
/// copy costs.
const DIRECT_WRITE: usize = 16 * 1024;

/// Frames queued by spawned tasks because the outgoing queue was full when
/// the reader or a dropped handle had to send them. Each stream accounts for
/// at most one (its reset) and each refused open for one, so more than this
/// means the peer opens streams and never reads our answers: we close.
const MAX_DETACHED_SENDS: usize = 4 * MAX_STREAMS;

/// How long a link closed by its owner may take to write its last frames.
/// After that the peer is not reading and the writer task gives up, rather
/// than living on for as long as the peer sleeps.
const FLUSH_ON_CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a link failed after its handshake. Kept as its text (the reason every
/// stream of the link ends with), cause included.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("protocol violation by the {peer}")]
    Violation {
        peer: Role,
        #[source]
        source: Violation,
    },
    #[error("the {peer} refused the connection: {message}")]
    Refused { peer: Role, message: String },
    #[error("the {peer} closed the connection")]
    Closed { peer: Role },
    #[error("the {peer} closed the connection in the middle of a frame")]
    ClosedMidFrame { peer: Role },
    #[error("could not read from the {peer}")]
    Read {
        peer: Role,
        #[source]
        source: io::Error,
    },
    #[error("could not write to the {peer}")]
    Write {
        peer: Role,
        #[source]
        source: io::Error,
    },
}

impl Failure {
    /// The message and its causes, `: `-separated.
    fn reason(&self) -> String {
        let mut reason = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(e) = cause {
            reason.push_str(": ");
            reason.push_str(&e.to_string());
            cause = e.source();
        }
        reason
    }
}

/// A connected link. Clones share it.
#[derive(Clone)]
pub struct Link {
    shared: Arc<Shared>,
    keepalive: Arc<Keepalive>,
    incoming: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<(Request, StreamHandle)>>>,
}

impl Link {
    /// Connects over one duplex byte stream (a Unix socket, a
    /// `tokio::io::duplex` in tests) with this library's protocol and
    /// version. Returns the link and the peer's hello.
    pub async fn handshake<IO>(io: IO, role: Role) -> Result<(Link, Hello), LinkError>
    where
        IO: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (reader, writer) = tokio::io::split(io);
        Link::handshake_with(reader, writer, Hello::new(role)).await
    }

    /// Connects over separate halves (a child's stdout and stdin: the host
    /// side of `docker exec -i <room> workroomd relay`), saying `ours` as the
    /// hello. The host passes its own version here; tests pass other protocol
    /// numbers.
    ///
    /// Must run inside a tokio runtime with timers enabled; the link's tasks
    /// are spawned on it.
    pub async fn handshake_with<R, W>(reader: R, writer: W, ours: Hello) -> Result<(Link, Hello), LinkError>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        Link::start(reader, writer, None, ours).await
    }

    /// [`handshake_with`](Self::handshake_with) on a `writer` that is a pipe,
    /// with `splice_out` moving staged bytes into that same pipe: its
    /// streams can [`send_staged`](StreamHandle::send_staged). The daemon's
    /// side of `docker exec`.
    pub async fn handshake_spliced<R, W>(
        reader: R,
        writer: W,
        splice_out: Box<dyn SpliceOut>,
        ours: Hello,
    ) -> Result<(Link, Hello), LinkError>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        Link::start(reader, writer, Some(splice_out), ours).await
    }

    async fn start<R, W>(
        mut reader: R,
        mut writer: W,
        splice_out: Option<Box<dyn SpliceOut>>,
        ours: Hello,
    ) -> Result<(Link, Hello), LinkError>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let mut decoder = Decoder::new();
        let exchange = handshake::exchange(&mut reader, &mut writer, &mut decoder, &ours);
        let peer = tokio::time::timeout(HANDSHAKE_TIMEOUT, exchange)
            .await
            .map_err(|_| LinkError::Timeout { peer: ours.role.peer() })??;

        let (tx, rx) = mpsc::channel(OUTGOING_FRAMES);
        let (incoming_tx, incoming_rx) = mpsc::unbounded_channel();
        let first_id = match ours.role {
            Role::Host => 1,
            Role::Daemon => 2,
        };
        let windows = Windows::settle(&ours, &peer);
        let mut made = None;
        let keepalive = Arc::new_cyclic(|keepalive| {
            let shared = Arc::new(Shared {
                windows,
                splices: splice_out.is_some(),
                ours,
                peer: peer.clone(),
                tx,
                streams: Mutex::new(Streams { open: HashMap::new(), next_id: Some(first_id) }),
                grants: Mutex::new(Vec::new()),
                writer_wake: Notify::new(),
                incoming: Mutex::new(Some(incoming_tx)),
                closing: watch::Sender::new(None),
                detached: Arc::new(AtomicUsize::new(0)),
                keepalive: keepalive.clone(),
                runtime: Handle::current(),
            });
            made = Some(shared.clone());
            Keepalive::new(shared)
        });
        let shared = made.expect("new_cyclic ran its closure");
        tokio::spawn(read_loop(reader, decoder, shared.clone()));
        tokio::spawn(write_loop(writer, splice_out, rx, shared.clone()));
        let link = Link { shared, keepalive, incoming: Arc::new(tokio::sync::Mutex::new(incoming_rx)) };
        Ok((link, peer))
    }

    /// The peer's hello.
    pub fn peer(&self) -> &Hello {
        &self.shared.peer
    }

    /// Opens a stream with `request`. Returns once the `Open` frame is
    /// queued, without waiting for the reply: a streaming request may send
    /// its first bytes at once, saving a round trip.
    pub async fn open(&self, request: Request) -> Result<StreamHandle, StreamError> {
        let streaming = request.is_streaming();
        let payload = serde_json::to_vec(&request).map_err(StreamError::Encode)?;
        if payload.len() > MAX_PAYLOAD {
            return Err(StreamError::TooLarge(FrameError::TooLong {
                kind: Kind::Open,
                stream: 0,
                length: payload.len(),
            }));
        }
        let shared = &self.shared;
        let permit = shared.tx.reserve().await.map_err(|_| StreamError::LinkClosed(shared.close_reason()))?;
        // From here to the send, nothing awaits: a cancelled `open` either
        // queued nothing or queued the frame and returned the handle.
        let stream = {
            let mut streams = shared.lock_streams();
            if shared.is_closed() {
                return Err(StreamError::LinkClosed(shared.close_reason()));
            }
            if streams.open.len() >= MAX_STREAMS {
                return Err(StreamError::TooManyStreams);
            }
            let id = streams.next_id.ok_or(StreamError::IdsExhausted)?;
            // Ids are never reused, so a late frame for a finished stream
            // can never be taken for a new one.
            streams.next_id = id.checked_add(2);
            let stream = Arc::new(Stream::new(id, true, shared.peer.role, streaming, &shared.windows));
            streams.open.insert(id, stream.clone());
            stream
        };
        let frame = Frame::new(Kind::Open, stream.id, payload).expect("size checked above");
        permit.send(frame.into());
        Ok(StreamHandle::new(stream, shared.clone(), self.keepalive.clone()))
    }

    /// Opens a stream for a request that does not stream and returns the
    /// answer (which may be [`Response::Error`]).
    pub async fn request(&self, request: Request) -> Result<Response, StreamError> {
        debug_assert!(!request.is_streaming(), "streaming requests need the handle from open()");
        self.open(request).await?.recv_reply().await
    }

    /// The next stream the peer opened, with its request; `None` once the
    /// link is closed and the streams opened before that (already reset by
    /// the closing) are handed out. Requests this side cannot read never get
    /// here: the link answers them with an error naming this side's version.
    pub async fn accept(&self) -> Option<(Request, StreamHandle)> {
        self.incoming.lock().await.recv().await
    }

    /// Why the link closed, once it has.
    pub fn close_reason(&self) -> Option<String> {
        self.shared.closing.borrow().as_ref().map(|closed| closed.reason.clone())
    }

    /// Waits until the link closes and returns why.
    pub async fn closed(&self) -> String {
        let mut closing = self.shared.closing.subscribe();
        let closed = closing.wait_for(Option::is_some).await.expect("the link owns the sender");
        closed.as_ref().expect("waited for it").reason.clone()
    }
}

#[derive(Debug)]
struct Closed {
    reason: String,
    /// Closed by its owner (finish writing) rather than by a failure.
    graceful: bool,
}

/// What the link's tasks, the [`Link`] and (as their [`Carrier`]) the
/// stream handles share.
struct Shared {
    windows: Windows,
    /// The writer has a [`SpliceOut`]: streams may send staged frames.
    splices: bool,
    ours: Hello,
    peer: Hello,
    tx: mpsc::Sender<Outgoing>,
    streams: Mutex<Streams>,
    /// Streams with credit to grant, for the writer.
    grants: Mutex<Vec<Arc<Stream>>>,
    writer_wake: Notify,
    /// Taken on close, which ends `accept`.
    incoming: Mutex<Option<mpsc::UnboundedSender<(Request, StreamHandle)>>>,
    /// Set once, when the link closes.
    closing: watch::Sender<Option<Closed>>,
    /// Spawned sends in flight (see [`MAX_DETACHED_SENDS`]).
    detached: Arc<AtomicUsize>,
    /// Weak: the keepalive owns this struct. Upgraded to hand out handles
    /// for streams the peer opens.
    keepalive: Weak<Keepalive>,
    /// Where drops, which cannot await, spawn their sends.
    runtime: Handle,
}

struct Streams {
    open: HashMap<u32, Arc<Stream>>,
    /// `None` once the ids ran out (after 2^31 opens).
    next_id: Option<u32>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    crate::locks::lock(mutex)
}

impl Shared {
    fn lock_streams(&self) -> MutexGuard<'_, Streams> {
        lock(&self.streams)
    }

    fn is_closed(&self) -> bool {
        self.closing.borrow().is_some()
    }

    fn violation(&self, source: Violation) -> Failure {
        Failure::Violation { peer: self.peer.role, source }
    }

    /// Applies one frame from the peer; an error closes the link with it.
    fn dispatch(self: &Arc<Self>, frame: Frame) -> Result<(), Failure> {
        let (kind, id) = (frame.kind(), frame.stream());
        match kind {
            Kind::Hello => Err(self.violation(Violation::SecondHello)),
            Kind::Refuse => {
                let message = serde_json::from_slice::<Reason>(frame.payload())
                    .map_or_else(|_| "no readable reason".to_owned(), |r| r.message);
                Err(Failure::Refused { peer: self.peer.role, message })
            }
            _ if id == 0 => Err(self.violation(Violation::StreamZero { kind })),
            Kind::Open => self.on_open(id, frame.payload()),
            _ => {
                let stream = self.lock_streams().open.get(&id).cloned();
                match stream {
                    Some(stream) => stream.on_frame(kind, frame.into_payload()).map_err(|v| self.violation(v)),
                    // A stream this side already dropped (and reset): the
                    // peer's frames were in flight. Nothing to do.
                    None => Ok(()),
                }
            }
        }
    }

    fn on_open(self: &Arc<Self>, id: u32, payload: &[u8]) -> Result<(), Failure> {
        let peer = self.peer.role;
        let odd = id % 2 == 1;
        if odd != (peer == Role::Host) {
            return Err(self.violation(Violation::NotItsId { stream: id, peer }));
        }
        let request: Request = match serde_json::from_slice(payload) {
            Ok(request) => request,
            Err(e) => {
                // A newer peer asking for something this version does not
                // know: answer, do not fail the link.
                let me = &self.ours;
                let message = format!("{} {} cannot read this request: {e}", me.role.program(), me.version);
                self.answer_error(id, message);
                return Ok(());
            }
        };
        let Some(keepalive) = self.keepalive.upgrade() else {
            return Ok(()); // the link is closing
        };
        let stream = Arc::new(Stream::new(id, false, peer, request.is_streaming(), &self.windows));
        {
            let mut streams = self.lock_streams();
            if streams.open.contains_key(&id) {
                return Err(self.violation(Violation::OpenedTwice { stream: id }));
            }
            if self.is_closed() {
                return Ok(());
            }
            if streams.open.len() >= MAX_STREAMS {
                drop(streams);
                self.answer_error(id, format!("{MAX_STREAMS} streams are already open"));
                return Ok(());
            }
            streams.open.insert(id, stream.clone());
        }
        let handle = StreamHandle::new(stream, self.clone(), keepalive);
        let incoming = lock(&self.incoming).clone();
        if let Some(incoming) = incoming {
            // If nobody accepts any more, the handle drops here, which
            // answers the peer with a reset.
            let _ = incoming.send((request, handle));
        }
        Ok(())
    }

    fn answer_error(self: &Arc<Self>, id: u32, message: String) {
        let payload =
            serde_json::to_vec(&Response::Error { message }).ok().filter(|payload| payload.len() <= MAX_PAYLOAD);
        match payload {
            Some(payload) => self.send_soon(Frame::new(Kind::Reply, id, payload).expect("size checked")),
            None => self.send_soon(reason_frame(Kind::Reset, id, "unanswerable".to_owned())),
        }
    }
}

impl Carrier for Shared {
    fn queue(&self) -> &mpsc::Sender<Outgoing> {
        &self.tx
    }

    fn splices(&self) -> bool {
        self.splices
    }

    fn close_reason(&self) -> String {
        self.closing.borrow().as_ref().map_or_else(|| "the link is closing".to_owned(), |c| c.reason.clone())
    }

    /// Closes the link (the first reason wins): every stream is ended with
    /// `reason`, `accept` returns `None`, the tasks stop.
    fn close(&self, reason: String, graceful: bool) {
        let first = self.closing.send_if_modified(|closing| {
            if closing.is_some() {
                return false;
            }
            *closing = Some(Closed { reason: reason.clone(), graceful });
            true
        });
        if !first {
            return;
        }
        let streams: Vec<Arc<Stream>> = self.lock_streams().open.drain().map(|(_, s)| s).collect();
        for stream in streams {
            stream.link_lost(&reason);
        }
        lock(&self.incoming).take();
        self.writer_wake.notify_one();
    }

    /// The stream's last handle is gone; frames for it are ignored from now.
    fn forget(&self, id: u32) {
        self.lock_streams().open.remove(&id);
    }

    fn queue_grant(&self, stream: Arc<Stream>) {
        lock(&self.grants).push(stream);
        self.writer_wake.notify_one();
    }

    /// Queues a frame without waiting, for callers that cannot await (drops)
    /// or must not (the reader). Order with what the same stream queued
    /// earlier is kept: those frames are already in the queue.
    fn send_soon(&self, frame: Frame) {
        let frame = match self.tx.try_send(frame.into()) {
            Ok(()) | Err(TrySendError::Closed(_)) => return,
            Err(TrySendError::Full(frame)) => frame,
        };
        if self.detached.fetch_add(1, Ordering::Relaxed) >= MAX_DETACHED_SENDS {
            self.detached.fetch_sub(1, Ordering::Relaxed);
            let peer = self.peer.role;
            self.close(format!("the {peer} does not read what it is sent"), false);
            return;
        }
        let (tx, detached) = (self.tx.clone(), self.detached.clone());
        self.runtime.spawn(async move {
            let _ = tx.send(frame).await;
            detached.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

async fn read_loop<R>(mut reader: R, mut decoder: Decoder, shared: Arc<Shared>)
where
    R: AsyncRead + Unpin,
{
    let mut closing = shared.closing.subscribe();
    let peer = shared.peer.role;
    let failure = loop {
        // Decode everything buffered first: the decoder only promises room
        // once it holds no complete frame.
        if let Err(failure) = dispatch_buffered(&mut decoder, &shared) {
            break failure;
        }
        let read = tokio::select! {
            read = reader.read(decoder.unfilled_mut()) => read,
            _ = closing.wait_for(Option::is_some) => return,
        };
        match read {
            Ok(0) if decoder.buffered() > 0 => break Failure::ClosedMidFrame { peer },
            Ok(0) => break Failure::Closed { peer },
            Ok(n) => decoder.advance(n),
            Err(source) => break Failure::Read { peer, source },
        }
    };
    shared.close(failure.reason(), false);
}

fn dispatch_buffered(decoder: &mut Decoder, shared: &Arc<Shared>) -> Result<(), Failure> {
    while let Some(frame) = decoder.decode().map_err(|e| shared.violation(e.into()))? {
        shared.dispatch(frame)?;
    }
    Ok(())
}

async fn write_loop<W>(
    writer: W,
    mut splice_out: Option<Box<dyn SpliceOut>>,
    mut rx: mpsc::Receiver<Outgoing>,
    shared: Arc<Shared>,
) where
    W: AsyncWrite + Unpin,
{
    let mut closing = shared.closing.subscribe();
    let mut out = BufWriter::with_capacity(WRITE_BUFFER, writer);
    // A failure elsewhere stops the writer mid-write: a peer that stopped
    // reading must not keep it (and every sender queued behind it) waiting.
    let failed = |closing: &Option<Closed>| closing.as_ref().is_some_and(|c| !c.graceful);
    let result = tokio::select! {
        result = pump(&mut out, &mut splice_out, &mut rx, &shared) => result,
        _ = closing.wait_for(failed) => return,
    };
    match result {
        Ok(()) => {
            let _ = tokio::time::timeout(FLUSH_ON_CLOSE_TIMEOUT, out.shutdown()).await;
        }
        Err(source) => shared.close(Failure::Write { peer: shared.peer.role, source }.reason(), false),
    }
}

/// Writes queued frames until the link is closed gracefully and the queue is
/// empty.
async fn pump<W>(
    out: &mut BufWriter<W>,
    splice_out: &mut Option<Box<dyn SpliceOut>>,
    rx: &mut mpsc::Receiver<Outgoing>,
    shared: &Shared,
) -> io::Result<()>
where
    W: AsyncWrite + Unpin,
{
    let mut closing = shared.closing.subscribe();
    loop {
        let grants = std::mem::take(&mut *lock(&shared.grants));
        for stream in grants {
            if let Some(credit) = stream.take_grant() {
                let frame = Frame::new(Kind::Window, stream.id, credit.to_be_bytes().to_vec())
                    .expect("4 bytes are under the cap");
                write_frame(out, &frame).await?;
            }
        }
        let frame = match rx.try_recv() {
            Ok(frame) => frame,
            Err(TryRecvError::Disconnected) => return Ok(()),
            Err(TryRecvError::Empty) => {
                if closing.borrow_and_update().is_some() {
                    return Ok(());
                }
                // Nothing queued: push out what the buffer holds, then sleep.
                out.flush().await?;
                tokio::select! {
                    frame = rx.recv() => match frame {
                        Some(frame) => frame,
                        None => return Ok(()),
                    },
                    () = shared.writer_wake.notified() => continue,
                    _ = closing.changed() => continue,
                }
            }
        };
        match frame {
            Outgoing::Frame(frame) => write_frame(out, &frame).await?,
            Outgoing::Staged(staged) => write_staged(out, splice_out, staged).await?,
        }
    }
}

/// A staged frame: its header through the buffer, the buffer flushed so
/// everything before it is in the pipe, then its bytes straight from the
/// staging pipe. The header has promised them: a shortfall is a broken link.
async fn write_staged<W>(
    out: &mut BufWriter<W>,
    splice_out: &mut Option<Box<dyn SpliceOut>>,
    staged: Staged,
) -> io::Result<()>
where
    W: AsyncWrite + Unpin,
{
    let splice_out = splice_out
        .as_mut()
        .ok_or_else(|| io::Error::other("a staged frame was queued on a link that cannot splice"))?;
    out.write_all(&staged.header).await?;
    out.flush().await?;
    let mut left = staged.len;
    while left > 0 {
        let moved = std::future::poll_fn(|cx| splice_out.poll_splice(cx, staged.from.as_fd(), left)).await?;
        if moved == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the staging pipe ran dry inside a frame"));
        }
        left -= moved;
    }
    let _ = staged.done.send(());
    Ok(())
}

/// Writes one frame. Small frames gather in the buffer and leave together;
/// a payload of [`DIRECT_WRITE`] or more goes out with its header in one
/// vectored write after the buffer is flushed, rather than being copied
/// into the buffer first: a bulk transfer's bytes are copied once fewer.
async fn write_frame<W>(out: &mut BufWriter<W>, frame: &Frame) -> io::Result<()>
where
    W: AsyncWrite + Unpin,
{
    let header = frame.header();
    if frame.payload().len() < DIRECT_WRITE {
        out.write_all(&header).await?;
        return out.write_all(frame.payload()).await;
    }
    out.flush().await?;
    let (mut header, mut payload) = (&header[..], frame.payload());
    while !header.is_empty() || !payload.is_empty() {
        let slices = [io::IoSlice::new(header), io::IoSlice::new(payload)];
        let n = out.get_mut().write_vectored(&slices).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let from_header = n.min(header.len());
        header = &header[from_header..];
        payload = &payload[n - from_header..];
    }
    Ok(())
}
