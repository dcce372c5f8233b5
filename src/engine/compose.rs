//! The compose program at the edge: which one this host has (`docker
//! compose`, the v2 plugin, else `docker-compose`, v1, as the reference
//! picks), running it, reading what it prints, and the engine objects a
//! project owns (found by compose's project label).
//!
//! workroom never reimplements compose: the user's files go to the real
//! program, which talks to the same engine (it reads `DOCKER_HOST` and the
//! docker context itself).

use super::{DockerEngine, EngineError};
use bollard::query_parameters::{ListNetworksOptions, ListVolumesOptions};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::process::Stdio;
use tokio::io::AsyncBufReadExt;
use yaml_rust2::{Yaml, YamlLoader};

/// The label compose puts on every container, network and volume of a
/// project.
pub const PROJECT_LABEL: &str = "com.docker.compose.project";

/// The lines of a failed compose run kept for its error: compose 1 says
/// why in its last lines, after any build output.
const KEPT_LINES: usize = 40;

#[derive(Debug, thiserror::Error)]
pub enum ComposeError {
    #[error(
        "no compose program: neither `docker compose` nor `docker-compose` runs here; \
         install Debian's docker-compose package (or Docker's docker-compose-plugin)"
    )]
    NotInstalled,
    #[error("cannot run {program}")]
    Spawn { program: String, source: std::io::Error },
    /// Compose refused the files themselves (`config`).
    #[error("{file}: compose refuses it: {line}")]
    Refused { file: String, line: String },
    /// A compose command on the project failed.
    #[error("`{command}` failed: {line}")]
    Failed { command: String, line: String },
    #[error("cannot read what `{command}` printed: {reason}")]
    Unreadable { command: String, reason: String },
}

/// The compose program of this host and its version.
#[derive(Debug, Clone)]
pub struct Program {
    /// `docker` (with `compose` as its first argument) or `docker-compose`.
    program: String,
    prefix: Vec<String>,
    pub version: Option<(u32, u32, u32)>,
    /// Where it runs (the workspace folder, as the reference runs it).
    folder: Option<std::path::PathBuf>,
}

impl Program {
    /// `docker compose version --short`, else `docker-compose version --short`.
    pub async fn find() -> Result<Program, ComposeError> {
        for (program, prefix) in [("docker", vec!["compose".to_string()]), ("docker-compose", vec![])] {
            let out = tokio::process::Command::new(program)
                .args(&prefix)
                .args(["version", "--short"])
                .stdin(Stdio::null())
                .output()
                .await;
            if let Some(out) = out.ok().filter(|o| o.status.success()) {
                let text = String::from_utf8_lossy(&out.stdout);
                let version = parse_version(&text);
                return Ok(Program { program: program.into(), prefix, version, folder: None });
            }
        }
        Err(ComposeError::NotInstalled)
    }

    /// The same program, run from `folder`.
    pub fn within(self, folder: &std::path::Path) -> Program {
        Program { folder: Some(folder.to_path_buf()), ..self }
    }

