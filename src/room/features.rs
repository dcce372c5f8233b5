//! The derived image: the base image with the config's features installed,
//! tagged by its content key so an unchanged config never rebuilds. On
//! Docker the installs run in one container committed once (a builder
//! step is a commit, and each commit walks the whole root filesystem on
//! fuse-overlayfs); on Podman, with `--cache-from`, or with a
//! `containerEnv` only a Dockerfile says right, the Dockerfile
//! `features::recipe` generates goes through the engine's builder. Its
//! `devcontainer.metadata` label holds the base
//! image's entries, then one per feature; the room's image over it adds
//! devcontainer.json's entry last, as the reference writes the label, in a
//! layerless commit of its own so a changed hook never reinstalls features.
//! Whoever creates the room reads the merged metadata from there.
//!
//! A failed install leaves nothing: the tag is only applied by a build or
//! a commit that succeeds, the install's container and the builder's
//! intermediate ones are removed (`forcerm`), and the layers a failed build
//! committed are removed here.

use super::image::{remove_made, BuildHow, BuildSteps};
use crate::config::Loaded;
use crate::engine::{BuildRequest, Engine, EngineError, LogChunk};
use crate::features::{self, metadata, recipe, Cache, FeatureError, Fetcher, LockMode, Report};
use crate::notices::{Notices, Task};
use bollard::models::{ContainerConfig, ContainerCreateBody, ImageConfig, ImageInspect};
use futures_util::StreamExt;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// How many of a failed install's last output lines its error repeats.
const FAILURE_LINES: usize = 12;

/// The label that marks our derived images, holding their full key.
pub const KEY_LABEL: &str = "workroom.features.key";

