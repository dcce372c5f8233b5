//! The Docker implementation of [`Driver`](super::Driver): every Engine API call, over
//! bollard. The `impl Driver` in `driver.rs` hands each trait method to the
//! inherent one here or in the sibling files (archive, events, exec, images,
//! objects, compose), which keep one concern each.

use bollard::errors::Error as BollardError;
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerSummary, ImageInspect, SystemInfo, SystemVersion,
};
use bollard::query_parameters::{
    CreateContainerOptions, ListContainersOptions, RemoveContainerOptions, StartContainerOptions, StopContainerOptions,
    UploadToContainerOptions,
};
use bollard::Docker;
use std::collections::HashMap;
use std::time::Duration;

use super::{hijack, host, logged, logged_long, ssh, EngineError, EVENTS_RESUBSCRIBE_PAUSE};

/// The Docker Engine API over bollard: a local socket, tcp, or an ssh://
/// engine through `docker system dial-stdio`. The one
/// [`Driver`](super::Driver).
pub struct DockerEngine {
    pub(super) docker: Docker,
    host: String,
    /// How an attached exec gets a connection of its own.
    pub(super) transport: hijack::Transport,
    /// An ssh:// engine's one ssh connection, closed with the last clone.
    _ssh: Option<std::sync::Arc<ssh::Master>>,
}

