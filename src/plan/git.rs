//! Git in a room whose workspace is a linked checkout: a worktree (`git
//! worktree add`) or a submodule. Its `.git` is a file, `gitdir: PATH`,
//! naming a folder outside the workspace; without that folder in the room
//! git says "not a git repository". Decided here, without I/O, from what
//! [`crate::config::workspace::read_git`] found on the host.
//!
//! The mechanism (docs/adr/0013-worktree-rooms.md):
//! - the git folder the `.git` file names is bound read-write at the path
//!   where that name resolves *in the room*: the same absolute path when the
//!   file holds one, else the relative name taken from the room's workspace
//!   folder. For a worktree that is the repository's common folder (the
//!   main `.git`, with every worktree's admin folder under `worktrees/`),
//!   so objects, refs, `git gc` and the other worktrees' HEADs and indexes
//!   are what git on the host sees; a commit in the room is on the host's
//!   branch at once;
//! - the other worktrees' checkouts are not in the room, and `git worktree
//!   prune` (and `git gc`, which runs it) deletes the admin folder of every
//!   worktree whose checkout it cannot find, on the host, through the bind.
//!   So the daemon is told where the common folder is (`serve --git-common
//!   DIR`) and keeps an empty stand-in at each registered worktree's
//!   checkout path in the room's own filesystem, watching `worktrees/` for
//!   new ones. Git sees every worktree alive and deletes nothing.

use super::mounts::MountSpec;
pub use crate::config::{GitFacts, Linked};
use std::path::{Path, PathBuf};

/// What a linked checkout's room gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitPlan {
    /// Binds, read-write, of host git folders at their room paths.
    pub mounts: Vec<MountSpec>,
    /// A worktree's common folder in the room: the daemon keeps the other
    /// worktrees' stand-ins from it.
    pub common_in_room: Option<String>,
    /// What `config` and `up --json` say was mounted.
    pub summary: Summary,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// `worktree` or `submodule`.
    pub kind: String,
    /// The git folder bound into the room, on the host.
    pub host_folder: String,
    /// Where the room sees it.
    pub room_folder: String,
}

/// Why a linked checkout gets no git folder in its room (said as a warning:
/// the room works, git in it does not).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GitSkip {
    #[error("{file} names the git folder {written:?}, which does not exist; git will not work in the room")]
    Nowhere { file: String, written: String },
    #[error("{file} names the git folder {written:?}, whose commondir {commondir:?} does not exist; git will not work in the room")]
    NoCommon { file: String, written: String, commondir: String },
    #[error("{file} names the git folder {written:?}, which would be mounted at {target}, a path the room keeps for itself; git will not work in the room")]
    Reserved { file: String, written: String, target: String },
}

/// Folders a git folder is never mounted in: the room's own and the
/// kernel's. A `gitdir` that resolves there is a broken or hostile file.
const RESERVED: &[&str] = &["/proc", "/sys", "/dev", "/.workroom"];

/// The git plan of a loaded workspace: only where the workspace mount is a
/// bind of the git root does the room path of its `.git` file's name follow
/// from the mount (a compose file's or a custom mount's is not read).
pub fn for_workspace(loaded: &crate::config::Loaded) -> Result<Option<GitPlan>, GitSkip> {
    let Some(spec) = loaded.workspace.mount.as_deref().and_then(|m| super::mounts::parse(m).ok()) else {
        return Ok(None);
    };
    let root = loaded.workspace.mount_root.display().to_string();
    if spec.kind != "bind" || spec.source.as_deref() != Some(root.as_str()) {
        return Ok(None);
    }
    plan(&loaded.workspace.git, &spec.target)
}

