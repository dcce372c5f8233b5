//! `workroom shell [PANE]`, `workroom panes`, `workroom kill-pane PANE` and
//! `workroom hand-off`.
//!
//! `shell` brings the room up (so postAttachCommand runs), opens the pane if
//! it is not there (the remote user's shell from the image's passwd, in the
//! workspace folder, with remoteEnv), then attaches this terminal to it over
//! the room's link (`terminal.rs`): the host terminal goes raw (restored on
//! every way out), its size follows the window, the detach keys (default
//! ctrl-p ctrl-q, `--detach-keys`) leave the pane running, and the pane's
//! end ends `shell` with the pane's status. With `--room NAME` (any room
//! command's naming rule, `room::resolve::candidate_names`) it attaches to
//! a running room as it is, without an `up`.

use super::{print_warnings, RoomArgs};
use crate::engine::Engine;
use crate::link::RoomLink;
use crate::room::hooks::HookContext;
use crate::room::resolve::UpFlags;
use crate::room::up;
use anyhow::bail;
use workroomd::proto::{PaneInfo, PaneRequest, Request, Response};
use workroomd::tty;

pub async fn shell(args: &RoomArgs, pane: &str, detach_keys: Option<&str>) -> anyhow::Result<i32> {
    let detach_keys = tty::parse_keys(detach_keys.unwrap_or(tty::DEFAULT_DETACH_KEYS))?;
    // The workspace's room is brought up (so postAttachCommand runs); a
    // room named with `--room` is used as it runs.
    let (engine, room, resolved) = match &args.room {
        Some(_) => {
            let engine = Engine::connect().await?;
            let (room, resolved) = args.running_with_config(&engine).await?;
            (engine, room, resolved)
        }
        None => {
            let resolved = args.workspace.resolve(Default::default())?;
            print_warnings(&resolved);
            let engine = Engine::connect().await?;
            let options = resolved.up_options(UpFlags { post_attach: true, ..Default::default() });
            let up = up::up(&engine, &resolved.loaded, &options).await?;
            let room = crate::room::resolve::running_named(&engine, &up.name).await?;
            (engine, room, resolved)
        }
    };
    let (loaded, settings) = (&resolved.loaded, &resolved.settings);
    let remote_user = room.remote_user();
    let container_env = crate::room::container_env(&room.container);
    let started_at = room.started_at().to_string();
    let metadata = crate::room::metadata_of(loaded, &room.container);
    let mut ctx = HookContext::new(loaded, &metadata.merged, &remote_user, &container_env);
    // The room's forwarder carries the host's ssh-agent: panes get its socket
    // as exec and hooks do.
    ctx.env.extend(crate::forward::room_env(&room.name));
    let link = RoomLink::connect(&engine, &room.id).await?;
    let size = tty::terminal_size(std::io::stdin());
    let open = PaneRequest {
        name: pane.to_string(),
        argv: None,
        user: Some(remote_user),
        env: terminal_env(ctx.env.clone(), |name| std::env::var(name).ok()),
        cwd: Some(ctx.cwd.clone()),
        rows: size.map_or(0, |s| s.0),
        cols: size.map_or(0, |s| s.1),
        history_lines: settings.history_lines.unwrap_or(0),
        history_bytes: settings.history_bytes.unwrap_or(0),
        locale: host_locale(),
    };
    // A pane of this name lost with a restart shows its last screen above
    // the new one: the daemon puts it in the new pane itself.
    match link.link().request(Request::OpenPane(open)).await? {
        Response::PaneOpened { .. } => {}
        Response::Error { message } => bail!("cannot open pane {pane}: {message}"),
        other => bail!("the daemon answered {other:?} to opening pane {pane}"),
    }
    let target = super::terminal::Target {
        engine: &engine,
        container: &room.id,
        room: &room.name,
        started_at,
        pane,
        detach_keys,
    };
    super::terminal::attach(target, link).await
}

/// A pane's and `exec -t`'s terminal variables on top of the configured
/// environment: `TERM` as this terminal's (else `xterm-256color`, what
/// panes emulate), `COLORTERM` passed through; the configuration's own
/// values win.
pub fn terminal_env(
    mut env: std::collections::BTreeMap<String, String>,
    host: impl Fn(&str) -> Option<String>,
) -> std::collections::BTreeMap<String, String> {
    let term = host("TERM").filter(|t| !t.is_empty() && t != "dumb").unwrap_or_else(|| "xterm-256color".into());
    env.entry("TERM".into()).or_insert(term);
    if let Some(colorterm) = host("COLORTERM").filter(|c| !c.is_empty()) {
        env.entry("COLORTERM".into()).or_insert(colorterm);
    }
    env
}

