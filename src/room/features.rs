//! The derived image: the base image with the config's features installed,
//! built through the Engine API (classic builder) from the context
//! `features::recipe` generates, tagged by its content key so an unchanged
//! config never rebuilds. Its `devcontainer.metadata` label holds the base
//! image's entries, then one per feature; the room's image over it adds
//! devcontainer.json's entry last, as the reference writes the label, in a
//! layerless commit of its own so a changed hook never reinstalls features.
//! Whoever creates the room reads the merged metadata from there.
//!
//! A failed install leaves nothing: the tag is only applied by a build that
//! succeeds, intermediate containers are removed by the engine (`forcerm`),
//! and the layers the failed build committed are removed here.

use super::image::{remove_made, BuildHow, BuildSteps};
use crate::config::Loaded;
use crate::engine::{BuildRequest, Engine, EngineError};
use crate::features::{self, metadata, recipe, Cache, FeatureError, Fetcher, LockMode, Report};
use crate::notices::{Notices, Task};
use bollard::models::ImageInspect;
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
            build(engine, &context, &label, &resolved, &installs, how, say).await?;
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

async fn build(
    engine: &Engine,
    context: &recipe::Context,
    label: &str,
    resolved: &features::Resolved,
    installs: &[recipe::Install],
    how: &BuildHow,
    say: &Notices,
) -> Result<(), DerivedImageError> {
    let labels = vec![(metadata::LABEL.to_string(), label.to_string()), (KEY_LABEL.to_string(), context.key.clone())];
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
            if let Some(step) = line.strip_prefix("Step ") {
                // Which feature a step belongs to: its folder is named in it.
                let owner = self.installs.iter().position(|i| {
                    step.contains(&format!("{}/{}/", recipe::DEST, i.consecutive_id))
                        || step.contains(&format!("{}/{} ", recipe::DEST, i.consecutive_id))
                });
                if owner != self.current.as_ref().map(|(i, _)| *i) {
                    self.finish();
                    self.current =
                        owner.map(|i| (i, self.said.task(format!("installing {}", self.resolved.features[i].user_id))));
                }
                continue;
            }
            if line.starts_with(" ---> ") || line.starts_with("Removing intermediate container") {
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
        let code = reason.rsplit("non-zero code: ").next().filter(|c| c.chars().all(|c| c.is_ascii_digit()));
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
