//! Writing to stdout without panicking on a closed pipe: `workroom list | head`
//! must end quietly (exit 0), as ripgrep does, not with a panic.

use std::io::{self, Write};

/// A closed stdout. `main` turns it into a quiet exit 0.
#[derive(Debug, thiserror::Error)]
#[error("stdout closed")]
pub struct BrokenPipe;

pub fn print(text: &str) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|_| out.flush()).map_err(map_err)
}

pub fn print_json(value: &serde_json::Value) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    print(&text)
}

/// One line of JSON, as the reference CLI prints its results: scripts read
/// the last line of stdout.
pub fn print_json_line(value: &serde_json::Value) -> anyhow::Result<()> {
    let mut text = serde_json::to_string(value)?;
    text.push('\n');
    print(&text)
}

fn map_err(e: io::Error) -> anyhow::Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        BrokenPipe.into()
    } else {
        anyhow::Error::new(e).context("write to stdout")
    }
}
