//! `workroom exec [-t] -- CMD...`: one command in the room through Docker's
//! exec, as the remote user, in the workspace folder, with `remoteEnv`.
//! Stdin, stdout, stderr and the exit status pass through.
//!
//! Exit codes: the command's own; 125 when workroom or the engine failed
//! before the command ran (no room, room stopped, engine down); 126/127 when
//! the engine could not execute the program (not executable / not found),
//! said on stderr with a `workroom:` line so it is not mistaken for the
//! command's own 126/127.

use super::WorkspaceArgs;
use crate::config::{self, LoadRequest};
use crate::engine::{Engine, ExecSpec};
use crate::plan::labels;
use crate::room::hooks::HookContext;
use std::io::Write;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Exit status for failures of workroom or the engine, as `docker exec` uses.
pub const EXIT_WORKROOM_FAILED: i32 = 125;

pub async fn run(ws: &WorkspaceArgs, tty: bool, argv: Vec<String>) -> anyhow::Result<i32> {
    match prepare_and_run(ws, tty, argv).await {
        Ok(code) => Ok(code),
        Err(e) => {
            let chain: Vec<String> = e.chain().map(ToString::to_string).collect();
            eprintln!("workroom: {}", chain.join(": "));
            Ok(EXIT_WORKROOM_FAILED)
        }
    }
}

async fn prepare_and_run(ws: &WorkspaceArgs, tty: bool, argv: Vec<String>) -> anyhow::Result<i32> {
    let loaded = config::load(&LoadRequest::new(&ws.workspace_folder, ws.config.clone()))?;
    let engine = Engine::connect().await?;
    let settings = crate::settings::load(&loaded.workspace.local_folder, Default::default())?;
    let Some(c) = crate::room::locate(&engine, &loaded, settings.peer_messaging).await? else {
        anyhow::bail!("no room for {}; `workroom up` makes one", loaded.workspace.local_folder.display());
    };
    let name = c.name.as_deref().unwrap_or_default().trim_start_matches('/').to_string();
    if c.state.as_ref().and_then(|s| s.running) != Some(true) {
        anyhow::bail!("{name} is not running; `workroom up` starts it");
    }
    let container_labels = c.config.as_ref().and_then(|c| c.labels.clone()).unwrap_or_default();
    let user = container_labels.get(labels::REMOTE_USER).cloned().unwrap_or_else(|| "root".into());
    let container_env = crate::room::container_env(&c);
    let mut ctx = HookContext::new(&loaded, &user, &container_env);
    // The user environment `up` probed for this start, under remoteEnv.
    let started_at = c.state.as_ref().and_then(|s| s.started_at.clone()).unwrap_or_default();
    if let Some(probed) = crate::room::ready::probed_env(c.id.as_deref().unwrap_or_default(), &started_at) {
        ctx.env = probed.into_iter().chain(std::mem::take(&mut ctx.env)).collect();
    }
    ctx.env.extend(crate::forward::room_env(&name));
    if tty {
        // One TERM for panes and `exec -t`: this terminal's (docker would say `xterm`).
        ctx.env = super::shell_cmd::terminal_env(std::mem::take(&mut ctx.env), |n| std::env::var(n).ok());
    }
    let spec = ExecSpec {
        argv,
        user: Some(user),
        env: ctx.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        workdir: Some(ctx.cwd.clone()),
        tty,
        stdin: true,
        detach_keys: None,
    };
    let id = c.id.clone().unwrap_or(name);
    let terminal = if tty { workroomd::tty::RawMode::enter() } else { None };
    let mut stream = engine.exec(&id, &spec).await?;
    if let (true, Some((rows, cols))) = (tty, workroomd::tty::terminal_size(std::io::stdout())) {
        let _ = engine.resize_exec(&stream.id, rows, cols).await;
    }
    let mut stderr_rx = stream.output.take_stderr();
    let mut input = stream.input;
    // stdin → exec; at its end, half-close so the command sees end of input.
    let stdin_task = tokio::spawn(async move {
        let mut stdin = tokio::io::stdin();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match stdin.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if input.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                    let _ = input.flush().await;
                }
            }
        }
        let _ = input.shutdown().await;
    });
    let resize_task = tty.then(|| {
        let engine = engine.clone();
        let exec_id = stream.id.clone();
        tokio::spawn(async move {
            let Ok(mut winch) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()) else {
                return;
            };
            while winch.recv().await.is_some() {
                if let Some((rows, cols)) = workroomd::tty::terminal_size(std::io::stdout()) {
                    let _ = engine.resize_exec(&exec_id, rows, cols).await;
                }
            }
        })
    });
    let stderr_task = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(chunk) = stderr_rx.recv().await {
            let _ = std::io::stderr().write_all(&chunk);
            if seen.len() < 4096 {
                seen.extend_from_slice(&chunk);
            }
        }
        seen
    });
    let mut out = tokio::io::stdout();
    let mut buf = vec![0u8; 64 * 1024];
    // The engine's own complaint when it cannot start the program comes on
    // the exec's stdout (Docker 20.10) before any byte of the command's: it
    // is held back and, if the exit status confirms it, goes to stderr, so
    // the command's stdout carries only the command's bytes.
    let mut held = Vec::new();
    let mut first = true;
    loop {
        let n = stream.output.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        if first && buf[..n].starts_with(ENGINE_EXEC_FAILED.as_bytes()) {
            held.extend_from_slice(&buf[..n]);
            continue;
        }
        first = false;
        if !held.is_empty() && out.write_all(&std::mem::take(&mut held)).await.is_err() {
            break;
        }
        if out.write_all(&buf[..n]).await.is_err() {
            break;
        }
        let _ = out.flush().await;
    }
    drop(terminal);
    stdin_task.abort();
    if let Some(t) = resize_task {
        t.abort();
    }
    drop(stream.output);
    let err_head = stderr_task.await.unwrap_or_default();
    let code = engine.exec_exit_code(&stream.id).await?.unwrap_or(EXIT_WORKROOM_FAILED as i64) as i32;
    let said = String::from_utf8_lossy(&held).into_owned() + &String::from_utf8_lossy(&err_head);
    match engine_exec_failure(code, &said) {
        Some(code) => {
            let _ = std::io::stderr().write_all(&held);
            eprintln!(
                "workroom: the engine could not run `{}` in {id}: {}",
                spec.argv[0],
                if code == EXIT_NOT_FOUND { "not found in PATH" } else { "not executable" }
            );
            Ok(code)
        }
        None => {
            // Not the engine's: the command's own output after all.
            let _ = out.write_all(&held).await;
            let _ = out.flush().await;
            Ok(code)
        }
    }
}

