//! Warnings that hold for a room's whole life but can only be learnt while
//! it is made (what its users turned out to be after the first hooks), kept
//! on the host so every later `up` says them again, the fast path included,
//! at the cost of one small file read and no engine call.
//!
//! Keyed by container id, like the ready record: a recreated room has a new
//! id and starts with none; `down` forgets them.

use std::path::{Path, PathBuf};

/// `$XDG_CACHE_HOME/workroom/notes`, else `~/.cache/workroom/notes`.
fn folder() -> Option<PathBuf> {
    crate::folders::cache("notes")
}

fn path_in(folder: &Path, container_id: &str) -> Option<PathBuf> {
    crate::folders::room_file(folder, container_id)
}

/// Keeps `warnings` for the room (none: forgets any). Failures cost only
/// the repetition.
pub fn save(container_id: &str, warnings: &[String]) {
    if let Some(folder) = folder() {
        save_in(&folder, container_id, warnings);
    }
}

/// The warnings kept for the room.
pub fn read(container_id: &str) -> Vec<String> {
    folder().map(|f| read_in(&f, container_id)).unwrap_or_default()
}

/// Drops what is kept for a container that is gone.
pub fn forget(container_id: &str) {
    if let Some(path) = folder().and_then(|f| path_in(&f, container_id)) {
        let _ = std::fs::remove_file(path);
    }
}

fn save_in(folder: &Path, container_id: &str, warnings: &[String]) {
    let Some(path) = path_in(folder, container_id) else { return };
    if warnings.is_empty() {
        let _ = std::fs::remove_file(path);
        return;
    }
    let _ = std::fs::create_dir_all(folder);
    // A temp name of this process's own, renamed into place: a reader never
    // sees half a file, and two writers never share a temp file.
    let tmp = folder.join(format!(".{container_id}.{}", std::process::id()));
    if std::fs::write(&tmp, warnings.join("\n")).is_ok() && std::fs::rename(&tmp, &path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

fn read_in(folder: &Path, container_id: &str) -> Vec<String> {
    let Some(text) = path_in(folder, container_id).and_then(|p| std::fs::read_to_string(p).ok()) else {
        return Vec::new();
    };
    text.lines().filter(|l| !l.is_empty()).map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_kept_per_room_until_there_are_none() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("notes");
        save_in(&folder, "abc", &["one".into(), "two".into()]);
        assert_eq!(read_in(&folder, "abc"), ["one", "two"]);
        assert!(read_in(&folder, "def").is_empty());
        save_in(&folder, "../x", &["no".into()]);
        assert!(!dir.path().join("x").exists(), "an id is never a path");
        save_in(&folder, "abc", &[]);
        assert!(read_in(&folder, "abc").is_empty());
        assert_eq!(std::fs::read_dir(&folder).unwrap().count(), 0, "no temp file left");
    }
}
