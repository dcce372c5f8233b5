//! The typed devcontainer.json: every property workroom acts on, read from the
//! substituted JSON with the property named in every type error.
//!
//! The JSON itself is kept beside the model (`Loaded::json`) because
//! `workroom config --json` must print it exactly as the reference does,
//! unknown keys included.

use super::ConfigError;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq)]
pub struct DevContainer {
    pub name: Option<String>,
    pub source: Source,
    pub app_port: Vec<AppPort>,
    pub forward_ports: Vec<ForwardPort>,
    pub ports_attributes: Vec<(String, PortAttributes)>,
    pub container_env: Vec<(String, String)>,
    /// `null` unsets a variable the image or probe would otherwise give.
    pub remote_env: Vec<(String, Option<String>)>,
    pub container_user: Option<String>,
    pub remote_user: Option<String>,
    pub update_remote_user_uid: Option<bool>,
    pub user_env_probe: Option<UserEnvProbe>,
    pub override_command: Option<bool>,
    pub shutdown_action: Option<String>,
    pub init: Option<bool>,
    pub privileged: Option<bool>,
    pub cap_add: Vec<String>,
    pub security_opt: Vec<String>,
    pub mounts: Vec<Mount>,
    pub run_args: Vec<String>,
    pub workspace_mount: Option<String>,
    pub workspace_folder: Option<String>,
    pub lifecycle: Lifecycle,
    pub wait_for: Option<Hook>,
    pub customizations: Option<Map<String, Value>>,
    pub host_requirements: Option<HostRequirements>,
    /// `features`, as written: the user's id of each feature and its options
    /// (an object, a string for the `version` shorthand, or a boolean).
    /// Resolving them is `crate::features`' work.
    pub features: Vec<(String, Value)>,
    pub override_feature_install_order: Vec<String>,
    /// Properties we do not know; printed as warnings, since a typo such as
    /// `postCreateComand` would otherwise be silently ignored.
    pub unknown: Vec<String>,
}

/// `hostRequirements`: what the engine's host should have; a shortfall is a
/// warning, as the reference warns for a GPU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostRequirements {
    pub cpus: Option<u64>,
    /// Bytes.
    pub memory: Option<u64>,
    /// Bytes.
    pub storage: Option<u64>,
    pub gpu: Gpu,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Gpu {
    #[default]
    No,
    /// Used when there is one; no warning when there is none.
    Optional,
    Required,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    Image(String),
    Dockerfile(Build),
    /// The room is a service of a Docker Compose project.
    Compose(Compose),
    /// None of `image`, a Dockerfile or `dockerComposeFile`: the file leans
    /// on a tool's default image (Codespaces gives one). `config` prints it;
    /// no room is made from it (`LoadRequest::runnable_only`).
    Unset,
}

