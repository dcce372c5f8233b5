//! The daemon binary a room gets: the one this workroom carries, or
//! `WORKROOM_DAEMON=/path` for development (a freshly built daemon without
//! rebuilding the host CLI).

use sha2::{Digest, Sha256};
use std::borrow::Cow;
use workroomd::room;

pub const OVERRIDE_ENV: &str = "WORKROOM_DAEMON";

#[derive(Debug, thiserror::Error)]
#[error("cannot read the daemon named by {OVERRIDE_ENV} ({path})")]
pub struct DaemonBinaryError {
    path: String,
    source: std::io::Error,
}

pub fn binary() -> Result<Cow<'static, [u8]>, DaemonBinaryError> {
    match std::env::var_os(OVERRIDE_ENV) {
        Some(path) => std::fs::read(&path)
            .map(Cow::Owned)
            .map_err(|source| DaemonBinaryError { path: path.to_string_lossy().into_owned(), source }),
        None => Ok(Cow::Borrowed(crate::EMBEDDED_DAEMON)),
    }
}

/// A short digest naming a daemon build (for labels and hand-off checks).
pub fn digest(bytes: &[u8]) -> String {
    hex::encode(&Sha256::digest(bytes)[..8])
}

/// A tar to unpack at `/` that holds the daemon at [`room::DAEMON_PATH`],
/// with its folders, owned by root; the binary 0755, the folders 0755 (the
/// socket folder is made 0700 by the daemon itself).
pub fn upload_tar(binary: &[u8]) -> std::io::Result<Vec<u8>> {
    upload_tar_at(binary, room::DAEMON_PATH)
}

/// [`upload_tar`] for another absolute path (a hand-off's new binary).
pub fn upload_tar_at(binary: &[u8], at: &str) -> std::io::Result<Vec<u8>> {
    upload_tar_into(binary, at, "/")
}

/// A tar to unpack at the folder `into` (which holds `at`) that puts the
/// daemon at the absolute path `at`. A read-only room takes an upload only
/// into its volumes: there `into` is the daemon's own folder, not `/`.
pub fn upload_tar_into(binary: &[u8], at: &str, into: &str) -> std::io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    let path = std::path::Path::new(at)
        .strip_prefix(into)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{at} is not under {into}")))?;
    let mut dirs = Vec::new();
    let mut dir = std::path::Path::new(path).parent();
    while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
        dirs.push(d.to_path_buf());
        dir = d.parent();
    }
    for d in dirs.iter().rev() {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(0o755);
        header.set_size(0);
        header.set_uid(0);
        header.set_gid(0);
        tar.append_data(&mut header, d, std::io::empty())?;
    }
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(0o755);
    header.set_size(binary.len() as u64);
    header.set_uid(0);
    header.set_gid(0);
    tar.append_data(&mut header, path, binary)?;
    tar.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_daemon_override_says_the_os_error_once() {
        let source = std::fs::read("/nonexistent/workroomd").unwrap_err();
        let err = DaemonBinaryError { path: "/nonexistent/workroomd".into(), source };
        let chain = format!("{:#}", anyhow::Error::new(err));
        assert_eq!(chain.matches("No such file or directory").count(), 1, "{chain}");
    }

    #[test]
    fn the_upload_tar_holds_the_daemon_executable_under_its_folders() {
        let tar_bytes = upload_tar(b"\x7fELF-test").unwrap();
        let mut archive = tar::Archive::new(&tar_bytes[..]);
        let entries: Vec<(String, u32, u64)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.path().unwrap().display().to_string(), e.header().mode().unwrap(), e.header().size().unwrap())
            })
            .collect();
        assert_eq!(
            entries,
            [
                (".workroom".to_string(), 0o755, 0),
                (".workroom/bin".to_string(), 0o755, 0),
                (".workroom/bin/workroomd".to_string(), 0o755, 9)
            ]
        );
    }

    #[test]
    fn the_embedded_daemon_is_a_static_elf() {
        assert_eq!(&crate::EMBEDDED_DAEMON[..4], b"\x7fELF");
    }
}
