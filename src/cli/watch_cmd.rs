//! `workroom watch [--install | --uninstall]`: the watcher that gives rooms
//! the engine starts by itself (after a host reboot) their forwards, and
//! the systemd user unit that runs it at login.

use crate::forward::unit::{self, Installed, Removed};
use crate::forward::watcher;
use crate::notices::{Event, Level, Notices};
use std::sync::Arc;

/// Runs the watcher until SIGTERM or SIGINT; its lines go to stderr (the
/// journal, under systemd).
pub async fn run() -> anyhow::Result<i32> {
    let stderr = super::progress::Stderr::new();
    let log = Arc::new(Notices::streamed(move |e| match e {
        Event::Notice(n) if n.level == Level::Said => stderr.line(&format!("workroom watch: {}", n.text)),
        Event::Notice(n) => stderr.line(&format!("workroom watch: {n}")),
        e => stderr.show(e),
    }));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    tokio::select! {
        ended = watcher::watch(log) => ended.map(|()| 0).map_err(Into::into),
        _ = term.recv() => Ok(0),
        _ = int.recv() => Ok(130),
    }
}

/// `--install`: one line saying what was done, or what to run.
pub fn install() -> anyhow::Result<i32> {
    match unit::install()? {
        Installed::Enabled { unit } => eprintln!(
            "installed {}: `workroom watch` runs now and at each login (`systemctl --user status {}`)",
            unit.display(),
            unit::UNIT_NAME
        ),
        Installed::Written { unit, why } => eprintln!(
            "wrote {}; no systemd user manager answered ({why}): where one runs, \
             `systemctl --user daemon-reload && systemctl --user enable --now {}`",
            unit.display(),
            unit::UNIT_NAME
        ),
    }
    Ok(0)
}

/// `--uninstall`: one line.
pub fn uninstall() -> anyhow::Result<i32> {
    match unit::uninstall()? {
        Removed::Disabled { unit } => eprintln!("stopped {} and removed {}", unit::UNIT_NAME, unit.display()),
        Removed::Removed { unit, why } => {
            eprintln!("removed {} (no systemd user manager answered: {why})", unit.display())
        }
        Removed::Absent { unit } => eprintln!("no unit at {}: nothing to remove", unit.display()),
    }
    Ok(0)
}
