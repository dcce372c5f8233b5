//! devcontainer.json: find it, parse it, substitute its variables and read it
//! into a typed model, all without Docker (the decisions are pure; the only
//! I/O is reading the file and looking for `.git`).
//!
//! The order follows the reference CLI's `readDevContainerConfigFile`:
//! parse → legacy properties → workspace defaults (from the raw config) →
//! substitute with the host environment → the `${devcontainerId}` pass → the
//! typed model. `${containerEnv:...}` stays as written until a container
//! exists (see [`substitute::Context::container_env`]).

mod discover;
pub mod dotenv;
mod error;
mod id;
mod model;
mod parse;
mod scan;
pub mod substitute;
mod workspace;

pub use discover::{find_config, CANDIDATES};
pub use error::ConfigError;
pub use id::{devcontainer_id, id_labels};
pub use model::{
    is_compose, AppPort, Build, Command, Compose, DevContainer, ForwardPort, Gpu, Hook, HostRequirements, Lifecycle,
    Mount, PortAttributes, Source, UserEnvProbe,
};
pub use parse::{parse_document, Parsed};
pub use workspace::{git_root, gitdir_of, read_git, GitFacts, Linked, Workspace};

use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What to load, and the host environment `${localEnv:...}` reads.
#[derive(Debug, Clone)]
pub struct LoadRequest {
    pub workspace_folder: PathBuf,
    pub config: Option<PathBuf>,
    pub env: HashMap<String, String>,
    /// Substitute `${devcontainerId}` even with no container: what the
    /// reference's `up` does. Its `read-configuration` (and `workroom
    /// config`) only does when the container exists.
    pub id_without_container: bool,
    /// The existing container's environment: enables the `${devcontainerId}`
    /// and `${containerEnv:...}` passes.
    pub container_env: Option<HashMap<String, String>>,
    /// Refuse a file no room can be made from as written: no `image`, build
    /// or compose file (a tool's default image is meant, as Codespaces
    /// gives), or a compose file that is not there. Every command that makes
    /// or finds a room refuses it; `config` reads it, as the reference's
    /// `read-configuration` does.
    pub runnable_only: bool,
    /// Read the configuration's text from this file instead (the reference's
    /// `--override-config`): the configuration still is the workspace's own
    /// file for everything else (its path in labels, what relative paths
    /// start from), or where that file would be when there is none.
    pub override_config: Option<PathBuf>,
    /// Mount the workspace folder's git root, not the folder itself (the
    /// reference's `--mount-workspace-git-root`, true unless asked not to).
    pub mount_git_root: bool,
}

impl LoadRequest {
    /// A request reading the current process environment, for making or
    /// using a room (`${devcontainerId}` substituted).
    pub fn new(workspace_folder: impl Into<PathBuf>, config: Option<PathBuf>) -> Self {
        Self {
            workspace_folder: workspace_folder.into(),
            config,
            env: std::env::vars().collect(),
            id_without_container: true,
            container_env: None,
            runnable_only: true,
            override_config: None,
            mount_git_root: true,
        }
    }
}

/// A loaded configuration: the substituted JSON (as the reference prints it)
/// and the typed model read from it.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config_path: PathBuf,
    pub workspace: Workspace,
    /// `${devcontainerId}` of this workspace and config.
    pub devcontainer_id: String,
    pub json: Map<String, Value>,
    /// The file as written (legacy properties moved), before substitution:
    /// what the reference records in a container's `devcontainer.metadata`.
    pub raw: Map<String, Value>,
    pub model: DevContainer,
    /// The passes `json` was substituted with, for values that come from
    /// elsewhere (image and feature metadata).
    pub substitution: Substitution,
    /// What the parser took but the reader should hear about (a key given
    /// twice, JSON5-only syntax): `path:line:column: what`.
    pub parse_warnings: Vec<String>,
}

