//! `workroom shell [PANE]`, `workroom panes`, `workroom kill-pane PANE` and
//! `workroom hand-off`.
//!
//! `shell` brings the room up (so postAttachCommand runs), opens the pane if
//! it is not there (the remote user's shell from the image's passwd, in the
//! workspace folder, with remoteEnv), then runs `workroomd attach PANE` in
//! the room through the engine's exec with a tty: the host terminal goes raw
//! (restored on every way out), its size follows the window, the detach keys
//! (default ctrl-p ctrl-q, `--detach-keys`) leave the pane running, and the
//! pane's end ends `shell` with the pane's status.

use super::exec_cmd::{RawTerminal, EXIT_WORKROOM_FAILED};
use super::{print_warnings, WorkspaceArgs};
use crate::engine::{Engine, ExecSpec};
use crate::link::RoomLink;
use crate::room::hooks::HookContext;
use crate::room::resolve::UpFlags;
use crate::room::up;
use anyhow::{bail, Context as _};
use std::io::Write;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use workroomd::proto::{PaneInfo, PaneRequest, Request, Response};
use workroomd::room;

/// The engine's own detach keys for the attach exec. Docker's default is
/// ctrl-p ctrl-q, which the engine would swallow before `workroomd attach`
/// sees them, then drop the exec's streams and leave the attach hanging in
/// the room. The engine cannot be told "none", so it gets a sequence no one
/// types (ctrl-@ is NUL; four of them alternating with ctrl-^).
const ENGINE_DETACH_KEYS: &str = "ctrl-@,ctrl-^,ctrl-@,ctrl-^";

pub async fn shell(ws: &WorkspaceArgs, pane: &str, detach_keys: Option<&str>) -> anyhow::Result<i32> {
    let resolved = ws.resolve(Default::default())?;
    print_warnings(&resolved);
    let engine = Engine::connect().await?;
    let options = resolved.up_options(UpFlags { post_attach: true, ..Default::default() });
    let loaded = &resolved.loaded;
    let up = up::up(&engine, loaded, &options).await?;
    let container = engine.inspect_container(&up.container_id).await?.context("the room vanished after `up`")?;
    let container_env = crate::room::container_env(&container);
    let metadata = crate::room::metadata_of(loaded, &container);
    let mut ctx = HookContext::new(loaded, &metadata.merged, &up.remote_user, &container_env);
    // The room's forwarder carries the host's ssh-agent: panes get its socket
    // as exec and hooks do.
    ctx.env.extend(crate::forward::room_env(&up.name));
    let size = terminal_size();
    let link = RoomLink::connect(&engine, &up.container_id).await?;
    let open = PaneRequest {
        name: pane.to_string(),
        argv: None,
        user: Some(up.remote_user.clone()),
        env: ctx.env.clone(),
        cwd: Some(ctx.cwd.clone()),
        rows: size.map_or(0, |s| s.0),
        cols: size.map_or(0, |s| s.1),
    };
    match link.link().request(Request::OpenPane(open)).await? {
        Response::PaneOpened { ended: Some(ended), .. } => {
            // The pane of this name was lost with a restart: show what it
            // last showed, then the fresh one below it.
            let mut out = std::io::stdout();
            if let Some(screen) = &ended.screen {
                let _ = out.write_all(screen.as_bytes());
            }
            let _ = out.write_all(format!("\r\n{}; a new pane {pane} starts\r\n", ended.message).as_bytes());
            let _ = out.flush();
        }
        Response::PaneOpened { .. } => {}
        Response::Error { message } => bail!("cannot open pane {pane}: {message}"),
        other => bail!("the daemon answered {other:?} to opening pane {pane}"),
    }
    drop(link);
    let mut argv = vec![room::DAEMON_PATH.to_string(), "attach".into(), pane.to_string()];
    if let Some(keys) = detach_keys {
        argv.extend(["--detach-keys".into(), keys.to_string()]);
    }
    if let Some((rows, cols)) = size {
        argv.extend(["--size".into(), format!("{rows}x{cols}")]);
    }
    attach_through_exec(&engine, &up.container_id, argv).await
}

