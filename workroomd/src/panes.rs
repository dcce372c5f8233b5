//! The daemon's panes: the table (carried in the daemon's `State`), the
//! requests on them, and the screens kept in the state folder so that a
//! pane lost to a container restart can still show what it last showed.
//!
//! Screens are saved at most every [`SAVE_INTERVAL`], only when they changed
//! (a pane printing without pause costs one small write a second, not one
//! per chunk). A save replaces the file whole (`workroomd::atomic`).
//!
//! A pane opened under the name of one that ended with a restart starts
//! with that pane's last screen and a separator line in its own model, so
//! every client sees it above the new shell, and `capture` too.
//!
//! A pane whose program exited stays in the table (tmux's
//! `remain-on-exit`): listed with its status, its screen and history
//! readable, refusing input, until `kill-pane` removes it or an `OpenPane`
//! with `replace_exited` puts a new pane in its place. The new pane starts
//! blank, unlike one replacing a pane lost to a restart: a script that
//! starts a command again and waits for its prompt must not find the old
//! run's prompt.

use crate::pane::{self, Next, Pane, PaneError};
use crate::state::State;
use crate::{locale, spawn};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use workroomd::proto::{
    CaptureRequest, EndedPane, Event, ExitStatus, PaneInfo, PaneRequest, Response, StreamError, StreamHandle, Typist,
};
use workroomd::room;
use workroomd::term::Limits;

/// How often changed screens are written to the state folder.
const SAVE_INTERVAL: Duration = Duration::from_secs(1);
/// How long a hung-up pane may take to end before it is killed.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// The longest `kill-pane` waits between looks at whether the pane has
/// ended; the pane's change count wakes it sooner (its end counts), this
/// bounds a wake-up lost between a look and the wait.
const KILL_POLL: Duration = Duration::from_millis(20);
/// How long a capture with `changed_since` waits for a change before it
/// answers anyway: a host that went away holds nothing for longer, and
/// `workroom wait` asks again.
const CAPTURE_WAIT: Duration = Duration::from_secs(10);
const MAX_NAME: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum PanesError {
    #[error("pane name {0:?} is not allowed: use letters, digits, '.', '_' or '-' (at most {MAX_NAME})")]
    BadName(String),
    #[error("there is no pane {0} in this room; `workroom panes` lists them")]
    NoPane(String),
    #[error("an empty command for pane {0}")]
    EmptyCommand(String),
    #[error("cannot type into pane {name}: its program {how}; `workroom shell -d {name}` starts a new one")]
    TypeIntoExited { name: String, how: String },
    #[error("cannot start pane {name}")]
    Start {
        name: String,
        #[source]
        source: PaneError,
    },
    #[error("cannot resize pane {name}")]
    Resize {
        name: String,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Default)]
pub struct Panes {
    live: Mutex<BTreeMap<String, Arc<Pane>>>,
    /// Panes whose screens were saved by an earlier boot of the room.
    ended: Mutex<BTreeMap<String, EndedPane>>,
}

fn dir() -> PathBuf {
    PathBuf::from(room::STATE_DIR).join("panes")
}

/// What a saved pane looks like on disk, beside its `.screen`.
#[derive(serde::Serialize, serde::Deserialize)]
struct SavedMeta {
    boot_id: String,
    command: Vec<String>,
    created_unix_ms: u64,
    /// Set once its program exited (absent from daemons before exited
    /// panes stayed).
    #[serde(default)]
    exited: Option<ExitStatus>,
}

impl Panes {
    pub fn get(&self, name: &str) -> Option<Arc<Pane>> {
        workroomd::locks::lock(&self.live).get(name).cloned()
    }

    fn pane(&self, name: &str) -> Result<Arc<Pane>, PanesError> {
        self.get(name).ok_or_else(|| PanesError::NoPane(name.to_string()))
    }

    pub fn all(&self) -> Vec<Arc<Pane>> {
        workroomd::locks::lock(&self.live).values().cloned().collect()
    }

    /// Puts a pane in the table (in place of any of its name) and watches
    /// it until its program ends; it stays in the table after that.
    pub fn insert(&self, pane: Arc<Pane>) {
        workroomd::locks::lock(&self.live).insert(pane.name.clone(), pane.clone());
        if pane.exit_status().is_some() {
            return;
        }
        tokio::spawn(async move {
            let status = pane.clone().run().await;
            tracing::info!(pane = %pane.name, "the pane's program {}", status.describe());
        });
    }

