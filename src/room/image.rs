//! Getting the image a room is made from: present locally, else pulled, else
//! built from the Dockerfile through the Engine API (no docker CLI).

use crate::config::{Build, Loaded, Source};
use crate::engine::{BuildRequest, Engine, EngineError};
use crate::notices::{Notices, Task};
use crate::plan::create::ImageFacts;
use bollard::models::ImageInspect;
use std::collections::HashMap;

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("image {image} is not present and could not be pulled: {reason}. Build or load it (docker build / docker load), or check the name in {config}")]
    Missing { image: String, reason: String, config: String },
    #[error("{config}: `image` {image:?} is not a valid image reference ({reason})")]
    Reference { config: String, image: String, reason: String },
    #[error("building {dockerfile} failed: {reason}")]
    Build { dockerfile: String, reason: String },
    #[error("{config}: a compose room's image is the compose service's, made by compose")]
    Compose { config: String },
    #[error("{config}: no container source: set `image`, or `build.dockerfile` (a Dockerfile next to the config)")]
    NoSource { config: String },
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// How images are made, beyond what devcontainer.json says: `up` makes
/// them the engine's default way; `devcontainer build` (and `up
/// --build-no-cache`) may ask otherwise. Every image of the room, the
/// Dockerfile's and the features', is made this way.
#[derive(Debug, Clone, Default)]
pub struct BuildHow {
    /// Every step run again (`--no-cache`, `--build-no-cache`).
    pub no_cache: bool,
    /// `--platform os/arch[/variant]`: the image is for it, pulled or built.
    pub platform: Option<crate::plan::platform::Platform>,
    /// `--cache-from`: images whose layers a build may reuse, after the
    /// config's `build.cacheFrom`.
    pub cache_from: Vec<String>,
}

impl BuildHow {
    fn platform_text(&self) -> Option<String> {
        self.platform.as_ref().map(ToString::to_string)
    }
}

/// Ensures the image exists; returns its reference and what the plan needs.
/// `tag` names a Dockerfile build (`workroom-build/<room>`).
pub async fn ensure(
    engine: &Engine,
    loaded: &Loaded,
    tag: &str,
    say: &Notices,
) -> Result<(String, ImageFacts), ImageError> {
    ensure_with(engine, loaded, tag, &BuildHow::default(), say).await.map(|(name, found)| (name, facts(&found)))
}

/// [`ensure`], made as `how` says; the image as the engine describes it.
pub async fn ensure_with(
    engine: &Engine,
    loaded: &Loaded,
    tag: &str,
    how: &BuildHow,
    say: &crate::notices::Notices,
) -> Result<(String, ImageInspect), ImageError> {
    match &loaded.model.source {
        Source::Image(image) => {
            let found = engine.inspect_image(image).await.map_err(|e| bad_reference(loaded, image, e))?;
            let config = loaded.config_path.display().to_string();
            let mut other = None;
            if let Some(found) = found {
                match (&how.platform, platform_of(&found)) {
                    (Some(asked), present) if !present.satisfies(asked) => other = Some(present),
                    _ => return Ok((image.clone(), found)),
                }
            }
            let asked = how.platform_text();
            pull(engine, image, asked.as_deref(), &config, say).await.map_err(|e| match (e, &other) {
                (ImageError::Missing { image, reason, config }, Some(present)) => ImageError::Missing {
                    image,
                    reason: format!("it is {present} here, and {} {reason}", asked.as_deref().unwrap_or_default()),
                    config,
                },
                (e, _) => e,
            })?;
            let found = engine.inspect_image(image).await?.ok_or_else(|| ImageError::Missing {
                image: image.clone(),
                reason: "the pull finished but the image is not there".into(),
                config,
            })?;
            Ok((image.clone(), found))
        }
        Source::Dockerfile(build) => {
            build_image(engine, build, tag, how, say).await?;
            let found = engine.inspect_image(tag).await?.ok_or_else(|| ImageError::Build {
                dockerfile: build.dockerfile.display().to_string(),
                reason: "the build finished but left no image".into(),
            })?;
            Ok((tag.to_string(), found))
        }
        // Compose makes the service's image (`room/compose.rs`).
        Source::Compose(_) => Err(ImageError::Compose { config: loaded.config_path.display().to_string() }),
        // Loading for a room refuses this first; said again in case.
        Source::Unset => Err(ImageError::NoSource { config: loaded.config_path.display().to_string() }),
    }
}

/// The engine's answer to a malformed reference (`Debian:12`, `a:b:c`)
/// names neither the property nor the file; this does.
fn bad_reference(loaded: &Loaded, image: &str, e: EngineError) -> ImageError {
    const MARK: &str = "invalid reference format";
    match &e {
        EngineError::Refused { status: 400, message, .. } if message.contains(MARK) => ImageError::Reference {
            config: loaded.config_path.display().to_string(),
            image: image.to_string(),
            reason: message[message.find(MARK).unwrap_or(0)..].to_string(),
        },
        _ => ImageError::Engine(e),
    }
}

