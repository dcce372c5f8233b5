//! Waiting for what another process or the engine is doing, when there is
//! no event to await: look, and if it is not so yet, pause and look again,
//! the pause doubling up to a cap, until a deadline. Each kind of wait is a
//! named [`Pace`] with its reason; each caller keeps its own deadline (a
//! named constant beside it) and its own words for giving up.

use std::time::Duration;
use tokio::time::Instant;

/// The first pause and the most any pause grows to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    pub first: Duration,
    pub most: Duration,
}

impl Pace {
    /// Another `up` of this host or the engine settling a race (a name
    /// taken but not yet inspectable, a removal in progress, a lock): most
    /// settle within the first look or two, and a minute's wait at 200 ms
    /// costs some 300 looks, not thousands.
    pub const RACE: Pace = Pace { first: Duration::from_millis(10), most: Duration::from_millis(200) };
    /// A daemon or forwarder just started, binding its socket: ready within
    /// milliseconds, so the first look is soon.
    pub const STARTING: Pace = Pace { first: Duration::from_millis(5), most: Duration::from_millis(200) };
    /// A room another `up` is making (which may include a build or a pull):
    /// seconds to minutes, looked at less often.
    pub const MAKING: Pace = Pace { first: Duration::from_millis(20), most: Duration::from_millis(500) };
    /// A lifecycle hook another `up` runs: seconds to minutes of the user's
    /// own commands; a second between looks is soon enough to go on.
    pub const HOOK: Pace = Pace { first: Duration::from_millis(50), most: Duration::from_secs(1) };
    /// The background forwarder writing its status file: milliseconds, and
    /// `up` waits on it on the critical path, so the cap is low.
    pub const FORWARDER: Pace = Pace { first: Duration::from_millis(5), most: Duration::from_millis(100) };
    /// The engine coming back (restarted by systemd or by hand: seconds),
    /// for a background forwarder whose room it runs: the first look soon,
    /// as a broken event stream is often a blip, and then at most every
    /// 5 s, so a forwarder waiting on an engine that was taken down costs
    /// next to nothing.
    pub const ENGINE_RETURN: Pace = Pace { first: Duration::from_millis(250), most: Duration::from_secs(5) };
}

/// One wait: a pace and a deadline.
#[derive(Debug)]
pub struct Backoff {
    pause: Duration,
    most: Duration,
    deadline: Instant,
}

impl Backoff {
    /// A wait at `pace` that gives up `within` from now.
    pub fn new(pace: Pace, within: Duration) -> Backoff {
        Backoff { pause: pace.first, most: pace.most, deadline: Instant::now() + within }
    }

    /// Whether the deadline has passed: the caller says so in its words.
    pub fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Pauses before the next look; each pause doubles up to the cap.
    pub async fn pause(&mut self) {
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(self.most);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn pauses_double_to_their_cap_and_the_deadline_holds() {
        let mut wait = Backoff::new(Pace::RACE, Duration::from_millis(500));
        let start = Instant::now();
        let mut pauses = Vec::new();
        while !wait.expired() {
            let before = Instant::now();
            wait.pause().await;
            pauses.push(before.elapsed().as_millis());
        }
        assert_eq!(&pauses[..5], &[10, 20, 40, 80, 160]);
        assert!(pauses[5..].iter().all(|p| *p == 200), "{pauses:?}");
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(500) && waited < Duration::from_millis(700), "{waited:?}");
    }
}
