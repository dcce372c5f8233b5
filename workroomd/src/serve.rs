//! `workroomd serve`: the room's main process. It binds the daemon socket
//! in a folder only root can enter, answers the host's requests over the
//! link, and supervises the image's own program when asked to.
//!
//! Errors on one connection or request are reported to that peer and logged;
//! they never end the daemon (zellij's rule: only a broken daemon is fatal).

use crate::state::State;
use crate::{bootid, spawn};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;
use workroomd::proto::{
    Event, ExitStatus, Hello, Link, ProgramStatus, Request, Response, Role, RunRequest, StreamHandle,
};
use workroomd::room;

/// Output is read from a child in chunks of this size; each becomes one
/// frame (under the cap), so a chatty program costs few frames.
const READ_CHUNK: usize = 64 * 1024;

/// Docker's delays for restarting a container under `unless-stopped`, which
/// the image's program would have as the main process: 100 ms, doubled
/// after each restart up to a minute, and back to 100 ms once a run lasted
/// 10 s (moby's restartmanager).
const RESTART_FIRST_DELAY: Duration = Duration::from_millis(100);
const RESTART_MAX_DELAY: Duration = Duration::from_secs(60);
const RESTART_RESET_AFTER: Duration = Duration::from_secs(10);

pub struct Options {
    pub program_user: Option<String>,
    /// The image's `WORKDIR`, where Docker would start the program.
    pub program_cwd: Option<String>,
    pub program: Vec<String>,
    /// Metadata entrypoints, run at each start before serving.
    pub entrypoints: Vec<String>,
    /// A worktree room's common git folder: the other worktrees get
    /// stand-ins (`worktrees`).
    pub git_common: Option<String>,
}

/// A `serve` command line that cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ArgsError {
    #[error("{flag} needs {what}")]
    Missing { flag: &'static str, what: &'static str },
    #[error("unknown serve argument {0:?}")]
    Unknown(String),
}

/// What follows `flag` at `i + 1`.
fn value(args: &[String], i: usize, flag: &'static str, what: &'static str) -> Result<String, ArgsError> {
    args.get(i + 1).cloned().ok_or(ArgsError::Missing { flag, what })
}

pub fn parse_args(args: &[String]) -> Result<Options, ArgsError> {
    let mut options = Options {
        program_user: None,
        program_cwd: None,
        program: Vec::new(),
        entrypoints: Vec::new(),
        git_common: None,
    };
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--program-user" => {
                options.program_user = Some(value(args, i, "--program-user", "a user")?);
                i += 2;
            }
            "--entrypoint" => {
                options.entrypoints.push(value(args, i, "--entrypoint", "a command")?);
                i += 2;
            }
            room::GIT_COMMON_ARG => {
                options.git_common = Some(value(args, i, room::GIT_COMMON_ARG, "a folder")?);
                i += 2;
            }
            "--program-cwd" => {
                options.program_cwd = Some(value(args, i, "--program-cwd", "a folder")?);
                i += 2;
            }
            "--" => {
                options.program = args[i + 1..].to_vec();
                break;
            }
            other => return Err(ArgsError::Unknown(other.to_string())),
        }
    }
    Ok(options)
}

pub fn run(args: &[String]) -> i32 {
    crate::log::init();
    // First of all: every exec of the room names DAEMON_PATH.
    let mut argv = vec!["serve".to_string()];
    argv.extend_from_slice(args);
    crate::dist::settle(&argv);
    let options = match parse_args(args) {
        Ok(o) => o,
        Err(e) => {
            tracing::error!("serve: {e}");
            return 2;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("serve: cannot start: {e}");
            return 1;
        }
    };
    runtime.block_on(serve(options))
}

