//! Engine calls for things that are not rooms: volumes, a locally imported
//! image, throwaway containers. Same error mapping as the rest of the edge.

use super::{DockerEngine, EngineError};
use bollard::errors::Error as BollardError;
use bollard::models::{ContainerCreateBody, VolumeCreateRequest};
use bollard::query_parameters::{CreateImageOptions, DownloadFromContainerOptions, WaitContainerOptions};
use futures_util::StreamExt;
use std::collections::HashMap;

/// What the engine says of its host, for `hostRequirements`.
#[derive(Debug, Clone, Default)]
pub struct HostInfo {
    pub cpus: u64,
    /// Bytes.
    pub memory: u64,
    /// The engine's data folder (`/var/lib/docker`), on the engine's host.
    pub root_dir: Option<String>,
    /// An nvidia runtime is installed (how the reference tells a GPU).
    pub nvidia: bool,
}

impl DockerEngine {
    /// The engine's `info`, reduced to its host's size.
    pub async fn host_info(&self) -> Result<HostInfo, EngineError> {
        let info = super::logged("info", "engine", self.docker.info())
            .await
            .map_err(|e| self.map("read the engine's info", "engine info", e))?;
        Ok(HostInfo {
            cpus: info.ncpu.unwrap_or(0).max(0) as u64,
            memory: info.mem_total.unwrap_or(0).max(0) as u64,
            root_dir: info.docker_root_dir,
            nvidia: info.runtimes.is_some_and(|r| r.contains_key("nvidia")),
        })
    }

    /// The engine's own platform, `(os, arch)` as Go names them (`linux`,
    /// `amd64`): what an image that reports none runs as.
    pub async fn platform(&self) -> Result<(String, String), EngineError> {
        let v = super::logged("version", "engine", self.docker.version())
            .await
            .map_err(|e| self.map("ask the engine's version", "engine version", e))?;
        Ok((v.os.unwrap_or_default(), v.arch.unwrap_or_default()))
    }

    /// The labels of a volume; `None` only when the engine says it does not exist.
    pub async fn volume_labels(&self, name: &str) -> Result<Option<HashMap<String, String>>, EngineError> {
        match super::logged("inspect_volume", name, self.docker.inspect_volume(name)).await {
            Ok(v) => Ok(Some(v.labels)),
            Err(e) => match self.map(format!("inspect volume {name}"), format!("volume {name}"), e) {
                EngineError::NotFound { .. } => Ok(None),
                other => Err(other),
            },
        }
    }

    pub async fn create_volume(&self, name: &str, labels: HashMap<String, String>) -> Result<(), EngineError> {
        let request = VolumeCreateRequest { name: Some(name.into()), labels: Some(labels), ..Default::default() };
        self.docker
            .create_volume(request)
            .await
            .map(|_| ())
            .map_err(|e| self.map(format!("create volume {name}"), format!("volume {name}"), e))
    }

    /// Imports a root filesystem tar as `repo:tag` (the Engine API's image
    /// import, what `docker import -` does), with Dockerfile `changes` such as
    /// `LABEL k=v`. Nothing is pulled.
    pub async fn import_rootfs(
        &self,
        tar: Vec<u8>,
        repo: &str,
        tag: &str,
        changes: Vec<String>,
    ) -> Result<(), EngineError> {
        let options = CreateImageOptions {
            from_src: Some("-".into()),
            repo: Some(repo.into()),
            tag: Some(tag.into()),
            changes,
            ..Default::default()
        };
        let mut stream = self.docker.create_image(Some(options), Some(bollard::body_full(tar.into())), None);
        while let Some(item) = stream.next().await {
            item.map_err(|e| self.map(format!("import image {repo}:{tag}"), format!("image {repo}:{tag}"), e))?;
        }
        Ok(())
    }

    /// Creates, starts and waits for a throwaway container, then removes it.
    /// Returns its exit code and the end of its output (for an error line).
    pub async fn run_job(&self, name: &str, body: ContainerCreateBody) -> Result<(i64, String), EngineError> {
        let id = self.create_container_on(name, None, body).await?;
        let result = async {
            self.start(&id).await?;
            let mut wait = self.docker.wait_container(&id, None::<WaitContainerOptions>);
            let code = match wait.next().await {
                Some(Ok(r)) => r.status_code,
                Some(Err(BollardError::DockerContainerWaitError { code, .. })) => code,
                Some(Err(e)) => return Err(self.map(format!("wait for {name}"), format!("container {name}"), e)),
                None => -1,
            };
            let options = bollard::query_parameters::LogsOptions {
                stdout: true,
                stderr: true,
                tail: "5".into(),
                ..Default::default()
            };
            let mut logs = self.docker.logs(&id, Some(options));
            let mut text = String::new();
            while let Some(Ok(chunk)) = logs.next().await {
                text.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
            }
            Ok((code, text.trim().to_string()))
        }
        .await;
        let removed = self.remove(&id, true).await;
        let out = result?;
        removed?;
        Ok(out)
    }

    /// One file of a created (never started) container, read through the
    /// archive endpoint (what `docker cp` does); `None` when it is absent.
    pub async fn read_file(&self, id: &str, path: &str) -> Result<Option<Vec<u8>>, EngineError> {
        let options = DownloadFromContainerOptions { path: path.into() };
        let mut stream = self.docker.download_from_container(id, Some(options));
        let mut tar_bytes = Vec::new();
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(b) => tar_bytes.extend_from_slice(&b),
                Err(e) => {
                    return match self.map(format!("read {id}:{path}"), format!("{path} in {id}"), e) {
                        EngineError::NotFound { .. } => Ok(None),
                        other => Err(other),
                    }
                }
            }
        }
        let mut archive = tar::Archive::new(&tar_bytes[..]);
        let Ok(mut entries) = archive.entries() else { return Ok(None) };
        match entries.next() {
            Some(Ok(mut entry)) => {
                let mut out = Vec::new();
                std::io::Read::read_to_end(&mut entry, &mut out).ok();
                Ok(Some(out))
            }
            _ => Ok(None),
        }
    }
}
