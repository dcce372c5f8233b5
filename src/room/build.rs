//! `devcontainer build`: the image `up` makes a room from, made by `up`'s
//! own steps into `up`'s own cache (the config's image pulled or its
//! Dockerfile built, then its features installed: `image.rs`,
//! `features.rs`), so a later `up` of the same config builds nothing. Then,
//! for rooms of other configurations (CI's prebuilt images), the image is
//! given the names asked for with its whole `devcontainer.metadata` label
//! (the image's entries, the features', devcontainer.json's), as the
//! reference labels what it builds, and pushed when asked.

use super::image::{self, BuildHow};
use crate::config::{Loaded, Source};
use crate::engine::{BuildRequest, Engine, PushAuth};
use crate::features::{metadata, recipe, LockMode};
use crate::notices::Notices;
use anyhow::Context as _;
use bollard::models::ImageInspect;

/// What `build` is asked for beyond the configuration.
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    pub how: BuildHow,
    pub lock: LockMode,
    /// `--image-name` (repeatable): the names the image gets; none gives it
    /// [`default_name`].
    pub image_names: Vec<String>,
    /// `--label NAME=VALUE`: set on the named image.
    pub labels: Vec<(String, String)>,
    /// `--push`: each name pushed to the registry it names.
    pub push: bool,
}

#[derive(Debug, Clone)]
pub struct Built {
    /// The names the image has, as asked (or the default one).
    pub image_names: Vec<String>,
    pub id: String,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("--image-name {name:?} is not an image name: {why}")]
    Name { name: String, why: &'static str },
    #[error("--label {text:?} is not NAME=VALUE")]
    Label { text: String },
    #[error("giving the image its metadata label failed: {reason}")]
    Commit { reason: String },
    #[error("pushing {name} failed: {reason}. Is the registry reachable, and are you logged in to it (docker login)?")]
    Push { name: String, reason: String },
    #[error("{config}: --platform and --push are not provided for a compose configuration, as the reference does not provide them")]
    ComposePlatform { config: String },
}

/// A name split as the engine tags and pushes it: `repo` and `tag`
/// (`latest` when none is written). A digest cannot be given to a build.
pub fn split_name(name: &str) -> Result<(String, String), BuildError> {
    let bad = |why| BuildError::Name { name: name.to_string(), why };
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(bad("it is empty or holds a space"));
    }
    if name.contains('@') {
        return Err(bad("a digest names what exists; a build is given a tag"));
    }
    let last = name.rfind('/').map_or(0, |i| i + 1);
    let (repo, tag) = match name[last..].rfind(':') {
        Some(at) => (&name[..last + at], &name[last + at + 1..]),
        None => (name, "latest"),
    };
    if tag.is_empty() {
        return Err(bad("its tag after `:` is empty"));
    }
    if repo.chars().any(|c| c.is_ascii_uppercase()) {
        return Err(bad("a repository name is lower-case"));
    }
    Ok((repo.to_string(), tag.to_string()))
}

/// The registry a name is pushed to, as the docker config keys its
/// credentials: the first part when it is a host (a `.` or `:` in it, or
/// `localhost`), else Docker Hub's key.
pub fn registry_of(repo: &str) -> String {
    match repo.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => first.to_string(),
        _ => DOCKER_HUB.to_string(),
    }
}

/// Docker Hub's key in the docker config (`docker login` writes it so).
const DOCKER_HUB: &str = "https://index.docker.io/v1/";

/// The name a build asked for no name gets: beside the Dockerfile image
/// `up` builds for the same room (`workroom-build/<room>`).
pub fn default_name(build_tag: &str) -> String {
    format!("{build_tag}:devcontainer")
}

/// Builds the image of the room named `room` as `up` would, then names it
/// and pushes it as asked.
pub async fn build(
    engine: &Engine,
    loaded: &Loaded,
    room: &str,
    options: &BuildOptions,
    say: &Notices,
) -> anyhow::Result<Built> {
    let build_tag = &super::make::build_tag(room);
    let names: Vec<String> = match options.image_names.is_empty() {
        true => vec![default_name(build_tag)],
        false => options.image_names.clone(),
    };
    let split: Vec<(String, String)> = names.iter().map(|n| split_name(n)).collect::<Result<_, _>>()?;
    let base = match &loaded.model.source {
        Source::Compose(compose) => {
            if options.how.platform.is_some() || options.push {
                let config = loaded.config_path.display().to_string();
                return Err(BuildError::ComposePlatform { config }.into());
            }
            super::compose::service_image_for_build(engine, loaded, compose, options.lock, &options.how, say).await?
        }
        _ => {
            let base = image::ensure_with(engine, loaded, build_tag, &options.how, say).await?;
            super::features::extend(engine, loaded, base, options.lock, &options.how, say).await?
        }
    };
    let (image, found) = base;
    let id = named(engine, loaded, (&image, &found), &split, options).await?;
    if options.push {
        for (repo, tag) in &split {
            push(engine, repo, tag, say).await?;
        }
    }
    Ok(Built { image_names: names, id })
}