#[derive(Debug, thiserror::Error)]
pub enum DerivedImageError {
    #[error(transparent)]
    Features(#[from] FeatureError),
    #[error("feature {feature:?} failed to install ({reason}); its last lines:\n{tail}")]
    Install { feature: String, reason: String, tail: String },
    #[error("building the image with the features failed: {reason}")]
    Build { reason: String },
    #[error("packing the features' build context: {0}")]
    Context(std::io::Error),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// `up`'s image step: the base image `image::ensure` gave, extended with the
/// config's features when it has any.
pub async fn image_for(
    engine: &Engine,
    loaded: &Loaded,
    base: (String, crate::plan::create::ImageFacts),
    mode: LockMode,
    how: &BuildHow,
    say: &Notices,
) -> Result<(String, crate::plan::create::ImageFacts), DerivedImageError> {
    if loaded.model.features.is_empty() {
        return Ok(base);
    }
    let inspect = engine
        .inspect_image(&base.0)
        .await?
        .ok_or_else(|| DerivedImageError::Build { reason: format!("the base image {} vanished", base.0) })?;
    let (image, inspect) = extend(engine, loaded, (base.0, inspect), mode, how, say).await?;
    Ok((image, super::image::facts(&inspect)))
}

/// The image to create the room from: `base` itself when the config has no
/// features, else the derived image (built unless it exists, or always
/// with `how.no_cache`).
pub async fn extend(
    engine: &Engine,
    loaded: &Loaded,
    base: (String, ImageInspect),
    mode: LockMode,
    how: &BuildHow,
    say: &Notices,
) -> Result<(String, ImageInspect), DerivedImageError> {
    if loaded.model.features.is_empty() {
        return Ok(base);
    }
    let started = std::time::Instant::now();
    let (base_name, base_image) = base;
    let cache = Cache::user();
    let fetcher = Fetcher::default();
    let report = FetchReport::new(say);
    let Some(resolved) = features::resolve(loaded, mode, &cache, &fetcher, &report).await? else {
        return Ok((base_name, base_image));
    };
    let base_id = base_image.id.clone().unwrap_or_else(|| base_name.clone());
    let labels = base_image.config.as_ref().and_then(|c| c.labels.as_ref());
    let mut entries = metadata::parse_label(labels.and_then(metadata::image_entries).as_deref());
    let base_user = base_image.config.as_ref().and_then(|c| c.user.as_deref());
    let users = features::users(&entries, loaded, base_user);
    entries.extend(features::entries(&resolved));
    let label = metadata::label_value(&entries);
    let installs = features::installs(&resolved);
    let context = recipe::context(&base_id, &users, &installs, &label).map_err(DerivedImageError::Context)?;
    let tag = context.tag();
    let _building = cache.lock(&context.key).await?;
    let downloads = *workroomd::locks::lock(&report.fetched);
    let cached = match how.no_cache {
        true => None,
        false => engine.inspect_image(&tag).await?,
    };
    let installed = match cached {
        Some(found) => {
            // Nothing fetched, nothing built: a log needs no line for it.
            let text = format!("features: {} ready, image {tag} cached", installs.len());
            match downloads {
                0 => say.terminal_summary(text, started),
                _ => say.summary(text, started),
            }
            found
        }
        None => {
            let from = Base { id: &base_id, image: &base_image, users: &users };
            build(engine, &context, &label, &resolved, &installs, from, how, say).await?;
            let found = engine.inspect_image(&tag).await?.ok_or_else(|| DerivedImageError::Build {
                reason: format!("the build finished but {tag} is not there"),
            })?;
            say.summary(format!("features: {} installed into {tag}", installs.len()), started);
            found
        }
    };
    with_config_entry(engine, loaded, (tag, installed), entries, &context.key, how).await
}

/// The installed image with devcontainer.json's entry last in its label, as
/// the reference labels its derived image (`getDevcontainerMetadata`: the
/// base image's entries, the features', then the config's); the installed
/// image itself when the config has no entry. [`metadata::ENTRIES_LABEL`] records how
/// many entries precede the config's, so a room made later takes the
/// config's from devcontainer.json as it is then ([`metadata::image_entries`]).
async fn with_config_entry(
    engine: &Engine,
    loaded: &Loaded,
    (installed_tag, installed): (String, ImageInspect),
    mut entries: Vec<serde_json::Value>,
    key: &str,
    how: &BuildHow,
) -> Result<(String, ImageInspect), DerivedImageError> {
    let Some(own) = crate::plan::metadata::config_label_entry(loaded) else { return Ok((installed_tag, installed)) };
    let image_entries = entries.len();
    entries.push(serde_json::Value::Object(own));
    let label = metadata::label_value(&entries);
    let id = installed.id.clone().unwrap_or(installed_tag);
    let labels = vec![
        (metadata::LABEL.to_string(), label.clone()),
        (KEY_LABEL.to_string(), key.to_string()),
        (metadata::ENTRIES_LABEL.to_string(), format!("{image_entries} {}", recipe::label_digest(&label))),
    ];
    let (tar, tag, left) = recipe::labelled(&id, key, &label, labels).map_err(DerivedImageError::Context)?;
    // Over a reinstall (`no_cache`), the tag still names the commit over
    // the image before it.
    if !how.no_cache {
        if let Some(found) = engine.inspect_image(&tag).await? {
            return Ok((tag, found));
        }
    }
    let request = BuildRequest {
        context: tar,
        dockerfile: "Dockerfile".into(),
        tag: tag.clone(),
        labels: left.into_iter().collect(),
        platform: how.platform.as_ref().map(ToString::to_string),
        ..Default::default()
    };
    engine
        .build_image(request, &mut |_| {})
        .await
        .map_err(|failed| DerivedImageError::Build { reason: failed.reason })?;
    let found = engine.inspect_image(&tag).await?.ok_or_else(|| DerivedImageError::Build {
        reason: format!("the label build finished but {tag} is not there"),
    })?;
    Ok((tag, found))
}

/// The image the features are installed over.
#[derive(Clone, Copy)]
struct Base<'a> {
    id: &'a str,
    image: &'a ImageInspect,
    users: &'a recipe::Users,
}

/// Installs the features over `base` into the image `context.tag()`: in
/// one container committed once where the engine takes a commit's config
/// ([`install_and_commit`]), else by the Dockerfile through the builder.
#[allow(clippy::too_many_arguments)]
async fn build(
    engine: &Engine,
    context: &recipe::Context,
    label: &str,
    resolved: &features::Resolved,
    installs: &[recipe::Install],
    base: Base<'_>,
    how: &BuildHow,
    say: &Notices,
) -> Result<(), DerivedImageError> {
    let labels = vec![(metadata::LABEL.to_string(), label.to_string()), (KEY_LABEL.to_string(), context.key.clone())];
    if let Some(script) = recipe::install_script(base.users, installs) {
        if how.cache_from.is_empty() && !engine_is_podman(engine).await? {
            let install = Install { context, script, labels, base, resolved, installs };
            return install_and_commit(engine, install, how, say).await;
        }
    }
    let (tar, left) = context.labelled(labels).map_err(DerivedImageError::Context)?;
    let request = BuildRequest {
        context: tar,
        dockerfile: "Dockerfile".into(),
        tag: context.tag(),
        labels: left.into_iter().collect(),
        no_cache: how.no_cache,
        platform: how.platform.as_ref().map(ToString::to_string),
        cache_from: how.cache_from.clone(),
        ..Default::default()
    };
    let mut made = BuildSteps::default();
    let mut log = InstallLog::new(resolved, installs, say);
    let built = engine
        .build_image(request, &mut |text| {
            made.feed(text);
            log.feed(text);
        })
        .await;
    let Err(failed) = built else {
        log.finish();
        return Ok(());
    };
    remove_made(engine, &made.images).await;
    Err(log.failed(failed.reason))
}

/// Podman's API takes a commit's image config from the container whole,
/// ignoring the one asked for (Podman 4.3: the install's command became
/// the image's `Cmd`), so there the features go through its builder
/// (buildah), whose steps diff natively and cost far less than Docker's
/// on fuse-overlayfs.
async fn engine_is_podman(engine: &Engine) -> Result<bool, DerivedImageError> {
    let (info, version) = engine.describe().await?;
    Ok(crate::room::nested::engine_facts(&info, &version).podman)
}

/// What [`install_and_commit`] installs, over what, labelled how.
struct Install<'a> {
    context: &'a recipe::Context,
    /// [`recipe::install_script`].
    script: String,
    labels: recipe::Labels,
    base: Base<'a>,
    resolved: &'a features::Resolved,
    installs: &'a [recipe::Install],
}

