//! Where forwarders say what they do, so `workroom ports`, `stop` and `down`
//! find them: `$XDG_STATE_HOME/workroom/` (or `~/.local/state/workroom/`),
//! by `folders`' one rule, and made this user's alone (0700): a pid here is
//! signalled, and the log tells of the credentials carried. Without a
//! home there is no such folder (never a shared `/tmp` one): no forwarder
//! starts, and none is found.
//!
//! - `<room>.pid`: the room's background forwarder (started by `up`).
//! - `<room>.log`: its stdout and stderr (refused connections are said here).
//! - `ports/<room>.<pid>.json`: every running forwarder's forwards and their
//!   state, written once it has bound its ports, removed when it ends.
//! - `<room>.lock`: held (`flock`) by whoever decides whether the room
//!   needs a background forwarder and starts it (`up`, `forward
//!   --background`, `workroom watch`), so several of them at once start
//!   one. Left in place, as the room-making locks are: removing a lock
//!   file someone may be about to lock would let two hold two files.
//!
//! A pid is only trusted while `/proc/<pid>/cmdline` still names a
//! `workroom forward`, so a recycled pid is never signalled.

use super::spec::Forward;
use crate::folders::{self, FolderError, Kind};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// A forward's state as reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardState {
    #[serde(flatten)]
    pub forward: Forward,
    /// `listening`, or why not (`cannot listen on 127.0.0.1:80: ...`).
    pub state: String,
    /// The host port asked for, when it was taken and the forward moved to
    /// `forward.host_port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked_port: Option<u16>,
}

impl ForwardState {
    /// The state as `ports` and `up` say it, with the port it moved from.
    pub fn shown(&self) -> String {
        match self.asked_port {
            Some(asked) => format!("{} (port {asked} is taken on the host)", self.state),
            None => self.state.clone(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    pub room: String,
    pub pid: u32,
    pub background: bool,
    pub forwards: Vec<ForwardState>,
    #[serde(default)]
    pub ssh_agent: bool,
    #[serde(default)]
    pub git_credentials: bool,
    /// The room's `State.StartedAt` when the forwarder linked to it: a
    /// forwarder of an earlier start is stale, unless it is `rejoining`.
    #[serde(default)]
    pub started_at: String,
    /// Between starts: the start it served ended and it waits for the
    /// room's next one, ports kept ([`super::rejoin`]).
    #[serde(default)]
    pub rejoining: bool,
    /// The room's egress proxy is served through this forwarder.
    #[serde(default)]
    pub egress: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(transparent)]
    Folder(#[from] FolderError),
    #[error("cannot write {path}: {error}", path = path.display())]
    Write { path: PathBuf, error: std::io::Error },
}

/// The state folder, to read from: `None` without a home.
pub fn dir() -> Option<PathBuf> {
    folders::workroom(Kind::State)
}

/// The state folder, to write in: made, and this user's alone.
pub fn made() -> Result<PathBuf, FolderError> {
    folders::private(Kind::State)
}

pub fn pid_file(room: &str) -> Option<PathBuf> {
    Some(pid_file_in(&dir()?, room))
}

/// The room's pid file in the state folder `dir`.
pub fn pid_file_in(dir: &std::path::Path, room: &str) -> PathBuf {
    dir.join(format!("{room}.pid"))
}

/// The room's log in the state folder `dir`.
pub fn log_file_in(dir: &std::path::Path, room: &str) -> PathBuf {
    dir.join(format!("{room}.log"))
}

fn ports_dir() -> Option<PathBuf> {
    Some(dir()?.join("ports"))
}

pub fn status_file(room: &str, pid: u32) -> Option<PathBuf> {
    Some(ports_dir()?.join(format!("{room}.{pid}.json")))
}

pub fn write_status(status: &Status) -> Result<(), StateError> {
    let ports = made()?.join("ports");
    let path = ports.join(format!("{}.{}.json", status.room, status.pid));
    let write = || {
        std::fs::create_dir_all(&ports)?;
        workroomd::atomic::write(&path, &serde_json::to_vec_pretty(status).map_err(std::io::Error::other)?)
    };
    write().map_err(|error| StateError::Write { path: path.clone(), error })
}

pub fn read_status(room: &str, pid: u32) -> Option<Status> {
    serde_json::from_slice(&std::fs::read(status_file(room, pid)?).ok()?).ok()
}

/// The statuses of running forwarders, of one room or all; stale files
/// (their process is gone) are removed on the way.
pub fn running(room: Option<&str>) -> Vec<Status> {
    let Some(Ok(entries)) = ports_dir().map(std::fs::read_dir) else { return Vec::new() };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let Some(status) = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice::<Status>(&b).ok()) else {
            continue;
        };
        if !is_forwarder(status.pid) {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        if room.is_none_or(|r| r == status.room) {
            found.push(status);
        }
    }
    found.sort_by(|a, b| (&a.room, a.pid).cmp(&(&b.room, b.pid)));
    found
}

/// Whether `pid` is a live `workroom forward` process.
pub fn is_forwarder(pid: u32) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let named_workroom = args.first().is_some_and(|a| a.ends_with(b"workroom"));
    named_workroom && args.iter().any(|a| *a == b"forward")
}

/// Held while one process decides about the room's background forwarder
/// and starts it; the kernel releases it when that process dies, however
/// it dies.
pub struct StartLock {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

/// Why the start lock could not be had.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(transparent)]
    Folder(#[from] FolderError),
    #[error("cannot make or open {path}: {source}")]
    File { path: PathBuf, source: std::io::Error },
    #[error("cannot lock {path}: {source}")]
    Lock { path: PathBuf, source: nix::errno::Errno },
    #[error(
        "another workroom process has been starting the forwarder of {room} for {} s (its lock is {path})",
        START_LOCK_WAIT.as_secs()
    )]
    Busy { room: String, path: PathBuf },
}

