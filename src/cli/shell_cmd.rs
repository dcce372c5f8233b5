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
//!
//! `shell -d` opens the pane with the same request and returns: no
//! terminal is needed (see [`shell_detached`]). A pane whose program exited
//! stays until killed: `shell` shows its last screen and returns its
//! status; `shell -d` replaces it.

use super::{print_warnings, RoomArgs};
use crate::engine::Engine;
use crate::link::RoomLink;
use crate::room::hooks::HookContext;
use crate::room::resolve::UpFlags;
use crate::room::up;
use anyhow::bail;
use workroomd::proto::{ExitStatus, PaneInfo, PaneRequest, Request, Response};
use workroomd::tty;

/// The room a pane is opened in, a link to it, and the request that opens
/// a pane there as every `shell` does: the remote user, remoteEnv and the
/// forwarded agent's socket, the workspace folder, this host's locale and
/// terminal variables, the history settings. The caller sets the size and
/// the command.
struct PaneRoom {
    engine: Engine,
    room: crate::room::resolve::Room,
    link: RoomLink,
    open: PaneRequest,
}

async fn pane_room(args: &RoomArgs, pane: &str) -> anyhow::Result<PaneRoom> {
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
            let up = up::up(&engine, &resolved.loaded, &options, &super::on_stderr()).await?;
            let room = crate::room::resolve::running_named(&engine, &up.name).await?;
            (engine, room, resolved)
        }
    };
    let (loaded, settings) = (&resolved.loaded, &resolved.settings);
    let remote_user = room.remote_user();
    let container_env = crate::room::container_env(&room.container);
    let metadata = crate::room::metadata_of(loaded, &room.container);
    let said = super::on_stderr();
    let mut ctx = HookContext::new(loaded, &metadata.merged, &remote_user, &container_env, &said);
    // The room's forwarder carries the host's ssh-agent: panes get its socket
    // as exec and hooks do.
    ctx.env.extend(crate::forward::room_env(&room.name));
    let link = RoomLink::connect(&engine, &room.id).await?;
    let open = PaneRequest {
        name: pane.to_string(),
        user: Some(remote_user),
        env: terminal_env(ctx.env.clone(), |name| std::env::var(name).ok()),
        cwd: Some(ctx.cwd.clone()),
        history_lines: settings.history_lines.unwrap_or(0),
        history_bytes: settings.history_bytes.unwrap_or(0),
        locale: host_locale(),
        ..Default::default()
    };
    Ok(PaneRoom { engine, room, link, open })
}

pub async fn shell(args: &RoomArgs, pane: &str, detach_keys: Option<&str>) -> anyhow::Result<i32> {
    let detach_keys = tty::parse_keys(detach_keys.unwrap_or(tty::DEFAULT_DETACH_KEYS))?;
    let PaneRoom { engine, room, link, mut open } = pane_room(args, pane).await?;
    let size = tty::terminal_size(std::io::stdin());
    open.rows = size.map_or(0, |s| s.0);
    open.cols = size.map_or(0, |s| s.1);
    // A pane of this name lost with a restart shows its last screen above
    // the new one: the daemon puts it in the new pane itself. One whose
    // program exited is left as it is: the attach shows its last screen.
    match link.link().request(Request::OpenPane(open)).await? {
        Response::PaneOpened { .. } => {}
        Response::Error { message } => bail!("cannot open pane {pane}: {message}"),
        other => bail!("the daemon answered {other:?} to opening pane {pane}"),
    }
    let target = super::terminal::Target {
        engine: &engine,
        container: &room.id,
        room: &room.name,
        started_at: room.started_at().to_string(),
        pane,
        detach_keys,
    };
    super::terminal::attach(target, link).await
}

/// A detached pane's window, from `--size COLSxROWS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    pub cols: u16,
    pub rows: u16,
}

/// A detached pane's size when none is given: tmux's `default-size`, and
/// what programs assume of a terminal that says nothing. The first client
/// to attach gives the pane its own.
impl Default for Size {
    fn default() -> Size {
        Size { cols: 80, rows: 24 }
    }
}

/// What `shell` refuses: its arguments, or a pane `shell -d` cannot open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShellError {
    #[error("{text:?} is not a size: give COLSxROWS, e.g. 120x40")]
    Size { text: String },
    #[error(
        "pane {pane} already runs `{command}` (pid {pid}); `workroom kill-pane {pane}` ends it, or give another name"
    )]
    PaneRuns { pane: String, command: String, pid: u32 },
    #[error(
        "the program of pane {pane} {ended} and this room's daemon keeps it; `workroom kill-pane {pane}` removes it"
    )]
    PaneEnded { pane: String, ended: String },
    #[error("cannot open pane {pane}: {message}")]
    Open { pane: String, message: String },
    #[error("the daemon answered {answer} to opening pane {pane}")]
    Answer { pane: String, answer: String },
}

