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
pub mod output;
pub mod plan;
pub mod progress;
pub mod room;
pub mod settings;

/// The static daemon this build of workroom carries (built by build.rs).
pub static EMBEDDED_DAEMON: &[u8] = include_bytes!(env!("WORKROOM_EMBEDDED_DAEMON"));
