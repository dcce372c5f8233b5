//! Image metadata: the `devcontainer.metadata` label and the reference CLI's
//! merge of it with devcontainer.json (devcontainers/cli `imageMetadata.ts`,
//! `mergeConfiguration`).
//!
//! Every image of the devcontainers project, and every image built with
//! features, carries this label: an array of entries shaped like a
//! devcontainer.json, one per feature (with its `id`) and some for the
//! image's own settings. A room's metadata is the image's entries, then the
//! entries of features not yet built into it, then devcontainer.json's own
//! entry, merged property by property:
//!
//! | property | rule |
//! |---|---|
//! | `init`, `privileged` | true if any entry sets it |
//! | `capAdd`, `securityOpt` | union, first seen first |
//! | `mounts` | by target, the later wins (in its own place) |
//! | `containerEnv`, `remoteEnv`, `portsAttributes` | key by key, the later wins |
//! | `remoteUser`, `containerUser`, `userEnvProbe`, `waitFor`, `shutdownAction`, `otherPortsAttributes` | the last that sets it |
//! | `overrideCommand`, `updateRemoteUserUID` | the last boolean |
//! | `entrypoint` | collected, in order (`entrypoints`) |
//! | lifecycle hooks | collected, in order (`onCreateCommands`, ...) |
//! | `forwardPorts` | union (`3000` and `"localhost:3000"` are one) |
//! | `hostRequirements` | the largest of each |
//! | `customizations` | collected per tool (`{"vscode": [..., ...]}`) |
//!
//! Everything here is pure: parsing the label, the merge, the typed result
//! the room applies and the label the room carries are table-tested below.
//! A malformed label, entry or property is a warning naming the image and
//! is left out; it never refuses an `up`.

use crate::config::{Command, Hook, Loaded, Mount, UserEnvProbe};
use serde_json::{Map, Value};
use std::fmt;

/// One entry of the label: a JSON object in devcontainer.json's shape.
pub type Entry = Map<String, Value>;

pub const LABEL: &str = "devcontainer.metadata";

/// devcontainer.json's properties that make its entry, in the reference's
/// order (`pickConfigProperties`), so our label reads as the reference's.
pub const CONFIG_PROPERTIES: &[&str] = &[
    "onCreateCommand",
    "updateContentCommand",
    "postCreateCommand",
    "postStartCommand",
    "postAttachCommand",
    "waitFor",
    "customizations",
    "mounts",
    "containerEnv",
    "containerUser",
    "init",
    "privileged",
    "capAdd",
    "securityOpt",
    "remoteUser",
    "userEnvProbe",
    "remoteEnv",
    "overrideCommand",
    "portsAttributes",
    "otherPortsAttributes",
    "forwardPorts",
    "shutdownAction",
    "updateRemoteUserUID",
    "hostRequirements",
];

/// What the current devcontainer.json still says over an existing
/// container's label (the reference's `pickUpdateableConfigProperties`).
pub const UPDATEABLE_PROPERTIES: &[&str] = &["remoteUser", "userEnvProbe", "remoteEnv"];

/// Replaced in the merged configuration by their collected forms.
const REPLACED: &[&str] = &[
    "customizations",
    "entrypoint",
    "onCreateCommand",
    "updateContentCommand",
    "postCreateCommand",
    "postStartCommand",
    "postAttachCommand",
    "shutdownAction",
];

/// The hooks metadata may carry (`initializeCommand` runs on the host and
/// only devcontainer.json's counts), with their collected names.
const HOOKS: [(Hook, &str); 5] = [
    (Hook::OnCreate, "onCreateCommands"),
    (Hook::UpdateContent, "updateContentCommands"),
    (Hook::PostCreate, "postCreateCommands"),
    (Hook::PostStart, "postStartCommands"),
    (Hook::PostAttach, "postAttachCommands"),
];

/// Where an entry came from; its hooks' output is labelled with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// An entry of an image's label without an `id`: the image's own settings.
    Image(String),
    /// An entry with an `id`: a feature, built into the image or about to be.
    Feature(String),
    /// An entry of an existing container's label without an `id`.
    Container(String),
    /// devcontainer.json's own entry.
    Config,
}

