//! Image pulls and builds, image removal, and a container's logs: the
//! engine's streaming calls, read here and handed on as plain data (a
//! layer's progress, a build's output text, a log chunk), so the room's
//! sequences (`room/image.rs`, `room/features.rs`) and `workroom logs`
//! never hold bollard (ADR 0001).

use super::{DockerEngine, EngineError};
use bollard::query_parameters::{
    BuildImageOptions, CommitContainerOptions, CreateImageOptions, LogsOptions, PushImageOptions, RemoveImageOptions,
    TagImageOptions,
};
use futures_util::{Stream, StreamExt};
use std::collections::HashMap;

/// One progress report of a pull: a layer (or the tag, in the first
/// reports) and what the engine says of it.
#[derive(Debug, Clone, Copy)]
pub struct PullProgress<'a> {
    pub layer: &'a str,
    pub status: &'a str,
    pub current: Option<i64>,
    pub total: Option<i64>,
}

/// Why a pull or a build stopped: the engine's own words (the stream's
/// error detail), or the innermost cause of a broken stream. The callers
/// put it in their own error, which names the image or the Dockerfile.
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct StreamFailed {
    pub reason: String,
}

/// A build through the classic builder: the context tar, the Dockerfile's
/// path in it, the tag and labels of the image it makes. Intermediate
/// containers are removed even when a step fails (`rm`, `forcerm`).
#[derive(Debug, Clone, Default)]
pub struct BuildRequest {
    pub context: Vec<u8>,
    pub dockerfile: String,
    pub tag: String,
    pub args: Vec<(String, String)>,
    pub target: Option<String>,
    pub cache_from: Vec<String>,
    pub labels: HashMap<String, String>,
    /// Every step run again, none taken from the engine's cache.
    pub no_cache: bool,
    /// `os/arch[/variant]` of the image to make; the engine's own when `None`.
    pub platform: Option<String>,
}

/// Who pushes: a registry's user and password (or token), as the docker
/// config holds them; `None` pushes anonymously.
#[derive(Debug, Clone, Default)]
pub struct PushAuth {
    pub username: Option<String>,
    pub password: Option<String>,
    pub identity_token: Option<String>,
    /// The registry's host, as the credentials are keyed.
    pub server: Option<String>,
}

/// A piece of a container's logs, by the stream it was written to.
#[derive(Debug)]
pub enum LogChunk {
    Stderr(bytes::Bytes),
    /// stdout (and a tty's console, which has one stream).
    Stdout(bytes::Bytes),
}

