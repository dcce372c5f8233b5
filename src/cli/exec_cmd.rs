//! `workroom exec [-t] -- CMD...`: one command in the room through Docker's
//! exec, as the remote user, in the workspace folder, with `remoteEnv`.
//! Stdin, stdout, stderr and the exit status pass through; exec returns as
//! soon as the command ends and reads no byte of stdin after that (see
//! `stdin_pump`).
//!
//! Exit codes: the command's own; 125 when workroom or the engine failed
//! before the command ran (no room, room stopped, engine down) or the room
//! stopped under it; 126/127 when the engine could not execute the program
//! (not executable / not found), said on stderr with a `workroom:` line so
//! it is not mistaken for the command's own 126/127.

use super::stdin_pump::{StdinKind, StdinPump};
use super::terminal::StartEnded;
use super::RoomArgs;
use crate::engine::{Engine, ExecSpec};
use crate::room::hooks::HookContext;
use crate::room::resolve::Room;
use anyhow::bail;
use std::io::Write;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Exit status for failures of workroom or the engine, as `docker exec` uses.
pub const EXIT_WORKROOM_FAILED: i32 = 125;

/// How long exec waits, once a command was killed in a room the engine
/// still calls running, for the engine's word that the room died; and, once
/// the room is known dead, for the command's last output on its way. The
/// engine reports the exec's end first and the room's `die` about 50 ms
/// later (measured on Docker 20.10: the exec's processes are killed as the
/// room's init exits); this leaves room for a loaded engine, and is felt only
/// by a command that was killed on its own.
const DEATH_NEWS_GRACE: Duration = Duration::from_secs(2);

/// Bytes copied from the exec's output per read.
const OUTPUT_CHUNK: usize = 64 * 1024;

/// `remote_env` goes under the room's `remoteEnv` and over the user's
/// probed environment (the devcontainer face's `exec --remote-env
/// NAME=VALUE`, as the reference orders them).
pub async fn run(
    args: &RoomArgs,
    tty: bool,
    argv: Vec<String>,
    remote_env: &[(String, String)],
) -> anyhow::Result<i32> {
    let request = crate::config::LoadRequest::new(&args.workspace.workspace_folder, args.workspace.config.clone());
    match run_with(args.room.as_deref(), &request, tty, argv, remote_env).await {
        Ok(code) => Ok(code),
        Err(e) => {
            let chain: Vec<String> = e.chain().map(ToString::to_string).collect();
            eprintln!("workroom: {}", chain.join(": "));
            Ok(EXIT_WORKROOM_FAILED)
        }
    }
}

