//! Metadata entrypoints: the `entrypoint` of an image's or feature's
//! `devcontainer.metadata` (docker-in-docker's `docker-init.sh`, say), run
//! by the daemon at every container start, in order, as root, before it
//! serves, so before `up` can run postStart. The reference CLI runs them as
//! lines of its container's shell before `exec "$@"`; here the daemon stays
//! the main process and runs each with `/bin/sh -c`.
//!
//! Each runs in a session of its own, so the background services it starts
//! outlive it (and the daemon's hand-offs); their output goes to the
//! container log, as the reference's do.

use crate::spawn;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

/// How long a start waits for its entrypoints before serving anyway (the
/// rest then start without being waited for). An entrypoint starts services
/// and returns; one that does not must not keep the room unreachable, and
/// `up` gives a starting daemon 30 s (`DAEMON_READY_WAIT`) to answer.
pub const ENTRYPOINTS_WAIT: Duration = Duration::from_secs(20);

/// The shell an entrypoint line runs in: it is shell text, as in the
/// reference's container script.
const SHELL: &str = "/bin/sh";

/// Why an entrypoint could not start.
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error(transparent)]
    Spawn(#[from] spawn::SpawnError),
    #[error("cannot run {SHELL}")]
    Exec(#[source] std::io::Error),
}

pub async fn run(commands: &[String]) {
    let deadline = Instant::now() + ENTRYPOINTS_WAIT;
    // Root by number: an image's passwd may lack a `root` entry.
    let root = spawn::resolve("0").ok();
    for command in commands {
        tracing::info!("entrypoint: {command}");
        let argv = [SHELL.to_string(), "-c".to_string(), command.clone()];
        let spawned = spawn::command(&argv, root.as_ref(), &BTreeMap::new(), Some("/"), false)
            .map_err(StartError::from)
            .and_then(|mut c| c.stdin(std::process::Stdio::null()).spawn().map_err(StartError::Exec));
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                tracing::error!("entrypoint {command:?} could not start: {}", crate::report::chain(&e));
                continue;
            }
        };
        match tokio::time::timeout_at(deadline, child.wait()).await {
            Ok(Ok(status)) if status.success() => {}
            Ok(Ok(status)) => tracing::warn!("entrypoint {command:?} ended with {status}"),
            Ok(Err(e)) => tracing::warn!("entrypoint {command:?}: {e}"),
            Err(_) => tracing::warn!(
                "entrypoint {command:?} still runs after {}s; serving without waiting for it",
                ENTRYPOINTS_WAIT.as_secs()
            ),
        }
    }
}
