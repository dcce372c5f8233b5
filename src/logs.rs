//! Diagnostic logs, for whoever asks: `WORKROOM_LOG=debug workroom up`
//! prints each Engine API call with its subject (the room, image or
//! volume) and how long it took, one line each on stderr. Unset, nothing
//! is printed: what a person is told (`warning: ...`, `stopped x`,
//! progress) stays plain lines from the commands, apart from these.

use std::str::FromStr;
use tracing_subscriber::filter::LevelFilter;

/// The variable that turns the logs on, with the most verbose level wanted.
pub const VARIABLE: &str = "WORKROOM_LOG";

/// The level `value` of [`VARIABLE`] asks for: a level name (`error`,
/// `warn`, `info`, `debug`, `trace`, `off`), any case; `None` for another
/// word.
pub fn level(value: &str) -> Option<LevelFilter> {
    LevelFilter::from_str(value.trim()).ok()
}

/// Starts the logs when [`VARIABLE`] asks for them; when its value is no
/// level, returns the one line that says so, and goes on without logs.
pub fn init() -> Option<String> {
    let value = std::env::var_os(VARIABLE)?;
    let value = value.to_string_lossy();
    if value.trim().is_empty() {
        return None;
    }
    let Some(level) = level(&value) else {
        return Some(format!("{VARIABLE}={value} is not a level (error, warn, info, debug, trace); no logs"));
    };
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_ansi(false)
        .with_target(true)
        .try_init();
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_level_is_read_in_any_case_and_another_word_is_none() {
        assert_eq!(level("debug"), Some(LevelFilter::DEBUG));
        assert_eq!(level(" INFO "), Some(LevelFilter::INFO));
        assert_eq!(level("off"), Some(LevelFilter::OFF));
        assert_eq!(level("verbose"), None);
    }
}
