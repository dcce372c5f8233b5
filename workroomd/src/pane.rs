//! One pane: a pty whose master the daemon holds, the program on its slave
//! (a session leader with the pty as its controlling terminal: `login_tty`),
//! a screen model fed by the pane's only reader, and the clients watching.
//!
//! Tasks per pane (zellij's shape): one reader that feeds the screen and
//! every client and notices the program's end, one writer for typed input
//! (a program that is not reading its stdin must never stall the reader).
//!
//! Slow clients: each client has a bounded queue. When it is full the reader
//! does not wait (a pane must never be held back by a watcher, nor one
//! watcher by another): it marks the client lagged and goes on; the client's
//! task then throws its queue away and sends a repaint of the current screen
//! instead (drop-and-repaint). The reader pushes to queues under the screen
//! lock and the repaint is taken under it too, so a repaint is exactly the
//! state before the next queued chunk.

use crate::spawn;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;
use workroomd::proto::{ExitStatus, PaneInfo};

/// Bytes read from a pty at once.
const READ_CHUNK: usize = 16 * 1024;
/// Chunks queued per client before it is marked lagged (≤ 1 MiB per client:
/// a watcher that far behind gets a repaint, which is all it can show anyway).
const CLIENT_QUEUE: usize = 64;
/// Input chunks queued for the writer; a client typing into a pane that does
/// not read waits here (backpressure on that client only).
const INPUT_QUEUE: usize = 64;
/// Lines kept above the screen: none. The repaint shows the screen only, and
/// nothing else reads scrollback yet, while it cost the most memory: 200 rows
/// made 16 panes at 200x50 hold 30 MiB (bench/run; budget 16 MiB), each vt100
/// cell being ~36 bytes. When a scroll-back view comes, add it capped in bytes.
const SCROLLBACK_ROWS: usize = 0;
/// A program's end is noticed on SIGCHLD; this poll is a safety net for a
/// signal that arrived before the listener existed (a pane adopted after a
/// hand-off whose shell ended during the exec).
const EXIT_POLL: Duration = Duration::from_millis(500);

pub const DEFAULT_ROWS: u16 = 24;
pub const DEFAULT_COLS: u16 = 80;

static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);

pub struct Pane {
    pub name: String,
    pub command: Vec<String>,
    pub pid: i32,
    pub created_unix_ms: u64,
    master: Arc<AsyncFd<OwnedFd>>,
    input: mpsc::Sender<Vec<u8>>,
    inner: Mutex<Inner>,
}

struct Inner {
    parser: vt100::Parser,
    clients: Vec<Client>,
    /// The screen changed since it was last saved.
    dirty: bool,
    ended: Option<ExitStatus>,
}

struct Client {
    id: u64,
    tx: mpsc::Sender<Vec<u8>>,
    lagged: Arc<AtomicBool>,
}

/// What an attaching client gets: its queue, its lag flag and the repaint
/// that comes before the first queued chunk.
pub struct Attachment {
    pub id: u64,
    pub rx: mpsc::Receiver<Vec<u8>>,
    pub lagged: Arc<AtomicBool>,
    pub repaint: Vec<u8>,
}

/// How to start a pane's program.
pub struct Spawn<'a> {
    pub argv: &'a [String],
    pub user: Option<&'a workroomd::users::ResolvedUser>,
    pub env: &'a std::collections::BTreeMap<String, String>,
    pub cwd: Option<&'a str>,
    pub rows: u16,
    pub cols: u16,
}

impl Pane {
    /// Opens a pty and starts the program on it. Must run inside the runtime.
    pub fn spawn(name: &str, spec: Spawn<'_>) -> Result<Arc<Pane>, String> {
        let (master, slave) = open_pty(spec.rows, spec.cols).map_err(|e| format!("cannot open a pty: {e}"))?;
        if let Some(u) = spec.user {
            // What grantpt does: the user owns its terminal, so programs that
            // reopen it (`tty`, ssh, sudo) can.
            let _ = nix::unistd::fchown(&slave, Some(u.uid.into()), None);
        }
        let mut cmd = spawn::command(spec.argv, spec.user, spec.env, spec.cwd, false)?;
        cmd.env("TERM", spec.env.get("TERM").map(String::as_str).unwrap_or("xterm-256color"));
        let std_cmd = cmd.as_std_mut();
        let dup = |fd: &OwnedFd| fd.try_clone().map_err(|e| format!("cannot duplicate the pty: {e}"));
        std_cmd
            .stdin(std::process::Stdio::from(dup(&slave)?))
            .stdout(std::process::Stdio::from(dup(&slave)?))
            .stderr(std::process::Stdio::from(dup(&slave)?));
        // SAFETY: only ioctl, async-signal-safe. spawn::command's own hook ran
        // first (setsid, then the user's ids), so this session leader takes the
        // pty as its controlling terminal: login_tty's semantics.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(std_cmd, || {
                if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        // Spawned by std, not tokio: the daemon reaps panes itself (waitpid
        // on the pid) so that a pane adopted after a hand-off, which tokio
        // never started, is reaped the same way.
        let child = std_cmd.spawn().map_err(|e| format!("cannot run {}: {e}", spec.argv[0]))?;
        drop(slave);
        let pid = child.id() as i32;
        drop(child);
        let pane = Pane::adopt(name, spec.argv.to_vec(), pid, master, now_ms(), spec.rows, spec.cols, None)
            .map_err(|e| format!("cannot watch the pty: {e}"))?;
        Ok(pane)
    }