impl Origin {
    pub fn is_config(&self) -> bool {
        *self == Origin::Config
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Image(image) => write!(f, "image {image}"),
            Origin::Feature(id) => write!(f, "feature {id}"),
            Origin::Container(name) => write!(f, "container {name}"),
            Origin::Config => f.write_str("devcontainer.json"),
        }
    }
}

/// One entry with where it came from: `raw` as written (what a room's label
/// records), `entry` with the configuration's variables substituted and any
/// property of the wrong type left out (what is merged).
#[derive(Debug, Clone, PartialEq)]
pub struct Sourced {
    pub origin: Origin,
    pub raw: Entry,
    pub entry: Entry,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    #[error("is not JSON ({0})")]
    Json(String),
    #[error("is {0}, not an array of entries")]
    Shape(&'static str),
}

/// The label's entries, as the reference reads it: an array, or a single
/// object standing for a one-entry array. An empty label has none.
pub fn parse_label(text: &str) -> Result<Vec<Value>, LabelError> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    match serde_json::from_str::<Value>(text).map_err(|e| LabelError::Json(e.to_string()))? {
        Value::Array(items) => Ok(items),
        Value::Object(entry) => Ok(vec![Value::Object(entry)]),
        other => Err(LabelError::Shape(json_type(&other))),
    }
}

/// A room's metadata: its entries in order and their merge.
#[derive(Debug, Clone, PartialEq)]
pub struct RoomMetadata {
    pub entries: Vec<Sourced>,
    pub merged: Merged,
    /// Malformed labels, entries and properties, each naming where it was.
    pub warnings: Vec<String>,
}

/// The metadata of a room about to be made from `image`: the image's label,
/// then `features` (entries in the label's format of features resolved but
/// not built into the image), then devcontainer.json's entry.
pub fn for_new_room(loaded: &Loaded, image: &str, label: Option<&str>, features: &[Value]) -> RoomMetadata {
    let mut warnings = Vec::new();
    let mut entries =
        label_entries(loaded, label, &mut warnings, &|| format!("image {image}"), &|| Origin::Image(image.to_string()));
    for (i, feature) in features.iter().enumerate() {
        let place = || format!("feature entry {}", i + 1);
        entries.extend(sourced(loaded, feature, &mut warnings, &place, &|| Origin::Image(image.to_string())));
    }
    entries.extend(config_entry(loaded, CONFIG_PROPERTIES));
    RoomMetadata::new(entries, warnings)
}

/// The metadata of an existing room, as the reference reads it back: the
/// entries its label recorded at creation, then what the current
/// devcontainer.json may still change (`remoteUser`, `userEnvProbe`,
/// `remoteEnv`). A container without the label takes devcontainer.json's
/// whole entry.
pub fn of_container(loaded: &Loaded, container: &str, label: Option<&str>) -> RoomMetadata {
    let mut warnings = Vec::new();
    let mut entries = Vec::new();
    match label.filter(|l| !l.is_empty()) {
        None => entries.extend(config_entry(loaded, CONFIG_PROPERTIES)),
        Some(label) => {
            entries = label_entries(loaded, Some(label), &mut warnings, &|| format!("container {container}"), &|| {
                Origin::Container(container.to_string())
            });
            entries.extend(config_entry(loaded, UPDATEABLE_PROPERTIES));
        }
    }
    RoomMetadata::new(entries, warnings)
}

impl RoomMetadata {
    pub fn new(entries: Vec<Sourced>, warnings: Vec<String>) -> RoomMetadata {
        let merged = Merged::of(&entries);
        RoomMetadata { entries, merged, warnings }
    }

    /// The reference's `mergedConfiguration` for `configuration` (the
    /// substituted devcontainer.json as `read-configuration` prints it).
    pub fn configuration(&self, configuration: &Map<String, Value>) -> Map<String, Value> {
        merged_configuration(configuration, &self.entries.iter().map(|s| &s.entry).collect::<Vec<_>>())
    }

