//! workroomd: the in-room daemon of workroom, and the wire protocol that the
//! host CLI and the daemon both speak.
//!
//! # Layout
//!
//! The library half is shared with the host so the two sides cannot drift:
//! - [`proto`]: the versioned hello, the frame codec (`kind | stream | length |
//!   payload`, length capped), the typed messages and the multiplexer
//!   ([`proto::Link`]) both sides run. Its module doc is the protocol's
//!   reference and shows both sides' use.
//! - [`agents`]: agent sessions as registry entries (`~/.claude/sessions`),
//!   read by the daemon's `agents` job and printed by the host.
//! - [`atomic`]: a file replaced whole (a unique temporary name, then a
//!   rename), for the daemon's state and the host's.
//! - [`clock`]: wall-clock times as both sides print them.
//! - [`files`]: a folder's files as `workroom sync` compares them, written
//!   by the daemon's `files` job.
//! - [`locks`]: one way to take a lock: poison is taken, not a panic.
//! - [`paths`]: paths resolved by their text, for folders not there to ask.
//! - [`pipe`]: a byte connection (a forwarded port, an ssh-agent socket)
//!   spliced onto a stream, on either side.
//! - [`staging`] (feature `splice`): the sending side of the link's spliced
//!   data frames: a forwarded socket's bytes staged in a pipe and moved into
//!   the link's output (the daemon's exec pipe, the host's engine socket),
//!   never copied into memory.
//! - [`room`]: where the daemon, its socket and its state live in a room,
//!   and the `serve` flags both sides name.
//! - [`users`]: `/etc/passwd` and `/etc/group` parsed in-process (a static glibc
//!   cannot use NSS, and "any image" may have no NSS at all).
//! - [`tty`] (feature `tty`): our side of a terminal (raw mode, window size,
//!   detach keys), for the host's `shell` and `exec -t` and the daemon's
//!   `attach`.
//! - [`term`] (feature `term`): a pane's terminal model: screen, compact
//!   history, the paint a client gets and the text `capture` prints.
//!
//! The binary half (`src/main.rs`, feature `daemon`) is the daemon itself.

pub mod agents;
pub mod atomic;
pub mod clock;
pub mod files;
pub mod locks;
pub mod paths;
pub mod pipe;
pub mod proto;
#[cfg(feature = "splice")]
pub mod staging;
#[cfg(feature = "term")]
pub mod term;
#[cfg(feature = "tty")]
pub mod tty;
pub mod users;

/// The version both sides name in the hello; a mismatch is refused naming both.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
pub mod room;
