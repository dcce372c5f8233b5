//! The host's git for `up --worktree` and `down --worktree`: which
//! repository a folder is in, making or finding its worktree NAME, what
//! would be lost with it, and removing it. The decisions are in
//! `plan/worktree.rs`; this runs `git` and reads the filesystem.
//!
//! It is the host's own git, run as the user runs it: workroom does not
//! write into `.git` itself, so the repository stays exactly as git would
//! leave it (hooks, `extensions`, its locking).

use crate::plan::worktree::{self as plan, Checkout, GitFs, Listed, RemovalFacts, Unpushed};
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    #[error(
        "`--worktree` needs git on this host and none was found on PATH; install git, or make the worktree \
         with your own tools and run `workroom up` in it"
    )]
    NoGit,
    #[error("cannot run git")]
    Spawn(#[source] std::io::Error),
    #[error("{folder} is not in a git repository: {message}")]
    NotARepository { folder: String, message: String },
    #[error("git {args}: {message}")]
    Git { args: String, message: String },
    #[error("{path} exists and is not a worktree of {repository}; move it away or choose another NAME")]
    Occupied { path: String, repository: String },
    #[error("no worktree {name} at {path} (`git worktree list` shows the repository's worktrees)")]
    NoWorktree { name: String, path: String },
    #[error("{0}")]
    Refused(String),
}

/// The repository a command runs in.
#[derive(Debug, Clone)]
pub struct Repository {
    /// The checkout the command was run in (its top folder): whose
    /// `.workroom.toml` says where worktrees go.
    pub current: PathBuf,
    /// The main checkout (git's first worktree; a bare repository's folder).
    pub main: PathBuf,
    pub worktrees: Vec<Listed>,
}

impl Repository {
    /// The repository `folder` is in (the main checkout or any worktree of
    /// it, or a folder inside one).
    pub fn of(folder: &Path) -> Result<Repository, WorktreeError> {
        let not_a_repo = |e: WorktreeError| match e {
            WorktreeError::Git { message, .. } => {
                WorktreeError::NotARepository { folder: folder.display().to_string(), message }
            }
            e => e,
        };
        let current = PathBuf::from(git(folder, &["rev-parse", "--show-toplevel"]).map_err(not_a_repo)?.trim());
        // The porcelain list, not `--git-common-dir`'s parent: it names the
        // main checkout of a repository made with `--separate-git-dir` too,
        // and lists the worktrees `up` may reuse in the same run.
        let worktrees = plan::parse_list(&git(folder, &["worktree", "list", "--porcelain"])?);
        let main = worktrees.first().map(|w| w.path.clone()).unwrap_or_else(|| current.clone());
        Ok(Repository { current, main, worktrees })
    }

    /// Where NAME goes, by the `worktrees` setting.
    pub fn place(&self, setting: Option<&Path>, name: &str) -> PathBuf {
        plan::place(&self.main, setting, name)
    }

    /// The registered worktree at `path`, if any.
    pub fn listed(&self, path: &Path) -> Option<&Listed> {
        self.worktrees.iter().find(|w| w.path == path)
    }
}

/// A worktree `up --worktree` brings a room up in.
#[derive(Debug, Clone)]
pub struct Made {
    pub path: PathBuf,
    /// Its branch (`None`: detached, as someone left an existing worktree).
    pub branch: Option<String>,
    /// Made now, rather than found.
    pub created: bool,
    /// What the user asked that was not done, said as warnings.
    pub notes: Vec<String>,
}

/// What `up --worktree NAME [--branch B] [--from REF]` asks.
#[derive(Debug, Clone)]
pub struct Wanted<'a> {
    pub name: &'a str,
    pub branch: Option<&'a str>,
    pub from: Option<&'a str>,
}