    /// Takes `pane` out of the table (if it is still the one of its name)
    /// and forgets its saved screen.
    fn remove(&self, pane: &Arc<Pane>) {
        let mut live = workroomd::locks::lock(&self.live);
        if live.get(&pane.name).is_some_and(|p| Arc::ptr_eq(p, pane)) {
            live.remove(&pane.name);
            forget_saved(&pane.name);
        }
    }

    /// At a fresh start: panes saved by a previous boot ended with it.
    pub fn load_ended(&self, boot_id: &str, started_unix_ms: u64) {
        let Ok(entries) = std::fs::read_dir(dir()) else { return };
        let mut ended = workroomd::locks::lock(&self.ended);
        for entry in entries.flatten() {
            let path = entry.path();
            let (Some(name), Some("json")) =
                (path.file_stem().and_then(|s| s.to_str()), path.extension().and_then(|s| s.to_str()))
            else {
                continue;
            };
            let Some(meta) = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice::<SavedMeta>(&b).ok())
            else {
                continue;
            };
            if meta.boot_id == boot_id {
                continue;
            }
            let screen = std::fs::read(path.with_extension("screen")).ok();
            let how = match meta.exited {
                Some(status) => format!("ended ({}) before the room restarted at", status.summary()),
                None => "ended when the room restarted at".to_string(),
            };
            ended.insert(
                name.to_string(),
                EndedPane {
                    message: format!(
                        "pane {name} {how} {}{}",
                        workroomd::clock::utc(started_unix_ms),
                        if screen.is_some() { "" } else { " (its screen was not kept)" }
                    ),
                    screen: screen.map(|s| String::from_utf8_lossy(&s).into_owned()),
                    status: None,
                },
            );
        }
    }
}

/// Writes changed screens every [`SAVE_INTERVAL`], for the daemon's life.
pub async fn keep_screens(state: Arc<State>) {
    let _ = std::fs::create_dir_all(dir());
    let mut tick = tokio::time::interval(SAVE_INTERVAL);
    loop {
        tick.tick().await;
        for pane in state.panes.all() {
            if let Some(screen) = pane.take_dirty_screen() {
                save(&pane, &screen, &state.boot_id);
            }
        }
    }
}

fn save(pane: &Pane, screen: &[u8], boot_id: &str) {
    let meta = SavedMeta {
        boot_id: boot_id.into(),
        command: pane.command.clone(),
        created_unix_ms: pane.created_unix_ms,
        exited: pane.exit_status(),
    };
    let base = dir().join(&pane.name);
    let _ = workroomd::atomic::write(&base.with_extension("screen"), screen);
    let _ = workroomd::atomic::write(&base.with_extension("json"), &serde_json::to_vec(&meta).unwrap_or_default());
}

fn forget_saved(name: &str) {
    let base = dir().join(name);
    let _ = std::fs::remove_file(base.with_extension("json"));
    let _ = std::fs::remove_file(base.with_extension("screen"));
}

pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// What a pane replacing one that ended with a restart shows first: the
/// old screen, then a separator naming what happened.
fn replaced_preamble(name: &str, ended: &EndedPane) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(screen) = &ended.screen {
        out.extend_from_slice(screen.as_bytes());
        out.extend_from_slice(b"\x1b[0m\r\n");
    }
    // Two short lines rather than one that a narrow window would wrap.
    out.extend_from_slice(
        format!("\x1b[2m── {} ──\r\n── a new pane {name} starts ──\x1b[0m\r\n", ended.message).as_bytes(),
    );
    out
}

pub async fn open(state: &State, handle: &StreamHandle, request: PaneRequest) -> Result<(), StreamError> {
    let reply = match open_pane(state, request) {
        Ok(r) => r,
        Err(e) => Response::failed(&e),
    };
    handle.reply(reply).await
}

