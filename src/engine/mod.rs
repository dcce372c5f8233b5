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
//!   `events` (a room's death and starts), `exec` (processes with stdio; `hijack`
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
pub use images::{BuildRequest, LogChunk, PullProgress, PushAuth, StreamFailed};
pub use objects::HostInfo;

use bollard::errors::Error as BollardError;
use std::sync::Arc;
use std::time::Duration;

/// How long one Engine API request may take before we give up, unless
/// [`TIMEOUT_VARIABLE`] says otherwise. Image builds and pulls stream
/// progress and are bound only until the engine's first answer. Generous
/// because a busy engine can take seconds to create a container, and a stop
/// waits out its grace within it; short enough that a wedged engine is
/// reported rather than waited on forever.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// The setting of that bound, in whole seconds.
pub const TIMEOUT_VARIABLE: &str = "WORKROOM_ENGINE_TIMEOUT";

/// How long a call waits on a silent engine before saying so: a healthy
/// engine answers such calls in milliseconds, a loaded one in a second or
/// two; past this a person is told why nothing happens (an engine stopped
/// with SIGSTOP, or wedged, accepts connections and never answers).
pub(crate) const SILENCE_NOTICE: Duration = Duration::from_secs(5);

/// How long a small call (an inspect, an exec's exit code) may take before
/// the engine counts as stalled rather than slow: the same scale as
/// [`SILENCE_NOTICE`]'s "a loaded one in a second or two". A timeout that
/// waited on such an engine is the engine's, never the room's or the
/// daemon's, and the room is kept.
pub const STALLED_AFTER: Duration = Duration::from_secs(2);

/// The engine's address for [`logged`]'s notice, set by `connect`: a
/// command talks to one engine.
static ENGINE_HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Whether the notice was given: once a command, however many calls wait.
static SILENCE_NOTICED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The bound on one request: [`TIMEOUT_VARIABLE`] when it is a number of
/// seconds above 0, else [`REQUEST_TIMEOUT`] (`connect` refuses any other
/// value by name first, so the fallback is for no setting at all).
pub(crate) fn request_timeout() -> Duration {
    timeout_setting(std::env::var(TIMEOUT_VARIABLE).ok().as_deref())
        .unwrap_or(Ok(REQUEST_TIMEOUT))
        .unwrap_or(REQUEST_TIMEOUT)
}

/// [`TIMEOUT_VARIABLE`]'s value read: `None` when unset, an error naming it
/// when it is not a whole number of seconds above 0.
fn timeout_setting(value: Option<&str>) -> Option<Result<Duration, EngineError>> {
    let value = value?.trim();
    Some(match value.parse::<u64>() {
        Ok(seconds) if seconds > 0 => Ok(Duration::from_secs(seconds)),
        _ => Err(EngineError::Setting { value: value.to_string() }),
    })
}

/// Pause before following the engine's events again after their stream
/// broke (an engine restart): enough not to spin against a dead engine.
pub(crate) const EVENTS_RESUBSCRIBE_PAUSE: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("Docker didn't answer at {host} ({reason}). Is the engine running? Set DOCKER_HOST or a docker context to use another")]
    Unreachable { host: String, reason: String },
    #[error(
        "Docker at {host} gave no answer within {seconds} s. Is the engine paused or overloaded? \
         {TIMEOUT_VARIABLE} (seconds) sets how long to wait"
    )]
    NoAnswer { host: String, seconds: u64 },
    #[error("{TIMEOUT_VARIABLE} is {value:?}: it wants a whole number of seconds above 0")]
    Setting { value: String },
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
/// took and whether it worked. One place, so no call goes unlogged; and
/// one place that tells a person, once, when the engine is silent for
/// [`SILENCE_NOTICE`] (the request's bound ends the wait).
pub(crate) async fn logged<T, E>(
    call: &'static str,
    name: &str,
    request: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let request = async {
        tokio::pin!(request);
        match tokio::time::timeout(SILENCE_NOTICE, &mut request).await {
            Ok(result) => result,
            Err(_silent) => {
                notice_silence();
                request.await
            }
        }
    };
    logged_long(call, name, request).await
}

/// [`logged`] for a call whose answer takes long by its nature (a pull, a
/// build, a stop that waits out its grace, a big upload): no notice.
pub(crate) async fn logged_long<T, E>(
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

/// [`logged`] for a call the engine answers as a stream (a download, a
/// container's logs): one line when its first item comes, timed from the
/// call, and one for any item that is an error.
pub(crate) fn logged_stream<'a, T: 'a, E: 'a>(
    call: &'static str,
    name: String,
    stream: impl futures_util::Stream<Item = Result<T, E>> + 'a,
) -> impl futures_util::Stream<Item = Result<T, E>> + 'a {
    use futures_util::StreamExt as _;
    let began = std::time::Instant::now();
    let mut first = true;
    stream.map(move |item| {
        if std::mem::take(&mut first) || item.is_err() {
            let elapsed_ms = format!("{:.1}", began.elapsed().as_secs_f64() * 1000.0);
            tracing::debug!(target: "workroom::engine", call = %call, name = %name, elapsed_ms = %elapsed_ms, ok = item.is_ok());
        }
        item
    })
}

/// Where the silence notice goes: set once by the program (`cli` prints
/// it on stderr); unset, it is not said. A process-wide sink, because the
/// notice comes from under any engine call, whoever made it.
type LineSink = Box<dyn Fn(&str) + Send + Sync>;
static SILENCE_SINK: std::sync::OnceLock<LineSink> = std::sync::OnceLock::new();

/// Sends the notice that the engine has not answered to `sink` (the first
/// setting holds).
pub fn on_silence(sink: impl Fn(&str) + Send + Sync + 'static) {
    let _ = SILENCE_SINK.set(Box::new(sink));
}

/// Says, the first time only, that the engine has not answered.
fn notice_silence() {
    if SILENCE_NOTICED.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let host = ENGINE_HOST.get().map_or("the engine's address", String::as_str);
    if let Some(sink) = SILENCE_SINK.get() {
        sink(&format!("waiting for the engine at {host} (no answer for {} s)", SILENCE_NOTICE.as_secs()));
    }
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

    #[test]
    fn the_engine_timeout_setting_is_whole_seconds_above_zero_or_refused_by_name() {
        assert!(timeout_setting(None).is_none());
        assert_eq!(timeout_setting(Some(" 8 ")).unwrap().unwrap(), Duration::from_secs(8));
        for bad in ["0", "-3", "1.5", "ten", ""] {
            let refused = timeout_setting(Some(bad)).unwrap().unwrap_err().to_string();
            assert!(refused.starts_with("WORKROOM_ENGINE_TIMEOUT is"), "{refused}");
        }
    }
}
