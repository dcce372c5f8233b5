//! The daemon's place in the kernel's choice of what to kill when the
//! room runs out of memory: last (docs/adr/0014-resource-caps.md).
//!
//! The kernel's OOM killer takes the process with the highest badness:
//! its memory plus `oom_score_adj` thousandths of the memory it chooses
//! within (the room's cap). Lowering a score below the floor a process
//! inherited takes `CAP_SYS_RESOURCE`, which no room has; raising one takes
//! nothing. So the host starts a capped room's processes at
//! [`OOM_SCORE_GAP`] (`HostConfig.OomScoreAdj`), the daemon lowers itself
//! and the room's init as far as the kernel lets it (to 0 where the engine
//! set the score without that capability itself, as rootless engines and
//! this project's CI machines do), and starts every child [`OOM_SCORE_GAP`]
//! above its own score: panes, hooks, the image's program and the
//! metadata entrypoints are never protected, the daemon always is against
//! them. Where the engine could set the room's floor (an engine with every
//! capability fixes it at the score it gives), the daemon stays at that
//! floor and its children go [`OOM_SCORE_GAP`] above it.
//!
//! It also watches the room's memory cgroup: each kill the kernel counts
//! there is a line in the daemon's log, which is what `workroom logs` shows.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;
use workroomd::room::OOM_SCORE_GAP;

/// The highest score the kernel takes.
const MAX_SCORE: i32 = 1000;

/// The daemon's own score.
const OWN_SCORE: &str = "/proc/self/oom_score_adj";

/// What a child starts at; [`NOT_SETTLED`] until `serve` settled the
/// daemon's own (the short jobs leave their children as they are).
static CHILD_SCORE: AtomicI32 = AtomicI32::new(NOT_SETTLED);
const NOT_SETTLED: i32 = i32::MIN;

/// How often the daemon looks at the room's count of OOM kills. A kill
/// wakes no one in the room (the cgroup v1 notification needs a write to
/// a file Docker mounts read-only), so the count is read: one small file
/// a second in a room with a memory cap, and a kill is in the log within
/// a second of it.
pub const WATCH_EVERY: Duration = Duration::from_secs(1);

/// The scores after [`settle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scores {
    /// The daemon's score as it started (the room's, from the engine).
    pub started: i32,
    /// The daemon's score now.
    pub own: i32,
    /// What every child of the daemon starts at.
    pub children: i32,
}

/// Where a score goes: lower to `target` when it is above; the kernel says
/// whether it may.
fn lower(path: &Path, target: i32) -> Option<i32> {
    let now = read_score(path)?;
    if now <= target {
        return Some(now);
    }
    match std::fs::write(path, format!("{target}\n")) {
        Ok(()) => Some(target),
        Err(_) => Some(now),
    }
}

fn read_score(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// What a child starts at when the daemon's score is `own`.
pub fn child_score(own: i32) -> i32 {
    own.saturating_add(OOM_SCORE_GAP).min(MAX_SCORE)
}

/// At `serve`'s start (and again after a hand-off, which keeps the
/// scores): the daemon and the room's init (its parent: if init dies, the
/// room stops) lowered to 0 where the kernel lets them, and the score
/// children start at. `None` when the kernel shows no score (no `/proc`).
pub fn settle() -> Option<Scores> {
    let own_path = Path::new(OWN_SCORE);
    let started = read_score(own_path)?;
    let own = lower(own_path, 0)?;
    let parent = std::os::unix::process::parent_id();
    if parent > 0 {
        let _ = lower(&PathBuf::from(format!("/proc/{parent}/oom_score_adj")), own);
    }
    let children = child_score(own);
    CHILD_SCORE.store(children, Ordering::Relaxed);
    Some(Scores { started, own, children })
}

/// The line a child writes to its own score between fork and exec (made
/// before the fork: nothing is allocated after it); `None` in a process
/// that did not [`settle`].
pub fn child_line() -> Option<Vec<u8>> {
    let score = CHILD_SCORE.load(Ordering::Relaxed);
    (score != NOT_SETTLED).then(|| format!("{score}\n").into_bytes())
}

/// In a forked child before exec: raise its own score to `line`'s. Raising
/// needs no capability; a failure leaves the child at the daemon's score,
/// which is no reason to refuse to run it.
pub fn raise_own(line: &[u8]) {
    // SAFETY: open, write and close are async-signal-safe, and the path
    // and line were made before the fork; the descriptor is closed here.
    unsafe {
        let fd = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd >= 0 {
            let _ = libc::write(fd, line.as_ptr().cast(), line.len());
            libc::close(fd);
        }
    }
}

/// The room's memory cgroup, where the kernel counts its OOM kills.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    /// `memory.events` (cgroup v2) or `memory.oom_control` (v1): both
    /// hold an `oom_kill N` line.
    pub events: PathBuf,
    /// The room's memory cap, in bytes.
    pub limit: u64,
}

/// cgroup v1 writes "no limit" as the largest page-aligned figure; anything
/// this large is no cap.
const V1_NO_LIMIT: u64 = 1 << 62;