/// The installs of the Dockerfile in one container, committed once with
/// the config the Dockerfile would have given the image: the base image's,
/// with the features' `containerEnv` set after the installs and the
/// labels. The builder makes a container and a commit per step (five for
/// two features), and on a naive-diff storage driver (fuse-overlayfs) each
/// commit walks the whole root filesystem: 2-4 s for Debian, whatever the
/// step did. Here: one container, an upload of the features (the `COPY`),
/// one commit. The install's container is removed whatever happens; a
/// failed install committed nothing, so nothing else is left.
async fn install_and_commit(
    engine: &Engine,
    install: Install<'_>,
    how: &BuildHow,
    say: &Notices,
) -> Result<(), DerivedImageError> {
    let Install { context, script, labels, base, resolved, installs } = install;
    let config = base.image.config.clone().unwrap_or_default();
    let (body, image) = install_config(&config, base.id, base.users, script, installs, labels);
    let tar = context.features_tar().map_err(DerivedImageError::Context)?;
    let name = format!("{}-install-{}", recipe::IMAGE_REPOSITORY, &context.key[..32]);
    let platform = how.platform.as_ref().map(ToString::to_string);
    let id = match engine.create_container_on(&name, platform.as_deref(), body.clone()).await {
        // Left by an install that was killed: the key's lock is ours, so
        // nobody else is using it.
        Err(EngineError::Refused { status: 409, .. }) => {
            engine.remove(&name, true).await?;
            engine.create_container_on(&name, platform.as_deref(), body).await?
        }
        made => made?,
    };
    let ran = run_install(engine, &id, tar, resolved, installs, say).await;
    let committed = match ran {
        Ok(()) => {
            let (repo, tag) = context.tag_parts();
            engine.commit(&id, repo, tag, image).await.map(|_| ()).map_err(DerivedImageError::from)
        }
        Err(e) => Err(e),
    };
    let removed = engine.remove(&id, true).await;
    committed?;
    removed?;
    Ok(())
}

