//! `workroom sync pull|push`: the workspace of a room on an engine that
//! cannot see this host's folder is the room's volume; this carries changes
//! between it and the folder here, both ways, through the engine's archive
//! endpoint (file contents) and the daemon binary's `files` job (the room's
//! listing, with hashes computed in the room). What the last sync left on
//! both sides is kept per room in workroom's state folder (path, size,
//! mtime, sha256), so a file changed on both sides since is a conflict and
//! neither side is touched. The planning is `plan::sync`'s.
//!
//! `.git` is uploaded with the workspace once, so git works in the room, but
//! not synced: both sides rewrite its index on every `git status`, and a
//! commit is carried by git itself (`git bundle`, a remote).

use crate::engine::{Engine, ExecSpec};
use crate::plan::sync::{self as plan, Direction, Entry, Listing, Plan};
use crate::plan::workspace::Decision;
use anyhow::{bail, Context as _};
use bollard::models::ContainerInspectResponse;
use futures_util::StreamExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use tokio::io::AsyncReadExt;

/// The most a room's listing may be: a line of ~150 bytes per file, for a
/// workspace of a few hundred thousand files.
const MAX_LISTING: u64 = 64 << 20;

/// The folder git keeps to itself (see the module doc).
const GIT_DIR: &str = ".git";

/// Where the base of room `room` is kept, in the state folder `dir`.
fn base_path(dir: &Path, room: &str) -> PathBuf {
    dir.join("sync").join(format!("{room}.json"))
}