/// The mounts a linked checkout at `room_root` (the workspace mount's target)
/// needs; `Ok(None)` for a plain checkout or a git folder the workspace mount
/// already holds.
pub fn plan(facts: &GitFacts, room_root: &str) -> Result<Option<GitPlan>, GitSkip> {
    let GitFacts::Linked(l) = facts else { return Ok(None) };
    let file = l.file.display().to_string();
    let Some(host_gitdir) = &l.host_gitdir else {
        return Err(GitSkip::Nowhere { file, written: l.written.clone() });
    };
    let room_gitdir = in_room(room_root, &l.written);
    let (kind, host_folder, room_folder) = match &l.commondir {
        None => ("submodule", host_gitdir.clone(), room_gitdir.clone()),
        Some(commondir) => {
            let Some(host_common) = &l.host_common else {
                return Err(GitSkip::NoCommon { file, written: l.written.clone(), commondir: commondir.clone() });
            };
            ("worktree", host_common.clone(), in_room(&room_gitdir, commondir))
        }
    };
    if inside(&room_folder, room_root) {
        return Ok(None);
    }
    // A folder right under the root (`/`, `/usr`, `/home`) would hide the
    // image's own; no git folder is one on any layout git makes.
    let shallow = Path::new(&room_folder).components().count() < 3;
    if shallow || RESERVED.iter().any(|r| inside(&room_folder, r)) {
        return Err(GitSkip::Reserved { file, written: l.written.clone(), target: room_folder });
    }
    let mut mounts = vec![bind(&host_folder, &room_folder)];
    // A worktree's own admin folder sits under the common folder on every
    // layout git makes; one that does not (moved by hand) is bound too.
    if kind == "worktree" {
        let under = host_gitdir.strip_prefix(&host_folder).ok().map(|rel| lexical(&Path::new(&room_folder).join(rel)));
        if under.as_deref() != Some(Path::new(&room_gitdir)) {
            mounts.push(bind(host_gitdir, &room_gitdir));
        }
    }
    Ok(Some(GitPlan {
        mounts,
        common_in_room: (kind == "worktree").then(|| room_folder.clone()),
        summary: Summary { kind: kind.to_string(), host_folder: host_folder.display().to_string(), room_folder },
    }))
}

fn bind(source: &Path, target: &str) -> MountSpec {
    MountSpec {
        kind: "bind".into(),
        source: Some(source.display().to_string()),
        target: target.to_string(),
        ..Default::default()
    }
}

/// Where `name` (absolute, or relative to `from`) resolves in the room:
/// lexically, since the room's folders are not there to ask.
pub fn in_room(from: &str, name: &str) -> String {
    let path = Path::new(name);
    let joined = if path.is_absolute() { path.to_path_buf() } else { Path::new(from).join(path) };
    lexical(&joined).display().to_string()
}

/// Resolved by the text alone; above the room's root is its root.
pub fn lexical(path: &Path) -> PathBuf {
    let resolved = workroomd::paths::lexical(path);
    if resolved.is_absolute() {
        resolved
    } else {
        Path::new("/").join(resolved)
    }
}

