//! Paths resolved by their text alone, for paths that are not there to ask:
//! the room's, seen from the host (`plan::git`), a worktree's checkout seen
//! from a room (the daemon's `worktrees`), a place not made yet
//! (`plan::worktree`).

use std::path::{Component, Path, PathBuf};

/// `a/./b/../c` as `a/c`. Above the root stays at the root, as the kernel
/// resolves `/..`; a relative path keeps the `..`s it cannot take back.
pub fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => match out.components().next_back() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir | Component::Prefix(_)) => {}
                _ => out.push(".."),
            },
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dots_are_resolved_by_the_text_alone() {
        assert_eq!(lexical(Path::new("/w/a/./b/../c")), Path::new("/w/a/c"));
        assert_eq!(lexical(Path::new("/w/../../../x")), Path::new("/x"), "above the root is the root");
        assert_eq!(lexical(Path::new("/..")), Path::new("/"));
        assert_eq!(lexical(Path::new("../wt/./a")), Path::new("../wt/a"), "a relative path keeps its ..");
        assert_eq!(lexical(Path::new("a/../../b")), Path::new("../b"));
        assert_eq!(lexical(Path::new("a/..")), Path::new(""));
    }
}