/// `--size`: `COLSxROWS`, as terminal sizes are said (80x24).
pub fn parse_size(text: &str) -> Result<Size, ShellError> {
    let bad = || ShellError::Size { text: text.to_string() };
    let (cols, rows) = text.split_once(['x', 'X']).ok_or_else(bad)?;
    let number = |s: &str| s.trim().parse::<u16>().ok().filter(|n| *n > 0);
    match (number(cols), number(rows)) {
        (Some(cols), Some(rows)) => Ok(Size { cols, rows }),
        _ => Err(bad()),
    }
}

/// `workroom shell -d PANE [-- CMD...]`: opens the pane with `shell`'s
/// user, environment, folder and locale, `size` until a client attaches,
/// running CMD through the login shell (so it finds what the profile puts
/// on `PATH`, as typed into a shell pane) or the login shell itself;
/// prints the pane's name and returns. Works with no terminal at all.
pub async fn shell_detached(args: &RoomArgs, pane: &str, size: Size, command: Vec<String>) -> anyhow::Result<i32> {
    let PaneRoom { link, mut open, .. } = pane_room(args, pane).await?;
    open.rows = size.rows;
    open.cols = size.cols;
    open.replace_exited = true;
    let asked_command = !command.is_empty();
    if asked_command {
        open.argv = Some(command);
        open.login_shell = true;
    }
    let reply = link.link().request(Request::OpenPane(open)).await?;
    match detached_outcome(pane, asked_command, reply) {
        Ok(note) => {
            if let Some(note) = note {
                eprintln!("workroom: {note}");
            }
            crate::output::print(&format!("{pane}\n"))?;
            Ok(0)
        }
        Err(e) => Err(e.into()),
    }
}

/// What `shell -d` makes of the daemon's answer: a note for stderr (the
/// pane's name goes to stdout), or the one line it fails with.
///
/// A pane of that name that runs is kept when no command was asked for
/// (tmux's `new-session -A -d`: "make sure it is there"), and refused when
/// one was: CMD would not run, and saying nothing would hide that. One whose
/// program exited is replaced (the daemon does it, asked by
/// `replace_exited`), and that is said.
pub fn detached_outcome(pane: &str, asked_command: bool, reply: Response) -> Result<Option<String>, ShellError> {
    let named = pane;
    let pane = || named.to_string();
    match reply {
        Response::PaneOpened { created: true, replaced: Some(status), .. } => {
            Ok(Some(format!("the program of pane {named} {}; a new pane {named} replaces it", status.describe())))
        }
        Response::PaneOpened { created: true, .. } => Ok(None),
        Response::PaneOpened { created: false, pane: info, .. } => match (info.exited, asked_command) {
            (None, false) => Ok(Some(format!("pane {named} already runs; it is left as it is"))),
            (None, true) => Err(ShellError::PaneRuns { pane: pane(), command: info.command.join(" "), pid: info.pid }),
            (Some(status), _) => Err(ShellError::PaneEnded { pane: pane(), ended: status.describe() }),
        },
        Response::Error { message } => Err(ShellError::Open { pane: pane(), message }),
        other => Err(ShellError::Answer { pane: pane(), answer: format!("{other:?}") }),
    }
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
        crate::output::print(&format_panes(&panes, now_ms()))?;
    }
    Ok(0)
}

/// The table `workroom panes` prints.
pub fn format_panes(panes: &[PaneInfo], now_ms: u64) -> String {
    let row = |name: &str, pid: &str, size: &str, clients: &str, age: &str, status: &str, command: &str| {
        format!("{name:<16} {pid:>7} {size:>9} {clients:>7} {age:>6}  {status:<12} {command}\n")
    };
    let mut out = row("PANE", "PID", "SIZE", "CLIENTS", "AGE", "STATUS", "COMMAND");
    for p in panes {
        out.push_str(&row(
            &p.name,
            &p.pid.to_string(),
            &format!("{}x{}", p.rows, p.cols),
            &p.clients.to_string(),
            &age(now_ms.saturating_sub(p.created_unix_ms) / 1000),
            &status_word(p.exited),
            &p.command.join(" "),
        ));
    }
    out
}

