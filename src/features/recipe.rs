//! The derived image's build context: a Dockerfile that installs each
//! feature in order as root, then returns to the image's user, and the
//! files it copies (each feature's folder with the reference's
//! `devcontainer-features.env` and `devcontainer-features-install.sh`, and
//! the builtin env). The tar is deterministic (sorted, no times, root-owned,
//! 0755), so its digest and the base image's id name the image: an
//! unchanged config never rebuilds, and any change in a feature's content,
//! options or order, the users or this recipe does. The same installs
//! also come as one shell command with the files to upload and the image's
//! env after them ([`install_script`], [`Context::features_tar`],
//! [`image_env`]), for one container committed once in place of the
//! builder's steps. See docs/adr/0008.
//! Pure but for reading the features' folders.

use super::options::js_string;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Bumped whenever the Dockerfile or the files change shape, so images
/// built by an older recipe are never reused.
pub const RECIPE_VERSION: &str = "workroom-features-3";

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
    pub dockerfile: String,
    /// sha256 hex of the recipe, the base image, the label and the context.
    pub key: String,
    /// The context's files, the Dockerfile among them, sorted: packed once
    /// for the key and again, with the labels, for the build.
    files: Vec<(String, Entry)>,
}

impl Context {
    /// `workroom-features:<key prefix>`.
    pub fn tag(&self) -> String {
        format!("{IMAGE_REPOSITORY}:{}", &self.key[..32])
    }

    /// [`tag`](Self::tag) as its repository and tag.
    pub fn tag_parts(&self) -> (&'static str, &str) {
        (IMAGE_REPOSITORY, &self.key[..32])
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
    Ok(Context { dockerfile, key: hex::encode(hasher.finalize()), files })
}

impl Context {
    /// The context with `labels` set by the Dockerfile's last instruction,
    /// and the labels left for the build's parameters (those that cannot be
    /// written there, see [`label_instruction`]). The key stays the one
    /// [`context`] gave: the labels name it, so it cannot cover them.
    pub fn labelled(&self, labels: Labels) -> std::io::Result<(Vec<u8>, Labels)> {
        let Some(line) = label_instruction(&labels) else { return Ok((pack(&self.files)?, labels)) };
        let mut files: Vec<(String, Entry)> =
            self.files.iter().filter(|(p, _)| p != "Dockerfile").map(|(p, e)| (p.clone(), e.clone())).collect();
        files.push(("Dockerfile".into(), Entry::File(format!("{}{line}", self.dockerfile).into_bytes())));
        files.sort_by(|a, b| a.0.cmp(&b.0));
        Ok((pack(&files)?, Vec::new()))
    }
}

impl Context {
    /// The features' files where the Dockerfile's `COPY` puts them, as a
    /// tar to upload at `/`: [`DEST`] and everything in it, owned and
    /// moded as the build context has them.
    pub fn features_tar(&self) -> std::io::Result<Vec<u8>> {
        let dest = DEST.trim_start_matches('/');
        let mut files = vec![(dest.to_string(), Entry::Dir)];
        for (path, entry) in &self.files {
            if let Some(inside) = path.strip_prefix(CONTEXT_FOLDER).and_then(|p| p.strip_prefix('/')) {
                files.push((format!("{dest}/{inside}"), entry.clone()));
            }
        }
        pack(&files)
    }
}

/// Image labels, as `(key, value)` in the order they are written.
pub type Labels = Vec<(String, String)>;

/// The longest `LABEL` line written into a Dockerfile: the engine's parser
/// reads a line as one token of at most 64 KiB.
const LABEL_LINE_MAX: usize = 32 * 1024;

/// One `LABEL` instruction for all of `labels`, each key and value in
/// double quotes with `\`, `"` and `$` escaped (a Dockerfile expands
/// variables in labels). The build's label parameters would cost one
/// classic-builder step per label, each a container and a commit (two to
/// three seconds apiece on fuse-overlayfs); this is one step for all.
/// `None` for a value with a line break or a line too long to parse.
pub fn label_instruction(labels: &[(String, String)]) -> Option<String> {
    if labels.is_empty() || labels.iter().any(|(k, v)| k.contains(['\n', '\r']) || v.contains(['\n', '\r'])) {
        return None;
    }
    let quote = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"").replace('$', "\\$"));
    let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{}={}", quote(k), quote(v))).collect();
    let line = format!("LABEL {}\n", pairs.join(" "));
    (line.len() <= LABEL_LINE_MAX).then_some(line)
}