impl DockerEngine {
    /// Connects to the engine named by `DOCKER_HOST` or the current docker
    /// context and agrees on an API version (older engines, such as 20.10,
    /// refuse bollard's newer default).
    pub async fn connect() -> Result<DockerEngine, EngineError> {
        let host = host::resolve(|k| std::env::var(k).ok())?;
        if let Some(Err(refused)) = super::timeout_setting(std::env::var(super::TIMEOUT_VARIABLE).ok().as_deref()) {
            return Err(refused);
        }
        let timeout = super::request_timeout();
        let _ = super::ENGINE_HOST.set(host.clone());
        let unreachable = |reason: String| EngineError::Unreachable { host: host.clone(), reason };
        let (docker, ssh) = match host.starts_with("ssh://") {
            true => {
                let (docker, master) = ssh::connect(&host, timeout).await?;
                (docker, Some(master))
            }
            false => (Docker::connect_with_host(&host).map_err(|e| unreachable(e.to_string()))?, None),
        };
        let docker = docker.with_timeout(timeout).with_request_modifier(super::objects::split_import_changes);
        let docker = match logged("negotiate_version", &host, docker.negotiate_version()).await {
            Ok(d) => d,
            Err(BollardError::RequestTimeoutError) => {
                return Err(EngineError::NoAnswer { host, seconds: timeout.as_secs() })
            }
            // What the far side said (no docker there) beats hyper's words.
            Err(e) => match ssh.as_ref().and_then(|m| m.failure()) {
                Some(why) => return Err(why.into()),
                None => return Err(unreachable(short_reason(&e))),
            },
        };
        // Every address `host::resolve` gives has one.
        let transport = hijack::Transport::for_host(&host, ssh.as_ref())
            .ok_or_else(|| unreachable("not an address an exec can be attached through".into()))?;
        Ok(DockerEngine { docker, host, transport, _ssh: ssh })
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    pub(super) fn map(&self, action: impl Into<String>, what: impl Into<String>, e: BollardError) -> EngineError {
        match e {
            BollardError::DockerResponseServerError { status_code: 404, .. } => {
                EngineError::NotFound { what: what.into() }
            }
            BollardError::DockerResponseServerError { status_code, message } => {
                EngineError::Refused { action: action.into(), status: status_code, message }
            }
            BollardError::RequestTimeoutError => {
                EngineError::NoAnswer { host: self.host.clone(), seconds: super::request_timeout().as_secs() }
            }
            // No connection (the socket went away, the engine shut down):
            // the engine's absence, said as `connect` says it.
            e @ (BollardError::HyperResponseError { .. }
            | BollardError::HyperLegacyError { .. }
            | BollardError::SocketNotFoundError(_)
            | BollardError::IOError { .. }) => {
                EngineError::Unreachable { host: self.host.clone(), reason: short_reason(&e) }
            }
            source => EngineError::Other { action: action.into(), source },
        }
    }

    /// The container, or `None` when the engine says it does not exist (and
    /// only then: any other failure is an error, not an absence).
    pub async fn inspect_container(&self, name: &str) -> Result<Option<ContainerInspectResponse>, EngineError> {
        match logged("inspect_container", name, self.docker.inspect_container(name, None)).await {
            Ok(c) => Ok(Some(c)),
            Err(e) => match self.map(format!("inspect container {name}"), format!("container {name}"), e) {
                EngineError::NotFound { .. } => Ok(None),
                other => Err(other),
            },
        }
    }

    pub async fn inspect_image(&self, image: &str) -> Result<Option<ImageInspect>, EngineError> {
        match logged("inspect_image", image, self.docker.inspect_image(image)).await {
            Ok(i) => Ok(Some(i)),
            Err(e) => match self.map(format!("inspect image {image}"), format!("image {image}"), e) {
                EngineError::NotFound { .. } => Ok(None),
                other => Err(other),
            },
        }
    }

    /// Creates a container for a `platform` (`linux/arm64`) other than the
    /// engine's own, or its own with `None`; returns its id.
    pub async fn create_container_on(
        &self,
        name: &str,
        platform: Option<&str>,
        body: ContainerCreateBody,
    ) -> Result<String, EngineError> {
        let options =
            CreateContainerOptions { name: Some(name.to_string()), platform: platform.unwrap_or_default().to_string() };
        logged("create_container", name, self.docker.create_container(Some(options), body))
            .await
            .map(|r| r.id)
            .map_err(|e| self.map(format!("create container {name}"), format!("image for {name}"), e))
    }

    /// Unpacks a tar archive into the container at `path` (what `docker cp` does);
    /// works on a created container that has never started.
    pub async fn upload(&self, id: &str, path: &str, tar: Vec<u8>) -> Result<(), EngineError> {
        let options = UploadToContainerOptions { path: path.to_string(), ..Default::default() };
        logged_long(
            "upload_to_container",
            id,
            self.docker.upload_to_container(id, Some(options), bollard::body_full(tar.into())),
        )
        .await
        .map_err(|e| self.map(format!("upload to {id}:{path}"), format!("container {id}"), e))
    }

    pub async fn start(&self, id: &str) -> Result<(), EngineError> {
        logged("start_container", id, self.docker.start_container(id, None::<StartContainerOptions>))
            .await
            .map_err(|e| self.map(format!("start {id}"), format!("container {id}"), e))
    }

    pub async fn stop(&self, id: &str, grace: Duration) -> Result<(), EngineError> {
        let options = StopContainerOptions { t: Some(grace.as_secs() as i32), ..Default::default() };
        match logged_long("stop_container", id, self.docker.stop_container(id, Some(options))).await {
            // 304: already stopped.
            Err(BollardError::DockerResponseServerError { status_code: 304, .. }) => Ok(()),
            r => r.map_err(|e| self.map(format!("stop {id}"), format!("container {id}"), e)),
        }
    }

    pub async fn restart(&self, id: &str) -> Result<(), EngineError> {
        logged_long(
            "restart_container",
            id,
            self.docker.restart_container(id, None::<bollard::query_parameters::RestartContainerOptions>),
        )
        .await
        .map_err(|e| self.map(format!("restart {id}"), format!("container {id}"), e))
    }

    /// Returns once the container is no longer running the start it had at
    /// `started_at` (stopped, restarted, removed), from the engine's events:
    /// an exec's stream cannot be trusted to end with the container (in a
    /// peer room the engine keeps a dead exec's stream open, ADR 0005).
    pub async fn wait_exit(&self, id: &str, started_at: &str) -> Result<(), EngineError> {
        use futures_util::StreamExt;
        let filters = HashMap::from([
            ("container".to_string(), vec![id.to_string()]),
            ("type".to_string(), vec!["container".to_string()]),
            ("event".to_string(), vec!["die".to_string(), "destroy".to_string()]),
        ]);
        loop {
            let options =
                bollard::query_parameters::EventsOptions { filters: Some(filters.clone()), ..Default::default() };
            let mut events = self.docker.events(Some(options));
            // Subscribed first, then looked: an exit between the caller's
            // inspect and the subscription is seen here, not missed.
            let current = self.inspect_container(id).await?;
            let same_start = current
                .as_ref()
                .and_then(|c| c.state.as_ref())
                .is_some_and(|s| s.running == Some(true) && s.started_at.as_deref() == Some(started_at));
            if !same_start {
                return Ok(());
            }
            match events.next().await {
                Some(Ok(_)) => return Ok(()),
                // The stream broke or the engine closed it: look again.
                Some(Err(_)) | None => tokio::time::sleep(EVENTS_RESUBSCRIBE_PAUSE).await,
            }
        }
    }

    /// Removes a container (forcibly, with its anonymous volumes if asked).
    pub async fn remove(&self, id: &str, volumes: bool) -> Result<(), EngineError> {
        let options = RemoveContainerOptions { force: true, v: volumes, ..Default::default() };
        match logged("remove_container", id, self.docker.remove_container(id, Some(options))).await {
            Err(BollardError::DockerResponseServerError { status_code: 404, .. }) => Ok(()),
            r => r.map_err(|e| self.map(format!("remove {id}"), format!("container {id}"), e)),
        }
    }

    /// Containers (running or not) carrying every one of `labels` (`key` or `key=value`).
    pub async fn list(&self, labels: &[String]) -> Result<Vec<ContainerSummary>, EngineError> {
        let filters = HashMap::from([("label".to_string(), labels.to_vec())]);
        let options = ListContainersOptions { all: true, filters: Some(filters), ..Default::default() };
        let name = labels.join(",");
        logged("list_containers", &name, self.docker.list_containers(Some(options)))
            .await
            .map_err(|e| self.map("list containers", "containers", e))
    }
}

impl DockerEngine {
    /// `docker info` and `docker version` at once: what the engine is and
    /// what it enforces (seccomp, AppArmor, rootless).
    pub async fn describe(&self) -> Result<(SystemInfo, SystemVersion), EngineError> {
        let (info, version) = tokio::join!(
            logged("info", "engine", self.docker.info()),
            logged("version", "engine", self.docker.version())
        );
        let info = info.map_err(|e| self.map("docker info", "engine info", e))?;
        let version = version.map_err(|e| self.map("docker version", "engine version", e))?;
        Ok((info, version))
    }

    /// Whether a named volume exists; only a real not-found is `false`.
    pub async fn volume_exists(&self, name: &str) -> Result<bool, EngineError> {
        match logged("inspect_volume", name, self.docker.inspect_volume(name)).await {
            Ok(_) => Ok(true),
            Err(e) => match self.map(format!("inspect volume {name}"), format!("volume {name}"), e) {
                EngineError::NotFound { .. } => Ok(false),
                other => Err(other),
            },
        }
    }

    pub async fn remove_volume(&self, name: &str) -> Result<(), EngineError> {
        match logged(
            "remove_volume",
            name,
            self.docker.remove_volume(name, None::<bollard::query_parameters::RemoveVolumeOptions>),
        )
        .await
        {
            Err(BollardError::DockerResponseServerError { status_code: 404, .. }) => Ok(()),
            r => r.map_err(|e| self.map(format!("remove volume {name}"), format!("volume {name}"), e)),
        }
    }
}

/// The cause of a connection failure without bollard's wrapping, for one line.
pub(crate) fn short_reason(e: &BollardError) -> String {
    let mut source: &dyn std::error::Error = e;
    while let Some(inner) = source.source() {
        source = inner;
    }
    source.to_string()
}