fn open_pane(state: &State, request: PaneRequest) -> Result<Response, PanesError> {
    let name = request.name.clone();
    if !valid_name(&name) {
        return Err(PanesError::BadName(name));
    }
    let panes = &state.panes;
    let mut replaced = None;
    if let Some(pane) = panes.get(&name) {
        match pane.exit_status() {
            Some(status) if request.replace_exited => replaced = Some(status),
            // A live pane, or an exited one left for an attach to show.
            _ => return Ok(Response::PaneOpened { pane: pane.info(), created: false, ended: None, replaced: None }),
        }
    }
    let start = |source: PaneError| PanesError::Start { name: name.clone(), source };
    let user = spawn::resolve(request.user.as_deref().unwrap_or("root")).map_err(|e| start(e.into()))?;
    let ended = workroomd::locks::lock(&panes.ended).get(&name).cloned();
    let mut preamble = ended.as_ref().map(|e| replaced_preamble(&name, e)).unwrap_or_default();
    let mut env = request.env.clone();
    // The login shell runs the pane, or runs its command (`login_shell`):
    // either way the one that can run, with a note when it is not the
    // passwd's.
    let mut pick_shell = |env: &mut BTreeMap<String, String>| -> Result<String, PanesError> {
        let env_shell = env.get("SHELL").cloned().or_else(|| std::env::var("SHELL").ok());
        let shell =
            spawn::pick_shell(Some(&user), env_shell.as_deref(), spawn::executable).map_err(|e| start(e.into()))?;
        if let Some(note) = &shell.note {
            preamble.extend_from_slice(note.as_bytes());
            preamble.extend_from_slice(b"\r\n");
        }
        env.insert("SHELL".into(), shell.path.clone());
        Ok(shell.path)
    };
    let login_shell = request.login_shell && request.argv.is_some();
    let argv = match request.argv {
        Some(argv) if argv.is_empty() => return Err(PanesError::EmptyCommand(name)),
        Some(argv) => {
            if login_shell {
                pick_shell(&mut env)?;
            }
            argv
        }
        None => vec![pick_shell(&mut env)?, "-l".into()],
    };
    let libc = locale::image_libc();
    let image_sets = |var: &str| request.env.contains_key(var) || std::env::var_os(var).is_some();
    env.extend(locale::choose(&request.locale, image_sets, |n| locale::available(libc, n)));
    let rows = if request.rows == 0 { pane::DEFAULT_ROWS } else { request.rows };
    let cols = if request.cols == 0 { pane::DEFAULT_COLS } else { request.cols };
    let limits = Limits::new(request.history_lines as usize, request.history_bytes as usize);
    let pane = Pane::spawn(
        &name,
        pane::Spawn {
            argv: &argv,
            user: Some(&user),
            env: &env,
            cwd: request.cwd.as_deref(),
            login_shell,
            rows,
            cols,
            limits,
            preamble: &preamble,
        },
    )
    .map_err(start)?;
    let info = pane.info();
    // In place of an exited pane of this name, if there was one.
    panes.insert(pane);
    workroomd::locks::lock(&panes.ended).remove(&name);
    Ok(Response::PaneOpened { pane: info, created: true, ended, replaced })
}

/// A client on a pane: the paint, then the pane's output as it comes,
/// while what the client types goes in; until the pane ends, the client
/// detaches (`Eof`) or its connection goes (a closed terminal).
pub async fn attach(
    state: &State,
    handle: &StreamHandle,
    conn: u64,
    name: &str,
    size: (u16, u16),
    history: bool,
    typist: Option<Typist>,
) -> Result<(), StreamError> {
    let Some(pane) = state.panes.get(name) else {
        let ended = workroomd::locks::lock(&state.panes.ended).get(name).cloned();
        if let Some(ended) = ended {
            handle.reply(Response::PaneEnded(ended)).await?;
            return handle.send_eof().await;
        }
        return handle.reply(Response::failed(&PanesError::NoPane(name.to_string()))).await;
    };
    let Some(attachment) = pane.attach(conn, Some(size), history) else {
        // Its program exited: its last screen (which ends with the status
        // line) and its status, as an attach at its end would have seen.
        let status = pane.exit_status();
        let how = status.map_or_else(|| "ended".to_string(), |s| s.describe());
        let screen = String::from_utf8_lossy(&pane.screen()).into_owned();
        let ended = EndedPane { message: format!("the program of pane {name} {how}"), screen: Some(screen), status };
        handle.reply(Response::PaneEnded(ended)).await?;
        return handle.send_eof().await;
    };
    let id = attachment.id;
    let result = watch(handle, &pane, attachment, typist).await;
    pane.detach(id);
    result
}