/// The room's image over an installed one: its label gains
/// devcontainer.json's entry, as the reference's label ends. A separate,
/// layerless commit named by the installed key and the label, so a changed
/// hook or `remoteEnv` costs one metadata commit, never a reinstall of every
/// feature. The context and the tag.
/// `labels` are set by the Dockerfile where they can be; the rest are
/// returned for the build's parameters.
pub fn labelled(
    installed_id: &str,
    key: &str,
    label: &str,
    labels: Labels,
) -> std::io::Result<(Vec<u8>, String, Labels)> {
    let (tar, left) = label_commit(installed_id, labels)?;
    let tag = format!("{IMAGE_REPOSITORY}:{}-{}", &key[..32], &label_digest(label)[..16]);
    Ok((tar, tag, left))
}

/// A layerless image over `from` (an image id) with `labels` set: the
/// context (a Dockerfile alone), and the labels it could not write, for
/// the build's parameters ([`label_instruction`]).
pub fn label_commit(from: &str, labels: Labels) -> std::io::Result<(Vec<u8>, Labels)> {
    let mut dockerfile = format!("FROM {from}\n");
    let left = match label_instruction(&labels) {
        Some(line) => {
            dockerfile.push_str(&line);
            Vec::new()
        }
        None => labels,
    };
    let tar = pack(&[("Dockerfile".into(), Entry::File(dockerfile.into_bytes()))])?;
    Ok((tar, left))
}

/// sha256 hex of a label's value: names a labelled image, and lets a
/// reader tell that a label is still the one we wrote.
pub fn label_digest(label: &str) -> String {
    hex::encode(Sha256::digest(label.as_bytes()))
}

#[derive(Debug, Clone)]
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
/// classic builder allows (each step is a container and a commit: two to
/// three seconds on fuse-overlayfs, whatever the step does): one COPY of
/// every feature, the builtin users' homes found in the first RUN, one RUN
/// per feature, and `USER` only when the image runs as someone else than
/// root.
///
/// The features' `containerEnv` reach the image and each later install as
/// the reference's `ENV` before each feature's RUN would give them. Where
/// every value reads the same to the shell as to the Dockerfile
/// ([`folds`]), each RUN exports what the ENVs before it would have set and
/// the image gets them after the last RUN in as few `ENV` steps as keep
/// their meaning ([`env_groups`]): for two features with `containerEnv`,
/// two to three steps fewer. Otherwise each feature's `ENV` precedes its
/// RUN, as the reference writes it.
pub fn dockerfile(base_id: &str, users: &Users, installs: &[Install]) -> String {
    let as_root = runs_as_root(users);
    let mut d = format!("FROM {base_id}\n");
    if !as_root {
        d.push_str("USER root\n");
    }
    d.push_str(&format!("COPY {CONTEXT_FOLDER}/ {DEST}/\n"));
    let runs = runs(users, installs);
    for (env, body) in runs.envs.iter().zip(&runs.bodies) {
        if !runs.folded {
            d.push_str(&env_lines(env));
        }
        d.push_str(&format!("RUN {body}\n"));
    }
    if runs.folded {
        for group in env_groups(&runs.envs.concat()) {
            d.push_str(&env_instruction(&group));
        }
    }
    if !as_root {
        d.push_str(&format!("USER {}\n", users.image_user));
    }
    d
}

