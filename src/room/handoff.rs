//! The host's half of a daemon hand-off: upload the new binary beside the
//! running one, ask the daemon to exec it, and confirm by asking the new
//! daemon which binary it runs. The daemon's half (the check, the exec, the
//! adoption of panes) is in `workroomd/src/handoff.rs`.
//!
//! `up` only advises: a hand-off replaces a process under the user's panes,
//! which `up` (run by scripts and editors, often) should not do unasked.

use super::daemon;
use crate::engine::Engine;
use crate::link::RoomLink;
use anyhow::{bail, Context as _};
use bollard::models::ContainerInspectResponse;
use std::path::Path;
use std::time::{Duration, Instant};
use workroomd::proto::{HandOffOutcome, Request, Response};
use workroomd::room;

/// How long the new daemon may take to answer after the exec: it starts in
/// milliseconds; past this it did not come up.
const CONFIRM_WAIT: Duration = Duration::from_secs(15);
/// Between attempts to reach the new daemon.
const CONFIRM_PAUSE: Duration = Duration::from_millis(20);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    HandedOff,
    Current,
}

/// Where a new binary of this digest is uploaded: beside the entrypoint,
/// under a name of its own, so the running binary is never overwritten.
pub fn upload_path(digest: &str) -> String {
    format!("{}.{digest}", room::DAEMON_PATH)
}

pub async fn hand_off(engine: &Engine, room_id: &str, binary: &[u8], force: bool) -> anyhow::Result<Outcome> {
    let digest = daemon::digest(binary);
    let link = RoomLink::connect(engine, room_id).await?;
    if !force {
        // No upload when the daemon already runs it.
        if let Response::HandOff { digest: running, .. } = ask(&link, String::new(), false, true).await? {
            if running == digest {
                return Ok(Outcome::Current);
            }
        }
    }
    let path = upload_path(&digest);
    // Into the running daemon's own folder, which exists: a read-only
    // room takes uploads only there (a volume), not at `/`.
    let folder = std::path::Path::new(&path).parent().and_then(|p| p.to_str()).unwrap_or("/");
    let tar = daemon::upload_tar_into(binary, &path, folder).context("pack the new daemon")?;
    engine.upload(room_id, folder, tar).await.context("upload the new daemon into the room")?;
    match ask(&link, path.clone(), force, false).await {
        Ok(Response::HandOff { outcome: HandOffOutcome::Current, .. }) => return Ok(Outcome::Current),
        Ok(Response::HandOff { outcome: HandOffOutcome::HandingOff, .. }) => {}
        Ok(Response::Error { message }) => bail!("{message}"),
        Ok(other) => bail!("the daemon answered {other:?} to a hand-off"),
        // The exec can close the link before the reply is out; confirm below.
        Err(_) => {}
    }
    drop(link);
    confirm(engine, room_id, &digest).await?;
    Ok(Outcome::HandedOff)
}

/// The binary to hand off to: `given` (`--binary`), which must be for the
/// room's architecture, else the daemon this workroom carries for the room.
pub async fn new_binary(engine: &Engine, room_id: &str, given: Option<&Path>) -> anyhow::Result<Vec<u8>> {
    let room = engine.inspect_container(room_id).await?.with_context(|| format!("{room_id} vanished"))?;
    match given {
        Some(path) => {
            let bytes =
                std::fs::read(path).with_context(|| format!("cannot read the new daemon {}", path.display()))?;
            daemon::check_fits(&bytes, &path.display().to_string(), &room)?;
            Ok(bytes)
        }
        None => Ok(daemon::for_room(&room)?.bytes.into_owned()),
    }
}

async fn ask(link: &RoomLink, binary: String, force: bool, dry_run: bool) -> anyhow::Result<Response> {
    Ok(link.link().request(Request::HandOff { binary, force, dry_run }).await?)
}

/// The new daemon answers, runs `digest`, and sits at the entrypoint path.
async fn confirm(engine: &Engine, room_id: &str, digest: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + CONFIRM_WAIT;
    loop {
        let attempt = async {
            let link = RoomLink::connect(engine, room_id).await?;
            ask(&link, room::DAEMON_PATH.into(), false, true).await
        }
        .await;
        match attempt {
            Ok(Response::HandOff { outcome: HandOffOutcome::Current, digest: running, .. }) if running == digest => {
                return Ok(())
            }
            Ok(Response::HandOff { digest: running, .. }) if Instant::now() >= deadline => {
                bail!("the hand-off did not take: the daemon runs {running}, not {digest}; see `workroom logs`")
            }
            Err(e) if Instant::now() >= deadline => {
                return Err(e.context("the new daemon did not answer after the hand-off; see `workroom logs`"))
            }
            _ => {}
        }
        tokio::time::sleep(CONFIRM_PAUSE).await;
    }
}

/// For `up`: a note when the room's daemon is not the one this workroom
/// carries for its platform. One request on the link `up` already holds.
pub async fn advice(link: &RoomLink, room: &ContainerInspectResponse) -> Option<String> {
    let ours = daemon::for_room(room).ok()?.digest();
    match ask(link, String::new(), false, true).await {
        Ok(Response::HandOff { digest: running, .. }) if !running.is_empty() && running != ours => Some(format!(
            "the room's daemon ({running}) is not the one this workroom carries ({ours}); \
             `workroom hand-off` upgrades it and keeps the panes"
        )),
        _ => None,
    }
}
