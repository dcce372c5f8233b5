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

use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use workroomd::proto::{Event, Link, PaneRequest, Request, Response, Role};
use workroomd::room;
use workroomd::tty::{self, DetachMatcher, RawMode, DEFAULT_DETACH_KEYS};

/// How long attach tries to reach the daemon again after the connection
/// dropped: a hand-off's exec and restart take milliseconds; past this the
/// daemon is gone (the room stopped).
const RECONNECT_WAIT: Duration = Duration::from_secs(15);
/// Between reconnect attempts.
const RECONNECT_PAUSE: Duration = Duration::from_millis(20);
/// Exit status when attach itself failed (no such pane, no daemon).
const EXIT_FAILED: i32 = 1;

#[derive(Debug, thiserror::Error)]
enum ArgsError {
    #[error("{flag} needs {what}")]
    Missing { flag: &'static str, what: &'static str },
    #[error("--size {0:?}: give ROWSxCOLS, e.g. 40x120")]
    Size(String),
    #[error("unknown attach argument {0:?}")]
    Unknown(String),
    #[error("which pane? `workroomd attach PANE`")]
    NoPane,
    #[error(transparent)]
    Keys(#[from] tty::KeysError),
}

struct Options {
    pane: String,
    create: bool,
    detach_keys: Vec<u8>,
    size: Option<(u16, u16)>,
}

fn parse(args: &[String]) -> Result<Options, ArgsError> {
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
                keys = args
                    .get(i)
                    .ok_or(ArgsError::Missing { flag: "--detach-keys", what: "keys, e.g. ctrl-p,ctrl-q" })?
                    .clone();
            }
            "--size" => {
                i += 1;
                let s = args.get(i).ok_or(ArgsError::Missing { flag: "--size", what: "ROWSxCOLS" })?;
                let parsed = s.split_once('x').and_then(|(r, c)| Some((r.parse().ok()?, c.parse().ok()?)));
                size = Some(parsed.ok_or_else(|| ArgsError::Size(s.clone()))?);
            }
            other if pane.is_none() && !other.starts_with('-') => pane = Some(other.to_string()),
            other => return Err(ArgsError::Unknown(other.to_string())),
        }
        i += 1;
    }
    Ok(Options { pane: pane.ok_or(ArgsError::NoPane)?, create, detach_keys: tty::parse_keys(&keys)?, size })
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
        let mut buf = vec![0u8; tty::KEYS_CHUNK];
        while let Ok(n) = stdin.read(&mut buf).await {
            if n == 0 || input_tx.send(buf[..n].to_vec()).await.is_err() {
                break;
            }
        }
    });
    let mut winch = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()).ok();
    let mut matcher = DetachMatcher::new(options.detach_keys.clone());
    let mut size = options.size.or_else(|| tty::terminal_size(std::io::stdin()));
    let mut history = true;
    let mut first = true;
    let mut sent = tty::SentKeys::new();
    loop {
        let link = match connect(if first { Duration::ZERO } else { RECONNECT_WAIT }).await {
            Ok(l) => l,
            Err(e) => {
                let cause = std::error::Error::source(&e).map(|s| format!(": {s}")).unwrap_or_default();
                return (EXIT_FAILED, Some(format!("workroomd attach: cannot reach the daemon: {e}{cause}")));
            }
        };
        if first && options.create {
            let terminal_env = |name: &str| std::env::var(name).ok().map(|v| (name.to_string(), v));
            let open = PaneRequest {
                name: options.pane.clone(),
                rows: size.map_or(0, |s| s.0),
                cols: size.map_or(0, |s| s.1),
                env: ["TERM", "COLORTERM"].into_iter().filter_map(terminal_env).collect(),
                locale: std::env::vars().filter(|(k, _)| k == "LANG" || k.starts_with("LC_")).collect(),
                ..Default::default()
            };
            match link.request(Request::OpenPane(open)).await {
                Ok(Response::PaneOpened { .. }) => {}
                Ok(Response::Error { message }) => return (EXIT_FAILED, Some(format!("workroomd attach: {message}"))),
                other => return (EXIT_FAILED, Some(format!("workroomd attach: cannot open the pane: {other:?}"))),
            }
        }
        first = false;
        let keys = Keys { input: &mut input, matcher: &mut matcher, sent: &mut sent };
        match session(&link, &options.pane, history, keys, &mut winch, &mut size).await {
            End::Code(code, message) => return (code, message),
            // Reattached after a hand-off: this terminal has the history.
            End::Lost => history = false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum ConnectError {
    #[error("cannot connect to {}", room::SOCKET_PATH)]
    Socket(#[source] std::io::Error),
    #[error(transparent)]
    Handshake(#[from] workroomd::proto::LinkError),
}

async fn connect(wait: Duration) -> Result<Link, ConnectError> {
    let deadline = Instant::now() + wait;
    loop {
        let attempt = async {
            let stream = UnixStream::connect(room::SOCKET_PATH).await.map_err(ConnectError::Socket)?;
            Ok::<_, ConnectError>(Link::handshake(stream, Role::Host).await?.0)
        };
        match attempt.await {
            Ok(link) => return Ok(link),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(RECONNECT_PAUSE).await,
        }
    }
}

/// What is typed, and what was sent of it over every link.
struct Keys<'a> {
    input: &'a mut tokio::sync::mpsc::Receiver<Vec<u8>>,
    matcher: &'a mut DetachMatcher,
    sent: &'a mut tty::SentKeys,
}

async fn session(
    link: &Link,
    pane: &str,
    history: bool,
    keys: Keys<'_>,
    winch: &mut Option<tokio::signal::unix::Signal>,
    size: &mut Option<(u16, u16)>,
) -> End {
    let Keys { input, matcher, sent } = keys;
    let (rows, cols) = size.unwrap_or((0, 0));
    let typist = Some(sent.typist());
    let Ok(handle) = link.open(Request::Attach { pane: pane.into(), rows, cols, history, typist }).await else {
        return End::Lost;
    };
    match handle.recv_reply().await {
        // What the pane did not take of what was sent on earlier links (a
        // hand-off closed them) goes first.
        Ok(Response::Attached { typed }) => {
            let again = sent.beyond(typed);
            if !again.is_empty() && handle.send_data(&again).await.is_err() {
                return End::Lost;
            }
        }
        Ok(Response::Ready) => {}
        Ok(Response::PaneEnded(ended)) => {
            let mut out = std::io::stdout();
            if let Some(screen) = &ended.screen {
                let _ = std::io::Write::write_all(&mut out, screen.as_bytes());
            }
            let _ = std::io::Write::flush(&mut out);
            // An exited pane ends the attach as its end would have; one lost
            // to a restart is a failure to attach.
            let code = ended.status.map_or(EXIT_FAILED, |s| s.shell_code());
            return End::Code(code, Some(format!("\r\n{}", ended.message)));
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
                    sent.keep(&send);
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
                if let Some((rows, cols)) = tty::terminal_size(std::io::stdin()) {
                    *size = Some((rows, cols));
                    let _ = link.request(Request::ResizePane { pane: pane.into(), rows, cols }).await;
                }
            }
        }
    }
}
