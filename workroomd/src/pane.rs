//! One pane: a pty whose master the daemon holds, the program on its slave
//! (a session leader with the pty as its controlling terminal), the
//! terminal model (`workroomd::term`) fed by the pane's only reader, and
//! the clients watching.
//!
//! Tasks per pane (zellij's shape): one reader that feeds the model and
//! every client and notices the program's end, one writer for typed input
//! (a program that is not reading its stdin must never stall the reader).
//!
//! Clients get every byte, in order: the reader appends each chunk to every
//! client's queue and never waits (the pane is never held back by a
//! watcher, nor one watcher by another); each client's task sends its queue
//! on at the pace its link allows. A client whose queue passes
//! [`CLIENT_BOUND`] stops receiving: the bytes are counted as skipped
//! (they stay in the model, and its history as far as it holds them), and
//! once its queue has drained it gets a marker line saying how much was
//! skipped and how many of those lines the history still holds, and a
//! paint of the screen as it is then. Queues and the model change under one lock,
//! so a paint is exactly the state before the next queued chunk.
//!
//! The window size follows the latest client (tmux's `window-size
//! latest`): the one that most recently attached, typed or resized; when it
//! leaves, the next latest one's size applies.
//!
//! When the program exits the pane stays, as tmux's `remain-on-exit`: a
//! status line (`[exited with status 3]`) is written into its model and to
//! its clients, who then get the end; the model stays readable (capture,
//! wait, the paint an attach would get) until the pane is killed or
//! replaced. An exited pane keeps its model, whose history is capped like
//! any pane's, and its pty master: one fd and at most its history's bytes
//! each, until someone removes it.

use crate::spawn;
use crate::typists::{Leave, Typists};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, watch, Notify};
use workroomd::proto::{ExitStatus, PaneInfo};
use workroomd::term::{Limits, Paint, Terminal};

/// Bytes read from a pty at once: a flood costs few wake-ups and frames.
const READ_CHUNK: usize = 64 * 1024;
/// Bytes queued for one client before it is skipped (the pane's bound on
/// a slow client; its link's stream window holds up to 8 MiB more in
/// flight). A few MiB: a client that far behind is seconds behind, and 16
/// panes with a slow client each still fit in memory.
pub const CLIENT_BOUND: usize = 4 << 20;
/// Bytes a client's task takes from its queue for one send.
const SEND_BATCH: usize = 256 * 1024;
/// Input chunks queued for the writer; a client typing into a pane that does
/// not read waits here (backpressure on that client only). A client keeps
/// what it sent for as much as this queue and its stream's window can hold
/// unwritten (`tty::KEYS_KEPT`): change both together.
const INPUT_QUEUE: usize = 64;
/// A program's end is noticed on SIGCHLD; this poll is a safety net for a
/// signal that arrived before the listener existed (a pane adopted after a
/// hand-off whose shell ended during the exec).
const EXIT_POLL: Duration = Duration::from_millis(500);

// Set in every pane's environment; `workroomd::agents` names it.
use workroomd::agents::PANE_ENV;

pub const DEFAULT_ROWS: u16 = 24;
pub const DEFAULT_COLS: u16 = 80;

static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);

