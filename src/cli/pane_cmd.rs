//! Panes for agents and scripts, as tmux's `capture-pane` and `send-keys`
//! are, but across rooms: `workroom capture`, `workroom send` and `workroom
//! wait`. A room is the workspace's (`--workspace-folder`) or one named
//! with `--room` (as `workroom list` shows it).
//!
//! `wait` asks the daemon for the screen each time it changed (the daemon
//! holds the question until a change), and matches the regex here: the
//! daemon stays small, and a pattern never runs in the room. `^` and `$`
//! match at each line's ends, as a person reads a screen. On a pane
//! whose program exited, `wait` fails at once if its screen does not match.

use super::RoomArgs;
use crate::engine::Engine;
use crate::link::RoomLink;
use anyhow::{bail, Context as _};
use std::time::Duration;
use workroomd::proto::{CaptureRequest, Event, ExitStatus, Request, Response};

/// `wait`'s status when the pattern did not show in time, as `timeout(1)`.
pub const EXIT_TIMEOUT: i32 = 124;

pub(super) async fn connect(args: &RoomArgs) -> anyhow::Result<RoomLink> {
    let engine = Engine::connect().await?;
    let room = args.running(&engine).await?;
    Ok(RoomLink::connect(&engine, &room.id).await?)
}

/// A pane's text as the daemon gave it, with its size, change count, and
/// how its program ended if it did.
struct Captured {
    changes: u64,
    rows: u16,
    cols: u16,
    exited: Option<ExitStatus>,
    text: Vec<u8>,
}

async fn capture_once(link: &RoomLink, request: CaptureRequest) -> anyhow::Result<Captured> {
    let pane = request.pane.clone();
    let handle = link.link().open(Request::CapturePane(request)).await?;
    let (changes, rows, cols, exited) = match handle.recv_reply().await? {
        Response::Captured { changes, rows, cols, exited } => (changes, rows, cols, exited),
        Response::Error { message } => bail!("{message}"),
        other => bail!("the daemon answered {other:?} to capturing pane {pane}"),
    };
    let mut text = Vec::new();
    while let Some(event) = handle.recv().await {
        match event {
            Event::Data(bytes) => text.extend_from_slice(&bytes),
            Event::Eof => break,
            Event::Reset(why) => bail!("capturing pane {pane} was cut off: {why}"),
            _ => {}
        }
    }
    Ok(Captured { changes, rows, cols, exited, text })
}

pub async fn capture(
    args: &RoomArgs,
    pane: &str,
    lines: Option<u32>,
    escapes: bool,
    as_json: bool,
) -> anyhow::Result<i32> {
    let link = connect(args).await?;
    let request = CaptureRequest { pane: pane.into(), lines, escapes, ..Default::default() };
    let Captured { changes, rows, cols, text, .. } = capture_once(&link, request).await?;
    if as_json {
        // The lines as strings (escapes, with --escapes, as JSON escapes them).
        let text = String::from_utf8_lossy(&text);
        let lines: Vec<&str> = text.lines().collect();
        let answer =
            serde_json::json!({ "pane": pane, "rows": rows, "cols": cols, "changes": changes, "lines": lines });
        crate::output::print_json(&answer)?;
        return Ok(0);
    }
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(&text)?;
    out.flush()?;
    Ok(0)
}

pub async fn send(args: &RoomArgs, pane: &str, keys: bool, words: &[String]) -> anyhow::Result<i32> {
    let text = if keys { key_bytes(words) } else { words.join(" ") };
    let link = connect(args).await?;
    match link.link().request(Request::TypeIn { pane: pane.into(), text }).await? {
        Response::Done => Ok(0),
        Response::Error { message } => bail!("{message}"),
        other => bail!("the daemon answered {other:?} to typing into pane {pane}"),
    }
}

pub async fn wait(
    args: &RoomArgs,
    pane: &str,
    pattern: &str,
    timeout: Option<f64>,
    as_json: bool,
) -> anyhow::Result<i32> {
    let regex = screen_regex(pattern)?;
    let limit = match timeout {
        Some(s) if s.is_finite() && s >= 0.0 => Some(Duration::from_secs_f64(s)),
        Some(s) => bail!("--timeout {s}: give seconds, e.g. 30 or 0.5"),
        None => None,
    };
    let deadline = limit.map(|l| tokio::time::Instant::now() + l);
    let link = connect(args).await?;
    let mut since = None;
    loop {
        let request =
            CaptureRequest { pane: pane.into(), screen_only: true, changed_since: since, ..Default::default() };
        let asked = capture_once(&link, request);
        let Captured { changes, text, exited, .. } = match deadline {
            Some(at) => match tokio::time::timeout_at(at, asked).await {
                Ok(answer) => answer?,
                Err(_) => {
                    eprintln!(
                        "workroom: {pattern:?} did not show in pane {pane} within {}",
                        limit.map(|l| format!("{l:?}")).unwrap_or_default()
                    );
                    return Ok(EXIT_TIMEOUT);
                }
            },
            None => asked.await?,
        };
        let text = String::from_utf8_lossy(&text);
        if let Some(found) = regex.find(&text) {
            let line = text[..found.start()].rfind('\n').map_or(0, |i| i + 1);
            let end = text[found.end()..].find('\n').map_or(text.len(), |i| found.end() + i);
            if as_json {
                let answer = serde_json::json!({ "pane": pane, "match": found.as_str(), "line": &text[line..end] });
                crate::output::print_json(&answer)?;
            } else {
                crate::output::print(&format!("{}\n", &text[line..end]))?;
            }
            return Ok(0);
        }
        // An exited pane's screen is final: the pattern will never show.
        if let Some(status) = exited {
            bail!("{pattern:?} did not show in pane {pane}, and its program {}", status.describe());
        }
        since = Some(changes);
    }
}

