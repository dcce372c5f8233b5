//! A pane's terminal model: what its program's output built (screen,
//! alternate screen, cursor, modes, title) and the history above the
//! screen, kept compactly, with the two ways out:
//! - [`Terminal::paint`]: bytes that bring a client's terminal to this
//!   state, the history first so the client's own scrollback holds it;
//! - [`Terminal::capture`]: the history and screen as text.
//!
//! The parser is `vte` (alacritty's); the model is ours because the screen
//! model before it (the `vt100` crate) kept 36 bytes a cell, history
//! included, and could not hand rows to a compact history (docs/adr/0010).
//!
//! # Layout
//! - `grid`: cells, rows, and a row written out as text with SGR.
//! - `history`: the byte ring of rows that scrolled off.
//! - `screen`: the state and the `vte::Perform` that drives it.

mod grid;
mod history;
mod screen;

pub use grid::strip_sgr;
pub use history::{Limits, DEFAULT_BYTES, DEFAULT_LINES, MAX_BYTES};
pub use screen::Modes;

use screen::{AltKind, Screen};
use std::io::Write;

pub struct Terminal {
    parser: vte::Parser,
    screen: Screen,
}

/// What a paint is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Paint {
    /// A client attaching: the history (when `history`), then the screen,
    /// as lines from the client's cursor. Without the history the client
    /// already shows this pane (a reattach after a hand-off): the screen is
    /// painted in place, so its scrollback does not get the screen twice.
    Attach { history: bool },
    /// A client that fell behind its bound and was skipped `skipped`
    /// bytes, while `lines` lines scrolled into the history: a marker line
    /// that says how many of them the history still holds, then the screen.
    Resync { skipped: u64, lines: u64 },
}

impl Terminal {
    pub fn new(rows: u16, cols: u16, limits: Limits) -> Terminal {
        Terminal { parser: vte::Parser::new(), screen: Screen::new(rows, cols, limits) }
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        self.parser.advance(&mut self.screen, bytes);
    }

    pub fn resize(&mut self, rows: u16, cols: u16) {
        self.screen.resize(rows, cols);
    }

    /// `(rows, cols)`.
    pub fn size(&self) -> (u16, u16) {
        (self.screen.rows, self.screen.cols)
    }

    pub fn history_lines(&self) -> usize {
        self.screen.history.lines()
    }

    /// Lines that ever scrolled into the history, kept or not.
    pub fn history_pushed(&self) -> u64 {
        self.screen.history.pushed()
    }

    pub fn history_bytes(&self) -> usize {
        self.screen.history.bytes()
    }

    pub fn modes(&self) -> Modes {
        self.screen.modes
    }

    pub fn title(&self) -> &str {
        &self.screen.title
    }

    pub fn alternate_screen(&self) -> bool {
        self.screen.alt.is_some()
    }

    /// `(row, col)` of the cursor.
    pub fn cursor(&self) -> (u16, u16) {
        (self.screen.cursor.row, self.screen.cursor.col)
    }

