//! The `devcontainer.metadata` entries features contribute, in the label
//! format the reference writes (`getDevcontainerMetadata`): per feature its
//! id as the user wrote it, then the subset of devcontainer-feature.json the
//! reference records. `containerEnv` is not among them: it is baked into the
//! image as `ENV`. Pure.

use serde_json::{Map, Value};
use std::collections::HashMap;

/// The label the reference CLI and editors read.
pub const LABEL: &str = "devcontainer.metadata";

/// On a derived image whose label ends with devcontainer.json's entry: how
/// many entries precede it, and the label's digest (`<count> <sha256 hex>`).
/// Empty on an image `devcontainer build` named: made for rooms of other
/// configurations, its label is whole to them, as to the reference.
pub const ENTRIES_LABEL: &str = "workroom.features.image-entries";

/// The reference's `pickFeatureProperties`, in its order.
const PICKED: &[&str] = &[
    "onCreateCommand",
    "updateContentCommand",
    "postCreateCommand",
    "postStartCommand",
    "postAttachCommand",
    "init",
    "privileged",
    "capAdd",
    "securityOpt",
    "entrypoint",
    "mounts",
    "customizations",
];

/// One feature's entry: `{"id": <user id>, ...picked properties}`.
pub fn entry(user_id: &str, feature: &Map<String, Value>) -> Value {
    let feature = with_old_properties_moved(feature);
    let mut out = Map::new();
    out.insert("id".into(), Value::String(user_id.to_string()));
    for key in PICKED {
        if let Some(v) = feature.get(*key) {
            out.insert((*key).to_string(), v.clone());
        }
    }
    Value::Object(out)
}

/// The reference's `updateFromOldProperties` for features: top-level
/// `extensions` and `settings` move under `customizations.vscode`.
fn with_old_properties_moved(feature: &Map<String, Value>) -> Map<String, Value> {
    let truthy = |v: Option<&Value>| !matches!(v, None | Some(Value::Null) | Some(Value::Bool(false)));
    if !truthy(feature.get("extensions")) && !truthy(feature.get("settings")) {
        return feature.clone();
    }
    let mut copy = feature.clone();
    let extensions = copy.shift_remove("extensions").filter(|v| truthy(Some(v)));
    let settings = copy.shift_remove("settings").filter(|v| truthy(Some(v)));
    let customizations = copy.entry("customizations").or_insert_with(|| Value::Object(Map::new()));
    let Some(customizations) = customizations.as_object_mut() else { return copy };
    let vscode = customizations.entry("vscode").or_insert_with(|| Value::Object(Map::new()));
    let Some(vscode) = vscode.as_object_mut() else { return copy };
    if let Some(ext) = extensions {
        let mut all = vscode.get("extensions").and_then(Value::as_array).cloned().unwrap_or_default();
        match ext {
            Value::Array(items) => all.extend(items),
            other => all.push(other),
        }
        vscode.insert("extensions".into(), Value::Array(all));
    }
    if let Some(Value::Object(old)) = settings {
        let mut merged = old;
        if let Some(Value::Object(newer)) = vscode.get("settings") {
            merged.extend(newer.clone());
        }
        vscode.insert("settings".into(), Value::Object(merged));
    }
    copy
}

/// The entries of an image's label: an array, or one object; anything else
/// is no entries (the reference logs it and goes on).
pub fn parse_label(label: Option<&str>) -> Vec<Value> {
    match label.and_then(|l| serde_json::from_str::<Value>(l).ok()) {
        Some(Value::Array(items)) => items,
        Some(obj @ Value::Object(_)) => vec![obj],
        _ => Vec::new(),
    }
}

/// The label's value as the reference's Dockerfile `LABEL` line leaves it:
/// `[ {…}, {…} ]` (its line continuations gone).
pub fn label_value(entries: &[Value]) -> String {
    let items: Vec<String> =
        entries.iter().map(|e| format!(" {}", serde_json::to_string(e).unwrap_or_default())).collect();
    format!("[{} ]", items.join(","))
}

