//! Stand-ins for the repository's other worktrees, so git in a worktree's
//! room never deletes them (docs/adr/0013-worktree-rooms.md).
//!
//! A worktree's room has the repository's common git folder bound in
//! (`serve --git-common DIR`), with every worktree's admin folder under
//! `DIR/worktrees/<id>`; each names its checkout in a `gitdir` file. The
//! checkouts themselves are not in the room, and `git worktree prune` (run
//! by `git gc` too) deletes, through the bind, the admin folder of every
//! worktree whose checkout it cannot find: the host's other worktrees would
//! lose their records. Git only asks whether that path exists, so the daemon
//! keeps an empty file there in the room's own filesystem, from the start
//! and for every worktree added later (inotify on `worktrees/` and on each
//! admin folder's `gitdir`). It never writes into a mounted host folder or
//! volume: a path there is left alone and logged.
//!
//! Rejected: binding `worktrees/` read-only (prune cannot delete, but `git
//! gc` then fails on the other worktrees' reflog locks), hiding the other
//! admin folders (gc would drop objects only their indexes and detached
//! HEADs hold), locking the worktrees (changes the host's git state).

use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
use std::collections::BTreeSet;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use tokio::io::unix::AsyncFd;

/// Each read of the inotify descriptor takes at most this much; a burst
/// larger than it is read in several turns, each followed by a rescan.
const EVENT_BUFFER: usize = 4096;

/// Makes the stand-ins now (before the socket is bound, so no hook or pane
/// runs git before them), then keeps them on a task of their own.
pub fn keep(common: PathBuf) {
    let mut made = BTreeSet::new();
    sync(&common, &mut made);
    match watcher(&common) {
        Ok(fd) => {
            tokio::spawn(watch(common, fd, made));
        }
        Err(e) => tracing::warn!(common = %common.display(), "worktrees added later get no stand-in: {e}"),
    }
}

fn watcher(common: &Path) -> std::io::Result<AsyncFd<OwnedFd>> {
    let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
    arm(&fd, common);
    // SAFETY: the watcher owns the fd alone, and it lives in the AsyncFd
    // until the watch task ends.
    Ok(unsafe { AsyncFd::register(fd) }?)
}

/// Watches the common folder (for `worktrees/` coming back after the last
/// worktree went), `worktrees/` (new admin folders) and each admin folder
/// (its `gitdir` written). Adding a watch again is a no-op, so this runs
/// after every change.
fn arm(fd: &OwnedFd, common: &Path) {
    let _ = inotify::add_watch(fd, common, WatchFlags::CREATE | WatchFlags::MOVED_TO | WatchFlags::ONLYDIR);
    let worktrees = common.join("worktrees");
    let _ = inotify::add_watch(
        fd,
        &worktrees,
        WatchFlags::CREATE | WatchFlags::MOVED_TO | WatchFlags::DELETE | WatchFlags::ONLYDIR,
    );
    for admin in admin_folders(&worktrees) {
        let _ = inotify::add_watch(fd, &admin, WatchFlags::CLOSE_WRITE | WatchFlags::MOVED_TO | WatchFlags::ONLYDIR);
    }
}

async fn watch(common: PathBuf, fd: AsyncFd<OwnedFd>, mut made: BTreeSet<PathBuf>) {
    let mut buf = [MaybeUninit::<u8>::uninit(); EVENT_BUFFER];
    loop {
        let mut ready = match fd.readable().await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("worktree watch ended: {e}");
                return;
            }
        };
        let mut reader = inotify::Reader::new(fd.get_ref(), &mut buf);
        let mut any = false;
        loop {
            match reader.next() {
                Ok(_) => any = true,
                Err(rustix::io::Errno::AGAIN) => {
                    ready.clear_ready();
                    break;
                }
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    tracing::warn!("worktree watch ended: {e}");
                    return;
                }
            }
        }
        if any {
            arm(fd.get_ref(), &common);
            sync(&common, &mut made);
        }
    }
}

/// One pass: a stand-in for every registered worktree whose checkout is
/// missing here, and ours removed where the worktree is gone.
fn sync(common: &Path, made: &mut BTreeSet<PathBuf>) {
    let wanted: BTreeSet<PathBuf> = admin_folders(&common.join("worktrees"))
        .into_iter()
        .filter_map(|admin| {
            let written = std::fs::read_to_string(admin.join("gitdir")).ok()?;
            checkout_of(&admin, &written)
        })
        .collect();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for path in &wanted {
        if std::fs::symlink_metadata(path).is_ok() {
            continue;
        }
        match room_local(path, &mounts) {
            Some(true) => match make(path) {
                Ok(()) => {
                    tracing::info!(path = %path.display(), "a stand-in keeps this worktree registered");
                    made.insert(path.clone());
                }
                Err(e) => tracing::warn!(path = %path.display(), "no stand-in for this worktree: {e}"),
            },
            _ => {
                tracing::warn!(path = %path.display(), "no stand-in for this worktree: it would be in a mounted folder")
            }
        }
    }
    let gone: Vec<PathBuf> = made.difference(&wanted).cloned().collect();
    for path in gone {
        // Only an empty file is ours; anything else was put there since.
        if std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() == 0) {
            let _ = std::fs::remove_file(&path);
        }
        made.remove(&path);
    }
}