/// `dockerComposeFile`, `service` and `runServices`.
#[derive(Debug, Clone, PartialEq)]
pub struct Compose {
    /// The compose files, absolute, in order (later ones override earlier
    /// ones, as `-f` does). Resolved against the config file's folder; an
    /// empty `dockerComposeFile` array is compose's own default files,
    /// found from the workspace folder as the reference does.
    pub files: Vec<PathBuf>,
    /// `--env-file`: the workspace folder's `.env`, passed only with an
    /// empty `dockerComposeFile` array (the reference's rule).
    pub env_file: Option<PathBuf>,
    /// The service that is the room.
    pub service: String,
    /// `runServices`: `None` starts every service of the project.
    pub run_services: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Build {
    /// Absolute: resolved against the config file's folder.
    pub dockerfile: PathBuf,
    /// Absolute; defaults to the Dockerfile's folder, as the reference does.
    pub context: PathBuf,
    pub args: Vec<(String, String)>,
    pub target: Option<String>,
    pub cache_from: Vec<String>,
    pub options: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AppPort {
    Port(u16),
    /// A `docker run -p` spec such as `127.0.0.1:8080:80`.
    Spec(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForwardPort {
    Port(u16),
    /// `host:port`: a port of another host as seen from the room.
    HostPort {
        host: String,
        port: u16,
    },
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct PortAttributes {
    pub label: Option<String>,
    pub protocol: Option<String>,
    pub on_auto_forward: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserEnvProbe {
    None,
    LoginShell,
    LoginInteractiveShell,
    InteractiveShell,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Mount {
    /// The `docker run --mount` syntax, e.g. `type=bind,source=/a,target=/b`.
    Spec(String),
    Object {
        kind: String,
        source: Option<String>,
        target: String,
        external: Option<bool>,
    },
}

/// A lifecycle command in the reference's three forms.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Run by `/bin/sh -c`.
    Shell(String),
    /// Run directly, no shell.
    Exec(Vec<String>),
    /// Named commands run in parallel; each a `Shell` or an `Exec`.
    Parallel(Vec<(String, Command)>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Hook {
    Initialize,
    OnCreate,
    UpdateContent,
    PostCreate,
    PostStart,
    PostAttach,
}

impl Hook {
    pub const ALL: [Hook; 6] =
        [Hook::Initialize, Hook::OnCreate, Hook::UpdateContent, Hook::PostCreate, Hook::PostStart, Hook::PostAttach];

    pub fn property(self) -> &'static str {
        match self {
            Hook::Initialize => "initializeCommand",
            Hook::OnCreate => "onCreateCommand",
            Hook::UpdateContent => "updateContentCommand",
            Hook::PostCreate => "postCreateCommand",
            Hook::PostStart => "postStartCommand",
            Hook::PostAttach => "postAttachCommand",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Lifecycle {
    commands: Vec<(Hook, Command)>,
}

impl Lifecycle {
    pub fn get(&self, hook: Hook) -> Option<&Command> {
        self.commands.iter().find(|(h, _)| *h == hook).map(|(_, c)| c)
    }
}

/// Top-level properties of the devcontainer.json schema (image and Dockerfile
/// configs, the general ones, and the legacy VS Code ones that are ignored).
const KNOWN: &[&str] = &[
    "$schema",
    "name",
    "image",
    "build",
    "dockerFile",
    "context",
    "appPort",
    "forwardPorts",
    "portsAttributes",
    "otherPortsAttributes",
    "containerEnv",
    "remoteEnv",
    "containerUser",
    "remoteUser",
    "updateRemoteUserUID",
    "userEnvProbe",
    "overrideCommand",
    "shutdownAction",
    "init",
    "privileged",
    "capAdd",
    "securityOpt",
    "mounts",
    "runArgs",
    "workspaceMount",
    "workspaceFolder",
    "initializeCommand",
    "onCreateCommand",
    "updateContentCommand",
    "postCreateCommand",
    "postStartCommand",
    "postAttachCommand",
    "waitFor",
    "features",
    "overrideFeatureInstallOrder",
    "dockerComposeFile",
    "service",
    "runServices",
    "customizations",
    "hostRequirements",
    "secrets",
    "extensions",
    "settings",
    "devPort",
    "configFilePath",
];

/// Reads the model from the substituted JSON of the file at `path`.
pub fn read(path: &Path, json: &Map<String, Value>) -> Result<DevContainer, ConfigError> {
    let r = Reader { path };
    let source = r.source(json)?;
    let lifecycle = Lifecycle {
        commands: Hook::ALL
            .iter()
            .filter_map(|hook| r.command(json, hook.property()).transpose().map(|c| c.map(|c| (*hook, c))))
            .collect::<Result<_, _>>()?,
    };
    Ok(DevContainer {
        name: r.string(json, "name")?,
        source,
        app_port: r.app_port(json)?,
        forward_ports: r.forward_ports(json)?,
        ports_attributes: r.ports_attributes(json)?,
        container_env: r.string_map(json, "containerEnv")?,
        remote_env: r.remote_env(json)?,
        container_user: r.string(json, "containerUser")?,
        remote_user: r.string(json, "remoteUser")?,
        update_remote_user_uid: r.bool(json, "updateRemoteUserUID")?,
        user_env_probe: r.user_env_probe(json)?,
        override_command: r.bool(json, "overrideCommand")?,
        shutdown_action: r.one_of(json, "shutdownAction", &["none", "stopContainer", "stopCompose"])?,
        init: r.bool(json, "init")?,
        privileged: r.bool(json, "privileged")?,
        cap_add: r.strings(json, "capAdd")?,
        security_opt: r.strings(json, "securityOpt")?,
        mounts: r.mounts(json)?,
        run_args: r.strings(json, "runArgs")?,
        workspace_mount: r.string(json, "workspaceMount")?,
        workspace_folder: r.string(json, "workspaceFolder")?,
        lifecycle,
        wait_for: r.wait_for(json)?,
        customizations: r.object(json, "customizations")?.cloned(),
        host_requirements: r.host_requirements(json)?,
        features: r.features(json)?,
        override_feature_install_order: r.strings(json, "overrideFeatureInstallOrder")?,
        unknown: json.keys().filter(|k| !KNOWN.contains(&k.as_str())).cloned().collect(),
    })
}

/// A compose config, as the reference tells one: `dockerComposeFile` is
/// set and neither `image` nor a Dockerfile is (those win when both are).
pub fn is_compose(json: &Map<String, Value>) -> bool {
    let dockerfile = json.get("build").and_then(|b| b.get("dockerfile")).is_some() || json.contains_key("dockerFile");
    json.contains_key("dockerComposeFile") && !json.contains_key("image") && !dockerfile
}

/// How a value is named in an error: its JSON type and, for scalars, itself.
pub fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

struct Reader<'a> {
    path: &'a Path,
}

impl Reader<'_> {
    fn type_error(&self, property: impl Into<String>, expected: &'static str, found: &Value) -> ConfigError {
        ConfigError::Type { path: self.path.to_path_buf(), property: property.into(), expected, found: describe(found) }
    }

    fn features(&self, json: &Map<String, Value>) -> Result<Vec<(String, Value)>, ConfigError> {
        let Some(map) = self.object(json, "features")? else {
            return Ok(Vec::new());
        };
        map.iter()
            .map(|(id, options)| match options {
                Value::Object(_) | Value::String(_) | Value::Bool(_) => Ok((id.clone(), options.clone())),
                other => Err(self.type_error(
                    format!("features[{id:?}]"),
                    "an object of options, a version string or true",
                    other,
                )),
            })
            .collect()
    }

    /// `dockerComposeFile` (a string or an array), `service` and `runServices`.
    fn compose(&self, json: &Map<String, Value>) -> Result<Source, ConfigError> {
        let dir = self.path.parent().unwrap_or(Path::new("/"));
        let files = match &json["dockerComposeFile"] {
            Value::String(f) => vec![dir.join(f)],
            Value::Array(_) | Value::Null => {
                self.strings(json, "dockerComposeFile")?.iter().map(|f| dir.join(f)).collect()
            }
            other => return Err(self.type_error("dockerComposeFile", "a string or an array of strings", other)),
        };
        let service = match self.string(json, "service")? {
            Some(s) if !s.is_empty() => s,
            _ => {
                return Err(ConfigError::Invalid {
                    path: self.path.to_path_buf(),
                    message: "`dockerComposeFile` needs `service`: the compose service that is the room".into(),
                })
            }
        };
        let run_services = match json.get("runServices") {
            None | Some(Value::Null) => None,
            Some(_) => Some(self.strings(json, "runServices")?),
        };
        if self.string(json, "shutdownAction")?.as_deref() == Some("stopContainer") {
            return Err(ConfigError::Invalid {
                path: self.path.to_path_buf(),
                message: "`shutdownAction` \"stopContainer\" is for image and Dockerfile configs; \
                          a compose config takes \"stopCompose\" (the default) or \"none\""
                    .into(),
            });
        }
        Ok(Source::Compose(Compose { files, env_file: None, service, run_services }))
    }

    fn source(&self, json: &Map<String, Value>) -> Result<Source, ConfigError> {
        let dir = self.path.parent().unwrap_or(Path::new("/"));
        let build = self.object(json, "build")?;
        let dockerfile = match build {
            Some(b) => self.string(b, "dockerfile").map_err(|e| self.nest(e, "build"))?,
            None => None,
        }
        .map(|f| ("build.dockerfile", f))
        .or(self.string(json, "dockerFile")?.map(|f| ("dockerFile", f)));

        if let Some((property, file)) = dockerfile {
            let dockerfile = dir.join(&file);
            if dockerfile.is_dir() {
                return Err(ConfigError::Invalid {
                    path: self.path.to_path_buf(),
                    message: format!(
                        "`{property}` names {}, which is a folder; name the Dockerfile itself, such as \"Dockerfile\"",
                        dockerfile.display()
                    ),
                });
            }
            if !dockerfile.is_file() {
                return Err(ConfigError::MissingFile { path: self.path.to_path_buf(), property, missing: dockerfile });
            }
            let (context_property, context) = match build {
                Some(b) if b.contains_key("dockerfile") => {
                    ("build.context", self.string(b, "context").map_err(|e| self.nest(e, "build"))?)
                }
                _ => ("context", self.string(json, "context")?),
            };
            let context = match context {
                Some(c) => dir.join(c),
                None => dockerfile.parent().unwrap_or(dir).to_path_buf(),
            };
            if !context.is_dir() {
                return Err(ConfigError::MissingFile {
                    path: self.path.to_path_buf(),
                    property: context_property,
                    missing: context,
                });
            }
            let empty = Map::new();
            let b = build.unwrap_or(&empty);
            let nest = |e| self.nest(e, "build");
            return Ok(Source::Dockerfile(Build {
                dockerfile,
                context,
                args: self.string_map(b, "args").map_err(nest)?,
                target: self.string(b, "target").map_err(nest)?,
                cache_from: self.string_or_strings(b, "cacheFrom").map_err(nest)?,
                options: self.strings(b, "options").map_err(nest)?,
            }));
        }
        if is_compose(json) {
            return self.compose(json);
        }
        match self.string(json, "image")? {
            Some(image) if !image.trim().is_empty() => Ok(Source::Image(image)),
            Some(_) => Err(ConfigError::Invalid { path: self.path.to_path_buf(), message: "`image` is empty".into() }),
            None => Ok(Source::Unset),
        }
    }

    /// Prefixes the property of a type error found inside an object.
    fn nest(&self, e: ConfigError, parent: &str) -> ConfigError {
        match e {
            ConfigError::Type { path, property, expected, found } => {
                ConfigError::Type { path, property: format!("{parent}.{property}"), expected, found }
            }
            other => other,
        }
    }

    /// The items of an array property; absent or null is no items.
    fn items<'j>(
        &self,
        json: &'j Map<String, Value>,
        key: &str,
        expected: &'static str,
    ) -> Result<&'j [Value], ConfigError> {
        match json.get(key) {
            None | Some(Value::Null) => Ok(&[]),
            Some(Value::Array(items)) => Ok(items),
            Some(other) => Err(self.type_error(key, expected, other)),
        }
    }

    fn string(&self, json: &Map<String, Value>, key: &str) -> Result<Option<String>, ConfigError> {
        match json.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.type_error(key, "a string", other)),
        }
    }

    fn bool(&self, json: &Map<String, Value>, key: &str) -> Result<Option<bool>, ConfigError> {
        match json.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.type_error(key, "true or false", other)),
        }
    }

    fn object<'j>(
        &self,
        json: &'j Map<String, Value>,
        key: &str,
    ) -> Result<Option<&'j Map<String, Value>>, ConfigError> {
        match json.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(other) => Err(self.type_error(key, "an object", other)),
        }
    }

    fn one_of(
        &self,
        json: &Map<String, Value>,
        key: &str,
        allowed: &'static [&'static str],
    ) -> Result<Option<String>, ConfigError> {
        let value = self.string(json, key)?;
        match value {
            Some(v) if !allowed.contains(&v.as_str()) => Err(ConfigError::Invalid {
                path: self.path.to_path_buf(),
                message: format!("`{key}` must be one of {}, found {v:?}", quoted(allowed)),
            }),
            v => Ok(v),
        }
    }

    fn strings(&self, json: &Map<String, Value>, key: &str) -> Result<Vec<String>, ConfigError> {
        self.items(json, key, "an array of strings")?
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(s.clone()),
                other => Err(self.type_error(format!("{key}[{i}]"), "a string", other)),
            })
            .collect()
    }

    fn string_or_strings(&self, json: &Map<String, Value>, key: &str) -> Result<Vec<String>, ConfigError> {
        match json.get(key) {
            Some(Value::String(s)) => Ok(vec![s.clone()]),
            _ => self.strings(json, key),
        }
    }

    fn string_map(&self, json: &Map<String, Value>, key: &str) -> Result<Vec<(String, String)>, ConfigError> {
        let Some(map) = self.object(json, key)? else {
            return Ok(Vec::new());
        };
        map.iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                other => Err(self.type_error(format!("{key}.{k}"), "a string", other)),
            })
            .collect()
    }

    fn remote_env(&self, json: &Map<String, Value>) -> Result<Vec<(String, Option<String>)>, ConfigError> {
        let Some(map) = self.object(json, "remoteEnv")? else {
            return Ok(Vec::new());
        };
        map.iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), Some(s.clone()))),
                Value::Null => Ok((k.clone(), None)),
                other => Err(self.type_error(format!("remoteEnv.{k}"), "a string or null", other)),
            })
            .collect()
    }

    fn port(&self, property: String, value: &Value) -> Result<u16, ConfigError> {
        match value.as_u64() {
            Some(n) if (1..=65535).contains(&n) => Ok(n as u16),
            _ => Err(self.type_error(property, "a port number from 1 to 65535", value)),
        }
    }

    fn app_port(&self, json: &Map<String, Value>) -> Result<Vec<AppPort>, ConfigError> {
        let one = |property: String, v: &Value| match v {
            Value::String(s) => Ok(AppPort::Spec(s.clone())),
            Value::Number(_) => self.port(property, v).map(AppPort::Port),
            other => Err(self.type_error(property, "a port number or a string such as \"127.0.0.1:8080:80\"", other)),
        };
        match json.get("appPort") {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => {
                items.iter().enumerate().map(|(i, v)| one(format!("appPort[{i}]"), v)).collect()
            }
            Some(v) => Ok(vec![one("appPort".into(), v)?]),
        }
    }

    fn forward_ports(&self, json: &Map<String, Value>) -> Result<Vec<ForwardPort>, ConfigError> {
        const EXPECTED: &str = "a port number from 1 to 65535 or a string \"host:port\"";
        self.items(json, "forwardPorts", "an array of ports")?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let property = format!("forwardPorts[{i}]");
                match v {
                    Value::Number(_) => self.port(property, v).map(ForwardPort::Port),
                    Value::String(s) => {
                        let parsed = s.rsplit_once(':').and_then(|(host, port)| {
                            let port = port.parse::<u16>().ok().filter(|p| *p > 0)?;
                            (!host.is_empty()).then(|| ForwardPort::HostPort { host: host.to_string(), port })
                        });
                        parsed.ok_or_else(|| self.type_error(property, EXPECTED, v))
                    }
                    other => Err(self.type_error(property, EXPECTED, other)),
                }
            })
            .collect()
    }

    fn ports_attributes(&self, json: &Map<String, Value>) -> Result<Vec<(String, PortAttributes)>, ConfigError> {
        let Some(map) = self.object(json, "portsAttributes")? else {
            return Ok(Vec::new());
        };
        map.iter()
            .map(|(port, v)| {
                let Value::Object(attrs) = v else {
                    return Err(self.type_error(format!("portsAttributes.{port}"), "an object", v));
                };
                let nest = |e| self.nest(e, &format!("portsAttributes.{port}"));
                Ok((
                    port.clone(),
                    PortAttributes {
                        label: self.string(attrs, "label").map_err(nest)?,
                        protocol: self.string(attrs, "protocol").map_err(nest)?,
                        on_auto_forward: self.string(attrs, "onAutoForward").map_err(nest)?,
                    },
                ))
            })
            .collect()
    }

    fn user_env_probe(&self, json: &Map<String, Value>) -> Result<Option<UserEnvProbe>, ConfigError> {
        const ALLOWED: &[&str] = &["none", "loginShell", "loginInteractiveShell", "interactiveShell"];
        Ok(self.one_of(json, "userEnvProbe", ALLOWED)?.map(|v| match v.as_str() {
            "none" => UserEnvProbe::None,
            "loginShell" => UserEnvProbe::LoginShell,
            "loginInteractiveShell" => UserEnvProbe::LoginInteractiveShell,
            _ => UserEnvProbe::InteractiveShell,
        }))
    }

    fn wait_for(&self, json: &Map<String, Value>) -> Result<Option<Hook>, ConfigError> {
        let Some(value) = self.string(json, "waitFor")? else { return Ok(None) };
        Hook::ALL.into_iter().find(|h| h.property() == value).map(Some).ok_or_else(|| ConfigError::Invalid {
            path: self.path.to_path_buf(),
            message: format!("`waitFor` must be one of {}, found {value:?}", quoted(&Hook::ALL.map(Hook::property))),
        })
    }

    fn host_requirements(&self, json: &Map<String, Value>) -> Result<Option<HostRequirements>, ConfigError> {
        let Some(req) = self.object(json, "hostRequirements")? else { return Ok(None) };
        let nest = |e| self.nest(e, "hostRequirements");
        let size = |key: &str| -> Result<Option<u64>, ConfigError> {
            let Some(text) = self.string(req, key).map_err(nest)? else { return Ok(None) };
            let bytes = size_of(&text).ok_or_else(|| {
                self.type_error(
                    format!("hostRequirements.{key}"),
                    "a size such as \"8gb\" (tb, gb, mb, kb)",
                    &Value::String(text.clone()),
                )
            })?;
            Ok(Some(bytes))
        };
        let cpus = match req.get("cpus") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_u64()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| self.type_error("hostRequirements.cpus", "a whole number of CPUs from 1", v))?,
            ),
        };
        let gpu = match req.get("gpu") {
            None | Some(Value::Null) | Some(Value::Bool(false)) => Gpu::No,
            Some(Value::Bool(true)) | Some(Value::Object(_)) => Gpu::Required,
            Some(Value::String(s)) if s == "optional" => Gpu::Optional,
            Some(other) => {
                return Err(self.type_error("hostRequirements.gpu", "true, false, \"optional\" or an object", other))
            }
        };
        Ok(Some(HostRequirements { cpus, memory: size("memory")?, storage: size("storage")?, gpu }))
    }

    fn mounts(&self, json: &Map<String, Value>) -> Result<Vec<Mount>, ConfigError> {
        self.items(json, "mounts", "an array")?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let property = format!("mounts[{i}]");
                match v {
                    Value::String(s) => Ok(Mount::Spec(s.clone())),
                    Value::Object(m) => {
                        let nest = |e| self.nest(e, &property);
                        let kind = self.string(m, "type").map_err(nest)?;
                        let target = self.string(m, "target").map_err(nest)?;
                        match (kind, target) {
                            (Some(kind), Some(target)) if kind == "bind" || kind == "volume" => Ok(Mount::Object {
                                kind,
                                source: self.string(m, "source").map_err(nest)?,
                                target,
                                external: self.bool(m, "external").map_err(nest)?,
                            }),
                            (kind, target) => Err(ConfigError::Invalid {
                                path: self.path.to_path_buf(),
                                message: format!(
                                    "`{property}` needs \"type\": \"bind\" or \"volume\" and a \"target\" (found type {kind:?}, target {target:?})"
                                ),
                            }),
                        }
                    }
                    other => Err(self.type_error(property, "a mount string or object", other)),
                }
            })
            .collect()
    }

    fn command(&self, json: &Map<String, Value>, key: &str) -> Result<Option<Command>, ConfigError> {
        let simple = |property: String, v: &Value| -> Result<Command, ConfigError> {
            match v {
                Value::String(s) => Ok(Command::Shell(s.clone())),
                Value::Array(items) => items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| match item {
                        Value::String(s) => Ok(s.clone()),
                        other => Err(self.type_error(format!("{property}[{i}]"), "a string", other)),
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Command::Exec),
                other => Err(self.type_error(property, "a string or an array of strings", other)),
            }
        };
        match json.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(name, v)| Ok((name.clone(), simple(format!("{key}.{name}"), v)?)))
                .collect::<Result<Vec<_>, _>>()
                .map(|named| Some(Command::Parallel(named))),
            Some(Value::String(_) | Value::Array(_)) => simple(key.to_string(), &json[key]).map(Some),
            Some(other) => Err(self.type_error(key, "a string, an array of strings or an object of commands", other)),
        }
    }
}

/// A `hostRequirements` size, as the schema writes it: digits and an
/// optional `tb`, `gb`, `mb` or `kb` (binary units, as the reference reads them).
fn size_of(text: &str) -> Option<u64> {
    let lower = text.trim().to_ascii_lowercase();
    let (digits, shift) = match lower.strip_suffix('b') {
        Some(rest) => match rest.chars().last()? {
            't' => (&rest[..rest.len() - 1], 40),
            'g' => (&rest[..rest.len() - 1], 30),
            'm' => (&rest[..rest.len() - 1], 20),
            'k' => (&rest[..rest.len() - 1], 10),
            _ => return None,
        },
        None => (lower.as_str(), 0),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

fn quoted(items: &[&str]) -> String {
    items.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ")
}