async fn serve(options: Options) -> i32 {
    // Before any child: each starts above the daemon's settled score.
    match crate::oom::settle() {
        Some(s) if s.own < s.started => {
            tracing::info!(
                "OOM order: the daemon lowered its score from {} to {}; its children start at {}",
                s.started,
                s.own,
                s.children
            )
        }
        Some(s) => tracing::info!("OOM order: the daemon's score is {}; its children start at {}", s.own, s.children),
        None => tracing::warn!("OOM order: no /proc/self/oom_score_adj; the daemon's children start at its own score"),
    }
    let mut inherited = crate::handoff::take_inherited();
    if inherited.is_none() {
        // A start, not a hand-off. Before the socket exists, so `up` reaches
        // the daemon, and runs postStart, only once they are done.
        crate::entrypoints::run(&options.entrypoints).await;
    }
    // Before the socket, so no hook or pane runs git before the stand-ins.
    if let Some(common) = &options.git_common {
        crate::worktrees::keep(common.into());
    }
    let listener = match inherited.as_mut().and_then(|i| i.listener.take()) {
        Some(l) => l,
        None => match bind(Path::new(room::RUN_DIR), Path::new(room::SOCKET_PATH)) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(socket = room::SOCKET_PATH, "cannot serve: {e}");
                return 1;
            }
        },
    };
    let state = Arc::new(State::load(bootid::boot_id(), room::STATE_DIR.into()));
    let _ = state.listener_fd.set(std::os::fd::AsRawFd::as_raw_fd(&listener));
    tracing::info!(boot = %state.boot_id, "workroomd {} serving", workroomd::VERSION);
    let adopted = match inherited {
        // A hand-off: the panes and the program run on; adopt them.
        Some(inherited) => crate::handoff::restore(inherited, &state),
        None => {
            state.panes.load_ended(&state.boot_id, state.started_at_unix_ms);
            // A start: postStart from the room's start plan, whoever
            // started it (`up`, `docker restart`, the restart policy).
            crate::hooks::at_start(&state);
            None
        }
    };
    if !options.program.is_empty() {
        tokio::spawn(supervise(state.clone(), options, adopted));
    }
    tokio::spawn(crate::panes::keep_screens(state.clone()));
    if let Some(counter) = crate::oom::counter() {
        tokio::spawn(crate::oom::watch(counter));
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => { tokio::spawn(connection(state.clone(), stream)); }
                Err(e) => tracing::warn!("accept: {e}"),
            },
            Some(_) = async { match term.as_mut() { Some(t) => t.recv().await, None => std::future::pending().await } } => {
                tracing::info!("stopping");
                return 0;
            }
        }
    }
}

/// The socket folder is made (or repaired) 0700 and root's before the socket
/// exists, so there is no moment when another user could reach it.
fn bind(dir: &Path, socket: &Path) -> std::io::Result<UnixListener> {
    std::fs::create_dir_all(dir)?;
    std::os::unix::fs::chown(dir, Some(0), Some(0))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    match std::fs::remove_file(socket) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(socket)?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

async fn connection(state: Arc<State>, stream: tokio::net::UnixStream) {
    // Before a byte is read or written: a process of another room of the
    // peer group reaching the socket through `/proc/<pid>/root` gets nothing.
    if let Err(refused) = state.namespace.admit(&stream) {
        tracing::warn!("refused a connection on {}: {refused}", room::SOCKET_PATH);
        return;
    }
    let ours = Hello::new(Role::Daemon);
    let handshake = match crate::relay::accept(&stream).await {
        // A relay's stdin and stdout carry the link; the socket stays open
        // (the relay waits on it) until this function returns.
        Ok(crate::relay::Accepted::Stdio { input, output }) => {
            // The output is a pipe: forwarded bytes can be spliced into it.
            match workroomd::staging::FdOut::pipe(std::os::fd::AsFd::as_fd(&output)) {
                Ok(out) => {
                    let output = workroomd::staging::PacedPipe::new(output);
                    Link::handshake_spliced(input, output, Box::new(out), ours).await
                }
                Err(e) => {
                    tracing::debug!("the link copies: no second descriptor of its pipe: {e}");
                    Link::handshake_with(input, output, ours).await
                }
            }
        }
        Ok(crate::relay::Accepted::Socket { first }) => {
            let (reader, writer) = stream.into_split();
            let first =
                tokio::io::AsyncReadExt::chain(std::io::Cursor::new(first.into_iter().collect::<Vec<u8>>()), reader);
            let (link, _) = match Link::handshake_with(first, writer, ours).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!("refused a connection: {e}");
                    return;
                }
            };
            return serve_link(state, link).await;
        }
        Err(e) => {
            tracing::debug!("a connection ended before it began: {e}");
            return;
        }
    };
    match handshake {
        Ok((link, _peer)) => serve_link(state, link).await,
        Err(e) => tracing::warn!("refused a connection: {e}"),
    }
    drop(stream);
}