/// The install container's create request, and the installed image's
/// config for its commit. Docker fills what a commit's config leaves empty
/// from the container's (`merge` in its `daemon/commit.go`), so the
/// container must not differ from the image where the image's config is
/// empty: the install runs as the container's `Cmd` when the image has a
/// `Cmd` and no `Entrypoint` (the commit's `Cmd` is then the image's, and
/// the empty `Entrypoint` is filled with the container's, empty too), else
/// as its `Entrypoint`, over an image `Entrypoint` that is then either the
/// image's or, when it had neither, `[]`, which runs the same as none.
fn install_config(
    config: &ImageConfig,
    base_id: &str,
    users: &recipe::Users,
    script: String,
    installs: &[recipe::Install],
    labels: recipe::Labels,
) -> (ContainerCreateBody, ContainerConfig) {
    let mut command =
        config.shell.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| vec!["/bin/sh".into(), "-c".into()]);
    command.push(script);
    let has_entrypoint = config.entrypoint.as_ref().is_some_and(|e| !e.is_empty());
    let has_cmd = config.cmd.as_ref().is_some_and(|c| !c.is_empty());
    let (entrypoint, cmd) = match !has_entrypoint && has_cmd {
        true => (None, Some(command)),
        false => (Some(command), None),
    };
    let body = ContainerCreateBody {
        image: Some(base_id.to_string()),
        // The Dockerfile's `USER root`, when the image runs as another.
        user: (!recipe::runs_as_root(users)).then(|| "root".to_string()),
        entrypoint,
        cmd,
        ..Default::default()
    };
    let mut all = config.labels.clone().unwrap_or_default();
    all.extend(labels);
    let image = ContainerConfig {
        user: config.user.clone(),
        exposed_ports: config.exposed_ports.clone(),
        env: Some(recipe::image_env(config.env.as_deref().unwrap_or_default(), installs)),
        cmd: config.cmd.clone(),
        healthcheck: config.healthcheck.clone(),
        args_escaped: config.args_escaped,
        volumes: config.volumes.clone(),
        working_dir: config.working_dir.clone(),
        entrypoint: match has_entrypoint || has_cmd {
            true => config.entrypoint.clone(),
            false => Some(Vec::new()),
        },
        on_build: config.on_build.clone(),
        labels: Some(all),
        stop_signal: config.stop_signal.clone(),
        shell: config.shell.clone(),
        ..Default::default()
    };
    (body, image)
}

/// Uploads the features into the created install container (the
/// Dockerfile's `COPY`), runs it with its output read as the builder's
/// is, and says which feature failed if it exits non-zero.
async fn run_install(
    engine: &Engine,
    id: &str,
    tar: Vec<u8>,
    resolved: &features::Resolved,
    installs: &[recipe::Install],
    say: &Notices,
) -> Result<(), DerivedImageError> {
    engine.upload(id, "/", tar).await?;
    engine.start(id).await?;
    let mut log = InstallLog::new(resolved, installs, say);
    let mut logs = engine.logs(id, true);
    while let Some(chunk) = logs.next().await {
        let (LogChunk::Stdout(bytes) | LogChunk::Stderr(bytes)) = chunk?;
        log.feed(&String::from_utf8_lossy(&bytes));
    }
    drop(logs);
    let mut state = engine.inspect_container(id).await?.and_then(|c| c.state);
    // The log stream can end a moment before the engine records the exit:
    // an exit code read while it still runs would be its placeholder 0.
    if let Some(started) = state.as_ref().filter(|s| s.running == Some(true)).and_then(|s| s.started_at.clone()) {
        engine.wait_exit(id, &started).await?;
        state = engine.inspect_container(id).await?.and_then(|c| c.state);
    }
    match state.and_then(|s| s.exit_code) {
        Some(0) => {
            log.finish();
            Ok(())
        }
        code => {
            let code = code.map_or_else(|| "unknown".to_string(), |c| c.to_string());
            Err(log.failed(format!("the install returned a non-zero code: {code}")))
        }
    }
}

