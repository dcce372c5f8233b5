//! The derived image's build context: a Dockerfile that installs each
//! feature in order as root, then returns to the image's user, and the
//! files it copies (each feature's folder with the reference's
//! `devcontainer-features.env` and `devcontainer-features-install.sh`, and
//! the builtin env). The tar is deterministic (sorted, no times, root-owned,
//! 0755), so its digest and the base image's id name the image: an
//! unchanged config never rebuilds, and any change in a feature's content,
//! options or order, the users or this recipe does. See docs/adr/0008.
//! Pure but for reading the features' folders.

use super::options::js_string;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Bumped whenever the Dockerfile or the files change shape, so images
/// built by an older recipe are never reused.
pub const RECIPE_VERSION: &str = "workroom-features-2";

/// Where features are copied in the image (the reference's folder).
pub const DEST: &str = "/tmp/dev-container-features";

/// The context's folder that is copied to [`DEST`] (the Dockerfile stays out).
const CONTEXT_FOLDER: &str = "features";

/// The repository derived images are tagged in.
pub const IMAGE_REPOSITORY: &str = "workroom-features";

/// One feature to install.
#[derive(Debug, Clone)]
pub struct Install {
    /// `<id>_<index>`: its folder in the context and the image.
    pub consecutive_id: String,
    /// The id without its version (`getFeatureIdWithoutVersion`), shown in
    /// the install banner; `None` for local and tarball features, which the
    /// reference shows as "Unknown".
    pub id_without_version: Option<String>,
    pub feature: Map<String, Value>,
    /// The feature's files (cache or local folder).
    pub folder: PathBuf,
    /// `devcontainer-features.env`.
    pub env: String,
}

/// The users the builtin env names (`findContainerUsers`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Users {
    pub image_user: String,
    pub container_user: String,
    pub remote_user: String,
}

#[derive(Debug)]
pub struct Context {
    pub tar: Vec<u8>,
    pub dockerfile: String,
    /// sha256 hex of the recipe, the base image, the label and the context.
    pub key: String,
}

impl Context {
    /// `workroom-features:<key prefix>`.
    pub fn tag(&self) -> String {
        format!("{IMAGE_REPOSITORY}:{}", &self.key[..32])
    }
}

/// Builds the context for `base_id` (an image id, so the FROM cannot move).
pub fn context(base_id: &str, users: &Users, installs: &[Install], label: &str) -> std::io::Result<Context> {
    let dockerfile = dockerfile(base_id, users, installs);
    let mut files: Vec<(String, Entry)> = vec![
        ("Dockerfile".into(), Entry::File(dockerfile.clone().into_bytes())),
        (
            format!("{CONTEXT_FOLDER}/devcontainer-features.builtin.env"),
            Entry::File(
                format!("_CONTAINER_USER={}\n_REMOTE_USER={}\n", users.container_user, users.remote_user).into_bytes(),
            ),
        ),
    ];
    for install in installs {
        let cid = &format!("{CONTEXT_FOLDER}/{}", install.consecutive_id);
        collect(&install.folder, cid, &mut files)?;
        // Written over whatever the feature shipped under these names, as the reference does.
        files.retain(|(p, _)| {
            p != &format!("{cid}/devcontainer-features.env") && p != &format!("{cid}/devcontainer-features-install.sh")
        });
        files.push((format!("{cid}/devcontainer-features.env"), Entry::File(install.env.clone().into_bytes())));
        files.push((
            format!("{cid}/devcontainer-features-install.sh"),
            Entry::File(wrapper_script(install).into_bytes()),
        ));
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let tar = pack(&files)?;
    let mut hasher = Sha256::new();
    for part in [RECIPE_VERSION.as_bytes(), base_id.as_bytes(), label.as_bytes()] {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.update(&tar);
    Ok(Context { tar, dockerfile, key: hex::encode(hasher.finalize()) })
}

/// The room's image over an installed one: its label gains
/// devcontainer.json's entry, as the reference's label ends. A separate,
/// layerless commit named by the installed key and the label, so a changed
/// hook or `remoteEnv` costs one metadata commit, never a reinstall of every
/// feature. The context and the tag.
pub fn labelled(installed_id: &str, key: &str, label: &str) -> std::io::Result<(Vec<u8>, String)> {
    let dockerfile = format!("FROM {installed_id}\n");
    let tar = pack(&[("Dockerfile".into(), Entry::File(dockerfile.into_bytes()))])?;
    let tag = format!("{IMAGE_REPOSITORY}:{}-{}", &key[..32], &label_digest(label)[..16]);
    Ok((tar, tag))
}

/// sha256 hex of a label's value: names a labelled image, and lets a
/// reader tell that a label is still the one we wrote.
pub fn label_digest(label: &str) -> String {
    hex::encode(Sha256::digest(label.as_bytes()))
}

#[derive(Debug)]
enum Entry {
    Dir,
    File(Vec<u8>),
    Symlink(PathBuf),
}

/// The folder's entries under `prefix`, symlinks kept as links (a local
/// feature's link must not pull host files into the image).
fn collect(folder: &Path, prefix: &str, out: &mut Vec<(String, Entry)>) -> std::io::Result<()> {
    out.push((prefix.to_string(), Entry::Dir));
    let mut names: Vec<_> = std::fs::read_dir(folder)?.collect::<Result<_, _>>()?;
    names.sort_by_key(|e| e.file_name());
    for e in names {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = format!("{prefix}/{name}");
        let kind = e.file_type()?;
        if kind.is_symlink() {
            out.push((path, Entry::Symlink(std::fs::read_link(e.path())?)));
        } else if kind.is_dir() {
            collect(&e.path(), &path, out)?;
        } else if kind.is_file() {
            out.push((path, Entry::File(std::fs::read(e.path())?)));
        }
    }
    Ok(())
}

fn pack(files: &[(String, Entry)]) -> std::io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    for (path, entry) in files {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o755);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        match entry {
            Entry::Dir => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                tar.append_data(&mut header, format!("{path}/"), std::io::empty())?;
            }
            Entry::File(bytes) => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(bytes.len() as u64);
                tar.append_data(&mut header, path, bytes.as_slice())?;
            }
            Entry::Symlink(target) => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                tar.append_link(&mut header, path, target)?;
            }
        }
    }
    tar.into_inner()
}