async fn serve_link(state: Arc<State>, link: Link) {
    // Commands a host started end when that host goes away: nobody is left
    // to read them. Hooks are not such commands: they are the daemon's own
    // jobs (`hooks`), which run to their end.
    let (gone, host_gone) = tokio::sync::watch::channel(false);
    let conn = state.next_conn();
    while let Some((request, handle)) = link.accept().await {
        // The offer needs the link itself: the daemon opens streams back.
        if let Request::OfferCredentials { user, ssh_agent, git_credentials } = request {
            let offer =
                crate::credentials::offer(state.clone(), link.clone(), handle, user, ssh_agent, git_credentials);
            tokio::spawn(offer);
            continue;
        }
        if let Request::OfferEgress { port } = request {
            tokio::spawn(crate::egress::offer(state.clone(), link.clone(), handle, port));
            continue;
        }
        tokio::spawn(handle_request(state.clone(), conn, request, handle, host_gone.clone()));
    }
    let _ = gone.send(true);
}

async fn handle_request(
    state: Arc<State>,
    conn: u64,
    request: Request,
    handle: StreamHandle,
    host_gone: tokio::sync::watch::Receiver<bool>,
) {
    let result = match request {
        Request::Status => handle.reply(Response::Status(state.status())).await,
        Request::Users => {
            let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
            let group = std::fs::read_to_string("/etc/group").unwrap_or_default();
            let users = workroomd::users::parse_passwd(&passwd);
            let groups = workroomd::users::parse_group(&group);
            handle.reply(Response::Users { users, groups }).await
        }
        Request::GetMarkers => handle.reply(Response::Markers { markers: state.markers() }).await,
        Request::SetMarker { key, value, expected } => {
            let reply = match state.set_marker(&key, value, expected.map(|e| e.current)) {
                Ok((applied, current)) => Response::MarkerSet { applied, current },
                Err(e) => Response::error(format!("cannot save marker {key}: {e}")),
            };
            handle.reply(reply).await
        }
        Request::RunHook(run) => crate::hooks::handle(&state, &handle, run).await,
        Request::SetStartPlan(plan) => {
            let reply = match crate::hooks::set_plan(&state, &plan) {
                Ok(()) => Response::Done,
                Err(e) => Response::error(format!("cannot keep the start plan: {e}")),
            };
            handle.reply(reply).await
        }
        Request::Echo => echo(&handle).await,
        Request::Run(run) => run_command(&handle, run, host_gone).await,
        Request::Connect { host, port } => crate::forward::connect(&handle, host, port).await,
        Request::OfferCredentials { .. } => {
            handle.reply(Response::error("credentials are offered once per link")).await
        }
        Request::OfferEgress { .. } => handle.reply(Response::error("egress is offered once per link")).await,
        Request::SshAgent | Request::GitCredential { .. } | Request::Egress => {
            handle.reply(Response::error("the daemon asks this of the host, not the other way")).await
        }
        Request::OpenPane(pane) => crate::panes::open(&state, &handle, pane).await,
        Request::Attach { pane, rows, cols, history, typist } => {
            crate::panes::attach(&state, &handle, conn, &pane, (rows, cols), history, typist).await
        }
        Request::ResizePane { pane, rows, cols } => {
            crate::panes::resize(&state, &handle, conn, &pane, rows, cols).await
        }
        Request::ListPanes => crate::panes::list(&state, &handle).await,
        Request::KillPane { pane } => crate::panes::kill(&state, &handle, &pane).await,
        Request::CapturePane(capture) => crate::panes::capture(&state, &handle, capture).await,
        Request::TypeIn { pane, text } => crate::panes::type_in(&state, &handle, &pane, text).await,
        Request::HandOff { binary, force, dry_run } => {
            crate::handoff::handle(&handle, &state, &binary, force, dry_run).await
        }
    };
    if let Err(e) = result {
        tracing::warn!(stream = handle.id(), "{e}");
    }
}

