//! Errors of reading a devcontainer.json. Each names the file and, where there
//! is one, the line and column or the property, and says what was expected:
//! the reference CLI silently drops a field it cannot read, we refuse the file.
//! A field named `source` is the cause, which `main` prints after the
//! message: the message never repeats it.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "no devcontainer.json in {workspace}: tried {tried}; pass --config FILE for another location",
        workspace = .workspace.display(),
        tried = join_paths(.tried)
    )]
    NotFound { workspace: PathBuf, tried: Vec<PathBuf> },

    #[error("{path}: cannot read the configuration", path = .path.display())]
    Read { path: PathBuf, source: std::io::Error },

    #[error("{path}:{line}:{column}: {message}", path = .path.display())]
    Syntax { path: PathBuf, line: usize, column: usize, message: String },

    #[error("{path}: `{property}` must be {expected}, found {found}", path = .path.display())]
    Type { path: PathBuf, property: String, expected: &'static str, found: String },

    #[error("{path}: `{property}` is not supported yet: {hint}", path = .path.display())]
    Unsupported { path: PathBuf, property: &'static str, hint: &'static str },

    #[error(
        "{path}: no container source: set `image`, or `build.dockerfile` (a Dockerfile next to the config)",
        path = .path.display()
    )]
    NoSource { path: PathBuf },

    #[error(
        "{path}: `{property}` names {missing}, which does not exist",
        path = .path.display(),
        missing = .missing.display()
    )]
    MissingFile { path: PathBuf, property: &'static str, missing: PathBuf },

    #[error("{path}: {message}", path = .path.display())]
    Invalid { path: PathBuf, message: String },

    #[error("workspace folder {path} does not exist or is not a folder", path = .path.display())]
    NoWorkspace { path: PathBuf },
}

fn join_paths(paths: &[PathBuf]) -> String {
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}
