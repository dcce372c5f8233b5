//! `workroom egress [allow|deny|reset|log]`: an `allowlist` room's policy,
//! changed while it runs, and what its proxy was asked.

use super::{EgressVerb, RoomArgs};
use crate::egress::store::{self, Entry, Outcome, Written};
use crate::engine::Engine;
use crate::output;
use crate::settings::EgressMode;
use std::io::{Read as _, Seek as _};
use std::time::Duration;

/// How often `egress log -f` looks for new lines: a person watching
/// needs no more, and a look is one `stat`.
const FOLLOW_POLL: Duration = Duration::from_millis(250);

/// The command line, checked by [`Asked::check`].
pub struct Asked {
    pub action: Option<EgressVerb>,
    pub patterns: Vec<String>,
    pub follow: bool,
    pub json: bool,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AskError {
    #[error("`egress {0}` takes one or more PATTERNs (`host[:port]`, `*.example.com`, `@preset`)")]
    NoPattern(&'static str),
    #[error("only `egress allow` and `egress deny` take PATTERNs")]
    StrayPattern,
    #[error("`--follow` goes with `egress log`")]
    StrayFollow,
}

impl Asked {
    fn check(&self) -> Result<(), AskError> {
        match self.action {
            Some(EgressVerb::Allow) if self.patterns.is_empty() => Err(AskError::NoPattern("allow")),
            Some(EgressVerb::Deny) if self.patterns.is_empty() => Err(AskError::NoPattern("deny")),
            Some(EgressVerb::Allow | EgressVerb::Deny) => Ok(()),
            _ if !self.patterns.is_empty() => Err(AskError::StrayPattern),
            Some(EgressVerb::Log) => Ok(()),
            _ if self.follow => Err(AskError::StrayFollow),
            _ => Ok(()),
        }
    }
}

pub async fn run(args: &RoomArgs, asked: Asked) -> anyhow::Result<i32> {
    asked.check()?;
    let Asked { action, patterns, follow, json } = asked;
    let engine = Engine::connect().await?;
    let room = args.running(&engine).await?;
    let mode = crate::plan::egress::mode_of(room.container.config.as_ref().and_then(|c| c.labels.as_ref()));
    let name = room.name;
    if mode != EgressMode::Allowlist {
        if matches!(action, None | Some(EgressVerb::Log)) && mode == EgressMode::Open && !json {
            output::print(&format!("{name}: egress open (the engine's network; nothing is checked)\n"))?;
            return Ok(0);
        }
        anyhow::bail!(
            "{name} is in egress mode `{}`: only an `allowlist` room has a policy (`workroom up --recreate --egress allowlist`)",
            mode.as_str()
        );
    }
    match action {
        None => show(&name, json),
        Some(EgressVerb::Allow) => change(&name, &patterns, Written::allow),
        Some(EgressVerb::Deny) => change(&name, &patterns, Written::deny),
        Some(EgressVerb::Reset) => {
            let mut written = policy(&name)?;
            written.allowed.clear();
            written.denied.clear();
            store::write(&name, &written)?;
            show(&name, false)
        }
        Some(EgressVerb::Log) => log(&name, follow, json).await,
    }
}

fn policy(room: &str) -> anyhow::Result<Written> {
    Ok(store::read(room)?.ok_or_else(|| store::StoreError::None { room: room.to_string() })?)
}

fn change(
    room: &str,
    patterns: &[String],
    apply: fn(&mut Written, &str) -> Result<(), crate::egress::policy::PatternError>,
) -> anyhow::Result<i32> {
    let mut written = policy(room)?;
    for p in patterns {
        apply(&mut written, p)?;
    }
    // The forwarder reads the file again at its next request: no restart.
    store::write(room, &written)?;
    show(room, false)
}

fn show(room: &str, json: bool) -> anyhow::Result<i32> {
    let written = policy(room)?;
    if json {
        output::print_json(&serde_json::json!({
            "room": room,
            "mode": written.mode,
            "settings": written.settings,
            "allowed": written.allowed,
            "denied": written.denied,
            "proxy": crate::plan::egress::proxy_url(),
        }))?;
        return Ok(0);
    }
    let mut out = format!("{room}: egress allowlist, proxy {} in the room\n", crate::plan::egress::proxy_url());
    if written.settings.is_empty() && written.allowed.is_empty() {
        out.push_str("  allows nothing yet (`workroom egress allow HOST[:PORT]`)\n");
    }
    for (list, from) in [(&written.settings, "settings"), (&written.allowed, "egress allow")] {
        for rule in list {
            out.push_str(&format!("  allow {rule:<40} ({from})\n"));
        }
    }
    for rule in &written.denied {
        out.push_str(&format!("  deny  {rule:<40} (egress deny)\n"));
    }
    output::print(&out)?;
    Ok(0)
}

fn line(e: &Entry) -> String {
    let what = match e.outcome {
        Outcome::Allowed => "allowed",
        Outcome::Refused => "refused",
        Outcome::Failed => "failed ",
    };
    let target = crate::egress::policy::suggestion(&e.host, e.port);
    let mut text = format!(
        "{}  {what}  {:<7} {target:<40} {:>10} B out {:>12} B in {:>7} ms",
        workroomd::clock::utc(e.time_ms),
        e.method,
        e.sent,
        e.received,
        e.duration_ms
    );
    if let Some(rule) = &e.rule {
        text.push_str(&format!("  rule {rule}"));
    }
    if let Some(reason) = &e.reason {
        text.push_str(&format!("  ({reason})"));
    }
    text.push('\n');
    text
}

async fn log(room: &str, follow: bool, json: bool) -> anyhow::Result<i32> {
    let entries = store::entries(room)?;
    let shown = |e: &Entry| match json {
        true => serde_json::to_string(e).unwrap_or_default() + "\n",
        false => line(e),
    };
    let mut out: String = entries.iter().map(shown).collect();
    if !follow && !json {
        let refusals = store::refusals(&entries);
        if !refusals.is_empty() {
            out.push_str("\nrefused, by host (each is a rule to add if it should be reached):\n");
            for (target, count) in refusals {
                out.push_str(&format!("  {count:>6}  {target}\n"));
            }
        }
    }
    output::print(&out)?;
    if !follow {
        return Ok(0);
    }
    let path = store::log_file(room)?;
    let mut offset = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let mut partial = String::new();
    loop {
        tokio::time::sleep(FOLLOW_POLL).await;
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        if len < offset {
            // Rotated: the new file is read from its start.
            offset = 0;
        }
        if len == offset {
            continue;
        }
        let mut file = std::fs::File::open(&path)?;
        file.seek(std::io::SeekFrom::Start(offset))?;
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        offset += text.len() as u64;
        partial.push_str(&text);
        // Only whole lines: a request's line may be read half written.
        let whole = partial.rfind('\n').map_or(0, |i| i + 1);
        let lines: String =
            partial[..whole].lines().filter_map(|l| serde_json::from_str::<Entry>(l).ok()).map(|e| shown(&e)).collect();
        partial.drain(..whole);
        output::print(&lines)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(action: Option<EgressVerb>, patterns: &[&str], follow: bool) -> Asked {
        Asked { action, patterns: patterns.iter().map(|p| p.to_string()).collect(), follow, json: false }
    }

    #[test]
    fn patterns_go_with_allow_and_deny_alone_and_follow_with_log() {
        assert_eq!(asked(Some(EgressVerb::Allow), &[], false).check(), Err(AskError::NoPattern("allow")));
        assert_eq!(asked(Some(EgressVerb::Deny), &[], false).check(), Err(AskError::NoPattern("deny")));
        assert_eq!(asked(Some(EgressVerb::Allow), &["a.example"], false).check(), Ok(()));
        assert_eq!(asked(None, &["a.example"], false).check(), Err(AskError::StrayPattern));
        assert_eq!(asked(Some(EgressVerb::Log), &["a.example"], true).check(), Err(AskError::StrayPattern));
        assert_eq!(asked(Some(EgressVerb::Log), &[], true).check(), Ok(()));
        assert_eq!(asked(None, &[], true).check(), Err(AskError::StrayFollow));
        assert_eq!(asked(Some(EgressVerb::Reset), &[], false).check(), Ok(()));
    }
}
