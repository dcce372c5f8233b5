//! Pure decisions: from a loaded configuration and what the engine reported
//! to what should be done. No I/O here, so each decision is a table test.

pub mod blame;
pub mod caps;
pub mod compose;
pub mod create;
pub mod dockerfile;
pub mod egress;
pub mod git;
pub mod host_requirements;
pub mod identity;
pub mod labels;
pub mod memory_kills;
pub mod metadata;
pub mod mounts;
pub mod nested;
pub mod peers;
pub mod platform;
pub mod run_args;
pub mod seccomp;
pub mod sync;
pub mod workspace;
pub mod worktree;

#[cfg(test)]
mod tests;
