//! Compose rooms, decided without I/O: the project's name, the service's
//! facts as compose states them, and the override file that gives the
//! service what every room has.
//!
//! The room is one service of the user's compose project; the real compose
//! program runs the project (`room/compose.rs`). workroom adds one file of
//! its own after the user's (`-f`), which compose merges over them: the
//! daemon as the service's entrypoint, user 0, init, the restart policy,
//! the labels, and what devcontainer.json and the image's metadata ask for
//! (containerEnv, mounts, capAdd, securityOpt, privileged). It is the room's
//! create request (`plan/create.rs`) said in compose's words, so an image
//! room and a compose room are made from one plan.
//!
//! The file is JSON, which every YAML reader takes (PyYAML for compose 1,
//! Go's yaml for compose 2), so it is written with serde_json rather than
//! by hand. Every string value has its `$` doubled: compose interpolates
//! `${VAR}` in the files it reads, ours included.

pub mod egress;

use super::create::{CreatePlan, ImageFacts};
use crate::config::{Loaded, Mount as ConfigMount};
use bollard::models::{HostConfig, Mount, MountType, RestartPolicyNameEnum};
use serde_json::{json, Map, Value};
use std::path::Path;

/// The label compose puts on every container of a project.
pub const PROJECT_LABEL: &str = "com.docker.compose.project";
// (the same as `engine::compose::PROJECT_LABEL`; plan and engine do not
// import each other)
/// The label compose puts on a service's containers.
pub const SERVICE_LABEL: &str = "com.docker.compose.service";
/// The compose files a container was made from, comma-separated (compose's
/// own label): what `stop` and `down` hand back to the compose program.
pub const CONFIG_FILES_LABEL: &str = "com.docker.compose.project.config_files";
/// The folder compose ran the project from (compose's own label).
pub const WORKING_DIR_LABEL: &str = "com.docker.compose.project.working_dir";
/// `shutdownAction` as the room was made with: `stop` and `down` read it
/// from the room, as they read everything else (they load no config).
pub const SHUTDOWN_LABEL: &str = "workroom.compose.shutdown_action";
/// The `--env-file` the project was made with, if any.
pub const ENV_FILE_LABEL: &str = "workroom.compose.env_file";

/// What the project's name is decided from, in the reference's order.
#[derive(Debug, Clone)]
pub struct ProjectInputs<'a> {
    /// `COMPOSE_PROJECT_NAME` of workroom's environment.
    pub env: Option<&'a str>,
    /// The workspace folder's `.env`, as text.
    pub dot_env: Option<&'a str>,
    /// `name` of the project as `compose config` prints it (compose 2).
    pub config_name: Option<&'a str>,
    /// Whether a compose file itself says `name:` (compose 2 prints
    /// `devcontainer` for files in `.devcontainer/` when none does).
    pub files_name_it: bool,
    /// The first compose file.
    pub first_file: &'a Path,
    /// The workspace folder.
    pub workspace: &'a Path,
    /// docker-compose 1.21 and later allow `-` and `_` in names.
    pub new_names: bool,
    /// The workspace is a linked git worktree (`git worktree add`).
    pub worktree: bool,
}

/// Hex digits of the workspace's hash a worktree's project name ends in:
/// as many as a room's name holds (`identity.rs`).
const WORKTREE_HASH_DIGITS: usize = 8;

/// The project's name by the reference's rules (its `getProjectName`):
/// `COMPOSE_PROJECT_NAME`, then the workspace's `.env`, then the files'
/// `name:`, then `<workspace>_devcontainer` when the first compose file is
/// in `<workspace>/.devcontainer`, else the first file's folder's name.
///
/// In a linked git worktree every name but `COMPOSE_PROJECT_NAME`'s (the
/// person's word for this one run) ends in a hash of the workspace folder.
/// The reference's rules give every worktree of a repository the same name
/// when the files say `name:` or `.env` is committed, and worktrees named
/// alike in two repositories (`feat-a_devcontainer`) the same name from the
/// folder: one project, whose `up` would replace the other room's service.
pub fn project_name(p: &ProjectInputs) -> String {
    let clean = |name: &str| to_project_name(name, p.new_names);
    if let Some(name) = p.env.map(clean).filter(|n| !n.is_empty()) {
        return name;
    }
    let name = reference_name(p);
    if !p.worktree {
        return name;
    }
    use sha2::{Digest, Sha256};
    let hash = hex::encode(Sha256::digest(p.workspace.as_os_str().as_encoded_bytes()));
    let hash = &hash[..WORKTREE_HASH_DIGITS];
    match (name.is_empty(), p.new_names) {
        (true, _) => hash.to_string(),
        (false, true) => format!("{name}-{hash}"),
        (false, false) => format!("{name}{hash}"),
    }
}