/// The platform an image is for, as the engine describes it.
pub fn platform_of(image: &ImageInspect) -> crate::plan::platform::Platform {
    crate::plan::platform::Platform::new(
        image.os.as_deref().unwrap_or_default(),
        image.architecture.as_deref().unwrap_or_default(),
        image.variant.as_deref().unwrap_or_default(),
    )
}

pub fn facts(image: &ImageInspect) -> ImageFacts {
    let config = image.config.as_ref();
    ImageFacts {
        user: config.and_then(|c| c.user.clone()).filter(|u| !u.is_empty()),
        entrypoint: config.and_then(|c| c.entrypoint.clone()).unwrap_or_default(),
        cmd: config.and_then(|c| c.cmd.clone()).unwrap_or_default(),
        metadata: config.and_then(|c| crate::features::metadata::image_entries(c.labels.as_ref()?)),
        working_dir: config.and_then(|c| c.working_dir.clone()).filter(|d| !d.is_empty()),
    }
}

async fn pull(
    engine: &Engine,
    image: &str,
    platform: Option<&str>,
    config: &str,
    say: &Notices,
) -> Result<(), ImageError> {
    let started = std::time::Instant::now();
    let mut layers = Layers::new(say);
    say.say(format!("pulling {image}"));
    engine
        .pull_image(image, platform, &mut |p: crate::engine::PullProgress<'_>| {
            layers.update(p.layer, p.status, p.current, p.total)
        })
        .await
        .map_err(|e| ImageError::Missing { image: image.into(), reason: e.reason, config: config.into() })?;
    layers.finish_all();
    say.summary(format!("pulled {image}"), started);
    Ok(())
}

/// A pull's layers, a piece of work each, following the engine's status
/// for it (`Downloading` with bytes, `Extracting`, `Pull complete`,
/// `Already exists`).
struct Layers<'a> {
    said: &'a Notices,
    tasks: Vec<(String, Option<Task<'a>>)>,
}

impl<'a> Layers<'a> {
    fn new(said: &'a Notices) -> Self {
        Layers { said, tasks: Vec::new() }
    }

    fn update(&mut self, id: &str, status: &str, current: Option<i64>, total: Option<i64>) {
        // The first lines name the tag or the digest, not a layer.
        if status.starts_with("Pulling from") || status.starts_with("Digest:") || status.starts_with("Status:") {
            return;
        }
        let at = match self.tasks.iter().position(|(l, _)| l == id) {
            Some(at) => at,
            None => {
                self.tasks.push((id.to_string(), Some(self.said.task(format!("layer {id}")))));
                self.tasks.len() - 1
            }
        };
        let done = status == "Pull complete" || status == "Already exists";
        let slot = &mut self.tasks[at].1;
        match (done, slot.take()) {
            (true, Some(task)) => task.finish(format!("layer {id}: {}", status.to_lowercase())),
            (false, Some(task)) => {
                let bytes = match (current, total) {
                    (Some(c), Some(t)) if t > 0 => format!(" {} / {} KiB", c / 1024, t / 1024),
                    _ => String::new(),
                };
                task.doing(format!("{status}{bytes}"));
                *slot = Some(task);
            }
            (_, None) => {}
        }
    }

    /// Ends the layers the engine never said were complete.
    fn finish_all(&mut self) {
        for (_, task) in &mut self.tasks {
            if let Some(task) = task.take() {
                task.finish("layer pulled");
            }
        }
    }
}

async fn build_image(
    engine: &Engine,
    build: &Build,
    tag: &str,
    how: &BuildHow,
    say: &crate::notices::Notices,
) -> Result<(), ImageError> {
    let fail = |reason: String| ImageError::Build { dockerfile: build.dockerfile.display().to_string(), reason };
    let (context, dockerfile) = context_tar(build).map_err(|e| fail(format!("packing the build context: {e}")))?;
    let request = BuildRequest {
        context,
        dockerfile,
        tag: tag.to_string(),
        args: build.args.clone(),
        target: build.target.clone(),
        cache_from: build.cache_from.iter().chain(&how.cache_from).cloned().collect(),
        labels: HashMap::from([("workroom.build".to_string(), "1".to_string())]),
        no_cache: how.no_cache,
        platform: how.platform_text(),
    };
    say.say(format!("building {} (context {})", build.dockerfile.display(), build.context.display()));
    let mut made = BuildSteps::default();
    let built = engine
        .build_image(request, &mut |text| {
            made.feed(text);
            say.output(text.as_bytes());
        })
        .await;
    match built {
        Ok(()) => Ok(()),
        Err(failed) => {
            remove_made(engine, &made.images).await;
            Err(fail(failed.reason))
        }
    }
}

