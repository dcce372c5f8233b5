//! The workspace on an engine that cannot see this host's folder (ADR
//! 0012): whether it can (a probe container, its answer cached per engine
//! and folder), and the upload of the workspace into the room's volume
//! before its first start, so the hooks find the files.
//!
//! What is uploaded: with git, what `git ls-files -co --exclude-standard`
//! lists (tracked and untracked files that `.gitignore` keeps) and `.git`
//! itself, so git works in the room; without git, everything.

use crate::config::Loaded;
use crate::engine::{Engine, EngineError};
use crate::plan::mounts::{self, MountSpec};
use crate::plan::workspace::{self as plan, Decision};
use crate::settings::WorkspaceMode;
use anyhow::Context as _;
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};
use bytes::Bytes;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Where the probe binds the folder in its (never started) container.
const PROBE_TARGET: &str = "/.workroom-probe";

/// The largest witness file the probe reads back: the config file is a few
/// KiB; a bigger first file is not worth a transfer.
const MAX_WITNESS: u64 = 1 << 20;

/// The chunks the upload's tar is cut into on its way to the engine, and
/// how many may wait: bounded, so a slow engine holds the reader back.
const UPLOAD_CHUNK: usize = 256 * 1024;
const UPLOAD_QUEUE: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("`git ls-files` in {folder} failed: {line}")]
    Git { folder: String, line: String },
    #[error("cannot read {path}")]
    Read { path: String, source: std::io::Error },
    #[error("a compose room's workspace is bound by its compose files, which an engine that cannot see {folder} cannot bind either; run compose rooms on an engine on this host")]
    Compose { folder: String },
}

/// How room `room` gets its workspace, asked of the engine only when the
/// setting is `auto` and `workspaceMount` binds a host folder.
pub async fn decide(engine: &Engine, loaded: &Loaded, room: &str, mode: WorkspaceMode) -> anyhow::Result<Decision> {
    let mount = workspace_mount(loaded);
    let sees = match (plan::needs_probe(mode, mount.as_ref()), mount.as_ref().and_then(|m| m.source.as_deref())) {
        (true, Some(source)) => Some(engine_sees(engine, loaded, Path::new(source)).await?),
        _ => None,
    };
    Ok(plan::decide(room, mode, mount.as_ref(), sees))
}

/// The parsed `workspaceMount`, if it parses (a bad one is refused by the
/// create plan, with its property named).
pub fn workspace_mount(loaded: &Loaded) -> Option<MountSpec> {
    mounts::parse(loaded.workspace.mount.as_deref()?).ok()
}