/// The Dockerfile: the reference's layers, with as few steps as the
/// classic builder allows (each step is a container and a commit): one
/// COPY of every feature, the builtin users' homes found in the first RUN,
/// each feature's `containerEnv` before its RUN, and `USER` only when the
/// image runs as someone else than root.
pub fn dockerfile(base_id: &str, users: &Users, installs: &[Install]) -> String {
    let builtin = format!("{DEST}/devcontainer-features.builtin.env");
    let as_root = matches!(users.image_user.as_str(), "root" | "0" | "");
    let mut d = format!("FROM {base_id}\n");
    if !as_root {
        d.push_str("USER root\n");
    }
    d.push_str(&format!("COPY {CONTEXT_FOLDER}/ {DEST}/\n"));
    let homes = format!(
        "echo \"_CONTAINER_USER_HOME=$({} | cut -d: -f6)\" >> {builtin} && \\\n    \
         echo \"_REMOTE_USER_HOME=$({} | cut -d: -f6)\" >> {builtin} && \\\n    chmod -R 0755 {DEST} && \\\n    ",
        passwd_lookup(&users.container_user),
        passwd_lookup(&users.remote_user)
    );
    for (i, install) in installs.iter().enumerate() {
        let cid = &install.consecutive_id;
        if let Some(Value::Object(env)) = install.feature.get("containerEnv") {
            d.push_str(&env_lines(env));
        }
        let first = if i == 0 { homes.as_str() } else { "" };
        d.push_str(&format!(
            "RUN {first}cd {DEST}/{cid} && chmod +x ./devcontainer-features-install.sh && ./devcontainer-features-install.sh\n"
        ));
    }
    if !as_root {
        d.push_str(&format!("USER {}\n", users.image_user));
    }
    d
}

/// A feature's `containerEnv` as `ENV`: one instruction for all its keys,
/// unless a value refers to a variable (`${PATH}:…`), which must see the
/// value set before it: then one per key, as the reference writes them.
fn env_lines(env: &Map<String, Value>) -> String {
    let pairs: Vec<String> = env.iter().map(|(k, v)| format!("{k}=\"{}\"", escape_env(&js_string(v)))).collect();
    if pairs.is_empty() {
        String::new()
    } else if env.values().any(|v| js_string(v).contains('$')) {
        pairs.iter().map(|p| format!("ENV {p}\n")).collect()
    } else {
        format!("ENV {}\n", pairs.join(" "))
    }
}

