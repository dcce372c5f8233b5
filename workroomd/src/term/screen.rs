//! The state a pane's output builds: two grids (normal and alternate), the
//! cursor, the pen, the scroll region, the modes a program sets, and the
//! history fed by rows scrolling off the normal screen. It implements
//! `vte::Perform`: the parser calls it for every character and control.
//!
//! What is modelled is what a repaint must restore (xterm's behaviour, as
//! tmux does). Queries (device attributes, cursor position reports) are
//! not answered here: an attached client's own terminal answers them.

use super::grid::{attr, Cell, Color, Pen, Row, WIDE_TAIL};
use super::history::{History, Limits};
use unicode_width::UnicodeWidthChar;

/// Which way a program entered the alternate screen; a repaint enters it
/// the same way so that leaving it behaves the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AltKind {
    /// `?47` / `?1047`: the cursor is not saved.
    Plain,
    /// `?1049`: the cursor is saved on entry and restored on exit.
    SaveCursor,
}

/// Modes programs set and a client's terminal must be given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Modes {
    /// DECCKM: cursor keys send `ESC O A` (vim, less).
    pub app_cursor: bool,
    /// DECKPAM: the keypad sends application sequences.
    pub app_keypad: bool,
    pub autowrap: bool,
    pub cursor_visible: bool,
    /// DECOM: cursor addressing relative to the scroll region.
    pub origin: bool,
    /// IRM: printing inserts.
    pub insert: bool,
    /// LNM: a line feed also returns the carriage.
    pub newline: bool,
    pub reverse_video: bool,
    pub bracketed_paste: bool,
    pub focus_events: bool,
    /// The mouse tracking mode in force: 0, 9, 1000, 1002 or 1003.
    pub mouse: u16,
    /// The mouse encoding: 0 (X10), 1005, 1006 or 1015.
    pub mouse_encoding: u16,
    /// DECSCUSR's cursor shape; 0 is the terminal's default.
    pub cursor_style: u16,
}

impl Default for Modes {
    fn default() -> Modes {
        Modes {
            app_cursor: false,
            app_keypad: false,
            autowrap: true,
            cursor_visible: true,
            origin: false,
            insert: false,
            newline: false,
            reverse_video: false,
            bracketed_paste: false,
            focus_events: false,
            mouse: 0,
            mouse_encoding: 0,
            cursor_style: 0,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    pub row: u16,
    pub col: u16,
    /// The last column was just written: the next character wraps first.
    pub pending_wrap: bool,
}

/// What DECSC saves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Saved {
    pub cursor: Cursor,
    pub pen: Pen,
    pub origin: bool,
    pub line_drawing: [bool; 2],
    pub shifted: bool,
}

/// Titles longer than this are cut: a program cannot grow the daemon's
/// memory through its title.
const MAX_TITLE: usize = 256;
/// The most cells one control may insert, delete, repeat or scroll: more
/// than any screen is wide or tall, and it keeps a hostile `ESC [ 65535 b`
/// from costing more than a screenful.
const MAX_COUNT: u16 = 1024;

pub struct Screen {
    pub rows: u16,
    pub cols: u16,
    pub normal: Vec<Row>,
    /// The alternate screen while a program (vim, less, htop) uses it.
    pub alt: Option<(Vec<Row>, AltKind)>,
    pub cursor: Cursor,
    pub pen: Pen,
    /// DECSC's slot per screen (normal, alternate); `?1049` uses the normal one.
    pub saved: [Option<Saved>; 2],
    /// The scroll region, inclusive rows.
    pub top: u16,
    pub bottom: u16,
    pub modes: Modes,
    pub title: String,
    /// G0 and G1 designated as DEC line drawing.
    pub line_drawing: [bool; 2],
    /// SO: G1 is in use.
    pub shifted: bool,
    /// Tab stops, one flag per column.
    tabs: Vec<bool>,
    last_char: Option<char>,
    pub history: History,
}

impl Screen {
    pub fn new(rows: u16, cols: u16, limits: Limits) -> Screen {
        let (rows, cols) = (rows.max(1), cols.max(1));
        Screen {
            rows,
            cols,
            normal: (0..rows).map(|_| Row::default()).collect(),
            alt: None,
            cursor: Cursor::default(),
            pen: Pen::default(),
            saved: [None, None],
            top: 0,
            bottom: rows - 1,
            modes: Modes::default(),
            title: String::new(),
            line_drawing: [false, false],
            shifted: false,
            tabs: default_tabs(cols),
            last_char: None,
            history: History::new(limits),
        }
    }