/// This host's `LANG` and `LC_*`, for the daemon to match against the image.
pub fn host_locale() -> std::collections::BTreeMap<String, String> {
    std::env::vars().filter(|(k, _)| k == "LANG" || k.starts_with("LC_")).collect()
}

pub async fn panes(room: &RoomArgs, as_json: bool) -> anyhow::Result<i32> {
    let link = super::pane_cmd::connect(room).await?;
    let panes = match link.link().request(Request::ListPanes).await? {
        Response::Panes { panes } => panes,
        Response::Error { message } => bail!("the daemon refused to list panes: {message}"),
        other => bail!("the daemon answered {other:?} to listing panes"),
    };
    if as_json {
        crate::output::print_json(&serde_json::to_value(&panes)?)?;
    } else {
        print!("{}", format_panes(&panes, now_ms()));
    }
    Ok(0)
}

/// The table `workroom panes` prints.
pub fn format_panes(panes: &[PaneInfo], now_ms: u64) -> String {
    let mut out = format!("{:<16} {:>7} {:>9} {:>7} {:>6}  {}\n", "PANE", "PID", "SIZE", "CLIENTS", "AGE", "COMMAND");
    for p in panes {
        out.push_str(&format!(
            "{:<16} {:>7} {:>9} {:>7} {:>6}  {}\n",
            p.name,
            p.pid,
            format!("{}x{}", p.rows, p.cols),
            p.clients,
            age(now_ms.saturating_sub(p.created_unix_ms) / 1000),
            p.command.join(" ")
        ));
    }
    out
}

pub(super) fn age(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

pub async fn kill_pane(args: &RoomArgs, pane: &str) -> anyhow::Result<i32> {
    let engine = Engine::connect().await?;
    let id = args.running(&engine).await?.id;
    let link = RoomLink::connect(&engine, &id).await?;
    match link.link().request(Request::KillPane { pane: pane.to_string() }).await? {
        Response::Done => Ok(0),
        Response::Error { message } => bail!("{message}"),
        other => bail!("the daemon answered {other:?} to killing pane {pane}"),
    }
}

pub async fn hand_off(args: &RoomArgs, binary: Option<&std::path::Path>, force: bool) -> anyhow::Result<i32> {
    let engine = Engine::connect().await?;
    let id = args.running(&engine).await?.id;
    let bytes = crate::room::handoff::new_binary(&engine, &id, binary).await?;
    match crate::room::handoff::hand_off(&engine, &id, &bytes, force).await? {
        crate::room::handoff::Outcome::HandedOff => println!("handed off"),
        crate::room::handoff::Outcome::Current => println!("current"),
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_panes_table_shows_size_clients_and_age() {
        let pane = PaneInfo {
            name: "main".into(),
            command: vec!["/bin/bash".into(), "-l".into()],
            pid: 42,
            rows: 24,
            cols: 80,
            clients: 2,
            created_unix_ms: 1_000,
            ..Default::default()
        };
        let table = format_panes(&[pane], 1_000 + 125_000);
        let row = table.lines().nth(1).unwrap();
        assert_eq!(row.split_whitespace().collect::<Vec<_>>(), ["main", "42", "24x80", "2", "2m", "/bin/bash", "-l"]);
    }

    #[test]
    fn a_pane_gets_this_terminals_term_else_xterm_256color_and_the_configs_own_wins() {
        let host = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
        };
        let env = terminal_env(Default::default(), host(&[("TERM", "screen-256color"), ("COLORTERM", "truecolor")]));
        assert_eq!(env.get("TERM").map(String::as_str), Some("screen-256color"));
        assert_eq!(env.get("COLORTERM").map(String::as_str), Some("truecolor"));
        let env = terminal_env(Default::default(), host(&[]));
        assert_eq!(env.get("TERM").map(String::as_str), Some("xterm-256color"));
        assert!(!env.contains_key("COLORTERM"));
        let configured = [("TERM".to_string(), "vt100".to_string())].into_iter().collect();
        assert_eq!(terminal_env(configured, host(&[("TERM", "xterm")])).get("TERM").map(String::as_str), Some("vt100"));
    }
}