    /// Bytes that bring a terminal of this size to this state. The history
    /// and the normal screen are written as lines from wherever the
    /// client's cursor is, so everything the client showed before, then the
    /// history, scrolls into its own scrollback and the screen's rows land
    /// exactly on its screen; the alternate screen, modes, title, scroll
    /// region, saved cursor, cursor and pen follow. Fed into a fresh
    /// `Terminal` of the same size, it rebuilds this one (a hand-off uses
    /// that).
    pub fn paint(&self, how: Paint) -> Vec<u8> {
        let s = &self.screen;
        let mut out = Vec::with_capacity(4096);
        // Cursor hidden while painting, so it does not flicker across.
        out.extend_from_slice(b"\x1b[?25l\x1b[0m");
        match how {
            Paint::Resync { skipped, lines } => {
                // CAN ends any escape the skipped bytes cut in half; leave an
                // alternate screen without restoring a cursor, so the marker
                // and the rows go to the normal screen's scrollback.
                out.extend_from_slice(b"\x18\x1b[0m\x1b[r\x1b[?6l\x1b[?1047l\r\n");
                let _ = write!(out, "[workroom: {} skipped; ", human_bytes(skipped));
                // What the history dropped is said, not claimed kept: at the
                // default 10,000 lines a flood overruns it long before a
                // client's bound does.
                let kept = lines.min(s.history.lines() as u64);
                if kept == lines {
                    let _ = write!(out, "they are in the history]\r\n");
                } else {
                    let _ = write!(
                        out,
                        "the history holds the last {kept} lines of it, the {} lines before are gone]\r\n",
                        lines - kept
                    );
                }
            }
            Paint::Attach { history: true } => {
                s.history.for_each(None, |line, _| {
                    out.extend_from_slice(line);
                    out.extend_from_slice(b"\r\n");
                });
            }
            Paint::Attach { history: false } => {}
        }
        if how == (Paint::Attach { history: false }) {
            out.extend_from_slice(b"\x1b[r\x1b[?6l\x1b[?1047l\x1b[H\x1b[2J");
            for (r, row) in s.normal.iter().enumerate() {
                if row.used() > 0 {
                    cup(&mut out, r as u16, 0);
                    row.write(&mut out, true);
                }
            }
        } else {
            for (i, row) in s.normal.iter().enumerate() {
                row.write(&mut out, true);
                if i + 1 < s.normal.len() {
                    let full = row.wrapped && row.used() == usize::from(s.cols);
                    if !full {
                        out.extend_from_slice(b"\r\n");
                    }
                }
            }
        }
        if let Some(saved) = &s.saved[0] {
            write_saved(&mut out, saved);
        }
        if let Some((rows, kind)) = &s.alt {
            match kind {
                AltKind::SaveCursor => {
                    let saved = s.saved[0].unwrap_or_default();
                    cup(&mut out, saved.cursor.row, saved.cursor.col);
                    saved.pen.write_sgr(&mut out);
                    out.extend_from_slice(b"\x1b[?1049h\x1b[0m");
                }
                AltKind::Plain => out.extend_from_slice(b"\x1b[?47h\x1b[0m\x1b[2J"),
            }
            for (r, row) in rows.iter().enumerate() {
                if row.used() > 0 {
                    cup(&mut out, r as u16, 0);
                    row.write(&mut out, true);
                }
            }
            if let Some(saved) = &s.saved[1] {
                write_saved(&mut out, saved);
            }
        }
        let m = &s.modes;
        let flag = |on: bool| if on { 'h' } else { 'l' };
        let _ = write!(
            out,
            "\x1b[?1{}\x1b{}\x1b[?7{}\x1b[4{}\x1b[?5{}\x1b[?1004{}\x1b[?2004{}",
            flag(m.app_cursor),
            if m.app_keypad { '=' } else { '>' },
            flag(m.autowrap),
            flag(m.insert),
            flag(m.reverse_video),
            flag(m.focus_events),
            flag(m.bracketed_paste)
        );
        if m.newline {
            out.extend_from_slice(b"\x1b[20h");
        }
        out.extend_from_slice(b"\x1b[?9l\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1005l\x1b[?1006l\x1b[?1015l");
        if m.mouse != 0 {
            let _ = write!(out, "\x1b[?{}h", m.mouse);
        }
        if m.mouse_encoding != 0 {
            let _ = write!(out, "\x1b[?{}h", m.mouse_encoding);
        }
        let _ = write!(out, "\x1b[{} q", m.cursor_style);
        if !s.title.is_empty() {
            let _ = write!(out, "\x1b]2;{}\x07", s.title);
        }
        let _ = write!(
            out,
            "\x1b({}\x1b){}{}",
            if s.line_drawing[0] { '0' } else { 'B' },
            if s.line_drawing[1] { '0' } else { 'B' },
            if s.shifted { '\x0e' } else { '\x0f' }
        );
        if s.top != 0 || s.bottom != s.rows - 1 {
            let _ = write!(out, "\x1b[{};{}r", s.top + 1, s.bottom + 1);
        }
        if m.origin {
            out.extend_from_slice(b"\x1b[?6h");
            cup(&mut out, s.cursor.row.saturating_sub(s.top), s.cursor.col);
        } else {
            cup(&mut out, s.cursor.row, s.cursor.col);
        }
        s.pen.write_sgr(&mut out);
        if m.cursor_visible {
            out.extend_from_slice(b"\x1b[?25h");
        }
        out
    }

    /// The history (with `history`) and the screen on show as lines, each
    /// ending in `\n`; trailing blank rows of the screen are left out. The
    /// last `lines` lines when given. With `escapes`, colours and
    /// attributes as SGR.
    pub fn capture(&self, lines: Option<usize>, escapes: bool, history: bool) -> Vec<u8> {
        let s = &self.screen;
        let grid = s.grid();
        let used = grid.iter().rposition(|r| r.used() > 0).map_or(0, |i| i + 1);
        let from_history = if history { lines.map_or(usize::MAX, |n| n.saturating_sub(used)) } else { 0 };
        let mut out = Vec::new();
        if from_history > 0 {
            s.history.for_each(lines.map(|_| from_history), |line, _| {
                if escapes {
                    out.extend_from_slice(line);
                } else {
                    strip_sgr(line, &mut out);
                }
                out.push(b'\n');
            });
        }
        let skip = lines.map_or(0, |n| used.saturating_sub(n));
        for row in &grid[skip..used] {
            row.write(&mut out, escapes);
            out.push(b'\n');
        }
        out
    }

