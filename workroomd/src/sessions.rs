//! `workroomd agents REGISTRY`: the live agent sessions of this room, as
//! JSON on stdout. Run by the host (`workroom agents`) in each room of a
//! peer group, as the group's uid, with `REGISTRY` the folder bound at the
//! remote user's `~/.claude`.
//!
//! A session is listed when its pid answers `kill(pid, 0)` (the group
//! shares one PID namespace, so the pid means the same process in every
//! room), its inbox socket is a socket, and its process is of this room's
//! mount namespace, which is how the host tells which room it runs in.
//!
//! Each listed session is given the pane of ours it runs in: the
//! `WORKROOM_PANE` every pane's processes inherit, read from the
//! session's `/proc/PID/environ` or its nearest ancestor's (an agent
//! started through a wrapper that cleared its environment still has the
//! pane's shell above it). Reading another process's environment is
//! allowed to its own uid, which is what this job runs as; workroomd's own
//! processes are non-dumpable, so the walk stops at the daemon.

use crate::admit::Namespace;
use nix::sys::signal::kill;
use nix::unistd::Pid;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use workroomd::agents::{self, Session};

/// The most entries read: a registry is a handful of sessions; a folder of
/// thousands is not one, and the answer must stay small.
const MAX_ENTRIES: usize = 1024;
/// An entry is a few hundred bytes; larger files are not entries.
const MAX_ENTRY_BYTES: u64 = 64 * 1024;
/// How far up from a session's process the pane is looked for: a pane's
/// shell, a wrapper or two, the agent; past that it is not in a pane.
const MAX_ANCESTORS: usize = 16;
/// Linux reports process start times in USER_HZ ticks, which the kernel's
/// user ABI fixes at 100 on every architecture we ship (x86_64, aarch64).
const TICKS_PER_SECOND: u64 = 100;

pub fn run(args: &[String]) -> i32 {
    let Some(registry) = args.first() else {
        eprintln!("usage: workroomd agents REGISTRY_FOLDER");
        return 2;
    };
    let here = Namespace::own();
    let (uid, gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
    let live: Vec<Session> = read_registry(Path::new(registry))
        .into_iter()
        .filter(|s| lives_here(&here, s, uid, gid))
        .map(|mut s| {
            s.pane = pane_of(s.pid);
            s.started_at = s.started_at.or_else(|| process_started_ms(s.pid));
            s
        })
        .collect();
    match serde_json::to_string(&live) {
        Ok(json) => {
            println!("{json}");
            0
        }
        Err(e) => {
            eprintln!("workroomd agents: {e}");
            1
        }
    }
}

/// Every session the registry holds, live or not, in file-name order.
fn read_registry(registry: &Path) -> Vec<Session> {
    let Ok(entries) = std::fs::read_dir(registry.join(agents::SESSIONS_DIR)) else { return Vec::new() };
    let mut paths: Vec<_> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .take(MAX_ENTRIES)
        .collect();
    paths.sort();
    paths
        .iter()
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.len() <= MAX_ENTRY_BYTES))
        .filter_map(|p| agents::parse_entry(&std::fs::read(p).ok()?))
        .collect()
}

fn lives_here(here: &Namespace, s: &Session, uid: u32, gid: u32) -> bool {
    let alive = matches!(kill(Pid::from_raw(s.pid), None), Ok(()) | Err(nix::errno::Errno::EPERM));
    let socket = std::fs::metadata(&s.socket).is_ok_and(|m| m.file_type().is_socket());
    alive && socket && here.holds(s.pid, uid, gid).is_ok()
}