/// An image's `devcontainer.metadata` entries that a room made from it
/// merges under devcontainer.json: the whole label, except on an image
/// workroom labelled when it built devcontainer.json's entry into it (`room/features.rs`), whose last entry is the config's as of
/// the build (devcontainer.json's own entry is taken from the file). The
/// label's digest must still match: an image built over ours with a label
/// of its own keeps all of it.
pub fn image_entries(labels: &HashMap<String, String>) -> Option<String> {
    let label = labels.get(LABEL)?;
    let ours = labels.get(ENTRIES_LABEL).and_then(|v| {
        let (count, digest) = v.split_once(' ')?;
        (digest == super::recipe::label_digest(label)).then(|| count.parse::<usize>().ok()).flatten()
    });
    match ours {
        Some(count) => {
            let mut entries = parse_label(Some(label));
            entries.truncate(count);
            Some(label_value(&entries))
        }
        None => Some(label.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_labelled_images_entries_stop_before_the_configs_unless_its_label_changed() {
        let label = label_value(&[serde_json::json!({"id": "f"}), serde_json::json!({"remoteUser": "dev"})]);
        let mut labels = HashMap::from([
            (LABEL.to_string(), label.clone()),
            (ENTRIES_LABEL.to_string(), format!("1 {}", super::super::recipe::label_digest(&label))),
        ]);
        assert_eq!(image_entries(&labels).as_deref(), Some(r#"[ {"id":"f"} ]"#));
        // An image built over ours with a label of its own keeps all of it.
        labels.insert(LABEL.to_string(), r#"[{"id":"f"},{"id":"g"}]"#.into());
        assert_eq!(image_entries(&labels).as_deref(), Some(r#"[{"id":"f"},{"id":"g"}]"#));
        labels.remove(LABEL);
        assert_eq!(image_entries(&labels), None);
    }

    #[test]
    fn an_image_devcontainer_build_named_keeps_its_whole_label_for_rooms_of_other_configurations() {
        let label = label_value(&[serde_json::json!({"id": "f"}), serde_json::json!({"remoteUser": "dev"})]);
        let labels = HashMap::from([(LABEL.to_string(), label.clone()), (ENTRIES_LABEL.to_string(), String::new())]);
        assert_eq!(image_entries(&labels), Some(label));
    }

    #[test]
    fn a_feature_entry_keeps_the_id_as_written_and_the_reference_subset() {
        let feature = json!({
            "id": "hello", "version": "1.0.0", "name": "Hello", "options": {},
            "containerEnv": { "A": "1" }, "entrypoint": "/usr/local/bin/start", "privileged": true,
            "capAdd": ["SYS_PTRACE"], "postStartCommand": "echo hi", "mounts": [{ "type": "volume", "source": "v", "target": "/v" }],
            "dependsOn": {}, "installsAfter": []
        });
        let e = entry("localhost:5000/wr/hello:1", feature.as_object().unwrap());
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"id":"localhost:5000/wr/hello:1","postStartCommand":"echo hi","privileged":true,"capAdd":["SYS_PTRACE"],"entrypoint":"/usr/local/bin/start","mounts":[{"type":"volume","source":"v","target":"/v"}]}"#
        );
    }

    #[test]
    fn old_vscode_properties_move_under_customizations() {
        let feature = json!({ "id": "x", "extensions": ["a.b"], "settings": { "s": 1 } });
        let e = entry("./x", feature.as_object().unwrap());
        assert_eq!(e["customizations"], json!({ "vscode": { "extensions": ["a.b"], "settings": { "s": 1 } } }));
    }

    #[test]
    fn the_label_is_written_as_the_reference_writes_it() {
        let entries = vec![json!({"remoteUser": "dev"}), json!({"id": "./x"})];
        assert_eq!(label_value(&entries), r#"[ {"remoteUser":"dev"}, {"id":"./x"} ]"#);
        assert_eq!(parse_label(Some(&label_value(&entries))), entries);
        assert_eq!(parse_label(Some(r#"{"a":1}"#)), vec![json!({"a": 1})]);
        assert!(parse_label(Some("nope")).is_empty() && parse_label(None).is_empty());
    }
}
