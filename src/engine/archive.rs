//! The archive endpoint as streams (what `docker cp` does both ways): a
//! workspace is too large to hold in memory as one tar, so the upload is fed
//! by a stream and the download is read as one.

use super::{DockerEngine, EngineError};
use bollard::query_parameters::{DownloadFromContainerOptions, UploadToContainerOptions};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};

impl DockerEngine {
    /// Unpacks the tar that `body` yields into the container at `path`; works
    /// on a created container that never started, and into its volumes.
    pub async fn upload_stream(
        &self,
        id: &str,
        path: &str,
        body: impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
    ) -> Result<(), EngineError> {
        let options = UploadToContainerOptions { path: path.to_string(), ..Default::default() };
        // Long by nature: a workspace's tar.
        let upload = self.docker.upload_to_container(id, Some(options), bollard::body_try_stream(body));
        super::logged_long("upload_stream", &format!("{id}:{path}"), upload)
            .await
            .map_err(|e| self.map(format!("upload to {id}:{path}"), format!("{path} in {id}"), e))
    }

    /// `path` of the container as a tar stream; the first item is
    /// `NotFound` when the path is absent.
    pub fn download_stream(&self, id: &str, path: &str) -> impl Stream<Item = Result<Bytes, EngineError>> + '_ {
        let options = DownloadFromContainerOptions { path: path.into() };
        let (action, what) = (format!("download {id}:{path}"), format!("{path} in {id}"));
        let chunks = self
            .docker
            .download_from_container(id, Some(options))
            .map(move |chunk| chunk.map_err(|e| self.map(action.clone(), what.clone(), e)));
        super::logged_stream("download", format!("{id}:{path}"), chunks)
    }
}
