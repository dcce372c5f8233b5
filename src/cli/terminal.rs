//! The host's terminal on a pane: this terminal raw, the pane's stream on
//! the room's link (one `docker exec -i ... workroomd relay`, the same road
//! as every other request; docs/adr/0010), typed bytes in, resizes as
//! requests on the same link.
//!
//! How it ends:
//! - the pane's program ends: its status (128+N for a signal), after the
//!   status line the daemon writes into the pane;
//! - the pane's program had already ended: its last screen, one line
//!   saying so, and its status;
//! - the detach keys: 0, and the pane goes on;
//! - this terminal closes: the process ends, the exec's stdin closes, the
//!   relay and the daemon see the link go and drop the client at once;
//! - the link drops: a hand-off keeps the container's start, and the
//!   attach comes back (without replaying the history, which this terminal
//!   has); a restart or stop of the room ends it with one line and
//!   [`EXIT_ROOM_ENDED`].
//!
//! No typed key is lost when the link drops: keys typed as a hand-off
//! happens go into a link that is closing, which looks alive until the
//! engine reports the exec's end (milliseconds on Docker, more on
//! Podman). `shell` names itself to the daemon as a typist, keeps what it
//! sent (`tty::SentKeys`), and on the reattach the daemon says how much of it
//! the pane took (`workroomd`'s `typists.rs`); the rest is sent again.

use crate::engine::Engine;
use crate::link::RoomLink;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;
use workroomd::proto::{EndedPane, Event, Request, Response};
use workroomd::tty::{self, DetachMatcher, RawMode, KEYS_CHUNK};

/// `shell`'s status when the room restarted or stopped under it: the pane
/// is gone and `workroom shell` again starts a new one. EX_TEMPFAIL, "try
/// again", which a pane's own program rarely uses.
pub const EXIT_ROOM_ENDED: i32 = 75;
/// How long to try to reach the daemon again after the link dropped while
/// the room's start stayed the same: a hand-off's exec takes milliseconds,
/// a loaded machine may add seconds.
const RECONNECT_WAIT: Duration = Duration::from_secs(15);
/// Between attempts to reach it.
const RECONNECT_PAUSE: Duration = Duration::from_millis(50);
/// How long a stopped room is watched for coming back before the message
/// says "stopped" rather than "restarted" (`docker restart` stops, then
/// starts within a second or two).
const RESTART_GRACE: Duration = Duration::from_secs(3);

/// Which pane in which room.
pub struct Target<'a> {
    pub engine: &'a Engine,
    /// The container's id.
    pub container: &'a str,
    /// The room's name, for messages.
    pub room: &'a str,
    /// `State.StartedAt` when attaching: a different one means a restart.
    pub started_at: String,
    pub pane: &'a str,
    pub detach_keys: Vec<u8>,
}

enum End {
    Exit(i32),
    /// The pane's program had ended before the attach.
    Ended(EndedPane),
    Detached,
    /// The link dropped with the pane's end unknown.
    Lost,
    Failed(String),
}

/// Attaches this terminal to the pane over `link` until the pane ends or
/// the user detaches; returns the status `shell` exits with.
pub async fn attach(target: Target<'_>, mut link: RoomLink) -> anyhow::Result<i32> {
    let raw = RawMode::enter();
    let mut typed = Keys::open();
    let mut winch = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()).ok();
    let mut matcher = DetachMatcher::new(target.detach_keys.clone());
    let mut sent = tty::SentKeys::new();
    let mut history = true;
    let end = loop {
        match session(&link, target.pane, history, &mut typed, &mut sent, &mut winch, &mut matcher).await {
            End::Lost => match reconnect(&target).await {
                Some(again) => {
                    link = again;
                    history = false;
                }
                None => {
                    break Err(format!("pane {} ended: {} {}", target.pane, target.room, what_happened(&target).await))
                }
            },
            other => break Ok(other),
        }
    };
    drop(raw);
    match end {
        Ok(End::Exit(code)) => Ok(code),
        Ok(End::Ended(ended)) => {
            if let Some(screen) = &ended.screen {
                let _ = tty::write_stdout(screen.as_bytes());
            }
            let Some(status) = ended.status else { anyhow::bail!("{}", ended.message) };
            let pane = target.pane;
            eprintln!(
                "\r\nworkroom: {}; `workroom shell -d {pane}` starts a new one, `workroom kill-pane {pane}` removes it",
                ended.message
            );
            Ok(status.shell_code())
        }
        Ok(End::Detached) => {
            eprintln!("\r\n[detached from pane {}; it goes on]", target.pane);
            Ok(0)
        }
        Ok(End::Failed(message)) => anyhow::bail!("{message}"),
        Ok(End::Lost) => unreachable!("a lost link is retried above"),
        Err(message) => {
            eprintln!("\r\nworkroom: {message}");
            Ok(EXIT_ROOM_ENDED)
        }
    }
}

