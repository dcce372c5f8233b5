//! `workroomd attach PANE [--create] [--detach-keys KEYS] [--size ROWSxCOLS]`:
//! a terminal on a pane. It runs inside the room (`docker exec -it -u 0
//! <room> workroomd attach main`), talks to the daemon's socket directly,
//! and puts its own terminal in raw mode (restored on every way out).
//!
//! - The window size goes to the pane at the start and on every `SIGWINCH`
//!   (which `docker exec`'s resize delivers).
//! - The detach keys (default [`DEFAULT_DETACH_KEYS`], docker's) leave the
//!   pane running and exit 0; the keys themselves never reach the pane. A
//!   partial match is held back and sent on once it stops matching.
//! - When the pane's program ends, attach exits with its status (128+N for
//!   a signal, as shells report it).
//! - When the daemon's connection drops without the pane ending (a
//!   hand-off), attach reconnects and the pane is repainted.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use workroomd::proto::{Event, Link, PaneRequest, Request, Response, Role};
use workroomd::room;

/// Docker's own default, so hands that know `docker attach` know this.
pub const DEFAULT_DETACH_KEYS: &str = "ctrl-p,ctrl-q";
/// How long attach tries to reach the daemon again after the connection
/// dropped: a hand-off's exec and restart take milliseconds; past this the
/// daemon is gone (the room stopped).
const RECONNECT_WAIT: Duration = Duration::from_secs(15);
/// Between reconnect attempts.
const RECONNECT_PAUSE: Duration = Duration::from_millis(20);
/// Exit status when attach itself failed (no such pane, no daemon).
const EXIT_FAILED: i32 = 1;

struct Options {
    pane: String,
    create: bool,
    detach_keys: Vec<u8>,
    size: Option<(u16, u16)>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut pane = None;
    let mut create = false;
    let mut keys = DEFAULT_DETACH_KEYS.to_string();
    let mut size = None;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--create" => create = true,
            "--detach-keys" => {
                i += 1;
                keys = args.get(i).ok_or("--detach-keys needs keys, e.g. ctrl-p,ctrl-q")?.clone();
            }
            "--size" => {
                i += 1;
                let s = args.get(i).ok_or("--size needs ROWSxCOLS")?;
                let (r, c) = s.split_once('x').ok_or("--size needs ROWSxCOLS")?;
                size = Some((r.parse().map_err(|_| "--size: bad rows")?, c.parse().map_err(|_| "--size: bad cols")?));
            }
            other if pane.is_none() && !other.starts_with('-') => pane = Some(other.to_string()),
            other => return Err(format!("unknown attach argument {other:?}")),
        }
        i += 1;
    }
    Ok(Options {
        pane: pane.ok_or("which pane? `workroomd attach PANE`")?,
        create,
        detach_keys: parse_keys(&keys)?,
        size,
    })
}

/// Docker's notation: `ctrl-p,ctrl-q`, `ctrl-@`, or single characters.
pub fn parse_keys(spec: &str) -> Result<Vec<u8>, String> {
    let mut keys = Vec::new();
    for key in spec.split(',') {
        let key = key.trim();
        let byte = if let Some(c) = key.strip_prefix("ctrl-") {
            match c.as_bytes() {
                [b] if b.is_ascii_alphabetic() => b.to_ascii_lowercase() - b'a' + 1,
                [b @ (b'@' | b'[' | b'\\' | b']' | b'^' | b'_')] => b & 0x1f,
                _ => {
                    return Err(format!(
                        "detach key {key:?}: use ctrl-<letter>, ctrl-@, ctrl-[ ... ctrl-_ or one character"
                    ))
                }
            }
        } else if key.len() == 1 {
            key.as_bytes()[0]
        } else {
            return Err(format!("detach key {key:?}: use ctrl-<letter>, ctrl-@, ctrl-[ ... ctrl-_ or one character"));
        };
        keys.push(byte);
    }
    if keys.is_empty() {
        return Err("no detach keys given".into());
    }
    Ok(keys)
}

/// Finds the detach sequence in typed input.
pub struct DetachMatcher {
    keys: Vec<u8>,
    matched: usize,
}

