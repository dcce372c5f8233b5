//! Our side of a terminal, shared by the host's `workroom shell` and `exec
//! -t` and the daemon's `workroomd attach`: its window size, raw mode for
//! as long as a guard lives, the detach keys in docker's notation, and
//! the keys an attach sent, kept for a reattach to send again what a
//! dropped link did not deliver ([`SentKeys`]).
//!
//! Through rustix's direct syscalls: no `unsafe` here, and nothing that a
//! static binary without NSS could trip on.

use rustix::termios::{self, OptionalActions, Termios};
use std::os::fd::AsFd;

/// Docker's own default, so hands that know `docker attach` know this.
pub const DEFAULT_DETACH_KEYS: &str = "ctrl-p,ctrl-q";

/// `(rows, cols)` of the terminal on `fd`, if it is one and has a size.
pub fn terminal_size(fd: impl AsFd) -> Option<(u16, u16)> {
    let ws = termios::tcgetwinsize(fd).ok()?;
    (ws.ws_row > 0 && ws.ws_col > 0).then_some((ws.ws_row, ws.ws_col))
}

/// The terminal on stdin opened anew (`/dev/tty`), non-blocking, when stdin
/// is this process's controlling terminal. A new open has its own file
/// status flags: making it non-blocking leaves the shell's own descriptor
/// (shared with our stdin) as it was, so keys can be read by the async
/// runtime itself, with no thread handing them over.
pub fn reopen_terminal() -> Option<std::os::fd::OwnedFd> {
    use rustix::fs::{open, Mode, OFlags};
    // `/dev/tty` is the controlling terminal, and `tcgetsid` answers only
    // for the controlling terminal: if it does for stdin, the two are one.
    // (Comparing `fstat`'s devices cannot tell: an fstat of an open
    // `/dev/tty` names `/dev/tty` itself, 5:0, never the pts behind it, so
    // that test refused every terminal and keys always went through a
    // thread.)
    termios::tcgetsid(rustix::stdio::stdin()).ok()?;
    let flags = OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC | OFlags::NONBLOCK;
    open("/dev/tty", flags, Mode::empty()).ok()
}