/// The image's whole label: what it carries for rooms (its own entries,
/// the features'), then devcontainer.json's entry, as the reference's
/// `getDevcontainerMetadata` writes it. `None` when that says nothing.
pub fn whole_label(loaded: &Loaded, image: &ImageInspect) -> Option<String> {
    let labels = image.config.as_ref().and_then(|c| c.labels.as_ref());
    let mut entries = metadata::parse_label(labels.and_then(metadata::image_entries).as_deref());
    if let Some(own) = crate::plan::metadata::config_label_entry(loaded) {
        entries.push(serde_json::Value::Object(own));
    }
    (!entries.is_empty()).then(|| metadata::label_value(&entries))
}

/// Gives `image` every name asked: as it is when its label is already
/// whole and no label is to be added, else through a layerless commit
/// with the whole label (and `--label`s); the id the names have.
async fn named(
    engine: &Engine,
    loaded: &Loaded,
    (image, found): (&str, &ImageInspect),
    names: &[(String, String)],
    options: &BuildOptions,
) -> anyhow::Result<String> {
    let labels = found.config.as_ref().and_then(|c| c.labels.as_ref());
    let present = labels.and_then(|l| l.get(metadata::LABEL)).cloned();
    let ours = labels.is_some_and(|l| l.contains_key(metadata::ENTRIES_LABEL));
    let whole = whole_label(loaded, found);
    let mut wanted: recipe::Labels = options.labels.clone();
    if whole != present || ours {
        if let Some(label) = &whole {
            wanted.push((metadata::LABEL.to_string(), label.clone()));
        }
        // Whole to any room: see `metadata::ENTRIES_LABEL`.
        if ours {
            wanted.push((metadata::ENTRIES_LABEL.to_string(), String::new()));
        }
    }
    let from = found.id.clone().unwrap_or_else(|| image.to_string());
    let Some((first_repo, first_tag)) = names.first() else { return Ok(from) };
    let id = match wanted.is_empty() {
        true => {
            engine.tag_image(&from, first_repo, first_tag).await?;
            from
        }
        false => {
            let (context, left) = recipe::label_commit(&from, wanted).context("packing the label's build context")?;
            let first = format!("{first_repo}:{first_tag}");
            let request = BuildRequest {
                context,
                dockerfile: "Dockerfile".into(),
                tag: first.clone(),
                labels: left.into_iter().collect(),
                platform: options.how.platform.as_ref().map(ToString::to_string),
                ..Default::default()
            };
            let mut made = image::BuildSteps::default();
            if let Err(failed) = engine.build_image(request, &mut |text| made.feed(text)).await {
                image::remove_made(engine, &made.images).await;
                return Err(BuildError::Commit { reason: failed.reason }.into());
            }
            let built = engine.inspect_image(&first).await?;
            built.and_then(|i| i.id).ok_or_else(|| BuildError::Commit { reason: format!("{first} is not there") })?
        }
    };
    for (repo, tag) in &names[1..] {
        engine.tag_image(&id, repo, tag).await?;
    }
    Ok(id)
}

/// Pushes one name, with the docker config's credentials for its registry
/// when it has some (anonymously otherwise, as `docker push` does).
async fn push(engine: &Engine, repo: &str, tag: &str, say: &Notices) -> anyhow::Result<()> {
    let name = format!("{repo}:{tag}");
    say.say(format!("pushing {name}"));
    let registry = registry_of(repo);
    let auth = match docker_credential::get_credential(&registry) {
        Ok(docker_credential::DockerCredential::UsernamePassword(user, password)) => Some(PushAuth {
            username: Some(user),
            password: Some(password),
            server: Some(registry),
            ..Default::default()
        }),
        Ok(docker_credential::DockerCredential::IdentityToken(token)) => {
            Some(PushAuth { identity_token: Some(token), server: Some(registry), ..Default::default() })
        }
        Err(_) => None,
    };
    engine
        .push_image(repo, tag, auth, &mut |_| {})
        .await
        .map_err(|failed| BuildError::Push { name: name.clone(), reason: failed.reason })?;
    say.say(format!("pushed {name}"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_split_at_the_tags_colon_not_the_registrys_port() {
        let split = |n: &str| split_name(n).unwrap();
        assert_eq!(split("app"), ("app".into(), "latest".into()));
        assert_eq!(split("app:1"), ("app".into(), "1".into()));
        assert_eq!(split("localhost:5000/team/app"), ("localhost:5000/team/app".into(), "latest".into()));
        assert_eq!(split("localhost:5000/team/app:v2"), ("localhost:5000/team/app".into(), "v2".into()));
        assert_eq!(split("ghcr.io/o/app:Main"), ("ghcr.io/o/app".into(), "Main".into()));
    }

    #[test]
    fn a_digest_an_empty_tag_or_an_upper_case_repository_is_refused_naming_why() {
        for (name, why) in [
            ("app@sha256:abc", "a digest"),
            ("app:", "empty"),
            ("App:1", "lower-case"),
            ("", "empty"),
            ("a b", "space"),
        ] {
            let e = split_name(name).unwrap_err().to_string();
            assert!(e.contains(why), "{name}: {e}");
        }
    }

    #[test]
    fn a_name_is_pushed_to_the_host_it_starts_with_else_docker_hub() {
        assert_eq!(registry_of("localhost:5000/app"), "localhost:5000");
        assert_eq!(registry_of("localhost/app"), "localhost");
        assert_eq!(registry_of("ghcr.io/o/app"), "ghcr.io");
        assert_eq!(registry_of("o/app"), DOCKER_HUB);
        assert_eq!(registry_of("app"), DOCKER_HUB);
    }
}
