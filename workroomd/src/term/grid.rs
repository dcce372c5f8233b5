//! Cells and rows of a screen, and how a row is written out as text with
//! SGR escapes (for the history, a client's paint and `capture`).
//!
//! A cell is 16 bytes (a `char` and a [`Pen`]), and a row holds cells only
//! up to its last written column: the rest is blank in the default pen. A
//! 200x50 screen of prompts and short lines costs a few KiB, and only a
//! screen of full-width lines costs its 160 KiB.

use std::io::Write;

/// A colour: the terminal's default, one of 256 indexed, or 24-bit.
/// Packed in one word: `0` default, `1 << 24 | index`, `2 << 24 | rgb`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Color(u32);

impl Color {
    pub const DEFAULT: Color = Color(0);

    pub fn indexed(index: u8) -> Color {
        Color(1 << 24 | u32::from(index))
    }

    pub fn rgb(r: u8, g: u8, b: u8) -> Color {
        Color(2 << 24 | u32::from(r) << 16 | u32::from(g) << 8 | u32::from(b))
    }

    /// SGR parameters selecting this colour; `base` is 30 (foreground) or
    /// 40 (background).
    fn sgr(self, base: u32, out: &mut Vec<u8>) {
        let v = self.0 & 0xff_ffff;
        let _ = match self.0 >> 24 {
            0 => write!(out, ";{}", base + 9),
            1 if v < 8 => write!(out, ";{}", base + v),
            1 if v < 16 => write!(out, ";{}", base + 60 + v - 8),
            1 => write!(out, ";{};5;{v}", base + 8),
            _ => write!(out, ";{};2;{};{};{}", base + 8, v >> 16, (v >> 8) & 0xff, v & 0xff),
        };
    }
}

/// Text attributes: bits of [`Pen::flags`].
pub mod attr {
    pub const BOLD: u16 = 1;
    pub const DIM: u16 = 1 << 1;
    pub const ITALIC: u16 = 1 << 2;
    pub const UNDERLINE: u16 = 1 << 3;
    pub const BLINK: u16 = 1 << 4;
    pub const INVERSE: u16 = 1 << 5;
    pub const HIDDEN: u16 = 1 << 6;
    pub const STRIKE: u16 = 1 << 7;
    /// The SGR numbers of the bits above, in order.
    pub const SGR: [u8; 8] = [1, 2, 3, 4, 5, 7, 8, 9];
}

/// How text is drawn: colours and attributes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pen {
    pub fg: Color,
    pub bg: Color,
    pub flags: u16,
}

impl Pen {
    /// The full SGR that sets this pen from any state (`ESC [ 0 ; ... m`).
    pub fn write_sgr(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"\x1b[0");
        for (bit, n) in attr::SGR.iter().enumerate() {
            if self.flags & (1 << bit) != 0 {
                let _ = write!(out, ";{n}");
            }
        }
        if self.fg != Color::DEFAULT {
            self.fg.sgr(30, out);
        }
        if self.bg != Color::DEFAULT {
            self.bg.sgr(40, out);
        }
        out.push(b'm');
    }

    /// What an erase leaves: blank in the current background (xterm's
    /// "background colour erase").
    pub fn erased(&self) -> Pen {
        Pen { bg: self.bg, ..Pen::default() }
    }
}

/// What occupies one column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cell {
    pub ch: char,
    pub pen: Pen,
}

/// The second column of a wide character holds this.
pub const WIDE_TAIL: char = '\0';

impl Cell {
    pub const BLANK: Cell = Cell { ch: ' ', pen: Pen { fg: Color::DEFAULT, bg: Color::DEFAULT, flags: 0 } };

    pub fn blank(pen: Pen) -> Cell {
        Cell { ch: ' ', pen }
    }

    fn is_blank(&self) -> bool {
        self.ch == ' ' && self.pen == Pen::default()
    }
}

/// One row of a screen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Row {
    /// Up to the last written column; further columns are [`Cell::BLANK`].
    cells: Vec<Cell>,
    /// The text went on past the row's end onto the next row (a soft wrap).
    pub wrapped: bool,
    /// Zero-width characters (combining marks, variation selectors) after
    /// the character of a column; rare, so kept aside.
    marks: Vec<(u16, String)>,
}

