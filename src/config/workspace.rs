//! What of the host is mounted where: the workspace folder's git root is
//! mounted (as the reference CLI does with its default
//! `--mount-workspace-git-root`), so a config in a subfolder of a repository
//! still sees the whole repository, and the container workspace folder is
//! `/workspaces/<basename of git root>/<path from root>`.

use super::substitute::posix_basename;
use std::path::{Path, PathBuf};

/// Where the workspace lives in the container and what is mounted there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// The folder given on the command line, absolute (`devcontainer.local_folder`).
    pub local_folder: PathBuf,
    /// The host folder bound into the room: the git root of `local_folder`, or itself.
    pub mount_root: PathBuf,
    /// `workspaceFolder`: where commands run in the room.
    pub folder: String,
    /// `workspaceMount` in `--mount` syntax; `None` when the config sets it to
    /// the empty string, meaning no workspace mount at all.
    pub mount: Option<String>,
    /// What `mount_root/.git` is: a linked checkout needs its git folder
    /// mounted too (`plan::git`).
    pub git: GitFacts,
}

/// What the host's workspace root has for git (read by the config layer).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum GitFacts {
    /// A `.git` folder (a main checkout), or no `.git` at all: the workspace
    /// mount already holds everything git needs.
    #[default]
    Plain,
    /// `.git` is a file naming a git folder elsewhere.
    Linked(Linked),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Linked {
    /// The `.git` file's path on the host (for messages).
    pub file: PathBuf,
    /// What follows `gitdir:`, as written.
    pub written: String,
    /// Where it resolves on the host, following symlinks; `None` when it
    /// names nothing that exists.
    pub host_gitdir: Option<PathBuf>,
    /// The git folder's `commondir` file, as written: present for a
    /// worktree (`../..`), absent for a submodule's folder.
    pub commondir: Option<String>,
    /// Where `commondir` resolves on the host, following symlinks.
    pub host_common: Option<PathBuf>,
}

/// What `root/.git` is. A folder or nothing costs one failed open; a file
/// (a worktree or submodule) is read with the git folder's `commondir`.
/// Paths are resolved through the filesystem (git writes real paths, the
/// user may have come through a symlink).
pub fn read_git(root: &Path) -> GitFacts {
    let file = root.join(".git");
    let Ok(contents) = std::fs::read_to_string(&file) else { return GitFacts::Plain };
    let Some(written) = gitdir_of(&contents) else { return GitFacts::Plain };
    let host_gitdir = std::fs::canonicalize(root.join(written)).ok();
    let commondir = host_gitdir
        .as_ref()
        .and_then(|g| std::fs::read_to_string(g.join("commondir")).ok())
        .map(|c| c.trim_end_matches(['\n', '\r']).to_string())
        .filter(|c| !c.is_empty());
    let host_common = match (&host_gitdir, &commondir) {
        (Some(g), Some(c)) => std::fs::canonicalize(g.join(c)).ok(),
        _ => None,
    };
    GitFacts::Linked(Linked { file, written: written.to_string(), host_gitdir, commondir, host_common })
}

/// What follows `gitdir:` on a `.git` file's first line, or `None` for
/// anything else.
pub fn gitdir_of(contents: &str) -> Option<&str> {
    let line = contents.lines().next()?;
    let rest = line.strip_prefix("gitdir:")?.trim();
    (!rest.is_empty()).then_some(rest)
}

/// The git root of `folder`: the nearest ancestor holding `.git` (a folder, or
/// a file for worktrees and submodules). Looked up on disk rather than with
/// `git rev-parse`, so the host needs no git and `up` spends no process on it.
pub fn git_root(folder: &Path) -> Option<PathBuf> {
    folder.ancestors().find(|dir| dir.join(".git").exists()).map(Path::to_path_buf)
}

/// The defaults the reference CLI computes before substitution: the folder
/// from the config if set (non-empty), the mount from the config if the key is
/// present at all (an empty string then means no mount).
pub fn defaults(
    local_folder: &Path,
    config_folder: Option<&str>,
    config_mount: Option<&str>,
    mount_git_root: bool,
) -> Workspace {
    let mount_root = git_root(local_folder).filter(|_| mount_git_root).unwrap_or_else(|| local_folder.to_path_buf());
    let folder = match config_folder {
        Some(f) if !f.is_empty() => f.to_string(),
        _ => {
            let parent = mount_root.parent().unwrap_or(Path::new("/"));
            let rel = local_folder.strip_prefix(parent).unwrap_or(local_folder);
            format!("/workspaces/{}", rel.display())
        }
    };
    let mount = match config_mount {
        Some(m) => Some(m.to_string()),
        None => Some(default_mount(&mount_root)),
    };
    let git = read_git(&mount_root);
    Workspace {
        local_folder: local_folder.to_path_buf(),
        mount_root,
        folder,
        mount: mount.filter(|m| !m.is_empty()),
        git,
    }
}