/// `path` is `dir` or below it.
fn inside(path: &str, dir: &str) -> bool {
    Path::new(path).starts_with(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn linked(
        written: &str,
        host_gitdir: Option<&str>,
        commondir: Option<&str>,
        host_common: Option<&str>,
    ) -> GitFacts {
        GitFacts::Linked(Linked {
            file: "/home/u/feature-a/.git".into(),
            written: written.into(),
            host_gitdir: host_gitdir.map(PathBuf::from),
            commondir: commondir.map(str::to_string),
            host_common: host_common.map(PathBuf::from),
        })
    }

    #[test]
    fn a_main_checkout_needs_nothing_mounted() {
        assert_eq!(plan(&GitFacts::Plain, "/workspaces/repo"), Ok(None));
    }

    #[test]
    fn a_worktree_with_an_absolute_gitdir_gets_the_common_folder_at_its_host_path() {
        let facts = linked(
            "/home/u/repo/.git/worktrees/feature-a",
            Some("/home/u/repo/.git/worktrees/feature-a"),
            Some("../.."),
            Some("/home/u/repo/.git"),
        );
        let p = plan(&facts, "/workspaces/feature-a").unwrap().unwrap();
        assert_eq!(p.mounts, vec![bind(Path::new("/home/u/repo/.git"), "/home/u/repo/.git")]);
        assert_eq!(p.common_in_room.as_deref(), Some("/home/u/repo/.git"));
        assert_eq!(p.summary.kind, "worktree");
        assert_eq!(p.summary.room_folder, "/home/u/repo/.git");
    }

    #[test]
    fn a_worktree_with_a_relative_gitdir_gets_the_common_folder_beside_the_workspace_in_the_room() {
        // git 2.48's `worktree add --relative-paths`.
        let facts = linked(
            "../repo/.git/worktrees/feature-a",
            Some("/home/u/repo/.git/worktrees/feature-a"),
            Some("../.."),
            Some("/home/u/repo/.git"),
        );
        let p = plan(&facts, "/workspaces/feature-a").unwrap().unwrap();
        assert_eq!(p.mounts, vec![bind(Path::new("/home/u/repo/.git"), "/workspaces/repo/.git")]);
        assert_eq!(p.common_in_room.as_deref(), Some("/workspaces/repo/.git"));
    }

    #[test]
    fn a_worktree_admin_folder_outside_its_common_folder_is_bound_on_its_own() {
        let facts = linked(
            "/srv/admin/feature-a",
            Some("/srv/admin/feature-a"),
            Some("/home/u/repo/.git"),
            Some("/home/u/repo/.git"),
        );
        let p = plan(&facts, "/workspaces/feature-a").unwrap().unwrap();
        assert_eq!(
            p.mounts,
            vec![
                bind(Path::new("/home/u/repo/.git"), "/home/u/repo/.git"),
                bind(Path::new("/srv/admin/feature-a"), "/srv/admin/feature-a")
            ]
        );
    }

    #[test]
    fn a_submodule_gets_its_module_folder_where_its_relative_gitdir_points_in_the_room() {
        let facts = linked("../.git/modules/lib", Some("/home/u/super/.git/modules/lib"), None, None);
        let p = plan(&facts, "/workspaces/lib").unwrap().unwrap();
        assert_eq!(p.mounts, vec![bind(Path::new("/home/u/super/.git/modules/lib"), "/workspaces/.git/modules/lib")]);
        assert_eq!(p.common_in_room, None, "a submodule has no other worktrees to keep");
        assert_eq!(p.summary.kind, "submodule");
    }

    #[test]
    fn a_gitdir_pointing_nowhere_is_said_and_mounts_nothing() {
        let facts = linked("/gone/.git/worktrees/x", None, None, None);
        let err = plan(&facts, "/workspaces/x").unwrap_err();
        assert!(err.to_string().contains("/gone/.git/worktrees/x"), "{err}");
        assert!(err.to_string().contains("does not exist"), "{err}");
    }

    #[test]
    fn a_commondir_pointing_nowhere_is_said() {
        let facts = linked("/r/.git/worktrees/x", Some("/r/.git/worktrees/x"), Some("/gone"), None);
        assert!(matches!(plan(&facts, "/workspaces/x"), Err(GitSkip::NoCommon { .. })));
    }

    #[test]
    fn a_git_folder_inside_the_workspace_needs_no_mount_of_its_own() {
        let facts = linked(".gitfolder", Some("/home/u/x/.gitfolder"), None, None);
        assert_eq!(plan(&facts, "/workspaces/x"), Ok(None));
    }

    #[test]
    fn a_gitdir_resolving_onto_the_rooms_own_paths_is_refused() {
        for written in ["/proc/self", "/.workroom/x", "../../../../etc", "/", "/home"] {
            let facts = linked(written, Some("/tmp/whatever"), None, None);
            assert!(matches!(plan(&facts, "/workspaces/x"), Err(GitSkip::Reserved { .. })), "{written}");
        }
    }

    #[test]
    fn a_git_folder_deep_under_a_system_folder_is_mounted() {
        let facts = linked(
            "/usr/src/repo/.git/worktrees/x",
            Some("/usr/src/repo/.git/worktrees/x"),
            Some("../.."),
            Some("/usr/src/repo/.git"),
        );
        assert!(plan(&facts, "/workspaces/x").unwrap().is_some());
    }

    #[test]
    fn room_paths_resolve_lexically_and_stop_at_the_root() {
        assert_eq!(in_room("/workspaces/a", "../repo/.git"), "/workspaces/repo/.git");
        assert_eq!(in_room("/workspaces/a", "/abs/.git"), "/abs/.git");
        assert_eq!(in_room("/w", "../../../x"), "/x");
        assert_eq!(in_room("/w/a", "./b/../c"), "/w/a/c");
    }
}