async fn echo(handle: &StreamHandle) -> Result<(), workroomd::proto::StreamError> {
    handle.reply(Response::Ready).await?;
    while let Some(event) = handle.recv().await {
        match event {
            Event::Data(bytes) => handle.send_data(&bytes).await?,
            Event::Eof => return handle.send_eof().await,
            _ => {}
        }
    }
    Ok(())
}

async fn run_command(
    handle: &StreamHandle,
    run: RunRequest,
    mut host_gone: tokio::sync::watch::Receiver<bool>,
) -> Result<(), workroomd::proto::StreamError> {
    let user = match run.user.as_deref().map(spawn::resolve).transpose() {
        Ok(u) => u,
        Err(e) => return handle.reply(Response::failed(&e)).await,
    };
    let mut cmd = match spawn::command(&run.argv, user.as_ref(), &run.env, run.cwd.as_deref(), run.login_shell) {
        Ok(c) => c,
        Err(e) => return handle.reply(Response::failed(&e)).await,
    };
    cmd.stdin(if run.stdin { std::process::Stdio::piped() } else { std::process::Stdio::null() })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return handle.reply(Response::error(format!("cannot run {}: {e}", run.argv[0]))).await,
    };
    handle.reply(Response::Started { pid: child.id().unwrap_or(0) }).await?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let mut stdin = child.stdin.take();
    let pump_out = async {
        let mut buf = vec![0u8; READ_CHUNK];
        while let Ok(n) = stdout.read(&mut buf).await {
            if n == 0 || handle.send_data(&buf[..n]).await.is_err() {
                break;
            }
        }
    };
    let pump_err = async {
        let mut buf = vec![0u8; READ_CHUNK];
        while let Ok(n) = stderr.read(&mut buf).await {
            if n == 0 || handle.send_stderr(&buf[..n]).await.is_err() {
                break;
            }
        }
    };
    let pump_in = async {
        while let Some(event) = handle.recv().await {
            match event {
                Event::Data(bytes) => {
                    if let Some(s) = stdin.as_mut() {
                        if s.write_all(&bytes).await.is_err() {
                            stdin = None;
                        }
                    }
                }
                Event::Eof => stdin = None,
                // The host went away or gave up: end the command.
                Event::Reset(_) => return false,
                _ => {}
            }
        }
        true
    };
    let outputs = async { tokio::join!(pump_out, pump_err) };
    // Ends when the connection does (the sender is dropped or says so).
    let gone = async move {
        let _ = host_gone.wait_for(|gone| *gone).await;
    };
    tokio::pin!(outputs);
    tokio::pin!(pump_in);
    tokio::pin!(gone);
    let mut input_done = false;
    loop {
        tokio::select! {
            _ = &mut outputs => break,
            keep = &mut pump_in, if !input_done => {
                input_done = true;
                if !keep {
                    kill_group(&mut child);
                    return Ok(());
                }
            }
            // The host went away after closing stdin (as hooks do), so no
            // reset reaches `pump_in`: end the command all the same.
            _ = &mut gone => {
                kill_group(&mut child);
                return Ok(());
            }
        }
    }
    let status = child.wait().await;
    let exit = match status {
        Ok(s) => {
            use std::os::unix::process::ExitStatusExt;
            ExitStatus { code: s.code(), signal: s.signal() }
        }
        Err(_) => ExitStatus { code: None, signal: None },
    };
    handle.send_exit(exit).await?;
    handle.send_eof().await
}

/// Kills the command and everything it started: it leads a session of its
/// own (see `spawn::command`), so `sh -c "a; b"` does not leave `b` behind.
fn kill_group(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id() {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
    }
    let _ = child.start_kill();
}