    /// The rows on show.
    pub fn grid(&self) -> &[Row] {
        match &self.alt {
            Some((rows, _)) => rows,
            None => &self.normal,
        }
    }

    fn grid_mut(&mut self) -> &mut Vec<Row> {
        match &mut self.alt {
            Some((rows, _)) => rows,
            None => &mut self.normal,
        }
    }

    fn row_mut(&mut self, row: u16) -> &mut Row {
        &mut self.grid_mut()[usize::from(row)]
    }

    pub fn resize(&mut self, rows: u16, cols: u16) {
        let (rows, cols) = (rows.max(1), cols.max(1));
        if (rows, cols) == (self.rows, self.cols) {
            return;
        }
        let cursor_row = self.cursor.row;
        let mut shift = 0;
        if rows < self.rows {
            // Blank rows below the cursor go first; then rows at the top,
            // into the history, so the cursor's line stays on screen.
            let below = self.rows - 1 - cursor_row;
            let cut_bottom = below.min(self.rows - rows);
            shift = self.rows - rows - cut_bottom;
            for grid in self.grids_mut() {
                grid.truncate(usize::from(grid.len() as u16 - cut_bottom));
            }
            if shift > 0 {
                let alt = self.alt.is_some();
                let gone: Vec<Row> = self.normal.drain(..usize::from(shift)).collect();
                if !alt {
                    for row in &gone {
                        self.push_history(row);
                    }
                }
                if let Some((grid, _)) = &mut self.alt {
                    grid.drain(..usize::from(shift));
                }
            }
        }
        let narrower = cols < self.cols;
        for grid in self.grids_mut() {
            grid.resize_with(usize::from(rows), Row::default);
            if narrower {
                for row in grid.iter_mut() {
                    row.truncate(cols);
                }
            }
        }
        self.rows = rows;
        self.cols = cols;
        self.cursor.row = cursor_row.saturating_sub(shift).min(rows - 1);
        self.cursor.col = self.cursor.col.min(cols - 1);
        self.cursor.pending_wrap = false;
        self.top = 0;
        self.bottom = rows - 1;
        self.tabs = default_tabs(cols);
        for saved in self.saved.iter_mut().flatten() {
            saved.cursor.row = saved.cursor.row.min(rows - 1);
            saved.cursor.col = saved.cursor.col.min(cols - 1);
        }
    }

    fn grids_mut(&mut self) -> impl Iterator<Item = &mut Vec<Row>> {
        std::iter::once(&mut self.normal).chain(self.alt.as_mut().map(|(g, _)| g))
    }

    fn push_history(&mut self, row: &Row) {
        let mut line = Vec::with_capacity(row.used() + 16);
        row.write(&mut line, true);
        self.history.push(&line, row.wrapped);
    }

    /// Scrolls the region up by `n`: its top rows leave (into the history
    /// when the region is the whole normal screen, as tmux keeps it).
    fn scroll_up(&mut self, n: u16) {
        let (top, bottom) = (usize::from(self.top), usize::from(self.bottom));
        let n = usize::from(n).min(bottom - top + 1);
        if self.alt.is_none() && top == 0 && bottom == usize::from(self.rows) - 1 {
            for i in 0..n {
                let row = std::mem::take(&mut self.normal[i]);
                self.push_history(&row);
                self.normal[i] = row;
            }
        }
        let (cols, pen) = (self.cols, self.pen.erased());
        let grid = self.grid_mut();
        grid[top..=bottom].rotate_left(n);
        for row in &mut grid[bottom + 1 - n..=bottom] {
            row.clear(cols, pen);
        }
    }

    fn scroll_down(&mut self, n: u16) {
        let (top, bottom) = (usize::from(self.top), usize::from(self.bottom));
        let n = usize::from(n).min(bottom - top + 1);
        let (cols, pen) = (self.cols, self.pen.erased());
        let grid = self.grid_mut();
        grid[top..=bottom].rotate_right(n);
        for row in &mut grid[top..top + n] {
            row.clear(cols, pen);
        }
    }