/// Writes all of `bytes` to stdout with plain `write(2)`s, no buffer and no
/// thread between: a keystroke's echo reaches the terminal one syscall after
/// it arrives. A terminal that does not read blocks the caller, which is
/// the backpressure a slow terminal should apply.
pub fn write_stdout(mut bytes: &[u8]) -> std::io::Result<()> {
    let stdout = rustix::stdio::stdout();
    while !bytes.is_empty() {
        match rustix::io::write(stdout, bytes) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => {
                // Someone made our terminal non-blocking: wait until it takes more.
                let mut fds = [rustix::event::PollFd::new(&stdout, rustix::event::PollFlags::OUT)];
                let _ = rustix::event::poll(&mut fds, None);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The terminal on stdin in raw mode; restored when dropped (every way
/// out, a panic's unwinding included).
pub struct RawMode {
    saved: Termios,
}

impl RawMode {
    /// `None` when stdin is not a terminal (nothing to restore then).
    pub fn enter() -> Option<RawMode> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(stdin.as_fd()).ok()?;
        let mut raw = saved.clone();
        raw.make_raw();
        termios::tcsetattr(stdin.as_fd(), OptionalActions::Now, &raw).ok()?;
        Some(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin().as_fd(), OptionalActions::Now, &self.saved);
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeysError {
    #[error("detach key {0:?}: use ctrl-<letter>, ctrl-@, ctrl-[ ... ctrl-_ or one character")]
    Key(String),
    #[error("no detach keys given")]
    Empty,
}

/// Docker's notation: `ctrl-p,ctrl-q`, `ctrl-@`, or single characters.
pub fn parse_keys(spec: &str) -> Result<Vec<u8>, KeysError> {
    let mut keys = Vec::new();
    for key in spec.split(',') {
        let key = key.trim();
        let byte = if let Some(c) = key.strip_prefix("ctrl-") {
            match c.as_bytes() {
                [b] if b.is_ascii_alphabetic() => b.to_ascii_lowercase() - b'a' + 1,
                [b @ (b'@' | b'[' | b'\\' | b']' | b'^' | b'_')] => b & 0x1f,
                _ => return Err(KeysError::Key(key.to_string())),
            }
        } else if key.len() == 1 {
            key.as_bytes()[0]
        } else if key.is_empty() {
            continue;
        } else {
            return Err(KeysError::Key(key.to_string()));
        };
        keys.push(byte);
    }
    if keys.is_empty() {
        return Err(KeysError::Empty);
    }
    Ok(keys)
}

/// Finds the detach sequence in typed input.
pub struct DetachMatcher {
    keys: Vec<u8>,
    matched: usize,
}

impl DetachMatcher {
    pub fn new(keys: Vec<u8>) -> Self {
        DetachMatcher { keys, matched: 0 }
    }

    /// The bytes to send on, and whether the sequence was completed (what
    /// came after it in the same read is dropped with the detach). A
    /// partial match is held back and sent on once it stops matching.
    pub fn feed(&mut self, input: &[u8]) -> (Vec<u8>, bool) {
        let mut out = Vec::with_capacity(input.len());
        for &b in input {
            if b == self.keys[self.matched] {
                self.matched += 1;
                if self.matched == self.keys.len() {
                    self.matched = 0;
                    return (out, true);
                }
            } else {
                out.extend_from_slice(&self.keys[..self.matched]);
                self.matched = 0;
                if b == self.keys[0] {
                    self.matched = 1;
                    if self.keys.len() == 1 {
                        self.matched = 0;
                        return (out, true);
                    }
                } else {
                    out.push(b);
                }
            }
        }
        (out, false)
    }
}

/// Bytes of typed input an attach client reads at once (a paste comes in
/// pieces of this): `workroom shell` and `workroomd attach` alike.
pub const KEYS_CHUNK: usize = 16 * 1024;

/// The most typed bytes that can be sent and not reach the pane before a
/// link drops: what the attach stream lets be in flight (its window, at
/// most [`crate::proto::MAX_WINDOW`], 8 MiB) and the pane's input queue
/// (the daemon's `INPUT_QUEUE`, 64 frames of at most
/// [`crate::proto::MAX_DATA_CHUNK`]: a reattach sends again in frames that
/// large). [`SentKeys`] keeps that much, so a reattach can send any of it
/// again; typing costs nothing near this, a paste of megabytes at most
/// this.
pub const KEYS_KEPT: usize = crate::proto::MAX_WINDOW + 64 * crate::proto::MAX_DATA_CHUNK;

/// What an attach client typed into a pane, over all its links, as a
/// typist ([`crate::proto::Typist`]): a link that drops (a hand-off closes
/// every link) can have taken keys the pane never got, and the daemon's
/// answer to the reattach says how many it took (`Response::Attached`);
/// [`SentKeys::beyond`] is what to send again.
#[derive(Debug)]
pub struct SentKeys {
    id: u64,
    /// The last bytes sent, up to [`KEYS_KEPT`].
    kept: std::collections::VecDeque<u8>,
    /// How many bytes were sent before the first one kept.
    base: u64,
}

impl Default for SentKeys {
    fn default() -> Self {
        SentKeys::new()
    }
}

impl SentKeys {
    pub fn new() -> SentKeys {
        use std::hash::{BuildHasher, Hasher};
        // A process's RandomState is seeded from the OS's randomness: a
        // typist no other client of the pane picks.
        let id = std::collections::hash_map::RandomState::new().build_hasher().finish();
        SentKeys { id, kept: std::collections::VecDeque::new(), base: 0 }
    }

    /// How this client names itself on an attach: its number and what it
    /// sent so far.
    pub fn typist(&self) -> crate::proto::Typist {
        crate::proto::Typist { id: self.id, sent: self.base + self.kept.len() as u64 }
    }

    /// Keeps `bytes`, about to be sent (kept first: a send into a link
    /// that is closing can succeed, or fail, and either way the next
    /// attach learns whether the pane took them).
    pub fn keep(&mut self, bytes: &[u8]) {
        self.kept.extend(bytes);
        let over = self.kept.len().saturating_sub(KEYS_KEPT);
        self.kept.drain(..over);
        self.base += over as u64;
    }

    /// What was sent after the first `taken` bytes: what the pane did not
    /// get. Bytes no longer kept (never, by [`KEYS_KEPT`]) cannot be sent
    /// again; the rest is.
    pub fn beyond(&self, taken: u64) -> Vec<u8> {
        let skip = taken.saturating_sub(self.base).min(self.kept.len() as u64) as usize;
        self.kept.iter().skip(skip).copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_pane_did_not_take_is_sent_again_and_what_it_took_is_not() {
        let mut sent = SentKeys::new();
        sent.keep(b"echo a\r");
        sent.keep(b"echo b\r");
        assert_eq!(sent.typist().sent, 14);
        assert_eq!(sent.beyond(14), b"");
        assert_eq!(sent.beyond(7), b"echo b\r");
        assert_eq!(sent.beyond(0), b"echo a\recho b\r");
        assert_eq!(sent.beyond(99), b"", "a count beyond what was sent sends nothing");
    }

    #[test]
    fn only_the_last_bytes_sent_are_kept_and_counts_stay_aligned() {
        let mut sent = SentKeys::new();
        sent.keep(&vec![b'x'; KEYS_KEPT]);
        sent.keep(b"tail");
        assert_eq!(sent.kept.len(), KEYS_KEPT);
        let total = KEYS_KEPT as u64 + 4;
        assert_eq!(sent.typist().sent, total);
        assert_eq!(sent.beyond(total - 4), b"tail");
        assert_eq!(sent.beyond(0).len(), KEYS_KEPT, "what was let go cannot be sent again");
    }

    #[test]
    fn two_clients_name_themselves_as_different_typists() {
        assert_ne!(SentKeys::new().typist().id, SentKeys::new().typist().id);
    }

    #[test]
    fn detach_keys_read_in_dockers_notation() {
        assert_eq!(parse_keys("ctrl-p,ctrl-q").unwrap(), vec![0x10, 0x11]);
        assert_eq!(parse_keys("ctrl-@,x").unwrap(), vec![0, b'x']);
        assert_eq!(parse_keys("ctrl-pq"), Err(KeysError::Key("ctrl-pq".into())));
        assert_eq!(parse_keys(""), Err(KeysError::Empty));
    }

    #[test]
    fn the_detach_sequence_is_swallowed_and_ends_the_attach() {
        let mut m = DetachMatcher::new(vec![0x10, 0x11]);
        assert_eq!(m.feed(b"ls\r\x10"), (b"ls\r".to_vec(), false));
        assert_eq!(m.feed(b"\x11after"), (vec![], true));
    }

    #[test]
    fn a_partial_detach_sequence_is_sent_on_when_it_stops_matching() {
        let mut m = DetachMatcher::new(vec![0x10, 0x11]);
        assert_eq!(m.feed(b"\x10"), (vec![], false));
        assert_eq!(m.feed(b"a"), (b"\x10a".to_vec(), false));
        assert_eq!(m.feed(b"\x10\x10\x11"), (b"\x10".to_vec(), true));
    }

    /// Runs this test binary's `probe` test as a child on a new pty's
    /// slave, in a session of its own, the pty its controlling terminal
    /// when `controlling`; returns what the child printed.
    fn on_a_pty(controlling: bool) -> String {
        use std::os::unix::process::CommandExt;
        let pty = nix::pty::openpty(None, None).unwrap();
        let mut child = std::process::Command::new(std::env::current_exe().unwrap());
        child
            .args(["--exact", "tty::tests::probe_reopen_terminal", "--ignored", "--nocapture", "--test-threads=1"])
            .env("WORKROOMD_TTY_PROBE", "1")
            .stdin(std::process::Stdio::from(pty.slave))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        // SAFETY: setsid and ioctl only, both async-signal-safe, between
        // fork and exec.
        unsafe {
            child.pre_exec(move || {
                libc::setsid();
                if controlling && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = child.output().unwrap();
        drop(pty.master);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The child's side of the two tests below, run only by them.
    #[test]
    #[ignore = "the child of the pty tests below, not a test of its own"]
    fn probe_reopen_terminal() {
        if std::env::var_os("WORKROOMD_TTY_PROBE").is_some() {
            println!("reopened={}", reopen_terminal().is_some());
        }
    }

    #[test]
    fn stdin_that_is_the_controlling_terminal_is_reopened_for_the_runtime() {
        let said = on_a_pty(true);
        assert!(said.contains("reopened=true"), "{said}");
    }

    #[test]
    fn a_terminal_on_stdin_that_does_not_control_the_session_is_not_reopened() {
        let said = on_a_pty(false);
        assert!(said.contains("reopened=false"), "{said}");
    }

    #[test]
    fn a_pipe_has_no_window_size() {
        let (r, _w) = rustix::pipe::pipe().unwrap();
        assert_eq!(terminal_size(&r), None);
    }
}
