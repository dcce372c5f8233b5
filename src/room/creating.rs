//! Which `up` is making a room, so that a room left half-made can be told
//! from one being made.
//!
//! A room is created (by the engine, or by compose for a compose room),
//! then the daemon is uploaded into it, then it starts; between the create
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
//! Lock files are left in place: removing a lock file someone may be about
//! to lock would let two holders lock two different files.

use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The label naming the host whose `up` made the room.
pub const CREATOR_HOST_LABEL: &str = "workroom.creator_host";

/// Held while a room is being made; released on drop or on death.
pub struct CreatorLock {
    _lock: Flock<File>,
}

fn cache_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
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
    match cache_dir() {
        Some(cache) => try_lock_in(&cache, room),
        None => Lock::Unavailable,
    }
}

/// Takes the room's lock, waiting up to `patience` for another process of
/// this host making (or starting, or removing) the room to be done:
/// `Busy` only once `patience` has run out.
pub async fn wait_to_make(room: &str, patience: Duration) -> Lock {
    wait_in(cache_dir().as_deref(), room, patience).await
}

async fn wait_in(cache: Option<&Path>, room: &str, patience: Duration) -> Lock {
    let Some(cache) = cache else { return Lock::Unavailable };
    let mut wait = crate::retry::Backoff::new(crate::retry::Pace::RACE, patience);
    loop {
        match try_lock_in(cache, room) {
            Lock::Busy if !wait.expired() => {}
            lock => return lock,
        }
        wait.pause().await;
    }
}

fn try_lock_in(cache: &Path, room: &str) -> Lock {
    let dir = cache.join("workroom").join("creating");
    let file = std::fs::create_dir_all(&dir).and_then(|()| {
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(format!("{room}.lock")))
    });
    let Ok(file) = file else { return Lock::Unavailable };
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Lock::Held(CreatorLock { _lock: lock }),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Lock::Busy,
        Err(_) => Lock::Unavailable,
    }
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