/// `docker exec -it -u 0 <room> workroomd attach ...` through the engine,
/// with this terminal raw; returns the attach's (so the pane's) status.
async fn attach_through_exec(engine: &Engine, id: &str, argv: Vec<String>) -> anyhow::Result<i32> {
    let spec = ExecSpec {
        argv,
        user: Some("0".into()),
        tty: true,
        stdin: true,
        detach_keys: Some(ENGINE_DETACH_KEYS.into()),
        ..Default::default()
    };
    let terminal = RawTerminal::enter();
    let mut stream = engine.exec(id, &spec).await?;
    let mut input = stream.input;
    // A plain thread, not tokio's stdin: tokio's blocking read would keep
    // the runtime from shutting down after the pane ends or detaches, until
    // the user pressed one more key.
    let (typed_tx, mut typed) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(n) = std::io::Read::read(&mut stdin, &mut buf) {
            if n == 0 || typed_tx.blocking_send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let stdin_task = tokio::spawn(async move {
        while let Some(bytes) = typed.recv().await {
            if input.write_all(&bytes).await.is_err() {
                break;
            }
            let _ = input.flush().await;
        }
    });
    let resize_task = {
        let engine = engine.clone();
        let exec_id = stream.id.clone();
        tokio::spawn(async move {
            // The attach was started with the size on its command line; this
            // keeps the exec's own tty in step, and SIGWINCH follows.
            if let Some((rows, cols)) = terminal_size() {
                let _ = engine.resize_exec(&exec_id, rows, cols).await;
            }
            let Ok(mut winch) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()) else {
                return;
            };
            while winch.recv().await.is_some() {
                if let Some((rows, cols)) = terminal_size() {
                    let _ = engine.resize_exec(&exec_id, rows, cols).await;
                }
            }
        })
    };
    let mut out = tokio::io::stdout();
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = stream.output.read(&mut buf).await {
        if n == 0 || out.write_all(&buf[..n]).await.is_err() {
            break;
        }
        let _ = out.flush().await;
    }
    drop(terminal);
    stdin_task.abort();
    resize_task.abort();
    let code = engine.exec_exit_code(&stream.id).await?.unwrap_or(EXIT_WORKROOM_FAILED as i64) as i32;
    Ok(code)
}

fn terminal_size() -> Option<(u16, u16)> {
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes a winsize into the pointer we pass.
    let rc = unsafe { libc::ioctl(libc::STDIN_FILENO, libc::TIOCGWINSZ, &mut ws) };
    (rc == 0 && ws.ws_row > 0).then_some((ws.ws_row, ws.ws_col))
}

/// The running room of a workspace (its id), or a message saying how to get one.
async fn running_room(engine: &Engine, ws: &WorkspaceArgs) -> anyhow::Result<String> {
    Ok(ws.resolve(Default::default())?.running(engine).await?.id)
}

pub async fn panes(ws: &WorkspaceArgs, as_json: bool) -> anyhow::Result<i32> {
    let engine = Engine::connect().await?;
    let id = running_room(&engine, ws).await?;
    let link = RoomLink::connect(&engine, &id).await?;
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

fn age(secs: u64) -> String {
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

pub async fn kill_pane(ws: &WorkspaceArgs, pane: &str) -> anyhow::Result<i32> {
    let engine = Engine::connect().await?;
    let id = running_room(&engine, ws).await?;
    let link = RoomLink::connect(&engine, &id).await?;
    match link.link().request(Request::KillPane { pane: pane.to_string() }).await? {
        Response::Done => Ok(0),
        Response::Error { message } => bail!("{message}"),
        other => bail!("the daemon answered {other:?} to killing pane {pane}"),
    }
}

pub async fn hand_off(ws: &WorkspaceArgs, binary: Option<&std::path::Path>, force: bool) -> anyhow::Result<i32> {
    let engine = Engine::connect().await?;
    let id = running_room(&engine, ws).await?;
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
        };
        let table = format_panes(&[pane], 1_000 + 125_000);
        let row = table.lines().nth(1).unwrap();
        assert_eq!(row.split_whitespace().collect::<Vec<_>>(), ["main", "42", "24x80", "2", "2m", "/bin/bash", "-l"]);
    }
}
