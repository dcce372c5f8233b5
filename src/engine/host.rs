//! Which engine: `DOCKER_HOST`, else the docker CLI's current context
//! (`DOCKER_CONTEXT`, else `currentContext` in `~/.docker/config.json`), else
//! the local socket; unix://, tcp:// and ssh:// (`ssh.rs`). Read from the files the docker CLI writes, so workroom
//! needs no docker CLI.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

pub const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";

/// An engine address we cannot use, named with where it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("{from} is {host}, which workroom cannot use: {problem}")]
    Ssh { host: String, from: String, problem: String },
    #[error(
        "{from} is {host}: workroom reaches an engine at unix://, tcp:// or ssh:// addresses; set DOCKER_HOST to one"
    )]
    Scheme { host: String, from: String },
    #[error(
        "docker context {name:?} ({from}) does not exist in {contexts}; `docker context ls` lists them, \
         `docker context use default` (or unsetting DOCKER_CONTEXT) picks the local engine"
    )]
    NoContext { name: String, from: String, contexts: String },
}

/// The engine address, from the environment and the docker CLI's files, in
/// the docker CLI's order: `DOCKER_HOST`, then the context named by
/// `DOCKER_CONTEXT`, then `currentContext`. A context that does not exist is
/// refused by name, as the docker CLI does, rather than quietly meaning the
/// local engine.
pub fn resolve(env: impl Fn(&str) -> Option<String>) -> Result<String, HostError> {
    if let Some(host) = env("DOCKER_HOST").filter(|h| !h.is_empty()) {
        return usable(host, "DOCKER_HOST".into());
    }
    let config_dir =
        env("DOCKER_CONFIG").map(PathBuf::from).or_else(|| env("HOME").map(|h| Path::new(&h).join(".docker")));
    let Some(config_dir) = config_dir else {
        return Ok(DEFAULT_HOST.into());
    };
    let (context, from) = match env("DOCKER_CONTEXT").filter(|c| !c.is_empty()) {
        Some(c) => (Some(c), "DOCKER_CONTEXT".to_string()),
        None => {
            (current_context(&config_dir), format!("currentContext in {}", config_dir.join("config.json").display()))
        }
    };
    match context.as_deref() {
        None | Some("default") | Some("") => Ok(DEFAULT_HOST.into()),
        Some(name) => match context_host(&config_dir, name) {
            Some(host) => usable(host, format!("the endpoint of docker context {name:?}")),
            None => Err(HostError::NoContext {
                name: name.to_string(),
                from,
                contexts: config_dir.join("contexts/meta").display().to_string(),
            }),
        },
    }
}

/// The addresses the engine edge can dial (bollard's unix and http
/// transports, and ssh through `docker system dial-stdio`, `ssh.rs`);
/// others are refused here with what to do instead.
fn usable(host: String, from: String) -> Result<String, HostError> {
    if host.starts_with("ssh://") {
        return match super::ssh::Target::parse(&host) {
            Ok(_) => Ok(host),
            Err(super::ssh::SshError::Address { problem, .. }) => Err(HostError::Ssh { host, from, problem }),
            Err(other) => Err(HostError::Ssh { host, from, problem: other.to_string() }),
        };
    }
    if ["unix://", "tcp://", "http://"].iter().any(|scheme| host.starts_with(scheme)) {
        return Ok(host);
    }
    Err(HostError::Scheme { host, from })
}

fn current_context(config_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(config_dir.join("config.json")).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json.get("currentContext")?.as_str().map(str::to_string)
}

/// Contexts live in `contexts/meta/<sha256 of name>/meta.json`.
fn context_host(config_dir: &Path, name: &str) -> Option<String> {
    let digest = hex::encode(Sha256::digest(name.as_bytes()));
    let meta = config_dir.join("contexts/meta").join(digest).join("meta.json");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(meta).ok()?).ok()?;
    json.pointer("/Endpoints/docker/Host")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: Vec<(&'static str, String)>) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<&str, String> = pairs.into_iter().collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn docker_host_wins() {
        assert_eq!(resolve(env_of(vec![("DOCKER_HOST", "tcp://h:2375".into())])).unwrap(), "tcp://h:2375");
    }

    #[test]
    fn no_setting_means_the_local_socket() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(resolve(env_of(vec![("HOME", dir.path().display().to_string())])).unwrap(), DEFAULT_HOST);
    }

    #[test]
    fn an_ssh_docker_host_is_an_engine_and_a_malformed_one_is_refused_with_its_fault() {
        assert_eq!(resolve(env_of(vec![("DOCKER_HOST", "ssh://me@box:2222".into())])).unwrap(), "ssh://me@box:2222");
        let err = resolve(env_of(vec![("DOCKER_HOST", "ssh://me@box/sock".into())])).unwrap_err().to_string();
        assert!(err.starts_with("DOCKER_HOST is ssh://me@box/sock, which workroom cannot use: "), "{err}");
        assert!(err.contains("takes no path"), "{err}");
        assert!(!err.contains("Is the engine running"), "{err}");
    }

    #[test]
    fn an_unknown_scheme_is_refused_with_the_ones_we_speak() {
        let err = resolve(env_of(vec![("DOCKER_HOST", "npipe:////./pipe/docker_engine".into())])).unwrap_err();
        assert!(err.to_string().contains("unix://, tcp:// or ssh://"), "{err}");
    }

    #[test]
    fn a_docker_context_that_does_not_exist_is_refused_by_name_not_replaced_by_the_local_socket() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().display().to_string();
        let err = resolve(env_of(vec![("HOME", home.clone()), ("DOCKER_CONTEXT", "nosuch".into())])).unwrap_err();
        assert!(err.to_string().starts_with("docker context \"nosuch\" (DOCKER_CONTEXT) does not exist"), "{err}");
        // The same for a currentContext in the docker CLI's config file.
        std::fs::create_dir_all(dir.path().join(".docker")).unwrap();
        std::fs::write(dir.path().join(".docker/config.json"), r#"{"currentContext": "gone"}"#).unwrap();
        let err = resolve(env_of(vec![("HOME", home)])).unwrap_err().to_string();
        assert!(err.starts_with("docker context \"gone\" (currentContext in "), "{err}");
    }

    #[test]
    fn the_current_context_names_the_host() {
        let dir = tempfile::tempdir().unwrap();
        let docker = dir.path().join(".docker");
        let digest = hex::encode(Sha256::digest(b"remote"));
        let meta = docker.join("contexts/meta").join(digest);
        std::fs::create_dir_all(&meta).unwrap();
        std::fs::write(docker.join("config.json"), r#"{"currentContext": "remote"}"#).unwrap();
        std::fs::write(meta.join("meta.json"), r#"{"Name":"remote","Endpoints":{"docker":{"Host":"ssh://me@box"}}}"#)
            .unwrap();
        let home = dir.path().display().to_string();
        assert_eq!(resolve(env_of(vec![("HOME", home.clone())])).unwrap(), "ssh://me@box", "an ssh context's endpoint");
        std::fs::write(meta.join("meta.json"), r#"{"Name":"remote","Endpoints":{"docker":{"Host":"tcp://box:2375"}}}"#)
            .unwrap();
        assert_eq!(resolve(env_of(vec![("HOME", home.clone())])).unwrap(), "tcp://box:2375");
        // DOCKER_CONTEXT overrides the config file.
        let default = resolve(env_of(vec![("HOME", home), ("DOCKER_CONTEXT", "default".into())]));
        assert_eq!(default.unwrap(), DEFAULT_HOST);
    }
}
