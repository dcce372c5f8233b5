//! `workroom exec` as a person and a script use it: from a real terminal
//! (a pty made here, with a shell that reads the next line after exec), with
//! stdin as /dev/null, closed, a pipe; with the room killed under it; and
//! with programs the engine cannot run.

mod common;
mod pty;

use common::*;
use pty::Term;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Guards against a hang while waiting for output; never a pause.
const GUARD: Duration = Duration::from_secs(60);

/// `workroom exec --workspace-folder <ws> ARGS...` as one shell word list.
fn exec_line(ws: &Workspace, args: &str) -> String {
    format!("{} exec --workspace-folder {} {args}", workroom_bin(), ws.folder())
}

/// Runs `script` with `sh` on a fresh pty, as a terminal would.
fn on_a_terminal(script: &str) -> Term {
    Term::spawn("sh", &["-c", script], 24, 80)
}

/// The room's busybox `sh` has no prompt we can rely on; a computed echo
/// proves the shell in the room evaluated what was typed.
fn room_shell_answers(term: &mut Term) {
    term.send(b"echo in-room-$((40+2))\r");
    term.expect("in-room-42", GUARD);
}

// ---------------------------------------------------------------------------
// Item 1: exec returns when the command ends, and reads no key after that
// ---------------------------------------------------------------------------

/// Before the fix, exec's stdin reader blocked the runtime's shutdown: the
/// output appeared, then nothing until a key was pressed, and that key was
/// eaten. The shell around exec must get the line typed after it.
fn exec_from_a_terminal_returns_at_once_and_leaves_the_next_line_to_the_shell(tty: bool) {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let t = if tty { "-t " } else { "" };
    let mut term =
        on_a_terminal(&format!("{}; echo rc=$?; read x; echo got:$x", exec_line(&ws, &format!("{t}-- id -u"))));
    term.expect("rc=0", GUARD);
    term.send(b"hello\r");
    term.expect("got:hello", GUARD);
    assert_eq!(term.wait(GUARD), 0);
}

#[test]
fn exec_from_a_terminal_returns_when_the_command_ends_and_eats_no_keystroke() {
    exec_from_a_terminal_returns_at_once_and_leaves_the_next_line_to_the_shell(false);
}

#[test]
fn exec_t_from_a_terminal_returns_when_the_command_ends_and_eats_no_keystroke() {
    exec_from_a_terminal_returns_at_once_and_leaves_the_next_line_to_the_shell(true);
}

#[test]
fn exec_t_sh_then_exit_5_returns_5_at_once_and_the_next_line_reaches_the_shell() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let mut term = on_a_terminal(&format!("{}; echo rc=$?; read x; echo got:$x", exec_line(&ws, "-t -- sh")));
    room_shell_answers(&mut term);
    term.send(b"exit 5\r");
    term.expect("rc=5", GUARD);
    term.send(b"hello\r");
    term.expect("got:hello", GUARD);
    assert_eq!(term.wait(GUARD), 0);
}

#[test]
fn exec_from_a_terminal_still_carries_what_is_typed_while_the_command_runs() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let mut term = on_a_terminal(&format!(
        "{}; echo rc=$?",
        exec_line(&ws, "-- sh -c 'echo ready; read line; echo \"read:$line\"; exit 4'")
    ));
    term.expect("ready", GUARD);
    term.send(b"typed\r");
    term.expect("read:typed", GUARD);
    term.expect("rc=4", GUARD);
    assert_eq!(term.wait(GUARD), 0);
}

/// Runs `sh -c SCRIPT` (no terminal) under a guard shorter than a hang.
fn sh_within_guard(script: &str, stdin: Stdio) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new("sh");
    // Its own process group, so a hung workroom under it is killed with it.
    cmd.args(["-c", script]).process_group(0);
    let child = cmd.stdin(stdin).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run sh");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(GUARD) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
            panic!("`{script}` did not finish within {GUARD:?}");
        }
    }
}

#[test]
fn exec_returns_the_commands_status_with_stdin_from_dev_null_closed_or_a_pipe() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let cmd = exec_line(&ws, "-- sh -c 'cat; echo end; exit 3'");
    for (what, script) in [("/dev/null", format!("{cmd} </dev/null")), ("closed", format!("{cmd} <&-"))] {
        let out = sh_within_guard(&script, Stdio::null());
        assert_eq!(out.status.code(), Some(3), "stdin {what}: {}", stderr(&out));
        assert_eq!(stdout(&out), "end\n", "stdin {what}");
    }
    let out = sh_within_guard(&format!("printf 'a\\nb\\n' | {cmd}"), Stdio::null());
    assert_eq!(out.status.code(), Some(3), "stdin a pipe: {}", stderr(&out));
    assert_eq!(stdout(&out), "a\nb\nend\n");
}

#[test]
fn exec_returns_when_the_command_ends_though_its_stdin_pipe_stays_open() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    // Our end of the pipe stays open for the whole test: nothing ever ends
    // exec's stdin, and the command does not read it.
    let (reader, _writer) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let out = sh_within_guard(&exec_line(&ws, "-- sh -c 'exit 6'"), Stdio::from(reader));
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
}

// ---------------------------------------------------------------------------
// Item 2: the room dies under exec
// ---------------------------------------------------------------------------