/// Whether the image runs as root already, so the installs need no `USER`.
pub fn runs_as_root(users: &Users) -> bool {
    matches!(users.image_user.as_str(), "root" | "0" | "")
}

/// Each feature's install as its `RUN` runs it (the shell command), each
/// feature's `containerEnv` as `ENV` writes it, and whether every value
/// folds into the commands' exports ([`folds`]).
struct Runs {
    bodies: Vec<String>,
    envs: Vec<Vec<(String, String)>>,
    folded: bool,
}

fn runs(users: &Users, installs: &[Install]) -> Runs {
    let builtin = format!("{DEST}/devcontainer-features.builtin.env");
    let homes = format!(
        "echo \"_CONTAINER_USER_HOME=$({} | cut -d: -f6)\" >> {builtin} && \\\n    \
         echo \"_REMOTE_USER_HOME=$({} | cut -d: -f6)\" >> {builtin} && \\\n    chmod -R 0755 {DEST} && \\\n    ",
        passwd_lookup(&users.container_user),
        passwd_lookup(&users.remote_user)
    );
    let envs: Vec<Vec<(String, String)>> = installs.iter().map(container_env).collect();
    let folded = envs.iter().flatten().all(|(k, v)| folds(k, v));
    let mut exported = String::new();
    let mut bodies = Vec::new();
    for (i, install) in installs.iter().enumerate() {
        let cid = &install.consecutive_id;
        if folded {
            for (k, v) in &envs[i] {
                exported.push_str(&format!("export {k}=\"{v}\" && "));
            }
        }
        let first = if i == 0 { homes.as_str() } else { "" };
        bodies.push(format!(
            "{exported}{first}cd {DEST}/{cid} && chmod +x ./devcontainer-features-install.sh && ./devcontainer-features-install.sh"
        ));
    }
    Runs { bodies, envs, folded }
}

/// What the script of [`install_script`] prints before each feature's
/// install, followed by the feature's `consecutive_id`, so its output can
/// be told apart as the builder's `Step` lines tell it.
pub const INSTALL_MARKER: &str = "workroom-features: installing ";

/// The installs of the [`dockerfile`] as one shell command, for one
/// container whose commit is the installed image: each feature's `RUN`
/// in a subshell of its own, in order, after a line naming it
/// ([`INSTALL_MARKER`]), stopping at the first that fails with its exit
/// status. A classic-builder step is a container and a commit, and a
/// commit walks the whole root filesystem on a naive-diff storage driver
/// (fuse-overlayfs: 2-4 s for Debian); this is one of each for any number
/// of features. `None` when a `containerEnv` value does not fold into the
/// shell ([`folds`]): its `ENV` must come between the `RUN`s, which only
/// the Dockerfile can say.
pub fn install_script(users: &Users, installs: &[Install]) -> Option<String> {
    let runs = runs(users, installs);
    if !runs.folded {
        return None;
    }
    let steps: Vec<String> = installs
        .iter()
        .zip(&runs.bodies)
        .map(|(install, body)| format!("echo '{INSTALL_MARKER}{}' && ( {body} )", install.consecutive_id))
        .collect();
    Some(steps.join(" && "))
}

/// The installed image's env: `base` (`KEY=value`, as an image's config
/// holds it) with each feature's `containerEnv` set in order as the
/// Dockerfile's `ENV` after the last `RUN` sets it: a key set before is
/// replaced where it stands, a new one appended, and `$NAME` / `${NAME}`
/// read as the value before (empty when unset). Only for values that fold
/// ([`install_script`] gave a script), whose only expansions are those.
pub fn image_env(base: &[String], installs: &[Install]) -> Vec<String> {
    let mut env = base.to_vec();
    for install in installs {
        let Some(Value::Object(pairs)) = install.feature.get("containerEnv") else { continue };
        for (key, value) in pairs {
            let value = expand(&js_string(value), &env);
            let set = format!("{key}={value}");
            match env.iter_mut().find(|e| e.split('=').next() == Some(key.as_str())) {
                Some(slot) => *slot = set,
                None => env.push(set),
            }
        }
    }
    env
}

