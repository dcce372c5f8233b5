//! The `[forward]` table of workroom's settings (`src/settings.rs`), as the
//! forwarder uses it: `ssh_agent` and `git_credentials`, both on by default.

use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardSettings {
    pub ssh_agent: bool,
    pub git_credentials: bool,
}

impl Default for ForwardSettings {
    fn default() -> Self {
        ForwardSettings { ssh_agent: true, git_credentials: true }
    }
}

/// The forwarding settings for a workspace. A settings file that cannot be
/// read was already refused by the `up` that made the room; here the
/// defaults stand in.
pub fn load(workspace: &Path) -> ForwardSettings {
    crate::settings::load(workspace, Default::default())
        .map(|s| ForwardSettings { ssh_agent: s.ssh_agent, git_credentials: s.git_credentials })
        .unwrap_or_default()
}