fn make(path: &Path) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::OpenOptions::new().write(true).create_new(true).open(path).map(drop)
}

fn admin_folders(worktrees: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(worktrees) else { return Vec::new() };
    entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()).collect()
}

/// The checkout an admin folder's `gitdir` names: absolute as git writes
/// it, or (git 2.48's relative paths) relative to the admin folder.
pub fn checkout_of(admin: &Path, written: &str) -> Option<PathBuf> {
    let line = written.lines().next()?.trim();
    if line.is_empty() {
        return None;
    }
    let path = Path::new(line);
    let out = workroomd::paths::lexical(&admin.join(path));
    (out.is_absolute() && out != Path::new("/")).then_some(out)
}

/// Whether `path` lies in the room's own filesystem (the root, or a tmpfs
/// of the room), from `/proc/self/mountinfo`: the deepest mount point above
/// it decides. `None` when the table cannot be read.
pub fn room_local(path: &Path, mountinfo: &str) -> Option<bool> {
    let mut best: Option<(usize, bool)> = None;
    for line in mountinfo.lines() {
        let Some((fields, fstype)) = line.split_once(" - ") else { continue };
        let Some(point) = fields.split(' ').nth(4).map(unescape) else { continue };
        let fstype = fstype.split(' ').next().unwrap_or_default();
        if !path.starts_with(&point) {
            continue;
        }
        let depth = Path::new(&point).components().count();
        if best.is_none_or(|(d, _)| depth >= d) {
            best = Some((depth, point == "/" || fstype == "tmpfs"));
        }
    }
    best.map(|(_, local)| local)
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() && bytes[i + 1..i + 4].iter().all(|b| (b'0'..=b'7').contains(b)) {
            let n = bytes[i + 1..i + 4].iter().fold(0u32, |n, b| n * 8 + u32::from(b - b'0'));
            out.push(u8::try_from(n).unwrap_or(b'?'));
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
600 500 0:52 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u
601 600 0:55 / /proc rw,nosuid - proc proc rw
602 600 8:1 /home/u/feature-a /workspaces/feature-a rw,relatime - ext4 /dev/vda rw
603 600 8:1 /home/u/repo/.git /home/u/repo/.git rw,relatime - ext4 /dev/vda rw
604 600 0:60 / /tmp rw,nosuid - tmpfs tmpfs rw
605 600 8:1 /data/with\\040space /mnt/with\\040space rw - ext4 /dev/vda rw
";

    #[test]
    fn a_checkout_path_outside_every_mount_is_room_local() {
        assert_eq!(room_local(Path::new("/home/u/feature-b/.git"), MOUNTINFO), Some(true));
    }

    #[test]
    fn a_checkout_path_in_a_tmpfs_of_the_room_is_room_local() {
        assert_eq!(room_local(Path::new("/tmp/wt/feature-b/.git"), MOUNTINFO), Some(true));
    }

    #[test]
    fn a_checkout_path_inside_a_host_bind_is_never_written() {
        assert_eq!(room_local(Path::new("/workspaces/feature-a/sub/.git"), MOUNTINFO), Some(false));
        assert_eq!(room_local(Path::new("/home/u/repo/.git/x/.git"), MOUNTINFO), Some(false));
        assert_eq!(room_local(Path::new("/mnt/with space/b/.git"), MOUNTINFO), Some(false));
    }

    #[test]
    fn a_mount_point_that_only_shares_a_prefix_of_letters_does_not_count() {
        assert_eq!(room_local(Path::new("/workspaces/feature-ab/.git"), MOUNTINFO), Some(true));
    }

    #[test]
    fn an_unreadable_mount_table_decides_nothing() {
        assert_eq!(room_local(Path::new("/x"), ""), None);
    }

    #[test]
    fn an_admin_folders_gitdir_names_its_checkout_absolute_or_relative() {
        let admin = Path::new("/r/.git/worktrees/b");
        assert_eq!(checkout_of(admin, "/home/u/b/.git\n"), Some(PathBuf::from("/home/u/b/.git")));
        assert_eq!(checkout_of(admin, "../../../b/.git\n"), Some(PathBuf::from("/r/b/.git")));
        assert_eq!(checkout_of(admin, "\n"), None);
        assert_eq!(checkout_of(admin, "../../../../../../.."), None);
    }

    #[test]
    fn a_stand_in_is_made_for_a_missing_checkout_and_removed_with_its_worktree() {
        let dir = tempfile_dir();
        let common = dir.join("repo.git");
        let admin = common.join("worktrees/b");
        std::fs::create_dir_all(&admin).unwrap();
        let checkout = dir.join("elsewhere/b/.git");
        std::fs::write(admin.join("gitdir"), format!("{}\n", checkout.display())).unwrap();
        let mut made = BTreeSet::new();
        sync(&common, &mut made);
        // The test's temporary folder may sit in a mount of the machine
        // running it; where it does, the stand-in is rightly not made.
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        if room_local(&checkout, &mounts) == Some(true) {
            assert!(checkout.is_file(), "a stand-in at {}", checkout.display());
            std::fs::remove_dir_all(&admin).unwrap();
            sync(&common, &mut made);
            assert!(!checkout.exists(), "removed once its worktree is gone");
        } else {
            assert!(!checkout.exists(), "nothing written into a mounted folder");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("workroomd-worktrees-{}-{}", std::process::id(), crate::pane::now_ms()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