/// Whether the engine sees `folder` as this host does: a throwaway
/// container binding it is created (never started); the engine refuses a
/// bind of a path its host lacks, and one it has must hold the same
/// witness file, so a same-named folder on another machine does not pass.
async fn engine_sees(engine: &Engine, loaded: &Loaded, folder: &Path) -> anyhow::Result<bool> {
    let key = cache_key(engine.host(), folder);
    if let Some(known) = cached(&key) {
        return Ok(known);
    }
    let image = super::peers::daemon_image(engine).await?;
    let name = format!("workroom-probe-{}-{}", std::process::id(), nanos());
    let mut labels: HashMap<String, String> =
        crate::plan::peers::scope_labels(super::peers::scope_from_env().as_deref()).into_iter().collect();
    labels.insert("workroom.probe".into(), "1".into());
    let body = ContainerCreateBody {
        image: Some(image),
        entrypoint: Some(vec![workroomd::room::DAEMON_PATH.into()]),
        labels: Some(labels),
        host_config: Some(HostConfig {
            mounts: Some(vec![Mount {
                target: Some(PROBE_TARGET.into()),
                source: Some(folder.display().to_string()),
                typ: Some(MountType::BIND),
                read_only: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let sees = match engine.create_container(&name, body).await {
        Ok(id) => {
            let seen = match witness(loaded, folder) {
                Some((relative, bytes)) => {
                    let far = format!("{PROBE_TARGET}/{}", relative.display());
                    engine.read_file(&id, &far).await.map(|got| got.as_deref() == Some(&bytes[..]))
                }
                // An empty folder: the bind alone is all there is to know.
                None => Ok(true),
            };
            let _ = engine.remove(&id, true).await;
            seen?
        }
        Err(EngineError::Refused { message, .. }) if message.contains("bind source path does not exist") => false,
        Err(e) => return Err(e).context(format!("probe whether the engine sees {}", folder.display())),
    };
    remember(&key, sees);
    Ok(sees)
}

/// A small file of the folder to compare across: the config file when it is
/// in the folder, else the first regular file at its top.
fn witness(loaded: &Loaded, folder: &Path) -> Option<(PathBuf, Vec<u8>)> {
    let small = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.len() <= MAX_WITNESS);
    let config = loaded.config_path.strip_prefix(folder).ok().filter(|_| small(&loaded.config_path));
    let relative = match config {
        Some(r) => r.to_path_buf(),
        None => {
            let mut names: Vec<PathBuf> =
                std::fs::read_dir(folder).ok()?.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| small(p)).collect();
            names.sort();
            names.first()?.strip_prefix(folder).ok()?.to_path_buf()
        }
    };
    let bytes = std::fs::read(folder.join(&relative)).ok()?;
    Some((relative, bytes))
}

fn nanos() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

fn cache_key(host: &str, folder: &Path) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(host.as_bytes());
    h.update(b"\0");
    h.update(folder.as_os_str().as_encoded_bytes());
    hex::encode(&h.finalize()[..16])
}

fn cache_path(key: &str) -> Option<PathBuf> {
    Some(crate::folders::cache("sees")?.join(key))
}

fn cached(key: &str) -> Option<bool> {
    match std::fs::read_to_string(cache_path(key)?).ok()?.trim() {
        "yes" => Some(true),
        "no" => Some(false),
        _ => None,
    }
}

/// Failures only cost a probe next time.
fn remember(key: &str, sees: bool) {
    let Some(path) = cache_path(key) else { return };
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(path, if sees { "yes\n" } else { "no\n" });
}

/// Makes the room's workspace volume; `false` when it already exists (a
/// room removed by `down` without `--volumes`): then it is the room's
/// truth and is never overwritten.
pub async fn ensure_volume(engine: &Engine, volume: &str, room: &str, loaded: &Loaded) -> anyhow::Result<bool> {
    if engine.volume_exists(volume).await? {
        return Ok(false);
    }
    let labels = HashMap::from([
        (plan::ROOM_LABEL.to_string(), room.to_string()),
        (crate::plan::labels::LOCAL_FOLDER.to_string(), loaded.workspace.local_folder.display().to_string()),
    ]);
    engine.create_volume(volume, labels).await?;
    Ok(true)
}

/// What an upload carried.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Uploaded {
    pub files: usize,
    pub bytes: u64,
    /// Whether `.gitignore` chose the files (a git work tree).
    pub git: bool,
}

/// The files of `folder` to upload, relative, sorted: git's list and
/// `.git` in a work tree, else every file.
pub fn files_of(folder: &Path) -> Result<(Vec<PathBuf>, bool), WorkspaceError> {
    let inside = std::process::Command::new("git")
        .args(["rev-parse", "--show-toplevel"])
        .current_dir(folder)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    let git = inside.is_ok_and(|o| o.status.success());
    let mut files: BTreeSet<PathBuf> = BTreeSet::new();
    if git {
        let out = std::process::Command::new("git")
            .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
            .current_dir(folder)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| WorkspaceError::Git { folder: folder.display().to_string(), line: e.to_string() })?;
        if !out.status.success() {
            let line = String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or_default().to_string();
            return Err(WorkspaceError::Git { folder: folder.display().to_string(), line });
        }
        for name in out.stdout.split(|b| *b == 0).filter(|n| !n.is_empty()) {
            let relative = PathBuf::from(String::from_utf8_lossy(name).into_owned());
            // A deleted but still tracked file is listed; a submodule is a folder.
            match std::fs::symlink_metadata(folder.join(&relative)) {
                Ok(m) if m.is_dir() => walk(folder, &relative, &mut files)?,
                Ok(_) => {
                    files.insert(relative);
                }
                Err(_) => {}
            }
        }
        if folder.join(".git").exists() {
            walk(folder, Path::new(".git"), &mut files)?;
        }
    } else {
        walk(folder, Path::new(""), &mut files)?;
    }
    Ok((files.into_iter().collect(), git))
}

/// Every file and symlink under `folder/relative`, not following links.
fn walk(folder: &Path, relative: &Path, out: &mut BTreeSet<PathBuf>) -> Result<(), WorkspaceError> {
    let dir = folder.join(relative);
    let entries =
        std::fs::read_dir(&dir).map_err(|source| WorkspaceError::Read { path: dir.display().to_string(), source })?;
    for entry in entries {
        let entry = entry.map_err(|source| WorkspaceError::Read { path: dir.display().to_string(), source })?;
        let rel = relative.join(entry.file_name());
        match entry.file_type() {
            Ok(t) if t.is_dir() => walk(folder, &rel, out)?,
            Ok(_) => {
                out.insert(rel);
            }
            Err(source) => return Err(WorkspaceError::Read { path: rel.display().to_string(), source }),
        }
    }
    Ok(())
}

/// The folders above `files`, parents first: their entries go into the tar
/// before the files, so they keep this host's mode and owner rather than
/// the engine's defaults.
pub fn folders_of(files: &[PathBuf]) -> Vec<PathBuf> {
    let mut folders = BTreeSet::new();
    for f in files {
        let mut p = f.parent();
        while let Some(dir) = p.filter(|d| !d.as_os_str().is_empty()) {
            folders.insert(dir.to_path_buf());
            p = dir.parent();
        }
    }
    // BTreeSet order puts `a` before `a/b`: parents first.
    folders.into_iter().collect()
}

/// How often an upload says how far it got: a terminal shows it, and
/// counting costs nothing next to the tar.
const UPLOAD_TICK: std::time::Duration = std::time::Duration::from_millis(200);

/// Uploads `files` of `folder` into container `id` at `target`, streaming
/// the tar, its progress said to `say`.
pub async fn upload(
    engine: &Engine,
    id: &str,
    (folder, files): (&Path, Vec<PathBuf>),
    target: &str,
    label: &str,
    say: &crate::notices::Notices,
) -> anyhow::Result<Uploaded> {
    let total: u64 = files.iter().filter_map(|f| std::fs::symlink_metadata(folder.join(f)).ok()).map(|m| m.len()).sum();
    let count = files.len();
    let task = say.task(format!("{label}: {count} files, {}", size(total)));
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(UPLOAD_QUEUE);
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let writer = {
        let (folder, sent) = (folder.to_path_buf(), sent.clone());
        tokio::task::spawn_blocking(move || write_tar(&folder, &files, ChannelWriter::new(tx, sent)))
    };
    let body = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    let ticker = async {
        loop {
            tokio::time::sleep(UPLOAD_TICK).await;
            let done = sent.load(std::sync::atomic::Ordering::Relaxed);
            task.doing(format!("{} of {}", size(done), size(total)));
        }
    };
    let result = tokio::select! {
        r = engine.upload_stream(id, target, Box::pin(body)) => r,
        _ = ticker => unreachable!("the ticker never ends"),
    };
    let written = writer.await.context("the workspace packer")?;
    match (result, written) {
        (Ok(()), Ok(())) => {
            task.finish(format!("{label}: {count} files, {}", size(total)));
            Ok(Uploaded { files: count, bytes: total, git: false })
        }
        (Err(e), _) => {
            task.fail(format!("{label}: failed"));
            Err(e.into())
        }
        (Ok(()), Err(e)) => {
            task.fail(format!("{label}: failed"));
            Err(e)
        }
    }
}

/// The tar of `files` (with their folders first) into `out`.
fn write_tar(folder: &Path, files: &[PathBuf], out: ChannelWriter) -> anyhow::Result<()> {
    let mut tar = tar::Builder::new(out);
    tar.follow_symlinks(false);
    tar.mode(tar::HeaderMode::Complete);
    for dir in folders_of(files) {
        tar.append_dir(&dir, folder.join(&dir)).with_context(|| format!("pack {}", dir.display()))?;
    }
    for f in files {
        match tar.append_path_with_name(folder.join(f), f) {
            Ok(()) => {}
            // Gone since it was listed (an editor's temp file): not an error.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(anyhow::Error::new(e).context(format!("pack {}", f.display()))),
        }
    }
    tar.into_inner().context("finish the workspace's tar")?.flush_last()?;
    Ok(())
}

/// A blocking `Write` that hands chunks to the async upload.
struct ChannelWriter {
    tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    buf: Vec<u8>,
    sent: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl ChannelWriter {
    fn new(
        tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
        sent: std::sync::Arc<std::sync::atomic::AtomicU64>,
    ) -> ChannelWriter {
        ChannelWriter { tx, buf: Vec::with_capacity(UPLOAD_CHUNK), sent }
    }

    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(UPLOAD_CHUNK));
        let n = chunk.len() as u64;
        self.tx.blocking_send(Ok(Bytes::from(chunk))).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the engine stopped reading the upload")
        })?;
        self.sent.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    fn flush_last(mut self) -> anyhow::Result<()> {
        self.send()?;
        Ok(())
    }
}

