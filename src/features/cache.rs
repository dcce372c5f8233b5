//! The content-addressed feature cache in the user's cache folder
//! (`$XDG_CACHE_HOME/workroom/features`, else `~/.cache/workroom/features`):
//!
//! - `blobs/sha256/<hex>`: manifests, OCI layers and tarballs, by digest,
//!   checked against it when read back;
//! - `features/<hex>/`: a layer or tarball unpacked, made once, atomically;
//! - `refs/<hex>`: the digest a tag or URL last resolved to, used only when
//!   the network is down and no lockfile pins the feature.
//!
//! Everything is written to a temporary name and renamed into place, so a
//! concurrent or interrupted `up` never sees half a file.

use super::FeatureError;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
}

/// `sha256:<hex>` of `bytes`.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The hex of a `sha256:` digest, if it is one (anything else never names a path).
fn hex_of(digest: &str) -> Option<&str> {
    digest.strip_prefix("sha256:").filter(|h| h.len() == 64 && h.chars().all(|c| c.is_ascii_hexdigit()))
}

impl Cache {
    /// The user's cache folder.
    pub fn user() -> Cache {
        // Without a home, a folder that lasts as long as the machine's
        // temporary files: Features are fetched again after that.
        let root =
            crate::folders::cache("features").unwrap_or_else(|| std::env::temp_dir().join("workroom").join("features"));
        Cache { root }
    }

    pub fn at(root: impl Into<PathBuf>) -> Cache {
        Cache { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn err(&self, path: &Path) -> impl Fn(std::io::Error) -> FeatureError + '_ {
        let path = path.to_path_buf();
        move |source| FeatureError::Cache { path: path.clone(), source }
    }

    fn blob_path(&self, digest: &str) -> Option<PathBuf> {
        hex_of(digest).map(|h| self.root.join("blobs").join("sha256").join(h))
    }

    /// The blob, if cached and intact (a damaged one is dropped and refetched).
    pub fn blob(&self, digest: &str) -> Option<Vec<u8>> {
        let path = self.blob_path(digest)?;
        let bytes = std::fs::read(&path).ok()?;
        if digest_of(&bytes) == digest {
            Some(bytes)
        } else {
            let _ = std::fs::remove_file(&path);
            None
        }
    }

    /// Stores a blob whose digest the caller has checked.
    pub fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<(), FeatureError> {
        let Some(path) = self.blob_path(digest) else { return Ok(()) };
        self.write_atomic(&path, bytes)
    }

    fn write_atomic(&self, path: &Path, bytes: &[u8]) -> Result<(), FeatureError> {
        let dir = path.parent().unwrap_or(&self.root);
        std::fs::create_dir_all(dir).map_err(self.err(dir))?;
        workroomd::atomic::write(path, bytes).map_err(self.err(path))
    }

    fn ref_path(&self, name: &str) -> PathBuf {
        self.root.join("refs").join(hex::encode(Sha256::digest(name.as_bytes())))
    }

    /// Remembers what a tag or URL resolved to.
    pub fn remember(&self, name: &str, digest: &str) -> Result<(), FeatureError> {
        self.write_atomic(&self.ref_path(name), digest.as_bytes())
    }

    /// What a tag or URL last resolved to.
    pub fn recall(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.ref_path(name)).ok().filter(|d| hex_of(d).is_some())
    }

