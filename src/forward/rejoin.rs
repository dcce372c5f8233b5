//! A forwarder outlives the start of the room it serves: when that start
//! ends (`docker restart`, the engine's restart policy after a crash or an
//! engine restart, a hand-off that closed the link), it keeps its ports and
//! waits for the room's next start, following the engine's events for the
//! container, and links to it again; ports, the ssh-agent and git
//! credentials come back with nobody typing anything.
//!
//! What it does next is decided by [`step`] from what the engine says of
//! the room, each time the room has an event and when a wait runs out; the
//! engine itself going away (its event stream ends) is waited out at
//! [`Pace::ENGINE_RETURN`], and the room looked at again once it answers.

use crate::engine::Engine;
use crate::retry::{Backoff, Pace};
use bollard::models::ContainerInspectResponse;
use futures_util::StreamExt;
use std::time::Duration;
use tokio::time::Instant;

/// How long a room may stay down before its forwarder takes it as stopped
/// and ends. `docker restart` starts it again within a second of its end,
/// the restart policy after a crash within its first backoff (100 ms); a
/// room down longer was stopped (`docker stop`), and a forwarder that
/// stayed would hold its ports for a room nobody runs. (`workroom stop`
/// and `down` end the forwarder themselves, at once.)
pub const ROOM_RESTART_WAIT: Duration = Duration::from_secs(10);

/// How long the engine may stay away (its socket gone or refusing) before
/// the forwarder gives up. An engine restart or upgrade takes seconds to a
/// minute; one away longer was stopped on purpose or the host is going
/// down, and the next `up` starts a forwarder again.
pub const ENGINE_RETURN_WAIT: Duration = Duration::from_secs(600);

/// How long a restarted room's daemon may take to answer the new link: it
/// binds its socket within milliseconds of the start, seconds on a loaded
/// machine.
pub const DAEMON_READY_WAIT: Duration = Duration::from_secs(30);

/// A link that lasted this long closed for a reason of its own (a
/// hand-off): linking to the same start again starts a fresh count. Links
/// that keep closing sooner are paced, and given up after
/// [`RELINK_WAIT`].
pub const LINK_SETTLED: Duration = Duration::from_secs(30);

/// How long links to one start may keep closing at once before the
/// forwarder gives up on it: a daemon that drops every link is broken, and
/// relinking forever would only fill the log.
pub const RELINK_WAIT: Duration = Duration::from_secs(60);

/// What the engine said of the room when the forwarder looked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// Running the start that began at `started_at` (`State.StartedAt`).
    Running { started_at: String },
    /// There, not running: between the stop and the start of a `docker
    /// restart`, waiting on its restart policy, or stopped.
    Down,
    /// Removed.
    Gone,
    /// The engine did not answer: restarting, or stopped.
    NoEngine,
}

impl Seen {
    /// What an inspect of the container says.
    pub fn of(inspected: Result<Option<ContainerInspectResponse>, crate::engine::EngineError>) -> Seen {
        match inspected {
            Ok(Some(c)) => {
                let state = c.state.unwrap_or_default();
                match (state.running, state.restarting, state.started_at) {
                    (Some(true), Some(false) | None, Some(started_at)) => Seen::Running { started_at },
                    _ => Seen::Down,
                }
            }
            Ok(None) => Seen::Gone,
            Err(e) if e.is_not_found() => Seen::Gone,
            Err(_) => Seen::NoEngine,
        }
    }
}

/// Why a forwarder ends rather than serving another start, said as the
/// end of its last line: `{room} {ended}; forwards end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Ended {
    /// The room was removed.
    #[error("was removed")]
    Removed,
    /// The room stayed down for [`ROOM_RESTART_WAIT`]: it was stopped.
    #[error("stayed stopped for {} s (`workroom up` starts it and its forwards again)", ROOM_RESTART_WAIT.as_secs())]
    StayedDown,
    /// The engine stayed away for [`ENGINE_RETURN_WAIT`].
    #[error(
        "is on an engine that did not answer for {} s (`workroom up` starts the forwards again)",
        ENGINE_RETURN_WAIT.as_secs()
    )]
    EngineAway,
    /// Its daemon kept closing the links to one start for [`RELINK_WAIT`].
    #[error("kept closing its links for {} s", RELINK_WAIT.as_secs())]
    KeptClosing,
}

/// What the forwarder does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Link to the room's start at `started_at` (the same one again when
    /// only the link closed).
    Serve {
        started_at: String,
    },
    /// Look again at the room's next event, or after `within` at the latest.
    AwaitEvent {
        within: Duration,
    },
    /// Look again after a pause: the engine is away.
    AwaitEngine,
    End(Ended),
}