/// [`project_name`] past `COMPOSE_PROJECT_NAME`, by the reference's rules alone.
fn reference_name(p: &ProjectInputs) -> String {
    let clean = |name: &str| to_project_name(name, p.new_names);
    let from_dot_env = p.dot_env.and_then(|text| crate::config::dotenv::value(text, "COMPOSE_PROJECT_NAME"));
    if let Some(name) = from_dot_env.as_deref().map(clean).filter(|n| !n.is_empty()) {
        return name;
    }
    if let Some(name) = p.config_name.filter(|n| !n.is_empty()) {
        if name != "devcontainer" || p.files_name_it {
            return clean(name);
        }
    }
    let folder = p.first_file.parent().unwrap_or(p.workspace);
    let basename = |path: &Path| path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if folder == p.workspace.join(".devcontainer") {
        return clean(&format!("{}_devcontainer", basename(p.workspace)));
    }
    clean(&basename(folder))
}

/// Lower case, and only the characters compose keeps in a project name.
fn to_project_name(name: &str, new_names: bool) -> String {
    name.to_lowercase()
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || (new_names && (*c == '-' || *c == '_')))
        .collect()
}

/// The configuration a compose room is planned from: `runArgs` and
/// `appPort` left out, as the reference leaves them out (the compose file
/// says how the service runs and what it publishes), each said once.
pub fn room_config(loaded: &Loaded) -> (Loaded, Vec<String>) {
    let mut room = loaded.clone();
    let config = loaded.config_path.display();
    let mut said = Vec::new();
    if !room.model.run_args.is_empty() {
        room.model.run_args.clear();
        said.push(format!(
            "{config}: `runArgs` is not used by a compose room; the compose file says how its service runs"
        ));
    }
    if !room.model.app_port.is_empty() {
        room.model.app_port.clear();
        said.push(format!("{config}: `appPort` is not used by a compose room; publish ports in the compose file"));
    }
    (room, said)
}

/// Named volumes mounted from outside the project, declared `external`:
/// mounts marked so (devcontainer.json's or metadata's), and peer
/// messaging's socket volume.
pub fn external_volumes(mounts: &[ConfigMount], peer_volume: Option<&str>) -> Vec<String> {
    let marked = mounts.iter().filter_map(|m| match m {
        ConfigMount::Object { kind, source: Some(source), external: Some(true), .. } if kind == "volume" => {
            Some(source.clone())
        }
        _ => None,
    });
    marked.chain(peer_volume.map(str::to_string)).collect()
}

/// The name compose gives a built service's image when the file names
/// none: `<project>_<service>` before compose 2.8, `<project>-<service>` after.
pub fn default_image_name(project: &str, service: &str, version: Option<(u32, u32, u32)>) -> String {
    let separator = match version {
        Some(v) if v < (2, 8, 0) => '_',
        _ => '-',
    };
    format!("{project}{separator}{service}")
}

/// The services `up` names: `runServices` with the room's own service
/// added, or none (every service of the project).
pub fn services_to_run(service: &str, run_services: Option<&[String]>) -> Vec<String> {
    match run_services {
        None | Some([]) => Vec::new(),
        Some(list) => {
            let mut out = list.to_vec();
            if !out.iter().any(|s| s == service) {
                out.push(service.to_string());
            }
            out
        }
    }
}

/// The room's service as `compose config` states it (after merging the
/// user's files and interpolating), with `$$` read back as `$`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Service {
    pub image: Option<String>,
    /// The service has a `build:` section: compose builds its image.
    pub build: bool,
    pub user: Option<String>,
    pub entrypoint: Option<Vec<String>>,
    pub command: Option<Vec<String>>,
    /// `working_dir:`, where compose would start the service's program.
    pub working_dir: Option<String>,
}

