//! The real Claude Code for tests: its native Linux binary ships inside
//! PyPI's `claude-agent-sdk` wheel (`claude_agent_sdk/_bundled/claude`).
//! `fixtures/images/build.sh` (the README's test command, and `.ci/run`)
//! fetches the pinned wheel once and keeps the binary in the fixture cache.

use std::path::PathBuf;

/// The pinned claude-agent-sdk whose binary the tests run (build.sh's
/// `CLAUDE_SDK_VERSION`).
pub const SDK_VERSION: &str = "0.2.189";

/// `$WORKROOM_CLAUDE`, else the fixture cache's copy. A test that needs it
/// fails when it is missing: a skipped agent test would pass while testing
/// nothing.
pub fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("WORKROOM_CLAUDE").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let cache = std::env::var_os("WORKROOM_FIXTURE_CACHE").map(PathBuf::from).unwrap_or_else(|| {
        let base =
            std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()).map(PathBuf::from).unwrap_or_else(|| {
                std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from).join(".cache")
            });
        base.join("workroom-fixtures")
    });
    let binary = cache.join(format!("claude-agent-sdk-{SDK_VERSION}/claude"));
    assert!(
        binary.is_file(),
        "the real Claude Code is not at {} (`fixtures/images/build.sh` fetches it; WORKROOM_CLAUDE names another)",
        binary.display()
    );
    binary
}
