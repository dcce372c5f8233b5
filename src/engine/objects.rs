//! Engine calls for things that are not rooms: volumes, a locally imported
//! image, throwaway containers. Same error mapping as the rest of the edge.

use super::{DockerEngine, EngineError};
use bollard::errors::Error as BollardError;
use bollard::models::{ContainerCreateBody, VolumeCreateRequest};
use bollard::query_parameters::{CreateImageOptions, DownloadFromContainerOptions, WaitContainerOptions};
use futures_util::StreamExt;
use std::collections::HashMap;

/// What the engine says of its host, for `hostRequirements`.
#[derive(Debug, Clone, Default)]
pub struct HostInfo {
    pub cpus: u64,
    /// Bytes.
    pub memory: u64,
    /// The engine's data folder (`/var/lib/docker`), on the engine's host.
    pub root_dir: Option<String>,
    /// An nvidia runtime is installed (how the reference tells a GPU).
    pub nvidia: bool,
}

impl DockerEngine {
    /// The engine's `info`, reduced to its host's size.
    pub async fn host_info(&self) -> Result<HostInfo, EngineError> {
        let info = super::logged("info", "engine", self.docker.info())
            .await
            .map_err(|e| self.map("read the engine's info", "engine info", e))?;
        Ok(HostInfo {
            cpus: info.ncpu.unwrap_or(0).max(0) as u64,
            memory: info.mem_total.unwrap_or(0).max(0) as u64,
            root_dir: info.docker_root_dir,
            nvidia: info.runtimes.is_some_and(|r| r.contains_key("nvidia")),
        })
    }

    /// The engine's own platform, `(os, arch)` as Go names them (`linux`,
    /// `amd64`): what an image that reports none runs as.
    pub async fn platform(&self) -> Result<(String, String), EngineError> {
        let v = super::logged("version", "engine", self.docker.version())
            .await
            .map_err(|e| self.map("ask the engine's version", "engine version", e))?;
        Ok((v.os.unwrap_or_default(), v.arch.unwrap_or_default()))
    }

    /// The labels of a volume; `None` only when the engine says it does not exist.
    pub async fn volume_labels(&self, name: &str) -> Result<Option<HashMap<String, String>>, EngineError> {
        match super::logged("inspect_volume", name, self.docker.inspect_volume(name)).await {
            Ok(v) => Ok(Some(v.labels)),
            Err(e) => match self.map(format!("inspect volume {name}"), format!("volume {name}"), e) {
                EngineError::NotFound { .. } => Ok(None),
                other => Err(other),
            },
        }
    }