impl Row {
    pub fn cell(&self, col: u16) -> Cell {
        self.cells.get(usize::from(col)).copied().unwrap_or(Cell::BLANK)
    }

    /// The row's cells as written (possibly shorter than the screen).
    #[cfg(test)]
    pub fn cells(&self) -> &[Cell] {
        &self.cells
    }

    pub fn set(&mut self, col: u16, cell: Cell) {
        let col = usize::from(col);
        if col >= self.cells.len() {
            if cell.is_blank() {
                return;
            }
            self.cells.resize(col + 1, Cell::BLANK);
        }
        self.cells[col] = cell;
        self.drop_mark(col as u16);
    }

    /// Adds a zero-width character to the one at `col`.
    pub fn add_mark(&mut self, col: u16, c: char) {
        match self.marks.iter_mut().find(|(at, _)| *at == col) {
            Some((_, s)) if s.len() < MAX_MARKS => s.push(c),
            Some(_) => {}
            None => self.marks.push((col, c.to_string())),
        }
    }

    fn drop_mark(&mut self, col: u16) {
        if !self.marks.is_empty() {
            self.marks.retain(|(at, _)| *at != col);
        }
    }

    fn mark(&self, col: u16) -> Option<&str> {
        self.marks.iter().find(|(at, _)| *at == col).map(|(_, s)| s.as_str())
    }

    /// Blanks columns `from..to` (clamped to `width`) in `pen`.
    pub fn erase(&mut self, from: u16, to: u16, pen: Pen) {
        let blank = Cell::blank(pen);
        let (from, to) = (usize::from(from), usize::from(to));
        if blank.is_blank() && to >= self.cells.len() {
            self.cells.truncate(from);
            self.marks.retain(|(at, _)| usize::from(*at) < from);
        } else {
            if to > self.cells.len() {
                self.cells.resize(to, Cell::BLANK);
            }
            for cell in &mut self.cells[from.min(to)..to] {
                *cell = blank;
            }
            self.marks.retain(|(at, _)| !(from..to).contains(&usize::from(*at)));
        }
    }

    /// Makes the row blank (`width` columns in `pen`), keeping its
    /// allocation for reuse.
    pub fn clear(&mut self, width: u16, pen: Pen) {
        self.cells.clear();
        self.marks.clear();
        self.wrapped = false;
        if pen != Pen::default() {
            self.erase(0, width, pen);
        }
    }

    /// Blank row of `width` in `pen`.
    pub fn blank(width: u16, pen: Pen) -> Row {
        let mut row = Row::default();
        if pen.erased() != Pen::default() {
            row.erase(0, width, pen.erased());
        }
        row
    }

    /// Inserts `n` blank cells at `col`, pushing the rest right; cells
    /// pushed past `width` are lost.
    pub fn insert(&mut self, col: u16, n: u16, width: u16, pen: Pen) {
        let col = usize::from(col);
        if col >= self.cells.len() && pen == Pen::default() {
            return;
        }
        if col > self.cells.len() {
            self.cells.resize(col, Cell::BLANK);
        }
        for _ in 0..n {
            self.cells.insert(col, Cell::blank(pen));
        }
        self.cells.truncate(usize::from(width));
        self.marks.clear();
    }

    /// Deletes `n` cells at `col`, pulling the rest left; blanks come in at
    /// the right edge.
    pub fn delete(&mut self, col: u16, n: u16, width: u16, pen: Pen) {
        let col = usize::from(col);
        if col < self.cells.len() {
            let end = (col + usize::from(n)).min(self.cells.len());
            self.cells.drain(col..end);
        }
        if pen != Pen::default() {
            let len = self.cells.len() as u16;
            self.erase(len, width, pen);
        }
        self.marks.clear();
    }

