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
use crate::retry::{Backoff, Pace};

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
            BollardError::DockerResponseServerError { status_code, message } => {
                match docker_status(status_code, &message) {
                    404 => EngineError::NotFound { what: what.into() },
                    status => EngineError::Refused { action: action.into(), status, message },
                }
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
        let mut wait = Backoff::new(Pace::RACE, PODMAN_STOPPED_WAIT);
        loop {
            match logged("inspect_container", name, self.docker.inspect_container(name, None)).await {
                Ok(c) => return Ok(Some(c)),
                Err(e) if podman_stopped(&e) && !wait.expired() => wait.pause().await,
                Err(e) => {
                    return match self.map(format!("inspect container {name}"), format!("container {name}"), e) {
                        EngineError::NotFound { .. } => Ok(None),
                        other => Err(other),
                    }
                }
            }
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
            let events = super::logged_stream("events", id.to_string(), self.docker.events(Some(options)));
            let mut events = std::pin::pin!(events);
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
            Ok(()) => Ok(()),
            Err(e) => match self.map(format!("remove {id}"), format!("container {id}"), e) {
                EngineError::NotFound { .. } => Ok(()),
                other => Err(other),
            },
        }
    }

    /// Containers (running or not) carrying every one of `labels` (`key` or `key=value`).
    pub async fn list(&self, labels: &[String]) -> Result<Vec<ContainerSummary>, EngineError> {
        let filters = HashMap::from([("label".to_string(), labels.to_vec())]);
        let options = ListContainersOptions { all: true, filters: Some(filters), ..Default::default() };
        let name = labels.join(",");
        let mut wait = Backoff::new(Pace::RACE, PODMAN_STOPPED_WAIT);
        loop {
            match logged("list_containers", &name, self.docker.list_containers(Some(options.clone()))).await {
                Ok(list) => return Ok(list),
                Err(e) if podman_stopped(&e) && !wait.expired() => wait.pause().await,
                Err(e) => return Err(self.map("list containers", "containers", e)),
            }
        }
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

/// How long a container may show Podman's `stopped`: the moment between
/// its process's end and Podman's cleanup of it, after which it says
/// `exited`. Docker's API has no such state and bollard cannot read a
/// container in it (seen as `unknown variant \`stopped\`` for some 50 ms
/// after a `kill`), so the container is asked again; a second covers a
/// loaded engine.
const PODMAN_STOPPED_WAIT: Duration = Duration::from_secs(1);

/// Whether bollard could not read an answer because a container was in
/// Podman's `stopped` state.
fn podman_stopped(e: &BollardError) -> bool {
    matches!(e, BollardError::JsonDataError { message, .. } if message.contains("unknown variant `stopped`"))
}

/// An engine's refusal status as Docker would give it. Podman's API answers
/// 500 where Docker says 409 (a name another container holds: two `up`s
/// creating one room race on it) and where Docker says 404 (a container
/// removed while it was asked about); room logic reads Docker's.
pub(super) fn docker_status(status: u16, message: &str) -> u16 {
    match status {
        500 if message.contains("is already in use") => 409,
        500 if message.contains("no such container") => 404,
        status => status,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn podmans_500_for_a_name_in_use_reads_as_dockers_409_so_racing_ups_take_the_room_another_made() {
        // As Podman 4.3 answered the second of two creates of one name.
        let taken = "container create: creating container storage: the container name \"workroom-a-1\" is already \
                     in use by 405c8bfb19cc. You have to remove that container to be able to reuse that name: that \
                     name is already in use";
        assert_eq!(docker_status(500, taken), 409);
    }

    #[test]
    fn podmans_500_for_a_container_being_removed_reads_as_dockers_404() {
        let gone = "container 11580c1517cd does not exist in database: no such container";
        assert_eq!(docker_status(500, gone), 404);
    }

    #[test]
    fn other_statuses_are_kept() {
        assert_eq!(docker_status(500, "no space left on device"), 500);
        assert_eq!(docker_status(409, "is already in use"), 409);
        assert_eq!(docker_status(404, "no such image"), 404);
    }

    #[test]
    fn podmans_stopped_state_which_bollard_cannot_read_is_told_from_other_unreadable_answers() {
        let stopped = BollardError::JsonDataError {
            message: "unknown variant `stopped`, expected one of ``, `created`, `running`".into(),
            column: 218,
        };
        assert!(podman_stopped(&stopped));
        let other = BollardError::JsonDataError { message: "missing field `Id`".into(), column: 3 };
        assert!(!podman_stopped(&other));
    }
}
