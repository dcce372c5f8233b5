//! Which engine: `DOCKER_HOST`, else the docker CLI's current context
//! (`DOCKER_CONTEXT`, else `currentContext` in `~/.docker/config.json`), else
//! the local socket. Read from the files the docker CLI writes, so workroom
//! needs no docker CLI.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

pub const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";

/// The engine address, from the environment and the docker CLI's files.
pub fn resolve(env: impl Fn(&str) -> Option<String>) -> String {
    if let Some(host) = env("DOCKER_HOST").filter(|h| !h.is_empty()) {
        return host;
    }
    let config_dir =
        env("DOCKER_CONFIG").map(PathBuf::from).or_else(|| env("HOME").map(|h| Path::new(&h).join(".docker")));
    let Some(config_dir) = config_dir else {
        return DEFAULT_HOST.into();
    };
    let context = env("DOCKER_CONTEXT").or_else(|| current_context(&config_dir));
    match context.as_deref() {
        None | Some("default") | Some("") => DEFAULT_HOST.into(),
        Some(name) => context_host(&config_dir, name).unwrap_or_else(|| DEFAULT_HOST.into()),
    }
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
        assert_eq!(resolve(env_of(vec![("DOCKER_HOST", "tcp://h:2375".into())])), "tcp://h:2375");
    }

    #[test]
    fn no_setting_means_the_local_socket() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(resolve(env_of(vec![("HOME", dir.path().display().to_string())])), DEFAULT_HOST);
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
        assert_eq!(resolve(env_of(vec![("HOME", home.clone())])), "ssh://me@box");
        // DOCKER_CONTEXT overrides the config file.
        assert_eq!(resolve(env_of(vec![("HOME", home), ("DOCKER_CONTEXT", "default".into())])), DEFAULT_HOST);
    }
}
