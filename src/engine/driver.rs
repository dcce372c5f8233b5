//! The engine seam (ADR 0012): everything room logic asks of a container
//! engine, as one trait. [`Engine`](super::Engine), what the rest of the
//! program holds, is an `Arc<dyn Driver>`; [`DockerEngine`] is the one
//! implementation. The data are the Engine API's own models (bollard's
//! `models`), which a second driver (a Kubernetes pod) would translate.
//!
//! Methods return boxed futures so the trait can be a trait object; the
//! ones that call back for progress (`pull_image`, `build_image`) return
//! futures that are not `Send`, as their callers hold `&mut` closures on
//! the command's one thread.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bollard::models::{
    ContainerConfig, ContainerCreateBody, ContainerInspectResponse, ContainerSummary, EventMessage, ImageInspect,
    NetworkInspect, SystemInfo, SystemVersion,
};
use bytes::Bytes;
use futures_util::stream::BoxStream;

use super::compose::ProjectObjects;
use super::docker::DockerEngine;
use super::{
    BuildRequest, EngineError, ExecSpec, ExecStream, HostInfo, LogChunk, PullProgress, PushAuth, StreamFailed,
};

/// One engine call in flight.
pub type Call<'a, T> = Pin<Box<dyn Future<Output = Result<T, EngineError>> + Send + 'a>>;

/// An engine call that reports progress through a caller's closure.
pub type Progress<'a> = Pin<Box<dyn Future<Output = Result<(), StreamFailed>> + 'a>>;

/// What room logic asks of an engine. Absence is `Ok(None)` or `Ok(false)`
/// where the call says so, and only when the engine said it: any other
/// failure is an error.
pub trait Driver: Send + Sync {
    /// Where the engine is, for messages (`unix:///var/run/docker.sock`,
    /// `ssh://me@box`).
    fn host(&self) -> &str;

