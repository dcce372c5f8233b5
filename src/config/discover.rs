//! Where the configuration is, as the reference CLI looks for it:
//! `.devcontainer/devcontainer.json`, then `.devcontainer.json`, in the
//! workspace folder; `--config FILE` names any other (for example
//! `.devcontainer/python/devcontainer.json`), relative to the current folder.

use super::ConfigError;
use std::path::{Path, PathBuf};

/// The places tried, in order, when no `--config` is given.
pub const CANDIDATES: [&str; 2] = [".devcontainer/devcontainer.json", ".devcontainer.json"];

pub fn find_config(workspace: &Path, explicit: Option<&Path>) -> Result<PathBuf, ConfigError> {
    if let Some(file) = explicit {
        let file =
            std::path::absolute(file).map_err(|source| ConfigError::Read { path: file.to_path_buf(), source })?;
        return match std::fs::metadata(&file) {
            Ok(meta) if meta.is_file() => Ok(file),
            Ok(_) => {
                Err(ConfigError::Invalid { path: file, message: "--config must name a file, not a folder".into() })
            }
            Err(source) => Err(ConfigError::Read { path: file, source }),
        };
    }
    let tried: Vec<PathBuf> = CANDIDATES.iter().map(|c| workspace.join(c)).collect();
    for candidate in &tried {
        match std::fs::metadata(candidate) {
            Ok(meta) if meta.is_file() => return Ok(candidate.clone()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // A symlink loop or a folder we may not enter: the file is there
            // but unreadable, which "no devcontainer.json" would hide.
            Err(source) => return Err(ConfigError::Read { path: candidate.clone(), source }),
        }
    }
    Err(ConfigError::NotFound { workspace: workspace.to_path_buf(), tried })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn write(path: &Path) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, "{}").unwrap();
    }

    #[test]
    fn the_devcontainer_folder_comes_before_the_dot_file() {
        let dir = tempfile::tempdir().unwrap();
        write(&dir.path().join(".devcontainer.json"));
        assert_eq!(find_config(dir.path(), None).unwrap(), dir.path().join(".devcontainer.json"));
        write(&dir.path().join(".devcontainer/devcontainer.json"));
        assert_eq!(find_config(dir.path(), None).unwrap(), dir.path().join(".devcontainer/devcontainer.json"));
    }

    #[test]
    fn no_config_names_every_path_tried() {
        let dir = tempfile::tempdir().unwrap();
        let err = find_config(dir.path(), None).unwrap_err().to_string();
        for candidate in CANDIDATES {
            assert!(err.contains(&dir.path().join(candidate).display().to_string()), "{err}");
        }
        assert!(err.contains("--config"), "{err}");
    }

    #[test]
    fn an_explicit_config_may_live_in_a_subfolder() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(".devcontainer/python/devcontainer.json");
        write(&file);
        assert_eq!(find_config(dir.path(), Some(&file)).unwrap(), file);
    }

    #[test]
    fn a_symlink_loop_says_too_many_levels_of_symbolic_links_not_no_devcontainer_json() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join(".devcontainer");
        fs::create_dir(&folder).unwrap();
        std::os::unix::fs::symlink("devcontainer.json", folder.join("devcontainer.json")).unwrap();
        let err = find_config(dir.path(), None).unwrap_err();
        let chain = format!("{:#}", anyhow::Error::new(err));
        let expected = format!("{}: cannot read the configuration: ", folder.join("devcontainer.json").display());
        assert!(chain.starts_with(&expected), "{chain}");
        assert!(chain.contains("Too many levels of symbolic links"), "{chain}");
    }

    #[test]
    fn a_missing_explicit_config_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("nope.json");
        let err = find_config(dir.path(), Some(&file)).unwrap_err();
        let chain = format!("{:#}", anyhow::Error::new(err));
        assert!(chain.starts_with(&format!("{}: cannot read", file.display())), "{chain}");
        assert_eq!(chain.matches("No such file or directory").count(), 1, "the OS error once: {chain}");
    }
}
