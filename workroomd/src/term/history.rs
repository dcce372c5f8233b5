//! A pane's history: the rows that scrolled off the top of its screen, kept
//! as text with SGR escapes in one byte ring.
//!
//! Each line is its bytes and a terminator: `\n` for a line that ended, `\r`
//! for one that wrapped onto the next. Neither byte occurs inside a line (a
//! row is written as printable characters and SGR escapes only), so the ring
//! needs no index: a line costs its text plus one byte, not 36 bytes a cell,
//! and a line of `seq` costs 6 bytes. The oldest lines go when either limit
//! is reached.

use std::collections::VecDeque;

/// The limits of one pane's history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub lines: usize,
    pub bytes: usize,
}

/// tmux keeps 2,000 lines; an agent's long build log wants more.
pub const DEFAULT_LINES: usize = 10_000;
/// The byte cap that keeps 16 full histories of full-width 200-column lines
/// within the daemon's 16 MiB budget next to their screens (DESIGN.md);
/// 10,000 lines of typical shell output (~50 bytes) fit.
pub const DEFAULT_BYTES: usize = 512 * 1024;
/// The most a setting may ask for per pane: a hostile or mistaken setting
/// must not let one pane take the room's memory.
pub const MAX_BYTES: usize = 64 * 1024 * 1024;

impl Default for Limits {
    fn default() -> Limits {
        Limits { lines: DEFAULT_LINES, bytes: DEFAULT_BYTES }
    }
}

impl Limits {
    /// `0` means the default; the byte cap is clamped to [`MAX_BYTES`].
    pub fn new(lines: usize, bytes: usize) -> Limits {
        let lines = if lines == 0 { DEFAULT_LINES } else { lines };
        let bytes = if bytes == 0 { DEFAULT_BYTES } else { bytes.min(MAX_BYTES) };
        Limits { lines, bytes }
    }
}

const END: u8 = b'\n';
const WRAP: u8 = b'\r';

#[derive(Debug)]
pub struct History {
    ring: VecDeque<u8>,
    lines: usize,
    limits: Limits,
    /// Lines ever offered, kept or not: a client skipped from one count to
    /// another can tell how many of the lines it missed are still here.
    pushed: u64,
}

impl History {
    pub fn new(limits: Limits) -> History {
        History { ring: VecDeque::new(), lines: 0, limits, pushed: 0 }
    }

    /// Lines offered so far (see `pushed`); never goes back.
    pub fn pushed(&self) -> u64 {
        self.pushed
    }

    pub fn lines(&self) -> usize {
        self.lines
    }

    pub fn bytes(&self) -> usize {
        self.ring.len()
    }

    pub fn clear(&mut self) {
        self.ring = VecDeque::new();
        self.lines = 0;
    }

    /// Appends one line (no terminator inside); drops the oldest lines to
    /// stay within the limits. A line longer than the byte cap is cut.
    pub fn push(&mut self, line: &[u8], wrapped: bool) {
        self.pushed += 1;
        if self.limits.lines == 0 || self.limits.bytes < 2 {
            return;
        }
        let line = &line[..line.len().min(self.limits.bytes - 1)];
        if self.ring.capacity() == 0 {
            // Reserved once: the ring never grows past it (no copy of a
            // full history on growth). Pages are touched only as written.
            self.ring.reserve_exact(self.limits.bytes);
        }
        while self.lines >= self.limits.lines || self.ring.len() + line.len() + 1 > self.limits.bytes {
            self.pop_front();
        }
        self.ring.extend(line);
        self.ring.push_back(if wrapped { WRAP } else { END });
        self.lines += 1;
    }

    fn pop_front(&mut self) {
        match self.ring.iter().position(|b| *b == END || *b == WRAP) {
            Some(at) => {
                self.ring.drain(..=at);
                self.lines -= 1;
            }
            None => self.clear(),
        }
    }

    /// Calls `f` with each of the last `n` lines (all with `None`), oldest
    /// first, and whether it wrapped.
    pub fn for_each(&self, n: Option<usize>, mut f: impl FnMut(&[u8], bool)) {
        let skip = n.map_or(0, |n| self.lines.saturating_sub(n));
        let (a, b) = self.ring.as_slices();
        let mut carry: Vec<u8> = Vec::new();
        let mut index = 0;
        for part in [a, b] {
            let mut start = 0;
            for (i, byte) in part.iter().enumerate() {
                if *byte != END && *byte != WRAP {
                    continue;
                }
                if index >= skip {
                    if carry.is_empty() {
                        f(&part[start..i], *byte == WRAP);
                    } else {
                        carry.extend_from_slice(&part[start..i]);
                        f(&carry, *byte == WRAP);
                    }
                }
                carry.clear();
                index += 1;
                start = i + 1;
            }
            carry.extend_from_slice(&part[start..]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(h: &History, n: Option<usize>) -> Vec<String> {
        let mut out = Vec::new();
        h.for_each(n, |line, _| out.push(String::from_utf8(line.to_vec()).unwrap()));
        out
    }

    #[test]
    fn the_oldest_lines_go_at_the_line_limit() {
        let mut h = History::new(Limits { lines: 3, bytes: 1024 });
        for i in 1..=5 {
            h.push(i.to_string().as_bytes(), false);
        }
        assert_eq!(all(&h, None), ["3", "4", "5"]);
        assert_eq!(all(&h, Some(2)), ["4", "5"]);
    }

    #[test]
    fn the_oldest_lines_go_at_the_byte_cap_and_the_ring_never_grows_past_it() {
        let mut h = History::new(Limits { lines: 1000, bytes: 64 });
        for i in 0..100 {
            h.push(format!("line {i:03}").as_bytes(), i % 2 == 0);
            assert!(h.bytes() <= 64);
        }
        let lines = all(&h, None);
        assert_eq!(lines.last().unwrap(), "line 099");
        assert_eq!(lines.len(), 64 / 9);
        assert!(h.ring.capacity() < 128, "{}", h.ring.capacity());
    }

    #[test]
    fn lines_that_straddle_the_rings_wrap_point_read_whole() {
        let mut h = History::new(Limits { lines: 1000, bytes: 50 });
        let mut expected = Vec::new();
        for i in 0..37 {
            let line = "x".repeat(i % 7) + &i.to_string();
            h.push(line.as_bytes(), false);
            expected.push(line);
        }
        let got = all(&h, None);
        assert_eq!(got[..], expected[expected.len() - got.len()..]);
    }

    #[test]
    fn ten_thousand_lines_of_seq_fit_the_default_limits() {
        let mut h = History::new(Limits::default());
        for i in 1..=10_000 {
            h.push(i.to_string().as_bytes(), false);
        }
        assert_eq!(h.lines(), 10_000);
        assert_eq!(all(&h, Some(1)), ["10000"]);
        assert_eq!(all(&h, None)[0], "1");
    }
}