#[derive(Debug, thiserror::Error)]
pub enum PaneError {
    #[error("cannot open a pty")]
    OpenPty(#[source] std::io::Error),
    #[error(transparent)]
    Spawn(#[from] spawn::SpawnError),
    #[error("cannot run {program}")]
    Run {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot watch the pty of pane {name}")]
    Watch {
        name: String,
        #[source]
        source: std::io::Error,
    },
}

pub struct Pane {
    pub name: String,
    pub command: Vec<String>,
    pub pid: i32,
    pub created_unix_ms: u64,
    pub limits: Limits,
    master: Arc<AsyncFd<OwnedFd>>,
    input: mpsc::Sender<Typed>,
    /// What each client that named itself typed, taken and written
    /// (shared with the writer task).
    typists: Arc<Mutex<Typists>>,
    inner: Mutex<Inner>,
    /// Counts changes of the model; `capture` waits on it.
    changes: watch::Sender<u64>,
}

struct Inner {
    term: Terminal,
    clients: Vec<Client>,
    /// The screen changed since it was last saved.
    dirty: bool,
    ended: Option<ExitStatus>,
    /// Orders the clients' activity, for "the latest client".
    clock: u64,
}

struct Client {
    id: u64,
    /// The daemon connection it came on; a resize on that connection is its.
    conn: u64,
    size: Option<(u16, u16)>,
    active: u64,
    queue: VecDeque<Arc<[u8]>>,
    queued: usize,
    skipped: u64,
    /// The history's line count when the skip began: the marker says how
    /// many of the lines that scrolled into it since are still there (it may
    /// count up to a screen the client was shown before the skip).
    skip_from: u64,
    wake: Arc<Notify>,
}

/// Bytes for the pane's writer, and the typist they are counted for.
struct Typed {
    typist: Option<u64>,
    bytes: Vec<u8>,
}

/// What an attaching client gets: its id, what wakes its task, and the
/// paint that comes before the first queued chunk.
pub struct Attachment {
    pub id: u64,
    pub wake: Arc<Notify>,
    pub paint: Vec<u8>,
}

/// What a client's task sends next.
pub enum Next {
    Bytes(Vec<u8>),
    /// It was skipped: the marker and a paint.
    Resync(Vec<u8>),
    /// The program ended; every byte before its end was taken.
    Ended(ExitStatus),
    /// The client is no longer registered.
    Gone,
}

/// How to start a pane's program.
pub struct Spawn<'a> {
    pub argv: &'a [String],
    pub user: Option<&'a workroomd::users::ResolvedUser>,
    pub env: &'a std::collections::BTreeMap<String, String>,
    pub cwd: Option<&'a str>,
    /// Run `argv` through the user's login shell, so its profile shapes
    /// the environment as it does an interactive pane's.
    pub login_shell: bool,
    pub rows: u16,
    pub cols: u16,
    pub limits: Limits,
    /// Bytes the model shows before the program's first output (the last
    /// screen of the pane this one replaces, a note about the shell).
    pub preamble: &'a [u8],
}

impl Pane {
    /// Opens a pty and starts the program on it. Must run inside the runtime.
    pub fn spawn(name: &str, spec: Spawn<'_>) -> Result<Arc<Pane>, PaneError> {
        let (master, slave) = open_pty(spec.rows, spec.cols).map_err(|e| PaneError::OpenPty(e.into()))?;
        if let Some(u) = spec.user {
            // What grantpt did once: the user owns its terminal, so programs
            // that reopen it (`tty`, ssh, sudo) can.
            let _ = rustix::fs::fchown(&slave, Some(rustix::fs::Uid::from_raw(u.uid)), None);
        }
        let mut cmd = spawn::command(spec.argv, spec.user, spec.env, spec.cwd, spec.login_shell)?;
        cmd.env("TERM", spec.env.get("TERM").map(String::as_str).unwrap_or("xterm-256color"));
        // Which pane a process runs in, for tools (and `workroom agents`)
        // that look at a process's environment; set last, so no request
        // can name another pane.
        cmd.env(PANE_ENV, name);
        let std_cmd = cmd.as_std_mut();
        let dup = |fd: &OwnedFd| fd.try_clone().map_err(PaneError::OpenPty);
        std_cmd
            .stdin(std::process::Stdio::from(dup(&slave)?))
            .stdout(std::process::Stdio::from(dup(&slave)?))
            .stderr(std::process::Stdio::from(dup(&slave)?));
        // SAFETY: the hook makes one raw syscall (ioctl), async-signal-safe.
        // spawn::command's own hook ran first (setsid, then the user's ids),
        // so this session leader takes the pty as its controlling terminal:
        // login_tty's semantics.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(std_cmd, || {
                rustix::process::ioctl_tiocsctty(rustix::stdio::stdin()).map_err(std::io::Error::from)
            });
        }
        // Spawned by std, not tokio: the daemon reaps panes itself (waitpid
        // on the pid) so that a pane adopted after a hand-off, which tokio
        // never started, is reaped the same way.
        let child = std_cmd.spawn().map_err(|source| PaneError::Run { program: spec.argv[0].clone(), source })?;
        drop(slave);
        let pid = child.id() as i32;
        drop(child);
        let adopted = Adopted {
            command: spec.argv.to_vec(),
            pid,
            created_unix_ms: now_ms(),
            rows: spec.rows,
            cols: spec.cols,
            limits: spec.limits,
            exited: None,
            typed: Vec::new(),
        };
        Pane::adopt(name, adopted, master, spec.preamble)
            .map_err(|source| PaneError::Watch { name: name.to_string(), source })
    }

    /// A pane around a running program and its pty master (after `spawn`,
    /// or from a hand-off table); `preamble` is fed to the model first.
    pub fn adopt(name: &str, a: Adopted, master: OwnedFd, preamble: &[u8]) -> std::io::Result<Arc<Pane>> {
        rustix::io::ioctl_fionbio(&master, true)?;
        // SAFETY: the pane owns the fd alone and it lives in the AsyncFd until
        // the pane is dropped (or crosses a hand-off, which is an exec).
        let master = Arc::new(unsafe { AsyncFd::register(master) }?);
        let mut term = Terminal::new(a.rows.max(1), a.cols.max(1), a.limits);
        term.feed(preamble);
        let (input, input_rx) = mpsc::channel(INPUT_QUEUE);
        let typists = Arc::new(Mutex::new(Typists::adopt(&a.typed)));
        let pane = Arc::new(Pane {
            name: name.to_string(),
            command: a.command,
            pid: a.pid,
            created_unix_ms: a.created_unix_ms,
            limits: a.limits,
            master: master.clone(),
            input,
            typists: typists.clone(),
            inner: Mutex::new(Inner { term, clients: Vec::new(), dirty: true, ended: a.exited, clock: 0 }),
            changes: watch::Sender::new(0),
        });
        tokio::spawn(write_input(master, input_rx, typists));
        Ok(pane)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        workroomd::locks::lock(&self.inner)
    }

    /// Runs the pane's reader until its program ended; returns how it
    /// ended. A pane adopted as exited returns at once: its pid may be
    /// another process's by now, so it is never waited for again.
    pub async fn run(self: Arc<Pane>) -> ExitStatus {
        if let Some(status) = self.exit_status() {
            return status;
        }
        let status = read_until_exit(&self).await;
        let line = status_line(&status, self.lock().term.cursor().1);
        self.output(&line);
        let mut inner = self.lock();
        inner.ended = Some(status);
        // Each client sends what it holds, then the end.
        for client in &inner.clients {
            client.wake.notify_one();
        }
        drop(inner);
        self.changes.send_modify(|n| *n += 1);
        status
    }

    fn output(&self, bytes: &[u8]) {
        let mut inner = self.lock();
        let pushed = inner.term.history_pushed();
        inner.term.feed(bytes);
        inner.dirty = true;
        let chunk: Arc<[u8]> = Arc::from(bytes);
        for c in &mut inner.clients {
            if c.skipped > 0 {
                c.skipped += bytes.len() as u64;
            } else if c.queued + bytes.len() > CLIENT_BOUND {
                c.skipped = bytes.len() as u64;
                c.skip_from = pushed;
            } else {
                c.queue.push_back(chunk.clone());
                c.queued += bytes.len();
            }
            c.wake.notify_one();
        }
        drop(inner);
        self.changes.send_modify(|n| *n += 1);
    }

    /// Registers a client (of connection `conn`, with its window size); it
    /// becomes the latest, so the pane takes its size before the paint.
    pub fn attach(&self, conn: u64, size: Option<(u16, u16)>, history: bool) -> Option<Attachment> {
        let mut inner = self.lock();
        if inner.ended.is_some() {
            return None;
        }
        inner.clock += 1;
        let id = NEXT_CLIENT.fetch_add(1, Ordering::Relaxed);
        let wake = Arc::new(Notify::new());
        let size = size.filter(|(r, c)| *r > 0 && *c > 0);
        let active = inner.clock;
        inner.clients.push(Client {
            id,
            conn,
            size,
            active,
            queue: VecDeque::new(),
            queued: 0,
            skipped: 0,
            skip_from: 0,
            wake: wake.clone(),
        });
        let _ = self.apply_latest(&mut inner);
        let paint = inner.term.paint(Paint::Attach { history });
        Some(Attachment { id, wake, paint })
    }

    /// What client `id` sends next; `None` when there is nothing yet (wait
    /// on its `wake`).
    pub fn next(&self, id: u64) -> Option<Next> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let Some(c) = inner.clients.iter_mut().find(|c| c.id == id) else { return Some(Next::Gone) };
        if !c.queue.is_empty() {
            let mut out = Vec::with_capacity(c.queued.min(SEND_BATCH));
            while let Some(chunk) = c.queue.front() {
                if !out.is_empty() && out.len() + chunk.len() > SEND_BATCH {
                    break;
                }
                out.extend_from_slice(chunk);
                c.queued -= chunk.len();
                c.queue.pop_front();
            }
            return Some(Next::Bytes(out));
        }
        if c.skipped > 0 {
            let skipped = std::mem::take(&mut c.skipped);
            let lines = inner.term.history_pushed() - c.skip_from;
            return Some(Next::Resync(inner.term.paint(Paint::Resync { skipped, lines })));
        }
        inner.ended.map(Next::Ended)
    }

    pub fn detach(&self, id: u64) {
        let mut inner = self.lock();
        let before = inner.clients.len();
        inner.clients.retain(|c| c.id != id);
        if inner.clients.len() != before {
            let _ = self.apply_latest(&mut inner);
        }
    }

    /// An attach of `typist` ([`crate::typists`]): what was taken from
    /// it before, and its leave to type.
    pub fn attach_typist(&self, typist: workroomd::proto::Typist) -> (u64, Leave) {
        workroomd::locks::lock(&self.typists).attach(typist.id, typist.sent)
    }

    /// `typist` detached for good.
    pub fn forget_typist(&self, typist: u64) {
        workroomd::locks::lock(&self.typists).forget(typist);
    }

    /// Each typist with the bytes written for it, for a hand-off.
    pub fn typists_written(&self) -> Vec<(u64, u64)> {
        workroomd::locks::lock(&self.typists).written()
    }

    /// Types into the pane; a client typing becomes the latest. Under a
    /// typist's `leave` the bytes are counted, and refused (false) once a
    /// later attach of that typist took over.
    pub async fn type_in(&self, client: Option<u64>, leave: Option<Leave>, bytes: Vec<u8>) -> bool {
        if let Some(leave) = leave {
            if !workroomd::locks::lock(&self.typists).take(leave, bytes.len()) {
                return false;
            }
        }
        if let Some(id) = client {
            let mut inner = self.lock();
            let latest = inner.clients.iter().max_by_key(|c| c.active).map(|c| c.id);
            if latest != Some(id) {
                inner.clock += 1;
                let clock = inner.clock;
                if let Some(c) = inner.clients.iter_mut().find(|c| c.id == id) {
                    c.active = clock;
                }
                let _ = self.apply_latest(&mut inner);
            }
        }
        let _ = self.input.send(Typed { typist: leave.map(|l| l.typist), bytes }).await;
        true
    }

    /// A new window size from connection `conn`: its client's, if it has
    /// one here (which then is the latest), else the pane's directly.
    pub fn resize(&self, conn: u64, rows: u16, cols: u16) -> std::io::Result<()> {
        if rows == 0 || cols == 0 {
            return Ok(());
        }
        let mut inner = self.lock();
        inner.clock += 1;
        let clock = inner.clock;
        match inner.clients.iter_mut().find(|c| c.conn == conn) {
            Some(c) => {
                c.size = Some((rows, cols));
                c.active = clock;
                self.apply_latest(&mut inner)
            }
            None => self.set_size(&mut inner, rows, cols),
        }
    }

    fn apply_latest(&self, inner: &mut Inner) -> std::io::Result<()> {
        let latest = inner.clients.iter().filter(|c| c.size.is_some()).max_by_key(|c| c.active).and_then(|c| c.size);
        match latest {
            Some((rows, cols)) => self.set_size(inner, rows, cols),
            None => Ok(()),
        }
    }

    fn set_size(&self, inner: &mut Inner, rows: u16, cols: u16) -> std::io::Result<()> {
        if inner.term.size() == (rows, cols) {
            return Ok(());
        }
        set_winsize(self.master.get_ref(), rows, cols)?;
        inner.term.resize(rows, cols);
        inner.dirty = true;
        self.changes.send_modify(|n| *n += 1);
        Ok(())
    }

    pub fn info(&self) -> PaneInfo {
        let inner = self.lock();
        let (rows, cols) = inner.term.size();
        PaneInfo {
            name: self.name.clone(),
            command: self.command.clone(),
            pid: self.pid as u32,
            rows,
            cols,
            clients: inner.clients.len() as u32,
            created_unix_ms: self.created_unix_ms,
            history: inner.term.history_lines() as u64,
            exited: inner.ended,
        }
    }

    /// How its program ended; `None` while it runs.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.lock().ended
    }

    /// The screen as lines that repaint it (what is saved, and what an
    /// attach to an exited pane is shown).
    pub fn screen(&self) -> Vec<u8> {
        self.lock().term.screen_lines()
    }

    /// The screen as lines, if it changed since last asked (for saving).
    pub fn take_dirty_screen(&self) -> Option<Vec<u8>> {
        let mut inner = self.lock();
        std::mem::take(&mut inner.dirty).then(|| inner.term.screen_lines())
    }

    /// Everything the model holds as bytes that rebuild it, for a hand-off.
    pub fn paint_all(&self) -> Vec<u8> {
        self.lock().term.paint(Paint::Attach { history: true })
    }

    /// The model's text now and the change count it belongs to.
    pub fn capture(&self, lines: Option<usize>, escapes: bool, history: bool) -> (u64, Vec<u8>) {
        let inner = self.lock();
        (*self.changes.borrow(), inner.term.capture(lines, escapes, history))
    }

    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    pub fn size(&self) -> (u16, u16) {
        self.lock().term.size()
    }

    pub fn master_fd(&self) -> RawFd {
        self.master.get_ref().as_raw_fd()
    }

    /// Hangs up the pane's session, as closing a terminal window would.
    pub fn hang_up(&self) {
        self.signal(nix::sys::signal::Signal::SIGHUP);
    }

    pub fn kill(&self) {
        self.signal(nix::sys::signal::Signal::SIGKILL);
    }

    /// Signals the pane's session, unless its program was reaped: its
    /// pid may name another process group by now.
    fn signal(&self, signal: nix::sys::signal::Signal) {
        if self.exit_status().is_none() {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(self.pid), signal);
        }
    }
}

