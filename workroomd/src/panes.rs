//! The daemon's panes: the table, the requests on them, and the screens kept
//! in the state folder so that a pane lost to a container restart can still
//! say what it last showed.
//!
//! Screens are saved at most every [`SAVE_INTERVAL`], only when they changed
//! (a pane printing without pause costs one small write a second, not one
//! per chunk). A save is a temp file renamed into place.

use crate::pane::{self, Attachment, Pane};
use crate::spawn;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use workroomd::proto::{EndedPane, Event, PaneInfo, PaneRequest, Response, StreamError, StreamHandle};
use workroomd::room;

/// How often changed screens are written to the state folder.
const SAVE_INTERVAL: Duration = Duration::from_secs(1);
/// How long a hung-up pane may take to end before it is killed.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// How often `kill-pane` looks whether the pane has ended (its reader
/// removes it from the table; there is no event to await across tasks yet).
const KILL_POLL: Duration = Duration::from_millis(20);
const MAX_NAME: usize = 64;

#[derive(Default)]
pub struct Panes {
    live: Mutex<BTreeMap<String, Arc<Pane>>>,
    /// Panes whose screens were saved by an earlier boot of the room.
    ended: Mutex<BTreeMap<String, EndedPane>>,
}

static PANES: OnceLock<Panes> = OnceLock::new();

pub fn table() -> &'static Panes {
    PANES.get_or_init(Panes::default)
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

/// At a fresh start: panes saved by a previous boot ended with it.
pub fn load_ended(boot_id: &str, started_unix_ms: u64) {
    let Ok(entries) = std::fs::read_dir(dir()) else { return };
    let mut ended = table().ended.lock().expect("panes lock");
    for entry in entries.flatten() {
        let path = entry.path();
        let (Some(name), Some("json")) =
            (path.file_stem().and_then(|s| s.to_str()), path.extension().and_then(|s| s.to_str()))
        else {
            continue;
        };
        let Some(meta) = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice::<SavedMeta>(&b).ok()) else {
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
                    if screen.is_some() { "; its last screen follows" } else { " (its screen was not kept)" }
                ),
                screen: screen.map(|s| String::from_utf8_lossy(&s).into_owned()),
            },
        );
    }
}

/// Writes changed screens every [`SAVE_INTERVAL`], for the daemon's life.
pub async fn keep_screens(boot_id: String) {
    let _ = std::fs::create_dir_all(dir());
    let mut tick = tokio::time::interval(SAVE_INTERVAL);
    loop {
        tick.tick().await;
        let panes: Vec<Arc<Pane>> = table().live.lock().expect("panes lock").values().cloned().collect();
        for pane in panes {
            if let Some(screen) = pane.take_dirty_screen() {
                save(&pane, &screen, &boot_id);
            }
        }
    }
}

fn save(pane: &Pane, screen: &[u8], boot_id: &str) {
    let meta =
        SavedMeta { boot_id: boot_id.into(), command: pane.command.clone(), created_unix_ms: pane.created_unix_ms };
    let base = dir().join(&pane.name);
    let _ = write_atomic(&base.with_extension("screen"), screen);
    let _ = write_atomic(&base.with_extension("json"), &serde_json::to_vec(&meta).unwrap_or_default());
}

fn forget_saved(name: &str) {
    let base = dir().join(name);
    let _ = std::fs::remove_file(base.with_extension("json"));
    let _ = std::fs::remove_file(base.with_extension("screen"));
}

pub fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

impl Panes {
    pub fn get(&self, name: &str) -> Option<Arc<Pane>> {
        self.live.lock().expect("panes lock").get(name).cloned()
    }

    pub fn all(&self) -> Vec<Arc<Pane>> {
        self.live.lock().expect("panes lock").values().cloned().collect()
    }

    /// Puts a running pane in the table and watches it until it ends.
    pub fn insert(&self, pane: Arc<Pane>) {
        self.live.lock().expect("panes lock").insert(pane.name.clone(), pane.clone());
        tokio::spawn(async move {
            let status = pane.clone().run().await;
            eprintln!("workroomd: pane {} ended: {status:?}", pane.name);
            let mut live = table().live.lock().expect("panes lock");
            if live.get(&pane.name).is_some_and(|p| Arc::ptr_eq(p, &pane)) {
                live.remove(&pane.name);
            }
            forget_saved(&pane.name);
        });
    }
}

pub async fn open(handle: &StreamHandle, request: PaneRequest) -> Result<(), StreamError> {
    let reply = match open_pane(request) {
        Ok(r) => r,
        Err(message) => Response::error(message),
    };
    handle.reply(reply).await
}

