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
use crate::progress::{Progress, Task};
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
) -> Result<(String, crate::plan::create::ImageFacts), DerivedImageError> {
    if loaded.model.features.is_empty() {
        return Ok(base);
    }
    let inspect = engine
        .inspect_image(&base.0)
        .await?
        .ok_or_else(|| DerivedImageError::Build { reason: format!("the base image {} vanished", base.0) })?;
    let (image, inspect) = extend(engine, loaded, (base.0, inspect), mode, how, &Progress::stderr()).await?;
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
    progress: &Progress,
) -> Result<(String, ImageInspect), DerivedImageError> {
    if loaded.model.features.is_empty() {
        return Ok(base);
    }
    let (base_name, base_image) = base;
    let cache = Cache::user();
    let fetcher = Fetcher::default();
    let report = FetchReport { progress, tasks: Mutex::new(HashMap::new()), fetched: Mutex::new(0) };
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
            if downloads > 0 || progress.is_terminal() {
                progress.summary(&format!("features: {} ready, image {tag} cached", installs.len()));
            }
            found
        }
        None => {
            build(engine, &context, &label, &resolved, &installs, how, progress).await?;
            let found = engine.inspect_image(&tag).await?.ok_or_else(|| DerivedImageError::Build {
                reason: format!("the build finished but {tag} is not there"),
            })?;
            progress.summary(&format!("features: {} installed into {tag}", installs.len()));
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
    progress: &Progress,
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
    let mut lines = Lines::default();
    let mut current: Option<(usize, Task)> = None;
    let mut tails: Vec<VecDeque<String>> = vec![VecDeque::new(); installs.len()];
    let built = engine
        .build_image(request, &mut |text| {
            made.feed(text);
            for line in lines.feed(text) {
                if let Some(step) = line.strip_prefix("Step ") {
                    // Which feature a step belongs to: its folder is named in it.
                    let owner = installs.iter().position(|i| {
                        step.contains(&format!("{}/{}/", recipe::DEST, i.consecutive_id))
                            || step.contains(&format!("{}/{} ", recipe::DEST, i.consecutive_id))
                    });
                    if owner != current.as_ref().map(|(i, _)| *i) {
                        if let Some((i, task)) = current.take() {
                            task.finish(&format!("installed {}", resolved.features[i].user_id));
                        }
                        current =
                            owner.map(|i| (i, progress.task(format!("installing {}", resolved.features[i].user_id))));
                    }
                    continue;
                }
                if line.starts_with(" ---> ") || line.starts_with("Removing intermediate container") {
                    continue;
                }
                if let Some((i, task)) = &current {
                    task.message(&line);
                    progress.println(&format!("[{}] {line}", installs[*i].feature_id()));
                    let tail = &mut tails[*i];
                    tail.push_back(line);
                    if tail.len() > FAILURE_LINES {
                        tail.pop_front();
                    }
                }
            }
        })
        .await;
    let failure = built.err().map(|failed| failed.reason);
    let Some(reason) = failure else {
        if let Some((i, task)) = current.take() {
            task.finish(&format!("installed {}", resolved.features[i].user_id));
        }
        return Ok(());
    };
    remove_made(engine, &made.images).await;
    match current {
        Some((i, task)) => {
            task.fail(&format!("{} failed", resolved.features[i].user_id));
            let code = reason.rsplit("non-zero code: ").next().filter(|c| c.chars().all(|c| c.is_ascii_digit()));
            Err(DerivedImageError::Install {
                feature: resolved.features[i].user_id.clone(),
                reason: match code {
                    Some(code) => format!("its install.sh exited with {code}"),
                    None => reason,
                },
                tail: tails[i].iter().map(|l| format!("    {l}")).collect::<Vec<_>>().join("\n"),
            })
        }
        None => Err(DerivedImageError::Build { reason }),
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

/// Feature downloads as progress lines.
struct FetchReport<'a> {
    progress: &'a Progress,
    tasks: Mutex<HashMap<String, Task>>,
    fetched: Mutex<usize>,
}

impl Report for FetchReport<'_> {
    fn fetching(&self, what: &str) {
        let mut tasks = workroomd::locks::lock(&self.tasks);
        tasks.entry(what.to_string()).or_insert_with(|| self.progress.task(format!("fetching {what}")));
    }

    fn fetched(&self, what: &str, bytes: usize) {
        *workroomd::locks::lock(&self.fetched) += 1;
        if let Some(task) = workroomd::locks::lock(&self.tasks).remove(what) {
            task.finish(&format!("fetched {what}, {} KiB", bytes.div_ceil(1024)));
        }
    }

    fn warning(&self, text: &str) {
        self.progress.println(&format!("warning: {text}"));
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
}