/// What a pane is made of besides its pty, for [`Pane::adopt`].
pub struct Adopted {
    pub command: Vec<String>,
    pub pid: i32,
    pub created_unix_ms: u64,
    pub rows: u16,
    pub cols: u16,
    pub limits: Limits,
    /// Set for a pane whose program had exited before a hand-off.
    pub exited: Option<ExitStatus>,
    /// Its typists and the bytes written for each, from a hand-off.
    pub typed: Vec<(u64, u64)>,
}

/// The line written into a pane when its program ends, on a line of its
/// own (after the cursor's, when the program left it mid-line), in the
/// default pen, ending with a newline so a shell prompt after an attach
/// that ends here starts on a fresh line.
pub fn status_line(status: &ExitStatus, cursor_col: u16) -> Vec<u8> {
    let fresh = if cursor_col > 0 { "\r\n" } else { "" };
    format!("\x1b[0m{fresh}[{}]\r\n", status.summary()).into_bytes()
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
                match guard.try_io(|fd| rustix::io::read(fd.get_ref(), &mut buf[..]).map_err(std::io::Error::from)) {
                    Ok(Ok(0)) | Ok(Err(_)) => eof = true, // EIO: every slave holder closed it
                    Ok(Ok(n)) => {
                        pane.output(&buf[..n]);
                        // A short read emptied the pty: wait for more rather
                        // than read again to learn so, which would come
                        // between an echo and its client (the clients' tasks
                        // run once this one waits).
                        if n < buf.len() {
                            guard.clear_ready();
                        }
                    }
                    Err(_would_block) => {}
                }
            }
            _ = async { match sigchld.as_mut() { Some(s) => { s.recv().await; } None => std::future::pending().await } } => {}
            _ = poll.tick() => {}
        }
    }
}