    /// Cuts the row to `width` columns (a narrower screen).
    pub fn truncate(&mut self, width: u16) {
        self.cells.truncate(usize::from(width));
        self.marks.retain(|(at, _)| *at < width);
        if let Some(last) = self.cells.last_mut() {
            if unicode_width::UnicodeWidthChar::width(last.ch) == Some(2) {
                // A wide character cut in half shows as a blank.
                last.ch = ' ';
            }
        }
    }

    /// How many columns carry something: trailing blanks in the default
    /// pen are not written out.
    pub fn used(&self) -> usize {
        self.cells.iter().rposition(|c| !c.is_blank()).map_or(0, |i| i + 1)
    }

    /// Writes the row as text: with `escapes`, SGR where the pen changes
    /// (and a reset at the end when not default); without, the characters
    /// alone. Trailing default blanks are left out.
    pub fn write(&self, out: &mut Vec<u8>, escapes: bool) {
        let mut pen = Pen::default();
        let mut utf8 = [0u8; 4];
        for (col, cell) in self.cells[..self.used()].iter().enumerate() {
            if cell.ch == WIDE_TAIL {
                continue;
            }
            if escapes && cell.pen != pen {
                cell.pen.write_sgr(out);
                pen = cell.pen;
            }
            out.extend_from_slice(cell.ch.encode_utf8(&mut utf8).as_bytes());
            if let Some(marks) = self.mark(col as u16) {
                out.extend_from_slice(marks.as_bytes());
            }
        }
        if escapes && pen != Pen::default() {
            out.extend_from_slice(b"\x1b[0m");
        }
    }
}

/// Zero-width characters kept per cell, in bytes: enough for any real
/// combining sequence, and a program cannot grow a row without bound.
const MAX_MARKS: usize = 32;

/// Removes the SGR escapes this module writes (`ESC [ ... m`) from a line.
pub fn strip_sgr(line: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < line.len() {
        if line[i] == 0x1b && line.get(i + 1) == Some(&b'[') {
            let end =
                line[i + 2..].iter().position(|b| (0x40..=0x7e).contains(b)).map_or(line.len(), |p| i + 2 + p + 1);
            i = end;
        } else {
            out.push(line[i]);
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_is_sixteen_bytes() {
        assert_eq!(std::mem::size_of::<Cell>(), 16);
    }

    #[test]
    fn a_row_writes_its_text_with_sgr_only_where_the_pen_changes() {
        let mut row = Row::default();
        let red = Pen { fg: Color::indexed(1), ..Pen::default() };
        for (i, c) in "ab".chars().enumerate() {
            row.set(i as u16, Cell { ch: c, pen: Pen::default() });
        }
        row.set(2, Cell { ch: 'c', pen: red });
        row.set(3, Cell { ch: 'd', pen: red });
        let mut out = Vec::new();
        row.write(&mut out, true);
        assert_eq!(out, b"ab\x1b[0;31mcd\x1b[0m");
        let mut plain = Vec::new();
        row.write(&mut plain, false);
        assert_eq!(plain, b"abcd");
        let mut stripped = Vec::new();
        strip_sgr(&out, &mut stripped);
        assert_eq!(stripped, b"abcd");
    }

    #[test]
    fn colours_write_as_the_shortest_sgr_that_selects_them() {
        let mut out = Vec::new();
        Pen { fg: Color::indexed(9), bg: Color::indexed(200), flags: attr::BOLD | attr::INVERSE }.write_sgr(&mut out);
        assert_eq!(out, b"\x1b[0;1;7;91;48;5;200m");
        out.clear();
        Pen { fg: Color::rgb(1, 2, 3), ..Pen::default() }.write_sgr(&mut out);
        assert_eq!(out, b"\x1b[0;38;2;1;2;3m");
    }

    #[test]
    fn erasing_to_the_end_in_the_default_pen_frees_the_cells() {
        let mut row = Row::default();
        for i in 0..10 {
            row.set(i, Cell { ch: 'x', pen: Pen::default() });
        }
        row.erase(4, 80, Pen::default());
        assert_eq!(row.cells().len(), 4);
        row.add_mark(2, '\u{301}');
        let mut out = Vec::new();
        row.write(&mut out, false);
        assert_eq!(String::from_utf8(out).unwrap(), "xxx\u{301}x");
    }
}