/// Starts `exec -- sh -c 'echo started; exec sleep 300'` without a terminal
/// and waits for its word that the command runs.
fn long_exec(ws: &Workspace) -> std::process::Child {
    let mut child = ws
        .command(&["exec", "--", "sh", "-c", "echo started; exec sleep 300"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut first).unwrap();
    assert_eq!(first, "started\n", "the command did not start");
    child
}

fn exec_exits_125_saying_the_room_stopped_when(docker_args: &[&str]) {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let child = long_exec(&ws);
    let room = ws.room_name();
    let mut args = docker_args.to_vec();
    args.push(&room);
    docker_ok(&args);
    let out = finish_within(child, &format!("exec after `docker {docker_args:?}` of its room"), GUARD);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains(&format!("{room} stopped while `sh` ran")), "{err}");
}

#[test]
fn exec_exits_125_saying_the_room_stopped_when_the_room_is_killed_under_it() {
    exec_exits_125_saying_the_room_stopped_when(&["kill"]);
}

#[test]
fn exec_exits_125_saying_the_room_stopped_when_the_room_is_stopped_under_it() {
    exec_exits_125_saying_the_room_stopped_when(&["stop", "-t", "1"]);
}

/// Issue 28 item 7: after `docker restart` exec said the room "stopped …
/// `workroom up` starts it again" while it was running again.
#[test]
fn exec_says_the_room_restarted_not_stopped_when_docker_restart_runs_under_it() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let child = long_exec(&ws);
    let room = ws.room_name();
    docker_ok(&["restart", "-t", "1", &room]);
    let out = finish_within(child, "exec after `docker restart` of its room", GUARD);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains(&format!("{room} restarted while `sh` ran")), "{err}");
    assert!(!err.contains("stopped") && !err.contains("workroom up"), "{err}");
    assert_eq!(docker_ok(&["inspect", "-f", "{{.State.Running}}", &room]), "true");
}

fn exec_t_on_a_terminal_exits_125_saying_the_room_stopped_when(docker_args: &[&str]) {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let mut term = on_a_terminal(&format!("{}; echo rc=$?", exec_line(&ws, "-t -- sh")));
    room_shell_answers(&mut term);
    let room = ws.room_name();
    docker_ok(&[docker_args, &[room.as_str()]].concat());
    let shown = term.expect("rc=", GUARD);
    assert!(shown.contains(&format!("{room} stopped while `sh` ran")), "{shown}");
    term.expect("125", GUARD);
    assert_eq!(term.wait(GUARD), 0);
}

#[test]
fn exec_t_on_a_terminal_exits_125_saying_the_room_stopped_when_the_room_is_killed_under_it() {
    exec_t_on_a_terminal_exits_125_saying_the_room_stopped_when(&["kill"]);
}

#[test]
fn exec_t_on_a_terminal_exits_125_saying_the_room_stopped_when_the_room_is_stopped_under_it() {
    exec_t_on_a_terminal_exits_125_saying_the_room_stopped_when(&["stop", "-t", "1"]);
}

#[test]
fn a_command_killed_by_itself_in_a_live_room_keeps_its_own_status() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let out = ws.exec(&["sh", "-c", "kill -9 $$"]);
    assert_eq!(out.status.code(), Some(137), "{}", stderr(&out));
    assert!(!stderr(&out).contains("stopped"), "{}", stderr(&out));
}

// ---------------------------------------------------------------------------
// Item 3: what exec says when the engine cannot run the program
// ---------------------------------------------------------------------------

#[test]
fn exec_of_an_absolute_path_that_does_not_exist_says_no_such_file_not_path_and_no_engine_line() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let out = ws.exec(&["/nonexistent"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(127), "{err}");
    assert_eq!(err.lines().count(), 1, "only our line: {err}");
    assert!(err.starts_with("workroom: cannot run `/nonexistent`") && err.contains("no such file"), "{err}");
    assert!(!err.contains("PATH") && !err.contains("OCI runtime"), "{err}");
    assert_eq!(stdout(&out), "");
}

#[test]
fn exec_never_prints_the_engines_raw_oci_runtime_line() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    for (argv, code, says) in
        [("workroom-no-such-program", 127, "not found in the PATH"), ("/etc/passwd", 126, "not executable")]
    {
        let out = ws.exec(&[argv]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(code), "{argv}: {err}");
        assert_eq!(err.lines().count(), 1, "{argv}: only our line: {err}");
        assert!(err.contains(says) && !err.contains("OCI runtime"), "{argv}: {err}");
        assert_eq!(stdout(&out), "", "{argv}");
    }
}

#[test]
fn exec_t_on_a_terminal_prints_only_our_line_for_a_program_that_does_not_exist() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let mut term = on_a_terminal(&format!("{}; echo rc=$?", exec_line(&ws, "-t -- /nonexistent")));
    let shown = term.expect("rc=127", GUARD);
    assert!(shown.contains("cannot run `/nonexistent`"), "{shown}");
    assert!(!shown.contains("OCI runtime") && !shown.contains("PATH"), "{shown}");
    assert_eq!(term.wait(GUARD), 0);
}

#[test]
fn exec_t_with_stdin_from_dev_null_runs_the_command_instead_of_exiting_125_silently() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let out =
        sh_within_guard(&format!("{} </dev/null", exec_line(&ws, "-t -- sh -c 'echo hi; exit 4'")), Stdio::null());
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert_eq!(stdout(&out), "hi\r\n", "a terminal's line ending");
}

#[test]
fn exec_t_with_piped_stdin_says_in_one_line_why_it_does_not_run() {
    let ws = Workspace::image(BUSYBOX);
    ws.up();
    let out = sh_within_guard(&format!("echo data | {}", exec_line(&ws, "-t -- cat")), Stdio::null());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("-t") && err.contains("drop -t"), "{err}");
}