    /// The `devcontainer.metadata` label of a room made with these entries:
    /// each as written, in order, as the reference's `up` writes it. When no
    /// entry names a `remoteUser` and ours is not root, it is added to
    /// devcontainer.json's entry: the reference CLI (and editors) would
    /// otherwise take the container's user, which for a room is root (the
    /// daemon's), and run as someone else than `workroom exec` does.
    pub fn label(&self, remote_user: &str) -> String {
        let mut raw: Vec<Entry> = self.entries.iter().map(|s| s.raw.clone()).collect();
        if self.merged.remote_user.is_none() && remote_user != "root" {
            let config = match self.entries.last() {
                Some(s) if s.origin.is_config() => raw.last_mut(),
                _ => None,
            };
            match config {
                Some(entry) => {
                    entry.insert("remoteUser".into(), Value::String(remote_user.into()));
                }
                None => raw.push(Entry::from_iter([("remoteUser".to_string(), Value::String(remote_user.into()))])),
            }
        }
        Value::Array(raw.into_iter().map(Value::Object).collect()).to_string()
    }

    /// Whether the room runs privileged, and the loud line that says why
    /// when metadata asked for it: devcontainer.json's own `privileged`
    /// always holds; metadata's holds unless `allow_from_metadata` is off
    /// (the `[containers] metadata_privileged` setting).
    pub fn privileged(&self, room: &str, allow_from_metadata: bool) -> (bool, Option<String>) {
        let own = self.entries.iter().any(|s| s.origin.is_config() && s.entry.get("privileged").is_some_and(truthy));
        let askers: Vec<String> = self
            .entries
            .iter()
            .filter(|s| !s.origin.is_config() && s.entry.get("privileged").is_some_and(truthy))
            .map(|s| s.origin.to_string())
            .collect();
        if own || askers.is_empty() {
            return (own, None);
        }
        let askers = askers.join(", ");
        if allow_from_metadata {
            let line = format!(
                "{room} runs PRIVILEGED because {askers} asks for it in its devcontainer.metadata; \
                 to refuse, set `[containers] metadata_privileged = false` in .workroom.toml and `workroom up --recreate`"
            );
            (true, Some(line))
        } else {
            let line = format!(
                "{askers} asks for a privileged room in its devcontainer.metadata; not applied \
                 (`[containers] metadata_privileged = false`): what needs it may fail in {room}"
            );
            (false, Some(line))
        }
    }

    /// Capabilities and security options metadata adds beyond what
    /// devcontainer.json asks for itself, each with who asked: said once
    /// when the room is made, since they widen it.
    pub fn widening(&self) -> Vec<String> {
        let own = |key: &str| -> Vec<String> {
            self.entries.iter().filter(|s| s.origin.is_config()).flat_map(|s| strings(s.entry.get(key))).collect()
        };
        let mut said = Vec::new();
        for (key, what) in [("capAdd", "capability"), ("securityOpt", "security option")] {
            let mine = own(key);
            for s in self.entries.iter().filter(|s| !s.origin.is_config()) {
                for value in strings(s.entry.get(key)).into_iter().filter(|v| !mine.contains(v)) {
                    let line = format!("{what} {value} (asked by {})", s.origin);
                    if !said.contains(&line) {
                        said.push(line);
                    }
                }
            }
        }
        said
    }
}

/// The entries of a label, each checked and substituted.
fn label_entries(
    loaded: &Loaded,
    label: Option<&str>,
    warnings: &mut Vec<String>,
    whose: &dyn Fn() -> String,
    origin: &dyn Fn() -> Origin,
) -> Vec<Sourced> {
    let items = match label.map(parse_label).transpose() {
        Ok(items) => items.unwrap_or_default(),
        Err(e) => {
            warnings.push(format!("{}: its {LABEL} label {e}; ignored", whose()));
            return Vec::new();
        }
    };
    let mut entries = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let place = || format!("{}: {LABEL} entry {}", whose(), i + 1);
        entries.extend(sourced(loaded, item, warnings, &place, origin));
    }
    entries
}