/// [`run`] in the room named, else the workspace's, its configuration
/// read as `request` says (the devcontainer face's `--override-config`):
/// the command's status, or why workroom could not run it (for the caller
/// to say, with its own status).
pub async fn run_with(
    room: Option<&str>,
    request: &crate::config::LoadRequest,
    tty: bool,
    argv: Vec<String>,
    remote_env: &[(String, String)],
) -> anyhow::Result<i32> {
    let stdin = StdinKind::of_stdin();
    if tty && stdin == StdinKind::Data {
        // The engine ends a terminal's output when its input ends, so a
        // piped stdin would cut the command's output short.
        bail!("-t gives the command a terminal, but stdin is a pipe or a file; drop -t to pass stdin to the command");
    }
    let engine = Engine::connect().await?;
    let (room, resolved) = crate::room::resolve::running_from(&engine, room, request).await?;
    let user = room.remote_user();
    let container_env = crate::room::container_env(&room.container);
    let metadata = crate::room::metadata_of(&resolved.loaded, &room.container);
    let said = super::on_stderr();
    let mut ctx = HookContext::new(&resolved.loaded, &metadata.merged, &user, &container_env, &said);
    // The user environment `up` probed for this start, then the command
    // line's, then remoteEnv, each over the one before, as the reference
    // orders them.
    let mut probed = crate::room::ready::probed_env(&room.id, room.started_at()).unwrap_or_default();
    if tty {
        // The probe ran without a terminal: a TERM it found is the
        // room's own (Podman puts TERM=xterm in every container's env),
        // not this terminal's, which a pane gets and so does `exec -t`.
        probed.remove("TERM");
    }
    let remote = std::mem::take(&mut ctx.env);
    ctx.env = probed.into_iter().chain(remote_env.iter().cloned()).chain(remote).collect();
    ctx.env.extend(crate::forward::room_env(&room.name));
    if tty {
        // One TERM for panes and `exec -t`: this terminal's (docker would say `xterm`).
        ctx.env = super::shell_cmd::terminal_env(std::mem::take(&mut ctx.env), |n| std::env::var(n).ok());
        for (name, value) in room_locale(&engine, &room, &ctx.env).await {
            ctx.env.entry(name).or_insert(value);
        }
    }
    let spec = ExecSpec {
        argv,
        user: Some(user),
        env: ctx.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        workdir: Some(ctx.cwd.clone()),
        tty,
        // Nothing to carry from /dev/null: the command gets the engine's
        // empty stdin (or, with -t, a terminal no one types into).
        stdin: stdin != StdinKind::Null,
        detach_keys: None,
    };
    run_exec(&engine, &room, &spec).await
}

/// How long `exec -t` waits for the room to choose its locale: the daemon
/// binary answers in a few milliseconds after the exec starts; past this
/// the command runs without one rather than wait on a stuck engine.
const LOCALE_WAIT: Duration = Duration::from_secs(5);

/// The `LANG`/`LC_*` for a terminal command, as a pane gets them: this
/// host's when the room has that locale, else `C.UTF-8` where its C library
/// provides it. Only the room can tell, so its daemon binary chooses (one
/// short exec, paid by `-t` alone); a daemon too old for that, or any
/// failure, gives none, as before.
async fn room_locale(
    engine: &Engine,
    room: &Room,
    env: &std::collections::BTreeMap<String, String>,
) -> std::collections::BTreeMap<String, String> {
    let mut argv = vec![workroomd::room::DAEMON_PATH.to_string(), "locale".to_string()];
    for name in env.keys().filter(|k| *k == "LANG" || k.starts_with("LC_")) {
        argv.extend(["--keep".to_string(), name.clone()]);
    }
    argv.extend(super::shell_cmd::host_locale().into_iter().map(|(k, v)| format!("{k}={v}")));
    let spec =
        ExecSpec { argv, user: None, env: Vec::new(), workdir: None, tty: false, stdin: false, detach_keys: None };
    let asked = async {
        let mut stream = engine.exec(&room.id, &spec).await.ok()?;
        let mut out = Vec::new();
        stream.output.read_to_end(&mut out).await.ok()?;
        let code = engine.exec_exit_code(&stream.id).await.ok()??;
        (code == 0).then_some(out)
    };
    let Ok(Some(out)) = tokio::time::timeout(LOCALE_WAIT, asked).await else { return Default::default() };
    String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| *k == "LANG" || k.starts_with("LC_"))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Runs `spec` in `room` with our stdio attached; the status to exit with.