impl std::io::Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= UPLOAD_CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `1.5 MiB`, for the summary line.
pub fn size(bytes: u64) -> String {
    match bytes {
        b if b < 1024 => format!("{b} B"),
        b if b < 1 << 20 => format!("{:.1} KiB", b as f64 / 1024.0),
        b if b < 1 << 30 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b => format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folders_of_the_files_come_parents_first_and_once() {
        let files: Vec<PathBuf> = ["a/b/c.txt", "a/d.txt", "top.txt", "x/y/z"].iter().map(PathBuf::from).collect();
        let folders: Vec<String> = folders_of(&files).iter().map(|p| p.display().to_string()).collect();
        assert_eq!(folders, ["a", "a/b", "x", "x/y"]);
    }

    #[test]
    fn a_git_work_tree_uploads_what_gitignore_keeps_and_the_git_folder() {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git").args(args).current_dir(dir.path()).output().unwrap();
            assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        git(&["init", "-q"]);
        std::fs::write(dir.path().join(".gitignore"), "target/\n*.log\n").unwrap();
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::create_dir_all(dir.path().join("target/debug")).unwrap();
        std::fs::write(dir.path().join("src/main.rs"), "fn main() {}").unwrap();
        std::fs::write(dir.path().join("target/debug/big"), "x").unwrap();
        std::fs::write(dir.path().join("run.log"), "x").unwrap();
        std::fs::write(dir.path().join("notes.md"), "untracked, kept").unwrap();
        git(&["add", "src/main.rs"]);
        let (files, in_git) = files_of(dir.path()).unwrap();
        assert!(in_git);
        let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
        for kept in [".gitignore", "notes.md", "src/main.rs", ".git/HEAD"] {
            assert!(names.iter().any(|n| n == kept), "{kept} missing from {names:?}");
        }
        for ignored in ["run.log", "target/debug/big"] {
            assert!(!names.iter().any(|n| n == ignored), "{ignored} uploaded: {names:?}");
        }
    }

    #[test]
    fn a_folder_without_git_uploads_everything() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/b/c"), "1").unwrap();
        std::fs::write(dir.path().join("top.log"), "2").unwrap();
        std::os::unix::fs::symlink("a/b/c", dir.path().join("link")).unwrap();
        let (files, in_git) = files_of(dir.path()).unwrap();
        assert!(!in_git);
        let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(names, ["a/b/c", "link", "top.log"]);
    }

    #[test]
    fn sizes_read_as_a_person_would_say_them() {
        assert_eq!(size(512), "512 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(5 << 20), "5.0 MiB");
    }
}
