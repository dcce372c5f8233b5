//! workroom: long-lived development rooms from a repository's devcontainer.json.
//!
//! # Layout
//!
//! The host CLI is a pipeline, `config → plan → engine edge → link`, with
//! the sequences that walk it in `room` and the commands on top in `cli`.
//! Layering is one-way: `cli → room → plan/engine/link → config`; nothing
//! below `cli` imports it. A reader finds each decision in one guess:
//! - [`config`]: find, parse and substitute devcontainer.json into the typed
//!   model (pure but for reading the file).
//! - [`settings`]: workroom's own settings (`config.toml`, `.workroom.toml`,
//!   `customizations.workroom`), with the command line's flags over them.
//! - [`features`]: Dev Container Features: what `features` names, fetched,
//!   cached, locked and ordered; the derived image's recipe.
//! - [`plan`]: pure decisions: the room's name, labels, create request,
//!   image metadata merge, compose override. Table tests, no I/O: the
//!   host files `runArgs` names come through a `Host` the caller passes.
//! - [`engine`]: the edge: every Docker Engine API call (bollard) and the
//!   compose program; nothing else holds the client.
//! - [`link`]: the host end of the daemon protocol, over `docker exec -i …
//!   workroomd relay`.
//! - [`forward`]: the background forwarder: ports, ssh-agent and git
//!   credentials carried on one link, and its state files.
//! - [`egress`]: an `allowlist` room's rules, the proxy's reading of
//!   requests, and the policy and log files the forwarder keeps.
//! - [`room`]: sequences over the above: resolve the room a command means,
//!   `up` (image, create, upload, start, hooks), compose rooms, hand-off.
//! - [`cli`]: clap commands; each validates its arguments and runs.
//! - [`folders`]: the host folders (cache, state, config, data) by one rule;
//!   [`notices`]: what room operations say (warnings, progress, the output
//!   of what they run), handed to the caller as data, not printed: `cli`
//!   draws it on stderr.
//! - [`output`]: stdout without a panic on a closed pipe; [`logs`]:
//!   `WORKROOM_LOG`'s diagnostic lines, apart from both; [`heap`]: how
//!   the C library keeps freed memory for the link's traffic.
//!
//! The daemon and the wire protocol both sides speak live in the
//! `workroomd` crate (its `lib.rs` has their layout).

pub mod cli;
pub mod config;
pub mod egress;
pub mod engine;
pub mod features;
pub mod folders;
pub mod forward;
pub mod heap;
pub mod link;
pub mod logs;
pub mod notices;
pub mod output;
pub mod plan;
pub mod retry;
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