async fn watch(
    handle: &StreamHandle,
    pane: &Pane,
    attachment: pane::Attachment,
    typist: Option<Typist>,
) -> Result<(), StreamError> {
    // The typist's count and leave in one step with the reply that carries
    // the count: nothing of an earlier attach is taken after it.
    let (reply, leave) = match typist.map(|t| pane.attach_typist(t)) {
        Some((typed, leave)) => (Response::Attached { typed }, Some(leave)),
        None => (Response::Ready, None),
    };
    handle.reply(reply).await?;
    handle.send_data(&attachment.paint).await?;
    let id = attachment.id;
    let output = async {
        loop {
            let notified = attachment.wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match pane.next(id) {
                Some(Next::Bytes(bytes) | Next::Resync(bytes)) => handle.send_data(&bytes).await?,
                Some(Next::Ended(status)) => {
                    handle.send_exit(status).await?;
                    return handle.send_eof().await;
                }
                Some(Next::Gone) => return handle.send_eof().await,
                None => notified.await,
            }
        }
    };
    // Typing runs beside the output, so a pane that does not read its input
    // never holds back what this client is shown.
    let input = async {
        while let Some(event) = handle.recv().await {
            match event {
                Event::Data(bytes) => {
                    // Refused: this client attached again on another link
                    // (this one was closing), which sends these again.
                    if !pane.type_in(Some(id), leave, bytes.to_vec()).await {
                        return false;
                    }
                }
                // The client detaches; the pane goes on, and this typist
                // will not be back.
                Event::Eof => {
                    if let Some(typist) = typist {
                        pane.forget_typist(typist.id);
                    }
                    return true;
                }
                _ => return false,
            }
        }
        false
    };
    tokio::select! {
        result = output => result,
        detached = input => if detached { handle.send_eof().await } else { Ok(()) },
    }
}

pub async fn resize(
    state: &State,
    handle: &StreamHandle,
    conn: u64,
    name: &str,
    rows: u16,
    cols: u16,
) -> Result<(), StreamError> {
    let resized = state.panes.pane(name).and_then(|pane| {
        pane.resize(conn, rows, cols).map_err(|source| PanesError::Resize { name: name.to_string(), source })
    });
    handle.reply(resized.map_or_else(|e| Response::failed(&e), |()| Response::Done)).await
}

pub async fn list(state: &State, handle: &StreamHandle) -> Result<(), StreamError> {
    let panes: Vec<PaneInfo> = state.panes.all().iter().map(|p| p.info()).collect();
    handle.reply(Response::Panes { panes }).await
}

pub async fn capture(state: &State, handle: &StreamHandle, request: CaptureRequest) -> Result<(), StreamError> {
    let pane = match state.panes.pane(&request.pane) {
        Ok(p) => p,
        Err(e) => return handle.reply(Response::failed(&e)).await,
    };
    // An exited pane will not change again: no use waiting.
    if let (Some(since), None) = (request.changed_since, pane.exit_status()) {
        let mut changes = pane.changes();
        if *changes.borrow_and_update() == since {
            let _ = tokio::time::timeout(CAPTURE_WAIT, changes.changed()).await;
        }
    }
    let lines = request.lines.map(|n| n as usize);
    let (changes, text) = pane.capture(lines, request.escapes, !request.screen_only);
    let (rows, cols) = pane.size();
    let exited = pane.exit_status();
    handle.reply(Response::Captured { changes, rows, cols, exited }).await?;
    handle.send_data(&text).await?;
    handle.send_eof().await
}

pub async fn type_in(state: &State, handle: &StreamHandle, name: &str, text: String) -> Result<(), StreamError> {
    let pane = match state.panes.pane(name) {
        Ok(pane) => pane,
        Err(e) => return handle.reply(Response::failed(&e)).await,
    };
    if let Some(status) = pane.exit_status() {
        let error = PanesError::TypeIntoExited { name: name.to_string(), how: status.describe() };
        return handle.reply(Response::failed(&error)).await;
    }
    pane.type_in(None, None, text.into_bytes()).await;
    handle.reply(Response::Done).await
}

