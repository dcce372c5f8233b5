//! Which `up` is making a room, so that a room left half-made can be told
//! from one being made.
//!
//! A room is created (by the engine, or by compose for a compose room),
//! then what it needs first is uploaded into it (a compose room's daemon, a
//! workspace volume's files), then it starts; between the create
//! and the start it sits in the engine's `created` state. Another `up`
//! finding it there must wait for the one making it, unless that `up` died
//! (SIGKILL, a closed laptop): then nobody will ever start it. Every kind
//! of room takes the one lock, through [`wait_to_make`]: an exclusive
//! `flock` on `$XDG_CACHE_HOME/workroom/creating/<room>.lock`, held from
//! before the create until the start is done (or the room is removed
//! again); the kernel releases it when the process dies, however it dies.
//! A waiter that can take the lock knows the creator is gone and takes the
//! room over. `up --recreate` holds it while it removes the room, so one
//! of several recreates removes it and the others see it gone.
//!
//! The lock is only seen on this host. The room carries the creating host's
//! name (`workroom.creator_host`), and a room another host is making is
//! waited for, never taken over.
//!
//! The same lock, keyed by a peer group's anchor name or by the anchor
//! image's, lets one of the `up`s of this host that find them missing
//! make a group's shared objects while the others wait (`peers.rs`).
//!
//! Lock files are left in place: removing a lock file someone may be about
//! to lock would let two holders lock two different files.

use crate::engine::{Engine, EngineError};
use crate::notices::Notices;
use crate::retry::{Backoff, Pace};
use anyhow::bail;
use bollard::models::{ContainerInspectResponse, ContainerStateStatusEnum};
use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long `up` waits for a room another `up` is creating to start. A
/// create, upload and start take well under a second on a healthy engine;
/// past this the other `up` has most likely died and the room is half-made.
pub const PEER_CREATE_WAIT: Duration = Duration::from_secs(60);

/// The label naming the host whose `up` made the room.
pub const CREATOR_HOST_LABEL: &str = "workroom.creator_host";

/// Held while a room is being made; released on drop or on death.
pub struct CreatorLock {
    _lock: Flock<File>,
}

fn locks_dir() -> Option<PathBuf> {
    crate::folders::cache("creating")
}

/// The outcome of trying the room's creator lock.
pub enum Lock {
    /// Ours now: nobody on this host is making the room.
    Held(CreatorLock),
    /// Another process of this host holds it.
    Busy,
    /// No cache folder to lock in: nobody can be told dead, so rooms in
    /// `created` state are waited for as before the lock existed.
    Unavailable,
}

/// Tries the room's creator lock without waiting.
pub fn try_lock(room: &str) -> Lock {
    match locks_dir() {
        Some(dir) => try_lock_in(&dir, room),
        None => Lock::Unavailable,
    }
}

/// Takes the room's lock, waiting up to `patience` for another process of
/// this host making (or starting, or removing) the room to be done:
/// `Busy` only once `patience` has run out.
pub async fn wait_to_make(room: &str, patience: Duration) -> Lock {
    wait_in(locks_dir().as_deref(), room, patience).await
}

async fn wait_in(dir: Option<&Path>, room: &str, patience: Duration) -> Lock {
    let Some(dir) = dir else { return Lock::Unavailable };
    let mut wait = Backoff::new(Pace::RACE, patience);
    loop {
        match try_lock_in(dir, room) {
            Lock::Busy if !wait.expired() => {}
            lock => return lock,
        }
        wait.pause().await;
    }
}

fn try_lock_in(dir: &Path, room: &str) -> Lock {
    let file = std::fs::create_dir_all(dir).and_then(|()| {
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(format!("{room}.lock")))
    });
    let Ok(file) = file else { return Lock::Unavailable };
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Lock::Held(CreatorLock { _lock: lock }),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Lock::Busy,
        Err(_) => Lock::Unavailable,
    }
}

/// Whether the room sits in the engine's `created` state: being made, or
/// left half-made.
pub fn is_created(c: &ContainerInspectResponse) -> bool {
    c.state.as_ref().and_then(|s| s.status) == Some(ContainerStateStatusEnum::CREATED)
}