/// A pane's STATUS in `workroom panes`, one word: `running`, `exited:3`,
/// `killed:SIGKILL` (or the signal's number), `ended` (its status lost).
pub fn status_word(exited: Option<ExitStatus>) -> String {
    match exited {
        None => "running".into(),
        Some(ExitStatus { code: Some(code), .. }) => format!("exited:{code}"),
        Some(status @ ExitStatus { signal: Some(signal), .. }) => match status.signal_name() {
            Some(name) => format!("killed:{name}"),
            None => format!("killed:{signal}"),
        },
        Some(_) => "ended".into(),
    }
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
        crate::room::handoff::Outcome::HandedOff => crate::output::print("handed off\n")?,
        crate::room::handoff::Outcome::Current => crate::output::print("current\n")?,
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_panes_table_shows_size_clients_age_and_status() {
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
        let exited =
            PaneInfo { name: "agent".into(), exited: Some(ExitStatus { code: Some(3), signal: None }), ..pane.clone() };
        let table = format_panes(&[pane, exited], 1_000 + 125_000);
        let row = |n: usize| table.lines().nth(n).unwrap().split_whitespace().collect::<Vec<_>>();
        assert_eq!(row(0), ["PANE", "PID", "SIZE", "CLIENTS", "AGE", "STATUS", "COMMAND"]);
        assert_eq!(row(1), ["main", "42", "24x80", "2", "2m", "running", "/bin/bash", "-l"]);
        assert_eq!(row(2)[5], "exited:3");
    }

    #[test]
    fn a_panes_status_is_one_word_naming_the_code_or_the_signal() {
        let status = |code, signal| Some(ExitStatus { code, signal });
        assert_eq!(status_word(None), "running");
        assert_eq!(status_word(status(Some(0), None)), "exited:0");
        assert_eq!(status_word(status(None, Some(9))), "killed:SIGKILL");
        assert_eq!(status_word(status(None, Some(40))), "killed:40");
        assert_eq!(status_word(status(None, None)), "ended");
    }

    #[test]
    fn a_size_is_cols_by_rows_and_anything_else_is_refused_with_the_form() {
        assert_eq!(parse_size("120x40"), Ok(Size { cols: 120, rows: 40 }));
        assert_eq!(parse_size("80X24"), Ok(Size::default()));
        for bad in ["120", "0x24", "80x0", "x24", "80x", "-1x24", "80x24x2", "99999x1"] {
            let error = parse_size(bad).unwrap_err();
            assert_eq!(error, ShellError::Size { text: bad.into() });
            assert!(error.to_string().contains("give COLSxROWS, e.g. 120x40"), "{bad}: {error}");
        }
    }

    #[test]
    fn shell_d_makes_the_pane_keeps_a_running_one_and_replaces_an_exited_one_saying_so() {
        let info = |exited| PaneInfo {
            name: "agent".into(),
            command: vec!["claude".into()],
            pid: 7,
            exited,
            ..Default::default()
        };
        let opened =
            |created, exited, replaced| Response::PaneOpened { pane: info(exited), created, ended: None, replaced };
        let three = Some(ExitStatus { code: Some(3), signal: None });
        assert_eq!(detached_outcome("agent", true, opened(true, None, None)), Ok(None));
        assert_eq!(
            detached_outcome("agent", true, opened(true, None, three)),
            Ok(Some("the program of pane agent exited with status 3; a new pane agent replaces it".into()))
        );
        // No command asked: a running pane of that name is what was wanted.
        assert_eq!(
            detached_outcome("agent", false, opened(false, None, None)),
            Ok(Some("pane agent already runs; it is left as it is".into()))
        );
        // A command asked: it would not run, so that is an error.
        let refused = detached_outcome("agent", true, opened(false, None, None)).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "pane agent already runs `claude` (pid 7); `workroom kill-pane agent` ends it, or give another name"
        );
        let ended = detached_outcome("agent", false, opened(false, three, None)).unwrap_err();
        assert!(ended.to_string().contains("kill-pane agent"), "{ended}");
        let failed = detached_outcome("agent", true, Response::error("cannot run nope")).unwrap_err();
        assert_eq!(failed, ShellError::Open { pane: "agent".into(), message: "cannot run nope".into() });
        assert_eq!(failed.to_string(), "cannot open pane agent: cannot run nope");
    }

    fn parse(args: &[&str]) -> Result<crate::cli::Cmd, clap::Error> {
        use clap::Parser;
        crate::cli::Args::try_parse_from(args).map(|a| a.command)
    }

    #[test]
    fn shell_d_takes_a_pane_a_size_and_a_command_after_the_double_dash() {
        let Ok(crate::cli::Cmd::Shell { pane, detach, size, command, .. }) =
            parse(&["workroom", "shell", "-d", "agent", "--size", "120x40", "--", "sh", "-c", "exit 3"])
        else {
            panic!("shell -d did not parse");
        };
        assert_eq!((pane.as_str(), detach, size), ("agent", true, Some(Size { cols: 120, rows: 40 })));
        assert_eq!(command, ["sh", "-c", "exit 3"]);
        let Ok(crate::cli::Cmd::Shell { pane, detach, size, command, .. }) = parse(&["workroom", "shell", "--detach"])
        else {
            panic!("shell --detach did not parse");
        };
        assert_eq!((pane.as_str(), detach, size, command.len()), ("main", true, None, 0));
        // A command, a size or detach keys only mean something with (or without) -d.
        for refused in [
            &["workroom", "shell", "agent", "--", "claude"][..],
            &["workroom", "shell", "--size", "80x24"],
            &["workroom", "shell", "-d", "--detach-keys", "ctrl-a"],
            &["workroom", "shell", "-d", "--size", "wide"],
        ] {
            assert!(parse(refused).is_err(), "{refused:?}");
        }
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