    fn linefeed(&mut self) {
        self.cursor.pending_wrap = false;
        if self.cursor.row == self.bottom {
            self.scroll_up(1);
        } else if self.cursor.row < self.rows - 1 {
            self.cursor.row += 1;
        }
    }

    fn reverse_index(&mut self) {
        self.cursor.pending_wrap = false;
        if self.cursor.row == self.top {
            self.scroll_down(1);
        } else if self.cursor.row > 0 {
            self.cursor.row -= 1;
        }
    }

    fn print_char(&mut self, c: char) {
        let c = if self.line_drawing[usize::from(self.shifted)] { line_drawing(c) } else { c };
        let width = c.width().unwrap_or(0) as u16;
        if width == 0 {
            // A combining mark joins the character before the cursor.
            let col = if self.cursor.pending_wrap { self.cursor.col } else { self.cursor.col.saturating_sub(1) };
            let row = self.cursor.row;
            let target = if self.row_mut(row).cell(col).ch == WIDE_TAIL { col.saturating_sub(1) } else { col };
            self.row_mut(row).add_mark(target, c);
            return;
        }
        if self.cursor.pending_wrap || (width == 2 && self.cursor.col + 1 >= self.cols && self.cols > 1) {
            if self.modes.autowrap {
                let row = self.cursor.row;
                self.row_mut(row).wrapped = true;
                self.cursor.col = 0;
                self.linefeed();
            } else if width == 2 {
                self.cursor.col = self.cols.saturating_sub(2);
            }
            self.cursor.pending_wrap = false;
        }
        let (row, col, cols, pen) = (self.cursor.row, self.cursor.col, self.cols, self.pen);
        if self.modes.insert {
            self.row_mut(row).insert(col, width, cols, Pen::default());
        }
        self.clear_wide_around(row, col);
        if width == 2 && col + 1 < cols {
            self.clear_wide_around(row, col + 1);
        }
        let line = self.row_mut(row);
        line.set(col, Cell { ch: c, pen });
        if width == 2 && col + 1 < cols {
            line.set(col + 1, Cell { ch: WIDE_TAIL, pen });
        }
        self.last_char = Some(c);
        if col + width >= cols {
            self.cursor.col = cols - 1;
            self.cursor.pending_wrap = self.modes.autowrap;
        } else {
            self.cursor.col = col + width;
        }
    }

    /// Overwriting half of a wide character blanks its other half.
    fn clear_wide_around(&mut self, row: u16, col: u16) {
        let line = self.row_mut(row);
        if line.cell(col).ch == WIDE_TAIL && col > 0 {
            let lead = line.cell(col - 1);
            line.set(col - 1, Cell::blank(lead.pen));
        } else if line.cell(col + 1).ch == WIDE_TAIL {
            let tail = line.cell(col + 1);
            line.set(col + 1, Cell::blank(tail.pen));
        }
    }

    fn move_to(&mut self, row: u16, col: u16) {
        let (min, max) = if self.modes.origin { (self.top, self.bottom) } else { (0, self.rows - 1) };
        let row = if self.modes.origin { row.saturating_add(self.top) } else { row };
        self.cursor = Cursor { row: row.clamp(min, max), col: col.min(self.cols - 1), pending_wrap: false };
    }

    fn erase_display(&mut self, how: u16) {
        let (row, col, rows, cols, pen) = (self.cursor.row, self.cursor.col, self.rows, self.cols, self.pen.erased());
        match how {
            0 => {
                self.row_mut(row).erase(col, cols, pen);
                for r in row + 1..rows {
                    self.row_mut(r).clear(cols, pen);
                }
            }
            1 => {
                for r in 0..row {
                    self.row_mut(r).clear(cols, pen);
                }
                self.row_mut(row).erase(0, col + 1, pen);
            }
            2 => {
                for r in 0..rows {
                    self.row_mut(r).clear(cols, pen);
                }
            }
            // `clear` sends it: the history goes too, as in xterm and tmux.
            3 => self.history.clear(),
            _ => {}
        }
        self.cursor.pending_wrap = false;
    }

