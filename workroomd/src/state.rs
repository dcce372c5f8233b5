//! What the daemon knows of its room: identity, the supervised program,
//! the lifecycle markers, its panes and its listening socket. One `State`
//! is made at start and passed to every task (as mini-redis passes its
//! `Db`); nothing of it is a process static.
//!
//! Markers persist in the container's filesystem, so a
//! container restart (new daemon process) still knows which once-only hooks
//! ran; they are replaced whole (`workroomd::atomic`). Hooks the daemon
//! runs itself claim and record their markers here too (`hooks`).

use crate::panes::Panes;
use std::collections::BTreeMap;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use workroomd::proto::{DaemonStatus, ProgramStatus};

pub struct State {
    pub boot_id: String,
    pub started_at_unix_ms: u64,
    pub program: Mutex<ProgramStatus>,
    /// How often the supervised program was restarted since this start.
    pub program_restarts: AtomicU32,
    pub panes: Arc<Panes>,
    /// The listening socket's fd, for a hand-off to pass on.
    pub listener_fd: OnceLock<RawFd>,
    next_conn: AtomicU64,
    markers: Mutex<BTreeMap<String, String>>,
    markers_file: PathBuf,
    /// The room's mount namespace: who may use the sockets served here.
    pub namespace: crate::admit::Namespace,
    /// What host links offer of their credentials, and the sockets serving them.
    pub credentials: crate::credentials::Credentials,
    /// The egress proxy's listener and the host links that check its requests.
    pub egress: crate::egress::Egress,
    /// Lifecycle hooks running as the daemon's jobs, and the start plan.
    pub hooks: crate::hooks::Hooks,
}

impl State {
    pub fn load(boot_id: String, state_dir: PathBuf) -> State {
        let markers_file = state_dir.join("markers.json");
        let hooks = crate::hooks::Hooks::new(&state_dir);
        let markers =
            std::fs::read(&markers_file).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok()).unwrap_or_default();
        let started_at_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        State {
            boot_id,
            started_at_unix_ms,
            program: Mutex::new(ProgramStatus::NotConfigured),
            program_restarts: AtomicU32::new(0),
            panes: Arc::default(),
            listener_fd: OnceLock::new(),
            next_conn: AtomicU64::new(1),
            markers: Mutex::new(markers),
            markers_file,
            namespace: crate::admit::Namespace::own(),
            credentials: Default::default(),
            egress: Default::default(),
            hooks,
        }
    }

    pub fn status(&self) -> DaemonStatus {
        DaemonStatus {
            version: workroomd::VERSION.to_string(),
            protocol: workroomd::proto::PROTOCOL,
            boot_id: self.boot_id.clone(),
            started_at_unix_ms: self.started_at_unix_ms,
            pid: std::process::id(),
            program: self.program.lock().expect("program lock").clone(),
            program_restarts: self.program_restarts.load(Ordering::Relaxed),
        }
    }

    /// A number for a new connection: a pane's client is known by it.
    pub fn next_conn(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    pub fn markers(&self) -> BTreeMap<String, String> {
        self.markers.lock().expect("markers lock").clone()
    }

    /// Compare-and-set: applies when `expected` is `None` (unconditional) or
    /// holds. Returns whether it applied and the value after.
    pub fn set_marker(
        &self,
        key: &str,
        value: Option<String>,
        expected: Option<Option<String>>,
    ) -> std::io::Result<(bool, Option<String>)> {
        let mut markers = self.markers.lock().expect("markers lock");
        let current = markers.get(key).cloned();
        if let Some(expected) = expected {
            if expected != current {
                return Ok((false, current));
            }
        }
        let mut next = markers.clone();
        match &value {
            Some(v) => next.insert(key.to_string(), v.clone()),
            None => next.remove(key),
        };
        self.persist(&next)?;
        *markers = next;
        Ok((true, value))
    }

    fn persist(&self, markers: &BTreeMap<String, String>) -> std::io::Result<()> {
        if let Some(dir) = self.markers_file.parent() {
            std::fs::create_dir_all(dir)?;
        }
        workroomd::atomic::write(&self.markers_file, &serde_json::to_vec(markers)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_compare_and_set_applies_once_and_persists() {
        let dir = std::env::temp_dir().join(format!("wr-state-{}", std::process::id()));
        let state = State::load("b1".into(), dir.clone());
        assert_eq!(state.set_marker("k", Some("a".into()), Some(None)).unwrap(), (true, Some("a".into())));
        assert_eq!(state.set_marker("k", Some("b".into()), Some(None)).unwrap(), (false, Some("a".into())));
        let reloaded = State::load("b2".into(), dir.clone());
        assert_eq!(reloaded.markers().get("k").map(String::as_str), Some("a"));
        assert_eq!(reloaded.set_marker("k", None, Some(Some("a".into()))).unwrap(), (true, None));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