/// `--for` as a person reads a screen: `^` and `$` at each line's start
/// and end, not only the screen's (whose last rows are mostly blank). The
/// screen stays one text, its lines joined by `\n`, so a pattern may still
/// span lines.
fn screen_regex(pattern: &str) -> anyhow::Result<regex::Regex> {
    regex::RegexBuilder::new(pattern)
        .multi_line(true)
        .crlf(true)
        .build()
        .with_context(|| format!("--for {pattern:?} is not a regular expression"))
}

/// tmux's `send-keys` words: a key name (`Enter`, `Tab`, `Escape`, `Up`,
/// `C-c`, `M-x`, `F5`, ...) is that key; any other word is typed as is.
pub fn key_bytes(words: &[String]) -> String {
    let mut out = String::new();
    for word in words {
        out.push_str(&key(word).unwrap_or_else(|| word.clone()));
    }
    out
}

fn key(word: &str) -> Option<String> {
    let named = match word {
        "Enter" | "C-m" => "\r",
        "Tab" | "C-i" => "\t",
        "Space" => " ",
        "Escape" | "Esc" => "\x1b",
        "BSpace" | "Backspace" => "\x7f",
        "Up" => "\x1b[A",
        "Down" => "\x1b[B",
        "Right" => "\x1b[C",
        "Left" => "\x1b[D",
        "Home" => "\x1b[H",
        "End" => "\x1b[F",
        "PageUp" | "PPage" => "\x1b[5~",
        "PageDown" | "NPage" => "\x1b[6~",
        "Insert" | "IC" => "\x1b[2~",
        "Delete" | "DC" => "\x1b[3~",
        "F1" => "\x1bOP",
        "F2" => "\x1bOQ",
        "F3" => "\x1bOR",
        "F4" => "\x1bOS",
        "F5" => "\x1b[15~",
        "F6" => "\x1b[17~",
        "F7" => "\x1b[18~",
        "F8" => "\x1b[19~",
        "F9" => "\x1b[20~",
        "F10" => "\x1b[21~",
        "F11" => "\x1b[23~",
        "F12" => "\x1b[24~",
        _ => "",
    };
    if !named.is_empty() {
        return Some(named.to_string());
    }
    if let Some(rest) = word.strip_prefix("M-") {
        return Some(format!("\x1b{}", key(rest).unwrap_or_else(|| rest.to_string())));
    }
    let c = word.strip_prefix("C-")?;
    match c.as_bytes() {
        [b] if b.is_ascii_alphabetic() => Some(char::from(b.to_ascii_lowercase() - b'a' + 1).to_string()),
        [b @ (b'@' | b'[' | b'\\' | b']' | b'^' | b'_')] => Some(char::from(b & 0x1f).to_string()),
        [b' '] => Some("\0".into()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn key_names_become_their_bytes_and_other_words_are_typed_as_is() {
        assert_eq!(key_bytes(&words(&["echo hi", "Enter"])), "echo hi\r");
        assert_eq!(key_bytes(&words(&["C-c", "C-[", "M-x", "Up", "F5"])), "\x03\x1b\x1bx\x1b[A\x1b[15~");
        assert_eq!(key_bytes(&words(&["Enterprise", "C-", "C-cc"])), "EnterpriseC-C-cc");
    }

    #[test]
    fn a_for_pattern_anchors_at_each_lines_ends_and_may_still_span_lines() {
        let screen = "$ run\r\nprobe-42\nnext-7\n\n\n";
        let found = |p: &str| screen_regex(p).unwrap().find(screen).map(|m| m.as_str().to_string());
        assert_eq!(found("probe-42$").as_deref(), Some("probe-42"));
        assert_eq!(found("^probe-42$").as_deref(), Some("probe-42"));
        assert_eq!(found("^run$"), None, "a line is anchored whole");
        assert_eq!(found("^\\$ run$").as_deref(), Some("$ run"), "a CR before the line's end is its end");
        assert_eq!(found("probe-42\nnext").as_deref(), Some("probe-42\nnext"));
        assert!(screen_regex("(").is_err());
    }
}