/// `type=bind,source=<root>,target=/workspaces/<basename>`, quoting a side
/// that holds a comma as the reference does. No `consistency=` on Linux:
/// Podman refuses it.
fn default_mount(mount_root: &Path) -> String {
    let source = mount_root.display().to_string();
    let target = format!("/workspaces/{}", posix_basename(&source));
    let quote = |s: &str| if s.contains(',') { "\"" } else { "" };
    format!("type=bind,{q1}source={source}{q1},{q2}target={target}{q2}", q1 = quote(&source), q2 = quote(&target))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn a_plain_folder_is_mounted_at_workspaces_basename() {
        let dir = tempfile::tempdir().unwrap();
        let app = dir.path().join("app");
        fs::create_dir(&app).unwrap();
        let ws = defaults(&app, None, None, true);
        assert_eq!(ws.folder, "/workspaces/app");
        assert_eq!(ws.mount.unwrap(), format!("type=bind,source={},target=/workspaces/app", app.display()));
    }

    #[test]
    fn a_subfolder_of_a_repository_mounts_the_root_and_works_in_the_subfolder() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        fs::create_dir_all(repo.join(".git")).unwrap();
        fs::create_dir_all(repo.join("services/api")).unwrap();
        let ws = defaults(&repo.join("services/api"), None, None, true);
        assert_eq!(ws.mount_root, repo);
        assert_eq!(ws.folder, "/workspaces/repo/services/api");
        assert_eq!(ws.mount.unwrap(), format!("type=bind,source={},target=/workspaces/repo", repo.display()));
    }

    #[test]
    fn a_git_file_marks_a_worktree_root() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(".git"), "gitdir: /elsewhere").unwrap();
        fs::create_dir(dir.path().join("sub")).unwrap();
        assert_eq!(git_root(&dir.path().join("sub")).unwrap(), dir.path());
    }

    #[test]
    fn configured_folder_and_mount_win_and_an_empty_mount_means_none() {
        let dir = tempfile::tempdir().unwrap();
        let ws = defaults(dir.path(), Some("/src"), Some("type=volume,source=v,target=/src"), true);
        assert_eq!(ws.folder, "/src");
        assert_eq!(ws.mount.as_deref(), Some("type=volume,source=v,target=/src"));
        assert_eq!(defaults(dir.path(), Some("/src"), Some(""), true).mount, None);
    }

    #[test]
    fn an_empty_workspace_folder_counts_as_unset() {
        let dir = tempfile::tempdir().unwrap();
        let base = posix_basename(dir.path().to_str().unwrap()).to_string();
        assert_eq!(defaults(dir.path(), Some(""), None, true).folder, format!("/workspaces/{base}"));
    }

    #[test]
    fn only_a_gitdir_line_names_a_git_folder() {
        assert_eq!(gitdir_of("gitdir: /r/.git/worktrees/a\n"), Some("/r/.git/worktrees/a"));
        assert_eq!(gitdir_of("gitdir:../x"), Some("../x"));
        assert_eq!(gitdir_of("gitdir: \n"), None);
        assert_eq!(gitdir_of("ref: refs/heads/main"), None);
        assert_eq!(gitdir_of(""), None);
    }

    #[test]
    fn a_worktrees_git_file_is_read_with_its_common_folder() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let admin = root.join("repo/.git/worktrees/a");
        fs::create_dir_all(&admin).unwrap();
        fs::write(admin.join("commondir"), "../..\n").unwrap();
        fs::create_dir(root.join("a")).unwrap();
        fs::write(root.join("a/.git"), "gitdir: ../repo/.git/worktrees/a\n").unwrap();
        let GitFacts::Linked(l) = read_git(&root.join("a")) else { panic!("a .git file is a linked checkout") };
        assert_eq!(l.written, "../repo/.git/worktrees/a");
        assert_eq!(l.host_gitdir, Some(admin));
        assert_eq!(l.commondir.as_deref(), Some("../.."));
        assert_eq!(l.host_common, Some(root.join("repo/.git")));
    }

    #[test]
    fn a_git_folder_or_no_git_is_plain() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_git(dir.path()), GitFacts::Plain);
        fs::create_dir(dir.path().join(".git")).unwrap();
        assert_eq!(read_git(dir.path()), GitFacts::Plain);
    }

    #[test]
    fn a_git_file_naming_nothing_is_linked_to_nowhere() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(".git"), "gitdir: /does/not/exist\n").unwrap();
        let GitFacts::Linked(l) = read_git(dir.path()) else { panic!("a .git file is a linked checkout") };
        assert_eq!((l.host_gitdir, l.commondir, l.host_common), (None, None, None));
    }

    #[test]
    fn a_comma_in_the_source_is_quoted() {
        assert_eq!(default_mount(Path::new("/home/a,b")), "type=bind,\"source=/home/a,b\",\"target=/workspaces/a,b\"");
    }
}