/// `value` with its `$NAME` and `${NAME}` replaced by their values in
/// `env`; any other `$` is kept as it is (none reach here: [`folds`]).
fn expand(value: &str, env: &[String]) -> String {
    let lookup =
        |name: &str| env.iter().find_map(|e| e.split_once('=').filter(|(k, _)| *k == name).map(|(_, v)| v.to_string()));
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, next) = match after.strip_prefix('{').and_then(|b| b.split_once('}')) {
            Some((name, next)) => (name, next),
            None => {
                let len = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
                after.split_at(len)
            }
        };
        if is_name(name) {
            out.push_str(&lookup(name).unwrap_or_default());
        } else {
            out.push('$');
            out.push_str(&after[..after.len() - next.len()]);
        }
        rest = next;
    }
    out.push_str(rest);
    out
}

/// A feature's `containerEnv`, in its order, each value as a Dockerfile
/// `ENV` quotes it (`"` and `\` escaped).
fn container_env(install: &Install) -> Vec<(String, String)> {
    match install.feature.get("containerEnv") {
        Some(Value::Object(env)) => env.iter().map(|(k, v)| (k.clone(), escape_env(&js_string(v)))).collect(),
        _ => Vec::new(),
    }
}

/// Whether `KEY="value"` (`value` escaped for `ENV`) means the same to the
/// shell's `export` as to the Dockerfile's `ENV`: a shell name, and a value
/// whose only expansions are `$NAME` and `${NAME}` ([`references`]), with
/// no backslash but the `\"` of an escaped quote, and no backquote. `$(…)`,
/// `${X:-y}` and the like, backquotes and other escapes read differently
/// (or run something) in one of them.
fn folds(key: &str, value: &str) -> bool {
    is_name(key)
        && !value.contains(['`', '\n'])
        && !value.replace("\\\"", "").contains('\\')
        && references(value).is_some()
}

/// The variables `value` expands, when its every `$` is `$NAME` or
/// `${NAME}`; `None` for any other form.
fn references(value: &str) -> Option<Vec<&str>> {
    let mut names = Vec::new();
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        rest = &rest[at + 1..];
        let name = match rest.strip_prefix('{') {
            Some(braced) => {
                let (name, after) = braced.split_once('}')?;
                rest = after;
                name
            }
            None => {
                let len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
                let (name, after) = rest.split_at(len);
                rest = after;
                name
            }
        };
        if !is_name(name) {
            return None;
        }
        names.push(name);
    }
    Some(names)
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `ENV` instructions for `pairs` set one after the other: one instruction
/// expands every value against the variables as they were before it, so a
/// value that names a key set earlier in its instruction (or a key set
/// twice) starts the next one.
fn env_groups(pairs: &[(String, String)]) -> Vec<Vec<(String, String)>> {
    let mut groups: Vec<Vec<(String, String)>> = Vec::new();
    for (k, v) in pairs {
        // A value of a form not understood names every key, to be safe.
        let named = references(v);
        let names = |key: &String| named.as_ref().is_none_or(|n| n.contains(&key.as_str()));
        let joins = groups.last().is_some_and(|g| g.iter().all(|(earlier, _)| earlier != k && !names(earlier)));
        match groups.last_mut() {
            Some(group) if joins => group.push((k.clone(), v.clone())),
            _ => groups.push(vec![(k.clone(), v.clone())]),
        }
    }
    groups
}

