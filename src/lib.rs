//! workroom: long-lived development rooms from a repository's devcontainer.json.
//!
//! # Layout
//!
//! The host CLI is a pipeline; a reader finds each decision in one guess:
//! - `config`: find, parse and substitute devcontainer.json (pure, no Docker).
//! - `cli`: command-line parsing and the commands.

pub mod cli;
pub mod config;
pub mod engine;
pub mod features;
pub mod forward;
pub mod link;
pub mod logs;
pub mod output;
pub mod plan;
pub mod progress;
pub mod room;
pub mod settings;

/// The static daemons this build of workroom carries (built by build.rs);
/// empty when the build had no Rust target for it. `room::daemon` picks one
/// per room.
pub static EMBEDDED_DAEMON_X86_64: &[u8] = include_bytes!(env!("WORKROOM_EMBEDDED_DAEMON_X86_64"));
pub static EMBEDDED_DAEMON_AARCH64: &[u8] = include_bytes!(env!("WORKROOM_EMBEDDED_DAEMON_AARCH64"));

/// The daemon for this machine's own architecture: what rooms of the
/// engine's native images get when the engine runs here (the tests' rooms).
#[cfg(target_arch = "aarch64")]
pub static EMBEDDED_DAEMON: &[u8] = EMBEDDED_DAEMON_AARCH64;
#[cfg(not(target_arch = "aarch64"))]
pub static EMBEDDED_DAEMON: &[u8] = EMBEDDED_DAEMON_X86_64;