/// One entry from metadata: an object (else a warning), its properties of
/// the wrong type left out (each a warning), its variables substituted as
/// devcontainer.json's are. An empty entry is dropped, as the reference does.
fn sourced(
    loaded: &Loaded,
    item: &Value,
    warnings: &mut Vec<String>,
    place: &dyn Fn() -> String,
    origin: &dyn Fn() -> Origin,
) -> Option<Sourced> {
    let Value::Object(raw) = item else {
        warnings.push(format!("{} is {}, not an object; ignored", place(), json_type(item)));
        return None;
    };
    if raw.is_empty() {
        return None;
    }
    let mut entry = raw.clone();
    entry.retain(|key, value| match check(key, value) {
        Ok(()) => true,
        Err(expected) => {
            warnings.push(format!("{}: `{key}` must be {expected}, found {}; ignored", place(), json_type(value)));
            false
        }
    });
    let entry = match loaded.substitution.apply(&Value::Object(entry.clone())) {
        Ok(Value::Object(substituted)) => substituted,
        Ok(_) => unreachable!("substitution keeps the shape of its input"),
        Err((missing, property)) => {
            warnings.push(format!("{}: `{property}`: {} names no variable; left as written", place(), missing.0));
            entry
        }
    };
    let origin = match raw.get("id") {
        Some(Value::String(id)) => Origin::Feature(id.clone()),
        _ => origin(),
    };
    Some(Sourced { origin, raw: raw.clone(), entry })
}

/// devcontainer.json's entry: the `properties` it sets, as written and as
/// substituted; none when it sets none.
/// devcontainer.json's own entry as the reference writes it last in a
/// derived image's label (`pickConfigProperties` of the file as written,
/// before substitution); `None` when it has none of those properties.
pub fn config_label_entry(loaded: &Loaded) -> Option<Entry> {
    config_entry(loaded, CONFIG_PROPERTIES).map(|s| s.raw)
}

fn config_entry(loaded: &Loaded, properties: &[&str]) -> Option<Sourced> {
    let pick = |map: &Map<String, Value>| -> Entry {
        properties.iter().filter_map(|k| map.get(*k).map(|v| (k.to_string(), v.clone()))).collect()
    };
    let (raw, entry) = (pick(&loaded.raw), pick(&loaded.json));
    (!entry.is_empty()).then_some(Sourced { origin: Origin::Config, raw, entry })
}

/// Whether a metadata property has a type the room can act on; `Err` says
/// what it must be. `null` is absent everywhere (the reference skips it).
fn check(key: &str, value: &Value) -> Result<(), &'static str> {
    let ok = |good: bool, expected| if good { Ok(()) } else { Err(expected) };
    let is_strings = |v: &Value| v.as_array().is_some_and(|a| a.iter().all(Value::is_string));
    let is_command = |v: &Value| v.is_string() || is_strings(v);
    if value.is_null() {
        return Ok(());
    }
    match key {
        "id" | "remoteUser" | "containerUser" | "entrypoint" => ok(value.is_string(), "a string"),
        "userEnvProbe" => ok(
            matches!(value.as_str(), Some("none" | "loginShell" | "loginInteractiveShell" | "interactiveShell")),
            "one of \"none\", \"loginShell\", \"loginInteractiveShell\", \"interactiveShell\"",
        ),
        "waitFor" => ok(
            value.as_str().is_some_and(|v| Hook::ALL.iter().any(|h| h.property() == v)),
            "the name of a lifecycle command",
        ),
        "shutdownAction" => ok(
            matches!(value.as_str(), Some("none" | "stopContainer" | "stopCompose")),
            "one of \"none\", \"stopContainer\", \"stopCompose\"",
        ),
        "init" | "privileged" | "overrideCommand" | "updateRemoteUserUID" => ok(value.is_boolean(), "true or false"),
        "capAdd" | "securityOpt" => ok(is_strings(value), "an array of strings"),
        "forwardPorts" => {
            ok(value.as_array().is_some_and(|a| a.iter().all(|p| p.is_string() || p.is_number())), "an array of ports")
        }
        "mounts" => ok(
            value.as_array().is_some_and(|a| a.iter().all(|m| m.is_string() || mount_object(m).is_some())),
            "an array of mount strings or {\"type\", \"source\", \"target\"} objects",
        ),
        "containerEnv" => {
            ok(value.as_object().is_some_and(|m| m.values().all(Value::is_string)), "an object of strings")
        }
        "remoteEnv" => ok(
            value.as_object().is_some_and(|m| m.values().all(|v| v.is_string() || v.is_null())),
            "an object of strings or nulls",
        ),
        "portsAttributes" => {
            ok(value.as_object().is_some_and(|m| m.values().all(Value::is_object)), "an object of objects")
        }
        "otherPortsAttributes" | "hostRequirements" | "customizations" => ok(value.is_object(), "an object"),
        _ if HOOKS.iter().any(|(h, _)| h.property() == key) => ok(
            is_command(value) || value.as_object().is_some_and(|m| m.values().all(is_command)),
            "a string, an array of strings or an object of commands",
        ),
        _ => Ok(()),
    }
}