fn load_base(room: &str) -> anyhow::Result<Listing> {
    // No home, no record: every file is new.
    let Some(dir) = crate::forward::state::dir() else { return Ok(Listing::new()) };
    let path = base_path(&dir, room);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| format!("{} is not a sync record", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Listing::new()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn save_base(room: &str, base: &Listing) -> anyhow::Result<()> {
    let path = base_path(&crate::forward::state::made()?, room);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot make {}", dir.display()))?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(base)?).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// Drops the record of a room whose volume is gone (`down --volumes`).
pub fn forget(room: &str) {
    if let Some(dir) = crate::forward::state::dir() {
        let _ = std::fs::remove_file(base_path(&dir, room));
    }
}

/// After the upload into a fresh volume, both sides hold `files` as they are here.
pub fn record_upload(room: &str, folder: &Path, files: &[PathBuf]) -> anyhow::Result<()> {
    let relative: Vec<String> = files.iter().map(|f| f.to_string_lossy().into_owned()).collect();
    let here = local_listing(folder, relative.into_iter(), &Listing::new());
    save_base(room, &here)
}

/// A file here as the listing knows it; the base's hash is reused when size
/// and mtime still match (as git's index does), so only changes are read.
fn local_entry(path: &Path, known: Option<&Entry>) -> Option<Entry> {
    use sha2::{Digest, Sha256};
    let meta = std::fs::symlink_metadata(path).ok()?;
    let (size, mtime) = (meta.len(), meta.mtime());
    if let Some(k) = known.filter(|k| k.size == size && k.mtime == mtime) {
        return Some(k.clone());
    }
    let sha256 = if meta.file_type().is_symlink() {
        let target = std::fs::read_link(path).ok()?;
        hex::encode(Sha256::digest(target.as_os_str().as_encoded_bytes()))
    } else if meta.is_file() {
        let mut file = std::fs::File::open(path).ok()?;
        let mut h = Sha256::new();
        std::io::copy(&mut file, &mut h).ok()?;
        hex::encode(h.finalize())
    } else {
        return None;
    };
    Some(Entry { size, mtime, sha256 })
}

fn local_listing(folder: &Path, paths: impl Iterator<Item = String>, base: &Listing) -> Listing {
    paths
        .filter(|p| p != GIT_DIR && !p.starts_with(".git/"))
        .filter_map(|p| Some((p.clone(), local_entry(&folder.join(&p), base.get(&p))?)))
        .collect()
}

/// Where the room has its workspace volume mounted, and the volume.
fn volume_mount(c: &ContainerInspectResponse, room: &str) -> anyhow::Result<(String, String)> {
    let labels = c.config.as_ref().and_then(|c| c.labels.as_ref());
    let Some(volume) = Decision::of_labels(labels).volume else {
        bail!(
            "{room} binds the workspace folder itself, so there is nothing to sync: edits show on both sides at once"
        );
    };
    let target = c
        .mounts
        .iter()
        .flatten()
        .find(|m| m.name.as_deref() == Some(volume.as_str()))
        .and_then(|m| m.destination.clone())
        .with_context(|| format!("{room} does not mount its workspace volume {volume}"))?;
    Ok((volume, target))
}

/// What one sync did.
#[derive(Debug)]
pub struct Report {
    pub plan: Plan,
    pub direction: Direction,
}

/// The running room a sync is with.
pub struct Target<'a> {
    pub id: &'a str,
    /// Its container name.
    pub name: &'a str,
    pub container: &'a ContainerInspectResponse,
}

/// Pulls or pushes the workspace of the running room `target` against
/// `folder`, limited to `only` (relative to the folder).
pub async fn sync(
    engine: &Engine,
    target: Target<'_>,
    folder: &Path,
    direction: Direction,
    only: Option<&str>,
    say: &crate::notices::Notices,
) -> anyhow::Result<Report> {
    let Target { id, name: room, container: c } = target;
    let (_volume, root) = volume_mount(c, room)?;
    let base = load_base(room)?;
    let (files, git) = super::workspace_volume::files_of(folder)?;
    let here = local_listing(folder, files.iter().map(|f| f.to_string_lossy().into_owned()), &base);
    let mut room_listing = room_files(engine, id, room, &root, folder, git).await?;
    if git {
        // What .gitignore says here holds for files made in the room too.
        let new: Vec<String> = room_listing.keys().filter(|p| !here.contains_key(*p)).cloned().collect();
        for ignored in git_ignored(folder, &new)? {
            room_listing.remove(&ignored);
        }
    }
    let plan = plan::plan(&base, &here, &room_listing, direction, only);
    match direction {
        Direction::Pull => {
            for path in &plan.copy {
                pull_file(engine, id, &root, folder, path).await?;
            }
            for path in &plan.delete {
                match std::fs::remove_file(folder.join(path)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e).with_context(|| format!("cannot remove {}", folder.join(path).display())),
                }
            }
        }
        Direction::Push => {
            if !plan.copy.is_empty() {
                let files: Vec<PathBuf> = plan.copy.iter().map(PathBuf::from).collect();
                let label = format!("pushing {} files into {room}", files.len());
                super::workspace_volume::upload(engine, id, (folder, files), &root, &label, say).await?;
            }
            if !plan.delete.is_empty() {
                let mut argv = vec![workroomd::room::DAEMON_PATH.to_string(), "files".into(), root.clone()];
                argv.push("--remove".into());
                argv.extend(plan.delete.iter().cloned());
                let (code, _) = run_job(engine, id, argv).await?;
                if code != Some(0) {
                    bail!("{room} could not remove what was deleted here (exit {code:?})");
                }
            }
        }
    }
    save_base(room, &plan.base)?;
    Ok(Report { plan, direction })
}

/// The room's listing from the daemon binary, skipping `.git` and the
/// folders `.gitignore` leaves out here (a `target/` is not read at all).
async fn room_files(
    engine: &Engine,
    id: &str,
    room: &str,
    root: &str,
    folder: &Path,
    git: bool,
) -> anyhow::Result<Listing> {
    let mut argv = vec![workroomd::room::DAEMON_PATH.to_string(), "files".into(), root.to_string()];
    let mut skip = vec![GIT_DIR.to_string()];
    if git {
        skip.extend(ignored_folders(folder)?);
    }
    for s in skip {
        argv.extend(["--skip".to_string(), s]);
    }
    let (code, out) = run_job(engine, id, argv).await?;
    if code != Some(0) {
        bail!(
            "{room} could not list its workspace (exit {code:?}); `workroom hand-off` gives it this workroom's daemon"
        );
    }
    let mut listing = Listing::new();
    for line in out.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let f: workroomd::files::FileEntry =
            serde_json::from_slice(line).with_context(|| format!("{room} listed its workspace in another form"))?;
        listing.insert(f.path, Entry { size: f.size, mtime: f.mtime, sha256: f.sha256 });
    }
    Ok(listing)
}