    /// How the program is called, for messages: `docker compose` or `docker-compose`.
    pub fn name(&self) -> String {
        std::iter::once(self.program.as_str())
            .chain(self.prefix.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// `global` are the project's options (`-p`, `-f`, `--env-file`);
    /// `args` the command and its own.
    fn command(&self, global: &[String], args: &[String]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(&self.prefix).args(global).args(args).stdin(Stdio::null()).kill_on_drop(true);
        if let Some(folder) = &self.folder {
            cmd.current_dir(folder);
        }
        cmd
    }

    /// Runs compose and returns what it printed on stdout; on failure, what
    /// it said on stderr and its first error line.
    pub async fn output(&self, global: &[String], args: &[String]) -> Result<String, (String, ComposeError)> {
        let out = self
            .command(global, args)
            .output()
            .await
            .map_err(|source| (String::new(), ComposeError::Spawn { program: self.name(), source }))?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            let line = first_error_line(&stderr);
            return Err((stderr, ComposeError::Failed { command: self.describe(args), line }));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs compose, handing each line it says on stderr to `shown` as it
    /// comes (a build, a pull take a while); on failure, the error line of
    /// its last lines.
    pub async fn run(&self, global: &[String], args: &[String], shown: &dyn Fn(&str)) -> Result<(), ComposeError> {
        let mut child = self
            .command(global, args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| ComposeError::Spawn { program: self.name(), source })?;
        let mut kept: std::collections::VecDeque<String> = Default::default();
        if let Some(stderr) = child.stderr.take() {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                shown(&line);
                if kept.len() == KEPT_LINES {
                    kept.pop_front();
                }
                kept.push_back(line);
            }
        }
        let status = child.wait().await.map_err(|source| ComposeError::Spawn { program: self.name(), source })?;
        if status.success() {
            return Ok(());
        }
        let said = kept.into_iter().collect::<Vec<_>>().join("\n");
        Err(ComposeError::Failed { command: self.describe(args), line: last_error(&said) })
    }

    /// `compose config` of the files: the project as compose merged and
    /// interpolated it. A refusal is said as compose said it, against the
    /// first file.
    pub async fn config(&self, global: &[String], first_file: &str) -> Result<Value, ComposeError> {
        let mut global = global.to_vec();
        if self.version.is_some_and(|v| v.0 >= 2) {
            // Services behind a profile are services too (the reference).
            global.extend(["--profile".into(), "*".into()]);
        }
        let args = ["config".to_string()];
        let text = self.output(&global, &args).await.map_err(|(stderr, e)| match e {
            ComposeError::Failed { .. } => {
                ComposeError::Refused { file: first_file.to_string(), line: first_error_line(&stderr) }
            }
            other => other,
        })?;
        parse_yaml(&text).map_err(|e| ComposeError::Unreadable { command: self.describe(&args), reason: e.to_string() })
    }

    fn describe(&self, args: &[String]) -> String {
        format!("{} {}", self.name(), args.first().map(String::as_str).unwrap_or_default())
    }
}

/// A compose version (`1.29.2`, `v2.20.3`, `2.24.0-desktop.1`) as numbers.
pub fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let text = text.trim().trim_start_matches('v');
    let mut parts = text.split(['.', '-', '+']).map(|p| p.parse::<u32>());
    let major = parts.next()?.ok()?;
    let minor = parts.next().and_then(Result::ok).unwrap_or(0);
    let patch = parts.next().and_then(Result::ok).unwrap_or(0);
    Some((major, minor, patch))
}

/// One line of what compose said when it refused: its first line that
/// says something (warnings and blank lines skipped), without compose 1's
/// `ERROR: ` prefix; a line that ends in `:` takes the next one with it
/// (compose 1 says "... is invalid because:" then why).
pub fn first_error_line(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("WARNING:") && !l.starts_with("WARN["))
        .collect();
    let Some(first) = lines.iter().position(|l| l.starts_with("ERROR:")).or((!lines.is_empty()).then_some(0)) else {
        return "(it said nothing)".into();
    };
    let line = lines[first].trim_start_matches("ERROR:").trim();
    match lines.get(first + 1) {
        Some(next) if line.ends_with(':') => format!("{line} {next}"),
        _ => line.to_string(),
    }
}

/// The line that says why, from the end of what a failed run said: the
/// last `ERROR:` line, else the last line.
fn last_error(said: &str) -> String {
    let lines: Vec<&str> = said.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    match lines.iter().rposition(|l| l.starts_with("ERROR:")) {
        Some(i) => first_error_line(&lines[i..].join("\n")),
        None => lines.last().map_or_else(|| "(it said nothing)".to_string(), |l| l.to_string()),
    }
}

/// A YAML document (the first) as JSON values.
pub fn parse_yaml(text: &str) -> Result<Value, yaml_rust2::ScanError> {
    let docs = YamlLoader::load_from_str(text)?;
    Ok(docs.first().map(to_json).unwrap_or(Value::Null))
}

fn to_json(y: &Yaml) -> Value {
    match y {
        Yaml::Real(r) => {
            r.parse::<f64>().ok().and_then(serde_json::Number::from_f64).map_or(Value::Null, Value::Number)
        }
        Yaml::Integer(i) => Value::from(*i),
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Array(items) => Value::Array(items.iter().map(to_json).collect()),
        Yaml::Hash(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                let key = match k {
                    Yaml::String(s) => s.clone(),
                    Yaml::Integer(i) => i.to_string(),
                    Yaml::Real(r) => r.clone(),
                    Yaml::Boolean(b) => b.to_string(),
                    _ => continue,
                };
                out.insert(key, to_json(v));
            }
            Value::Object(out)
        }
        Yaml::Alias(_) | Yaml::Null | Yaml::BadValue => Value::Null,
    }
}

/// Whether a compose file itself says `name:` at its top. A file compose
/// reads but this parser does not (custom tags) counts as saying nothing,
/// as the reference counts it.
pub fn declares_name(text: &str) -> bool {
    parse_yaml(text).ok().and_then(|v| v.get("name").cloned()).is_some_and(|n| !n.is_null() && n != "")
}

/// What of a project exists on the engine, found by compose's label.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProjectObjects {
    pub containers: Vec<String>,
    pub networks: Vec<String>,
    pub volumes: Vec<String>,
}

