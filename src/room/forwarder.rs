//! `up`'s forwarder step: the room's host process kept (ports,
//! credentials, an `allowlist` room's egress), the room's egress policy
//! brought up to date from the settings, and what `up` says of both; and
//! the check that a room made before holds the egress mode now asked.

use super::make::UpOptions;
use crate::config::Loaded;
use crate::forward::background::Check;
use crate::notices::Notices;
use crate::settings::EgressMode;
use anyhow::bail;

/// Starts the room's background forwarder when it has none for this start
/// and there is something to carry. A forwarder that cannot start (every
/// port taken) is a warning: the room and its hooks do not depend on it.
pub(super) async fn keep(
    loaded: &Loaded,
    name: &str,
    egress: EgressMode,
    options: &UpOptions,
    started_at: &str,
    check: Check,
    say: &Notices,
) {
    let proxied = egress == EgressMode::Allowlist;
    if proxied {
        // Every `up`, the fast path's too: an edited allow list applies to
        // the running room at once, and is said.
        match crate::egress::store::set_from_settings(name, EgressMode::Allowlist, &options.egress_allow) {
            Ok(Some(now)) => say.note(format!("{name}: the egress allowlist is now: {}", shown_rules(&now))),
            Ok(None) => {}
            Err(e) => say.warn(format!("{name}: the egress policy was not updated, the last one holds: {e:#}")),
        }
    }
    let kept = crate::forward::background::ensure_for_up(loaded, name, started_at, check, proxied).await;
    say_forwarder(name, kept, proxied, say);
}

/// What `up` says of the room's forwarder: what a new one carries, or why
/// there is none (for an `allowlist` room, that it reaches nothing).
fn say_forwarder(
    name: &str,
    kept: anyhow::Result<Option<crate::forward::state::Status>>,
    proxied: bool,
    say: &Notices,
) {
    match kept {
        Ok(Some(status)) => {
            for line in crate::forward::background::started_lines(&status) {
                say.say(line);
            }
        }
        Ok(None) => {}
        Err(e) if proxied => say.warn(format!(
            "{name}: ports and credentials are not forwarded, and the room reaches nothing (its egress proxy has no host): {e:#}"
        )),
        Err(e) => say.warn(format!("{name}: ports and credentials are not forwarded: {e:#}")),
    }
}

fn shown_rules(rules: &[String]) -> String {
    match rules.is_empty() {
        true => "nothing (`workroom egress allow PATTERN` adds a rule)".into(),
        false => rules.join(", "),
    }
}

/// A room made in a looser egress mode than the settings now ask is not
/// used as if it were stricter: that is a guardrail silently missing.
/// A stricter room than asked is kept, with a word.
pub(super) fn check_egress(name: &str, made: EgressMode, options: &UpOptions) -> anyhow::Result<()> {
    if made < options.egress {
        bail!(
            "{} was made with egress `{}`, and the settings ask `{}`; `workroom up --recreate` makes it anew \
             (nothing in it but the workspace is kept)",
            name,
            made.as_str(),
            options.egress.as_str()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forward::spec::Forward;
    use crate::forward::state::{ForwardState, Status};
    use crate::notices::Level;

    #[test]
    fn a_new_forwarder_says_each_port_it_carries_and_one_that_cannot_start_is_a_warning_not_a_failure() {
        let forward = |host_port, asked_port| ForwardState {
            forward: Forward { host_port, target_host: "localhost".into(), target_port: 3000, label: None },
            state: "listening".into(),
            asked_port,
        };
        let status = Status {
            room: "wr-room".into(),
            pid: 7,
            background: true,
            forwards: vec![forward(3000, None), forward(3001, Some(3000))],
            ssh_agent: true,
            git_credentials: false,
            started_at: String::new(),
            rejoining: false,
            egress: false,
        };
        let said = Notices::kept();
        say_forwarder("wr-room", Ok(Some(status)), false, &said);
        let lines: Vec<(Level, String)> = said.take().into_iter().map(|n| (n.level, n.text)).collect();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines.iter().all(|(level, _)| *level == Level::Said));
        assert_eq!(lines[0].1, "wr-room: 127.0.0.1:3000 -> localhost:3000 listening");
        assert_eq!(lines[1].1, "wr-room: 127.0.0.1:3001 -> localhost:3000 listening (port 3000 is taken on the host)");
        assert_eq!(lines[2].1, "wr-room: ssh-agent forwarded");
        say_forwarder("wr-room", Ok(None), false, &said);
        assert!(said.take().is_empty(), "a forwarder already running says nothing");
        say_forwarder("wr-room", Err(anyhow::anyhow!("every port is taken")), false, &said);
        let warned = said.take();
        assert_eq!(warned.len(), 1);
        assert_eq!(warned[0].level, Level::Warning);
        assert_eq!(warned[0].text, "wr-room: ports and credentials are not forwarded: every port is taken");
        say_forwarder("wr-room", Err(anyhow::anyhow!("every port is taken")), true, &said);
        let warned = said.take();
        assert!(warned[0].text.contains("the room reaches nothing"), "{warned:?}");
    }
}