/// The next step, from what was seen and how long the room has been seen
/// down (since the engine last came back) or the engine away.
pub fn step(seen: &Seen, down_for: Duration, engine_away_for: Duration) -> Step {
    match seen {
        Seen::Running { started_at } => Step::Serve { started_at: started_at.clone() },
        Seen::Gone => Step::End(Ended::Removed),
        Seen::Down if down_for >= ROOM_RESTART_WAIT => Step::End(Ended::StayedDown),
        Seen::Down => Step::AwaitEvent { within: ROOM_RESTART_WAIT - down_for },
        Seen::NoEngine if engine_away_for >= ENGINE_RETURN_WAIT => Step::End(Ended::EngineAway),
        Seen::NoEngine => Step::AwaitEngine,
    }
}

/// What a forwarder remembers between looks: since when the room has been
/// down, since when the engine away.
#[derive(Debug, Default)]
pub struct Watch {
    down_since: Option<Instant>,
    away_since: Option<Instant>,
}

impl Watch {
    /// The step after seeing `seen` at `now`. A room down is counted from
    /// the engine's return: an engine back from a restart starts its
    /// restart-policy rooms then.
    pub fn look(&mut self, seen: &Seen, now: Instant) -> Step {
        if *seen == Seen::NoEngine {
            self.away_since.get_or_insert(now);
            self.down_since = None;
        } else {
            self.away_since = None;
        }
        if *seen == Seen::Down {
            self.down_since.get_or_insert(now);
        } else {
            self.down_since = None;
        }
        let since = |at: Option<Instant>| at.map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        step(seen, since(self.down_since), since(self.away_since))
    }
}

