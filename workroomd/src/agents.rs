//! Agent sessions in a peer group's registry, as agent CLIs write them:
//! Claude Code's `~/.claude/sessions/<pid>.json` and the fixture agent's
//! (fixtures/agent). Both sides read this: the daemon binary's `agents`
//! job lists the live sessions of its room, the host prints them.
//!
//! An entry is read leniently (unknown keys ignored, since every CLI writes
//! its own), but a `pid` is required: without it nothing can tell whether
//! the session lives.

use serde::{Deserialize, Serialize};

/// Where agent CLIs bind their inbox sockets when an entry names none.
pub const SOCKS_DIR: &str = "/tmp/cc-socks";
/// The registry's folder of entries, in the folder bound at `~/.claude`.
pub const SESSIONS_DIR: &str = "sessions";
/// In the environment of every process of a pane of ours: the pane's name,
/// so `workroomd agents` can tell which pane holds a session.
pub const PANE_ENV: &str = "WORKROOM_PANE";

/// One registered session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// In the peer group's PID namespace.
    pub pid: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, rename = "sessionId", skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Its inbox socket: the entry's `socket`, else `<SOCKS_DIR>/<pid>.sock`.
    pub socket: String,
    /// Milliseconds since the epoch: the entry's, else the process's start.
    #[serde(default, rename = "startedAt", skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
    /// What the CLI says it does (Claude Code: `idle`, `busy`, `waiting`),
    /// passed through as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The pane of ours it runs in, found by the daemon's `agents` job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pane: Option<String>,
}

/// An entry as an agent CLI wrote it.
#[derive(Deserialize)]
struct Written {
    pid: i64,
    #[serde(default)]
    name: Option<serde_json::Value>,
    #[serde(default, rename = "sessionId")]
    session_id: Option<serde_json::Value>,
    #[serde(default)]
    cwd: Option<serde_json::Value>,
    #[serde(default)]
    socket: Option<serde_json::Value>,
    /// Claude Code 2.1's name for its inbox.
    #[serde(default, rename = "messagingSocketPath")]
    messaging_socket_path: Option<serde_json::Value>,
    #[serde(default, rename = "startedAt")]
    started_at: Option<serde_json::Value>,
    #[serde(default)]
    status: Option<serde_json::Value>,
}

/// A registry entry's session; `None` for anything that is not one (a
/// half-written file, no pid, a pid out of range).
pub fn parse_entry(bytes: &[u8]) -> Option<Session> {
    let w: Written = serde_json::from_slice(bytes).ok()?;
    let pid = i32::try_from(w.pid).ok().filter(|p| *p > 0)?;
    let text = |v: Option<serde_json::Value>| v.and_then(|v| v.as_str().map(str::to_string));
    Some(Session {
        pid,
        name: text(w.name),
        session_id: text(w.session_id),
        cwd: text(w.cwd),
        socket: text(w.socket)
            .or_else(|| text(w.messaging_socket_path))
            .unwrap_or_else(|| format!("{SOCKS_DIR}/{pid}.sock")),
        started_at: w.started_at.and_then(|v| v.as_u64()),
        status: text(w.status),
        pane: None,
    })
}

impl Session {
    /// What to call it in a listing: its name, else its session id.
    pub fn label(&self) -> &str {
        self.name.as_deref().or(self.session_id.as_deref()).unwrap_or("-")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixture_agents_and_claude_code_style_entries_are_both_read() {
        let fixture = br#"{"pid": 42, "name": "bee", "cwd": "/w", "startedAt": 1700000000000,
            "socket": "/tmp/cc-socks/42.sock", "uid": 1000, "hostname": "h", "kind": "workroom-fixture-agent"}"#;
        let s = parse_entry(fixture).unwrap();
        assert_eq!((s.pid, s.label(), s.socket.as_str()), (42, "bee", "/tmp/cc-socks/42.sock"));
        assert_eq!(s.started_at, Some(1_700_000_000_000));
        let claude = br#"{"pid": 77, "sessionId": "5f1c-aa", "cwd": "/workspaces/app", "startedAt": 1}"#;
        let s = parse_entry(claude).unwrap();
        assert_eq!((s.label(), s.socket.as_str()), ("5f1c-aa", "/tmp/cc-socks/77.sock"), "the socket by its pid");
        assert_eq!(s.status, None, "no status written: none claimed");
    }

    #[test]
    fn claude_code_2_1s_entry_gives_its_name_socket_and_status_as_written() {
        // As Claude Code 2.1.332 writes `sessions/<pid>.json` (trimmed).
        let real = br#"{"pid":92,"sessionId":"25f3abcb-e01a","cwd":"/home/dev/proj","startedAt":1796275824871,
            "procStart":"313903","version":"2.1.332","kind":"interactive",
            "messagingSocketPath":"/tmp/cc-socks-1000/92.sock","name":"proj-f6","nameSource":"derived",
            "status":"idle","updatedAt":1796275824701,"statusUpdatedAt":1796275824701}"#;
        let s = parse_entry(real).unwrap();
        assert_eq!((s.label(), s.socket.as_str()), ("proj-f6", "/tmp/cc-socks-1000/92.sock"));
        assert_eq!(s.status.as_deref(), Some("idle"));
        let waiting = parse_entry(br#"{"pid": 5, "status": "waiting", "waitingFor": "permission"}"#).unwrap();
        assert_eq!(waiting.status.as_deref(), Some("waiting"), "passed through, whatever the word");
    }

    #[test]
    fn an_entry_without_a_usable_pid_is_not_a_session() {
        for bad in [
            &br#"{"name": "x"}"#[..],
            br#"{"pid": "7"}"#,
            br#"{"pid": 0}"#,
            br#"{"pid": -3}"#,
            br#"{"pid": 99999999999}"#,
            b"{",
            b"",
        ] {
            assert_eq!(parse_entry(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        let odd = parse_entry(br#"{"pid": 5, "name": 12, "cwd": null}"#).unwrap();
        assert_eq!((odd.name, odd.cwd), (None, None), "a field of the wrong type is left out, not fatal");
    }
}