    pub async fn create_volume(&self, name: &str, labels: HashMap<String, String>) -> Result<(), EngineError> {
        let request = VolumeCreateRequest { name: Some(name.into()), labels: Some(labels), ..Default::default() };
        match super::logged("create_volume", name, self.docker.create_volume(request)).await {
            Ok(_) => Ok(()),
            // Docker's create of a volume that exists answers with it; Podman's
            // refuses (500, "volume already exists"), which two rooms of a new
            // peer group racing to make its socket volume meet. Read as Docker's.
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 500, message })
                if message.contains("volume already exists") =>
            {
                Ok(())
            }
            Err(e) => Err(self.map(format!("create volume {name}"), format!("volume {name}"), e)),
        }
    }

    /// Imports a root filesystem tar as `repo:tag` (the Engine API's image
    /// import, what `docker import - repo:tag` does), with Dockerfile
    /// `changes` such as `LABEL k=v`. Nothing is pulled. Returns the new
    /// image's id as the engine gave it (empty if it gave none).
    ///
    /// The name goes in `repo` whole, tag included, as the docker CLI sends
    /// it: Podman's Docker-compatible API ignores a separate `tag` and names
    /// the image `repo:latest`. The changes go one `changes=` each
    /// ([`one_change_each`]).
    pub async fn import_rootfs(
        &self,
        tar: Vec<u8>,
        repo: &str,
        tag: &str,
        changes: Vec<String>,
    ) -> Result<String, EngineError> {
        let options = import_options(repo, tag, changes);
        let stream = self.docker.create_image(Some(options), Some(bollard::body_full(tar.into())), None);
        let mut stream = std::pin::pin!(super::logged_stream("import_image", format!("{repo}:{tag}"), stream));
        let mut id = String::new();
        while let Some(item) = stream.next().await {
            let item =
                item.map_err(|e| self.map(format!("import image {repo}:{tag}"), format!("image {repo}:{tag}"), e))?;
            // Docker's last report is `{"status":"sha256:…"}`; Podman's
            // carries the same in `id` too.
            if let Some(status) = item.status.filter(|s| s.starts_with("sha256:")) {
                id = status;
            }
        }
        Ok(id)
    }

    /// Creates, starts and waits for a throwaway container, then removes it.
    /// Returns its exit code and the end of its output (for an error line).
    pub async fn run_job(&self, name: &str, body: ContainerCreateBody) -> Result<(i64, String), EngineError> {
        let id = self.create_container_on(name, None, body).await?;
        let result = async {
            self.start(&id).await?;
            let wait = self.docker.wait_container(&id, None::<WaitContainerOptions>);
            let mut wait = std::pin::pin!(super::logged_stream("wait_container", name.to_string(), wait));
            let code = match wait.next().await {
                Some(Ok(r)) => r.status_code,
                Some(Err(BollardError::DockerContainerWaitError { code, .. })) => code,
                Some(Err(e)) => return Err(self.map(format!("wait for {name}"), format!("container {name}"), e)),
                None => -1,
            };
            let options = bollard::query_parameters::LogsOptions {
                stdout: true,
                stderr: true,
                tail: "5".into(),
                ..Default::default()
            };
            let mut logs =
                std::pin::pin!(super::logged_stream("logs", name.to_string(), self.docker.logs(&id, Some(options))));
            let mut text = String::new();
            while let Some(Ok(chunk)) = logs.next().await {
                text.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
            }
            Ok((code, text.trim().to_string()))
        }
        .await;
        let removed = self.remove(&id, true).await;
        let out = result?;
        removed?;
        Ok(out)
    }

    /// One file of a created (never started) container, read through the
    /// archive endpoint (what `docker cp` does); `None` when it is absent.
    pub async fn read_file(&self, id: &str, path: &str) -> Result<Option<Vec<u8>>, EngineError> {
        let options = DownloadFromContainerOptions { path: path.into() };
        let stream = self.docker.download_from_container(id, Some(options));
        let mut stream = std::pin::pin!(super::logged_stream("download", format!("{id}:{path}"), stream));
        let mut tar_bytes = Vec::new();
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(b) => tar_bytes.extend_from_slice(&b),
                Err(e) => {
                    return match self.map(format!("read {id}:{path}"), format!("{path} in {id}"), e) {
                        EngineError::NotFound { .. } => Ok(None),
                        other => Err(other),
                    }
                }
            }
        }
        let mut archive = tar::Archive::new(&tar_bytes[..]);
        let Ok(mut entries) = archive.entries() else { return Ok(None) };
        match entries.next() {
            Some(Ok(mut entry)) => {
                let mut out = Vec::new();
                std::io::Read::read_to_end(&mut entry, &mut out).ok();
                Ok(Some(out))
            }
            _ => Ok(None),
        }
    }
}

/// An import's parameters: the name whole in `repo`, no `tag`.
fn import_options(repo: &str, tag: &str, changes: Vec<String>) -> CreateImageOptions {
    CreateImageOptions {
        from_src: Some("-".into()),
        repo: Some(format!("{repo}:{tag}")),
        changes,
        ..Default::default()
    }
}

/// The path of the Engine API's image create (a pull or an import), after
/// its version prefix.
const IMAGE_CREATE_PATH: &str = "/images/create";

/// An import's query with one `changes=` pair per Dockerfile instruction.
/// bollard sends them as one value joined by newlines; Docker reads that
/// value as a Dockerfile of several lines, but Podman (4.3, its
/// Docker-compatible API) takes it as one instruction, so `LABEL a=1` and
/// `LABEL b=2` became one label `a` whose value held the second line. One
/// pair each is what the docker CLI sends, and what both engines read
/// alike. Every other pair is kept as it was, in its place.
pub(super) fn one_change_each(query: &str) -> String {
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "changes" => {
                for change in value.lines().filter(|c| !c.trim().is_empty()) {
                    out.append_pair("changes", change);
                }
            }
            _ => {
                out.append_pair(&key, &value);
            }
        }
    }
    out.finish()
}