/// Waits for the start of room `id` that follows the one at `served`, and
/// returns its `State.StartedAt` (`served` itself when that start still
/// runs: only the link closed), or why none will come.
pub async fn next_start(engine: &Engine, id: &str, served: &str) -> Result<String, Ended> {
    let mut watch = Watch::default();
    // Paces looks while the engine is away or its stream keeps breaking;
    // dropped once it delivers again.
    let mut engine_wait: Option<Backoff> = None;
    loop {
        // Subscribed from the served start: what happened since is
        // replayed, so no start is missed between a look and the stream.
        let mut events = engine.container_events(id, served);
        loop {
            let seen = Seen::of(engine.inspect_container(id).await);
            match watch.look(&seen, Instant::now()) {
                Step::Serve { started_at } => return Ok(started_at),
                Step::End(ended) => return Err(ended),
                Step::AwaitEngine => break,
                Step::AwaitEvent { within } => match tokio::time::timeout(within, events.next()).await {
                    Ok(Some(Ok(_event))) => engine_wait = None,
                    Ok(Some(Err(_)) | None) => break,
                    Err(_waited_out) => {}
                },
            }
        }
        engine_wait.get_or_insert_with(|| Backoff::new(Pace::ENGINE_RETURN, ENGINE_RETURN_WAIT)).pause().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: &str = "2026-12-03T08:00:00.5Z";

    fn running() -> Seen {
        Seen::Running { started_at: START.to_string() }
    }

    #[test]
    fn a_running_room_is_served_whatever_was_waited() {
        for (down, away) in [(Duration::ZERO, Duration::ZERO), (ROOM_RESTART_WAIT * 2, ENGINE_RETURN_WAIT * 2)] {
            assert_eq!(step(&running(), down, away), Step::Serve { started_at: START.to_string() });
        }
    }

    #[test]
    fn each_end_completes_the_forwarders_last_line_with_the_wait_that_ran_out() {
        let line = |ended: Ended| format!("r {ended}; forwards end");
        assert_eq!(line(Ended::Removed), "r was removed; forwards end");
        assert_eq!(
            line(Ended::StayedDown),
            format!(
                "r stayed stopped for {} s (`workroom up` starts it and its forwards again); forwards end",
                ROOM_RESTART_WAIT.as_secs()
            )
        );
        assert!(line(Ended::EngineAway).contains(&format!("did not answer for {} s", ENGINE_RETURN_WAIT.as_secs())));
        assert_eq!(
            line(Ended::KeptClosing),
            format!("r kept closing its links for {} s; forwards end", RELINK_WAIT.as_secs())
        );
    }

    #[test]
    fn a_removed_room_ends_the_forwarder_at_once() {
        assert_eq!(step(&Seen::Gone, Duration::ZERO, Duration::ZERO), Step::End(Ended::Removed));
    }

    #[test]
    fn a_room_down_is_awaited_until_the_restart_wait_runs_out_then_taken_as_stopped() {
        assert_eq!(step(&Seen::Down, Duration::ZERO, Duration::ZERO), Step::AwaitEvent { within: ROOM_RESTART_WAIT });
        let later = Duration::from_secs(4);
        assert_eq!(step(&Seen::Down, later, Duration::ZERO), Step::AwaitEvent { within: ROOM_RESTART_WAIT - later });
        assert_eq!(step(&Seen::Down, ROOM_RESTART_WAIT, Duration::ZERO), Step::End(Ended::StayedDown));
    }

    #[test]
    fn an_engine_that_went_away_is_awaited_then_given_up_on() {
        assert_eq!(step(&Seen::NoEngine, Duration::ZERO, Duration::ZERO), Step::AwaitEngine);
        assert_eq!(step(&Seen::NoEngine, Duration::ZERO, ENGINE_RETURN_WAIT / 2), Step::AwaitEngine);
        assert_eq!(step(&Seen::NoEngine, Duration::ZERO, ENGINE_RETURN_WAIT), Step::End(Ended::EngineAway));
    }

    #[test]
    fn a_room_down_is_counted_from_the_engines_return_so_its_restart_policy_gets_the_whole_wait() {
        let t0 = Instant::now();
        let mut watch = Watch::default();
        assert_eq!(watch.look(&Seen::Down, t0), Step::AwaitEvent { within: ROOM_RESTART_WAIT });
        let four = Duration::from_secs(4);
        assert_eq!(watch.look(&Seen::Down, t0 + four), Step::AwaitEvent { within: ROOM_RESTART_WAIT - four });
        // The engine goes away for longer than the room's wait, and comes
        // back with the room not yet started by its policy.
        assert_eq!(watch.look(&Seen::NoEngine, t0 + Duration::from_secs(5)), Step::AwaitEngine);
        let back = t0 + Duration::from_secs(40);
        assert_eq!(watch.look(&Seen::Down, back), Step::AwaitEvent { within: ROOM_RESTART_WAIT });
        assert_eq!(
            watch.look(&running(), back + Duration::from_secs(1)),
            Step::Serve { started_at: START.to_string() }
        );
        assert_eq!(watch.look(&Seen::Down, back + ROOM_RESTART_WAIT), Step::AwaitEvent { within: ROOM_RESTART_WAIT });
        assert_eq!(watch.look(&Seen::Down, back + ROOM_RESTART_WAIT * 2), Step::End(Ended::StayedDown));
    }

    #[test]
    fn an_engine_away_is_counted_from_its_first_silence_until_it_answers() {
        let t0 = Instant::now();
        let mut watch = Watch::default();
        assert_eq!(watch.look(&Seen::NoEngine, t0), Step::AwaitEngine);
        assert_eq!(watch.look(&Seen::NoEngine, t0 + ENGINE_RETURN_WAIT / 2), Step::AwaitEngine);
        // It answered once: the count starts again.
        assert_eq!(
            watch.look(&Seen::Down, t0 + ENGINE_RETURN_WAIT / 2),
            Step::AwaitEvent { within: ROOM_RESTART_WAIT }
        );
        let again = t0 + ENGINE_RETURN_WAIT;
        assert_eq!(watch.look(&Seen::NoEngine, again), Step::AwaitEngine);
        assert_eq!(watch.look(&Seen::NoEngine, again + ENGINE_RETURN_WAIT), Step::End(Ended::EngineAway));
    }

    fn inspected(running: bool, restarting: bool, started_at: Option<&str>) -> ContainerInspectResponse {
        ContainerInspectResponse {
            state: Some(bollard::models::ContainerState {
                running: Some(running),
                restarting: Some(restarting),
                started_at: started_at.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn an_inspect_says_running_down_gone_or_no_engine() {
        assert_eq!(Seen::of(Ok(Some(inspected(true, false, Some(START))))), running());
        assert_eq!(Seen::of(Ok(Some(inspected(false, false, Some(START))))), Seen::Down);
        assert_eq!(Seen::of(Ok(Some(inspected(true, true, Some(START))))), Seen::Down, "restarting is not up yet");
        assert_eq!(Seen::of(Ok(None)), Seen::Gone);
        let gone = crate::engine::EngineError::NotFound { what: "container x".into() };
        assert_eq!(Seen::of(Err(gone)), Seen::Gone);
        let away = crate::engine::EngineError::Unreachable { host: "unix:///x".into(), reason: "no socket".into() };
        assert_eq!(Seen::of(Err(away)), Seen::NoEngine);
    }
}
