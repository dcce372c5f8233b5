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

use crate::pane::{self, Next, Pane, PaneError};
use crate::state::State;
use crate::{locale, spawn};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use workroomd::proto::{CaptureRequest, EndedPane, Event, PaneInfo, PaneRequest, Response, StreamError, StreamHandle};
use workroomd::room;
use workroomd::term::Limits;

/// How often changed screens are written to the state folder.
const SAVE_INTERVAL: Duration = Duration::from_secs(1);
/// How long a hung-up pane may take to end before it is killed.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// How often `kill-pane` looks whether the pane has ended (its reader
/// removes it from the table; there is no event to await across tasks yet).
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
    #[error("pane {0} has ended")]
    Ended(String),
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
}

impl Panes {
    pub fn get(&self, name: &str) -> Option<Arc<Pane>> {
        self.live.lock().expect("panes lock").get(name).cloned()
    }

    fn pane(&self, name: &str) -> Result<Arc<Pane>, PanesError> {
        self.get(name).ok_or_else(|| PanesError::NoPane(name.to_string()))
    }

    pub fn all(&self) -> Vec<Arc<Pane>> {
        self.live.lock().expect("panes lock").values().cloned().collect()
    }

    /// Puts a running pane in the table and watches it until it ends.
    pub fn insert(self: &Arc<Self>, pane: Arc<Pane>) {
        self.live.lock().expect("panes lock").insert(pane.name.clone(), pane.clone());
        let panes = self.clone();
        tokio::spawn(async move {
            let status = pane.clone().run().await;
            tracing::info!(pane = %pane.name, "pane ended: {status:?}");
            let mut live = panes.live.lock().expect("panes lock");
            if live.get(&pane.name).is_some_and(|p| Arc::ptr_eq(p, &pane)) {
                live.remove(&pane.name);
            }
            forget_saved(&pane.name);
        });
    }

