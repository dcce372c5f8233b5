//! The engine's event stream, for noticing a room die under a command that
//! runs in it (`docker kill`, `docker stop`, the engine restarting it), and
//! start again under its background forwarder.

use super::{DockerEngine, EngineError};
use bollard::models::EventMessage;
use bollard::query_parameters::EventsOptions;
use futures_util::{Stream, StreamExt};
use std::collections::HashMap;

/// The events of a room's life that [`DockerEngine::container_events`]
/// follows: a start (`docker start`, `docker restart`, its restart policy
/// after a crash or an engine restart), its end, and its removal.
const LIFE_EVENTS: [&str; 4] = ["start", "restart", "die", "destroy"];

impl DockerEngine {
    /// Resolves when the start of container `id` that began at `started_at`
    /// (its `State.StartedAt`) ends: `true` on the engine's `die` event for
    /// it, `false` if the engine ended the stream without one (then the
    /// caller knows nothing, not that the room lives).
    ///
    /// The stream is asked for events since that start, so a death between
    /// the caller's inspect and the moment the engine registers the stream is
    /// replayed rather than missed.
    pub async fn container_died(&self, id: &str, started_at: &str) -> Result<bool, EngineError> {
        let filters = HashMap::from([
            ("type".to_string(), vec!["container".to_string()]),
            ("container".to_string(), vec![id.to_string()]),
            ("event".to_string(), vec!["die".to_string()]),
        ]);
        let options = EventsOptions { since: events_since(started_at), until: None, filters: Some(filters) };
        let events = self.docker.events(Some(options));
        let mut events = std::pin::pin!(super::logged_stream("events", id.to_string(), events));
        match events.next().await {
            Some(Ok(_)) => Ok(true),
            Some(Err(e)) => Err(self.map(format!("watch container {id}"), format!("container {id}"), e)),
            None => Ok(false),
        }
    }
}

impl DockerEngine {
    /// Container `id`'s starts, deaths, restarts and removal
    /// ([`LIFE_EVENTS`]) from `since` (a `State.StartedAt`; now when it is
    /// not one) on, as the engine reports them. The request goes out at the
    /// first poll: asking from a start the caller knows replays what
    /// happened since, so nothing between the caller's inspect and the
    /// subscription is missed. The stream ends, or fails, when the engine
    /// closes it (an engine restart); each event and that end are logged.
    pub fn container_events<'a>(
        &'a self,
        id: &'a str,
        since: &str,
    ) -> impl Stream<Item = Result<EventMessage, EngineError>> + 'a {
        let filters = HashMap::from([
            ("type".to_string(), vec!["container".to_string()]),
            ("container".to_string(), vec![id.to_string()]),
            ("event".to_string(), LIFE_EVENTS.iter().map(|e| e.to_string()).collect()),
        ]);
        let options = EventsOptions { since: events_since(since), until: None, filters: Some(filters) };
        let began = std::time::Instant::now();
        let events = self.docker.events(Some(options)).map(move |item| {
            let elapsed_ms = format!("{:.1}", began.elapsed().as_secs_f64() * 1000.0);
            let event = item.as_ref().ok().and_then(|e| e.action.clone()).unwrap_or_default();
            tracing::debug!(target: "workroom::engine", call = "container_events", name = %id, elapsed_ms = %elapsed_ms, ok = item.is_ok(), event = %event);
            item.map_err(|e| self.map(format!("follow the events of {id}"), format!("container {id}"), e))
        });
        let end = futures_util::stream::once(async move {
            let elapsed_ms = format!("{:.1}", began.elapsed().as_secs_f64() * 1000.0);
            tracing::debug!(target: "workroom::engine", call = "container_events", name = %id, elapsed_ms = %elapsed_ms, ok = true, event = "(the engine ended the stream)");
            None
        });
        events.map(Some).chain(end).filter_map(std::future::ready)
    }
}

/// The events a memory kill in a room leaves with the engine: the room's
/// `oom` (the kernel killed a process in it) and its execs' starts and
/// ends, which can name the process.
const MEMORY_EVENTS: [&str; 3] = ["oom", "exec_create", "exec_die"];

/// The events of a container's start: `start` for every start, and
/// `restart` beside it for `docker restart` (some engines say only one).
const START_EVENTS: [&str; 2] = ["start", "restart"];

impl DockerEngine {
    /// Container `id`'s [`MEMORY_EVENTS`] from `since` (a `State.StartedAt`)
    /// until now, as far back as the engine keeps them: Docker replays only
    /// its last 256 events of all containers, so on a busy engine the
    /// oldest are gone (the daemon's own log line of each kill stays).
    pub async fn memory_events(&self, id: &str, since: &str) -> Result<Vec<EventMessage>, EngineError> {
        let filters = HashMap::from([
            ("type".to_string(), vec!["container".to_string()]),
            ("container".to_string(), vec![id.to_string()]),
            ("event".to_string(), MEMORY_EVENTS.iter().map(|e| e.to_string()).collect()),
        ]);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        // Without a `since` the engine would follow from now and never end.
        let since = events_since(since).unwrap_or_else(|| "0".to_string());
        let options = EventsOptions { since: Some(since), until: Some(now.to_string()), filters: Some(filters) };
        let request = self.docker.events(Some(options)).collect::<Vec<_>>();
        let events = super::logged("memory_events", id, async { Ok::<_, EngineError>(request.await) }).await?;
        events
            .into_iter()
            .map(|e| e.map_err(|e| self.map(format!("read the events of {id}"), format!("container {id}"), e)))
            .collect()
    }