/// What a configuration's variables are resolved with, kept so values from
/// image and feature metadata get the same passes as the file (the
/// reference's `configWithRaw.substitute`).
#[derive(Debug, Clone, Default)]
pub struct Substitution {
    local_env: HashMap<String, String>,
    local_workspace_folder: String,
    /// As the file gave it (it may hold variables itself).
    container_workspace_folder: String,
    /// Set when the `${devcontainerId}` pass runs.
    devcontainer_id: Option<String>,
    /// Set when the `${containerEnv:...}` pass runs.
    container_env: Option<HashMap<String, String>>,
}

impl Substitution {
    /// Substitutes every string in `value` in the file's passes, in order:
    /// host and workspace, then `${devcontainerId}`, then `${containerEnv}`
    /// (each pass sees what the one before produced, as the reference's do).
    /// On error: the variable that names nothing and the property path.
    pub fn apply(&self, value: &Value) -> Result<Value, (substitute::MissingName, String)> {
        let ctx = substitute::Context {
            local_env: Some(&self.local_env),
            local_workspace_folder: Some(&self.local_workspace_folder),
            container_workspace_folder: Some(&self.container_workspace_folder),
            ..Default::default()
        };
        let mut value = substitute::substitute_value(&ctx, value)?;
        if let Some(id) = &self.devcontainer_id {
            let ctx = substitute::Context { devcontainer_id: Some(id), ..Default::default() };
            value = substitute::substitute_value(&ctx, &value)?;
        }
        if let Some(env) = &self.container_env {
            let ctx = substitute::Context { container_env: Some(env), ..Default::default() };
            value = substitute::substitute_value(&ctx, &value)?;
        }
        Ok(value)
    }
}

impl Loaded {
    /// Every warning about the file, each a line for stderr after `warning: `:
    /// what the parser found, then unknown properties.
    pub fn warnings(&self) -> Vec<String> {
        let unknown = self
            .model
            .unknown
            .iter()
            .map(|p| format!("{}: unknown property `{p}` (ignored)", self.config_path.display()));
        self.parse_warnings.iter().cloned().chain(unknown).collect()
    }

    /// The reference CLI's `read-configuration` output:
    /// `{"configuration": {...}, "workspace": {...}}`, with `configFilePath`
    /// a plain path rather than the reference's URI object.
    pub fn reference_json(&self) -> Value {
        let mut configuration = self.json.clone();
        configuration.insert("configFilePath".into(), Value::String(self.config_path.display().to_string()));
        let mut workspace = Map::new();
        workspace.insert("workspaceFolder".into(), Value::String(self.workspace.folder.clone()));
        if let Source::Compose(_) = self.model.source {
            // The reference has no mount for compose, so prints none, unless
            // the file sets one (echoed as given).
            if let Some(mount) = self.json.get("workspaceMount") {
                workspace.insert("workspaceMount".into(), mount.clone());
            }
        } else {
            // The reference prints the empty string it was given for "no mount".
            workspace.insert("workspaceMount".into(), Value::String(self.workspace.mount.clone().unwrap_or_default()));
        }
        let mut out = Map::new();
        out.insert("configuration".into(), Value::Object(configuration));
        out.insert("workspace".into(), Value::Object(workspace));
        Value::Object(out)
    }
}