/// Removes an image this `up` built (`workroom-build/...`) that cannot make a
/// room after all. Best effort: a refused `up` says why it refused, not why
/// a cleanup failed.
pub async fn remove(engine: &Engine, tag: &str) {
    remove_made(engine, &[tag.to_string()]).await;
}

/// The images a build committed itself, read from the classic builder's
/// progress lines: in each `Step`, a ` ---> <id>` after ` ---> Running in`
/// is a layer this build made. A `FROM` image or a cached step's ` ---> <id>`
/// comes without `Running in`, so it is never counted: those images were
/// there before and are not ours to remove. Podman's builder (buildah)
/// says it otherwise: in each `STEP`, a `--> <id>` is a layer it made
/// unless `--> Using cache` came first; a `FROM` step says no id.
#[derive(Debug, Default)]
pub(super) struct BuildSteps {
    partial: String,
    ran: bool,
    pub(super) images: Vec<String>,
}

impl BuildSteps {
    pub(super) fn feed(&mut self, text: &str) {
        self.partial.push_str(text);
        while let Some(pos) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=pos).collect();
            let line = line.trim_end();
            if line.starts_with("Step ") {
                self.ran = false;
            } else if line.starts_with("STEP ") {
                self.ran = true;
            } else if let Some(rest) = line.strip_prefix("--> ") {
                if rest.starts_with("Using cache") {
                    self.ran = false;
                } else if self.ran && !rest.is_empty() && rest.chars().all(|c| c.is_ascii_hexdigit()) {
                    self.images.push(rest.to_string());
                    self.ran = false;
                }
            } else if let Some(rest) = line.strip_prefix(" ---> ") {
                if rest.starts_with("Running in ") {
                    self.ran = true;
                } else if self.ran && !rest.is_empty() && rest.chars().all(|c| c.is_ascii_hexdigit()) {
                    self.images.push(rest.to_string());
                    self.ran = false;
                }
            }
        }
    }
}

/// A failed classic build keeps the layers of the steps that succeeded (as
/// cache); a refused `up` must leave no image behind, so they go, newest
/// first (each is the parent of the next). Failures are ignored: an image
/// another build has since used as its parent stays, which is right.
pub(super) async fn remove_made(engine: &Engine, images: &[String]) {
    for id in images.iter().rev() {
        let _ = engine.remove_image(id).await;
    }
}

/// The build context as a tar, and the Dockerfile's path in it. A
/// Dockerfile outside the context (a monorepo's shared one) is added to the
/// tar under a generated name, as the docker CLI does: the engine reads the
/// Dockerfile only from the context it was sent. "Outside" is decided on
/// the real paths: `../../shared/Dockerfile` joined to a context of `..` is
/// lexically under it and really is not.
fn context_tar(build: &Build) -> std::io::Result<(Vec<u8>, String)> {
    let context = std::fs::canonicalize(&build.context)?;
    let dockerfile = std::fs::canonicalize(&build.dockerfile)?;
    let mut tar = tar::Builder::new(Vec::new());
    tar.follow_symlinks(false);
    tar.append_dir_all(".", &context)?;
    let name = match dockerfile.strip_prefix(&context) {
        Ok(inside) => inside.to_string_lossy().into_owned(),
        Err(_) => {
            let name = outside_name(&dockerfile);
            tar.append_path_with_name(&dockerfile, &name)?;
            name
        }
    };
    Ok((tar.into_inner()?, name))
}