/// A mount object with a `type` of bind or volume and a string `target`.
fn mount_object(v: &Value) -> Option<Mount> {
    let m = v.as_object()?;
    let kind = m.get("type")?.as_str().filter(|k| matches!(*k, "bind" | "volume"))?;
    let source = match m.get("source") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return None,
    };
    Some(Mount::Object {
        kind: kind.to_string(),
        source,
        target: m.get("target")?.as_str()?.to_string(),
        external: m.get("external").and_then(Value::as_bool),
    })
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// JavaScript's truthiness, which the reference's rules test with.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => false,
        Value::String(s) => !s.is_empty(),
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0 && !f.is_nan()),
        _ => true,
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------
// The merge, as the reference's `mergeConfiguration`

/// The reference's `mergedConfiguration`: `config` without the properties
/// the merge replaces, then each merged property (one the merge leaves
/// unset is absent, as `JSON.stringify` drops `undefined`).
pub fn merged_configuration(config: &Map<String, Value>, entries: &[&Entry]) -> Map<String, Value> {
    let mut out = config.clone();
    for key in REPLACED {
        out.shift_remove(*key);
    }
    let any = |key: &str| Value::Bool(entries.iter().any(|e| e.get(key).is_some_and(truthy)));
    let last = |key: &str| entries.iter().rev().find_map(|e| e.get(key).filter(|v| truthy(v)).cloned());
    let last_bool = |key: &str| entries.iter().rev().find_map(|e| e.get(key).filter(|v| v.is_boolean()).cloned());
    let assign = |key: &str| {
        let mut merged = Map::new();
        for map in entries.iter().filter_map(|e| e.get(key)?.as_object()) {
            merged.extend(map.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        Value::Object(merged)
    };
    let union = |key: &str| {
        let mut values: Vec<Value> = Vec::new();
        for v in entries.iter().filter_map(|e| e.get(key).filter(|v| truthy(v))) {
            for item in v.as_array().map_or_else(|| vec![v.clone()], Clone::clone) {
                if !values.contains(&item) {
                    values.push(item);
                }
            }
        }
        (!values.is_empty()).then_some(Value::Array(values))
    };
    let collect = |key: &str| entries.iter().filter_map(|e| e.get(key).filter(|v| truthy(v)).cloned()).collect();

    let mut set = |key: &str, value: Option<Value>| match value {
        Some(v) => {
            out.insert(key.to_string(), v);
        }
        None => {
            out.shift_remove(key);
        }
    };
    set("init", Some(any("init")));
    set("privileged", Some(any("privileged")));
    set("capAdd", union("capAdd"));
    set("securityOpt", union("securityOpt"));
    let entrypoints: Vec<Value> = collect("entrypoint");
    set("entrypoints", (!entrypoints.is_empty()).then_some(Value::Array(entrypoints)));
    set("mounts", merge_mounts(entries));
    set("customizations", merge_customizations(entries));
    for (hook, collected) in HOOKS {
        set(collected, Some(Value::Array(collect(hook.property()))));
    }
    set("waitFor", last("waitFor"));
    set("remoteUser", last("remoteUser"));
    set("containerUser", last("containerUser"));
    set("userEnvProbe", last("userEnvProbe"));
    set("remoteEnv", Some(assign("remoteEnv")));
    set("containerEnv", Some(assign("containerEnv")));
    set("overrideCommand", last_bool("overrideCommand"));
    set("portsAttributes", Some(assign("portsAttributes")));
    set("otherPortsAttributes", last("otherPortsAttributes"));
    set("forwardPorts", merge_forward_ports(entries));
    set("shutdownAction", last("shutdownAction"));
    set("updateRemoteUserUID", last_bool("updateRemoteUserUID"));
    set("hostRequirements", merge_host_requirements(entries));
    out
}

/// By target, the later wins and keeps its own place; a string mount's
/// target is read as the reference's `parseMount` does (split on `,` then
/// `=`, `dst` and `destination` meaning `target`).
fn merge_mounts(entries: &[&Entry]) -> Option<Value> {
    let all: Vec<&Value> = entries.iter().filter_map(|e| e.get("mounts")?.as_array()).flatten().collect();
    let target = |m: &Value| -> Option<String> {
        match m {
            Value::String(s) => s.split(',').fold(None, |found, field| {
                let mut parts = field.split('=');
                match parts.next() {
                    Some("target" | "dst" | "destination") => parts.next().map(str::to_string),
                    _ => found,
                }
            }),
            other => other.get("target").and_then(Value::as_str).map(str::to_string),
        }
    };
    let mut seen = Vec::new();
    let mut kept: Vec<Value> = Vec::new();
    for m in all.into_iter().rev() {
        let t = target(m);
        if !seen.contains(&t) {
            seen.push(t);
            kept.push(m.clone());
        }
    }
    kept.reverse();
    (!kept.is_empty()).then_some(Value::Array(kept))
}

fn merge_customizations(entries: &[&Entry]) -> Option<Value> {
    let mut merged = Map::new();
    for map in entries.iter().filter_map(|e| e.get("customizations")?.as_object()) {
        for (tool, value) in map {
            match merged.entry(tool.clone()).or_insert_with(|| Value::Array(Vec::new())) {
                Value::Array(values) => values.push(value.clone()),
                _ => unreachable!("only arrays are inserted"),
            }
        }
    }
    (!merged.is_empty()).then_some(Value::Object(merged))
}

/// Numbers are `localhost:N` for the union, then numbers again. Faithful to
/// the reference's unanchored test: any port string containing
/// `localhost:<digits>` comes back as the integer JavaScript's `parseInt`
/// reads after its first ten characters (`null` when none).
fn merge_forward_ports(entries: &[&Entry]) -> Option<Value> {
    let mut ports: Vec<String> = Vec::new();
    for port in entries.iter().filter_map(|e| e.get("forwardPorts")?.as_array()).flatten() {
        let key = match port {
            Value::Number(n) => format!("localhost:{}", js_number(n.as_f64().unwrap_or(f64::NAN))),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        if !ports.contains(&key) {
            ports.push(key);
        }
    }
    let localhost_port = |p: &str| {
        p.match_indices("localhost:").any(|(i, m)| p[i + m.len()..].starts_with(|c: char| c.is_ascii_digit()))
    };
    let values: Vec<Value> = ports
        .into_iter()
        .map(|p| {
            if localhost_port(&p) {
                let rest: String = p.chars().skip("localhost:".len()).collect();
                js_parse_int(&rest).map_or(Value::Null, Value::from)
            } else {
                Value::String(p)
            }
        })
        .collect();
    (!values.is_empty()).then_some(Value::Array(values))
}

/// The largest `cpus`, `memory` and `storage` (byte counts as strings, as
/// the reference prints them) and the merged `gpu`.
fn merge_host_requirements(entries: &[&Entry]) -> Option<Value> {
    if entries.is_empty() {
        // The reference's `Math.max()` of no entries is -Infinity, which is
        // truthy: it prints this for a config and image with no metadata.
        return Some(serde_json::json!({"cpus": null, "memory": "-Infinity", "storage": "-Infinity"}));
    }
    let requirements: Vec<&Map<String, Value>> =
        entries.iter().filter_map(|e| e.get("hostRequirements")?.as_object()).collect();
    let max = |f: &dyn Fn(&Map<String, Value>) -> f64| requirements.iter().map(|r| f(r)).fold(0.0, f64::max);
    let cpus = max(&|r| r.get("cpus").and_then(Value::as_f64).unwrap_or(0.0));
    let memory = max(&|r| parse_bytes(r.get("memory")));
    let storage = max(&|r| parse_bytes(r.get("storage")));
    let gpu = requirements.iter().map(|r| r.get("gpu").cloned()).fold(None, merge_gpu);
    if cpus == 0.0 && memory == 0.0 && storage == 0.0 && !gpu.as_ref().is_some_and(truthy) {
        return None;
    }
    let mut out = Map::new();
    out.insert("cpus".into(), number(cpus));
    if memory > 0.0 {
        out.insert("memory".into(), Value::String(js_number(memory)));
    }
    if storage > 0.0 {
        out.insert("storage".into(), Value::String(js_number(storage)));
    }
    if let Some(gpu) = gpu {
        out.insert("gpu".into(), gpu);
    }
    Some(Value::Object(out))
}

fn merge_gpu(a: Option<Value>, b: Option<Value>) -> Option<Value> {
    let unset = |v: &Option<Value>| matches!(v, None | Some(Value::Bool(false)));
    if unset(&a) {
        return b;
    }
    if unset(&b) {
        return a;
    }
    if a.as_ref().and_then(Value::as_str) == Some("optional") && b.as_ref().and_then(Value::as_str) == Some("optional")
    {
        return a;
    }
    let object = |v: &Option<Value>| v.as_ref().and_then(Value::as_object).cloned().unwrap_or_default();
    let (a, b) = (object(&a), object(&b));
    let cores = [&a, &b].iter().map(|o| o.get("cores").and_then(Value::as_f64).unwrap_or(0.0)).fold(0.0, f64::max);
    let memory = parse_bytes(a.get("memory")).max(parse_bytes(b.get("memory")));
    let mut out = Map::new();
    if cores > 0.0 {
        out.insert("cores".into(), number(cores));
    }
    if memory > 0.0 {
        out.insert("memory".into(), Value::String(js_number(memory)));
    }
    Some(Value::Object(out))
}

/// `4gb` and the like (lower-case units only, as the reference's pattern).
fn parse_bytes(v: Option<&Value>) -> f64 {
    let s = match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => return 0.0,
    };
    let digits = s.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &s[digits.len()..];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return 0.0;
    }
    let scale = match unit {
        "" => 1.0,
        "kb" => 1024.0,
        "mb" => 1024.0 * 1024.0,
        "gb" => 1024.0 * 1024.0 * 1024.0,
        "tb" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return 0.0,
    };
    digits.parse::<f64>().unwrap_or(0.0) * scale
}

/// A number as JavaScript writes it (integers without a fraction).
fn js_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e21 {
        format!("{n:.0}")
    } else {
        n.to_string()
    }
}