    /// Every start of a container carrying all of `labels` (`key` or
    /// `key=value`), from `since` (an engine timestamp; now when it is not
    /// one) on: what `workroom watch` follows. The engine matches every
    /// label filter given (they are and-ed), so containers without them are
    /// never reported; each event and the stream's end are logged.
    pub fn labelled_starts<'a>(
        &'a self,
        labels: &'a [String],
        since: &str,
    ) -> impl Stream<Item = Result<EventMessage, EngineError>> + 'a {
        let filters = HashMap::from([
            ("type".to_string(), vec!["container".to_string()]),
            ("event".to_string(), START_EVENTS.iter().map(|e| e.to_string()).collect()),
            ("label".to_string(), labels.to_vec()),
        ]);
        let options = EventsOptions { since: events_since(since), until: None, filters: Some(filters) };
        let began = std::time::Instant::now();
        let events = self.docker.events(Some(options)).map(move |item| {
            let elapsed_ms = format!("{:.1}", began.elapsed().as_secs_f64() * 1000.0);
            let name = item.as_ref().ok().and_then(|e| e.actor.as_ref()?.id.clone()).unwrap_or_default();
            tracing::debug!(target: "workroom::engine", call = "labelled_starts", name = %name, elapsed_ms = %elapsed_ms, ok = item.is_ok());
            item.map_err(|e| self.map("follow the rooms' starts", "the rooms' starts", e))
        });
        let end = futures_util::stream::once(async move {
            let elapsed_ms = format!("{:.1}", began.elapsed().as_secs_f64() * 1000.0);
            tracing::debug!(target: "workroom::engine", call = "labelled_starts", name = "", elapsed_ms = %elapsed_ms, ok = true, event = "(the engine ended the stream)");
            None
        });
        events.map(Some).chain(end).filter_map(std::future::ready)
    }
}

/// The events API's `since` (`seconds.nanoseconds`) for an engine timestamp
/// in RFC 3339 as `State.StartedAt` gives it (`2026-12-01T10:20:30.5Z`, UTC)
/// or `docker info`'s `SystemTime` does (in the engine's zone:
/// `2026-12-01T11:20:30.5+01:00`). `None` when it is not in that form (the
/// zero time of a container that never started included): then the stream
/// starts now.
pub fn events_since(rfc3339: &str) -> Option<String> {
    let (stamp, offset) = zone_offset(rfc3339)?;
    let (date, time) = stamp.split_once('T')?;
    let mut ymd = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let (hms, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let mut parts = hms.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (parts.next()??, parts.next()??, parts.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || y < 1970 || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    if fraction.is_empty() || fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let nanos: i64 = format!("{fraction:0<9}").parse().ok()?;
    let seconds = days_from_civil(y, m, d) * 86_400 + hh * 3600 + mm * 60 + ss - offset;
    (seconds > 0).then(|| format!("{seconds}.{nanos:09}"))
}

/// A timestamp without its zone, and the zone's offset from UTC in
/// seconds: `Z`, or `+HH:MM` / `-HH:MM`.
fn zone_offset(rfc3339: &str) -> Option<(&str, i64)> {
    if let Some(stamp) = rfc3339.strip_suffix('Z') {
        return Some((stamp, 0));
    }
    let split = rfc3339.len().checked_sub(6)?;
    let (stamp, zone) = (rfc3339.get(..split)?, rfc3339.get(split..)?);
    let sign = match zone.as_bytes().first() {
        Some(b'+') => 1,
        Some(b'-') => -1,
        _ => return None,
    };
    let (hh, mm) = zone[1..].split_once(':')?;
    if hh.len() != 2 || mm.len() != 2 {
        return None;
    }
    let (hh, mm) = (hh.parse::<i64>().ok()?, mm.parse::<i64>().ok()?);
    (hh <= 23 && mm <= 59).then_some((stamp, sign * (hh * 3600 + mm * 60)))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_time_becomes_the_events_since_of_the_same_instant() {
        // Expected values from `date -u -d ... +%s`.
        assert_eq!(events_since("2026-12-01T10:20:30Z").as_deref(), Some("1796120430.000000000"));
        assert_eq!(events_since("2026-12-01T10:20:30.123456789Z").as_deref(), Some("1796120430.123456789"));
        assert_eq!(events_since("2000-02-29T23:59:59.5Z").as_deref(), Some("951868799.500000000"));
    }

    #[test]
    fn an_engine_time_in_its_own_zone_is_the_same_instant_as_in_utc() {
        let utc = events_since("2026-12-01T10:20:30.5Z");
        assert_eq!(events_since("2026-12-01T11:20:30.5+01:00"), utc);
        assert_eq!(events_since("2026-12-01T05:50:30.5-04:30"), utc);
        assert_eq!(events_since("2026-12-01T10:20:30.5+00:00"), utc);
    }

    #[test]
    fn a_start_time_not_in_the_engines_form_starts_the_stream_now() {
        for bad in [
            "",
            "0001-01-01T00:00:00Z",
            "2026-12-01 10:20:30Z",
            "2026-13-01T10:20:30Z",
            "2026-12-01T10:20:30.Z",
            "2026-12-01T10:20:30",
            "2026-12-01T10:20:30+1:000",
            "2026-12-01T10:20:30+24:00",
            "2026-12-01T10:20:30*01:00",
            "2026-12-01T10:20:30é1:00",
        ] {
            assert_eq!(events_since(bad), None, "{bad:?}");
        }
    }
}