impl DetachMatcher {
    pub fn new(keys: Vec<u8>) -> Self {
        DetachMatcher { keys, matched: 0 }
    }

    /// The bytes to send on, and whether the sequence was completed (what
    /// came after it in the same read is dropped with the detach).
    pub fn feed(&mut self, input: &[u8]) -> (Vec<u8>, bool) {
        let mut out = Vec::with_capacity(input.len());
        for &b in input {
            if b == self.keys[self.matched] {
                self.matched += 1;
                if self.matched == self.keys.len() {
                    self.matched = 0;
                    return (out, true);
                }
            } else {
                out.extend_from_slice(&self.keys[..self.matched]);
                self.matched = 0;
                if b == self.keys[0] {
                    self.matched = 1;
                    if self.keys.len() == 1 {
                        self.matched = 0;
                        return (out, true);
                    }
                } else {
                    out.push(b);
                }
            }
        }
        (out, false)
    }
}

pub fn run(args: &[String]) -> i32 {
    let options = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("workroomd attach: {e}");
            return 2;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("workroomd attach: {e}");
            return EXIT_FAILED;
        }
    };
    let terminal = RawMode::enter();
    let (code, message) = runtime.block_on(attach(options));
    drop(terminal);
    if let Some(message) = message {
        eprintln!("{message}");
    }
    // The stdin reader sits in a blocking read; do not wait for it.
    runtime.shutdown_background();
    code
}

enum End {
    Code(i32, Option<String>),
    /// The connection dropped with the pane still running.
    Lost,
}

async fn attach(options: Options) -> (i32, Option<String>) {
    let (input_tx, mut input) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    tokio::spawn(async move {
        let mut stdin = tokio::io::stdin();
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(n) = stdin.read(&mut buf).await {
            if n == 0 || input_tx.send(buf[..n].to_vec()).await.is_err() {
                break;
            }
        }
    });
    let mut winch = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()).ok();
    let mut matcher = DetachMatcher::new(options.detach_keys.clone());
    let mut size = options.size.or_else(terminal_size);
    let mut first = true;
    loop {
        let link = match connect(if first { Duration::ZERO } else { RECONNECT_WAIT }).await {
            Ok(l) => l,
            Err(e) => return (EXIT_FAILED, Some(format!("workroomd attach: cannot reach the daemon: {e}"))),
        };
        if first && options.create {
            let open = PaneRequest {
                name: options.pane.clone(),
                rows: size.map_or(0, |s| s.0),
                cols: size.map_or(0, |s| s.1),
                ..Default::default()
            };
            match link.request(Request::OpenPane(open)).await {
                Ok(Response::PaneOpened { .. }) => {}
                Ok(Response::Error { message }) => return (EXIT_FAILED, Some(format!("workroomd attach: {message}"))),
                other => return (EXIT_FAILED, Some(format!("workroomd attach: cannot open the pane: {other:?}"))),
            }
        }
        first = false;
        match session(&link, &options.pane, &mut input, &mut winch, &mut matcher, &mut size).await {
            End::Code(code, message) => return (code, message),
            End::Lost => continue,
        }
    }
}

async fn connect(wait: Duration) -> Result<Link, String> {
    let deadline = Instant::now() + wait;
    loop {
        let attempt = async {
            let stream = UnixStream::connect(room::SOCKET_PATH).await.map_err(|e| e.to_string())?;
            Link::handshake(stream, Role::Host).await.map(|(l, _)| l).map_err(|e| e.to_string())
        };
        match attempt.await {
            Ok(link) => return Ok(link),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(RECONNECT_PAUSE).await,
        }
    }
}