/// A feature's `containerEnv` as `ENV` before its RUN, as the reference
/// writes it: one instruction for all its keys, unless a value refers to a
/// variable (`${PATH}:…`), which must see the value set before it: then one
/// per key.
fn env_lines(env: &[(String, String)]) -> String {
    if env.is_empty() {
        String::new()
    } else if env.iter().any(|(_, v)| v.contains('$')) {
        env.iter().map(|pair| env_instruction(std::slice::from_ref(pair))).collect()
    } else {
        env_instruction(env)
    }
}

/// One `ENV` setting `pairs` (values escaped already).
fn env_instruction(pairs: &[(String, String)]) -> String {
    let pairs: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    format!("ENV {}\n", pairs.join(" "))
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
        let first = d.find("cd /tmp/dev-container-features/hello_0 &&").unwrap();
        let second = d.find("cd /tmp/dev-container-features/hello_1 &&").unwrap();
        assert!(first < second, "{d}");
        assert!(d.ends_with("USER dev\n"), "{d}");
        assert!(d.contains("getent passwd 'dev' || grep -E '^dev|^[^:]*:[^:]*:dev:' /etc/passwd"), "{d}");
        // The homes are found once, in the first feature's step.
        assert_eq!(d.matches("_REMOTE_USER_HOME").count(), 1);
        assert!(d.find("_REMOTE_USER_HOME").unwrap() < first, "{d}");
        // A root image needs no USER switch at all.
        let d = dockerfile("sha256:abc", &users(), &installs);
        assert!(!d.contains("\nUSER "), "{d}");
    }

    fn with_env(dir: &Path, cid: &str, env: Value) -> Install {
        let mut i = install(dir, cid, "");
        i.feature.insert("containerEnv".into(), env);
        i
    }

    #[test]
    fn container_env_is_exported_to_each_later_install_and_set_once_after_the_last() {
        let dir = feature_dir();
        let installs = [
            with_env(dir.path(), "base_0", json!({ "BASE": "/opt/base", "PATH": "/opt/base/bin:${PATH}" })),
            with_env(dir.path(), "opts_1", json!({ "GREETING": "say \"hi\"" })),
        ];
        let d = dockerfile("sha256:abc", &users(), &installs);
        let runs: Vec<&str> = d.lines().filter(|l| l.starts_with("RUN ")).collect();
        assert_eq!(runs.len(), 2, "{d}");
        assert!(
            runs[0].starts_with("RUN export BASE=\"/opt/base\" && export PATH=\"/opt/base/bin:${PATH}\" && echo"),
            "{d}"
        );
        assert!(
            runs[1].starts_with(
                "RUN export BASE=\"/opt/base\" && export PATH=\"/opt/base/bin:${PATH}\" && export GREETING=\"say \\\"hi\\\"\" && cd "
            ),
            "{d}"
        );
        // No value names a key set before it: one ENV, after both installs.
        assert_eq!(d.matches("\nENV ").count(), 1, "{d}");
        assert!(
            d.ends_with("ENV BASE=\"/opt/base\" PATH=\"/opt/base/bin:${PATH}\" GREETING=\"say \\\"hi\\\"\"\n"),
            "{d}"
        );
    }

    #[test]
    fn a_value_the_shell_would_read_otherwise_keeps_the_references_env_before_each_run() {
        let dir = feature_dir();
        for odd in ["$(id -u)", "`id -u`", "${X:-y}", "a\\b", "$1", "line\nbreak"] {
            let installs = [
                with_env(dir.path(), "a_0", json!({ "PLAIN": "1" })),
                with_env(dir.path(), "b_1", json!({ "ODD": odd })),
            ];
            let d = dockerfile("sha256:abc", &users(), &installs);
            assert!(!d.contains("export "), "{odd:?}: {d}");
            let env = d.find("ENV PLAIN=\"1\"").unwrap();
            let first = d.find("cd /tmp/dev-container-features/a_0").unwrap();
            let odd_env = d.find("ENV ODD=").unwrap();
            let second = d.find("cd /tmp/dev-container-features/b_1").unwrap();
            assert!(env < first && first < odd_env && odd_env < second, "{odd:?}: {d}");
        }
        // Nor does a key that is no shell name.
        let d = dockerfile("sha256:abc", &users(), &[with_env(dir.path(), "a_0", json!({ "MY-VAR": "1" }))]);
        assert!(!d.contains("export "), "{d}");
    }

    #[test]
    fn env_steps_split_only_where_a_value_names_a_key_set_before_it_in_the_same_step() {
        let pairs =
            |list: &[(&str, &str)]| list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
        let keys = |groups: Vec<Vec<(String, String)>>| {
            groups.into_iter().map(|g| g.into_iter().map(|(k, _)| k).collect::<Vec<_>>().join(" ")).collect::<Vec<_>>()
        };
        assert_eq!(keys(env_groups(&pairs(&[("A", "1"), ("PATH", "/a:${PATH}"), ("B", "$HOME/b")]))), ["A PATH B"]);
        assert_eq!(keys(env_groups(&pairs(&[("X", "/x"), ("PATH", "${X}/bin:${PATH}")]))), ["X", "PATH"]);
        assert_eq!(keys(env_groups(&pairs(&[("X", "/x"), ("Y", "$X/y")]))), ["X", "Y"]);
        // `$XY` is not `$X`; a key set twice starts a new step.
        assert_eq!(keys(env_groups(&pairs(&[("X", "/x"), ("Y", "$XY")]))), ["X Y"]);
        assert_eq!(keys(env_groups(&pairs(&[("P", "a"), ("P", "b")]))), ["P", "P"]);
        assert!(env_groups(&[]).is_empty());
    }

    #[test]
    fn labels_are_one_quoted_instruction_unless_a_value_breaks_a_line() {
        let labels = |v: &str| vec![("devcontainer.metadata".to_string(), v.to_string()), ("k".into(), "1".into())];
        assert_eq!(
            label_instruction(&labels(r#"[ {"a":"$HOME \"q\" \\n"} ]"#)).unwrap(),
            r#"LABEL "devcontainer.metadata"="[ {\"a\":\"\$HOME \\\"q\\\" \\\\n\"} ]" "k"="1""#.to_string() + "\n"
        );
        assert_eq!(label_instruction(&labels("two\nlines")), None);
        assert_eq!(label_instruction(&labels(&"x".repeat(LABEL_LINE_MAX))), None);
        assert_eq!(label_instruction(&[]), None);
        // The context's key does not move with the labels it is given.
        let dir = feature_dir();
        let ctx = context("sha256:a", &users(), &[install(dir.path(), "hello_0", "")], "[]").unwrap();
        let (tar, left) = ctx.labelled(labels("[]")).unwrap();
        assert!(left.is_empty());
        let mut archive = tar::Archive::new(tar.as_slice());
        let mut dockerfile = String::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            if entry.path().unwrap().to_str() == Some("Dockerfile") {
                std::io::Read::read_to_string(&mut entry, &mut dockerfile).unwrap();
            }
        }
        assert_eq!(dockerfile, format!("{}LABEL \"devcontainer.metadata\"=\"[]\" \"k\"=\"1\"\n", ctx.dockerfile));
        let (_, left) = ctx.labelled(labels("a\nb")).unwrap();
        assert_eq!(left.len(), 2, "what the Dockerfile cannot hold goes to the build's parameters");
    }

    #[test]
    fn container_env_that_refers_to_a_variable_gets_one_env_per_key() {
        let pairs =
            |list: &[(&str, &str)]| list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
        assert_eq!(env_lines(&pairs(&[("A", "1"), ("B", "two words")])), "ENV A=\"1\" B=\"two words\"\n");
        assert_eq!(
            env_lines(&pairs(&[("X", "/x"), ("PATH", "${X}/bin:${PATH}")])),
            "ENV X=\"/x\"\nENV PATH=\"${X}/bin:${PATH}\"\n"
        );
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
    fn the_install_script_runs_each_features_run_in_order_after_its_marker_and_only_when_the_env_folds() {
        let dir = feature_dir();
        let installs = [
            with_env(dir.path(), "base_0", json!({ "BASE": "/opt/base", "PATH": "/opt/base/bin:${PATH}" })),
            with_env(dir.path(), "opts_1", json!({ "GREETING": "say \"hi\"" })),
        ];
        let script = install_script(&users(), &installs).unwrap();
        let d = dockerfile("sha256:abc", &users(), &installs);
        // Each step is its RUN's command, whole, in a subshell of its own.
        let runs: Vec<&str> = d.split("\nRUN ").skip(1).map(|r| r.split("\nENV ").next().unwrap()).collect();
        let expected: Vec<String> = ["base_0", "opts_1"]
            .iter()
            .zip(&runs)
            .map(|(cid, run)| format!("echo '{INSTALL_MARKER}{cid}' && ( {run} )"))
            .collect();
        assert_eq!(script, expected.join(" && "));
        // A value only the Dockerfile's ENV says right has no script.
        let odd = [with_env(dir.path(), "a_0", json!({ "ODD": "$(id -u)" }))];
        assert_eq!(install_script(&users(), &odd), None);
    }

    #[test]
    fn the_image_env_is_what_the_dockerfiles_env_after_the_installs_gives() {
        let dir = feature_dir();
        let installs = [
            with_env(dir.path(), "base_0", json!({ "BASE": "/opt/base", "PATH": "${BASE}/bin:$PATH" })),
            with_env(dir.path(), "opts_1", json!({ "GREETING": "say \"hi\" to $NOBODY", "BASE": "/opt/b2" })),
        ];
        let base = ["PATH=/usr/bin:/bin".to_string(), "LANG=C.UTF-8".to_string()];
        assert_eq!(
            image_env(&base, &installs),
            [
                // Replaced where it stood, after BASE was set before it.
                "PATH=/opt/base/bin:/usr/bin:/bin",
                "LANG=C.UTF-8",
                "BASE=/opt/b2",
                "GREETING=say \"hi\" to ",
            ]
        );
        assert_eq!(expand("a$b-${c}$", &["b=1".into(), "c=2".into()]), "a1-2$");
    }

    #[test]
    fn the_features_upload_holds_what_the_copy_puts_in_the_image() {
        let dir = feature_dir();
        let ctx = context("sha256:a", &users(), &[install(dir.path(), "hello_0", "A=\"1\"")], "[]").unwrap();
        let tar = ctx.features_tar().unwrap();
        let mut archive = tar::Archive::new(tar.as_slice());
        let entries: Vec<(String, u32, u64)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.path().unwrap().display().to_string(), e.header().mode().unwrap(), e.header().uid().unwrap())
            })
            .collect();
        let names: Vec<&str> = entries.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "tmp/dev-container-features/",
                "tmp/dev-container-features/devcontainer-features.builtin.env",
                "tmp/dev-container-features/hello_0/",
                "tmp/dev-container-features/hello_0/devcontainer-feature.json",
                "tmp/dev-container-features/hello_0/devcontainer-features-install.sh",
                "tmp/dev-container-features/hello_0/devcontainer-features.env",
                "tmp/dev-container-features/hello_0/install.sh",
            ]
        );
        // No entry for /tmp itself, whose mode (1777) must stay the image's.
        assert!(entries.iter().all(|(_, mode, uid)| *mode == 0o755 && *uid == 0), "{entries:?}");
    }

    #[test]
    fn the_context_holds_each_feature_with_its_env_and_wrapper() {
        let dir = feature_dir();
        let ctx = context("sha256:a", &users(), &[install(dir.path(), "hello_0", "A=\"1\"")], "[]").unwrap();
        let (tar, _) = ctx.labelled(Vec::new()).unwrap();
        let mut archive = tar::Archive::new(tar.as_slice());
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
