//! Worktree rooms, decided without I/O: where `up --worktree NAME` puts the
//! worktree, what `git worktree list --porcelain` says, why `down --worktree`
//! refuses, and which repository and branch a room's folder is on (for
//! `list`), from a few facts of the host's filesystem.
//!
//! The git commands themselves run in `room/worktree.rs`.
//!
//! Where a worktree goes: `<parent of the main checkout>/<repo>.worktrees/NAME`
//! unless the `worktrees` setting says otherwise. One folder beside the
//! repository, not `<repo>-NAME` siblings: the repository's parent keeps one
//! extra entry however many agents run; the worktrees sit outside the main
//! checkout, so its `git status`, its file watchers and its searches do not
//! see them; and removing them all is removing one folder.

use std::path::{Path, PathBuf};

/// What the default place adds to the repository's folder name.
pub const DEFAULT_SUFFIX: &str = ".worktrees";

/// What the `worktrees` setting may hold to mean the repository's folder name
/// (a user-wide `~/worktrees/{repo}` keeps two repositories' `feat` apart).
pub const REPO_PLACEHOLDER: &str = "{repo}";

/// A worktree's NAME is one folder name: letters, digits, `-`, `_` and `.`,
/// not starting with `.` or `-` (no hidden folder, nothing git or a shell
/// could read as an option). A branch with a `/` is `--branch feat/x`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "worktree name {0:?}: use letters, digits, `-`, `_` and `.` (one folder name, not starting \
     with `.` or `-`); a branch with a `/` is `--branch feat/x`"
)]
pub struct BadWorktreeName(pub String);

pub fn check_name(name: &str) -> Result<(), BadWorktreeName> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !name.starts_with(['.', '-'])
        && !name.ends_with(".lock");
    ok.then_some(()).ok_or_else(|| BadWorktreeName(name.to_string()))
}

/// Where the worktree NAME of the repository checked out at `main` goes.
/// `setting` is the `worktrees` setting (`~` already expanded): a folder
/// that holds the worktrees, relative to the main checkout when relative.
pub fn place(main: &Path, setting: Option<&Path>, name: &str) -> PathBuf {
    let repo = main.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "repository".into());
    match setting {
        Some(folder) => {
            let folder = PathBuf::from(folder.to_string_lossy().replace(REPO_PLACEHOLDER, &repo));
            normalize(&main.join(folder)).join(name)
        }
        None => main.parent().unwrap_or(main).join(format!("{repo}{DEFAULT_SUFFIX}")).join(name),
    }
}

// A place is said and compared as a plain path (`worktrees = "../wt"` is
// the main checkout's sibling, not a path through it).
use workroomd::paths::lexical as normalize;

/// One worktree as `git worktree list --porcelain` describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listed {
    pub path: PathBuf,
    /// `refs/heads/` left off; `None` when detached (or bare).
    pub branch: Option<String>,
    pub bare: bool,
}

/// `git worktree list --porcelain`: blocks of `key value` lines, the main
/// worktree first.
pub fn parse_list(text: &str) -> Vec<Listed> {
    let mut all: Vec<Listed> = Vec::new();
    for line in text.lines() {
        let (key, value) = line.split_once(' ').unwrap_or((line, ""));
        match key {
            "worktree" => all.push(Listed { path: PathBuf::from(value), ..Default::default() }),
            "branch" => {
                if let Some(w) = all.last_mut() {
                    w.branch = Some(value.strip_prefix("refs/heads/").unwrap_or(value).to_string());
                }
            }
            "bare" => {
                if let Some(w) = all.last_mut() {
                    w.bare = true;
                }
            }
            _ => {}
        }
    }
    all
}

/// What `down --worktree` checks before removing anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovalFacts {
    /// `git status --porcelain` in the worktree: changed and untracked files.
    pub status: String,
    /// Commits that would be lost with the worktree's branch.
    pub unpushed: Unpushed,
}

/// Commits on the worktree's HEAD that no one else has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unpushed {
    /// Not reachable from the branch's upstream (`@{u}..HEAD`).
    PastUpstream { upstream: String, count: u64 },
    /// No upstream: not contained in any other local or remote branch.
    /// A worktree made from `main` and never committed to has none.
    OnlyHere { count: u64 },
}