impl DockerEngine {
    /// Pulls `image`, calling `progress` with each report; returns when the
    /// engine says the pull is over.
    pub async fn pull_image(
        &self,
        image: &str,
        platform: Option<&str>,
        progress: impl FnMut(PullProgress<'_>),
    ) -> Result<(), StreamFailed> {
        super::logged_long("pull_image", image, self.pull(image, platform, progress)).await
    }

    async fn pull(
        &self,
        image: &str,
        platform: Option<&str>,
        mut progress: impl FnMut(PullProgress<'_>),
    ) -> Result<(), StreamFailed> {
        let options = CreateImageOptions {
            from_image: Some(image.to_string()),
            platform: platform.unwrap_or_default().to_string(),
            ..Default::default()
        };
        let mut stream = self.docker.create_image(Some(options), None, None);
        while let Some(item) = stream.next().await {
            let info = item.map_err(|e| StreamFailed { reason: super::docker::short_reason(&e) })?;
            if let Some(reason) = info.error_detail.and_then(|d| d.message) {
                return Err(StreamFailed { reason });
            }
            let detail = info.progress_detail.as_ref();
            if let (Some(layer), Some(status)) = (info.id.as_deref(), info.status.as_deref()) {
                let (current, total) = (detail.and_then(|d| d.current), detail.and_then(|d| d.total));
                progress(PullProgress { layer, status, current, total });
            }
        }
        Ok(())
    }

    /// Builds an image, calling `output` with each piece of the builder's
    /// text (lines may be split across pieces); returns when the build is
    /// over.
    pub async fn build_image(&self, request: BuildRequest, output: impl FnMut(&str)) -> Result<(), StreamFailed> {
        let tag = request.tag.clone();
        super::logged_long("build_image", &tag, self.build(request, output)).await
    }

    async fn build(&self, request: BuildRequest, mut output: impl FnMut(&str)) -> Result<(), StreamFailed> {
        let options = BuildImageOptions {
            dockerfile: request.dockerfile,
            t: Some(request.tag),
            rm: true,
            forcerm: true,
            buildargs: (!request.args.is_empty()).then(|| request.args.into_iter().collect()),
            target: request.target.unwrap_or_default(),
            cachefrom: (!request.cache_from.is_empty()).then_some(request.cache_from),
            labels: Some(request.labels),
            nocache: request.no_cache,
            platform: request.platform.unwrap_or_default(),
            ..Default::default()
        };
        let mut stream = self.docker.build_image(options, None, Some(bollard::body_full(request.context.into())));
        while let Some(item) = stream.next().await {
            let info = item.map_err(|e| StreamFailed { reason: super::docker::short_reason(&e) })?;
            if let Some(reason) = info.error_detail.and_then(|d| d.message) {
                return Err(StreamFailed { reason });
            }
            if let Some(text) = info.stream {
                output(&text);
            }
        }
        Ok(())
    }

    /// Gives the image `image` (a name or an id) the name `repo:tag` too.
    pub async fn tag_image(&self, image: &str, repo: &str, tag: &str) -> Result<(), EngineError> {
        let options = TagImageOptions { repo: Some(repo.to_string()), tag: Some(tag.to_string()) };
        super::logged("tag_image", image, self.docker.tag_image(image, Some(options)))
            .await
            .map_err(|e| self.map(format!("tag image {image} as {repo}:{tag}"), format!("image {image}"), e))
    }

    /// Pushes `repo:tag` to its registry, calling `progress` with each
    /// report; returns when the engine says the push is over.
    pub async fn push_image(
        &self,
        repo: &str,
        tag: &str,
        auth: Option<PushAuth>,
        progress: impl FnMut(PullProgress<'_>),
    ) -> Result<(), StreamFailed> {
        let name = format!("{repo}:{tag}");
        super::logged_long("push_image", &name, self.push(repo, tag, auth, progress)).await
    }

    async fn push(
        &self,
        repo: &str,
        tag: &str,
        auth: Option<PushAuth>,
        mut progress: impl FnMut(PullProgress<'_>),
    ) -> Result<(), StreamFailed> {
        let options = PushImageOptions { tag: Some(tag.to_string()), platform: None };
        // The engine wants the header even for an anonymous push (an empty
        // object then), which bollard sends for `None` too.
        let credentials = auth.map(|a| bollard::auth::DockerCredentials {
            username: a.username,
            password: a.password,
            identitytoken: a.identity_token,
            serveraddress: a.server,
            ..Default::default()
        });
        let mut stream = self.docker.push_image(repo, Some(options), credentials);
        while let Some(item) = stream.next().await {
            let info = item.map_err(|e| StreamFailed { reason: super::docker::short_reason(&e) })?;
            if let Some(reason) = info.error_detail.and_then(|d| d.message) {
                return Err(StreamFailed { reason });
            }
            if let Some(status) = info.status.as_deref() {
                let detail = info.progress_detail.as_ref();
                let (current, total) = (detail.and_then(|d| d.current), detail.and_then(|d| d.total));
                progress(PullProgress { layer: "", status, current, total });
            }
        }
        Ok(())
    }

    /// Removes an image that no container uses, keeping its untagged
    /// parents' pruning to the engine (as `docker rmi` does).
    pub async fn remove_image(&self, id: &str) -> Result<(), EngineError> {
        let options = RemoveImageOptions { force: false, noprune: false, platforms: None };
        super::logged("remove_image", id, self.docker.remove_image(id, Some(options), None))
            .await
            .map(|_| ())
            .map_err(|e| self.map(format!("remove image {id}"), format!("image {id}"), e))
    }

    /// Commits container `id` as `repo:tag` with `config` as the image's
    /// config; returns the image's id. Docker fills what `config` leaves
    /// empty (user, env, entrypoint) from the container's config.
    pub async fn commit(
        &self,
        id: &str,
        repo: &str,
        tag: &str,
        config: bollard::models::ContainerConfig,
    ) -> Result<String, EngineError> {
        let options = CommitContainerOptions {
            container: Some(id.to_string()),
            repo: Some(repo.to_string()),
            tag: Some(tag.to_string()),
            ..Default::default()
        };
        // A commit walks the container's whole file system on a naive-diff
        // storage driver (fuse-overlayfs, vfs): seconds, so a long call.
        super::logged_long("commit", id, self.docker.commit_container(options, config))
            .await
            .map(|made| made.id)
            .map_err(|e| self.map(format!("commit {id} as {repo}:{tag}"), format!("container {id}"), e))
    }

    /// A container's logs from its start, both streams; with `follow`, on
    /// until the container ends.
    pub fn logs(&self, id: &str, follow: bool) -> impl Stream<Item = Result<LogChunk, EngineError>> + '_ {
        let options = LogsOptions { follow, stdout: true, stderr: true, tail: "all".into(), ..Default::default() };
        let id = id.to_string();
        let name = id.clone();
        let chunks = self.docker.logs(&id, Some(options)).map(move |item| match item {
            Ok(bollard::container::LogOutput::StdErr { message }) => Ok(LogChunk::Stderr(message)),
            Ok(other) => Ok(LogChunk::Stdout(other.into_bytes())),
            Err(e) => Err(self.map(format!("read the logs of {id}"), format!("container {id}"), e)),
        });
        super::logged_stream("logs", name, chunks)
    }
}
