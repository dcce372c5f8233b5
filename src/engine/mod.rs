//! The engine edge: every call workroom makes of a container engine goes
//! through [`Engine`], a handle on the one [`Driver`] trait (ADR 0012), so
//! the rest of the program deals in plain data and never in a client.
//!
//! # Layout
//!
//! - `driver`: the [`Driver`] trait, what room logic may ask of an engine.
//! - `docker`: [`DockerEngine`], the Docker Engine API over bollard (no
//!   docker CLI): connecting, containers and volumes. Its other calls are
//!   grouped by concern beside it: `archive` (tar streams in and out),
//!   `events` (a room's death), `exec` (processes with stdio; `hijack`
//!   takes their connection over and demultiplexes it), `images`
//!   (pull, build, remove, logs), `objects` (volumes, jobs, host facts) and
//!   `compose` (the compose program, and a project's objects).
//! - `host`: which engine `DOCKER_HOST` or the docker context names;
//!   `ssh`: an `ssh://` engine through `docker system dial-stdio`.
//!
//! Nothing outside this folder holds the bollard client: there is no
//! accessor for it.

mod archive;
pub mod compose;
mod docker;
mod driver;
mod events;
mod exec;
mod hijack;
pub mod host;
mod images;
mod objects;
pub mod ssh;

pub use docker::DockerEngine;
pub use driver::{Call, Driver, Progress};

pub use events::events_since;
pub use exec::{ExecOutput, ExecSpec, ExecStream};
pub use images::{BuildRequest, LogChunk, PullProgress, StreamFailed};
pub use objects::HostInfo;

use bollard::errors::Error as BollardError;
use std::sync::Arc;
use std::time::Duration;

/// How long one Engine API request may take before we give up. Image builds
/// and pulls stream progress and are not bound by it. Generous because a busy
/// engine can take seconds to create a container; short enough that a wedged
/// engine is reported rather than waited on forever.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Pause before following the engine's events again after their stream
/// broke (an engine restart): enough not to spin against a dead engine.
pub(crate) const EVENTS_RESUBSCRIBE_PAUSE: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("Docker didn't answer at {host} ({reason}). Is the engine running? Set DOCKER_HOST or a docker context to use another")]
    Unreachable { host: String, reason: String },
    #[error(transparent)]
    Address(#[from] host::HostError),
    #[error(transparent)]
    Ssh(#[from] ssh::SshError),
    #[error("{what} not found")]
    NotFound { what: String },
    #[error("{action}: the engine refused ({status}): {message}")]
    Refused { action: String, status: u16, message: String },
    #[error("{action}")]
    Other { action: String, source: BollardError },
}

impl EngineError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, EngineError::NotFound { .. })
    }
}

/// Runs one Engine API call and logs it at debug (`WORKROOM_LOG=debug`):
/// what was asked, of which room, image or volume (`name`), how long it
/// took and whether it worked. One place, so no call goes unlogged.
pub(crate) async fn logged<T, E>(
    call: &'static str,
    name: &str,
    request: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let began = std::time::Instant::now();
    let result = request.await;
    let elapsed_ms = format!("{:.1}", began.elapsed().as_secs_f64() * 1000.0);
    tracing::debug!(target: "workroom::engine", call = %call, name = %name, elapsed_ms = %elapsed_ms, ok = result.is_ok());
    result
}

/// The engine a command talks to: a handle on its [`Driver`], cheap to
/// clone. Engine calls are the trait's methods, reached through `Deref`.
#[derive(Clone)]
pub struct Engine(Arc<dyn Driver>);

impl Engine {
    /// Connects to the engine named by `DOCKER_HOST` or the current docker
    /// context (see [`DockerEngine::connect`]).
    pub async fn connect() -> Result<Engine, EngineError> {
        Ok(Engine::new(DockerEngine::connect().await?))
    }

    pub fn new(driver: impl Driver + 'static) -> Engine {
        Engine(Arc::new(driver))
    }
}

impl std::ops::Deref for Engine {
    type Target = dyn Driver;

    fn deref(&self) -> &(dyn Driver + 'static) {
        &*self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_failure_says_its_cause_once() {
        let io = std::io::Error::other("the socket broke");
        let err = EngineError::Other { action: "list containers".into(), source: BollardError::from(io) };
        assert_eq!(format!("{:#}", anyhow::Error::new(err)), "list containers: the socket broke");
    }
}
