//! `workroomd files ROOT [--skip PATH]...`: every regular file and symlink
//! under ROOT (not following links, not crossing into a skipped path), one
//! [`workroomd::files::FileEntry`] as JSON a line, for `workroom sync`; and
//! `workroomd files ROOT --remove PATH...`: removes those files (what a sync
//! push carries of a deletion), with no shell or coreutils in the image.

use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path};
use workroomd::files::FileEntry;

pub fn run(args: &[String]) -> i32 {
    let Some((root, rest)) = args.split_first() else {
        eprintln!("usage: workroomd files ROOT [--skip PATH]... | ROOT --remove PATH...");
        return 2;
    };
    let root = Path::new(root);
    if rest.first().map(String::as_str) == Some("--remove") {
        return remove(root, &rest[1..]);
    }
    let mut skip = Vec::new();
    let mut it = rest.iter();
    while let Some(arg) = it.next() {
        match (arg.as_str(), it.next()) {
            ("--skip", Some(p)) => skip.push(p.trim_end_matches('/').to_string()),
            _ => {
                eprintln!("workroomd files: unexpected {arg:?}");
                return 2;
            }
        }
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut failed = false;
    walk(root, "", &skip, &mut out, &mut failed);
    if out.flush().is_err() {
        return 1;
    }
    i32::from(failed)
}

fn walk(root: &Path, relative: &str, skip: &[String], out: &mut impl Write, failed: &mut bool) {
    let dir = root.join(relative);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("workroomd files: {}: {e}", dir.display());
            *failed = true;
            return;
        }
    };
    let mut names: Vec<_> = entries.filter_map(|e| e.ok()).collect();
    names.sort_by_key(|e| e.file_name());
    for entry in names {
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = if relative.is_empty() { name } else { format!("{relative}/{name}") };
        if skip.contains(&rel) {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(root.join(&rel)) else { continue };
        let entry = if meta.is_dir() {
            walk(root, &rel, skip, out, failed);
            continue;
        } else if meta.file_type().is_symlink() {
            let Ok(target) = std::fs::read_link(root.join(&rel)) else { continue };
            let target = target.to_string_lossy().into_owned();
            FileEntry {
                sha256: hex(&Sha256::digest(target.as_bytes())),
                path: rel,
                size: meta.len(),
                mtime: meta.mtime(),
                link: Some(target),
            }
        } else if meta.is_file() {
            match hash(&root.join(&rel)) {
                Ok(sha256) => FileEntry { path: rel, size: meta.len(), mtime: meta.mtime(), sha256, link: None },
                Err(e) => {
                    eprintln!("workroomd files: {rel}: {e}");
                    *failed = true;
                    continue;
                }
            }
        } else {
            // Sockets, fifos, devices: not a workspace's content.
            continue;
        };
        if let Ok(line) = serde_json::to_string(&entry) {
            let _ = writeln!(out, "{line}");
        }
    }
}

fn hash(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(hex(&h.finalize()));
        }
        h.update(&buf[..n]);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Only plain relative paths below ROOT: nothing of `..` or `/` can make
/// this remove a file elsewhere.
fn remove(root: &Path, paths: &[String]) -> i32 {
    let mut status = 0;
    for p in paths {
        let ok = !p.is_empty() && Path::new(p).components().all(|c| matches!(c, Component::Normal(_)));
        if !ok {
            eprintln!("workroomd files --remove: {p:?} is not a path below the root");
            status = 2;
            continue;
        }
        match std::fs::remove_file(root.join(p)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                eprintln!("workroomd files --remove: {p}: {e}");
                status = 1;
            }
        }
    }
    status
}
