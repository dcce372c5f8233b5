//! The `[forward]` table of workroom's settings (`src/settings.rs`), as the
//! forwarder uses it: `ssh_agent` and `git_credentials`, both on by default.
//! Taken from the settings the command resolved once (`room/resolve.rs`),
//! never read from disk again here.

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

impl From<&crate::settings::Settings> for ForwardSettings {
    fn from(s: &crate::settings::Settings) -> Self {
        ForwardSettings { ssh_agent: s.ssh_agent, git_credentials: s.git_credentials }
    }
}