    /// Holds the lock of one derived image's key until dropped: two `up`s of
    /// the same config build it once (the second finds the first's image)
    /// instead of both building and leaving the loser's image dangling.
    pub async fn lock(&self, key: &str) -> Result<nix::fcntl::Flock<std::fs::File>, FeatureError> {
        let dir = self.root.join("locks");
        std::fs::create_dir_all(&dir).map_err(self.err(&dir))?;
        let path = dir.join(format!("{}.lock", &key[..key.len().min(64)]));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(self.err(&path))?;
        // flock blocks; off the runtime's thread, which drives the progress.
        let locked =
            tokio::task::spawn_blocking(move || nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive))
                .await
                .map_err(|e| FeatureError::Cache { path: path.clone(), source: std::io::Error::other(e) })?;
        locked.map_err(|(_, errno)| FeatureError::Cache { path, source: std::io::Error::from(errno) })
    }

    /// The unpacked folder of a cached layer or tarball (gzip or plain
    /// tar), made on first use. `skip_dotfiles`: a direct tarball's
    /// `./.*` entries are left out, as the reference does.
    pub fn unpacked(&self, digest: &str, skip_dotfiles: bool) -> Result<PathBuf, FeatureError> {
        let hex = hex_of(digest).ok_or_else(|| FeatureError::Cache {
            path: self.root.clone(),
            source: std::io::Error::other(format!("{digest} is not a sha256 digest")),
        })?;
        let dest = self.root.join("features").join(hex);
        if dest.is_dir() {
            return Ok(dest);
        }
        let bytes = self.blob(digest).ok_or_else(|| FeatureError::Cache {
            path: self.blob_path(digest).unwrap_or_default(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "the blob vanished from the cache"),
        })?;
        let parent = self.root.join("features");
        std::fs::create_dir_all(&parent).map_err(self.err(&parent))?;
        let tmp = tempfile::Builder::new().prefix(".unpack-").tempdir_in(&parent).map_err(self.err(&parent))?;
        unpack(&bytes, tmp.path(), skip_dotfiles).map_err(self.err(&dest))?;
        match std::fs::rename(tmp.path(), &dest) {
            Ok(()) => {
                // Renamed away: nothing left for the TempDir to remove.
                let _ = tmp.keep();
                Ok(dest)
            }
            // Another `up` unpacked it first; theirs is the same content.
            Err(_) if dest.is_dir() => Ok(dest),
            Err(e) => Err(self.err(&dest)(e)),
        }
    }
}

/// Unpacks a tar or a gzipped tar; the tar crate refuses entries that would
/// land outside `dest`.
fn unpack(bytes: &[u8], dest: &Path, skip_dotfiles: bool) -> std::io::Result<()> {
    let reader: Box<dyn Read> =
        if bytes.starts_with(&[0x1f, 0x8b]) { Box::new(flate2::read::GzDecoder::new(bytes)) } else { Box::new(bytes) };
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(true);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        let text = path.to_string_lossy();
        let text = text.strip_prefix("./").unwrap_or(&text);
        if skip_dotfiles && text.starts_with('.') {
            continue;
        }
        entry.unpack_in(dest)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(files: &[(&str, &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, body) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(body.len() as u64);
            h.set_mode(0o755);
            b.append_data(&mut h, name, body.as_bytes()).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn a_blob_is_kept_by_digest_and_a_damaged_one_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::at(dir.path());
        let d = digest_of(b"hello");
        assert_eq!(cache.blob(&d), None);
        cache.put_blob(&d, b"hello").unwrap();
        assert_eq!(cache.blob(&d).as_deref(), Some(&b"hello"[..]));
        std::fs::write(cache.blob_path(&d).unwrap(), b"tampered").unwrap();
        assert_eq!(cache.blob(&d), None);
        assert!(!cache.blob_path(&d).unwrap().exists());
    }

    #[test]
    fn a_layer_is_unpacked_once_and_gzip_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::at(dir.path());
        let tar = tar_of(&[("./install.sh", "echo hi"), ("./.hidden", "x")]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &tar).unwrap();
        let gz = gz.finish().unwrap();
        for (bytes, skip) in [(tar, false), (gz, true)] {
            let d = digest_of(&bytes);
            cache.put_blob(&d, &bytes).unwrap();
            let folder = cache.unpacked(&d, skip).unwrap();
            assert_eq!(std::fs::read_to_string(folder.join("install.sh")).unwrap(), "echo hi");
            assert_eq!(folder.join(".hidden").exists(), !skip);
            assert_eq!(cache.unpacked(&d, skip).unwrap(), folder);
        }
    }

    #[test]
    fn refs_remember_only_digests() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::at(dir.path());
        let d = digest_of(b"m");
        cache.remember("localhost:5000/wr/hello:1", &d).unwrap();
        assert_eq!(cache.recall("localhost:5000/wr/hello:1"), Some(d));
        assert_eq!(cache.recall("other"), None);
        assert!(cache.blob("../../etc/passwd").is_none());
    }
}
