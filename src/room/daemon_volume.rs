//! The engine's daemon volume: one per daemon digest, holding the daemon
//! alone, mounted read-only into every image and Dockerfile room of that
//! daemon at `/.workroom/dist` (ADR 0002). A new room then costs the
//! engine's create and start, not an upload into a created container as
//! well (~65 ms whatever the size: the engine mounts the container's
//! filesystem and unpacks in a chroot).
//!
//! Filled once per engine, from the anchor's one-file image (imported, never
//! pulled): a throwaway container of it runs with the empty volume at the
//! image's daemon folder, which the engine fills from the image (Docker at
//! the create, Podman at the start; so it runs). While one `up` of this
//! host makes and fills it, the others wait on the creator lock of its
//! name, so none mounts it half-made.
//!
//! Known shortcut: two hosts filling one remote engine's volume at the same
//! moment are not kept apart; the second's rooms may mount it before it is
//! filled, and their start then fails naming the daemon's path.

use super::creating;
use super::daemon::Daemon;
use crate::engine::Engine;
use crate::plan::{labels, peers};
use anyhow::bail;
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};
use std::collections::HashMap;
use std::time::Duration;

/// What the volumes are called: the prefix, then the daemon's digest.
pub const PREFIX: &str = "workroom-daemon.";

/// How long an `up` waits for another `up` of this host filling the
/// volume: an import and one short container run, a second or two on a
/// healthy engine; past this that `up` is stuck, and this one fills it.
const FILL_WAIT: Duration = Duration::from_secs(60);

/// The volume of the daemon of `digest`.
pub fn name(digest: &str) -> String {
    format!("{PREFIX}{digest}")
}

/// The volume holding `daemon`, made and filled if missing; its name.
pub async fn ensure(engine: &Engine, daemon: &Daemon) -> anyhow::Result<String> {
    let digest = daemon.digest();
    let volume = name(&digest);
    let _filling = creating::wait_to_make(&volume, FILL_WAIT).await;
    if engine.volume_labels(&volume).await?.is_some() {
        return Ok(volume);
    }
    let image = super::peers::anchor_image_of(engine, &daemon.bytes, &digest).await?;
    let mut volume_labels = HashMap::from([
        (labels::SCHEMA.to_string(), labels::SCHEMA_VERSION.to_string()),
        (peers::DAEMON_LABEL.to_string(), digest.clone()),
    ]);
    volume_labels.insert(peers::ROLE_LABEL.into(), ROLE.into());
    engine.create_volume(&volume, volume_labels).await?;
    if let Err(e) = fill(engine, &volume, &image).await {
        let _ = engine.remove_volume(&volume).await;
        return Err(e.context(format!("fill the daemon volume {volume} (removed again)")));
    }
    Ok(volume)
}

/// The volume's role label, which `stop --all` and `down` leave alone: the
/// volume is the engine's, not a room's.
pub const ROLE: &str = "daemon";

async fn fill(engine: &Engine, volume: &str, image: &str) -> anyhow::Result<()> {
    let folder = std::path::Path::new(workroomd::room::DAEMON_PATH).parent().and_then(|p| p.to_str()).unwrap_or("/");
    let body = ContainerCreateBody {
        image: Some(image.into()),
        user: Some("0".into()),
        entrypoint: Some(vec![workroomd::room::DAEMON_PATH.into(), "version".into()]),
        cmd: Some(Vec::new()),
        labels: Some(HashMap::from([(peers::JOB_LABEL.to_string(), "daemon-volume-fill".to_string())])),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            mounts: Some(vec![Mount {
                target: Some(folder.into()),
                source: Some(volume.into()),
                typ: Some(MountType::VOLUME),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let job = format!("workroom-job-daemon-volume-{}", std::process::id());
    let (code, output) = engine.run_job(&job, body).await?;
    if code != 0 {
        bail!("the daemon in {image} exited {code}: {output}");
    }
    Ok(())
}

/// Whether an engine's refusal to start a room says its daemon volume holds
/// no daemon (a fill on another host had not finished, or someone emptied
/// it).
pub fn start_lacks_daemon(message: &str) -> bool {
    message.contains(workroomd::room::DIST_PATH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_volume_is_named_by_the_daemons_digest() {
        assert_eq!(name("0123abcd"), "workroom-daemon.0123abcd");
        assert!(name("0123abcd").starts_with(PREFIX));
    }

    #[test]
    fn a_start_refused_for_the_volumes_daemon_is_told_apart() {
        assert!(start_lacks_daemon(
            "OCI runtime create failed: exec: \"/.workroom/dist/workroomd\": stat /.workroom/dist/workroomd: no such file or directory"
        ));
        assert!(!start_lacks_daemon("port is already allocated"));
    }
}