/// How long one waits for another process deciding about the same room's
/// forwarder: the holder's longest hold is a forwarder of an earlier start
/// given its rejoin wait (10 s), ended (2 s), and a new one waited for
/// until it binds its ports (20 s). Past this the holder is stuck.
pub const START_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Takes the room's start lock, waiting for another holder (an `up`, a
/// watcher) for up to [`START_LOCK_WAIT`]. Async: `up` holds a daemon link
/// on this thread, whose frames must keep flowing while it waits.
pub async fn lock_start(room: &str) -> Result<StartLock, LockError> {
    use nix::fcntl::{Flock, FlockArg};
    // Made this user's alone (0700), as every file of the state folder.
    let path = made()?.join(format!("{room}.lock"));
    let mut wait = crate::retry::Backoff::new(crate::retry::Pace::RACE, START_LOCK_WAIT);
    loop {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|source| LockError::File { path: path.clone(), source })?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(StartLock { _lock: lock }),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) if !wait.expired() => wait.pause().await,
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Err(LockError::Busy { room: room.to_string(), path }),
            Err((_, source)) => return Err(LockError::Lock { path, source }),
        }
    }
}

/// The room's background forwarder, if it is running.
pub fn background_pid(room: &str) -> Option<u32> {
    let pid = std::fs::read_to_string(pid_file(room)?).ok()?.trim().parse().ok()?;
    is_forwarder(pid).then_some(pid)
}

/// Ends the room's background forwarder (for `stop` and `down`); true if
/// one was running.
pub fn stop_background(room: &str) -> bool {
    let pid = background_pid(room);
    remove(pid_file(room));
    let Some(pid) = pid else { return false };
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
    remove(status_file(room, pid));
    true
}

/// [`stop_background`], returning once the forwarder is gone: one started
/// next for the room (`up` after a restart) would otherwise find its ports
/// still held and move them. Async: `up` may hold a daemon link on this
/// thread, whose frames must keep flowing meanwhile.
pub async fn end_background(room: &str) {
    let pid = background_pid(room);
    stop_background(room);
    let Some(pid) = pid else { return };
    let deadline = std::time::Instant::now() + FORWARDER_EXIT_WAIT;
    while is_forwarder(pid) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// How long [`end_background`] waits: a forwarder ends on SIGTERM at once
/// (its listeners go with the process); past this it is stuck, and the next
/// forwarder moves the ports it still holds.
const FORWARDER_EXIT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

pub fn remove_own(room: &str, pid: u32, background: bool) {
    remove(status_file(room, pid));
    let Some(pid_file) = pid_file(room) else { return };
    if background && std::fs::read_to_string(&pid_file).is_ok_and(|p| p.trim() == pid.to_string()) {
        remove(Some(pid_file));
    }
}

/// Removes a state file; one already gone, or no folder at all, is the
/// same to the caller.
fn remove(file: Option<PathBuf>) {
    if let Some(file) = file {
        let _ = std::fs::remove_file(file);
    }
}