/// Why `down --worktree` keeps the worktree, or `None` when nothing would be
/// lost. Every reason is said, so one `--force` is decided knowingly.
pub fn refusal(path: &Path, name: &str, facts: &RemovalFacts) -> Option<String> {
    let mut reasons = Vec::new();
    let changed: Vec<&str> = facts.status.lines().filter(|l| l.len() > 3).map(|l| &l[3..]).collect();
    if !changed.is_empty() {
        const SHOWN: usize = 3;
        let mut files = changed.iter().take(SHOWN).copied().collect::<Vec<_>>().join(", ");
        if changed.len() > SHOWN {
            files.push_str(&format!(" and {} more", changed.len() - SHOWN));
        }
        reasons.push(format!("uncommitted changes ({files})"));
    }
    let commits = |n: u64| if n == 1 { "1 commit".to_string() } else { format!("{n} commits") };
    match &facts.unpushed {
        Unpushed::PastUpstream { upstream, count } if *count > 0 => {
            reasons.push(format!("{} not pushed to {upstream}", commits(*count)))
        }
        Unpushed::OnlyHere { count } if *count > 0 => {
            reasons.push(format!("{} on no other branch and no upstream", commits(*count)))
        }
        _ => {}
    }
    if reasons.is_empty() {
        return None;
    }
    Some(format!(
        "the worktree {} has {}; commit and push, or `workroom down --worktree {name} --force` removes it \
         anyway (its branch is kept)",
        path.display(),
        reasons.join(" and ")
    ))
}

/// The first line git says went wrong (`fatal: ...`, `error: ...`), without
/// its prefix: git's own refusal, in one line.
pub fn git_error_line(stderr: &str) -> String {
    let lines = || stderr.lines().map(str::trim).filter(|l| !l.is_empty());
    let said = lines().find_map(|l| l.strip_prefix("fatal: ").or_else(|| l.strip_prefix("error: ")));
    said.or_else(|| lines().next()).unwrap_or("(no message)").to_string()
}

/// The few facts of the host's filesystem that say where a folder's
/// repository is: what a path holds.
pub trait GitFs {
    /// The text of a file; `None` for a folder, a missing path or unreadable text.
    fn read(&self, path: &Path) -> Option<String>;
    fn is_dir(&self, path: &Path) -> bool;
}

/// The repository and branch a room's folder is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkout {
    /// The main checkout (for a worktree: its repository's, so a
    /// repository's rooms are listed together).
    pub repository: PathBuf,
    pub head: Head,
    /// A linked worktree (`git worktree add`), not a main checkout.
    pub linked: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    Branch(String),
    /// The commit, when HEAD is not on a branch.
    Detached(String),
    Unknown,
}

impl Head {
    pub fn branch(&self) -> Option<&str> {
        match self {
            Head::Branch(b) => Some(b),
            _ => None,
        }
    }

    /// As `list` shows it.
    pub fn shown(&self) -> String {
        match self {
            Head::Branch(b) => b.clone(),
            Head::Detached(c) => format!("(detached {})", &c[..c.len().min(7)]),
            Head::Unknown => "-".into(),
        }
    }
}

/// The checkout `folder` is in: the nearest `.git` at or above it (a folder,
/// or a file `gitdir: PATH` as in a worktree or a submodule), its common dir
/// (a worktree's `commondir` file), and the branch its HEAD names. The
/// repository is the common dir's parent when the common dir is a `.git`
/// folder, else the checkout itself (a submodule, a separate git dir).
/// `None` outside any repository, or when the `gitdir:` points nowhere.
pub fn checkout_of(folder: &Path, fs: &dyn GitFs) -> Option<Checkout> {
    let (root, git_dir) = folder.ancestors().find_map(|dir| {
        let dot_git = dir.join(".git");
        if fs.is_dir(&dot_git) {
            return Some((dir.to_path_buf(), dot_git));
        }
        let text = fs.read(&dot_git)?;
        let target = text.lines().find_map(|l| l.strip_prefix("gitdir:"))?.trim();
        Some((dir.to_path_buf(), normalize(&dir.join(target))))
    })?;
    if !fs.is_dir(&git_dir) {
        return None;
    }
    let commondir = fs.read(&git_dir.join("commondir"));
    let linked = commondir.is_some();
    let common = match commondir {
        Some(text) => normalize(&git_dir.join(text.trim())),
        None => git_dir.clone(),
    };
    let repository = match (common.file_name(), common.parent()) {
        (Some(n), Some(parent)) if n == ".git" => parent.to_path_buf(),
        _ => root,
    };
    let head = match fs.read(&git_dir.join("HEAD")) {
        Some(text) => match text.trim().strip_prefix("ref:") {
            Some(r) => {
                let r = r.trim();
                Head::Branch(r.strip_prefix("refs/heads/").unwrap_or(r).to_string())
            }
            None if !text.trim().is_empty() => Head::Detached(text.trim().to_string()),
            None => Head::Unknown,
        },
        None => Head::Unknown,
    };
    Some(Checkout { repository, head, linked })
}