/// Runs the daemon binary as root in the room; its exit code and stdout.
async fn run_job(engine: &Engine, id: &str, argv: Vec<String>) -> anyhow::Result<(Option<i64>, Vec<u8>)> {
    let spec = ExecSpec { argv, user: Some("0".into()), ..Default::default() };
    let mut exec = engine.exec(id, &spec).await?;
    let mut out = Vec::new();
    (&mut exec.output).take(MAX_LISTING + 1).read_to_end(&mut out).await.context("read the room's answer")?;
    if out.len() as u64 > MAX_LISTING {
        bail!("the room's listing of its workspace is over {} MiB", MAX_LISTING >> 20);
    }
    Ok((engine.exec_exit_code(&exec.id).await?, out))
}

/// `git ls-files -o -i --exclude-standard --directory`: the ignored
/// untracked folders (and files) here, collapsed.
fn ignored_folders(folder: &Path) -> anyhow::Result<Vec<String>> {
    let out = std::process::Command::new("git")
        .args(["ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"])
        .current_dir(folder)
        .stdin(std::process::Stdio::null())
        .output()
        .context("run git ls-files")?;
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter(|n| n.ends_with(b"/"))
        .map(|n| String::from_utf8_lossy(n).trim_end_matches('/').to_string())
        .collect())
}

/// Which of `paths` `.gitignore` leaves out here.
fn git_ignored(folder: &Path, paths: &[String]) -> anyhow::Result<Vec<String>> {
    use std::io::Write;
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    let mut child = std::process::Command::new("git")
        .args(["check-ignore", "-z", "--stdin", "--no-index"])
        .current_dir(folder)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("run git check-ignore")?;
    let input: Vec<u8> = paths.iter().flat_map(|p| p.bytes().chain([0])).collect();
    let mut stdin = child.stdin.take().context("git check-ignore's stdin")?;
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().context("run git check-ignore")?;
    let _ = writer.join();
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect())
}

/// One file from the room into `folder`, written beside its place and
/// renamed over it, with the room's mode and mtime.
async fn pull_file(engine: &Engine, id: &str, root: &str, folder: &Path, path: &str) -> anyhow::Result<()> {
    let far = format!("{root}/{path}");
    let mut tar_bytes = Vec::new();
    let mut stream = std::pin::pin!(engine.download_stream(id, &far));
    while let Some(chunk) = stream.next().await {
        tar_bytes.extend_from_slice(&chunk?);
    }
    let dest = folder.join(path);
    let parent = dest.parent().unwrap_or(folder);
    std::fs::create_dir_all(parent).with_context(|| format!("cannot make {}", parent.display()))?;
    let tmp = parent.join(format!(".workroom-sync-{}", std::process::id()));
    let mut archive = tar::Archive::new(&tar_bytes[..]);
    archive.set_preserve_mtime(true);
    archive.set_preserve_permissions(true);
    let mut entries = archive.entries().context("read the room's archive")?;
    let mut entry = entries.next().with_context(|| format!("the room sent nothing for {path}"))??;
    let _ = std::fs::remove_file(&tmp);
    entry.unpack(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &dest).with_context(|| format!("cannot write {}", dest.display()))?;
    Ok(())
}