async fn session(
    link: &RoomLink,
    pane: &str,
    history: bool,
    typed: &mut Keys,
    sent: &mut tty::SentKeys,
    winch: &mut Option<tokio::signal::unix::Signal>,
    matcher: &mut DetachMatcher,
) -> End {
    let (rows, cols) = tty::terminal_size(std::io::stdin()).unwrap_or((0, 0));
    let attach = Request::Attach { pane: pane.into(), rows, cols, history, typist: Some(sent.typist()) };
    let Ok(handle) = link.link().open(attach).await else {
        return End::Lost;
    };
    match handle.recv_reply().await {
        // What the pane did not take of what was sent on earlier links
        // goes first, before anything typed now.
        Ok(Response::Attached { typed }) => {
            let again = sent.beyond(typed);
            if !again.is_empty() && handle.send_data(&again).await.is_err() {
                return End::Lost;
            }
        }
        // A daemon of before, which counts nothing: nothing is sent again.
        Ok(Response::Ready) => {}
        Ok(Response::PaneEnded(ended)) => return End::Ended(ended),
        Ok(Response::Error { message }) => return End::Failed(format!("cannot attach to pane {pane}: {message}")),
        Ok(other) => return End::Failed(format!("the daemon answered {other:?} to attaching pane {pane}")),
        Err(_) => return End::Lost,
    }
    let mut exit = None;
    loop {
        tokio::select! {
            event = handle.recv() => match event {
                Some(Event::Data(bytes)) => {
                    // Waiting on a slow terminal is the backpressure: the
                    // link's window fills, then the pane's bound for us.
                    if tty::write_stdout(&bytes).is_err() {
                        return End::Failed("cannot write to this terminal".into());
                    }
                }
                Some(Event::Exit(status)) => exit = Some(status.shell_code()),
                Some(Event::Eof) => return exit.map_or(End::Lost, End::Exit),
                Some(Event::Stderr(_)) => {}
                Some(Event::Reset(_)) | None => return End::Lost,
            },
            bytes = typed.next() => match bytes {
                Some(bytes) => {
                    let (send, detach) = matcher.feed(&bytes);
                    sent.keep(&send);
                    if !send.is_empty() && handle.send_data(&send).await.is_err() {
                        return End::Lost;
                    }
                    if detach {
                        let _ = handle.send_eof().await;
                        return End::Detached;
                    }
                }
                // This terminal's input ended: leave the pane running.
                None => {
                    let _ = handle.send_eof().await;
                    return End::Detached;
                }
            },
            _ = async { match winch.as_mut() { Some(w) => { w.recv().await; } None => std::future::pending().await } } => {
                if let Some((rows, cols)) = tty::terminal_size(std::io::stdin()) {
                    let _ = link.link().request(Request::ResizePane { pane: pane.into(), rows, cols }).await;
                }
            }
        }
    }
}

/// What the user types.
enum Keys {
    /// The terminal read by the runtime itself (see `tty::reopen_terminal`).
    Terminal(AsyncFd<OwnedFd>, Vec<u8>),
    /// Stdin read by a plain thread: not a terminal we could reopen. Not
    /// tokio's stdin, whose blocking read would keep the runtime from
    /// shutting down after the pane ends, until one more key.
    Thread(mpsc::Receiver<Vec<u8>>),
}