fn number(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9e15 {
        Value::from(n as i64)
    } else {
        Value::from(n)
    }
}

/// JavaScript's `parseInt(s)`: leading space, a sign, then digits.
fn js_parse_int(s: &str) -> Option<i64> {
    let s = s.trim_start();
    let (sign, rest) = match s.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, s.strip_prefix('+').unwrap_or(s)),
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse::<i64>().ok().map(|n| sign * n)
}

// ---------------------------------------------------------------------------
// The typed result the room applies

/// One lifecycle command and who asked for it.
#[derive(Debug, Clone, PartialEq)]
pub struct HookCommand {
    pub origin: Origin,
    pub command: Command,
}

/// The merged properties a room acts on. `init` is not among them: a room
/// always runs under Docker's init (the daemon relies on it to reap), and
/// `privileged` is decided by [`RoomMetadata::privileged`], which the
/// settings may refuse.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Merged {
    pub cap_add: Vec<String>,
    pub security_opt: Vec<String>,
    /// Run as root at every container start, in order, before postStart.
    pub entrypoints: Vec<String>,
    pub mounts: Vec<Mount>,
    pub container_env: Vec<(String, String)>,
    /// `null` unsets a variable the image or probe would otherwise give.
    pub remote_env: Vec<(String, Option<String>)>,
    pub remote_user: Option<String>,
    pub container_user: Option<String>,
    pub user_env_probe: Option<UserEnvProbe>,
    pub update_remote_user_uid: Option<bool>,
    pub override_command: Option<bool>,
    /// The hook a tool waits for before it hands the room over (`waitFor`).
    pub wait_for: Option<Hook>,
    /// Per hook, every entry's command in order (metadata's before devcontainer.json's).
    pub hooks: Vec<(Hook, Vec<HookCommand>)>,
}

