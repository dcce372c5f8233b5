//! The wire protocol between the host CLI (`workroom`) and the in-room daemon
//! (`workroomd`). Both link this module, so the two sides cannot drift.
//!
//! # Layout
//!
//! - [`frame`]: the byte codec, `kind | stream | length | payload`, length
//!   capped at [`MAX_PAYLOAD`]; the decoder never holds more than
//!   [`MAX_FRAME`] bytes.
//! - `message`: the serde types: [`Hello`], [`Request`], [`Response`], ...
//! - `handshake`: magic bytes and hellos, refusal on a protocol mismatch.
//! - `link`: [`Link`], the multiplexer (a reader task, a writer task).
//! - `splice`: data frames whose bytes the writer moves from a sender's
//!   staging pipe into a pipe output ([`SpliceOut`]), never copied by us.
//! - `stream`: [`StreamHandle`], one multiplexed stream with credit-based
//!   flow control. It reaches its link only through the `Carrier` trait,
//!   which the link implements, so `link` imports `stream` and never the
//!   other way: the modules form no circle (frame, message and splice at
//!   the bottom, then handshake and stream, then link).
//!
//! # The connection
//!
//! The host runs `docker exec -i <room> workroomd relay`, which copies bytes
//! between its stdio and the daemon's Unix socket without adding any, so the
//! protocol runs over any byte stream. Each side first writes [`MAGIC`]
//! (`WORKROOM`) and a `Hello` frame on stream 0 (`{"protocol", "version",
//! "role"}`), without waiting for the other. On a different [`PROTOCOL`] the
//! daemon answers with a `Refuse` frame and closes; both sides fail with
//! [`LinkError::ProtocolMismatch`] naming both programs, versions and
//! protocols ("protocol mismatch: workroomd 0.1.0 speaks protocol 1; workroom
//! 0.2.0 speaks protocol 2"). What a side can do beyond that protocol is
//! named in optional fields of its hello ([`Hello::window`],
//! [`Hello::hooks`]), so a peer of before reads it and is still reached.
//! Bytes other than the magic fail with
//! [`LinkError::NotWorkroom`], which shows them.
//!
//! Then either side opens streams: an `Open` frame carrying a [`Request`] on a
//! fresh id (the host's are odd, the daemon's even, never reused). The rules
//! of a stream:
//! 1. The accepting side's first frame is one `Reply` ([`Response`]).
//! 2. If the request does not [stream](Request::is_streaming), or the reply is
//!    [`Response::Error`], the stream is over after the reply.
//! 3. Otherwise each side sends `Data` (and the daemon `Stderr`, and `Exit`
//!    once) and ends its direction with `Eof`. The opener may send before the
//!    reply arrives (no round trip for stdin).
//! 4. `Reset` aborts both directions at any time; dropping a handle of a
//!    stream that is not over sends it.
//! 5. Each direction may have at most its window of unacknowledged bytes in
//!    flight: [`INITIAL_WINDOW`] at first; `Window` frames return credit as
//!    the application reads, and may widen the window up to [`MAX_WINDOW`]
//!    while the link's [`MAX_LINK_GROWTH`] lasts. A reader that does not read
//!    stalls its own stream only, and one link holds at most
//!    [`MAX_LINK_BUFFER`] bytes.
//!
//! Violations (a second hello, bytes beyond the window, an unknown frame
//! kind, a length over the cap) close the link: the peer is our own code, so
//! they are bugs, and a byte stream whose framing is in doubt cannot be
//! trusted with the next frame.
//!
//! # Using it
//!
//! Host side:
//!
//! ```no_run
//! use workroomd::proto::{Event, Hello, Link, Request, Response, Role, RunRequest};
//!
//! # async fn host(stdout: tokio::io::DuplexStream, stdin: tokio::io::DuplexStream)
//! # -> Result<(), Box<dyn std::error::Error>> {
//! // `stdout`/`stdin` of `docker exec -i <room> workroomd relay`.
//! let hello = Hello { version: "0.2.0".into(), ..Hello::new(Role::Host) };
//! let (link, daemon) = Link::handshake_with(stdout, stdin, hello).await?;
//! println!("connected to {}", daemon.describe());
//!
//! let status = link.request(Request::Status).await?;
//!
//! let run = link
//!     .open(Request::Run(RunRequest { argv: vec!["id".into()], ..Default::default() }))
//!     .await?;
//! run.send_eof().await?; // no stdin
//! match run.recv_reply().await? {
//!     Response::Started { pid } => eprintln!("pid {pid}"),
//!     other => return Err(format!("not started: {other:?}").into()),
//! }
//! while let Some(event) = run.recv().await {
//!     match event {
//!         Event::Data(bytes) => { /* to stdout */ }
//!         Event::Stderr(bytes) => { /* to stderr */ }
//!         Event::Exit(status) => { /* remember the code */ }
//!         Event::Eof => {}
//!         Event::Reset(why) => return Err(why.into()),
//!     }
//! }
//! # let _ = status; Ok(()) }
//! ```
//!
//! Daemon side, one task per connection:
//!
//! ```no_run
//! use workroomd::proto::{Event, Link, Request, Response, Role, StreamHandle};
//!
//! # async fn serve(socket: tokio::io::DuplexStream) -> Result<(), Box<dyn std::error::Error>> {
//! let (link, host) = Link::handshake(socket, Role::Daemon).await?;
//! while let Some((request, stream)) = link.accept().await {
//!     tokio::spawn(async move {
//!         match request {
//!             Request::Echo => echo(stream).await,
//!             _ => { let _ = stream.reply(Response::error("not yet")).await; }
//!         }
//!     });
//! }
//! // `accept` returned None: the host went away; `link.closed()` says why.
//! # Ok(()) }
//!
//! async fn echo(stream: StreamHandle) {
//!     if stream.reply(Response::Ready).await.is_err() { return; }
//!     while let Some(event) = stream.recv().await {
//!         match event {
//!             Event::Data(bytes) => {
//!                 if stream.send_data(&bytes).await.is_err() { return; }
//!             }
//!             Event::Eof => { let _ = stream.send_eof().await; }
//!             _ => return,
//!         }
//!     }
//! }
//! ```
//!
//! A handle is `Clone` and every method takes `&self`, so a command's stdout,
//! stderr and stdin can each be pumped by its own task; clone it into each.

