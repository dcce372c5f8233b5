//! Hand-off: the daemon replaces its own program by a new binary with
//! `execve`, in place: same pid, so it stays the parent of every pane's
//! shell (they are neither orphaned nor hung up), and the pty masters and
//! the listening socket cross the exec as open fds.
//!
//! The sequence:
//! 1. The new binary is asked first: `NEW check-handoff` gets the table on
//!    stdin and must answer `handoff-ok` (it can start, it reads this table
//!    format). A binary that cannot (truncated, wrong architecture, an older
//!    table format) is refused and this daemon goes on serving.
//! 2. The reply `handing_off` is sent, then, without yielding to any other
//!    task (the runtime has one thread, so the panes' readers are parked at
//!    an await with every byte they read already in their screens), the
//!    screens are snapshotted into the table, the fds lose `FD_CLOEXEC`, the
//!    table is written to [`TABLE_PATH`] and named in [`ENV`], and `execve`.
//! 3. The new daemon ([`take_inherited`]) reads and removes the table,
//!    checks each fd is open (and the socket a socket), marks them
//!    close-on-exec again, renames itself to the entrypoint path (so a
//!    container restart runs it), and adopts the panes with their screens.
//!
//! Bytes a pane writes during the exec wait in the kernel's pty buffer; the
//! new reader picks them up, so none are lost. Client connections do close
//! (their fds are close-on-exec): `workroomd attach` reconnects and repaints.
//! Typed input queued but not yet written does not cross; the table
//! carries, per client that named a typist, what was written to the pty,
//! and that client sends the rest again when it reattaches
//! ([`crate::typists`]). Each pane's model crosses as its paint (history,
//! screen, modes),
//! which the new daemon feeds into a fresh model.

use crate::pane::{self, Adopted, Pane};
use crate::state::State;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use workroomd::proto::{ExitStatus, HandOffOutcome, ProgramStatus, Response, StreamError, StreamHandle};
use workroomd::room;
use workroomd::term::Limits;