/// Items grouped by their repository, for `list`: each repository's items
/// together, repositories in path order, items without one last; the items'
/// own order is kept within a group.
pub fn grouped<T>(items: Vec<(Option<PathBuf>, T)>) -> Vec<(Option<PathBuf>, Vec<T>)> {
    let mut groups: Vec<(Option<PathBuf>, Vec<T>)> = Vec::new();
    for (repository, item) in items {
        match groups.iter_mut().find(|(r, _)| *r == repository) {
            Some((_, members)) => members.push(item),
            None => groups.push((repository, vec![item])),
        }
    }
    // None sorts first in Option's order; a room in no repository goes last.
    groups.sort_by(|(a, _), (b, _)| (a.is_none(), a).cmp(&(b.is_none(), b)));
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn a_worktree_goes_beside_the_repository_unless_the_setting_names_a_folder() {
        let main = Path::new("/src/app");
        // (setting, name, expected)
        let table = [
            (None, "feat-a", "/src/app.worktrees/feat-a"),
            (Some("/wt"), "feat-a", "/wt/feat-a"),
            (Some(".worktrees"), "x", "/src/app/.worktrees/x"),
            (Some("../wt/{repo}"), "x", "/src/wt/app/x"),
            (Some("/home/ann/worktrees/{repo}"), "x", "/home/ann/worktrees/app/x"),
            (Some("./a/../b"), "x", "/src/app/b/x"),
        ];
        for (setting, name, expected) in table {
            assert_eq!(place(main, setting.map(Path::new), name), Path::new(expected), "{setting:?} {name}");
        }
    }

    #[test]
    fn a_worktree_name_is_one_folder_name() {
        for good in ["feat-a", "a", "fix_1.2", "Agent7"] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        for bad in ["", ".hidden", "-x", "a/b", "..", "a b", "x.lock", "é", &"x".repeat(101)] {
            let e = check_name(bad).unwrap_err().to_string();
            assert!(e.contains("--branch"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn the_porcelain_list_gives_each_worktree_its_branch_the_main_one_first() {
        let text = "worktree /src/app\nHEAD 1111\nbranch refs/heads/main\n\n\
                    worktree /src/app.worktrees/a\nHEAD 2222\nbranch refs/heads/feat/a\n\n\
                    worktree /src/app.worktrees/b\nHEAD 3333\ndetached\nlocked reason here\n\n";
        let listed = parse_list(text);
        assert_eq!(
            listed,
            vec![
                Listed { path: "/src/app".into(), branch: Some("main".into()), bare: false },
                Listed { path: "/src/app.worktrees/a".into(), branch: Some("feat/a".into()), bare: false },
                Listed { path: "/src/app.worktrees/b".into(), branch: None, bare: false },
            ]
        );
        assert!(parse_list("worktree /srv/app.git\nbare\n\n")[0].bare);
    }

    fn facts(status: &str, unpushed: Unpushed) -> RemovalFacts {
        RemovalFacts { status: status.into(), unpushed }
    }

    #[test]
    fn down_refuses_a_worktree_with_uncommitted_or_unpushed_work_and_says_why() {
        let p = Path::new("/w/x");
        assert_eq!(refusal(p, "x", &facts("", Unpushed::OnlyHere { count: 0 })), None);
        let up = |count| Unpushed::PastUpstream { upstream: "origin/x".into(), count };
        assert_eq!(refusal(p, "x", &facts("", up(0))), None);

        let dirty = refusal(p, "x", &facts(" M src/a.rs\n?? new.txt\n", Unpushed::OnlyHere { count: 0 })).unwrap();
        assert!(dirty.starts_with("the worktree /w/x has uncommitted changes (src/a.rs, new.txt);"), "{dirty}");
        assert!(
            dirty.ends_with("`workroom down --worktree x --force` removes it anyway (its branch is kept)"),
            "{dirty}"
        );

        let many = refusal(p, "x", &facts("?? a\n?? b\n?? c\n?? d\n?? e\n", up(0))).unwrap();
        assert!(many.contains("(a, b, c and 2 more)"), "{many}");

        let ahead = refusal(p, "x", &facts("", up(2))).unwrap();
        assert!(ahead.contains("has 2 commits not pushed to origin/x;"), "{ahead}");
        let alone = refusal(p, "x", &facts("", Unpushed::OnlyHere { count: 1 })).unwrap();
        assert!(alone.contains("has 1 commit on no other branch and no upstream;"), "{alone}");

        let both = refusal(p, "x", &facts(" D gone\n", up(1))).unwrap();
        assert!(both.contains("uncommitted changes (gone) and 1 commit not pushed"), "{both}");
    }

    #[test]
    fn gits_refusal_is_its_first_fatal_or_error_line() {
        let refused = "Preparing worktree (checking out 'x')\nfatal: 'x' is already used by worktree at '/a'\n";
        assert_eq!(git_error_line(refused), "'x' is already used by worktree at '/a'");
        assert_eq!(git_error_line("error: bad\nfatal: worse\n"), "bad");
        assert_eq!(git_error_line("\nsomething odd\n"), "something odd");
        assert_eq!(git_error_line(""), "(no message)");
    }

    /// Files with their text, and folders.
    #[derive(Default)]
    struct Fake {
        files: HashMap<PathBuf, String>,
        dirs: Vec<PathBuf>,
    }

    impl Fake {
        fn file(mut self, path: &str, text: &str) -> Fake {
            self.files.insert(path.into(), text.into());
            self
        }
        fn dir(mut self, path: &str) -> Fake {
            self.dirs.push(path.into());
            self
        }
    }

    impl GitFs for Fake {
        fn read(&self, path: &Path) -> Option<String> {
            self.files.get(path).cloned()
        }
        fn is_dir(&self, path: &Path) -> bool {
            self.dirs.iter().any(|d| d == path)
        }
    }

    fn checkout(repository: &str, head: Head, linked: bool) -> Option<Checkout> {
        Some(Checkout { repository: repository.into(), head, linked })
    }

    #[test]
    fn a_folders_repository_is_its_main_checkout_and_its_branch_is_its_own_head() {
        let fs = Fake::default()
            .dir("/src/app/.git")
            .file("/src/app/.git/HEAD", "ref: refs/heads/main\n")
            // A worktree with an absolute gitdir.
            .file("/src/app.worktrees/a/.git", "gitdir: /src/app/.git/worktrees/a\n")
            .dir("/src/app/.git/worktrees/a")
            .file("/src/app/.git/worktrees/a/commondir", "../..\n")
            .file("/src/app/.git/worktrees/a/HEAD", "ref: refs/heads/feat/a\n")
            // One with a relative gitdir (git worktree add --relative-paths), detached.
            .file("/src/b/.git", "gitdir: ../app/.git/worktrees/b\n")
            .dir("/src/app/.git/worktrees/b")
            .file("/src/app/.git/worktrees/b/commondir", "../..\n")
            .file("/src/app/.git/worktrees/b/HEAD", "0123456789abcdef\n")
            // A submodule: its git dir is in the superproject's modules.
            .file("/src/app/lib/.git", "gitdir: ../.git/modules/lib\n")
            .dir("/src/app/.git/modules/lib")
            .file("/src/app/.git/modules/lib/HEAD", "ref: refs/heads/dev\n")
            // A gitdir that points nowhere.
            .file("/src/lost/.git", "gitdir: /nowhere/.git/worktrees/lost\n");
        let table = [
            ("/src/app", checkout("/src/app", Head::Branch("main".into()), false)),
            ("/src/app/sub/dir", checkout("/src/app", Head::Branch("main".into()), false)),
            ("/src/app.worktrees/a", checkout("/src/app", Head::Branch("feat/a".into()), true)),
            ("/src/b", checkout("/src/app", Head::Detached("0123456789abcdef".into()), true)),
            ("/src/app/lib", checkout("/src/app/lib", Head::Branch("dev".into()), false)),
            ("/src/lost", None),
            ("/elsewhere", None),
        ];
        for (folder, expected) in table {
            assert_eq!(checkout_of(Path::new(folder), &fs), expected, "{folder}");
        }
        assert_eq!(Head::Detached("0123456789abcdef".into()).shown(), "(detached 0123456)");
    }

    #[test]
    fn a_repositorys_rooms_are_listed_together_and_rooms_in_no_repository_last() {
        let items = vec![
            (None, "loose"),
            (Some(PathBuf::from("/src/b")), "b-main"),
            (Some(PathBuf::from("/src/a")), "a-feat"),
            (Some(PathBuf::from("/src/b")), "b-feat"),
            (Some(PathBuf::from("/src/a")), "a-main"),
        ];
        let groups = grouped(items);
        assert_eq!(
            groups,
            vec![
                (Some(PathBuf::from("/src/a")), vec!["a-feat", "a-main"]),
                (Some(PathBuf::from("/src/b")), vec!["b-main", "b-feat"]),
                (None, vec!["loose"]),
            ]
        );
    }
}