    /// At a fresh start: panes saved by a previous boot ended with it.
    pub fn load_ended(&self, boot_id: &str, started_unix_ms: u64) {
        let Ok(entries) = std::fs::read_dir(dir()) else { return };
        let mut ended = self.ended.lock().expect("panes lock");
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
            ended.insert(
                name.to_string(),
                EndedPane {
                    message: format!(
                        "pane {name} ended when the room restarted at {}{}",
                        utc(started_unix_ms),
                        if screen.is_some() { "" } else { " (its screen was not kept)" }
                    ),
                    screen: screen.map(|s| String::from_utf8_lossy(&s).into_owned()),
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
    let meta =
        SavedMeta { boot_id: boot_id.into(), command: pane.command.clone(), created_unix_ms: pane.created_unix_ms };
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
    if let Some(pane) = panes.get(&name) {
        return Ok(Response::PaneOpened { pane: pane.info(), created: false, ended: None });
    }
    let start = |source: PaneError| PanesError::Start { name: name.clone(), source };
    let user = spawn::resolve(request.user.as_deref().unwrap_or("root")).map_err(|e| start(e.into()))?;
    let ended = panes.ended.lock().expect("panes lock").get(&name).cloned();
    let mut preamble = ended.as_ref().map(|e| replaced_preamble(&name, e)).unwrap_or_default();
    let mut env = request.env.clone();
    let argv = match request.argv {
        Some(argv) if !argv.is_empty() => argv,
        Some(_) => return Err(PanesError::EmptyCommand(name)),
        None => {
            let env_shell = env.get("SHELL").cloned().or_else(|| std::env::var("SHELL").ok());
            let shell =
                spawn::pick_shell(Some(&user), env_shell.as_deref(), spawn::executable).map_err(|e| start(e.into()))?;
            if let Some(note) = &shell.note {
                preamble.extend_from_slice(note.as_bytes());
                preamble.extend_from_slice(b"\r\n");
            }
            env.insert("SHELL".into(), shell.path.clone());
            vec![shell.path, "-l".into()]
        }
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
            rows,
            cols,
            limits,
            preamble: &preamble,
        },
    )
    .map_err(start)?;
    let info = pane.info();
    panes.insert(pane);
    panes.ended.lock().expect("panes lock").remove(&name);
    Ok(Response::PaneOpened { pane: info, created: true, ended })
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
) -> Result<(), StreamError> {
    let Some(pane) = state.panes.get(name) else {
        let ended = state.panes.ended.lock().expect("panes lock").get(name).cloned();
        if let Some(ended) = ended {
            handle.reply(Response::PaneEnded(ended)).await?;
            return handle.send_eof().await;
        }
        return handle.reply(Response::failed(&PanesError::NoPane(name.to_string()))).await;
    };
    let Some(attachment) = pane.attach(conn, Some(size), history) else {
        return handle.reply(Response::failed(&PanesError::Ended(name.to_string()))).await;
    };
    let id = attachment.id;
    let result = watch(handle, &pane, attachment).await;
    pane.detach(id);
    result
}

async fn watch(handle: &StreamHandle, pane: &Pane, attachment: pane::Attachment) -> Result<(), StreamError> {
    handle.reply(Response::Ready).await?;
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
                Event::Data(bytes) => pane.type_in(Some(id), bytes.to_vec()).await,
                // The client detaches; the pane goes on.
                Event::Eof => return true,
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
    if let Some(since) = request.changed_since {
        let mut changes = pane.changes();
        if *changes.borrow_and_update() == since {
            let _ = tokio::time::timeout(CAPTURE_WAIT, changes.changed()).await;
        }
    }
    let lines = request.lines.map(|n| n as usize);
    let (changes, text) = pane.capture(lines, request.escapes, !request.screen_only);
    let (rows, cols) = pane.size();
    handle.reply(Response::Captured { changes, rows, cols }).await?;
    handle.send_data(&text).await?;
    handle.send_eof().await
}

pub async fn type_in(state: &State, handle: &StreamHandle, name: &str, text: String) -> Result<(), StreamError> {
    match state.panes.pane(name) {
        Ok(pane) => {
            pane.type_in(None, text.into_bytes()).await;
            handle.reply(Response::Done).await
        }
        Err(e) => handle.reply(Response::failed(&e)).await,
    }
}

pub async fn kill(state: &State, handle: &StreamHandle, name: &str) -> Result<(), StreamError> {
    let pane = match state.panes.pane(name) {
        Ok(p) => p,
        Err(e) => return handle.reply(Response::failed(&e)).await,
    };
    pane.hang_up();
    let deadline = tokio::time::Instant::now() + KILL_GRACE;
    let mut killed = false;
    while state.panes.get(name).is_some_and(|p| Arc::ptr_eq(&p, &pane)) {
        if !killed && tokio::time::Instant::now() >= deadline {
            pane.kill();
            killed = true;
        }
        tokio::time::sleep(KILL_POLL).await;
    }
    handle.reply(Response::Done).await
}

/// `2024-05-01 12:34:56 UTC` without a date crate (days to civil date:
/// Howard Hinnant's algorithm).
pub fn utc(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pane_names_that_could_escape_the_state_folder_are_refused() {
        assert!(valid_name("main") && valid_name("agent-2.claude_x"));
        for bad in ["", "../x", "a/b", ".hidden", "a b", &"x".repeat(MAX_NAME + 1)] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn times_read_as_utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_709_210_096_000), "2024-02-29 12:34:56 UTC");
    }

    #[test]
    fn a_replacing_pane_shows_the_old_screen_above_a_separator() {
        let ended =
            EndedPane { message: "pane main ended when the room restarted at X".into(), screen: Some("$ ls".into()) };
        let mut term = workroomd::term::Terminal::new(5, 80, Limits::default());
        term.feed(&replaced_preamble("main", &ended));
        assert_eq!(
            term.text(),
            "$ ls\n── pane main ended when the room restarted at X ──\n── a new pane main starts ──\n"
        );
        assert_eq!(term.cursor(), (3, 0));
    }
}