pub mod frame;
mod handshake;
mod link;
mod message;
mod splice;
mod stream;

use std::time::Duration;

pub use frame::{Decoder, Frame, FrameError, Kind, HEADER_LEN, MAGIC, MAX_FRAME, MAX_PAYLOAD};
pub use handshake::LinkError;
pub use link::Link;
pub use message::{
    CaptureRequest, DaemonStatus, EndedPane, ExitStatus, Expected, HandOffOutcome, Hello, HookCommands, HookRun,
    HookState, HookStep, PaneInfo, PaneRequest, ProgramStatus, Reason, Request, Response, Role, RunRequest, StartPlan,
    Typist, HOOK_JOBS, MAX_CREDENTIAL_INPUT,
};
pub use splice::{Sent, SpliceOut};
pub use stream::{Event, StreamError, StreamHandle, Violation};

/// The protocol number both sides put in their hello. Bump it for any change
/// an older peer could misread; a mismatch is refused, naming both versions.
pub const PROTOCOL: u32 = 1;

/// The window each stream starts with in each direction: 256 KiB, one
/// largest frame. A peer that says so in its hello ([`Hello::window`]) gets
/// this; the receiver then widens a stream it is draining, see
/// [`MAX_WINDOW`] and [`MAX_LINK_GROWTH`]. Small, because it is what every
/// open stream may make the receiver hold without having read a byte:
/// [`MAX_STREAMS`] × this.
pub const INITIAL_WINDOW: usize = 256 * 1024;

/// The widest a stream's window grows: 8 MiB. It must cover the path's
/// bandwidth-delay product, or a single transfer stalls waiting for grants.
/// Measured on Docker 20.10 (2-core machine, 2026-11-29): `docker exec` adds
/// tens of milliseconds of turnaround, so a 1 MiB window held one echoed
/// stream to 41 MB/s (0.43x `docker exec -i cat`); 8 MiB gives 0.9-1.05x.
pub const MAX_WINDOW: usize = 8 * 1024 * 1024;

/// The window of a peer whose hello names none (workroom before windows
/// grew): fixed at 8 MiB for every stream, never widened. Kept so a new host
/// still talks to, and can hand off, a daemon of an older room.
pub const FIXED_WINDOW: usize = 8 * 1024 * 1024;

/// What the receiver may lend its streams beyond [`INITIAL_WINDOW`], all
/// streams of one link together: 32 MiB, four streams at [`MAX_WINDOW`]. A
/// grant widens a stream's window (doubling it, up to `MAX_WINDOW`) only
/// from what is left of this; a stream gives its part back when it is gone.
/// So one link never buffers more than
/// `MAX_STREAMS × INITIAL_WINDOW + MAX_LINK_GROWTH` = 64 MiB, whatever the
/// peer does ([`MAX_LINK_BUFFER`]).
pub const MAX_LINK_GROWTH: usize = 32 * 1024 * 1024;

/// The largest `Data`/`Stderr` frame a sender makes: 127 KiB, twice the
/// 64 KiB of before, so half the frames (and wake-ups of the writer and the
/// reader) per MiB, and just under musl's mmap threshold (128 KiB less its
/// header): the daemon is built with musl, whose allocator would otherwise
/// map and unmap fresh pages, and fault them in, for every payload it
/// decodes or sends. A keystroke queued behind a bulk frame on the same link
/// waits for at most one such frame on the pipe.
pub const MAX_DATA_CHUNK: usize = 127 * 1024;

/// Streams open at once on one link. A command, a pane or a forwarded
/// connection each hold one; a browser opens at most 6 connections to one
/// host, so 128 is far beyond one person's use. It is a factor of the link's
/// memory bound, [`MAX_LINK_BUFFER`].
pub const MAX_STREAMS: usize = 128;

/// The most stream bytes one link ever buffers on the receiving side, with a
/// peer that announces its window: 64 MiB. (With a peer of before, whose
/// windows are [`FIXED_WINDOW`], it is `MAX_STREAMS × FIXED_WINDOW`.)
pub const MAX_LINK_BUFFER: usize = MAX_STREAMS * INITIAL_WINDOW + MAX_LINK_GROWTH;

/// How long each side waits for the other's hello. The daemon answers at
/// once, so silence this long means the far end is wedged or is not a
/// workroom daemon; a message beats a hang. Generous because `docker exec`
/// itself can take seconds on a loaded engine before the relay starts.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