impl Keys {
    fn open() -> Keys {
        if let Some(tty) = tty::reopen_terminal() {
            // SAFETY: the fd was just opened here and the AsyncFd owns it
            // alone until it is dropped.
            if let Ok(fd) = unsafe { AsyncFd::register(tty) } {
                return Keys::Terminal(fd, vec![0; KEYS_CHUNK]);
            }
        }
        let (tx, rx) = mpsc::channel::<Vec<u8>>(16);
        std::thread::spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = vec![0u8; KEYS_CHUNK];
            while let Ok(n) = std::io::Read::read(&mut stdin, &mut buf) {
                if n == 0 || tx.blocking_send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Keys::Thread(rx)
    }

    /// The next typed bytes; `None` once input ended. Cancel-safe.
    async fn next(&mut self) -> Option<Vec<u8>> {
        match self {
            Keys::Thread(rx) => rx.recv().await,
            Keys::Terminal(fd, buf) => loop {
                let mut ready = fd.readable().await.ok()?;
                match ready.try_io(|fd| nix::unistd::read(fd.get_ref(), &mut buf[..]).map_err(std::io::Error::from)) {
                    Ok(Ok(0)) | Ok(Err(_)) => return None,
                    Ok(Ok(n)) => {
                        // A short read emptied the terminal: the next call
                        // waits for new keys rather than reading again to
                        // learn so, a syscall between this key and its
                        // frame leaving.
                        if n < buf.len() {
                            ready.clear_ready();
                        }
                        return Some(buf[..n].to_vec());
                    }
                    Err(_would_block) => continue,
                }
            },
        }
    }
}

/// The room's start is unchanged (a hand-off): a new link. `None` when the
/// room restarted, stopped or cannot be reached again.
async fn reconnect(target: &Target<'_>) -> Option<RoomLink> {
    let deadline = Instant::now() + RECONNECT_WAIT;
    while Instant::now() < deadline {
        if !same_start(target).await {
            return None;
        }
        if let Ok(link) = RoomLink::connect(target.engine, target.container).await {
            // A link to a daemon of a new start (a restart that was quick)
            // is no way back to this pane.
            return same_start(target).await.then_some(link);
        }
        tokio::time::sleep(RECONNECT_PAUSE).await;
    }
    None
}

async fn same_start(target: &Target<'_>) -> bool {
    let Ok(Some(c)) = target.engine.inspect_container(target.container).await else { return false };
    let state = c.state.unwrap_or_default();
    state.running == Some(true) && state.started_at.as_deref() == Some(target.started_at.as_str())
}

/// Said when the link is gone for good.
async fn what_happened(target: &Target<'_>) -> &'static str {
    start_ended(target.engine, target.container, &target.started_at).await.said()
}

/// How a room's start ended under a pane or an exec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartEnded {
    /// Running again, from a start of its own.
    Restarted,
    Stopped,
    /// Gone, or not to be asked about any more.
    Removed,
}

impl StartEnded {
    pub fn said(self) -> &'static str {
        match self {
            StartEnded::Restarted => "restarted",
            StartEnded::Stopped => "stopped",
            StartEnded::Removed => "was removed",
        }
    }
}

/// How the start of `container` at `started_at` ended, once it has. A
/// `docker restart` stops before it starts, so a stopped room is watched
/// for [`RESTART_GRACE`] first.
pub async fn start_ended(engine: &Engine, container: &str, started_at: &str) -> StartEnded {
    let deadline = Instant::now() + RESTART_GRACE;
    loop {
        let state = match engine.inspect_container(container).await {
            Ok(Some(c)) => c.state.unwrap_or_default(),
            _ => return StartEnded::Removed,
        };
        if state.started_at.as_deref() != Some(started_at) && state.running == Some(true) {
            return StartEnded::Restarted;
        }
        if Instant::now() >= deadline {
            return StartEnded::Stopped;
        }
        tokio::time::sleep(RECONNECT_PAUSE).await;
    }
}