    fn erase_line(&mut self, how: u16) {
        let (row, col, cols, pen) = (self.cursor.row, self.cursor.col, self.cols, self.pen.erased());
        match how {
            0 => self.row_mut(row).erase(col, cols, pen),
            1 => self.row_mut(row).erase(0, col + 1, pen),
            2 => self.row_mut(row).clear(cols, pen),
            _ => {}
        }
        self.cursor.pending_wrap = false;
    }

    /// Inserts (`insert`) or deletes lines at the cursor, within the
    /// region; deleted lines never enter the history.
    fn shift_lines(&mut self, n: u16, insert: bool) {
        if self.cursor.row < self.top || self.cursor.row > self.bottom {
            return;
        }
        let saved_top = self.top;
        self.top = self.cursor.row;
        if insert {
            self.scroll_down(n);
        } else {
            self.scroll_up_no_history(n);
        }
        self.top = saved_top;
        self.cursor.col = 0;
        self.cursor.pending_wrap = false;
    }

    fn scroll_up_no_history(&mut self, n: u16) {
        let (top, bottom) = (usize::from(self.top), usize::from(self.bottom));
        let n = usize::from(n).min(bottom - top + 1);
        let (cols, pen) = (self.cols, self.pen.erased());
        let grid = self.grid_mut();
        grid[top..=bottom].rotate_left(n);
        for row in &mut grid[bottom + 1 - n..=bottom] {
            row.clear(cols, pen);
        }
    }

    fn save_cursor(&mut self) {
        let slot = usize::from(self.alt.is_some());
        self.saved[slot] = Some(Saved {
            cursor: self.cursor,
            pen: self.pen,
            origin: self.modes.origin,
            line_drawing: self.line_drawing,
            shifted: self.shifted,
        });
    }

    fn restore_cursor(&mut self) {
        let slot = usize::from(self.alt.is_some());
        let saved = self.saved[slot].unwrap_or_default();
        self.cursor = saved.cursor;
        self.cursor.row = self.cursor.row.min(self.rows - 1);
        self.cursor.col = self.cursor.col.min(self.cols - 1);
        self.pen = saved.pen;
        self.modes.origin = saved.origin;
        self.line_drawing = saved.line_drawing;
        self.shifted = saved.shifted;
    }

    fn enter_alt(&mut self, kind: AltKind) {
        if self.alt.is_some() {
            return;
        }
        if kind == AltKind::SaveCursor {
            self.save_cursor();
        }
        let rows = (0..self.rows).map(|_| Row::blank(self.cols, self.pen)).collect();
        self.alt = Some((rows, kind));
    }

    fn leave_alt(&mut self) {
        // The alternate screen is freed on leaving (as tmux does): it holds
        // nothing a program expects to find again.
        if let Some((_, kind)) = self.alt.take() {
            if kind == AltKind::SaveCursor {
                self.restore_cursor();
            }
        }
    }

    fn set_private_mode(&mut self, mode: u16, on: bool) {
        match mode {
            1 => self.modes.app_cursor = on,
            5 => self.modes.reverse_video = on,
            6 => {
                self.modes.origin = on;
                self.move_to(0, 0);
            }
            7 => self.modes.autowrap = on,
            25 => self.modes.cursor_visible = on,
            9 | 1000 | 1002 | 1003 => {
                if on {
                    self.modes.mouse = mode;
                } else if self.modes.mouse == mode {
                    self.modes.mouse = 0;
                }
            }
            1004 => self.modes.focus_events = on,
            1005 | 1006 | 1015 => {
                if on {
                    self.modes.mouse_encoding = mode;
                } else if self.modes.mouse_encoding == mode {
                    self.modes.mouse_encoding = 0;
                }
            }
            47 | 1047 => {
                if on {
                    self.enter_alt(AltKind::Plain);
                } else {
                    self.leave_alt();
                }
            }
            1048 => {
                if on {
                    self.save_cursor();
                } else {
                    self.restore_cursor();
                }
            }
            1049 => {
                if on {
                    self.enter_alt(AltKind::SaveCursor);
                } else {
                    self.leave_alt();
                }
            }
            2004 => self.modes.bracketed_paste = on,
            _ => {}
        }
    }