fn open_pane(request: PaneRequest) -> Result<Response, String> {
    if !valid_name(&request.name) {
        return Err(format!(
            "pane name {:?} is not allowed: use letters, digits, '.', '_' or '-' (at most {MAX_NAME})",
            request.name
        ));
    }
    let panes = table();
    if let Some(pane) = panes.get(&request.name) {
        return Ok(Response::PaneOpened { pane: pane.info(), created: false, ended: None });
    }
    let user = spawn::resolve(request.user.as_deref().unwrap_or("root"))
        .map_err(|e| format!("user {}: {e}", request.user.as_deref().unwrap_or("root")))?;
    let argv = match request.argv {
        Some(argv) if !argv.is_empty() => argv,
        Some(_) => return Err("an empty command for the pane".into()),
        None => vec![user.login_shell(request.env.get("SHELL").map(String::as_str)), "-l".into()],
    };
    let rows = if request.rows == 0 { pane::DEFAULT_ROWS } else { request.rows };
    let cols = if request.cols == 0 { pane::DEFAULT_COLS } else { request.cols };
    let pane = Pane::spawn(
        &request.name,
        pane::Spawn { argv: &argv, user: Some(&user), env: &request.env, cwd: request.cwd.as_deref(), rows, cols },
    )?;
    let info = pane.info();
    panes.insert(pane);
    let ended = panes.ended.lock().expect("panes lock").remove(&request.name);
    Ok(Response::PaneOpened { pane: info, created: true, ended })
}

pub async fn attach(handle: &StreamHandle, name: &str, rows: u16, cols: u16) -> Result<(), StreamError> {
    let Some(pane) = table().get(name) else {
        let ended = table().ended.lock().expect("panes lock").get(name).cloned();
        if let Some(ended) = ended {
            handle.reply(Response::PaneEnded(ended)).await?;
            return handle.send_eof().await;
        }
        return handle
            .reply(Response::error(format!("there is no pane {name} in this room; `workroom panes` lists them")))
            .await;
    };
    let _ = pane.resize(rows, cols);
    let Some(mut attachment) = pane.attach() else {
        return handle.reply(Response::error(format!("pane {name} has ended"))).await;
    };
    let result = watch(handle, &pane, &mut attachment).await;
    pane.detach(attachment.id);
    result
}

async fn watch(handle: &StreamHandle, pane: &Pane, attachment: &mut Attachment) -> Result<(), StreamError> {
    handle.reply(Response::Ready).await?;
    handle.send_data(&std::mem::take(&mut attachment.repaint)).await?;
    loop {
        tokio::select! {
            chunk = attachment.rx.recv() => match chunk {
                Some(bytes) => {
                    if attachment.lagged.load(Ordering::Acquire) {
                        let repaint = pane.resync(attachment);
                        handle.send_data(&repaint).await?;
                    } else {
                        handle.send_data(&bytes).await?;
                    }
                }
                None => {
                    // The pane ended (or dropped us): its end follows its output.
                    if let Some(status) = pane.ended() {
                        handle.send_exit(status).await?;
                    }
                    return handle.send_eof().await;
                }
            },
            event = handle.recv() => match event {
                Some(Event::Data(bytes)) => pane.type_in(bytes.to_vec()).await,
                // Eof: the client detaches; the pane goes on.
                Some(Event::Eof) => return handle.send_eof().await,
                Some(_) | None => return Ok(()),
            },
        }
    }
}

pub async fn resize(handle: &StreamHandle, name: &str, rows: u16, cols: u16) -> Result<(), StreamError> {
    let reply = match table().get(name) {
        None => Response::error(format!("there is no pane {name}")),
        Some(pane) => match pane.resize(rows, cols) {
            Ok(()) => Response::Done,
            Err(e) => Response::error(format!("cannot resize pane {name}: {e}")),
        },
    };
    handle.reply(reply).await
}

pub async fn list(handle: &StreamHandle) -> Result<(), StreamError> {
    let panes: Vec<PaneInfo> = table().all().iter().map(|p| p.info()).collect();
    handle.reply(Response::Panes { panes }).await
}

pub async fn kill(handle: &StreamHandle, name: &str) -> Result<(), StreamError> {
    let Some(pane) = table().get(name) else {
        return handle.reply(Response::error(format!("there is no pane {name}; `workroom panes` lists them"))).await;
    };
    pane.hang_up();
    let deadline = tokio::time::Instant::now() + KILL_GRACE;
    let mut killed = false;
    while table().get(name).is_some_and(|p| Arc::ptr_eq(&p, &pane)) {
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
}