pub async fn kill(state: &State, handle: &StreamHandle, name: &str) -> Result<(), StreamError> {
    let pane = match state.panes.pane(name) {
        Ok(p) => p,
        Err(e) => return handle.reply(Response::failed(&e)).await,
    };
    // A running pane is hung up and waited for, so its clients see its
    // status line and end; an exited one is just removed.
    pane.hang_up();
    let deadline = tokio::time::Instant::now() + KILL_GRACE;
    let mut killed = false;
    let mut changes = pane.changes();
    while pane.exit_status().is_none() {
        if !killed && tokio::time::Instant::now() >= deadline {
            pane.kill();
            killed = true;
        }
        let _ = tokio::time::timeout(KILL_POLL, changes.changed()).await;
    }
    state.panes.remove(&pane);
    handle.reply(Response::Done).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How long a test waits for a pane's program to end; a guard, not a pause.
    const END_GUARD: Duration = Duration::from_secs(20);

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    async fn ended(pane: &Pane) -> ExitStatus {
        let mut changes = pane.changes();
        let deadline = tokio::time::Instant::now() + END_GUARD;
        loop {
            if let Some(status) = pane.exit_status() {
                return status;
            }
            assert!(tokio::time::Instant::now() < deadline, "the pane's program never ended");
            let _ = tokio::time::timeout(KILL_POLL, changes.changed()).await;
        }
    }

    fn sh(name: &str, script: &str, replace_exited: bool) -> PaneRequest {
        PaneRequest {
            name: name.into(),
            argv: Some(vec!["/bin/sh".into(), "-c".into(), script.into()]),
            replace_exited,
            ..Default::default()
        }
    }

    fn opened(reply: Response) -> (PaneInfo, bool, Option<ExitStatus>) {
        match reply {
            Response::PaneOpened { pane, created, replaced, .. } => (pane, created, replaced),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_exited_pane_stays_listed_with_its_status_line_and_is_replaced_only_when_asked() {
        let folder = tempfile::tempdir().unwrap();
        let state = State::load("test-boot".into(), folder.path().to_path_buf());
        runtime().block_on(async {
            let script = "echo in-$WORKROOM_PANE; exit 3";
            let (_, created, _) = opened(open_pane(&state, sh("agent", script, true)).unwrap());
            assert!(created);
            let pane = state.panes.get("agent").unwrap();
            let three = ExitStatus { code: Some(3), signal: None };
            assert_eq!(ended(&pane).await, three);
            // Still in the table, with its status, its screen readable and the
            // status line under what the program wrote.
            let listed: Vec<PaneInfo> = state.panes.all().iter().map(|p| p.info()).collect();
            assert_eq!((listed.len(), listed[0].exited), (1, Some(three)));
            let (_, text) = pane.capture(None, false, true);
            let text = String::from_utf8_lossy(&text);
            assert!(text.contains("in-agent\n[exited with status 3]\n"), "{text:?}");
            assert!(pane.attach(1, Some((24, 80)), true).is_none(), "an attach is answered with its end instead");
            // Opened without replace_exited (an attaching `shell`): left as it is.
            let (info, created, replaced) = opened(open_pane(&state, sh("agent", "exit 0", false)).unwrap());
            assert_eq!((created, info.exited, replaced), (false, Some(three), None));
            assert!(Arc::ptr_eq(&state.panes.get("agent").unwrap(), &pane));
            // With it (`shell -d`): a new pane, saying what it replaced.
            let (info, created, replaced) = opened(open_pane(&state, sh("agent", "read x", true)).unwrap());
            assert_eq!((created, info.exited, replaced), (true, None, Some(three)));
            let new = state.panes.get("agent").unwrap();
            assert!(!Arc::ptr_eq(&new, &pane));
            // A running pane is never replaced.
            let (_, created, replaced) = opened(open_pane(&state, sh("agent", "exit 0", true)).unwrap());
            assert_eq!((created, replaced), (false, None));
            new.kill();
            assert_eq!(ended(&new).await.signal, Some(9));
        });
    }

    #[test]
    fn a_pane_adopted_as_exited_is_never_waited_for_nor_signalled() {
        runtime().block_on(async {
            let (master, _slave) = pane::open_pty_for_tests();
            let exited = ExitStatus { code: Some(0), signal: None };
            // A pid that is surely not a child of this test: its own.
            let adopted = pane::Adopted {
                command: vec!["sh".into()],
                pid: std::process::id() as i32,
                created_unix_ms: 0,
                rows: 24,
                cols: 80,
                limits: Limits::default(),
                exited: Some(exited),
                typed: Vec::new(),
            };
            let pane = Pane::adopt("old", adopted, master, b"last screen").unwrap();
            let panes = Panes::default();
            panes.insert(pane.clone());
            pane.hang_up();
            assert_eq!(pane.clone().run().await, exited);
            assert_eq!(panes.get("old").unwrap().info().exited, Some(exited));
            assert!(String::from_utf8_lossy(&pane.screen()).contains("last screen"));
        });
    }

    #[test]
    fn pane_names_that_could_escape_the_state_folder_are_refused() {
        assert!(valid_name("main") && valid_name("agent-2.claude_x"));
        for bad in ["", "../x", "a/b", ".hidden", "a b", &"x".repeat(MAX_NAME + 1)] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_replacing_pane_shows_the_old_screen_above_a_separator() {
        let ended = EndedPane {
            message: "pane main ended when the room restarted at X".into(),
            screen: Some("$ ls".into()),
            status: None,
        };
        let mut term = workroomd::term::Terminal::new(5, 80, Limits::default());
        term.feed(&replaced_preamble("main", &ended));
        assert_eq!(
            term.text(),
            "$ ls\n── pane main ended when the room restarted at X ──\n── a new pane main starts ──\n"
        );
        assert_eq!(term.cursor(), (3, 0));
    }
}