/// The worktree NAME at its place: the one there, else a new one on branch
/// B (default NAME), which is checked out when it exists and made from REF
/// (default the current checkout's HEAD) when it does not.
pub fn make(repo: &Repository, place: &Path, wanted: &Wanted) -> Result<Made, WorktreeError> {
    let mut notes = Vec::new();
    if let Some(found) = repo.listed(place) {
        if let Some(asked) = wanted.branch.filter(|b| found.branch.as_deref() != Some(*b)) {
            let on = found.branch.as_deref().unwrap_or("a detached HEAD");
            notes.push(format!("the worktree {} is on {on}, not {asked}; it is used as it is", place.display()));
        }
        if let Some(from) = wanted.from {
            notes.push(format!("the worktree {} exists; --from {from} is not used", place.display()));
        }
        return Ok(Made { path: place.to_path_buf(), branch: found.branch.clone(), created: false, notes });
    }
    if std::fs::symlink_metadata(place).is_ok() {
        return Err(WorktreeError::Occupied {
            path: place.display().to_string(),
            repository: repo.main.display().to_string(),
        });
    }
    let branch = wanted.branch.unwrap_or(wanted.name);
    let place_arg = place.display().to_string();
    let exists = status(&repo.current, &["show-ref", "--verify", "--quiet", &format!("refs/heads/{branch}")])?;
    if exists {
        if let Some(from) = wanted.from {
            notes.push(format!("the branch {branch} exists and is checked out as it is; --from {from} is not used"));
        }
        git(&repo.current, &["worktree", "add", &place_arg, branch])?;
    } else {
        let from = wanted.from.unwrap_or("HEAD");
        git(&repo.current, &["worktree", "add", "-b", branch, &place_arg, from])?;
    }
    Ok(Made { path: place.to_path_buf(), branch: Some(branch.to_string()), created: true, notes })
}

/// What would be lost with the worktree at `listed`: its uncommitted files,
/// and its commits past its upstream, or with no upstream, on no other
/// branch (local or remote).
pub fn removal_facts(listed: &Listed) -> Result<RemovalFacts, WorktreeError> {
    let dir = &listed.path;
    let status = git(dir, &["status", "--porcelain"])?;
    let count = |text: String| text.trim().parse::<u64>().unwrap_or(0);
    let upstream = git(dir, &["rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{upstream}"]).ok();
    let unpushed = match upstream.map(|u| u.trim().to_string()).filter(|u| !u.is_empty()) {
        Some(upstream) => {
            let n = count(git(dir, &["rev-list", "--count", "@{upstream}..HEAD"])?);
            Unpushed::PastUpstream { upstream, count: n }
        }
        None => {
            // Its own branch left out, or every commit would be "elsewhere".
            let exclude = listed.branch.as_ref().map(|b| format!("--exclude={b}"));
            let mut args = vec!["rev-list", "--count", "HEAD", "--not"];
            args.extend(exclude.as_deref());
            args.extend(["--branches", "--remotes"]);
            Unpushed::OnlyHere { count: count(git(dir, &args)?) }
        }
    };
    Ok(RemovalFacts { status, unpushed })
}

/// `git worktree remove` of `path`, run from the main checkout (the command
/// may run inside the worktree it removes). `force`: git's `--force`, which
/// removes one with changes.
pub fn remove(repo: &Repository, path: &Path, force: bool) -> Result<(), WorktreeError> {
    let path = path.display().to_string();
    let mut args = vec!["worktree", "remove"];
    if force {
        args.push("--force");
    }
    args.push(&path);
    git(&repo.main, &args).map(|_| ())
}

/// The repository and branch of a room's folder, read from this host's
/// filesystem (no git run: `list` reads every room's).
pub fn checkout_of(folder: &Path) -> Option<Checkout> {
    plan::checkout_of(folder, &HostFs)
}

struct HostFs;

impl GitFs for HostFs {
    fn read(&self, path: &Path) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }
    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }
}

/// `git -C dir ARGS`: its stdout, or git's refusal in one line.
fn git(dir: &Path, args: &[&str]) -> Result<String, WorktreeError> {
    let out = run(dir, args)?;
    if !out.status.success() {
        return Err(WorktreeError::Git {
            args: args.join(" "),
            message: plan::git_error_line(&String::from_utf8_lossy(&out.stderr)),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether `git -C dir ARGS` succeeds (a question git answers by its status).
fn status(dir: &Path, args: &[&str]) -> Result<bool, WorktreeError> {
    Ok(run(dir, args)?.status.success())
}

fn run(dir: &Path, args: &[&str]) -> Result<std::process::Output, WorktreeError> {
    Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        // git's messages in English, so its refusal reads as the rest of ours.
        .env("LC_ALL", "C")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(
            |e| if e.kind() == std::io::ErrorKind::NotFound { WorktreeError::NoGit } else { WorktreeError::Spawn(e) },
        )
}