/// How the engine's message begins when it could not start the program.
const ENGINE_EXEC_FAILED: &str = "OCI runtime exec failed";

/// `docker exec`'s statuses for a program the engine could not run.
const EXIT_NOT_EXECUTABLE: i32 = 126;
const EXIT_NOT_FOUND: i32 = 127;

/// The status to report when the engine, not the command, failed: 127 for a
/// program not found, 126 for one not executable. Docker 20.10 reports both
/// as 126 (newer engines say 127 for not found), so the engine's message
/// decides; a 126/127 without that message is the command's own.
fn engine_exec_failure(code: i32, said: &str) -> Option<i32> {
    if !(code == EXIT_NOT_EXECUTABLE || code == EXIT_NOT_FOUND) || !said.contains(ENGINE_EXEC_FAILED) {
        return None;
    }
    let not_found = ["executable file not found", "no such file or directory"].iter().any(|m| said.contains(m));
    Some(if not_found { EXIT_NOT_FOUND } else { EXIT_NOT_EXECUTABLE })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_the_engine_cannot_find_is_127_even_when_docker_says_126() {
        let said = "OCI runtime exec failed: exec failed: unable to start container process: exec: \"nope\": executable file not found in $PATH: unknown";
        assert_eq!(engine_exec_failure(126, said), Some(127));
        assert_eq!(engine_exec_failure(127, said), Some(127));
    }

    #[test]
    fn a_program_the_engine_cannot_execute_is_126() {
        let said = "OCI runtime exec failed: exec failed: unable to start container process: exec: \"/etc/passwd\": permission denied: unknown";
        assert_eq!(engine_exec_failure(126, said), Some(126));
    }

    #[test]
    fn a_command_exiting_126_or_127_by_itself_is_passed_through() {
        assert_eq!(engine_exec_failure(127, "sh: nope: not found"), None);
        assert_eq!(engine_exec_failure(1, "OCI runtime exec failed: ... not found"), None);
    }
}