async fn run_exec(engine: &Engine, room: &Room, spec: &ExecSpec) -> anyhow::Result<i32> {
    let program = spec.argv[0].as_str();
    // Watched from before the exec starts: the stream replays a death since
    // the room's start, so none is missed. An engine that gives no events
    // leaves the inspect after the command as the only check.
    let died = {
        let (engine, id, started_at) = (engine.clone(), room.id.clone(), room.started_at().to_string());
        async move {
            if !engine.container_died(&id, &started_at).await.unwrap_or(false) {
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::pin!(died);
    let terminal = if spec.tty { workroomd::tty::RawMode::enter() } else { None };
    let mut stream = engine.exec(&room.id, spec).await?;
    if let (true, Some((rows, cols))) = (spec.tty, workroomd::tty::terminal_size(std::io::stdout())) {
        let _ = engine.resize_exec(&stream.id, rows, cols).await;
    }
    let mut stderr_rx = stream.output.take_stderr();
    let pump = if spec.stdin { Some(StdinPump::start(stream.input)?) } else { None };
    let resize_task = spec.tty.then(|| {
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
    // The engine's own complaint when it cannot start the program comes
    // before any byte of the command's, on stdout (Docker 20.10) or stderr
    // (newer engines, Podman): it is held back, and if the exit status
    // confirms it, replaced by our one line; otherwise it was the command's
    // after all.
    let stderr_task = tokio::spawn(async move {
        let mut hold = Hold::default();
        while let Some(chunk) = stderr_rx.recv().await {
            let (earlier, now) = hold.feed(&chunk);
            let _ = std::io::stderr().write_all(&earlier);
            let _ = std::io::stderr().write_all(now);
        }
        hold.into_held()
    });
    let mut out = tokio::io::stdout();
    let mut buf = vec![0u8; OUTPUT_CHUNK];
    let mut hold = Hold::default();
    let mut room_died = false;
    let drain_deadline = tokio::time::sleep(Duration::MAX);
    tokio::pin!(drain_deadline);
    let copied: anyhow::Result<()> = loop {
        let n = tokio::select! {
            read = stream.output.read(&mut buf) => match read {
                Ok(n) => n,
                Err(e) => break Err(e.into()),
            },
            () = &mut died, if !room_died => {
                // The last output may still be on its way: take it, briefly.
                room_died = true;
                drain_deadline.as_mut().reset(tokio::time::Instant::now() + DEATH_NEWS_GRACE);
                continue;
            }
            () = &mut drain_deadline, if room_died => break Ok(()),
        };
        if n == 0 {
            break Ok(());
        }
        let (earlier, now) = hold.feed(&buf[..n]);
        if now.is_empty() {
            continue;
        }
        if !earlier.is_empty() && out.write_all(&earlier).await.is_err() {
            break Ok(());
        }
        if out.write_all(now).await.is_err() {
            break Ok(());
        }
        let _ = out.flush().await;
    };
    let held = hold.into_held();
    if let Some(pump) = pump {
        pump.stop().await;
    }
    drop(terminal);
    if let Some(t) = resize_task {
        t.abort();
    }
    drop(stream.output);
    let err_held = stderr_task.await.unwrap_or_default();
    if let Err(broke) = copied {
        // The stream broke: an engine that is gone says so better than the
        // socket's own error does.
        engine.exec_exit_code(&stream.id).await?;
        return Err(broke);
    }
    if room_died {
        eprintln!("{}", room_ended_line(engine, room, program).await);
        return Ok(EXIT_WORKROOM_FAILED);
    }
    let code = match engine.exec_exit_code(&stream.id).await {
        Ok(code) => code,
        // Podman forgets a room's execs when the room stops or restarts
        // (Docker keeps them): no record is as good as killed.
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e.into()),
    };
    // Killed (as every process of a dying room is), or not ended at all as
    // far as the engine knows: the room's death is the likely cause, and its
    // news may still be on its way.
    if code.is_none_or(|c| c == EXIT_KILLED) && room_stopped(engine, room, &mut died).await {
        eprintln!("{}", room_ended_line(engine, room, program).await);
        return Ok(EXIT_WORKROOM_FAILED);
    }
    let Some(code) = code.map(|c| c as i32) else {
        eprintln!("workroom: the engine did not say how `{program}` ended in {}", room.name);
        return Ok(EXIT_WORKROOM_FAILED);
    };
    let said = String::from_utf8_lossy(&held).into_owned() + &String::from_utf8_lossy(&err_held);
    match engine_exec_failure(code, program, &said) {
        Some(failure) => {
            eprintln!("workroom: cannot run `{program}` in {}: {}", room.name, failure.explain());
            Ok(failure.code())
        }
        None => {
            // Not the engine's: the command's own output after all.
            let _ = out.write_all(&held).await;
            let _ = out.flush().await;
            let _ = std::io::stderr().write_all(&err_held);
            Ok(code)
        }
    }
}

/// The one line for a room whose start ended under `program`: restarted
/// (`docker restart`, the engine's restart policy) as a pane says it, else
/// stopped or removed, with what brings it back.
async fn room_ended_line(engine: &Engine, room: &Room, program: &str) -> String {
    let name = &room.name;
    match super::terminal::start_ended(engine, &room.id, room.started_at()).await {
        StartEnded::Restarted => {
            format!("workroom: {name} restarted while `{program}` ran, which ended it; the room is running again")
        }
        StartEnded::Stopped => format!("workroom: {name} stopped while `{program}` ran; `workroom up` starts it again"),
        StartEnded::Removed => {
            format!("workroom: {name} was removed while `{program}` ran; `workroom up` makes it again")
        }
    }
}

/// What a process killed by SIGKILL exits with (128 + 9): every process of
/// a room that dies ends so, when the kernel ends its PID namespace.
const EXIT_KILLED: i64 = 137;

/// Whether the room died (or restarted) under the command: its state now,
/// else the engine's `die` event within the grace.
async fn room_stopped(
    engine: &Engine,
    room: &Room,
    died: &mut (impl std::future::Future<Output = ()> + Unpin),
) -> bool {
    match engine.inspect_container(&room.id).await {
        Ok(Some(c)) => {
            let state = c.state.as_ref();
            if state.and_then(|s| s.running) != Some(true)
                || state.and_then(|s| s.started_at.as_deref()) != Some(room.started_at())
            {
                return true;
            }
        }
        Ok(None) => return true,
        Err(_) => {}
    }
    tokio::time::timeout(DEATH_NEWS_GRACE, died).await.is_ok()
}

/// How Docker's message begins when it could not start the program.
const ENGINE_EXEC_FAILED: &str = "OCI runtime exec failed";

/// Whether an exec's first output is an engine's complaint that it could
/// not start the program: Docker's, or Podman's, which names its runtime
/// (`Error: runc: exec failed: unable to start container process: …`).
fn engine_complaint_begins(first: &[u8]) -> bool {
    let text = String::from_utf8_lossy(&first[..first.len().min(HOLD_CAP)]);
    text.starts_with(ENGINE_EXEC_FAILED) || (text.starts_with("Error: ") && text.contains("exec failed"))
}

/// The most output held back as an engine's complaint: it is a line or
/// two (Podman's two are some 300 bytes); more is the command's own.
const HOLD_CAP: usize = 4096;

/// One output stream of an exec, with an engine's complaint held back.
/// Docker writes its complaint in one piece; Podman in two (its runtime's
/// line, then one about its attach socket breaking), so once the first
/// piece is held, what follows is held with it, up to [`HOLD_CAP`].
#[derive(Debug, Default)]
struct Hold {
    started: bool,
    holding: bool,
    held: Vec<u8>,
}

impl Hold {
    /// The next piece of output: what to write now, earlier bytes first
    /// (both empty while it is held).
    fn feed<'a>(&mut self, chunk: &'a [u8]) -> (Vec<u8>, &'a [u8]) {
        if !std::mem::replace(&mut self.started, true) && engine_complaint_begins(chunk) {
            self.holding = true;
        }
        if self.holding && self.held.len() + chunk.len() <= HOLD_CAP {
            self.held.extend_from_slice(chunk);
            return (Vec::new(), &[]);
        }
        self.holding = false;
        (std::mem::take(&mut self.held), chunk)
    }

    /// What is still held when the stream ends.
    fn into_held(self) -> Vec<u8> {
        self.held
    }
}

/// `docker exec`'s statuses for a program the engine could not run.
const EXIT_NOT_EXECUTABLE: i32 = 126;
const EXIT_NOT_FOUND: i32 = 127;

/// Why the engine, not the command, failed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum EngineFailure {
    /// A bare name the remote user's PATH does not hold.
    NotInPath,
    /// A path (absolute or relative) that does not exist, or a program
    /// whose `#!` interpreter does not.
    NoSuchFile,
    NotExecutable,
    /// The working folder (the folder, when the engine named it) is not in
    /// the room: the program was never looked for.
    NoFolder(Option<String>),
}

impl EngineFailure {
    fn code(&self) -> i32 {
        match self {
            EngineFailure::NotInPath | EngineFailure::NoSuchFile => EXIT_NOT_FOUND,
            EngineFailure::NotExecutable | EngineFailure::NoFolder(_) => EXIT_NOT_EXECUTABLE,
        }
    }

    fn explain(&self) -> String {
        match self {
            EngineFailure::NotInPath => "not found in the PATH".into(),
            EngineFailure::NoSuchFile => "no such file (or its #! interpreter is missing)".into(),
            EngineFailure::NotExecutable => "not executable".into(),
            EngineFailure::NoFolder(folder) => format!(
                "its working folder {}does not exist in the room; `workspaceFolder` must be a folder the room has \
                 (inside the workspace mount, as `workroom up` warns)",
                folder.as_deref().map(|f| format!("{f} ")).unwrap_or_default()
            ),
        }
    }
}

/// The engine's failure, when the status and its message say the program
/// could not be started: 127 for not found, 126 for not executable. Docker
/// 20.10 reports both as 126 (newer engines say 127 for not found), so the
/// message decides; a 126/127 without that message is the command's own.
fn engine_exec_failure(code: i32, program: &str, said: &str) -> Option<EngineFailure> {
    if !(code == EXIT_NOT_EXECUTABLE || code == EXIT_NOT_FOUND) || !engine_complaint_begins(said.as_bytes()) {
        return None;
    }
    // runc's "chdir to cwd (\"/w\") set in config.json failed: no such file
    // or directory" is the folder's ENOENT, not the program's.
    if let Some(at) = said.find("chdir to ") {
        let folder = said[at..].split_once("cwd (\"").and_then(|(_, rest)| rest.split_once("\")")).map(|(f, _)| f);
        return Some(EngineFailure::NoFolder(folder.map(str::to_string)));
    }
    Some(if said.contains("executable file not found") && !program.contains('/') {
        EngineFailure::NotInPath
    } else if said.contains("no such file or directory") || said.contains("executable file not found") {
        EngineFailure::NoSuchFile
    } else {
        EngineFailure::NotExecutable
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_the_engine_cannot_find_is_127_even_when_docker_says_126() {
        let said = "OCI runtime exec failed: exec failed: unable to start container process: exec: \"nope\": executable file not found in $PATH: unknown";
        assert_eq!(engine_exec_failure(126, "nope", said), Some(EngineFailure::NotInPath));
        assert_eq!(engine_exec_failure(127, "nope", said).map(|f| f.code()), Some(127));
        assert_eq!(engine_exec_failure(126, "nope", said).map(|f| f.code()), Some(127));
    }

    #[test]
    fn an_absolute_path_that_does_not_exist_is_no_such_file_not_missing_from_path() {
        let said = "OCI runtime exec failed: exec failed: unable to start container process: exec: \"/nonexistent\": stat /nonexistent: no such file or directory: unknown";
        let failure = engine_exec_failure(126, "/nonexistent", said).unwrap();
        assert_eq!(failure, EngineFailure::NoSuchFile);
        assert_eq!(failure.code(), 127);
        assert!(!failure.explain().contains("PATH"), "{}", failure.explain());
    }

    #[test]
    fn a_program_the_engine_cannot_execute_is_126() {
        let said = "OCI runtime exec failed: exec failed: unable to start container process: exec: \"/etc/passwd\": permission denied: unknown";
        assert_eq!(engine_exec_failure(126, "/etc/passwd", said), Some(EngineFailure::NotExecutable));
    }

    #[test]
    fn a_working_folder_missing_from_the_room_is_named_not_taken_for_a_missing_program() {
        let said = "OCI runtime exec failed: exec failed: unable to start container process: chdir to cwd (\"/w\") set in config.json failed: no such file or directory: unknown";
        let failure = engine_exec_failure(126, "sh", said).unwrap();
        assert_eq!(failure, EngineFailure::NoFolder(Some("/w".into())));
        assert_eq!(failure.code(), 126);
        assert!(
            failure.explain().starts_with("its working folder /w does not exist in the room"),
            "{}",
            failure.explain()
        );
    }

    /// What Podman 4.3 (runc) wrote on the exec's stream for a program
    /// not in the PATH, in two pieces.
    const PODMAN_NOT_FOUND: [&str; 2] = [
        "Error: runc: exec failed: unable to start container process: exec: \"nope\": executable file not found \
         in $PATH: OCI runtime attempted to invoke a command that was not found\n",
        "Error: read unixpacket @->/proc/self/fd/14/attach: read: connection reset by peer\n",
    ];

    #[test]
    fn podmans_complaint_in_two_pieces_is_held_whole_and_read_as_the_engines() {
        let mut hold = Hold::default();
        for piece in PODMAN_NOT_FOUND {
            let (earlier, now) = hold.feed(piece.as_bytes());
            assert!(earlier.is_empty() && now.is_empty(), "{piece} was let through");
        }
        let said = String::from_utf8(hold.into_held()).unwrap();
        assert_eq!(said, PODMAN_NOT_FOUND.concat());
        assert_eq!(engine_exec_failure(127, "nope", &said), Some(EngineFailure::NotInPath));
        let chdir = "Error: runc: exec failed: unable to start container process: chdir to cwd (\"/w\") set in \
                     config.json failed: no such file or directory: OCI runtime attempted to invoke a command that was \
                     not found\n";
        assert_eq!(engine_exec_failure(127, "sh", chdir), Some(EngineFailure::NoFolder(Some("/w".into()))));
    }

    #[test]
    fn output_that_does_not_begin_with_a_complaint_is_written_as_it_comes() {
        let mut hold = Hold::default();
        let (earlier, now) = hold.feed(b"hello\n");
        assert_eq!((earlier.as_slice(), now), (&b""[..], &b"hello\n"[..]));
        let (earlier, now) = hold.feed(PODMAN_NOT_FOUND[0].as_bytes());
        assert!(earlier.is_empty() && now == PODMAN_NOT_FOUND[0].as_bytes(), "only the first piece may be held");
        assert!(hold.into_held().is_empty());
    }

    #[test]
    fn a_held_beginning_followed_by_more_than_a_complaint_is_let_through_in_order() {
        let mut hold = Hold::default();
        let _ = hold.feed(PODMAN_NOT_FOUND[0].as_bytes());
        let long = vec![b'x'; HOLD_CAP];
        let (earlier, now) = hold.feed(&long);
        assert_eq!(earlier, PODMAN_NOT_FOUND[0].as_bytes());
        assert_eq!(now, &long[..]);
        let (earlier, now) = hold.feed(b"more");
        assert_eq!((earlier.as_slice(), now), (&b""[..], &b"more"[..]));
        assert!(hold.into_held().is_empty());
    }

    #[test]
    fn a_command_exiting_126_or_127_by_itself_is_passed_through() {
        assert_eq!(engine_exec_failure(127, "nope", "sh: nope: not found"), None);
        assert_eq!(engine_exec_failure(1, "nope", "OCI runtime exec failed: ... not found"), None);
    }
}