async fn session(
    link: &Link,
    pane: &str,
    input: &mut tokio::sync::mpsc::Receiver<Vec<u8>>,
    winch: &mut Option<tokio::signal::unix::Signal>,
    matcher: &mut DetachMatcher,
    size: &mut Option<(u16, u16)>,
) -> End {
    let (rows, cols) = size.unwrap_or((0, 0));
    let Ok(handle) = link.open(Request::Attach { pane: pane.into(), rows, cols }).await else { return End::Lost };
    match handle.recv_reply().await {
        Ok(Response::Ready) => {}
        Ok(Response::PaneEnded(ended)) => {
            let mut out = std::io::stdout();
            if let Some(screen) = &ended.screen {
                let _ = std::io::Write::write_all(&mut out, screen.as_bytes());
            }
            let _ = std::io::Write::flush(&mut out);
            return End::Code(EXIT_FAILED, Some(format!("\r\n{}", ended.message)));
        }
        Ok(Response::Error { message }) => return End::Code(EXIT_FAILED, Some(format!("workroomd attach: {message}"))),
        Ok(other) => return End::Code(EXIT_FAILED, Some(format!("workroomd attach: unexpected answer {other:?}"))),
        Err(_) => return End::Lost,
    }
    let mut stdout = tokio::io::stdout();
    let mut exit = None;
    loop {
        tokio::select! {
            event = handle.recv() => match event {
                Some(Event::Data(bytes)) => {
                    if stdout.write_all(&bytes).await.is_err() { return End::Code(EXIT_FAILED, None) }
                    let _ = stdout.flush().await;
                }
                Some(Event::Exit(status)) => {
                    exit = Some(status.code.unwrap_or_else(|| 128 + status.signal.unwrap_or(0)));
                }
                Some(Event::Eof) => match exit {
                    Some(code) => return End::Code(code, None),
                    None => return End::Lost,
                },
                Some(Event::Stderr(_)) => {}
                Some(Event::Reset(_)) | None => return End::Lost,
            },
            typed = input.recv() => match typed {
                Some(bytes) => {
                    let (send, detach) = matcher.feed(&bytes);
                    if !send.is_empty() && handle.send_data(&send).await.is_err() {
                        return End::Lost;
                    }
                    if detach {
                        let _ = handle.send_eof().await;
                        return End::Code(0, Some(format!("\r\n[detached from pane {pane}; it goes on]")));
                    }
                }
                // Our stdin ended (not a terminal, or closed): detach.
                None => {
                    let _ = handle.send_eof().await;
                    return End::Code(0, None);
                }
            },
            _ = async { match winch.as_mut() { Some(w) => { w.recv().await; } None => std::future::pending().await } } => {
                if let Some((rows, cols)) = terminal_size() {
                    *size = Some((rows, cols));
                    let _ = link.request(Request::ResizePane { pane: pane.into(), rows, cols }).await;
                }
            }
        }
    }
}

fn terminal_size() -> Option<(u16, u16)> {
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes a winsize into the pointer.
    let rc = unsafe { libc::ioctl(libc::STDIN_FILENO, libc::TIOCGWINSZ, &mut ws) };
    (rc == 0 && ws.ws_row > 0).then_some((ws.ws_row, ws.ws_col))
}

/// This terminal in raw mode; restored when dropped.
struct RawMode(nix::sys::termios::Termios);

impl RawMode {
    fn enter() -> Option<RawMode> {
        use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg};
        let stdin = std::io::stdin();
        let saved = tcgetattr(stdin.as_fd()).ok()?;
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw).ok()?;
        Some(RawMode(saved))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = nix::sys::termios::tcsetattr(std::io::stdin().as_fd(), nix::sys::termios::SetArg::TCSANOW, &self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detach_keys_read_in_dockers_notation() {
        assert_eq!(parse_keys("ctrl-p,ctrl-q").unwrap(), vec![0x10, 0x11]);
        assert_eq!(parse_keys("ctrl-@,x").unwrap(), vec![0, b'x']);
        assert!(parse_keys("ctrl-pq").is_err());
    }

    #[test]
    fn the_detach_sequence_is_swallowed_and_ends_the_attach() {
        let mut m = DetachMatcher::new(vec![0x10, 0x11]);
        assert_eq!(m.feed(b"ls\r\x10"), (b"ls\r".to_vec(), false));
        assert_eq!(m.feed(b"\x11after"), (vec![], true));
    }

    #[test]
    fn a_partial_detach_sequence_is_sent_on_when_it_stops_matching() {
        let mut m = DetachMatcher::new(vec![0x10, 0x11]);
        assert_eq!(m.feed(b"\x10"), (vec![], false));
        assert_eq!(m.feed(b"a"), (b"\x10a".to_vec(), false));
        assert_eq!(m.feed(b"\x10\x10\x11"), (b"\x10".to_vec(), true));
    }
}