impl Merged {
    /// Merges checked entries; every property read here has been checked.
    pub fn of(entries: &[Sourced]) -> Merged {
        let m = merged_configuration(&Map::new(), &entries.iter().map(|s| &s.entry).collect::<Vec<_>>());
        let string = |key: &str| m.get(key).and_then(Value::as_str).map(str::to_string);
        let bool = |key: &str| m.get(key).and_then(Value::as_bool);
        let pairs = |key: &str| -> Vec<(String, Option<String>)> {
            m.get(key)
                .and_then(Value::as_object)
                .map(|o| o.iter().map(|(k, v)| (k.clone(), v.as_str().map(str::to_string))).collect())
                .unwrap_or_default()
        };
        let hooks = HOOKS
            .iter()
            .map(|(hook, _)| {
                let commands = entries
                    .iter()
                    .filter_map(|s| {
                        let command = command(s.entry.get(hook.property())?)?;
                        Some(HookCommand { origin: s.origin.clone(), command })
                    })
                    .collect();
                (*hook, commands)
            })
            .collect();
        Merged {
            cap_add: strings(m.get("capAdd")),
            security_opt: strings(m.get("securityOpt")),
            entrypoints: strings(m.get("entrypoints")),
            mounts: m
                .get("mounts")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| match v {
                            Value::String(s) => Some(Mount::Spec(s.clone())),
                            other => mount_object(other),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            container_env: pairs("containerEnv").into_iter().filter_map(|(k, v)| Some((k, v?))).collect(),
            remote_env: pairs("remoteEnv"),
            remote_user: string("remoteUser"),
            container_user: string("containerUser"),
            user_env_probe: string("userEnvProbe").and_then(|p| match p.as_str() {
                "none" => Some(UserEnvProbe::None),
                "loginShell" => Some(UserEnvProbe::LoginShell),
                "loginInteractiveShell" => Some(UserEnvProbe::LoginInteractiveShell),
                "interactiveShell" => Some(UserEnvProbe::InteractiveShell),
                _ => None,
            }),
            update_remote_user_uid: bool("updateRemoteUserUID"),
            override_command: bool("overrideCommand"),
            wait_for: string("waitFor").and_then(|w| Hook::ALL.into_iter().find(|h| h.property() == w)),
            hooks,
        }
    }

    /// The commands of `hook`, in the order they run.
    pub fn hook(&self, hook: Hook) -> &[HookCommand] {
        self.hooks.iter().find(|(h, _)| *h == hook).map_or(&[], |(_, c)| c.as_slice())
    }
}

/// A lifecycle command in its three forms; an empty one is nothing to run.
fn command(v: &Value) -> Option<Command> {
    let simple = |v: &Value| match v {
        Value::String(s) if !s.is_empty() => Some(Command::Shell(s.clone())),
        Value::Array(a) if !a.is_empty() => {
            a.iter().map(|s| s.as_str().map(str::to_string)).collect::<Option<Vec<_>>>().map(Command::Exec)
        }
        _ => None,
    };
    match v {
        Value::Object(named) => {
            let named: Vec<(String, Command)> =
                named.iter().filter_map(|(n, c)| Some((n.clone(), simple(c)?))).collect();
            (!named.is_empty()).then_some(Command::Parallel(named))
        }
        other => simple(other),
    }
}

#[cfg(test)]
mod tests;