    /// The screen on show as lines with SGR, `\r\n` between them, trailing
    /// blank rows left out: what is kept of a pane across a room restart.
    pub fn screen_lines(&self) -> Vec<u8> {
        let grid = self.screen.grid();
        let used = grid.iter().rposition(|r| r.used() > 0).map_or(0, |i| i + 1);
        let mut out = Vec::new();
        for (i, row) in grid[..used].iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(b"\r\n");
            }
            row.write(&mut out, true);
        }
        out
    }

    /// The screen on show as plain text, one line per row (tests).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.capture(None, false, false)).into_owned()
    }
}

fn cup(out: &mut Vec<u8>, row: u16, col: u16) {
    let _ = write!(out, "\x1b[{};{}H", row + 1, col + 1);
}

/// Sets a terminal's DECSC slot to `saved` (the cursor is moved after).
fn write_saved(out: &mut Vec<u8>, saved: &screen::Saved) {
    cup(out, saved.cursor.row, saved.cursor.col);
    saved.pen.write_sgr(out);
    out.extend_from_slice(b"\x1b7\x1b[0m");
}

/// `1.2 MiB`, `640 KiB`, `12 bytes`.
pub fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / f64::from(1 << 20)),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / f64::from(1 << 10)),
        n => format!("{n} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(rows: u16, cols: u16) -> Terminal {
        Terminal::new(rows, cols, Limits::default())
    }

    fn fed(rows: u16, cols: u16, bytes: &[u8]) -> Terminal {
        let mut t = term(rows, cols);
        t.feed(bytes);
        t
    }

    /// Everything a paint must carry, to compare two terminals by.
    fn state(t: &Terminal) -> (String, String, (u16, u16), Modes, String, bool) {
        (
            String::from_utf8_lossy(&t.capture(None, true, true)).into_owned(),
            String::from_utf8_lossy(&t.screen_lines()).into_owned(),
            t.cursor(),
            t.modes(),
            t.title().to_string(),
            t.alternate_screen(),
        )
    }

    fn seq(from: u32, to: u32) -> Vec<u8> {
        (from..=to).flat_map(|i| format!("{i}\r\n").into_bytes()).collect()
    }

    #[test]
    fn lines_scrolled_off_the_screen_enter_the_history_in_order() {
        let t = fed(24, 80, &seq(1, 100));
        assert_eq!(t.history_lines(), 100 - 23);
        let text = String::from_utf8(t.capture(None, false, true)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 100);
        assert_eq!(lines[0], "1");
        assert_eq!(lines[99], "100");
        assert_eq!(String::from_utf8(t.capture(Some(3), false, true)).unwrap(), "98\n99\n100\n");
    }

    #[test]
    fn a_paint_fed_into_a_fresh_terminal_rebuilds_history_screen_and_modes() {
        let mut program = seq(1, 60);
        program.extend_from_slice(
            b"\x1b]2;my title\x07\x1b[1;31mred\x1b[0m plain \x1b[38;5;200mpink\x1b[48;2;1;2;3m bg\x1b[0m\r\n\
              \x1b[?2004h\x1b[?1h\x1b=\x1b[?1002h\x1b[?1006h\x1b[5;10Hmiddle\x1b[4 q\x1b[3;7m",
        );
        let t = fed(20, 50, &program);
        let rebuilt = fed(20, 50, &t.paint(Paint::Attach { history: true }));
        assert_eq!(state(&rebuilt), state(&t));
        assert!(t.modes().bracketed_paste && t.modes().app_cursor && t.modes().mouse == 1002);
    }

    #[test]
    fn a_paint_in_the_alternate_screen_restores_the_normal_screen_when_the_program_quits() {
        let mut program = seq(1, 30);
        program.extend_from_slice(b"$ vim\r\n\x1b[?1049h\x1b[H\x1b[2J~\r\n~\r\n\x1b[7mfile.txt\x1b[0m\x1b[1;1H");
        let t = fed(10, 40, &program);
        assert!(t.alternate_screen());
        let mut client = fed(10, 40, &t.paint(Paint::Attach { history: true }));
        assert_eq!(state(&client), state(&t));
        // The program quits on both: the same normal screen comes back.
        let mut original = t;
        original.feed(b"\x1b[?1049l");
        client.feed(b"\x1b[?1049l");
        assert!(!client.alternate_screen());
        assert_eq!(state(&client), state(&original));
        assert!(client.text().contains("$ vim"), "{}", client.text());
    }

    #[test]
    fn a_resync_says_how_much_was_skipped_and_paints_the_screen() {
        let t = fed(5, 20, b"one\r\ntwo");
        let paint = t.paint(Paint::Resync { skipped: 1_300_000, lines: 0 });
        let text = String::from_utf8_lossy(&paint);
        assert!(text.contains("[workroom: 1.2 MiB skipped; they are in the history]"), "{text}");
        let mut client = fed(5, 20, b"\x1b[?1049h\x1b[31mhalf an esc\x1b[1");
        client.feed(&paint);
        assert!(!client.alternate_screen());
        assert!(client.text().ends_with("one\ntwo\n"), "{}", client.text());
        assert_eq!(client.cursor(), t.cursor());
    }

    #[test]
    fn a_resync_past_what_the_history_holds_says_how_many_lines_are_gone() {
        let mut t = Terminal::new(5, 20, Limits::new(100, 0));
        t.feed(&seq(1, 1000));
        let lines = t.history_pushed();
        assert_eq!(lines, 1000 - 4, "the lines that scrolled off, kept or not");
        let text = String::from_utf8_lossy(&t.paint(Paint::Resync { skipped: 3_000, lines: 500 })).into_owned();
        assert!(
            text.contains("[workroom: 2.9 KiB skipped; the history holds the last 100 lines of it, the 400 lines before are gone]"),
            "{text}"
        );
        let text = String::from_utf8_lossy(&t.paint(Paint::Resync { skipped: 300, lines: 100 })).into_owned();
        assert!(text.contains("[workroom: 300 bytes skipped; they are in the history]"), "{text}");
    }

    #[test]
    fn a_repaint_without_history_draws_the_screen_in_place_and_scrolls_nothing() {
        let t = fed(6, 20, &seq(1, 20));
        let mut client = fed(6, 20, &t.paint(Paint::Attach { history: true }));
        let before = client.history_lines();
        client.feed(b"\x1b[31mstale\x1b[3;3Hjunk");
        client.feed(&t.paint(Paint::Attach { history: false }));
        assert_eq!(client.history_lines(), before, "nothing scrolled into the history");
        assert_eq!(state(&client), state(&t));
    }

    #[test]
    fn wide_and_combining_characters_take_their_columns() {
        let t = fed(3, 10, "日本e\u{301}x".as_bytes());
        assert_eq!(t.cursor(), (0, 6));
        assert_eq!(t.text(), "日本e\u{301}x\n");
        let rebuilt = fed(3, 10, &t.paint(Paint::Attach { history: true }));
        assert_eq!(state(&rebuilt), state(&t));
    }

    #[test]
    fn long_lines_wrap_and_a_paint_keeps_them_joined() {
        let t = fed(4, 10, b"0123456789abcdefghij-tail\r\nnext");
        assert_eq!(t.text(), "0123456789\nabcdefghij\n-tail\nnext\n");
        let rebuilt = fed(4, 10, &t.paint(Paint::Attach { history: true }));
        assert_eq!(state(&rebuilt), state(&t));
    }

    #[test]
    fn a_scroll_region_keeps_its_rows_out_of_the_history() {
        // A status line below a scrolling region (as less and vim draw).
        let t = fed(5, 20, b"\x1b[1;4r\x1b[4;1H1\n2\n3\n4\n5\x1b[r\x1b[5;1Hstatus");
        assert_eq!(t.history_lines(), 0);
        assert!(t.text().ends_with("status\n"), "{}", t.text());
    }

    #[test]
    fn shrinking_the_screen_keeps_the_cursor_line_and_moves_the_top_into_the_history() {
        let mut t = fed(10, 20, &seq(1, 9));
        t.feed(b"$ ");
        t.resize(4, 20);
        assert_eq!(t.cursor(), (3, 2));
        assert_eq!(t.text(), "7\n8\n9\n$\n");
        assert_eq!(t.history_lines(), 6);
    }

    #[test]
    fn clear_with_scrollback_erase_empties_the_history() {
        let mut t = fed(5, 20, &seq(1, 50));
        t.feed(b"\x1b[H\x1b[2J\x1b[3J");
        assert_eq!(t.history_lines(), 0);
    }

    #[test]
    fn hostile_counts_and_titles_stay_bounded() {
        let mut t = fed(5, 20, b"x\x1b[65535b\x1b[65535@\x1b[65535L");
        t.feed(format!("\x1b]2;{}\x07", "t".repeat(100_000)).as_bytes());
        assert!(t.title().len() <= 256);
        assert!(t.screen.normal.iter().all(|r| r.cells().len() <= 20));
    }

    #[test]
    fn sixteen_full_histories_of_wide_lines_fit_the_budget_of_the_default_cap() {
        let mut t = Terminal::new(50, 200, Limits::default());
        let line = "7".repeat(199);
        for _ in 0..5_000 {
            t.feed(line.as_bytes());
            t.feed(b"\r\n");
        }
        assert!(t.history_bytes() <= DEFAULT_BYTES);
        const { assert!(16 * DEFAULT_BYTES <= 8 << 20) };
    }
}