    fn sgr(&mut self, params: &vte::Params) {
        let groups: Vec<&[u16]> = params.iter().collect();
        if groups.is_empty() {
            self.pen = Pen::default();
            return;
        }
        let mut i = 0;
        while i < groups.len() {
            let group = groups[i];
            let code = group[0];
            match code {
                0 => self.pen = Pen::default(),
                1 => self.pen.flags |= attr::BOLD,
                2 => self.pen.flags |= attr::DIM,
                3 => self.pen.flags |= attr::ITALIC,
                // `4:0` is "no underline"; any other style is underlined.
                4 if group.get(1) == Some(&0) => self.pen.flags &= !attr::UNDERLINE,
                4 | 21 => self.pen.flags |= attr::UNDERLINE,
                5 | 6 => self.pen.flags |= attr::BLINK,
                7 => self.pen.flags |= attr::INVERSE,
                8 => self.pen.flags |= attr::HIDDEN,
                9 => self.pen.flags |= attr::STRIKE,
                22 => self.pen.flags &= !(attr::BOLD | attr::DIM),
                23 => self.pen.flags &= !attr::ITALIC,
                24 => self.pen.flags &= !attr::UNDERLINE,
                25 => self.pen.flags &= !attr::BLINK,
                27 => self.pen.flags &= !attr::INVERSE,
                28 => self.pen.flags &= !attr::HIDDEN,
                29 => self.pen.flags &= !attr::STRIKE,
                30..=37 => self.pen.fg = Color::indexed((code - 30) as u8),
                39 => self.pen.fg = Color::DEFAULT,
                40..=47 => self.pen.bg = Color::indexed((code - 40) as u8),
                49 => self.pen.bg = Color::DEFAULT,
                90..=97 => self.pen.fg = Color::indexed((code - 90 + 8) as u8),
                100..=107 => self.pen.bg = Color::indexed((code - 100 + 8) as u8),
                38 | 48 => {
                    let (color, used) = extended_color(&groups[i..]);
                    if let Some(color) = color {
                        if code == 38 {
                            self.pen.fg = color;
                        } else {
                            self.pen.bg = color;
                        }
                    }
                    i += used;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }

    fn tab(&mut self, forward: bool, n: u16) {
        for _ in 0..n.max(1) {
            if forward {
                let next = (self.cursor.col + 1..self.cols).find(|c| self.tabs[usize::from(*c)]);
                self.cursor.col = next.unwrap_or(self.cols - 1);
            } else {
                let prev = (0..self.cursor.col).rev().find(|c| self.tabs[usize::from(*c)]);
                self.cursor.col = prev.unwrap_or(0);
            }
        }
        self.cursor.pending_wrap = false;
    }

    fn full_reset(&mut self) {
        let (rows, cols) = (self.rows, self.cols);
        let history = std::mem::replace(&mut self.history, History::new(Limits { lines: 0, bytes: 0 }));
        *self = Screen::new(rows, cols, Limits::default());
        self.history = history;
    }
}

/// `38;5;n`, `38;2;r;g;b` and their colon forms (`38:5:n`, `38:2::r:g:b`);
/// returns the colour and how many parameter groups it took.
fn extended_color(groups: &[&[u16]]) -> (Option<Color>, usize) {
    let first = groups[0];
    if first.len() > 1 {
        // Colon form: everything is in this group.
        return match first.get(1) {
            Some(5) => (first.get(2).map(|n| Color::indexed(*n as u8)), 1),
            Some(2) => {
                let rgb = if first.len() >= 6 { &first[3..6] } else { first.get(2..5).unwrap_or(&[]) };
                match rgb {
                    [r, g, b] => (Some(Color::rgb(*r as u8, *g as u8, *b as u8)), 1),
                    _ => (None, 1),
                }
            }
            _ => (None, 1),
        };
    }
    match groups.get(1).map(|g| g[0]) {
        Some(5) => (groups.get(2).map(|g| Color::indexed(g[0] as u8)), 3),
        Some(2) if groups.len() >= 5 => {
            (Some(Color::rgb(groups[2][0] as u8, groups[3][0] as u8, groups[4][0] as u8)), 5)
        }
        _ => (None, groups.len()),
    }
}

fn default_tabs(cols: u16) -> Vec<bool> {
    (0..cols).map(|c| c % 8 == 0 && c > 0).collect()
}

/// DEC special graphics (`ESC ( 0`): the box-drawing set of curses programs.
fn line_drawing(c: char) -> char {
    const MAP: &str = "◆▒␉␌␍␊°±␤␋┘┐┌└┼⎺⎻─⎼⎽├┤┴┬│≤≥π≠£·";
    match c {
        '`'..='~' => MAP.chars().nth(c as usize - '`' as usize).unwrap_or(c),
        _ => c,
    }
}

/// The first parameter of a group, or `default` when absent or zero.
fn arg(params: &vte::Params, index: usize, default: u16) -> u16 {
    match params.iter().nth(index).map(|g| g[0]) {
        None | Some(0) => default,
        Some(n) => n,
    }
}

impl vte::Perform for Screen {
    fn print(&mut self, c: char) {
        self.print_char(c);
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            0x08 => {
                self.cursor.col = self.cursor.col.saturating_sub(1);
                self.cursor.pending_wrap = false;
            }
            0x09 => self.tab(true, 1),
            0x0a..=0x0c => {
                if self.modes.newline {
                    self.cursor.col = 0;
                }
                self.linefeed();
            }
            0x0d => {
                self.cursor.col = 0;
                self.cursor.pending_wrap = false;
            }
            0x0e => self.shifted = true,
            0x0f => self.shifted = false,
            _ => {}
        }
    }

    fn osc_dispatch(&mut self, params: &[&[u8]], _bell_terminated: bool) {
        if let [b"0" | b"2", rest @ ..] = params {
            let title = rest.join(&b';');
            let mut title = String::from_utf8_lossy(&title).into_owned();
            title.retain(|c| !c.is_control());
            while title.len() > MAX_TITLE {
                title.pop();
            }
            self.title = title;
        }
    }

    fn csi_dispatch(&mut self, params: &vte::Params, intermediates: &[u8], ignore: bool, action: char) {
        if ignore {
            return;
        }
        let n = |default| arg(params, 0, default).min(MAX_COUNT);
        match (intermediates, action) {
            ([], '@') => {
                let (row, col, cols, pen) = (self.cursor.row, self.cursor.col, self.cols, self.pen.erased());
                self.row_mut(row).insert(col, n(1), cols, pen);
            }
            ([], 'A') => {
                let min = if self.cursor.row >= self.top { self.top } else { 0 };
                self.cursor.row = self.cursor.row.saturating_sub(n(1)).max(min);
                self.cursor.pending_wrap = false;
            }
            ([], 'B' | 'e') => {
                let max = if self.cursor.row <= self.bottom { self.bottom } else { self.rows - 1 };
                self.cursor.row = self.cursor.row.saturating_add(n(1)).min(max);
                self.cursor.pending_wrap = false;
            }
            ([], 'C' | 'a') => {
                self.cursor.col = self.cursor.col.saturating_add(n(1)).min(self.cols - 1);
                self.cursor.pending_wrap = false;
            }
            ([], 'D') => {
                self.cursor.col = self.cursor.col.saturating_sub(n(1));
                self.cursor.pending_wrap = false;
            }
            ([], 'E') => {
                let max = if self.cursor.row <= self.bottom { self.bottom } else { self.rows - 1 };
                self.cursor =
                    Cursor { row: self.cursor.row.saturating_add(n(1)).min(max), col: 0, pending_wrap: false };
            }
            ([], 'F') => {
                let min = if self.cursor.row >= self.top { self.top } else { 0 };
                self.cursor =
                    Cursor { row: self.cursor.row.saturating_sub(n(1)).max(min), col: 0, pending_wrap: false };
            }
            ([], 'G' | '`') => {
                self.cursor.col = (n(1) - 1).min(self.cols - 1);
                self.cursor.pending_wrap = false;
            }
            ([], 'H' | 'f') => self.move_to(arg(params, 0, 1) - 1, arg(params, 1, 1) - 1),
            ([], 'd') => {
                let col = self.cursor.col;
                self.move_to(n(1) - 1, col);
            }
            ([], 'I') => self.tab(true, n(1)),
            ([], 'Z') => self.tab(false, n(1)),
            ([], 'J') => self.erase_display(arg(params, 0, 0)),
            ([b'?'], 'J') => self.erase_display(arg(params, 0, 0)),
            ([], 'K') | ([b'?'], 'K') => self.erase_line(arg(params, 0, 0)),
            ([], 'L') => self.shift_lines(n(1), true),
            ([], 'M') => self.shift_lines(n(1), false),
            ([], 'P') => {
                let (row, col, cols, pen) = (self.cursor.row, self.cursor.col, self.cols, self.pen.erased());
                self.row_mut(row).delete(col, n(1), cols, pen);
            }
            ([], 'X') => {
                let (row, col, cols, pen) = (self.cursor.row, self.cursor.col, self.cols, self.pen.erased());
                self.row_mut(row).erase(col, col.saturating_add(n(1)).min(cols), pen);
            }
            ([], 'S') => self.scroll_up_no_history(n(1)),
            ([], 'T') if params.len() <= 1 => self.scroll_down(n(1)),
            ([], 'b') => {
                if let Some(c) = self.last_char {
                    for _ in 0..n(1) {
                        self.print_char(c);
                    }
                }
            }
            ([], 'g') => match arg(params, 0, 0) {
                0 => {
                    if let Some(t) = self.tabs.get_mut(usize::from(self.cursor.col)) {
                        *t = false;
                    }
                }
                3 => self.tabs.iter_mut().for_each(|t| *t = false),
                _ => {}
            },
            ([], 'h' | 'l') => {
                for group in params.iter() {
                    match group[0] {
                        4 => self.modes.insert = action == 'h',
                        20 => self.modes.newline = action == 'h',
                        _ => {}
                    }
                }
            }
            ([b'?'], 'h' | 'l') => {
                for group in params.iter() {
                    self.set_private_mode(group[0], action == 'h');
                }
            }
            ([], 'm') => self.sgr(params),
            ([], 'r') => {
                let top = arg(params, 0, 1) - 1;
                let bottom = arg(params, 1, self.rows).min(self.rows) - 1;
                if top < bottom {
                    self.top = top;
                    self.bottom = bottom;
                    self.move_to(0, 0);
                }
            }
            ([], 's') if params.is_empty() || arg(params, 0, 0) == 0 => self.save_cursor(),
            ([], 'u') => self.restore_cursor(),
            ([b' '], 'q') => self.modes.cursor_style = arg(params, 0, 0),
            ([b'!'], 'p') => {
                // DECSTR, a soft reset: modes and pen, not the screen.
                self.modes = Modes::default();
                self.pen = Pen::default();
                self.top = 0;
                self.bottom = self.rows - 1;
                self.line_drawing = [false, false];
                self.shifted = false;
            }
            _ => {}
        }
    }

    fn esc_dispatch(&mut self, intermediates: &[u8], ignore: bool, byte: u8) {
        if ignore {
            return;
        }
        match (intermediates, byte) {
            ([], b'7') => self.save_cursor(),
            ([], b'8') => self.restore_cursor(),
            ([], b'D') => self.linefeed(),
            ([], b'E') => {
                self.cursor.col = 0;
                self.linefeed();
            }
            ([], b'H') => {
                if let Some(t) = self.tabs.get_mut(usize::from(self.cursor.col)) {
                    *t = true;
                }
            }
            ([], b'M') => self.reverse_index(),
            ([], b'c') => self.full_reset(),
            ([], b'=') => self.modes.app_keypad = true,
            ([], b'>') => self.modes.app_keypad = false,
            ([b'('], b'0') => self.line_drawing[0] = true,
            ([b'('], _) => self.line_drawing[0] = false,
            ([b')'], b'0') => self.line_drawing[1] = true,
            ([b')'], _) => self.line_drawing[1] = false,
            ([b'#'], b'8') => {
                let cols = self.cols;
                for row in self.grid_mut() {
                    for c in 0..cols {
                        row.set(c, Cell { ch: 'E', pen: Pen::default() });
                    }
                }
            }
            _ => {}
        }
    }
}