/// Names the table file for the new daemon.
pub const ENV: &str = "WORKROOMD_HANDOFF";
/// The table's format; a daemon refuses (in its check) a format it cannot read.
pub const FORMAT: u32 = 1;
/// In the root-only run folder: the table names fds and pids.
pub const TABLE_PATH: &str = "/.workroom/run/handoff.json";
/// How long the new binary's check may take; it only parses a small table,
/// so anything near this is a binary that hangs, which must be refused.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the new daemon's `check-handoff` did not accept the table.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("{binary} cannot start")]
    Start { binary: String, source: std::io::Error },
    #[error("the table cannot be written as JSON")]
    Table(#[from] serde_json::Error),
    #[error("its check did not answer within {CHECK_TIMEOUT:?}")]
    Timeout,
    #[error("waiting for its check")]
    Wait(#[source] std::io::Error),
    #[error("{status}: {said}")]
    Refused { status: std::process::ExitStatus, said: String },
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Table {
    pub format: u32,
    pub listener_fd: RawFd,
    /// The entrypoint path the new binary renames itself to.
    #[serde(default)]
    pub install_as: Option<String>,
    #[serde(default)]
    pub program_pid: Option<u32>,
    pub panes: Vec<PaneEntry>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct PaneEntry {
    pub name: String,
    pub command: Vec<String>,
    pub pid: i32,
    pub master_fd: RawFd,
    pub rows: u16,
    pub cols: u16,
    pub created_unix_ms: u64,
    /// Bytes that rebuild the pane's model: its paint, history included
    /// (an older daemon wrote a repaint of the screen alone; both feed).
    pub screen: String,
    /// The history's limits; 0 (an older table) is the default.
    #[serde(default)]
    pub history_lines: usize,
    #[serde(default)]
    pub history_bytes: usize,
    /// How its program ended, for a pane kept after its end; such a pane
    /// is adopted as exited and its pid never waited for or signalled.
    #[serde(default)]
    pub exited: Option<ExitStatus>,
    /// Each typist of the pane and the bytes written for it
    /// ([`crate::typists`]); an older table has none.
    #[serde(default)]
    pub typed: Vec<(u64, u64)>,
}

/// A short digest naming a daemon build; the host computes the same one.
pub fn digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The digest of the binary this process runs.
pub fn own_digest() -> &'static str {
    static OWN: OnceLock<String> = OnceLock::new();
    OWN.get_or_init(|| std::fs::read("/proc/self/exe").map(|b| digest(&b)).unwrap_or_default())
}

/// `workroomd check-handoff`: reads a table on stdin; exit 0 and
/// `handoff-ok` when this binary could take it over.
pub fn check_main() -> i32 {
    let mut text = String::new();
    if let Err(e) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut text) {
        eprintln!("cannot read the hand-off table: {e}");
        return 1;
    }
    match serde_json::from_str::<Table>(&text) {
        Ok(t) if t.format == FORMAT => {
            println!("handoff-ok format {FORMAT} workroomd {}", workroomd::VERSION);
            0
        }
        Ok(t) => {
            eprintln!("workroomd {} reads hand-off format {FORMAT}, not {}", workroomd::VERSION, t.format);
            1
        }
        Err(e) => {
            eprintln!("workroomd {} cannot read the hand-off table: {e}", workroomd::VERSION);
            1
        }
    }
}

pub async fn handle(
    handle: &StreamHandle,
    state: &Arc<State>,
    binary: &str,
    force: bool,
    dry_run: bool,
) -> Result<(), StreamError> {
    let own = own_digest().to_string();
    let reply = |outcome, digest: String| Response::HandOff { outcome, digest, version: workroomd::VERSION.into() };
    if binary.is_empty() {
        return handle.reply(reply(HandOffOutcome::Current, own)).await;
    }
    let bytes = match std::fs::read(binary) {
        Ok(b) => b,
        Err(e) => return handle.reply(Response::error(format!("cannot read the new daemon {binary}: {e}"))).await,
    };
    let new = digest(&bytes);
    drop(bytes);
    if dry_run {
        let outcome = if new == own { HandOffOutcome::Current } else { HandOffOutcome::Differs };
        return handle.reply(reply(outcome, new)).await;
    }
    if new == own && !force {
        remove_upload(binary);
        return handle.reply(reply(HandOffOutcome::Current, own)).await;
    }
    // A hook job's output pipes would not cross the exec, and the new
    // daemon would not know to record its end.
    let hooks = state.hooks.running();
    if !hooks.is_empty() {
        remove_upload(binary);
        let message = format!("{} runs in the room; hand off once it has ended", hooks.join(" and "));
        return handle.reply(Response::error(message)).await;
    }
    let table = snapshot(state, binary);
    if let Err(why) = check(binary, &table).await {
        remove_upload(binary);
        let why = crate::report::chain(&why);
        return handle
            .reply(Response::error(format!(
                "the new daemon {binary} refused the hand-off ({why}); this daemon keeps serving"
            )))
            .await;
    }
    handle.reply(reply(HandOffOutcome::HandingOff, new)).await?;
    // Let the writer task put the reply on the socket; the exec closes it.
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
    let error = commit(state, binary);
    tracing::error!("hand-off to {binary} failed: {error}; this daemon keeps serving");
    Ok(())
}

fn remove_upload(binary: &str) {
    if binary != room::DAEMON_PATH && binary.starts_with("/.workroom/bin/") {
        let _ = std::fs::remove_file(binary);
    }
}

fn snapshot(state: &State, binary: &str) -> Table {
    let program_pid = match *state.program.lock().expect("program lock") {
        ProgramStatus::Running { pid } => Some(pid),
        _ => None,
    };
    Table {
        format: FORMAT,
        listener_fd: state.listener_fd.get().copied().unwrap_or(-1),
        install_as: (binary != room::DAEMON_PATH).then(|| room::DAEMON_PATH.to_string()),
        program_pid,
        panes: state
            .panes
            .all()
            .iter()
            .map(|p| {
                let info = p.info();
                PaneEntry {
                    name: p.name.clone(),
                    command: p.command.clone(),
                    pid: p.pid,
                    master_fd: p.master_fd(),
                    rows: info.rows,
                    cols: info.cols,
                    created_unix_ms: p.created_unix_ms,
                    screen: String::from_utf8_lossy(&p.paint_all()).into_owned(),
                    history_lines: p.limits.lines,
                    history_bytes: p.limits.bytes,
                    exited: info.exited,
                    typed: p.typists_written(),
                }
            })
            .collect(),
    }
}

async fn check(binary: &str, table: &Table) -> Result<(), CheckError> {
    let mut child = tokio::process::Command::new(binary)
        .arg("check-handoff")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| CheckError::Start { binary: binary.to_string(), source })?;
    let json = serde_json::to_vec(table)?;
    let mut stdin = child.stdin.take().expect("piped");
    let _ = stdin.write_all(&json).await;
    drop(stdin);
    let out = tokio::time::timeout(CHECK_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| CheckError::Timeout)?
        .map_err(CheckError::Wait)?;
    let said = String::from_utf8_lossy(&out.stdout);
    if out.status.success() && said.starts_with("handoff-ok") {
        Ok(())
    } else {
        Err(CheckError::Refused { status: out.status, said: String::from_utf8_lossy(&out.stderr).trim().to_string() })
    }
}

/// Returns only if the exec failed.
fn commit(state: &State, binary: &str) -> String {
    let table = snapshot(state, binary);
    let fds: Vec<RawFd> = std::iter::once(table.listener_fd).chain(table.panes.iter().map(|p| p.master_fd)).collect();
    let json = match serde_json::to_vec(&table) {
        Ok(j) => j,
        Err(e) => return e.to_string(),
    };
    if let Err(e) = workroomd::atomic::write(std::path::Path::new(TABLE_PATH), &json) {
        return format!("cannot write {TABLE_PATH}: {e}");
    }
    for fd in &fds {
        set_cloexec(*fd, false);
    }
    let args: Vec<std::ffi::CString> = std::env::args().filter_map(|a| std::ffi::CString::new(a).ok()).collect();
    let path = match std::ffi::CString::new(binary) {
        Ok(p) => p,
        Err(e) => return e.to_string(),
    };
    // SAFETY: one thread (current-thread runtime, no blocking pool work in
    // flight during a hand-off), so changing the environment races nothing.
    unsafe { std::env::set_var(ENV, TABLE_PATH) };
    let error = nix::unistd::execv(&path, &args).unwrap_err();
    // SAFETY: as above, one thread.
    unsafe { std::env::remove_var(ENV) };
    for fd in &fds {
        set_cloexec(*fd, true);
    }
    let _ = std::fs::remove_file(TABLE_PATH);
    error.to_string()
}

