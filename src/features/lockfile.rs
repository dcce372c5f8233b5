//! `devcontainer-lock.json` in the reference's format (`lockfile.ts`): one
//! entry per OCI or tarball feature installed, keyed by the id as written,
//! sorted as the reference sorts, `{version, resolved, integrity,
//! dependsOn?}`, two-space JSON with a final newline. Pure but for the one
//! read and write at the edge.

use super::collate::locale_compare;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: String,
    /// Absent when the feature declares none (the reference's `undefined`).
    pub version: Option<String>,
    /// `registry/path@digest` for OCI, the URL for a tarball.
    pub resolved: String,
    /// The manifest's digest for OCI, the tarball's for a tarball.
    pub integrity: String,
    pub depends_on: Vec<String>,
}

/// Where the lockfile of a config lives: beside it, dot-named for a
/// dot-named config (`.devcontainer.json` → `.devcontainer-lock.json`).
pub fn path_for(config: &Path) -> PathBuf {
    let dot = config.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'));
    config.with_file_name(if dot { ".devcontainer-lock.json" } else { "devcontainer-lock.json" })
}

/// The lockfile's JSON for these entries.
pub fn render(entries: &[Entry]) -> Value {
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by(|a, b| locale_compare(&a.id, &b.id));
    let mut features = Map::new();
    for e in sorted {
        let mut entry = Map::new();
        if let Some(v) = &e.version {
            entry.insert("version".into(), Value::String(v.clone()));
        }
        entry.insert("resolved".into(), Value::String(e.resolved.clone()));
        entry.insert("integrity".into(), Value::String(e.integrity.clone()));
        if !e.depends_on.is_empty() {
            entry.insert("dependsOn".into(), Value::Array(e.depends_on.iter().cloned().map(Value::String).collect()));
        }
        features.insert(e.id.clone(), Value::Object(entry));
    }
    let mut root = Map::new();
    root.insert("features".into(), Value::Object(features));
    Value::Object(root)
}

/// The text the reference writes (`JSON.stringify(lockfile, null, 2) + '\n'`).
pub fn text(value: &Value) -> String {
    let mut s = serde_json::to_string_pretty(value).unwrap_or_default();
    s.push('\n');
    s
}

/// The integrity pinned for a feature id, if the lockfile has one.
pub fn pinned<'a>(lockfile: Option<&'a Value>, id: &str) -> Option<&'a str> {
    lockfile?.get("features")?.get(id)?.get("integrity")?.as_str()
}

/// What differs between the lockfile on disk and the one this config
/// resolves to, one phrase each, for `--frozen-lockfile`'s refusal.
pub fn drift(old: &Value, new: &Value) -> Vec<String> {
    let empty = Map::new();
    let features = |v: &Value| v.get("features").and_then(Value::as_object).cloned().unwrap_or_else(|| empty.clone());
    let (old_f, new_f) = (features(old), features(new));
    let mut changes = Vec::new();
    for (id, entry) in &new_f {
        match old_f.get(id) {
            None => changes.push(format!("{id} is not in the lockfile")),
            Some(before) if before != entry => {
                for field in ["version", "resolved", "integrity", "dependsOn"] {
                    let (b, a) = (before.get(field), entry.get(field));
                    if b != a {
                        let show = |v: Option<&Value>| v.map_or("(none)".to_string(), |v| v.to_string());
                        changes.push(format!("{id} {field} {} → {}", show(b), show(a)));
                    }
                }
            }
            Some(_) => {}
        }
    }
    for id in old_f.keys().filter(|id| !new_f.contains_key(*id)) {
        changes.push(format!("{id} is in the lockfile but no longer used"));
    }
    // The reference compares the text: the same entries in another order differ.
    if changes.is_empty() && text(old) != text(new) {
        changes.push("its entries are in another order or carry other fields".into());
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(id: &str, digest: &str) -> Entry {
        Entry {
            id: id.into(),
            version: Some("1.0.0".into()),
            resolved: format!("localhost:5000/wr/x@{digest}"),
            integrity: digest.into(),
            depends_on: vec![],
        }
    }

    #[test]
    fn the_lockfile_sits_beside_the_config_dot_named_for_a_dot_config() {
        assert_eq!(
            path_for(Path::new("/w/.devcontainer/devcontainer.json")),
            Path::new("/w/.devcontainer/devcontainer-lock.json")
        );
        assert_eq!(path_for(Path::new("/w/.devcontainer.json")), Path::new("/w/.devcontainer-lock.json"));
    }

    #[test]
    fn entries_are_sorted_as_the_reference_and_written_with_two_spaces() {
        let mut b = entry("localhost:5000/wr/b:1", "sha256:bb");
        b.depends_on = vec!["localhost:5000/wr/a:1".into()];
        let value = render(&[b, entry("localhost:5000/wr/a:1", "sha256:aa")]);
        assert_eq!(
            text(&value),
            r#"{
  "features": {
    "localhost:5000/wr/a:1": {
      "version": "1.0.0",
      "resolved": "localhost:5000/wr/x@sha256:aa",
      "integrity": "sha256:aa"
    },
    "localhost:5000/wr/b:1": {
      "version": "1.0.0",
      "resolved": "localhost:5000/wr/x@sha256:bb",
      "integrity": "sha256:bb",
      "dependsOn": [
        "localhost:5000/wr/a:1"
      ]
    }
  }
}
"#
        );
        assert_eq!(pinned(Some(&value), "localhost:5000/wr/b:1"), Some("sha256:bb"));
    }

    #[test]
    fn drift_names_what_was_added_changed_and_dropped() {
        let old = render(&[entry("a", "sha256:1"), entry("gone", "sha256:9")]);
        let new = render(&[entry("a", "sha256:2"), entry("new", "sha256:3")]);
        let changes = drift(&old, &new);
        assert!(changes.contains(&"a integrity \"sha256:1\" → \"sha256:2\"".to_string()), "{changes:?}");
        assert!(changes.contains(&"new is not in the lockfile".to_string()), "{changes:?}");
        assert!(changes.contains(&"gone is in the lockfile but no longer used".to_string()), "{changes:?}");
        assert!(drift(&new, &new).is_empty());
        assert_eq!(drift(&json!({"features": {}}), &json!({"features": {}})), Vec::<String>::new());
    }
}