    /// A pane around a running program and its pty master (after `spawn`,
    /// or from a hand-off table); `screen` repaints the model first.
    #[allow(clippy::too_many_arguments)]
    pub fn adopt(
        name: &str,
        command: Vec<String>,
        pid: i32,
        master: OwnedFd,
        created_unix_ms: u64,
        rows: u16,
        cols: u16,
        screen: Option<&[u8]>,
    ) -> std::io::Result<Arc<Pane>> {
        set_nonblocking(master.as_raw_fd())?;
        // SAFETY: the pane owns the fd alone and it lives in the AsyncFd until
        // the pane is dropped (or crosses a hand-off, which is an exec).
        let master = Arc::new(unsafe { AsyncFd::register(master) }.map_err(std::io::Error::from)?);
        let mut parser = vt100::Parser::new(rows.max(1), cols.max(1), SCROLLBACK_ROWS);
        if let Some(screen) = screen {
            parser.process(screen);
        }
        let (input, input_rx) = mpsc::channel(INPUT_QUEUE);
        let pane = Arc::new(Pane {
            name: name.to_string(),
            command,
            pid,
            created_unix_ms,
            master: master.clone(),
            input,
            inner: Mutex::new(Inner { parser, clients: Vec::new(), dirty: true, ended: None }),
        });
        tokio::spawn(write_input(master, input_rx));
        Ok(pane)
    }

    /// Runs the pane's reader until its program ended; returns how it ended.
    pub async fn run(self: Arc<Pane>) -> ExitStatus {
        let status = read_until_exit(&self).await;
        let mut inner = self.inner.lock().expect("pane lock");
        inner.ended = Some(status);
        // Dropping the senders ends every client's queue after what it holds;
        // the client then sends Exit and Eof.
        inner.clients.clear();
        status
    }

    fn output(&self, bytes: &[u8]) {
        let mut inner = self.inner.lock().expect("pane lock");
        inner.parser.process(bytes);
        inner.dirty = true;
        inner.clients.retain(|c| match c.tx.try_send(bytes.to_vec()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                c.lagged.store(true, Ordering::Release);
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        });
    }

    /// Registers a client; its repaint and its queue start at the same point.
    pub fn attach(&self) -> Option<Attachment> {
        let mut inner = self.inner.lock().expect("pane lock");
        if inner.ended.is_some() {
            return None;
        }
        let (tx, rx) = mpsc::channel(CLIENT_QUEUE);
        let lagged = Arc::new(AtomicBool::new(false));
        let id = NEXT_CLIENT.fetch_add(1, Ordering::Relaxed);
        inner.clients.push(Client { id, tx, lagged: lagged.clone() });
        Some(Attachment { id, rx, lagged, repaint: repaint(&inner.parser) })
    }

    /// For a lagged client: drops its queue and returns the current screen.
    pub fn resync(&self, attachment: &mut Attachment) -> Vec<u8> {
        let inner = self.inner.lock().expect("pane lock");
        while attachment.rx.try_recv().is_ok() {}
        attachment.lagged.store(false, Ordering::Release);
        repaint(&inner.parser)
    }

    pub fn detach(&self, id: u64) {
        self.inner.lock().expect("pane lock").clients.retain(|c| c.id != id);
    }

    pub fn ended(&self) -> Option<ExitStatus> {
        self.inner.lock().expect("pane lock").ended
    }

    pub async fn type_in(&self, bytes: Vec<u8>) {
        let _ = self.input.send(bytes).await;
    }

    pub fn resize(&self, rows: u16, cols: u16) -> std::io::Result<()> {
        if rows == 0 || cols == 0 {
            return Ok(());
        }
        let mut inner = self.inner.lock().expect("pane lock");
        if inner.parser.screen().size() == (rows, cols) {
            return Ok(());
        }
        set_winsize(self.master.get_ref().as_raw_fd(), rows, cols)?;
        inner.parser.set_size(rows, cols);
        inner.dirty = true;
        Ok(())
    }

    pub fn info(&self) -> PaneInfo {
        let inner = self.inner.lock().expect("pane lock");
        let (rows, cols) = inner.parser.screen().size();
        PaneInfo {
            name: self.name.clone(),
            command: self.command.clone(),
            pid: self.pid as u32,
            rows,
            cols,
            clients: inner.clients.len() as u32,
            created_unix_ms: self.created_unix_ms,
        }
    }

    /// The screen as bytes that repaint it, if it changed since last asked.
    pub fn take_dirty_screen(&self) -> Option<Vec<u8>> {
        let mut inner = self.inner.lock().expect("pane lock");
        std::mem::take(&mut inner.dirty).then(|| repaint(&inner.parser))
    }