/// Runs the image's program (`overrideCommand: false`) as Docker would run
/// it as the main process (its user, `WORKDIR` and the container's env),
/// keeps its status, and restarts it when it ends, with the delays of the
/// room's `unless-stopped` policy. Its output goes to the daemon's own,
/// which is the container log, and so do its exits and restarts.
/// `adopted` is a program a handed-over daemon left running.
async fn supervise(state: Arc<State>, options: Options, mut adopted: Option<u32>) {
    let user = match options.program_user.as_deref().map(spawn::resolve).transpose() {
        Ok(u) => u,
        Err(e) => {
            tracing::error!(program = %options.program[0], "user {}: {e}", options.program_user.as_deref().unwrap_or_default());
            *state.program.lock().expect("program lock") = ProgramStatus::FailedToStart { message: e.to_string() };
            return;
        }
    };
    let env = std::collections::BTreeMap::new();
    let cwd = options.program_cwd.as_deref().filter(|c| !c.is_empty()).unwrap_or("/");
    let mut delay = RESTART_FIRST_DELAY;
    loop {
        let began = std::time::Instant::now();
        let exit = match adopted.take() {
            Some(pid) => {
                *state.program.lock().expect("program lock") = ProgramStatus::Running { pid };
                crate::handoff::wait_adopted(pid).await
            }
            None => {
                let spawned = spawn::command(&options.program, user.as_ref(), &env, Some(cwd), false)
                    .map_err(|e| crate::report::chain(&e))
                    .and_then(|mut c| {
                        c.stdin(std::process::Stdio::null())
                            .spawn()
                            .map_err(|e| format!("cannot run {}: {e}", options.program[0]))
                    });
                let mut child = match spawned {
                    Ok(c) => c,
                    // As Docker: a program that cannot start is not retried.
                    Err(message) => {
                        tracing::error!(program = %options.program[0], "{message}");
                        *state.program.lock().expect("program lock") = ProgramStatus::FailedToStart { message };
                        return;
                    }
                };
                *state.program.lock().expect("program lock") = ProgramStatus::Running { pid: child.id().unwrap_or(0) };
                use std::os::unix::process::ExitStatusExt;
                match child.wait().await {
                    Ok(s) => ExitStatus { code: s.code(), signal: s.signal() },
                    Err(_) => ExitStatus { code: None, signal: None },
                }
            }
        };
        *state.program.lock().expect("program lock") = ProgramStatus::Exited(exit);
        if began.elapsed() >= RESTART_RESET_AFTER {
            delay = RESTART_FIRST_DELAY;
        }
        let restarts = state.program_restarts.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let how = match (exit.code, exit.signal) {
            (Some(code), _) => format!("with code {code}"),
            (None, Some(signal)) => format!("by signal {signal}"),
            (None, None) => "(status unknown)".to_string(),
        };
        tracing::warn!(
            program = %options.program[0],
            "program {} exited {how}; restarting it in {} ms (restart {restarts}, as the room's unless-stopped policy would)",
            options.program[0],
            delay.as_millis()
        );
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(RESTART_MAX_DELAY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entrypoints_are_kept_in_order_beside_the_program_and_its_user() {
        let args: Vec<String> =
            ["--entrypoint", "/a.sh", "--entrypoint", "b --x", "--program-user", "dev", "--", "/init", "--entrypoint"]
                .map(String::from)
                .into();
        let o = parse_args(&args).unwrap();
        assert_eq!(o.entrypoints, ["/a.sh", "b --x"]);
        assert_eq!(o.program_user.as_deref(), Some("dev"));
        assert_eq!(o.program, ["/init", "--entrypoint"], "after `--` everything is the program's");
        let missing = parse_args(&["--entrypoint".to_string()]).err();
        assert_eq!(missing, Some(ArgsError::Missing { flag: "--entrypoint", what: "a command" }));
        assert_eq!(missing.unwrap().to_string(), "--entrypoint needs a command");
    }

    #[test]
    fn a_worktree_rooms_common_git_folder_is_read_from_its_flag() {
        let args: Vec<String> = ["--git-common", "/home/u/repo/.git", "--", "/init"].map(String::from).into();
        let o = parse_args(&args).unwrap();
        assert_eq!(o.git_common.as_deref(), Some("/home/u/repo/.git"));
        assert_eq!(o.program, ["/init"]);
        assert!(parse_args(&["--git-common".to_string()]).is_err());
    }
}