/// A features build's output, read as it comes: which feature each step
/// installs (a piece of work each), and its lines, labelled with the
/// feature and kept last few, for the error should its install fail.
struct InstallLog<'a> {
    resolved: &'a features::Resolved,
    installs: &'a [recipe::Install],
    said: &'a Notices,
    lines: Lines,
    current: Option<(usize, Task<'a>)>,
    tails: Vec<VecDeque<String>>,
}

impl<'a> InstallLog<'a> {
    fn new(resolved: &'a features::Resolved, installs: &'a [recipe::Install], said: &'a Notices) -> Self {
        let tails = vec![VecDeque::new(); installs.len()];
        InstallLog { resolved, installs, said, lines: Lines::default(), current: None, tails }
    }

    fn feed(&mut self, text: &str) {
        for line in self.lines.feed(text) {
            if let Some(cid) = line.strip_prefix(recipe::INSTALL_MARKER) {
                let owner = self.installs.iter().position(|i| i.consecutive_id == cid);
                self.begin(owner);
                continue;
            }
            // Docker's builder says `Step 2/5 : RUN …`, Podman's (buildah) `STEP 2/5: RUN …`.
            if let Some(step) = line.strip_prefix("Step ").or_else(|| line.strip_prefix("STEP ")) {
                // Which feature a step belongs to: its folder is named in it.
                let owner = self.installs.iter().position(|i| {
                    step.contains(&format!("{}/{}/", recipe::DEST, i.consecutive_id))
                        || step.contains(&format!("{}/{} ", recipe::DEST, i.consecutive_id))
                });
                self.begin(owner);
                continue;
            }
            if line.starts_with(" ---> ")
                || line.starts_with("--> ")
                || line.starts_with("Removing intermediate container")
            {
                continue;
            }
            if let Some((i, task)) = &self.current {
                task.doing(line.clone());
                self.said.output(format!("[{}] {line}\n", self.installs[*i].feature_id()).as_bytes());
                let tail = &mut self.tails[*i];
                tail.push_back(line);
                if tail.len() > FAILURE_LINES {
                    tail.pop_front();
                }
            }
        }
    }

    /// Feature `owner` (of `installs`) is being installed now, or none.
    fn begin(&mut self, owner: Option<usize>) {
        if owner != self.current.as_ref().map(|(i, _)| *i) {
            self.finish();
            self.current =
                owner.map(|i| (i, self.said.task(format!("installing {}", self.resolved.features[i].user_id))));
        }
    }

    /// The feature being installed is done.
    fn finish(&mut self) {
        if let Some((i, task)) = self.current.take() {
            task.finish(format!("installed {}", self.resolved.features[i].user_id));
        }
    }

    /// The build failed for `reason`: whose install, and its last lines.
    fn failed(self, reason: String) -> DerivedImageError {
        let Some((i, task)) = self.current else { return DerivedImageError::Build { reason } };
        let feature = self.resolved.features[i].user_id.clone();
        task.fail(format!("{feature} failed"));
        // Docker: `… returned a non-zero code: 3`; Podman: `… while running runtime: exit status 3`.
        let code = ["non-zero code: ", "exit status "]
            .iter()
            .filter_map(|at| reason.rsplit_once(at).map(|(_, code)| code.trim()))
            .find(|c| !c.is_empty() && c.chars().all(|c| c.is_ascii_digit()));
        DerivedImageError::Install {
            feature,
            reason: match code {
                Some(code) => format!("its install.sh exited with {code}"),
                None => reason,
            },
            tail: self.tails[i].iter().map(|l| format!("    {l}")).collect::<Vec<_>>().join("\n"),
        }
    }
}