impl Service {
    /// Reads `services.<name>` of the printed configuration.
    pub fn of(config: &Value, name: &str) -> Option<Service> {
        let s = config.get("services")?.get(name)?;
        let words = |key: &str| match s.get(key) {
            Some(Value::String(line)) => Some(split_words(&unescape(line))),
            Some(Value::Array(items)) => Some(items.iter().map(|v| unescape(&scalar(v))).collect()),
            _ => None,
        };
        Some(Service {
            image: s.get("image").map(|v| unescape(&scalar(v))),
            build: s.get("build").is_some_and(|b| !b.is_null()),
            user: s.get("user").map(|v| unescape(&scalar(v))).filter(|u| !u.is_empty()),
            entrypoint: words("entrypoint"),
            command: words("command"),
            working_dir: s.get("working_dir").map(|v| unescape(&scalar(v))).filter(|d| !d.is_empty()),
        })
    }
}

/// The project's service names as `compose config` printed them.
pub fn service_names(config: &Value) -> Vec<String> {
    config.get("services").and_then(Value::as_object).map(|m| m.keys().cloned().collect()).unwrap_or_default()
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Compose's `$$` is a literal `$`.
fn unescape(s: &str) -> String {
    s.replace("$$", "$")
}

/// A command line split into words as a POSIX shell would (quotes and
/// backslashes; no expansion): what compose does with a string `command`.
pub fn split_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                word.extend(chars.by_ref().take_while(|c| *c != '\''));
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => {
                            if let Some(next) = chars.next() {
                                if !matches!(next, '"' | '\\' | '$' | '`') {
                                    word.push('\\');
                                }
                                word.push(next);
                            }
                        }
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(next) = chars.next() {
                    word.push(next);
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The image's facts as the service runs it: compose's `user`,
/// `entrypoint` and `command` over the image's, by compose's rule (an
/// `entrypoint` set in the file drops the image's CMD).
pub fn service_facts(image: &ImageFacts, service: &Service) -> ImageFacts {
    let entrypoint = service.entrypoint.clone().unwrap_or_else(|| image.entrypoint.clone());
    let cmd = match (&service.command, &service.entrypoint) {
        (Some(command), _) => command.clone(),
        (None, Some(_)) => Vec::new(),
        (None, None) => image.cmd.clone(),
    };
    ImageFacts {
        user: service.user.clone().or_else(|| image.user.clone()),
        entrypoint,
        cmd,
        metadata: image.metadata.clone(),
        working_dir: service.working_dir.clone().or_else(|| image.working_dir.clone()),
    }
}

/// `version:` of the first compose file, as the reference finds it (the
/// first line that sets it), without quotes; repeated in the override as
/// the reference repeats it (older compose 1 releases refuse files of
/// different versions).
pub fn file_version(text: &str) -> Option<String> {
    let line = text.lines().find_map(|l| l.trim_start().strip_prefix("version:"))?;
    let value = line.split(" #").next().unwrap_or(line).trim().trim_matches(['"', '\'']);
    (!value.is_empty()).then(|| value.to_string())
}

/// What the override file is written from, besides the room's plan.
#[derive(Debug, Clone, Default)]
pub struct OverrideInputs<'a> {
    pub service: &'a str,
    /// The file version to repeat (compose 1 needs the same).
    pub version: Option<&'a str>,
    /// Set when the room runs another image than the file names (the
    /// derived image of features).
    pub image: Option<&'a str>,
    /// The container's name: the room's, so every command finds a compose
    /// room as it finds any room, by name, with one inspect.
    pub container_name: &'a str,
    /// Named volumes that exist outside the project (peer messaging's
    /// socket volume, mounts marked `external`): declared `external`, so
    /// compose neither prefixes nor creates nor removes them.
    pub external_volumes: &'a [String],
}

/// What of a room's plan has no place in a compose override.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a compose room cannot carry {what}")]
pub struct OverrideError {
    pub what: String,
}

/// The override file: the room's create request as compose keys for the
/// one service, and the named volumes it mounts.
pub fn override_file(plan: &CreatePlan, o: &OverrideInputs) -> Result<Value, OverrideError> {
    let body = &plan.body;
    let mut s = Map::new();
    s.insert("container_name".into(), json!(o.container_name));
    if let Some(image) = o.image {
        s.insert("image".into(), json!(image));
    }
    if let Some(user) = &body.user {
        s.insert("user".into(), json!(user));
    }
    if let Some(entrypoint) = &body.entrypoint {
        s.insert("entrypoint".into(), json!(entrypoint));
        // The daemon takes no arguments but its own: the file's `command`
        // (or the image's CMD) runs as its child only with
        // `overrideCommand: false`, inside the entrypoint already.
        s.insert("command".into(), json!(body.cmd.clone().unwrap_or_default()));
    }
    if let Some(env) = body.env.as_ref().filter(|e| !e.is_empty()) {
        s.insert("environment".into(), json!(env));
    }
    if let Some(labels) = &body.labels {
        let sorted: std::collections::BTreeMap<_, _> = labels.iter().collect();
        s.insert("labels".into(), json!(sorted));
    }
    if body.exposed_ports.as_ref().is_some_and(|p| !p.is_empty()) {
        return Err(OverrideError { what: "published ports (appPort); publish them in the compose file".into() });
    }
    if body.networking_config.is_some() {
        return Err(OverrideError { what: "network endpoint settings".into() });
    }
    let mut volumes = Map::new();
    if let Some(host) = &body.host_config {
        host_keys(host, o, &mut s, &mut volumes)?;
    }
    let mut file = Map::new();
    if let Some(version) = o.version {
        file.insert("version".into(), json!(version));
    }
    let mut services = Map::new();
    services.insert(o.service.to_string(), Value::Object(s));
    file.insert("services".into(), Value::Object(services));
    if !volumes.is_empty() {
        file.insert("volumes".into(), Value::Object(volumes));
    }
    let mut file = Value::Object(file);
    escape_dollars(&mut file);
    Ok(file)
}

/// The HostConfig of the plan as service keys; whatever it holds that has
/// no key here is refused by name rather than dropped.
fn host_keys(
    host: &HostConfig,
    o: &OverrideInputs,
    s: &mut Map<String, Value>,
    volumes: &mut Map<String, Value>,
) -> Result<(), OverrideError> {
    let mut rest = host.clone();
    if let Some(init) = rest.init.take() {
        // docker-compose 1.29 takes `init` whatever the file's version.
        s.insert("init".into(), json!(init));
    }
    if let Some(policy) = rest.restart_policy.take() {
        let restart = match (policy.name, policy.maximum_retry_count) {
            (Some(RestartPolicyNameEnum::ON_FAILURE), Some(n)) if n > 0 => format!("on-failure:{n}"),
            (Some(RestartPolicyNameEnum::EMPTY) | None, _) => "no".to_string(),
            (Some(name), _) => name.to_string(),
        };
        s.insert("restart".into(), json!(restart));
    }
    if rest.privileged.take() == Some(true) {
        // Only a widening is written: `false` would take away what the
        // compose file itself gave the service.
        s.insert("privileged".into(), json!(true));
    }
    for (key, list) in [("cap_add", rest.cap_add.take()), ("cap_drop", rest.cap_drop.take())] {
        if let Some(list) = list.filter(|l| !l.is_empty()) {
            s.insert(key.into(), json!(list));
        }
    }
    if let Some(opts) = rest.security_opt.take().filter(|l| !l.is_empty()) {
        s.insert("security_opt".into(), json!(opts));
    }
    if let Some(pid) = rest.pid_mode.take().filter(|p| !p.is_empty()) {
        s.insert("pid".into(), json!(pid));
    }
    if let Some(mode) = rest.network_mode.take().filter(|m| !m.is_empty()) {
        s.insert("network_mode".into(), json!(mode));
    }
    // The caps (`plan::caps`), in bytes and CPUs as compose takes them.
    for (key, value) in [
        ("mem_limit", rest.memory.take()),
        ("memswap_limit", rest.memory_swap.take()),
        ("pids_limit", rest.pids_limit.take()),
        ("oom_score_adj", rest.oom_score_adj.take()),
    ] {
        if let Some(value) = value {
            s.insert(key.into(), json!(value));
        }
    }
    if let Some(nano) = rest.nano_cpus.take() {
        s.insert("cpus".into(), json!(nano as f64 / 1e9));
    }
    if let Some(devices) = rest.devices.take().filter(|d| !d.is_empty()) {
        let devices: Vec<String> = devices
            .iter()
            .map(|d| {
                let host = d.path_on_host.clone().unwrap_or_default();
                let inside = d.path_in_container.clone().unwrap_or_else(|| host.clone());
                match &d.cgroup_permissions {
                    Some(p) if !p.is_empty() => format!("{host}:{inside}:{p}"),
                    _ => format!("{host}:{inside}"),
                }
            })
            .collect();
        s.insert("devices".into(), json!(devices));
    }
    let mut tmpfs: Vec<String> = Vec::new();
    if let Some(map) = rest.tmpfs.take() {
        let sorted: std::collections::BTreeMap<_, _> = map.into_iter().collect();
        tmpfs.extend(
            sorted.into_iter().map(|(path, opts)| if opts.is_empty() { path } else { format!("{path}:{opts}") }),
        );
    }
    if let Some(requests) = rest.device_requests.take().filter(|r| !r.is_empty()) {
        let devices: Vec<Value> = requests
            .iter()
            .map(|r| {
                let mut d = Map::new();
                if let Some(caps) = r.capabilities.as_ref().and_then(|c| c.first()) {
                    d.insert("capabilities".into(), json!(caps));
                }
                match r.count {
                    Some(-1) => d.insert("count".into(), json!("all")),
                    Some(n) => d.insert("count".into(), json!(n)),
                    None => None,
                };
                Value::Object(d)
            })
            .collect();
        s.insert("deploy".into(), json!({ "resources": { "reservations": { "devices": devices } } }));
    }
    let mut binds: Vec<String> = Vec::new();
    for m in rest.mounts.take().unwrap_or_default() {
        match mount_entry(&m, o.external_volumes)? {
            Entry::Volume(line, declare) => {
                binds.push(line);
                if let Some((name, external)) = declare {
                    let decl = if external { json!({ "external": true }) } else { json!({}) };
                    volumes.insert(name, decl);
                }
            }
            Entry::Tmpfs(line) => tmpfs.push(line),
        }
    }
    if !binds.is_empty() {
        s.insert("volumes".into(), json!(binds));
    }
    if !tmpfs.is_empty() {
        s.insert("tmpfs".into(), json!(tmpfs));
    }
    let left = serde_json::to_value(&rest).unwrap_or(Value::Null);
    let left: Vec<&String> = left.as_object().map(|m| m.keys().collect()).unwrap_or_default();
    if !left.is_empty() {
        let names: Vec<&str> = left.iter().map(|k| k.as_str()).collect();
        return Err(OverrideError { what: format!("the engine settings {}", names.join(", ")) });
    }
    Ok(())
}

enum Entry {
    /// A `volumes:` line, and the named volume to declare (external or not).
    Volume(String, Option<(String, bool)>),
    /// A `tmpfs:` line.
    Tmpfs(String),
}

/// One mount in compose's short syntax (`source:target:mode`), which every
/// compose file version takes; the long syntax needs 3.2 or later.
fn mount_entry(m: &Mount, external: &[String]) -> Result<Entry, OverrideError> {
    let target = m.target.clone().unwrap_or_default();
    let mut modes: Vec<String> = Vec::new();
    if m.read_only == Some(true) {
        modes.push("ro".into());
    }
    if let Some(p) = m.bind_options.as_ref().and_then(|b| b.propagation) {
        modes.push(p.to_string());
    }
    if m.volume_options.as_ref().and_then(|v| v.no_copy) == Some(true) {
        modes.push("nocopy".into());
    }
    let with_modes = |line: String| if modes.is_empty() { line } else { format!("{line}:{}", modes.join(",")) };
    match m.typ {
        Some(MountType::BIND) => {
            let source = m.source.clone().unwrap_or_default();
            Ok(Entry::Volume(with_modes(format!("{source}:{target}")), None))
        }
        Some(MountType::VOLUME) => match m.source.clone().filter(|s| !s.is_empty()) {
            Some(name) => {
                let declare = (name.clone(), external.contains(&name));
                Ok(Entry::Volume(with_modes(format!("{name}:{target}")), Some(declare)))
            }
            None => Ok(Entry::Volume(with_modes(target), None)),
        },
        Some(MountType::TMPFS) => {
            let options = m.tmpfs_options.as_ref();
            let mut opts: Vec<String> = Vec::new();
            if let Some(size) = options.and_then(|t| t.size_bytes) {
                opts.push(format!("size={size}"));
            }
            if let Some(mode) = options.and_then(|t| t.mode) {
                opts.push(format!("mode={mode:o}"));
            }
            Ok(Entry::Tmpfs(if opts.is_empty() { target } else { format!("{target}:{}", opts.join(",")) }))
        }
        other => Err(OverrideError {
            what: format!("a mount of type {} at {target}", other.map(|t| t.to_string()).unwrap_or_default()),
        }),
    }
}

/// Doubles every `$` in the strings of `value` (not in its keys).
fn escape_dollars(value: &mut Value) {
    match value {
        Value::String(s) if s.contains('$') => *s = s.replace('$', "$$"),
        Value::Array(items) => items.iter_mut().for_each(escape_dollars),
        Value::Object(map) => map.values_mut().for_each(escape_dollars),
        _ => {}
    }
}

#[cfg(test)]
mod tests;
