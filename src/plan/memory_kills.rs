//! Which process a memory kill took, from what the engine's events say of
//! a room, for `workroom logs`. The daemon's own log says every kill (it
//! reads the room's cgroup count, ADR 0014) but cannot name a process it
//! did not start: a `workroom exec` (or `docker exec`) command is the
//! engine's. The engine reports the kill (`oom`) and, for an exec, its end
//! (`exec_die`, exit code 137: killed) and its start (`exec_create`, with
//! the command), so an exec that ended killed within
//! [`SAME_KILL_WITHIN`] of the kill is named as the process it took.

use bollard::models::EventMessage;

/// How far apart the kill and the exec's end may be and be one event: the
/// engine hears of both within milliseconds (measured: the same second on
/// Docker 20.10), and a loaded engine may take longer.
pub const SAME_KILL_WITHIN_NANOS: i64 = 2_000_000_000;

/// The exit code of a process ended by SIGKILL (128 + 9), which the OOM
/// killer sends.
const KILLED: &str = "137";

/// One memory kill the engine reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kill {
    /// When, in nanoseconds since the epoch.
    pub at_nanos: i64,
    /// The exec it took, as started (`python3 -c …`), when one ended
    /// killed with it.
    pub exec: Option<String>,
}

fn attribute<'a>(e: &'a EventMessage, key: &str) -> Option<&'a str> {
    e.actor.as_ref()?.attributes.as_ref()?.get(key).map(String::as_str)
}

fn nanos(e: &EventMessage) -> i64 {
    e.time_nano.or(e.time.map(|t| t * 1_000_000_000)).unwrap_or(0)
}

/// The kills in `events` (any order), each with the exec it took when the
/// events tell, oldest first.
pub fn kills(events: &[EventMessage]) -> Vec<Kill> {
    let action = |e: &EventMessage| e.action.clone().unwrap_or_default();
    let mut out: Vec<Kill> = events
        .iter()
        .filter(|e| action(e) == "oom")
        .map(|oom| {
            let at_nanos = nanos(oom);
            let died = events.iter().find(|e| {
                action(e) == "exec_die"
                    && attribute(e, "exitCode") == Some(KILLED)
                    && (nanos(e) - at_nanos).abs() <= SAME_KILL_WITHIN_NANOS
            });
            let exec = died.and_then(|d| attribute(d, "execID")).and_then(|id| {
                events.iter().find_map(|e| {
                    let command = action(e).strip_prefix("exec_create: ")?.to_string();
                    (attribute(e, "execID") == Some(id)).then_some(command)
                })
            });
            Kill { at_nanos, exec }
        })
        .collect();
    out.sort_by_key(|k| k.at_nanos);
    out
}

/// The longest command shown; a command line can be a whole script.
const MAX_COMMAND: usize = 120;

/// The line `workroom logs` prints for a kill that named an exec.
pub fn line(kill: &Kill) -> Option<String> {
    let command = kill.exec.as_deref()?;
    let mut shown: String = command.chars().take(MAX_COMMAND).collect::<String>().replace('\n', " ");
    if command.chars().count() > MAX_COMMAND {
        shown.push('…');
    }
    Some(format!(
        "{} workroom: the kernel killed the exec `{shown}` for memory (the engine's events)",
        rfc3339(kill.at_nanos)
    ))
}

/// A time as the daemon's log writes it: UTC, to the microsecond.
pub fn rfc3339(nanos: i64) -> String {
    let secs = nanos.div_euclid(1_000_000_000);
    let micros = nanos.rem_euclid(1_000_000_000) / 1000;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = workroomd::clock::civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}Z", rest / 3600, rest % 3600 / 60, rest % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::EventActor;

    fn event(action: &str, secs: f64, attributes: &[(&str, &str)]) -> EventMessage {
        EventMessage {
            action: Some(action.into()),
            actor: Some(EventActor {
                id: Some("c0ffee".into()),
                attributes: Some(attributes.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            }),
            time_nano: Some((secs * 1e9) as i64),
            ..Default::default()
        }
    }

    #[test]
    fn an_exec_that_ended_killed_with_the_kill_is_named_as_what_it_took() {
        let events = [
            event("exec_create: sleep 100", 10.0, &[("execID", "a")]),
            event("exec_create: python3 -c b = bytearray(1<<30)", 20.0, &[("execID", "b")]),
            event("oom", 20.4, &[]),
            event("exec_die", 20.5, &[("execID", "b"), ("exitCode", "137")]),
            event("exec_die", 21.0, &[("execID", "a"), ("exitCode", "0")]),
        ];
        let found = kills(&events);
        assert_eq!(found, [Kill { at_nanos: 20_400_000_000, exec: Some("python3 -c b = bytearray(1<<30)".into()) }]);
        assert_eq!(
            line(&found[0]).unwrap(),
            "1970-01-01T00:00:20.400000Z workroom: the kernel killed the exec `python3 -c b = bytearray(1<<30)` \
             for memory (the engine's events)"
        );
    }

    #[test]
    fn a_kill_with_no_exec_ending_killed_near_it_names_nothing() {
        let events = [
            event("exec_create: sh", 1.0, &[("execID", "a")]),
            event("exec_die", 9.0, &[("execID", "a"), ("exitCode", "137")]),
            event("oom", 30.0, &[]),
            event("exec_die", 30.1, &[("execID", "z"), ("exitCode", "0")]),
        ];
        let found = kills(&events);
        assert_eq!(found, [Kill { at_nanos: 30_000_000_000, exec: None }]);
        assert_eq!(line(&found[0]), None, "the daemon's own line says that kill");
    }

    #[test]
    fn a_long_command_is_cut_to_one_line() {
        let long = format!("python3 -c '{}\nprint(1)'", "x".repeat(200));
        let shown = line(&Kill { at_nanos: 0, exec: Some(long) }).unwrap();
        assert!(shown.contains('…') && !shown.contains('\n'), "{shown}");
    }

    #[test]
    fn times_are_written_as_the_daemons_log_writes_them() {
        // `date -u -d @1796493218 +%FT%T` says 2026-12-05T17:53:38.
        assert_eq!(rfc3339(1_796_493_218_123_456_789), "2026-12-05T17:53:38.123456Z");
        assert_eq!(rfc3339(951_868_799_500_000_000), "2000-02-29T23:59:59.500000Z");
    }
}
