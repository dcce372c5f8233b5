//! The face's stderr: plain lines, or with `--log-format json` the
//! reference's JSON lines (`type`, `level`, `timestamp`, `text`).
//!
//! With JSON, stderr itself (fd 2) becomes a pipe whose lines a thread
//! wraps: the room code, the hooks' echo and their output write plain
//! lines, and every one of them must still reach the caller as JSON.

use crate::notices::{Level, Notice};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

impl Format {
    /// `--log-format json` (or `=json`) anywhere on the line: known before
    /// the line is read, so a refusal of the line is a JSON line too.
    pub fn asked(words: &[String]) -> Format {
        let spaced = words.windows(2).any(|w| w[0] == "--log-format" && w[1] == "json");
        match spaced || words.iter().any(|w| w == "--log-format=json") {
            true => Format::Json,
            false => Format::Text,
        }
    }
}

/// The reference's log levels, as numbers in its JSON lines.
const LEVEL_INFO: u8 = 3;
const LEVEL_WARNING: u8 = 4;
const LEVEL_ERROR: u8 = 5;

#[derive(Debug, Clone, Copy)]
pub struct Log(pub Format);

impl Log {
    pub fn info(&self, text: &str) {
        self.line(LEVEL_INFO, text);
    }

    pub fn warn(&self, text: &str) {
        self.line(LEVEL_WARNING, &format!("warning: {text}"));
    }

    pub fn error(&self, text: &str) {
        self.line(LEVEL_ERROR, text);
    }

    /// Where a room operation's events go through the face: with JSON logs
    /// a notice keeps its level; the rest (progress, what hooks and builds
    /// write) is plain lines on stderr, which the face's relay wraps.
    pub fn notices(self) -> crate::notices::Notices {
        let stderr = crate::cli::progress::Stderr::new();
        crate::notices::Notices::new(move |e| match (self.0, e) {
            (Format::Json, crate::notices::Event::Notice(n)) => self.notice(n),
            (_, e) => stderr.show(e),
        })
    }

    /// A room operation's notice, as it comes.
    pub fn notice(&self, n: &Notice) {
        let level = match n.level {
            Level::Warning => LEVEL_WARNING,
            Level::Note | Level::Said => LEVEL_INFO,
        };
        self.line(level, &n.to_string());
    }

    fn line(&self, level: u8, text: &str) {
        match self.0 {
            // Written to fd 2, which the relay wraps: once, as JSON.
            Format::Json => eprintln!("{}", json_line(level, text)),
            Format::Text => eprintln!("{text}"),
        }
    }
}

/// Milliseconds since the epoch, as the reference's `timestamp`.
fn now_ms() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or_default()
}

fn json_line(level: u8, text: &str) -> String {
    serde_json::json!({ "type": "text", "level": level, "timestamp": now_ms(), "text": text }).to_string()
}

/// A line the relay read: a JSON log line the face wrote goes on as it is;
/// any other (a hook's output, a line of room code) is wrapped as text.
fn relayed(line: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(line) {
        Ok(v) if v.get("type").is_some() && v.get("text").is_some() => line.to_string(),
        _ => json_line(LEVEL_INFO, line),
    }
}

/// How long the face waits, at its end, for the relay to pass on the last
/// lines: they are in the pipe already, so milliseconds; more only if a
/// process the face started kept a copy of stderr open, and then the face
/// ends without waiting for it.
const RELAY_DRAIN: Duration = Duration::from_secs(2);

/// Stderr as a pipe into a thread that writes JSON lines to the real one.
pub struct JsonStderr {
    /// The real stderr, put back at the end.
    original: OwnedFd,
    drained: std::sync::mpsc::Receiver<()>,
}

impl JsonStderr {
    pub fn install() -> std::io::Result<JsonStderr> {
        let mut ends = [0; 2];
        // SAFETY: `ends` is two ints for pipe(2) to fill.
        if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both are open descriptors we own alone.
        let (read_end, write_end) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
        // SAFETY: fd 2 is this process's stderr; dup gives a new descriptor or -1.
        let original = unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3) };
        if original < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `original` is the fresh descriptor fcntl returned, owned here.
        let original = unsafe { OwnedFd::from_raw_fd(original) };
        let mut out = std::fs::File::from(original.try_clone()?);
        // SAFETY: both descriptors are open; dup2 makes fd 2 the pipe's
        // write end for every later write to stderr.
        if unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&write_end), 2) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        drop(write_end);
        let (done, drained) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(std::fs::File::from(read_end)).split(b'\n').map_while(Result::ok) {
                let text = String::from_utf8_lossy(&line);
                let _ = writeln!(out, "{}", relayed(text.trim_end_matches('\r')));
            }
            let _ = done.send(());
        });
        Ok(JsonStderr { original, drained })
    }

    /// Puts the real stderr back, and waits for the relay to pass on what
    /// is left in the pipe.
    pub fn finish(self) {
        // SAFETY: `original` is open; dup2 closes the pipe's end at fd 2,
        // so the relay reads to the end of what was written.
        unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&self.original), 2) };
        let _ = self.drained.recv_timeout(RELAY_DRAIN);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn json_is_asked_spaced_or_with_an_equals_sign_and_text_otherwise() {
        assert_eq!(Format::asked(&words("up --log-format json")), Format::Json);
        assert_eq!(Format::asked(&words("up --log-format=json")), Format::Json);
        assert_eq!(Format::asked(&words("up --log-format text")), Format::Text);
        assert_eq!(Format::asked(&words("exec sh -c json")), Format::Text);
    }

    #[test]
    fn a_plain_line_is_wrapped_with_the_references_keys_and_a_json_log_line_passes_once() {
        let wrapped: serde_json::Value = serde_json::from_str(&relayed("[postCreateCommand] echo hi")).unwrap();
        assert_eq!(wrapped["type"], "text");
        assert_eq!(wrapped["level"], LEVEL_INFO);
        assert_eq!(wrapped["text"], "[postCreateCommand] echo hi");
        assert!(wrapped["timestamp"].as_u64().is_some_and(|t| t > 1_700_000_000_000));
        let ours = json_line(LEVEL_ERROR, "no");
        assert_eq!(relayed(&ours), ours);
        // A hook printing JSON of its own is its text, not a log line.
        let hook: serde_json::Value = serde_json::from_str(&relayed("{\"a\":1}")).unwrap();
        assert_eq!(hook["text"], "{\"a\":1}");
    }
}