/// The name a Dockerfile from outside the context takes in the context tar:
/// hidden, and from its path so that no file of the context is shadowed by
/// chance (the docker CLI uses `.dockerfile.<random>`).
fn outside_name(dockerfile: &std::path::Path) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(dockerfile.as_os_str().as_encoded_bytes());
    format!(".dockerfile.{}", hex::encode(&digest[..10]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(tar_bytes: &[u8]) -> Vec<String> {
        let mut archive = tar::Archive::new(tar_bytes);
        archive.entries().unwrap().map(|e| e.unwrap().path().unwrap().display().to_string()).collect()
    }

    fn build(dockerfile: std::path::PathBuf, context: std::path::PathBuf) -> Build {
        Build { dockerfile, context, args: vec![], target: None, cache_from: vec![], options: vec![] }
    }

    #[test]
    fn a_dockerfile_outside_the_context_by_dot_dot_is_sent_inside_the_context_tar() {
        let dir = tempfile::tempdir().unwrap();
        let (shared, app) = (dir.path().join("shared"), dir.path().join("app"));
        std::fs::create_dir_all(app.join(".devcontainer")).unwrap();
        std::fs::create_dir_all(&shared).unwrap();
        std::fs::write(shared.join("Dockerfile"), "FROM x\n").unwrap();
        std::fs::write(app.join("hello.txt"), "hi").unwrap();
        // As model.rs joins them: lexically under the context, really not.
        let b = build(app.join(".devcontainer/../../shared/Dockerfile"), app.join(".devcontainer/.."));
        let (tar_bytes, name) = context_tar(&b).unwrap();
        assert!(name.starts_with(".dockerfile."), "{name}");
        let entries = names(&tar_bytes);
        assert!(entries.contains(&name), "{entries:?}");
        assert!(entries.iter().any(|e| e.ends_with("hello.txt")), "{entries:?}");
    }

    #[test]
    fn a_dockerfile_inside_the_context_keeps_its_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".devcontainer")).unwrap();
        std::fs::write(dir.path().join(".devcontainer/Dockerfile"), "FROM x\n").unwrap();
        let b =
            build(dir.path().join(".devcontainer/../.devcontainer/Dockerfile"), dir.path().join(".devcontainer/.."));
        assert_eq!(context_tar(&b).unwrap().1, ".devcontainer/Dockerfile");
    }

    #[test]
    fn a_pulls_layers_are_a_piece_of_work_each_from_their_first_status_to_complete() {
        let (said, seen) = crate::notices::recorded();
        let mut layers = Layers::new(&said);
        layers.update("bookworm", "Pulling from library/debian", None, None);
        layers.update("a1", "Pulling fs layer", None, None);
        layers.update("b2", "Already exists", None, None);
        layers.update("a1", "Downloading", Some(2048), Some(10240));
        layers.update("a1", "Pull complete", None, None);
        layers.update("a1", "Extracting", None, None);
        layers.update("c3", "Waiting", None, None);
        layers.update("x", "Digest: sha256:00", None, None);
        layers.finish_all();
        let seen = seen.lock().unwrap();
        let ids: Vec<&str> =
            seen.iter().filter(|l| l.starts_with("began ")).map(|l| l.split(' ').nth(1).unwrap()).collect();
        let [a, b, c] = ids[..] else { panic!("three layers, not the tag or the digest: {seen:?}") };
        assert_eq!(
            *seen,
            [
                format!("began {a} layer a1"),
                format!("doing {a} Pulling fs layer"),
                format!("began {b} layer b2"),
                format!("ended {b} ok layer b2: already exists"),
                format!("doing {a} Downloading 2 / 10 KiB"),
                format!("ended {a} ok layer a1: pull complete"),
                format!("began {c} layer c3"),
                format!("doing {c} Waiting"),
                format!("ended {c} ok layer pulled"),
            ]
        );
        assert!(said.take().is_empty(), "a pull's progress is drawn, not kept with the warnings");
    }

    #[test]
    fn only_layers_a_build_committed_count_as_made() {
        let mut steps = BuildSteps::default();
        let log = "Step 1/4 : FROM base\n ---> 4381118ed4a7\nStep 2/4 : RUN make\n ---> Using cache\n ---> 1111aaaa2222\n\
            Step 3/4 : LABEL a=b\n ---> Running in 0bb144caeb9a\nRemoving intermediate container 0bb144caeb9a\n ---> 7e44b2e8c434\n\
            Step 4/4 : RUN exit 9\n ---> Running in 3d2991803e14\n";
        // Fed in pieces that split lines, as the engine's stream does.
        for chunk in log.as_bytes().chunks(7) {
            steps.feed(std::str::from_utf8(chunk).unwrap());
        }
        assert_eq!(steps.images, ["7e44b2e8c434"]);
    }

    #[test]
    fn podmans_builder_left_a_failed_builds_layers_so_its_steps_are_read_too() {
        // As Podman 4.3's API streamed a build whose step 3 was cached and
        // step 4 failed.
        let log = "STEP 1/5: FROM workroom-fixture/debian:bookworm\nSTEP 2/5: LABEL a=b\n--> f22da7398e2\n\
            STEP 3/5: RUN echo cached\n--> Using cache 6457588be261df696e2bf9aab88b14099a7c02353b2dd73ec24dfba6b2b61b06\n\
            --> 6457588be26\nSTEP 4/5: RUN echo step > /step.txt\n--> f6da103a2c3\nSTEP 5/5: RUN exit 9\n";
        let mut steps = BuildSteps::default();
        for chunk in log.as_bytes().chunks(5) {
            steps.feed(std::str::from_utf8(chunk).unwrap());
        }
        assert_eq!(steps.images, ["f22da7398e2", "f6da103a2c3"]);
    }
}