fn drain(pane: &Pane, buf: &mut [u8]) {
    while let Ok(n) = rustix::io::read(pane.master.get_ref(), &mut buf[..]) {
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

async fn write_input(master: Arc<AsyncFd<OwnedFd>>, mut rx: mpsc::Receiver<Typed>, typists: Arc<Mutex<Typists>>) {
    while let Some(Typed { typist, bytes }) = rx.recv().await {
        let mut at = 0;
        while at < bytes.len() {
            let Ok(mut guard) = master.writable().await else { return };
            match guard.try_io(|fd| rustix::io::write(fd.get_ref(), &bytes[at..]).map_err(std::io::Error::from)) {
                Ok(Ok(n)) => {
                    at += n;
                    // Counted per write: a hand-off between two parts of a
                    // chunk carries what reached the pty, to the byte.
                    if let Some(typist) = typist {
                        workroomd::locks::lock(&typists).wrote(typist, n);
                    }
                }
                Ok(Err(_)) => return,
                Err(_would_block) => {}
            }
        }
    }
}

/// A pty pair through rustix's direct syscalls rather than `openpty(3)`: a
/// static glibc's openpty may consult NSS for the tty group, which cannot
/// work here. The slave is opened through the master (`TIOCGPTPEER`), so
/// no `/dev/pts` path is looked up; `ptsname` is the fallback for kernels
/// before 4.13.
fn open_pty(rows: u16, cols: u16) -> rustix::io::Result<(OwnedFd, OwnedFd)> {
    use rustix::pty::{grantpt, ioctl_tiocgptpeer, openpt, ptsname, unlockpt, OpenptFlags};
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let master = openpt(flags)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let slave = match ioctl_tiocgptpeer(&master, flags) {
        Ok(slave) => slave,
        Err(_) => {
            let name = ptsname(&master, Vec::new())?;
            use rustix::fs::{Mode, OFlags};
            rustix::fs::open(name.as_c_str(), OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC, Mode::empty())?
        }
    };
    set_winsize(&master, rows, cols)
        .map_err(|e| rustix::io::Errno::from_io_error(&e).unwrap_or(rustix::io::Errno::IO))?;
    Ok((master, slave))
}

/// A pty pair for tests of panes adopted without a program.
#[cfg(test)]
pub fn open_pty_for_tests() -> (OwnedFd, OwnedFd) {
    open_pty(DEFAULT_ROWS, DEFAULT_COLS).expect("a pty")
}

fn set_winsize(fd: &OwnedFd, rows: u16, cols: u16) -> std::io::Result<()> {
    let ws = rustix::termios::Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
    rustix::termios::tcsetwinsize(fd, ws).map_err(std::io::Error::from)
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_starts_a_line_of_its_own_and_names_the_status_or_signal() {
        let exited = ExitStatus { code: Some(3), signal: None };
        assert_eq!(status_line(&exited, 0), b"\x1b[0m[exited with status 3]\r\n");
        let killed = ExitStatus { code: None, signal: Some(15) };
        assert_eq!(status_line(&killed, 7), b"\x1b[0m\r\n[killed by signal 15 (SIGTERM)]\r\n");
        let mut term = Terminal::new(4, 40, Limits::default());
        term.feed(b"got-x");
        term.feed(&status_line(&exited, term.cursor().1));
        assert_eq!(term.text(), "got-x\n[exited with status 3]\n");
    }
}