/// A container in `created` state is one another `up` is preparing (a
/// compose room's daemon, or a workspace volume's files, are uploaded
/// before the first start); starting it ourselves could start it without
/// them. Wait for it to start, unless its creator on
/// this host is gone (its lock is free): then nobody will start it, so it
/// is removed and `None` says to make the room afresh. Never-started rooms
/// hold nothing of the user's (no hook ran).
pub async fn settle_created(
    engine: &Engine,
    c: &ContainerInspectResponse,
    name: &str,
    say: &Notices,
) -> anyhow::Result<Option<ContainerInspectResponse>> {
    let id = c.id.clone().unwrap_or_else(|| name.to_string());
    let labels = c.config.as_ref().and_then(|c| c.labels.as_ref());
    let ours = labels.and_then(|l| l.get(CREATOR_HOST_LABEL)) == Some(&host_name());
    let mut wait = Backoff::new(Pace::MAKING, PEER_CREATE_WAIT);
    loop {
        let lock = if ours { try_lock(name) } else { Lock::Busy };
        let Some(now) = engine.inspect_container(&id).await? else { return Ok(None) };
        if !is_created(&now) {
            return Ok(Some(now));
        }
        if let Lock::Held(_held) = lock {
            // Looked at while holding the lock, so no creator can be midway.
            say.say(format!("{name} was left unstarted by an `up` that died; making it again"));
            remove_for_recreate(engine, &id).await?;
            return Ok(None);
        }
        if wait.expired() {
            bail!("{name} was created but never started (an interrupted `up` on another host?); `workroom down` it and run `up` again");
        }
        wait.pause().await;
    }
}

/// Removes the room `up --recreate` replaces; `true` when this call removed
/// it, `false` when another did. Concurrent recreates of this host take
/// turns under the room's lock, so the later ones find it gone; those of
/// another host race: the engine refuses all but one (409, removal in
/// progress), and those wait for it to be gone, then race to create, where
/// one wins and the others use its room. Removing by id never touches the
/// winner's new room.
pub async fn remove_for_recreate(engine: &Engine, id: &str) -> anyhow::Result<bool> {
    if engine.inspect_container(id).await?.is_none() {
        return Ok(false);
    }
    match engine.remove(id, false).await {
        Ok(()) => return Ok(true),
        Err(EngineError::Refused { status: 409, .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let mut wait = Backoff::new(Pace::RACE, PEER_CREATE_WAIT);
    while engine.inspect_container(id).await?.is_some() {
        if wait.expired() {
            bail!("another `up --recreate` has been removing {id} for {} s; try again", PEER_CREATE_WAIT.as_secs());
        }
        wait.pause().await;
    }
    Ok(false)
}

/// This host's name, as the creator label records it.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_creator_lock_is_held_by_one_at_a_time_and_free_once_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let Lock::Held(held) = try_lock_in(dir.path(), "workroom-lock-test") else { panic!("a free lock is taken") };
        assert!(matches!(try_lock_in(dir.path(), "workroom-lock-test"), Lock::Busy), "a held lock is busy");
        drop(held);
        assert!(matches!(try_lock_in(dir.path(), "workroom-lock-test"), Lock::Held(_)), "a dropped lock is free");
    }

    #[tokio::test]
    async fn a_waiter_takes_the_lock_once_its_holder_lets_go_and_gives_up_at_its_patience() {
        let dir = tempfile::tempdir().unwrap();
        let Lock::Held(held) = try_lock_in(dir.path(), "workroom-wait-test") else { panic!("a free lock is taken") };
        let gave_up = wait_in(Some(dir.path()), "workroom-wait-test", Duration::from_millis(50)).await;
        assert!(matches!(gave_up, Lock::Busy), "a lock held past the patience is busy");
        let waiter = wait_in(Some(dir.path()), "workroom-wait-test", Duration::from_secs(30));
        let release = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            drop(held);
        };
        let (taken, ()) = tokio::join!(waiter, release);
        assert!(matches!(taken, Lock::Held(_)), "the waiter takes the lock its holder let go");
        assert!(matches!(wait_in(None, "workroom-wait-test", Duration::ZERO).await, Lock::Unavailable));
    }
}