pub fn load(request: &LoadRequest) -> Result<Loaded, ConfigError> {
    let local_folder = std::path::absolute(&request.workspace_folder)
        .ok()
        .filter(|p| p.is_dir())
        .ok_or_else(|| ConfigError::NoWorkspace { path: request.workspace_folder.clone() })?;
    let (config_path, text_path) = match &request.override_config {
        None => {
            let found = find_config(&local_folder, request.config.as_deref())?;
            (found.clone(), found)
        }
        Some(over) => {
            let over = discover::find_config(&local_folder, Some(over))?;
            let found = match find_config(&local_folder, request.config.as_deref()) {
                Err(ConfigError::NotFound { .. }) => local_folder.join(discover::CANDIDATES[0]),
                other => other?,
            };
            (found, over)
        }
    };
    let bytes = std::fs::read(&text_path).map_err(|source| ConfigError::Read { path: text_path.clone(), source })?;
    let parsed = parse_document(&text_path, parse::decode(&text_path, &bytes)?)?;
    let raw = update_from_old_properties(parsed.map);

    let raw_folder = raw.get("workspaceFolder").and_then(Value::as_str);
    let raw_mount = match raw.get("workspaceMount") {
        None => None,
        Some(Value::String(s)) => Some(s.as_str()),
        // The reference keeps a non-string as is; the model refuses it below.
        Some(_) => Some(""),
    };
    let compose = model::is_compose(&raw);
    let mut ws = match compose {
        // Compose has no workspace mount of its own: the compose file
        // mounts the workspace, and the folder is `/` unless set.
        true => Workspace {
            local_folder: local_folder.clone(),
            mount_root: local_folder.clone(),
            folder: raw_folder.filter(|f| !f.is_empty()).unwrap_or("/").to_string(),
            mount: None,
            git: read_git(&local_folder),
        },
        false => workspace::defaults(&local_folder, raw_folder, raw_mount, request.mount_git_root),
    };

    let local_folder_str = path_str(&config_path, &local_folder)?;
    let config_path_str = path_str(&config_path, &config_path)?;
    let devcontainer_id = devcontainer_id(&id_labels(local_folder_str, config_path_str));
    let substitution = Substitution {
        local_env: request.env.clone(),
        local_workspace_folder: local_folder_str.to_string(),
        container_workspace_folder: ws.folder.clone(),
        devcontainer_id: (request.id_without_container || request.container_env.is_some())
            .then(|| devcontainer_id.clone()),
        container_env: request.container_env.clone(),
    };
    let json = match substitution.apply(&Value::Object(raw.clone())) {
        Ok(Value::Object(out)) => out,
        Ok(_) => unreachable!("substitution keeps the shape of its input"),
        Err((substitute::MissingName(var), property)) => {
            return Err(ConfigError::Invalid {
                path: config_path,
                message: format!("`{property}`: {var} names no variable; write ${{localEnv:NAME}}"),
            })
        }
    };

    let mut model = model::read(&config_path, &json)?;
    match &mut model.source {
        Source::Compose(c) => {
            compose_files(c, &local_folder, &request.env);
            if request.runnable_only {
                compose_files_exist(c, &config_path)?;
            }
        }
        Source::Unset if request.runnable_only => return Err(ConfigError::NoSource { path: config_path }),
        _ => {}
    }
    if let Some(folder) = &model.workspace_folder {
        ws.folder = folder.clone();
    }
    // A compose room is mounted by its compose file; the reference echoes
    // a `workspaceMount` there but mounts nothing.
    if json.contains_key("workspaceMount") && !compose {
        ws.mount = model.workspace_mount.clone().filter(|m| !m.is_empty());
    }
    // An empty folder is echoed as the reference does; `up` refuses it.
    if !ws.folder.is_empty() && !ws.folder.starts_with('/') {
        return Err(ConfigError::Invalid {
            path: config_path,
            message: format!("`workspaceFolder` must be an absolute path in the container, found {:?}", ws.folder),
        });
    }
    Ok(Loaded {
        config_path,
        workspace: ws,
        devcontainer_id,
        json,
        raw,
        model,
        substitution,
        parse_warnings: parsed.warnings,
    })
}

