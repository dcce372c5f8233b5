//! Replacing a file whole, for both sides: the daemon's markers, pane
//! screens and `/etc/passwd` edits, and the host's ready records, forwarder
//! statuses and compose override files.
//!
//! The bytes go to a new file of a unique name in the same folder (so the
//! rename stays on one filesystem), which is then renamed over the target:
//! a reader sees the old file or the new one, never a part. The name used
//! to be fixed (`markers.json.tmp`): two writers then shared one temporary
//! file, one truncated it while the other renamed it, and the target could
//! end up half of one write. A unique name per write, created with
//! `O_EXCL` (tempfile's), cannot be shared. Nothing is synced to disk: the
//! files are caches and markers a crash may lose, not a journal.

use std::io::{self, Write as _};
use std::path::Path;

/// Writes `bytes` to `path` whole, replacing what was there. The new file
/// gets mode 0600 (the temporary file's); [`write_with_permissions`] keeps
/// another.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace(path, bytes, None)
}

/// [`write`], with the new file's permissions set to `permissions`
/// (`/etc/passwd` stays 0644), whatever the umask.
pub fn write_with_permissions(path: &Path, bytes: &[u8], permissions: std::fs::Permissions) -> io::Result<()> {
    replace(path, bytes, Some(permissions))
}

fn replace(path: &Path, bytes: &[u8], permissions: Option<std::fs::Permissions>) -> io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    // Hidden and named after the target, so a folder's readers (forwarder
    // statuses, saved panes) skip it and a leftover says whose it was.
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(path.file_name().unwrap_or_default());
    prefix.push(".");
    let mut tmp = tempfile::Builder::new().prefix(&prefix).suffix(".tmp").tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    if let Some(permissions) = permissions {
        // fchmod after the open: the open's mode would go through the umask.
        tmp.as_file().set_permissions(permissions)?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Writer `i`'s file: its letter, as many times as its own length, so a
    /// file mixed from two writes or cut short is told from a whole one.
    fn content(i: usize) -> Vec<u8> {
        vec![b'a' + i as u8; 40_000 + i * 7_000]
    }

    fn is_whole(bytes: &[u8]) -> bool {
        match bytes.first() {
            Some(&first) => {
                let i = usize::from(first - b'a');
                i < WRITERS && bytes == content(i).as_slice()
            }
            None => false,
        }
    }

    const WRITERS: usize = 6;
    const ROUNDS: usize = 150;

    #[test]
    fn concurrent_writers_of_one_state_file_leave_it_whole_every_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("markers.json");
        write(&path, &content(0)).unwrap();
        let done = std::sync::atomic::AtomicBool::new(false);
        let (failed, (reads, torn)) = std::thread::scope(|s| {
            // A failed write is counted, not unwrapped: the reader must be
            // told to stop whatever the writers met.
            let writers: Vec<_> = (0..WRITERS)
                .map(|i| {
                    let path = &path;
                    s.spawn(move || (0..ROUNDS).filter(|_| write(path, &content(i)).is_err()).count())
                })
                .collect();
            let reader = s.spawn(|| {
                let (mut reads, mut torn) = (0, 0);
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let bytes = std::fs::read(&path).unwrap();
                    reads += 1;
                    if !is_whole(&bytes) {
                        torn += 1;
                    }
                }
                (reads, torn)
            });
            let failed: usize = writers.into_iter().map(|w| w.join().unwrap()).sum();
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            (failed, reader.join().unwrap())
        });
        assert_eq!(failed, 0, "{failed} of {} writes failed", WRITERS * ROUNDS);
        assert!(reads > 0);
        assert_eq!(torn, 0, "{torn} of {reads} reads found the file torn");
        assert!(is_whole(&std::fs::read(&path).unwrap()), "the file after the last write");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, [std::ffi::OsString::from("markers.json")], "no temporary file is left behind");
    }

    #[test]
    fn a_replaced_file_gets_the_permissions_it_is_given_and_else_0600() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("passwd");
        write_with_permissions(&path, b"root:x:0:0::/root:/bin/sh\n", std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o644);
        write(&path, b"x").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600, "a plain write is 0600");
    }
}