    /// The screen now, for a hand-off.
    pub fn screen(&self) -> Vec<u8> {
        repaint(&self.inner.lock().expect("pane lock").parser)
    }

    pub fn master_fd(&self) -> RawFd {
        self.master.get_ref().as_raw_fd()
    }

    /// Hangs up the pane's session, as closing a terminal window would.
    pub fn hang_up(&self) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(self.pid), nix::sys::signal::Signal::SIGHUP);
    }

    pub fn kill(&self) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(self.pid), nix::sys::signal::Signal::SIGKILL);
    }
}

/// Clear, home, then the screen with its attributes and the cursor where it
/// was, plus input modes (bracketed paste, application keys) and the title.
fn repaint(parser: &vt100::Parser) -> Vec<u8> {
    let mut out = b"\x1b[H\x1b[2J".to_vec();
    out.extend_from_slice(&parser.screen().state_formatted());
    out
}

async fn read_until_exit(pane: &Pane) -> ExitStatus {
    let mut sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()).ok();
    let mut poll = tokio::time::interval(EXIT_POLL);
    let mut buf = vec![0u8; READ_CHUNK];
    let mut eof = false;
    loop {
        if let Some(status) = try_wait(pane.pid) {
            // Output written just before the end is still in the pty.
            drain(pane, &mut buf);
            return status;
        }
        tokio::select! {
            ready = pane.master.readable(), if !eof => {
                let Ok(mut guard) = ready else { eof = true; continue };
                match guard.try_io(|fd| read_fd(fd.get_ref().as_raw_fd(), &mut buf)) {
                    Ok(Ok(0)) | Ok(Err(_)) => eof = true, // EIO: every slave holder closed it
                    Ok(Ok(n)) => pane.output(&buf[..n]),
                    Err(_would_block) => {}
                }
            }
            _ = async { match sigchld.as_mut() { Some(s) => { s.recv().await; } None => std::future::pending().await } } => {}
            _ = poll.tick() => {}
        }
    }
}

fn drain(pane: &Pane, buf: &mut [u8]) {
    while let Ok(n) = read_fd(pane.master.get_ref().as_raw_fd(), buf) {
        if n == 0 {
            break;
        }
        pane.output(&buf[..n]);
    }
}

/// The pane's child's status if it ended (reaping it).
pub fn try_wait(pid: i32) -> Option<ExitStatus> {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    match waitpid(nix::unistd::Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::Exited(_, code)) => Some(ExitStatus { code: Some(code), signal: None }),
        Ok(WaitStatus::Signaled(_, signal, _)) => Some(ExitStatus { code: None, signal: Some(signal as i32) }),
        Ok(_) => None,
        // ECHILD: not our child (any more); nothing will ever tell its status.
        Err(_) => Some(ExitStatus { code: None, signal: None }),
    }
}

async fn write_input(master: Arc<AsyncFd<OwnedFd>>, mut rx: mpsc::Receiver<Vec<u8>>) {
    while let Some(bytes) = rx.recv().await {
        let mut at = 0;
        while at < bytes.len() {
            let Ok(mut guard) = master.writable().await else { return };
            match guard.try_io(|fd| write_fd(fd.get_ref().as_raw_fd(), &bytes[at..])) {
                Ok(Ok(n)) => at += n,
                Ok(Err(_)) => return,
                Err(_would_block) => {}
            }
        }
    }
}

fn read_fd(fd: RawFd, buf: &mut [u8]) -> std::io::Result<usize> {
    // SAFETY: the buffer is valid for its length.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

fn write_fd(fd: RawFd, buf: &[u8]) -> std::io::Result<usize> {
    // SAFETY: the buffer is valid for its length.
    let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `/dev/ptmx` by hand rather than `openpty(3)`: a static glibc's openpty
/// may consult NSS for the tty group, which cannot work here; devpts does the
/// ownership itself.
fn open_pty(rows: u16, cols: u16) -> std::io::Result<(OwnedFd, OwnedFd)> {
    let check = |rc: libc::c_int| if rc < 0 { Err(std::io::Error::last_os_error()) } else { Ok(rc) };
    // SAFETY: plain syscalls on fds we own; the path is NUL-terminated.
    unsafe {
        let master = check(libc::open(c"/dev/ptmx".as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC))?;
        let master = OwnedFd::from_raw_fd(master);
        let unlock: libc::c_int = 0;
        check(libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock))?;
        let mut number: libc::c_uint = 0;
        check(libc::ioctl(master.as_raw_fd(), libc::TIOCGPTN, &mut number))?;
        let path = std::ffi::CString::new(format!("/dev/pts/{number}")).expect("no NUL");
        let slave = check(libc::open(path.as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC))?;
        let slave = OwnedFd::from_raw_fd(slave);
        set_winsize(master.as_raw_fd(), rows, cols)?;
        Ok((master, slave))
    }
}

fn set_winsize(fd: RawFd, rows: u16, cols: u16) -> std::io::Result<()> {
    let ws = libc::winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCSWINSZ reads a winsize from the pointer.
    if unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, &ws) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn set_nonblocking(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: fcntl on an fd we hold.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
