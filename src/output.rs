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

/// Rows under a header, each column as wide as its widest cell (two spaces
/// apart), so long names do not push a row out of line; the last column is
/// not padded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (i, cell) in cells.enumerate() {
            if i + 1 < widths.len() {
                out.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            } else {
                out.push_str(cell);
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    };
    let mut out = line(&mut header.iter().copied());
    for row in rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

fn map_err(e: io::Error) -> anyhow::Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        BrokenPipe.into()
    } else {
        anyhow::Error::new(e).context("write to stdout")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_pads_each_column_to_its_widest_cell_and_leaves_the_last_unpadded() {
        let rows =
            vec![vec!["a".to_string(), "x".into(), "last".into()], vec!["abcdef".into(), "yy".into(), "".into()]];
        assert_eq!(table(&["N", "S", "W"], &rows), "N       S   W\na       x   last\nabcdef  yy\n");
    }
}
