//! The daemon's log: one line per event on its stderr, which is the
//! container's log (`workroom logs`, `docker logs`), with a level and the
//! pane, stream or peer the event is about as fields.
//!
//! Only `serve`, the long-lived daemon, logs (the anchor, a reaper, says
//! its two possible failures as plain lines). The short jobs
//! the host runs through `docker exec` (relay, attach, git-credential,
//! agents, files, own, update-uid) print plain lines for the person or
//! program that ran them, as before.
//!
//! `WORKROOM_LOG` in the room's environment (containerEnv) sets the most
//! verbose level, as on the host; the daemon's default is `info`, because
//! its log is only read when something went wrong.

use tracing_subscriber::filter::LevelFilter;

const VARIABLE: &str = "WORKROOM_LOG";

/// The level [`VARIABLE`] asks for, `info` when unset; a value that is no
/// level is said once and `info` is kept.
fn level(value: Option<&str>) -> (LevelFilter, Option<String>) {
    match value.map(str::trim).filter(|v| !v.is_empty()) {
        None => (LevelFilter::INFO, None),
        Some(v) => match v.parse::<LevelFilter>() {
            Ok(level) => (level, None),
            Err(_) => (LevelFilter::INFO, Some(format!("{VARIABLE}={v} is not a level; logging at info"))),
        },
    }
}

/// Starts the log for a long-lived daemon process.
pub fn init() {
    let value = std::env::var(VARIABLE).ok();
    let (level, complaint) = level(value.as_deref());
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_ansi(false)
        .with_target(false)
        .try_init();
    if let Some(complaint) = complaint {
        tracing::warn!("{complaint}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_level_is_info_unless_the_variable_names_another_and_a_wrong_word_is_said() {
        assert_eq!(level(None), (LevelFilter::INFO, None));
        assert_eq!(level(Some(" ")), (LevelFilter::INFO, None));
        assert_eq!(level(Some("DEBUG")), (LevelFilter::DEBUG, None));
        let (kept, said) = level(Some("loud"));
        assert_eq!(kept, LevelFilter::INFO);
        assert!(said.unwrap().contains("WORKROOM_LOG=loud is not a level"));
    }
}
