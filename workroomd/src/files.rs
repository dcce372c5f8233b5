//! A folder's files as `workroom sync` compares them: each regular file or
//! symlink under a root, with its size, modification time (whole seconds,
//! what a tar header carries both ways) and sha256 (a symlink's is of its
//! target's path). The daemon binary's `files` job writes them, one JSON
//! object a line; the host reads them.

use serde::{Deserialize, Serialize};

/// One file, its path relative to the root with `/` between components.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub path: String,
    pub size: u64,
    pub mtime: i64,
    pub sha256: String,
    /// A symlink's target, which is what it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}