impl DockerEngine {
    /// The containers (by id), networks and volumes (by name) of `project`.
    pub async fn project_objects(&self, project: &str) -> Result<ProjectObjects, EngineError> {
        let label = format!("{PROJECT_LABEL}={project}");
        let containers = self.list(std::slice::from_ref(&label)).await?.into_iter().filter_map(|c| c.id).collect();
        let filters = HashMap::from([("label".to_string(), vec![label.clone()])]);
        let networks = self.docker.list_networks(Some(ListNetworksOptions { filters: Some(filters.clone()) }));
        let networks = super::logged("list_networks", project, networks)
            .await
            .map_err(|e| self.map("list networks", "networks", e))?
            .into_iter()
            .filter_map(|n| n.name)
            .collect();
        let volumes = super::logged(
            "list_volumes",
            project,
            self.docker.list_volumes(Some(ListVolumesOptions { filters: Some(filters) })),
        )
        .await
        .map_err(|e| self.map("list volumes", "volumes", e))?
        .volumes
        .unwrap_or_default()
        .into_iter()
        .map(|v| v.name)
        .collect();
        Ok(ProjectObjects { containers, networks, volumes })
    }

    /// A network as the engine keeps it; `None` when it does not exist.
    pub async fn inspect_network(&self, name: &str) -> Result<Option<bollard::models::NetworkInspect>, EngineError> {
        match super::logged("inspect_network", name, self.docker.inspect_network(name, None)).await {
            Ok(n) => Ok(Some(n)),
            Err(e) => match self.map(format!("inspect network {name}"), format!("network {name}"), e) {
                EngineError::NotFound { .. } => Ok(None),
                other => Err(other),
            },
        }
    }

    pub async fn remove_network(&self, name: &str) -> Result<(), EngineError> {
        super::logged("remove_network", name, self.docker.remove_network(name))
            .await
            .map_err(|e| self.map(format!("remove network {name}"), "network", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_compose_config_prints_reads_as_json() {
        let text = "services:\n  app:\n    command: sleep infinity\n    environment:\n      A: '1'\n      B: 2\n    \
                    ports:\n    - 80:80\n    init: true\nversion: '3.8'\nname: demo\n";
        let v = parse_yaml(text).unwrap();
        assert_eq!(v["services"]["app"]["command"], "sleep infinity");
        assert_eq!(v["services"]["app"]["environment"]["A"], "1");
        assert_eq!(v["services"]["app"]["environment"]["B"], 2);
        assert_eq!(v["services"]["app"]["init"], true);
        assert_eq!(v["version"], "3.8");
        assert!(parse_yaml("a: [").is_err());
    }

    #[test]
    fn a_name_counts_only_when_a_file_sets_one() {
        assert!(declares_name("name: x\nservices: {}\n"));
        assert!(!declares_name("services:\n  name: {}\n"));
        assert!(!declares_name("name:\nservices: {}\n"));
        assert!(!declares_name("services: !reset {}\n: ["));
    }

    #[test]
    fn compose_versions_are_read_from_either_programs_short_version() {
        assert_eq!(parse_version("1.29.2"), Some((1, 29, 2)));
        assert_eq!(parse_version("v2.20.3\n"), Some((2, 20, 3)));
        assert_eq!(parse_version("2.24.0-desktop.1"), Some((2, 24, 0)));
        assert_eq!(parse_version("dev"), None);
    }

    #[test]
    fn the_first_error_line_is_what_compose_said_first_without_warnings() {
        let table = [
            (
                "The Compose file './bad.yml' is invalid because:\nUnsupported config option for services.app: 'bogus'\n",
                "The Compose file './bad.yml' is invalid because: Unsupported config option for services.app: 'bogus'",
            ),
            (
                "WARNING: The FOO variable is not set. Defaulting to a blank string.\nERROR: Service 'app' failed to build\n",
                "Service 'app' failed to build",
            ),
            ("yaml.parser.ParserError: while parsing a flow node\nexpected the node content\n", "yaml.parser.ParserError: while parsing a flow node"),
            ("\n\n", "(it said nothing)"),
        ];
        for (stderr, expected) in table {
            assert_eq!(first_error_line(stderr), expected);
        }
    }

    #[test]
    fn a_failed_run_is_said_by_its_last_error_not_its_build_output() {
        let said = "Step 1/2 : FROM x\nERROR: Service 'app' failed to build : exit 1\n";
        assert_eq!(last_error(said), "Service 'app' failed to build : exit 1");
        assert_eq!(last_error("building\nno such image\n"), "no such image");
    }
}