    // Containers.
    fn inspect_container<'a>(&'a self, name: &'a str) -> Call<'a, Option<ContainerInspectResponse>>;
    /// Creates a container for `platform` (`linux/arm64`), or the engine's
    /// own with `None`; returns its id.
    fn create_container_on<'a>(
        &'a self,
        name: &'a str,
        platform: Option<&'a str>,
        body: ContainerCreateBody,
    ) -> Call<'a, String>;
    /// [`create_container_on`](Self::create_container_on) the engine's own
    /// platform.
    fn create_container<'a>(&'a self, name: &'a str, body: ContainerCreateBody) -> Call<'a, String> {
        self.create_container_on(name, None, body)
    }
    fn start<'a>(&'a self, id: &'a str) -> Call<'a, ()>;
    /// Stops within `grace`; a stopped container is not an error.
    fn stop<'a>(&'a self, id: &'a str, grace: Duration) -> Call<'a, ()>;
    fn restart<'a>(&'a self, id: &'a str) -> Call<'a, ()>;
    /// Returns once the container no longer runs the start it had at
    /// `started_at`.
    fn wait_exit<'a>(&'a self, id: &'a str, started_at: &'a str) -> Call<'a, ()>;
    /// Whether the start at `started_at` has ended (died, restarted, gone).
    fn container_died<'a>(&'a self, id: &'a str, started_at: &'a str) -> Call<'a, bool>;
    /// Its starts, deaths, restarts and removal, replayed from the start at
    /// `since` on, until the engine ends the stream (an engine restart).
    fn container_events<'a>(&'a self, id: &'a str, since: &'a str) -> BoxStream<'a, Result<EventMessage, EngineError>>;
    /// Its `oom` events and its execs' `exec_create` and `exec_die` from the
    /// start at `since` until now, as far back as the engine keeps them.
    fn memory_events<'a>(&'a self, id: &'a str, since: &'a str) -> Call<'a, Vec<EventMessage>>;
    /// The starts of every container carrying all of `labels` (as `list`
    /// takes them), replayed from the engine time `since` (as the engine
    /// gives it: `docker info`'s `SystemTime`) on, until the engine ends the
    /// stream.
    fn labelled_starts<'a>(
        &'a self,
        labels: &'a [String],
        since: &'a str,
    ) -> BoxStream<'a, Result<EventMessage, EngineError>>;
    /// Removes it, forcibly, with its anonymous volumes if asked; an absent
    /// container is not an error.
    fn remove<'a>(&'a self, id: &'a str, volumes: bool) -> Call<'a, ()>;
    /// Containers, running or not, carrying every one of `labels`.
    fn list<'a>(&'a self, labels: &'a [String]) -> Call<'a, Vec<ContainerSummary>>;
    /// A creating throwaway container run to its end and removed: its exit
    /// code and the end of its output.
    fn run_job<'a>(&'a self, name: &'a str, body: ContainerCreateBody) -> Call<'a, (i64, String)>;

    // Files in a container (what `docker cp` does).
    /// Unpacks a tar into the container at `path`, started or not.
    fn upload<'a>(&'a self, id: &'a str, path: &'a str, tar: Vec<u8>) -> Call<'a, ()>;
    /// [`upload`](Self::upload) fed by a stream, for a tar too large to hold.
    fn upload_stream<'a>(
        &'a self,
        id: &'a str,
        path: &'a str,
        body: BoxStream<'static, Result<Bytes, std::io::Error>>,
    ) -> Call<'a, ()>;
    /// `path` as a tar stream; the first item is `NotFound` when it is absent.
    fn download_stream<'a>(&'a self, id: &'a str, path: &'a str) -> BoxStream<'a, Result<Bytes, EngineError>>;
    /// One file of a container; `None` when it is absent.
    fn read_file<'a>(&'a self, id: &'a str, path: &'a str) -> Call<'a, Option<Vec<u8>>>;

    // Processes in a container.
    /// Starts a process with its stdio attached.
    fn exec<'a>(&'a self, container: &'a str, spec: &'a ExecSpec) -> Call<'a, ExecStream>;
    /// Its exit code, once it has one.
    fn exec_exit_code<'a>(&'a self, exec_id: &'a str) -> Call<'a, Option<i64>>;
    fn resize_exec<'a>(&'a self, exec_id: &'a str, rows: u16, cols: u16) -> Call<'a, ()>;
    /// Its main process's output from its start; with `follow`, until it ends.
    fn logs<'a>(&'a self, id: &'a str, follow: bool) -> BoxStream<'a, Result<LogChunk, EngineError>>;

    // Volumes and networks.
    fn volume_exists<'a>(&'a self, name: &'a str) -> Call<'a, bool>;
    /// Its labels; `None` when it does not exist.
    fn volume_labels<'a>(&'a self, name: &'a str) -> Call<'a, Option<HashMap<String, String>>>;
    fn create_volume<'a>(&'a self, name: &'a str, labels: HashMap<String, String>) -> Call<'a, ()>;
    /// An absent volume is not an error.
    fn remove_volume<'a>(&'a self, name: &'a str) -> Call<'a, ()>;
    /// The containers, volumes and networks of a compose project.
    fn project_objects<'a>(&'a self, project: &'a str) -> Call<'a, ProjectObjects>;
    fn remove_network<'a>(&'a self, name: &'a str) -> Call<'a, ()>;
    /// A network as the engine keeps it (what a create's options became);
    /// `None` when it does not exist.
    fn inspect_network<'a>(&'a self, name: &'a str) -> Call<'a, Option<NetworkInspect>>;

    // Images.
    fn inspect_image<'a>(&'a self, image: &'a str) -> Call<'a, Option<ImageInspect>>;
    /// `platform` (`linux/arm64`) picks one of a multi-platform image's;
    /// `None` is the engine's own.
    fn pull_image<'a>(
        &'a self,
        image: &'a str,
        platform: Option<&'a str>,
        progress: &'a mut dyn FnMut(PullProgress<'_>),
    ) -> Progress<'a>;
    fn build_image<'a>(&'a self, request: BuildRequest, output: &'a mut dyn FnMut(&str)) -> Progress<'a>;
    /// Names `image` `repo:tag` too.
    fn tag_image<'a>(&'a self, image: &'a str, repo: &'a str, tag: &'a str) -> Call<'a, ()>;
    /// Pushes `repo:tag` to the registry its name holds.
    fn push_image<'a>(
        &'a self,
        repo: &'a str,
        tag: &'a str,
        auth: Option<PushAuth>,
        progress: &'a mut dyn FnMut(PullProgress<'_>),
    ) -> Progress<'a>;
    /// Imports a root filesystem tar as `repo:tag`, with Dockerfile
    /// `changes` (`LABEL k=v`); returns the image's id (empty when the
    /// engine gave none).
    fn import_rootfs<'a>(&'a self, tar: Vec<u8>, repo: &'a str, tag: &'a str, changes: Vec<String>)
        -> Call<'a, String>;
    fn remove_image<'a>(&'a self, id: &'a str) -> Call<'a, ()>;
    /// Commits container `id` as `repo:tag` with `config` as the image's
    /// config (what it leaves empty, Docker takes from the container's;
    /// Podman's API ignores it and takes the container's whole); returns
    /// the image's id.
    fn commit<'a>(&'a self, id: &'a str, repo: &'a str, tag: &'a str, config: ContainerConfig) -> Call<'a, String>;

    // The engine itself.
    /// `docker info` and `docker version`: what the engine enforces.
    fn describe(&self) -> Call<'_, (SystemInfo, SystemVersion)>;
    /// Its host's size.
    fn host_info(&self) -> Call<'_, HostInfo>;
    /// Its own platform, `(os, arch)` as Go names them.
    fn platform(&self) -> Call<'_, (String, String)>;
}