fn set_cloexec(fd: RawFd, on: bool) {
    // SAFETY: fcntl on an fd number; a closed one just fails.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 {
            let flags = if on { flags | libc::FD_CLOEXEC } else { flags & !libc::FD_CLOEXEC };
            libc::fcntl(fd, libc::F_SETFD, flags);
        }
    }
}

fn is_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD only asks about an fd number; a closed one fails.
    fd >= 0 && unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0
}

fn is_socket(fd: RawFd) -> bool {
    // SAFETY: an all-zero stat is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes a stat into the pointer.
    unsafe { libc::fstat(fd, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFSOCK }
}

/// What a daemon started by a hand-off takes over.
pub struct Inherited {
    pub listener: Option<tokio::net::UnixListener>,
    table: Table,
}

/// At start: the table a previous daemon left, if this start is a hand-off.
pub fn take_inherited() -> Option<Inherited> {
    let path = std::env::var_os(ENV)?;
    // SAFETY: called first thing in serve, before any other thread exists.
    unsafe { std::env::remove_var(ENV) };
    let text = std::fs::read(&path).ok();
    let _ = std::fs::remove_file(&path);
    let table: Table = match text.as_deref().map(serde_json::from_slice) {
        Some(Ok(t)) => t,
        _ => {
            tracing::warn!("started by a hand-off but its table is unreadable; starting afresh");
            return None;
        }
    };
    let listener = if is_open(table.listener_fd) && is_socket(table.listener_fd) {
        set_cloexec(table.listener_fd, true);
        // SAFETY: the fd is open, a socket, and ours alone (the old image of
        // this process handed it over).
        let std_listener = unsafe { std::os::unix::net::UnixListener::from_raw_fd(table.listener_fd) };
        let _ = std_listener.set_nonblocking(true);
        tokio::net::UnixListener::from_std(std_listener).ok()
    } else {
        tracing::warn!("the handed-off socket fd {} is not open; binding anew", table.listener_fd);
        None
    };
    if let Some(target) = &table.install_as {
        // Under qemu-user (an arm64 room on an x86_64 engine) /proc/self/exe
        // is opened by the path this binary was exec'd from, which the rename
        // takes away: learn our digest first, or `hand-off` never confirms.
        let _ = own_digest();
        if let Ok(me) = std::fs::read_link("/proc/self/exe") {
            if let Err(e) = std::fs::rename(&me, target) {
                tracing::warn!("cannot install {} as {target}: {e}", me.display());
            }
        }
    }
    Some(Inherited { listener, table })
}

/// Adopts the handed-over panes; returns the supervised program's pid, for
/// the supervisor to adopt.
pub fn restore(inherited: Inherited, state: &Arc<State>) -> Option<u32> {
    for entry in inherited.table.panes {
        if !is_open(entry.master_fd) {
            tracing::warn!(pane = %entry.name, "its pty fd {} did not survive the hand-off", entry.master_fd);
            continue;
        }
        set_cloexec(entry.master_fd, true);
        // SAFETY: the fd is open and was this pane's master in the old image.
        let master = unsafe { OwnedFd::from_raw_fd(entry.master_fd) };
        let adopted = Adopted {
            command: entry.command,
            pid: entry.pid,
            created_unix_ms: entry.created_unix_ms,
            rows: entry.rows,
            cols: entry.cols,
            limits: Limits::new(entry.history_lines, entry.history_bytes),
            exited: entry.exited,
            typed: entry.typed,
        };
        match Pane::adopt(&entry.name, adopted, master, entry.screen.as_bytes()) {
            Ok(p) => state.panes.insert(p),
            Err(e) => tracing::warn!(pane = %entry.name, "cannot adopt: {e}"),
        }
    }
    // The supervisor (serve.rs) waits for it and restarts it.
    inherited.table.program_pid
}

/// Waits for a program a handed-over daemon left running: not our child by
/// `tokio::process`, so reaped by pid, woken by SIGCHLD (polled as well, in
/// case the signal was taken by another waiter).
pub async fn wait_adopted(pid: u32) -> ExitStatus {
    let mut sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()).ok();
    let mut poll = tokio::time::interval(Duration::from_millis(500));
    loop {
        if let Some(status) = pane::try_wait(pid as i32) {
            return status;
        }
        tokio::select! {
            _ = async { match sigchld.as_mut() { Some(s) => { s.recv().await; } None => std::future::pending().await } } => {}
            _ = poll.tick() => {}
        }
    }
}
