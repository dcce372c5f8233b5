//! `workroomd agents REGISTRY`: the live agent sessions of this room, as
//! JSON on stdout. Run by the host (`workroom agents`) in each room of a
//! peer group, as the group's uid, with `REGISTRY` the folder bound at the
//! remote user's `~/.claude`.
//!
//! A session is listed when its pid answers `kill(pid, 0)` (the group
//! shares one PID namespace, so the pid means the same process in every
//! room), its inbox socket is a socket, and its process is of this room's
//! mount namespace, which is how the host tells which room it runs in.

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

pub fn run(args: &[String]) -> i32 {
    let Some(registry) = args.first() else {
        eprintln!("usage: workroomd agents REGISTRY_FOLDER");
        return 2;
    };
    let here = Namespace::own();
    let (uid, gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
    let live: Vec<Session> =
        read_registry(Path::new(registry)).into_iter().filter(|s| lives_here(&here, s, uid, gid)).collect();
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
}