impl Driver for DockerEngine {
    fn host(&self) -> &str {
        DockerEngine::host(self)
    }

    fn inspect_container<'a>(&'a self, name: &'a str) -> Call<'a, Option<ContainerInspectResponse>> {
        Box::pin(DockerEngine::inspect_container(self, name))
    }

    fn create_container_on<'a>(
        &'a self,
        name: &'a str,
        platform: Option<&'a str>,
        body: ContainerCreateBody,
    ) -> Call<'a, String> {
        Box::pin(DockerEngine::create_container_on(self, name, platform, body))
    }

    fn start<'a>(&'a self, id: &'a str) -> Call<'a, ()> {
        Box::pin(DockerEngine::start(self, id))
    }

    fn stop<'a>(&'a self, id: &'a str, grace: Duration) -> Call<'a, ()> {
        Box::pin(DockerEngine::stop(self, id, grace))
    }

    fn restart<'a>(&'a self, id: &'a str) -> Call<'a, ()> {
        Box::pin(DockerEngine::restart(self, id))
    }

    fn wait_exit<'a>(&'a self, id: &'a str, started_at: &'a str) -> Call<'a, ()> {
        Box::pin(DockerEngine::wait_exit(self, id, started_at))
    }

    fn container_died<'a>(&'a self, id: &'a str, started_at: &'a str) -> Call<'a, bool> {
        Box::pin(DockerEngine::container_died(self, id, started_at))
    }

    fn container_events<'a>(&'a self, id: &'a str, since: &'a str) -> BoxStream<'a, Result<EventMessage, EngineError>> {
        Box::pin(DockerEngine::container_events(self, id, since))
    }

    fn memory_events<'a>(&'a self, id: &'a str, since: &'a str) -> Call<'a, Vec<EventMessage>> {
        Box::pin(DockerEngine::memory_events(self, id, since))
    }

    fn labelled_starts<'a>(
        &'a self,
        labels: &'a [String],
        since: &'a str,
    ) -> BoxStream<'a, Result<EventMessage, EngineError>> {
        Box::pin(DockerEngine::labelled_starts(self, labels, since))
    }

    fn remove<'a>(&'a self, id: &'a str, volumes: bool) -> Call<'a, ()> {
        Box::pin(DockerEngine::remove(self, id, volumes))
    }

    fn list<'a>(&'a self, labels: &'a [String]) -> Call<'a, Vec<ContainerSummary>> {
        Box::pin(DockerEngine::list(self, labels))
    }

    fn run_job<'a>(&'a self, name: &'a str, body: ContainerCreateBody) -> Call<'a, (i64, String)> {
        Box::pin(DockerEngine::run_job(self, name, body))
    }

    fn upload<'a>(&'a self, id: &'a str, path: &'a str, tar: Vec<u8>) -> Call<'a, ()> {
        Box::pin(DockerEngine::upload(self, id, path, tar))
    }

    fn upload_stream<'a>(
        &'a self,
        id: &'a str,
        path: &'a str,
        body: BoxStream<'static, Result<Bytes, std::io::Error>>,
    ) -> Call<'a, ()> {
        Box::pin(DockerEngine::upload_stream(self, id, path, body))
    }

    fn download_stream<'a>(&'a self, id: &'a str, path: &'a str) -> BoxStream<'a, Result<Bytes, EngineError>> {
        Box::pin(DockerEngine::download_stream(self, id, path))
    }

    fn read_file<'a>(&'a self, id: &'a str, path: &'a str) -> Call<'a, Option<Vec<u8>>> {
        Box::pin(DockerEngine::read_file(self, id, path))
    }

    fn exec<'a>(&'a self, container: &'a str, spec: &'a ExecSpec) -> Call<'a, ExecStream> {
        Box::pin(DockerEngine::exec(self, container, spec))
    }

    fn exec_exit_code<'a>(&'a self, exec_id: &'a str) -> Call<'a, Option<i64>> {
        Box::pin(DockerEngine::exec_exit_code(self, exec_id))
    }

    fn resize_exec<'a>(&'a self, exec_id: &'a str, rows: u16, cols: u16) -> Call<'a, ()> {
        Box::pin(DockerEngine::resize_exec(self, exec_id, rows, cols))
    }

    fn logs<'a>(&'a self, id: &'a str, follow: bool) -> BoxStream<'a, Result<LogChunk, EngineError>> {
        Box::pin(DockerEngine::logs(self, id, follow))
    }

    fn volume_exists<'a>(&'a self, name: &'a str) -> Call<'a, bool> {
        Box::pin(DockerEngine::volume_exists(self, name))
    }

    fn volume_labels<'a>(&'a self, name: &'a str) -> Call<'a, Option<HashMap<String, String>>> {
        Box::pin(DockerEngine::volume_labels(self, name))
    }

    fn create_volume<'a>(&'a self, name: &'a str, labels: HashMap<String, String>) -> Call<'a, ()> {
        Box::pin(DockerEngine::create_volume(self, name, labels))
    }

    fn remove_volume<'a>(&'a self, name: &'a str) -> Call<'a, ()> {
        Box::pin(DockerEngine::remove_volume(self, name))
    }

    fn project_objects<'a>(&'a self, project: &'a str) -> Call<'a, ProjectObjects> {
        Box::pin(DockerEngine::project_objects(self, project))
    }

    fn remove_network<'a>(&'a self, name: &'a str) -> Call<'a, ()> {
        Box::pin(DockerEngine::remove_network(self, name))
    }

    fn inspect_network<'a>(&'a self, name: &'a str) -> Call<'a, Option<NetworkInspect>> {
        Box::pin(DockerEngine::inspect_network(self, name))
    }

    fn inspect_image<'a>(&'a self, image: &'a str) -> Call<'a, Option<ImageInspect>> {
        Box::pin(DockerEngine::inspect_image(self, image))
    }

    fn pull_image<'a>(
        &'a self,
        image: &'a str,
        platform: Option<&'a str>,
        progress: &'a mut dyn FnMut(PullProgress<'_>),
    ) -> Progress<'a> {
        Box::pin(DockerEngine::pull_image(self, image, platform, progress))
    }

    fn tag_image<'a>(&'a self, image: &'a str, repo: &'a str, tag: &'a str) -> Call<'a, ()> {
        Box::pin(DockerEngine::tag_image(self, image, repo, tag))
    }

    fn push_image<'a>(
        &'a self,
        repo: &'a str,
        tag: &'a str,
        auth: Option<PushAuth>,
        progress: &'a mut dyn FnMut(PullProgress<'_>),
    ) -> Progress<'a> {
        Box::pin(DockerEngine::push_image(self, repo, tag, auth, progress))
    }

    fn build_image<'a>(&'a self, request: BuildRequest, output: &'a mut dyn FnMut(&str)) -> Progress<'a> {
        Box::pin(DockerEngine::build_image(self, request, output))
    }

    fn import_rootfs<'a>(
        &'a self,
        tar: Vec<u8>,
        repo: &'a str,
        tag: &'a str,
        changes: Vec<String>,
    ) -> Call<'a, String> {
        Box::pin(DockerEngine::import_rootfs(self, tar, repo, tag, changes))
    }

    fn remove_image<'a>(&'a self, id: &'a str) -> Call<'a, ()> {
        Box::pin(DockerEngine::remove_image(self, id))
    }

    fn commit<'a>(&'a self, id: &'a str, repo: &'a str, tag: &'a str, config: ContainerConfig) -> Call<'a, String> {
        Box::pin(DockerEngine::commit(self, id, repo, tag, config))
    }

    fn describe(&self) -> Call<'_, (SystemInfo, SystemVersion)> {
        Box::pin(DockerEngine::describe(self))
    }

    fn host_info(&self) -> Call<'_, HostInfo> {
        Box::pin(DockerEngine::host_info(self))
    }

    fn platform(&self) -> Call<'_, (String, String)> {
        Box::pin(DockerEngine::platform(self))
    }
}