/// The pane of ours that holds `pid`: the nearest `WORKROOM_PANE` in its
/// own environment or an ancestor's.
fn pane_of(pid: i32) -> Option<String> {
    let mut pid = pid;
    for _ in 0..MAX_ANCESTORS {
        if let Some(pane) = std::fs::read(format!("/proc/{pid}/environ")).ok().and_then(|e| pane_in_environ(&e)) {
            return Some(pane);
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        pid = stat_fields(&stat)?.get(1)?.parse().ok().filter(|p: &i32| *p > 1)?;
    }
    None
}

/// `WORKROOM_PANE`'s value in an environment as `/proc/PID/environ` holds
/// it (`KEY=value` entries, each ended by a NUL); an empty one is none.
fn pane_in_environ(environ: &[u8]) -> Option<String> {
    let key = format!("{}=", agents::PANE_ENV);
    environ
        .split(|b| *b == 0)
        .find_map(|entry| entry.strip_prefix(key.as_bytes()))
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// The fields of `/proc/PID/stat` after the command name (which may hold
/// spaces and parentheses, so the last `)` ends it): state, ppid, ...
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    Some(stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect())
}

/// When `pid` started, in milliseconds since the epoch, for an entry that
/// does not say: its start in ticks after boot, plus the boot time.
fn process_started_ms(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let boot = std::fs::read_to_string("/proc/stat").ok()?;
    started_ms(&stat, &boot)
}

/// `starttime` (field 22 of `stat`, the 20th after the name) and `btime`
/// of `/proc/stat`.
fn started_ms(stat: &str, proc_stat: &str) -> Option<u64> {
    let ticks: u64 = stat_fields(stat)?.get(19)?.parse().ok()?;
    let boot: u64 = proc_stat.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()?;
    Some(boot * 1000 + ticks * 1000 / TICKS_PER_SECOND)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(pid: i32, socket: &Path) -> Session {
        Session {
            pid,
            name: Some("ant".into()),
            session_id: None,
            cwd: None,
            socket: socket.display().to_string(),
            started_at: None,
            status: None,
            pane: None,
        }
    }

    #[test]
    fn a_live_session_is_listed_only_while_its_inbox_is_a_socket() {
        let dir = std::env::temp_dir().join(format!("wr-sessions-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let inbox = dir.join("ant.sock");
        let here = Namespace::own();
        let (uid, gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
        let me = std::process::id() as i32;
        assert!(!lives_here(&here, &session(me, &inbox), uid, gid), "no socket yet: not listed");
        std::fs::write(&inbox, b"").unwrap();
        assert!(!lives_here(&here, &session(me, &inbox), uid, gid), "a plain file is no inbox");
        std::fs::remove_file(&inbox).unwrap();
        let _listener = std::os::unix::net::UnixListener::bind(&inbox).unwrap();
        assert!(lives_here(&here, &session(me, &inbox), uid, gid), "live pid and a real socket: listed");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_pane_comes_from_the_environment_blob_and_an_empty_one_is_none() {
        let blob = b"PATH=/usr/bin\0WORKROOM_PANE=agent-1\0HOME=/home/dev\0";
        assert_eq!(pane_in_environ(blob).as_deref(), Some("agent-1"));
        assert_eq!(pane_in_environ(b"WORKROOM_PANE=main").as_deref(), Some("main"), "the last entry may lack its NUL");
        assert_eq!(pane_in_environ(b"XWORKROOM_PANE=no\0MY_WORKROOM_PANE=no\0"), None, "a key that only ends so");
        assert_eq!(pane_in_environ(b"WORKROOM_PANE=\0"), None);
        assert_eq!(pane_in_environ(b""), None);
    }

    #[test]
    fn a_process_in_a_pane_is_found_through_its_ancestors() {
        // This test's process is in no pane; a child given the variable is,
        // and so is its own child that was started with an empty environment.
        // That child prints its own pid once `env -i` has replaced its
        // environment (`$!` could be read before the exec, while the child
        // still held the shell's copy).
        assert_eq!(pane_of(std::process::id() as i32), None);
        let mut shell = std::process::Command::new("sh")
            .args(["-c", "env -i sh -c 'echo $$; exec sleep 30' & wait"])
            .env(agents::PANE_ENV, "work")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(shell.stdout.take().unwrap()), &mut line).unwrap();
        let sleeper: i32 = line.trim().parse().unwrap();
        assert_eq!(pane_in_environ(&std::fs::read(format!("/proc/{sleeper}/environ")).unwrap()), None);
        assert_eq!(pane_of(sleeper).as_deref(), Some("work"), "from the shell above it");
        let _ = nix::sys::signal::kill(Pid::from_raw(sleeper), nix::sys::signal::Signal::SIGKILL);
        let _ = shell.wait();
    }

    #[test]
    fn a_start_time_is_the_boot_time_plus_the_ticks_after_it() {
        // A command name with spaces and a `)` of its own.
        let stat = "4242 (we(ird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 12345 1000 100";
        let proc_stat = "cpu  1 2 3\nbtime 1700000000\nprocesses 9\n";
        assert_eq!(started_ms(stat, proc_stat), Some(1_700_000_000_000 + 123_450));
        assert_eq!(stat_fields(stat).unwrap()[1], "1", "the ppid");
        assert_eq!(started_ms(stat, "cpu 1\n"), None);
        let me = process_started_ms(std::process::id() as i32).unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
        assert!(me <= now + 1000 && now - me < 3_600_000, "this test started within the hour: {me} vs {now}");
    }
}