impl recipe::Install {
    /// The feature's id, for prefixing its output.
    fn feature_id(&self) -> &str {
        self.consecutive_id.rsplit_once('_').map_or(&self.consecutive_id, |(id, _)| id)
    }
}

/// Whole lines out of a stream of chunks.
#[derive(Default)]
struct Lines {
    partial: String,
}

impl Lines {
    fn feed(&mut self, text: &str) -> Vec<String> {
        self.partial.push_str(text);
        let mut out = Vec::new();
        while let Some(pos) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=pos).collect();
            let line = line.trim_end_matches(['\n', '\r']).to_string();
            if !line.trim().is_empty() {
                out.push(line);
            }
        }
        out
    }
}

/// Feature downloads, a piece of work each.
struct FetchReport<'a> {
    said: &'a Notices,
    tasks: Mutex<HashMap<String, Task<'a>>>,
    fetched: Mutex<usize>,
}

impl<'a> FetchReport<'a> {
    fn new(said: &'a Notices) -> Self {
        FetchReport { said, tasks: Mutex::new(HashMap::new()), fetched: Mutex::new(0) }
    }
}

impl Report for FetchReport<'_> {
    fn fetching(&self, what: &str) {
        let mut tasks = workroomd::locks::lock(&self.tasks);
        tasks.entry(what.to_string()).or_insert_with(|| self.said.task(format!("fetching {what}")));
    }

    fn fetched(&self, what: &str, bytes: usize) {
        *workroomd::locks::lock(&self.fetched) += 1;
        if let Some(task) = workroomd::locks::lock(&self.tasks).remove(what) {
            task.finish(format!("fetched {what}, {} KiB", bytes.div_ceil(1024)));
        }
    }

    fn warning(&self, text: &str) {
        self.said.warn(text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_whole_whatever_the_chunks() {
        let mut l = Lines::default();
        let mut out = Vec::new();
        for chunk in ["Step 1/2 : FR", "OM x\n ---> abc\nhel", "lo\r\n\n"] {
            out.extend(l.feed(chunk));
        }
        assert_eq!(out, ["Step 1/2 : FROM x", " ---> abc", "hello"]);
    }

    fn feature(user_id: &str) -> features::Feature {
        features::Feature {
            user_id: user_id.into(),
            id: user_id.rsplit('/').next().unwrap().split(':').next().unwrap().into(),
            source: features::reference::Source::Local(user_id.into()),
            integrity: None,
            json: Default::default(),
            folder: user_id.into(),
            values: Default::default(),
        }
    }

    fn install(consecutive_id: &str) -> recipe::Install {
        recipe::Install {
            consecutive_id: consecutive_id.into(),
            id_without_version: None,
            feature: Default::default(),
            folder: "/f".into(),
            env: String::new(),
        }
    }

    #[test]
    fn each_features_install_is_a_piece_of_work_with_its_lines_labelled_and_the_next_step_ends_it() {
        let resolved = features::Resolved { features: vec![feature("./node"), feature("./go")] };
        let installs = [install("node_0"), install("go_1")];
        let (said, seen) = crate::notices::recorded();
        let mut log = InstallLog::new(&resolved, &installs, &said);
        let build = format!(
            "Step 1/4 : FROM base\n ---> 4381118ed4a7\nStep 2/4 : RUN cd {d}/node_0 && ./install.sh\n \
             ---> Running in 0bb1\nnode ok\nStep 3/4 : RUN cd {d}/go_1 && ./install.sh\ngo ok\n\
             Removing intermediate container 3d29\nStep 4/4 : LABEL a=b\n",
            d = recipe::DEST
        );
        // In pieces that split lines, as the engine streams it.
        for chunk in build.as_bytes().chunks(9) {
            log.feed(std::str::from_utf8(chunk).unwrap());
        }
        log.finish();
        let seen = seen.lock().unwrap();
        let ids: Vec<&str> =
            seen.iter().filter(|l| l.starts_with("began ")).map(|l| l.split(' ').nth(1).unwrap()).collect();
        let [node, go] = ids[..] else { panic!("one piece of work per feature: {seen:?}") };
        assert_eq!(
            *seen,
            [
                format!("began {node} installing ./node"),
                format!("doing {node} node ok"),
                "output [node] node ok\n".to_string(),
                format!("ended {node} ok installed ./node"),
                format!("began {go} installing ./go"),
                format!("doing {go} go ok"),
                "output [go] go ok\n".to_string(),
                format!("ended {go} ok installed ./go"),
            ]
        );
    }

    #[test]
    fn a_failed_install_names_its_feature_its_exit_code_and_its_last_lines() {
        let resolved = features::Resolved { features: vec![feature("./node")] };
        let installs = [install("node_0")];
        let (said, seen) = crate::notices::recorded();
        let mut log = InstallLog::new(&resolved, &installs, &said);
        log.feed(&format!("Step 2/3 : RUN cd {}/node_0 && ./install.sh\n", recipe::DEST));
        for n in 0..FAILURE_LINES + 3 {
            log.feed(&format!("line {n}\n"));
        }
        let error = log.failed("The command '/bin/sh -c cd x' returned a non-zero code: 7".into());
        assert!(seen.lock().unwrap().last().is_some_and(|l| l.ends_with("failed ./node failed")), "{seen:?}");
        let DerivedImageError::Install { feature, reason, tail } = error else { panic!("{error:?}") };
        assert_eq!((feature.as_str(), reason.as_str()), ("./node", "its install.sh exited with 7"));
        assert_eq!(tail.lines().count(), FAILURE_LINES);
        assert_eq!(tail.lines().last(), Some(format!("    line {}", FAILURE_LINES + 2)).as_deref());
        // A build that failed before any feature's step is the build's failure.
        let (said, _) = crate::notices::recorded();
        let error = InstallLog::new(&resolved, &installs, &said).failed("no base".into());
        assert!(matches!(error, DerivedImageError::Build { reason } if reason == "no base"));
    }

    #[test]
    fn the_install_runs_where_the_commit_keeps_the_images_own_entrypoint_and_cmd() {
        let users = recipe::Users { image_user: "dev".into(), container_user: "dev".into(), remote_user: "dev".into() };
        let strings = |s: &[&str]| Some(s.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let image = |entrypoint: Option<Vec<String>>, cmd: Option<Vec<String>>| ImageConfig {
            entrypoint,
            cmd,
            user: Some("dev".into()),
            env: strings(&["PATH=/bin"]),
            labels: Some([("base".to_string(), "1".to_string())].into()),
            ..Default::default()
        };
        let install = |config: &ImageConfig| {
            let labels = vec![(KEY_LABEL.to_string(), "k".to_string())];
            install_config(config, "sha256:b", &users, "true".into(), &[], labels)
        };
        // Cmd and no Entrypoint: the install is the Cmd, the commit's Cmd the image's.
        let (body, committed) = install(&image(None, strings(&["bash"])));
        assert_eq!((body.entrypoint, body.cmd), (None, strings(&["/bin/sh", "-c", "true"])));
        assert_eq!((committed.entrypoint, committed.cmd), (None, strings(&["bash"])));
        // An Entrypoint: the install replaces it; the commit names both.
        let (body, committed) = install(&image(strings(&["/init"]), None));
        assert_eq!((body.entrypoint, body.cmd), (strings(&["/bin/sh", "-c", "true"]), None));
        assert_eq!((committed.entrypoint, committed.cmd), (strings(&["/init"]), None));
        // Neither: an empty Entrypoint, so the install's is not taken.
        let (_, committed) = install(&image(None, None));
        assert_eq!((committed.entrypoint, committed.cmd), (Some(Vec::new()), None));
        // As root, back to the image's user; the labels added to the image's.
        assert_eq!((body.user.as_deref(), committed.user.as_deref()), (Some("root"), Some("dev")));
        let labels = committed.labels.unwrap();
        assert_eq!((labels["base"].as_str(), labels[KEY_LABEL].as_str()), ("1", "k"));
        assert_eq!(committed.env, strings(&["PATH=/bin"]));
        // An image of root's installs as itself.
        let root = recipe::Users { image_user: "root".into(), ..users.clone() };
        let (body, _) = install_config(&image(None, None), "sha256:b", &root, "true".into(), &[], Vec::new());
        assert_eq!(body.user, None);
    }

    #[test]
    fn the_install_containers_marker_lines_begin_each_features_piece_of_work_unprinted() {
        let resolved = features::Resolved { features: vec![feature("./node"), feature("./go")] };
        let installs = [install("node_0"), install("go_1")];
        let (said, seen) = crate::notices::recorded();
        let mut log = InstallLog::new(&resolved, &installs, &said);
        let m = recipe::INSTALL_MARKER;
        log.feed(&format!("{m}node_0\nnode ok\n{m}go_1\ngo ok\n"));
        log.finish();
        let seen = seen.lock().unwrap();
        let begun: Vec<&String> = seen.iter().filter(|l| l.starts_with("began ")).collect();
        assert_eq!(begun.len(), 2, "{seen:?}");
        let printed: Vec<&String> = seen.iter().filter(|l| l.starts_with("output ")).collect();
        assert_eq!(printed, ["output [node] node ok\n", "output [go] go ok\n"]);
    }

    #[test]
    fn podmans_builder_steps_and_exit_status_name_the_feature_that_failed() {
        let resolved = features::Resolved { features: vec![feature("./node")] };
        let installs = [install("node_0")];
        let (said, seen) = crate::notices::recorded();
        let mut log = InstallLog::new(&resolved, &installs, &said);
        log.feed(&format!("STEP 2/3: RUN cd {}/node_0 && ./install.sh\nno disk\n--> 3f2a\n", recipe::DEST));
        let reason =
            format!("building at STEP \"RUN cd {}/node_0\": while running runtime: exit status 3", recipe::DEST);
        let error = log.failed(reason);
        let printed: Vec<String> = seen.lock().unwrap().iter().filter(|l| l.starts_with("output ")).cloned().collect();
        assert_eq!(printed, ["output [node] no disk\n"]);
        let DerivedImageError::Install { feature, reason, .. } = error else { panic!("{error:?}") };
        assert_eq!((feature.as_str(), reason.as_str()), ("./node", "its install.sh exited with 3"));
    }

    #[test]
    fn a_features_download_is_a_piece_of_work_and_its_warnings_are_kept_for_ups_result() {
        let (said, seen) = crate::notices::recorded();
        let report = FetchReport::new(&said);
        report.fetching("ghcr.io/devcontainers/features/node:1");
        report.fetching("ghcr.io/devcontainers/features/node:1");
        report.fetched("ghcr.io/devcontainers/features/node:1", 3000);
        report.warning("ghcr.io/x/old:1 is deprecated");
        assert_eq!(*workroomd::locks::lock(&report.fetched), 1);
        let seen = seen.lock().unwrap();
        let id = seen[0].split(' ').nth(1).unwrap();
        assert_eq!(
            *seen,
            [
                format!("began {id} fetching ghcr.io/devcontainers/features/node:1"),
                format!("ended {id} ok fetched ghcr.io/devcontainers/features/node:1, 3 KiB"),
                "warning: ghcr.io/x/old:1 is deprecated".to_string(),
            ]
        );
        let kept: Vec<String> = said.take().iter().map(ToString::to_string).collect();
        assert_eq!(kept, ["warning: ghcr.io/x/old:1 is deprecated"]);
    }
}
