//! The `[forward]` table of workroom's own settings: `ssh_agent` and
//! `git_credentials`, both on by default.
//!
//! Read from the user's `$XDG_CONFIG_HOME/workroom/config.toml` (or
//! `~/.config/workroom/config.toml`), then the workspace's `.workroom.toml`,
//! which wins. Deliberately tiny (only `key = true|false` in one table): a
//! settings module for all of workroom is being written elsewhere, and this
//! should fold into it then.

use std::path::{Path, PathBuf};

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

pub fn load(workspace: &Path) -> ForwardSettings {
    let mut settings = ForwardSettings::default();
    for file in [user_config(), Some(workspace.join(".workroom.toml"))].into_iter().flatten() {
        if let Ok(text) = std::fs::read_to_string(&file) {
            apply(&mut settings, &text);
        }
    }
    settings
}

fn user_config() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("workroom").join("config.toml"))
}

fn apply(settings: &mut ForwardSettings, text: &str) {
    let mut in_forward = false;
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.starts_with('[') {
            in_forward = line == "[forward]";
            continue;
        }
        let Some((key, value)) = line.split_once('=') else { continue };
        let value = match value.trim() {
            "true" => true,
            "false" => false,
            _ => continue,
        };
        match (in_forward, key.trim()) {
            (true, "ssh_agent") => settings.ssh_agent = value,
            (true, "git_credentials") => settings.git_credentials = value,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_table_turns_credentials_off_and_other_tables_do_not() {
        let mut s = ForwardSettings::default();
        apply(&mut s, "[other]\nssh_agent = false\n\n[forward]\nssh_agent = false # no agent\n");
        assert_eq!(s, ForwardSettings { ssh_agent: false, git_credentials: true });
        apply(&mut s, "[forward]\ngit_credentials=false\nssh_agent = true\n");
        assert_eq!(s, ForwardSettings { ssh_agent: true, git_credentials: false });
    }
}
