//! A host-side record that a room's hooks are done for one container start,
//! so `up` on a running room where nothing is due answers from one inspect,
//! without a `docker exec` of the relay (which costs more than everything
//! else `up` does).
//!
//! The record is keyed by container id and holds `State.StartedAt`, which the
//! engine changes on every start: a restart makes the record stale by
//! construction and `up` asks the daemon again. The daemon's markers stay the
//! authority; this only remembers that they said "nothing due".

use std::collections::BTreeMap;
use std::path::PathBuf;

fn record_path(container_id: &str) -> Option<PathBuf> {
    crate::folders::room_file(&crate::folders::cache("ready")?, container_id)
}

/// The record: the start it is for, then (optionally) the probed user
/// environment as JSON on the second line.
fn read(container_id: &str, started_at: &str) -> Option<String> {
    let text = std::fs::read_to_string(record_path(container_id)?).ok()?;
    let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
    (!started_at.is_empty() && first == started_at).then(|| rest.to_string())
}

/// Whether the hooks are recorded done for the start at `started_at`.
pub fn is_done(container_id: &str, started_at: &str) -> bool {
    read(container_id, started_at).is_some()
}

/// The user environment probed for this start (`userEnvProbe`), if any.
pub fn probed_env(container_id: &str, started_at: &str) -> Option<BTreeMap<String, String>> {
    serde_json::from_str(&read(container_id, started_at)?).ok()
}

/// Records the hooks done for this start, with the probed environment;
/// failures only cost speed later.
pub fn mark_done(container_id: &str, started_at: &str, probed: Option<&BTreeMap<String, String>>) {
    let Some(path) = record_path(container_id) else { return };
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let env = probed.and_then(|e| serde_json::to_string(e).ok()).unwrap_or_default();
    let _ = workroomd::atomic::write(&path, format!("{started_at}\n{env}").as_bytes());
}

/// Drops the record of a container that is gone (`down`): its id never
/// comes back, so the record would only be litter in the user's cache.
pub fn forget(container_id: &str) {
    if let Some(path) = record_path(container_id) {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_holds_for_its_start_only() {
        // In the user's own cache, under an id no engine makes (ids are 64
        // hex digits), removed again by `forget`: setting XDG_CACHE_HOME here
        // would race every other test thread reading the environment.
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let id = format!("workroomtest{}x{nanos}", std::process::id());
        let start = "2026-11-29T10:00:00Z";
        assert!(!is_done(&id, start));
        mark_done(&id, start, None);
        assert!(is_done(&id, start));
        assert_eq!(probed_env(&id, start), None);
        let env = BTreeMap::from([("PATH".to_string(), "/opt/bin:/usr/bin".to_string())]);
        mark_done(&id, start, Some(&env));
        assert_eq!(probed_env(&id, start), Some(env));
        assert!(!is_done(&id, "2026-11-29T11:00:00Z"), "a restart makes it stale");
        assert!(!is_done(&id, ""), "an unknown start time is never done");
        assert!(!is_done("../x", start));
        let path = record_path(&id).unwrap();
        forget(&id);
        assert!(!is_done(&id, start));
        assert!(!path.exists());
    }
}