/// The client's request modifier: [`one_change_each`] on an image import's
/// query, every other request untouched. bollard builds every query itself
/// and offers no other place to change one.
pub(super) fn split_import_changes(mut request: bollard::BollardRequest) -> bollard::BollardRequest {
    let uri = request.uri();
    let is_import = request.method() == hyper::Method::POST
        && uri.path().ends_with(IMAGE_CREATE_PATH)
        && uri.query().is_some_and(|q| q.contains("changes="));
    if !is_import {
        return request;
    }
    let query = one_change_each(uri.query().unwrap_or_default());
    let mut parts = uri.clone().into_parts();
    let path_and_query = format!("{}?{query}", uri.path());
    // A query we encoded ourselves always parses; were it not to, the
    // request goes as bollard built it.
    if let Ok(pq) = hyper::http::uri::PathAndQuery::try_from(path_and_query) {
        parts.path_and_query = Some(pq);
        if let Ok(new) = hyper::Uri::from_parts(parts) {
            *request.uri_mut() = new;
        }
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The import's query as bollard writes it (`serde_urlencoded` over
    /// the options, as its request builder does), then as the request
    /// modifier sends it: its pairs in order.
    fn sent_pairs(options: &CreateImageOptions) -> Vec<(String, String)> {
        let built = serde_urlencoded::to_string(options).unwrap();
        let uri = format!("http://localhost/v1.41/images/create?{built}");
        let request = hyper::Request::post(uri).body(bollard::body_full(bytes::Bytes::new())).unwrap();
        let sent = split_import_changes(request);
        let query = sent.uri().query().unwrap_or_default().to_string();
        form_urlencoded::parse(query.as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
    }

    fn values<'a>(pairs: &'a [(String, String)], key: &str) -> Vec<&'a str> {
        pairs.iter().filter(|(k, _)| k == key).map(|(_, v)| v.as_str()).collect()
    }

    #[test]
    fn podman_read_newline_joined_import_changes_as_one_label_so_each_goes_in_a_changes_pair_of_its_own() {
        let changes = vec!["LABEL workroom.daemon=abc".to_string(), "LABEL workroom.schema=1".to_string()];
        let pairs = sent_pairs(&import_options("workroom-anchor", "abc", changes));
        assert_eq!(values(&pairs, "changes"), ["LABEL workroom.daemon=abc", "LABEL workroom.schema=1"], "{pairs:?}");
        assert_eq!(values(&pairs, "fromSrc"), ["-"], "{pairs:?}");
    }

    #[test]
    fn podman_ignored_the_tag_of_an_import_so_the_name_goes_whole_in_repo_and_no_tag_is_sent() {
        let pairs = sent_pairs(&import_options("workroom-anchor", "abc", vec!["LABEL a=1".into()]));
        assert_eq!(values(&pairs, "repo"), ["workroom-anchor:abc"], "{pairs:?}");
        assert_eq!(values(&pairs, "tag"), Vec::<&str>::new(), "{pairs:?}");
    }

    #[test]
    fn requests_other_than_an_import_with_changes_go_as_bollard_built_them() {
        for uri in [
            // A pull: same path, no changes.
            "http://localhost/v1.41/images/create?fromImage=busybox&tag=1",
            "http://localhost/v1.41/containers/create?name=a%0Ab",
        ] {
            let request = hyper::Request::post(uri).body(bollard::body_full(bytes::Bytes::new())).unwrap();
            assert_eq!(split_import_changes(request).uri().to_string(), uri);
        }
        let get = hyper::Request::get("http://localhost/v1.41/images/create?changes=a%0Ab")
            .body(bollard::body_full(bytes::Bytes::new()))
            .unwrap();
        assert_eq!(split_import_changes(get).uri().query(), Some("changes=a%0Ab"));
    }

    #[test]
    fn a_change_whose_value_needs_escaping_comes_back_as_it_was_written() {
        let change = "LABEL workroom.scope=a b&c=d+e%f";
        let pairs = sent_pairs(&import_options("r", "t", vec![change.to_string()]));
        assert_eq!(values(&pairs, "changes"), [change]);
    }
}