/// The compose files as the reference finds them: those named, else (an
/// empty `dockerComposeFile` array) `COMPOSE_FILE` from the environment or
/// the workspace folder's `.env`, else `docker-compose.yml` and, when there,
/// `docker-compose.override.yml` in the workspace folder.
fn compose_files(c: &mut Compose, workspace: &Path, env: &HashMap<String, String>) {
    if c.files.is_empty() {
        let dot_env = workspace.join(".env");
        let from_dot_env = || {
            let text = std::fs::read_to_string(&dot_env).ok()?;
            dotenv::value(&text, "COMPOSE_FILE")
        };
        let listed = env.get("COMPOSE_FILE").filter(|v| !v.is_empty()).cloned().or_else(from_dot_env);
        c.files = match listed {
            Some(list) => list.split(':').filter(|f| !f.is_empty()).map(|f| workspace.join(f)).collect(),
            None => {
                let mut files = vec![workspace.join("docker-compose.yml")];
                let over = workspace.join("docker-compose.override.yml");
                if over.is_file() {
                    files.push(over);
                }
                files
            }
        };
        c.env_file = dot_env.is_file().then_some(dot_env);
    }
}

/// Each compose file must exist to make a room: the missing one is named
/// before compose is asked anything.
fn compose_files_exist(c: &Compose, config_path: &Path) -> Result<(), ConfigError> {
    match c.files.iter().find(|f| !f.is_file()) {
        Some(missing) => Err(ConfigError::MissingFile {
            path: config_path.to_path_buf(),
            property: "dockerComposeFile",
            missing: missing.clone(),
        }),
        None => Ok(()),
    }
}

fn path_str<'a>(config: &Path, path: &'a Path) -> Result<&'a str, ConfigError> {
    path.to_str().ok_or_else(|| ConfigError::Invalid {
        path: config.to_path_buf(),
        message: format!("the path {} is not valid UTF-8", path.display()),
    })
}

/// JavaScript truthiness, which the reference's legacy-property rule uses.
fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0 && !f.is_nan()),
        Some(_) => true,
    }
}

/// The reference's `updateFromOldProperties`: top-level `extensions`,
/// `settings` and `devPort` move under `customizations.vscode` (`devPort`
/// only when `vscode.devPort` is not set; otherwise it stays where it is).
fn update_from_old_properties(mut raw: Map<String, Value>) -> Map<String, Value> {
    let dev_port_set = raw.get("devPort").is_some_and(|v| !v.is_null());
    if !(truthy(raw.get("extensions")) || truthy(raw.get("settings")) || dev_port_set) {
        return raw;
    }
    let extensions = if truthy(raw.get("extensions")) { raw.shift_remove("extensions") } else { None };
    let settings = if truthy(raw.get("settings")) { raw.shift_remove("settings") } else { None };
    let dev_port = raw.get("devPort").cloned().filter(|v| !v.is_null());
    let customizations = raw.entry("customizations").or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(customizations) = customizations else { return raw };
    let vscode = customizations.entry("vscode").or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(vscode) = vscode else { return raw };
    if let Some(ext) = extensions {
        let mut all = match vscode.remove("extensions") {
            Some(Value::Array(a)) => a,
            _ => Vec::new(),
        };
        match ext {
            Value::Array(a) => all.extend(a),
            other => all.push(other),
        }
        vscode.insert("extensions".into(), Value::Array(all));
    }
    if let Some(Value::Object(old)) = settings {
        let mut merged = old;
        if let Some(Value::Object(newer)) = vscode.remove("settings") {
            merged.extend(newer);
        }
        vscode.insert("settings".into(), Value::Object(merged));
    }
    let move_dev_port = dev_port.is_some() && vscode.get("devPort").is_none_or(Value::is_null);
    if let (true, Some(port)) = (move_dev_port, dev_port) {
        vscode.insert("devPort".into(), port);
        raw.shift_remove("devPort");
    }
    raw
}

#[cfg(test)]
mod tests;

/// The table tests' configuration: `config` written as `.devcontainer.json`
/// in a folder of its own (kept while the returned guard lives), loaded
/// with an empty host environment.
#[cfg(test)]
pub fn loaded_for_test(config: &str) -> (tempfile::TempDir, Loaded) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(".devcontainer.json"), config).unwrap();
    let l = load(&LoadRequest { env: std::collections::HashMap::new(), ..LoadRequest::new(dir.path(), None) }).unwrap();
    (dir, l)
}