/// `generateContainerEnvs`: `"` and `\` escaped for a Dockerfile `ENV`.
fn escape_env(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The reference's `getEntPasswdShellCommand` (its leading space keeps
/// `$(` from reading as `$((`).
fn passwd_lookup(user: &str) -> String {
    let for_shell = user.replace('\\', "\\\\").replace('\'', "\\'");
    let mut for_regex = String::new();
    for c in user.chars() {
        if ".*+?^${}()|[]\\".contains(c) {
            for_regex.push('\\');
        }
        for_regex.push(c);
    }
    let for_regex = for_regex.replace('\'', "\\'");
    format!(
        " (command -v getent >/dev/null 2>&1 && getent passwd '{for_shell}' || grep -E '^{for_regex}|^[^:]*:[^:]*:{for_regex}:' /etc/passwd || true)"
    )
}

/// The reference's `getFeatureInstallWrapperScript`.
pub fn wrapper_script(install: &Install) -> String {
    let text = |key: &str| install.feature.get(key).and_then(Value::as_str).map(quote_escape);
    let id = install.id_without_version.as_deref().map(quote_escape).unwrap_or_else(|| "Unknown".into());
    let name = text("name").unwrap_or_else(|| "Unknown".into());
    let description = text("description").unwrap_or_default();
    let version = text("version").unwrap_or_default();
    let documentation = text("documentationURL").unwrap_or_default();
    let options = quote_escape(&install.env.split('\n').map(|l| format!("    {l}")).collect::<Vec<_>>().join("\n"));
    let mut warning = String::new();
    if install.feature.get("deprecated").and_then(Value::as_bool) == Some(true) {
        let fid = install.feature.get("id").and_then(Value::as_str).unwrap_or_default();
        warning.push_str(&format!(
            "(!) WARNING: Using the deprecated Feature \"{}\". This Feature will no longer receive any further updates/support.\n",
            quote_escape(fid)
        ));
    }
    let echo_warning = if warning.is_empty() { String::new() } else { format!("echo '{warning}'") };
    let troubleshooting = if documentation.is_empty() {
        String::new()
    } else {
        format!(" Look at the documentation at {documentation} for help troubleshooting this error.")
    };
    format!(
        r#"#!/bin/sh
set -e

on_exit () {{
	[ $? -eq 0 ] && exit
	echo 'ERROR: Feature "{name}" ({id}) failed to install!{troubleshooting}'
}}

trap on_exit EXIT

echo ===========================================================================
{echo_warning}
echo 'Feature       : {name}'
echo 'Description   : {description}'
echo 'Id            : {id}'
echo 'Version       : {version}'
echo 'Documentation : {documentation}'
echo 'Options       :'
echo '{options}'
echo ===========================================================================

set -a
. ../devcontainer-features.builtin.env
. ./devcontainer-features.env
set +a

chmod +x ./install.sh
./install.sh
"#
    )
}

/// For text printed inside single quotes by the shell.
fn quote_escape(s: &str) -> String {
    s.replace('\'', "'\\''")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn install(dir: &Path, cid: &str, env: &str) -> Install {
        Install {
            consecutive_id: cid.into(),
            id_without_version: Some("localhost:5000/wr/hello".into()),
            feature: json!({ "id": "hello", "name": "Hello 'world'", "version": "1.0.0", "containerEnv": { "GREETING": "say \"hi\"" } })
                .as_object()
                .unwrap()
                .clone(),
            folder: dir.to_path_buf(),
            env: env.into(),
        }
    }

    fn users() -> Users {
        Users { image_user: "root".into(), container_user: "root".into(), remote_user: "dev".into() }
    }

    fn feature_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("install.sh"), "#!/bin/sh\necho hi\n").unwrap();
        std::fs::write(dir.path().join("devcontainer-feature.json"), "{}").unwrap();
        dir
    }

    #[test]
    fn the_dockerfile_installs_in_order_as_root_with_env_then_returns_to_the_user() {
        let dir = feature_dir();
        let installs = [install(dir.path(), "hello_0", "A=\"1\""), install(dir.path(), "hello_1", "")];
        let d = dockerfile("sha256:abc", &Users { image_user: "dev".into(), ..users() }, &installs);
        assert!(d.starts_with("FROM sha256:abc\nUSER root\nCOPY features/ /tmp/dev-container-features/\n"), "{d}");
        let env = d.find("ENV GREETING=\"say \\\"hi\\\"\"").unwrap();
        let first = d.find("cd /tmp/dev-container-features/hello_0 &&").unwrap();
        let second = d.find("cd /tmp/dev-container-features/hello_1 &&").unwrap();
        assert!(env < first && first < second, "{d}");
        assert!(d.ends_with("USER dev\n"), "{d}");
        assert!(d.contains("getent passwd 'dev' || grep -E '^dev|^[^:]*:[^:]*:dev:' /etc/passwd"), "{d}");
        // The homes are found once, in the first feature's step.
        assert_eq!(d.matches("_REMOTE_USER_HOME").count(), 1);
        assert!(d.find("_REMOTE_USER_HOME").unwrap() < first, "{d}");
        // A root image needs no USER switch at all.
        let d = dockerfile("sha256:abc", &users(), &installs);
        assert!(!d.contains("\nUSER "), "{d}");
    }

    #[test]
    fn container_env_that_refers_to_a_variable_gets_one_env_per_key() {
        let env = json!({ "A": "1", "B": "two words" });
        assert_eq!(env_lines(env.as_object().unwrap()), "ENV A=\"1\" B=\"two words\"\n");
        let env = json!({ "X": "/x", "PATH": "${X}/bin:${PATH}" });
        assert_eq!(env_lines(env.as_object().unwrap()), "ENV X=\"/x\"\nENV PATH=\"${X}/bin:${PATH}\"\n");
    }

    #[test]
    fn the_key_is_stable_and_moves_with_every_input() {
        let dir = feature_dir();
        let a = [install(dir.path(), "hello_0", "A=\"1\"")];
        let key = |base: &str, users: &Users, installs: &[Install], label: &str| {
            context(base, users, installs, label).unwrap().key
        };
        let k = key("sha256:a", &users(), &a, "[]");
        assert_eq!(k, key("sha256:a", &users(), &a, "[]"));
        assert_ne!(k, key("sha256:b", &users(), &a, "[]"));
        assert_ne!(k, key("sha256:a", &Users { remote_user: "root".into(), ..users() }, &a, "[]"));
        assert_ne!(k, key("sha256:a", &users(), &[install(dir.path(), "hello_0", "A=\"2\"")], "[]"));
        assert_ne!(k, key("sha256:a", &users(), &a, "[ {} ]"));
        std::fs::write(dir.path().join("install.sh"), "#!/bin/sh\necho changed\n").unwrap();
        assert_ne!(k, key("sha256:a", &users(), &a, "[]"));
    }

    #[test]
    fn the_context_holds_each_feature_with_its_env_and_wrapper() {
        let dir = feature_dir();
        let ctx = context("sha256:a", &users(), &[install(dir.path(), "hello_0", "A=\"1\"")], "[]").unwrap();
        let mut archive = tar::Archive::new(ctx.tar.as_slice());
        let names: Vec<String> =
            archive.entries().unwrap().map(|e| e.unwrap().path().unwrap().display().to_string()).collect();
        assert_eq!(
            names,
            [
                "Dockerfile",
                "features/devcontainer-features.builtin.env",
                "features/hello_0/",
                "features/hello_0/devcontainer-feature.json",
                "features/hello_0/devcontainer-features-install.sh",
                "features/hello_0/devcontainer-features.env",
                "features/hello_0/install.sh",
            ]
            .map(String::from)
        );
        assert!(ctx.tag().starts_with("workroom-features:") && ctx.tag().len() == "workroom-features:".len() + 32);
    }

    #[test]
    fn the_wrapper_prints_the_reference_banner_and_sources_both_env_files() {
        let dir = feature_dir();
        let w = wrapper_script(&install(dir.path(), "hello_0", "A=\"1\"\nB=\"x\""));
        assert!(w.contains("echo 'Feature       : Hello '\\''world'\\'''"), "{w}");
        assert!(w.contains("echo '    A=\"1\"\n    B=\"x\"'"), "{w}");
        assert!(
            w.contains("ERROR: Feature \"Hello '\\''world'\\''\" (localhost:5000/wr/hello) failed to install!"),
            "{w}"
        );
        assert!(w.contains(". ../devcontainer-features.builtin.env\n. ./devcontainer-features.env\n"), "{w}");
    }
}