/// The folders the room's memory cgroup may be at, most likely first: a
/// private cgroup namespace (Docker's default on v2, and its v1 mounts)
/// shows the room's own cgroup at the mount's root, a shared one under
/// its path from `/proc/self/cgroup`.
pub fn cgroup_dirs(proc_self_cgroup: &str, v2: bool) -> Vec<PathBuf> {
    let (mount, wanted) = if v2 { ("/sys/fs/cgroup", None) } else { ("/sys/fs/cgroup/memory", Some("memory")) };
    let path = proc_self_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let ours = match wanted {
            None => controllers.is_empty(),
            Some(c) => controllers.split(',').any(|x| x == c),
        };
        ours.then(|| path.trim_start_matches('/').to_string())
    });
    let mut dirs = Vec::new();
    if let Some(path) = path.filter(|p| !p.is_empty()) {
        dirs.push(Path::new(mount).join(path));
    }
    dirs.push(PathBuf::from(mount));
    dirs
}

/// The `oom_kill` count of a `memory.events` or `memory.oom_control` text.
pub fn oom_kills(text: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix("oom_kill ")).and_then(|n| n.trim().parse().ok())
}

/// A memory cap as the cgroup writes it (`max` on v2; v1's huge figure),
/// `None` when there is none.
pub fn limit_of(text: &str) -> Option<u64> {
    let text = text.trim();
    if text == "max" {
        return None;
    }
    text.parse::<u64>().ok().filter(|n| *n > 0 && *n < V1_NO_LIMIT)
}

/// The room's counter, when it has a memory cap to run out of.
pub fn counter() -> Option<Counter> {
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let (events, limit) =
        if v2 { ("memory.events", "memory.max") } else { ("memory.oom_control", "memory.limit_in_bytes") };
    cgroup_dirs(&own, v2).into_iter().find_map(|dir| {
        let events = dir.join(events);
        oom_kills(&std::fs::read_to_string(&events).ok()?)?;
        let limit = limit_of(&std::fs::read_to_string(dir.join(limit)).ok()?)?;
        Some(Counter { events, limit })
    })
}

/// The log line for `killed` kills seen now, `total` this start.
pub fn kill_line(killed: u64, total: u64, limit: u64) -> String {
    let what = if killed == 1 { "a process".to_string() } else { format!("{killed} processes") };
    format!(
        "the kernel killed {what} in this room for memory (the room's memory cap is {} MiB; {total} killed since \
         the room's start)",
        limit >> 20
    )
}

/// Says each OOM kill in the room, for as long as the daemon runs.
pub async fn watch(counter: Counter) {
    let read = || std::fs::read_to_string(&counter.events).ok().as_deref().and_then(oom_kills);
    let mut seen = read().unwrap_or(0);
    let mut every = tokio::time::interval(WATCH_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(now) = read() else { continue };
        if now > seen {
            tracing::warn!(oom_kills = now, "{}", kill_line(now - seen, now, counter.limit));
            seen = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_start_the_gap_above_the_daemon_and_never_past_the_kernels_highest() {
        assert_eq!(child_score(0), OOM_SCORE_GAP);
        assert_eq!(child_score(OOM_SCORE_GAP), 2 * OOM_SCORE_GAP);
        assert_eq!(child_score(900), MAX_SCORE);
        assert_eq!(child_score(-1000), -1000 + OOM_SCORE_GAP);
    }

    #[test]
    fn the_kill_count_is_read_from_either_cgroup_versions_file() {
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        let v2 = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n";
        assert_eq!(oom_kills(v1), Some(3));
        assert_eq!(oom_kills(v2), Some(2));
        assert_eq!(oom_kills("oom 2\n"), None, "`oom` is not `oom_kill`");
    }

    #[test]
    fn a_cgroup_without_a_memory_cap_has_nothing_to_watch() {
        assert_eq!(limit_of("max\n"), None);
        assert_eq!(limit_of("9223372036854771712\n"), None);
        assert_eq!(limit_of("268435456\n"), Some(256 << 20));
    }

    #[test]
    fn the_rooms_cgroup_is_looked_for_under_its_path_then_at_the_mounts_root() {
        let v1 = "12:pids:/docker/abc\n9:memory:/docker/abc\n1:name=systemd:/docker/abc\n";
        assert_eq!(
            cgroup_dirs(v1, false),
            [PathBuf::from("/sys/fs/cgroup/memory/docker/abc"), PathBuf::from("/sys/fs/cgroup/memory")]
        );
        assert_eq!(cgroup_dirs("0::/\n", true), [PathBuf::from("/sys/fs/cgroup")]);
        assert_eq!(
            cgroup_dirs("0::/system.slice/docker-abc.scope\n", true),
            [PathBuf::from("/sys/fs/cgroup/system.slice/docker-abc.scope"), PathBuf::from("/sys/fs/cgroup")]
        );
    }

    #[test]
    fn a_kill_is_said_with_the_cap_and_the_count() {
        assert_eq!(
            kill_line(1, 1, 256 << 20),
            "the kernel killed a process in this room for memory (the room's memory cap is 256 MiB; 1 killed since \
             the room's start)"
        );
        assert!(kill_line(2, 5, 1 << 30).starts_with("the kernel killed 2 processes"));
    }
}
