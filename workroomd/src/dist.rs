//! A room started from the engine's daemon volume (`/.workroom/dist`, read-only,
//! shared by the rooms of one daemon digest; ADR 0002): before anything
//! else, `serve` makes [`room::DAEMON_PATH`], the path every exec names, a
//! link to itself, or hands over to the binary a hand-off installed there.
//!
//! A hand-off renames its binary over the link, and the room's entrypoint
//! still names the volume's older daemon: at the next start that daemon
//! finds a file where its link was and `exec`s it, so the hand-off holds
//! across restarts as it does in a room whose daemon was uploaded.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use workroomd::room;

/// What a daemon started from the volume does first.
#[derive(Debug, PartialEq, Eq)]
pub enum Settled {
    /// Not started from the volume: nothing to do.
    NotFromVolume,
    /// The link at `DAEMON_PATH` names the volume's daemon (made or kept).
    Linked,
    /// A hand-off's binary sits at `DAEMON_PATH`: run it instead.
    HandedOff,
}

/// Makes `bin` (the room's `DAEMON_PATH`) a link to `dist` when `exe`, the
/// running binary, is `dist`; says when a hand-off's file is there instead.
pub fn settle_at(exe: &Path, dist: &Path, bin: &Path) -> io::Result<Settled> {
    if exe != dist {
        return Ok(Settled::NotFromVolume);
    }
    match std::fs::symlink_metadata(bin) {
        Ok(m) if m.file_type().is_file() => return Ok(Settled::HandedOff),
        Ok(m) if m.file_type().is_symlink() && std::fs::read_link(bin)? == dist => return Ok(Settled::Linked),
        Ok(_) | Err(_) => {}
    }
    let folder = bin.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(folder)?;
    std::fs::set_permissions(folder, std::fs::Permissions::from_mode(0o755))?;
    // Beside it, then renamed over: an exec never finds the path missing
    // once it was there, and a stale link (another digest's) is replaced.
    let staged = folder.join(format!(".workroomd.link.{}", std::process::id()));
    let _ = std::fs::remove_file(&staged);
    std::os::unix::fs::symlink(dist, &staged)?;
    std::fs::rename(&staged, bin)?;
    Ok(Settled::Linked)
}

/// [`settle_at`] for this room; on `HandedOff`, `exec`s the hand-off's
/// binary with the same arguments (it returns only if that fails, and the
/// volume's daemon then serves).
pub fn settle(args: &[String]) {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            tracing::warn!("cannot tell which binary runs ({e}); {} left as it is", room::DAEMON_PATH);
            return;
        }
    };
    match settle_at(&exe, Path::new(room::DIST_PATH), Path::new(room::DAEMON_PATH)) {
        Ok(Settled::NotFromVolume | Settled::Linked) => {}
        Ok(Settled::HandedOff) => {
            use std::os::unix::process::CommandExt;
            let error = std::process::Command::new(room::DAEMON_PATH).args(args).exec();
            tracing::error!(
                "the binary a hand-off left at {} does not run ({error}); the room's own daemon serves",
                room::DAEMON_PATH
            );
        }
        Err(e) => tracing::error!(
            "cannot link {} to {} ({e}): execs of the room will not find the daemon",
            room::DAEMON_PATH,
            room::DIST_PATH
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let dist = dir.path().join("dist/workroomd");
        std::fs::create_dir_all(dist.parent().unwrap()).unwrap();
        std::fs::write(&dist, b"daemon").unwrap();
        let bin = dir.path().join("bin/workroomd");
        (dir, dist, bin)
    }

    #[test]
    fn a_daemon_started_from_the_volume_links_the_exec_path_to_itself() {
        let (_dir, dist, bin) = paths();
        assert_eq!(settle_at(&dist, &dist, &bin).unwrap(), Settled::Linked);
        assert_eq!(std::fs::read_link(&bin).unwrap(), dist);
        assert_eq!(std::fs::read(&bin).unwrap(), b"daemon");
        // Again at the next start: kept.
        assert_eq!(settle_at(&dist, &dist, &bin).unwrap(), Settled::Linked);
    }

    #[test]
    fn a_link_to_another_daemon_is_replaced() {
        let (dir, dist, bin) = paths();
        std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &bin).unwrap();
        assert_eq!(settle_at(&dist, &dist, &bin).unwrap(), Settled::Linked);
        assert_eq!(std::fs::read_link(&bin).unwrap(), dist);
    }

    #[test]
    fn a_hand_offs_binary_at_the_exec_path_is_run_instead() {
        let (_dir, dist, bin) = paths();
        std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
        std::fs::write(&bin, b"newer").unwrap();
        assert_eq!(settle_at(&dist, &dist, &bin).unwrap(), Settled::HandedOff);
        assert_eq!(std::fs::read(&bin).unwrap(), b"newer", "the hand-off's binary is kept");
    }

    #[test]
    fn a_daemon_not_started_from_the_volume_touches_nothing() {
        let (_dir, dist, bin) = paths();
        assert_eq!(settle_at(&bin, &dist, &bin).unwrap(), Settled::NotFromVolume);
        assert!(std::fs::symlink_metadata(&bin).is_err());
    }
}
