//! The network edge: OCI manifests and layers through `oci-client`, direct
//! tarballs through `reqwest`, credentials through `docker_credential`.
//! Anonymous first, as the reference: only a registry that refuses us is
//! asked again with the docker config's credentials (`auths`, `credsStore`,
//! `credHelpers`) or, for ghcr.io, `GITHUB_TOKEN`. Plain HTTP is spoken to
//! `localhost` only.

use super::reference::OciRef;
use super::FeatureError;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.devcontainers";
pub const LAYER_MEDIA_TYPE: &str = "application/vnd.devcontainers.layer.v1+tar";

/// A registry or tarball host that does not answer the TCP connect in this
/// long is treated as unreachable, and the cache is used if it can be.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A stalled transfer fails instead of hanging `up`; feature layers are
/// kilobytes to a few megabytes.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a fetch failed, as the resolver decides on it.
#[derive(Debug)]
pub enum FetchError {
    /// No connection: the cache may stand in.
    Offline(String),
    Denied,
    NotFound,
    Other(String),
}

impl FetchError {
    pub fn into_feature_error(self, reference: &str, registry: &str) -> FeatureError {
        match self {
            FetchError::Offline(reason) => FeatureError::Offline { reference: reference.into(), reason },
            FetchError::Denied => FeatureError::Unauthorized {
                reference: reference.into(),
                registry: registry.into(),
                hint: if registry == "ghcr.io" { " (set GITHUB_TOKEN, or log in)" } else { "" },
            },
            FetchError::NotFound => FeatureError::NotFound { reference: reference.into() },
            FetchError::Other(reason) => FeatureError::Registry { reference: reference.into(), reason },
        }
    }
}

fn install_crypto() {
    // reqwest is built without a default provider (no aws-lc); ring is ours.
    // A second install fails harmlessly.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn classify_oci(e: OciDistributionError) -> FetchError {
    match e {
        OciDistributionError::UnauthorizedError { .. } | OciDistributionError::AuthenticationFailure(_) => {
            FetchError::Denied
        }
        OciDistributionError::RegistryError { envelope, url } => {
            let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
            if codes.iter().any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied)) {
                FetchError::Denied
            } else if codes.iter().any(|c| {
                matches!(
                    c,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::NotFound
                        | OciErrorCode::BlobUnknown
                )
            }) {
                FetchError::NotFound
            } else {
                FetchError::Other(format!("{url}: {envelope}"))
            }
        }
        OciDistributionError::ServerError { code: 401 | 403, .. } => FetchError::Denied,
        OciDistributionError::ServerError { code: 404, .. } => FetchError::NotFound,
        OciDistributionError::RequestError(e) => classify_reqwest(&e),
        other => FetchError::Other(chain(&other)),
    }
}

fn classify_reqwest(e: &reqwest::Error) -> FetchError {
    if e.is_connect() || e.is_timeout() {
        FetchError::Offline(chain(e))
    } else {
        FetchError::Other(chain(e))
    }
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

/// Clients per registry, each with the auth that worked for it.
#[derive(Default)]
pub struct Fetcher {
    clients: Mutex<HashMap<String, (Client, RegistryAuth)>>,
}

impl Fetcher {
    fn client(r: &OciRef) -> Client {
        install_crypto();
        let protocol =
            if r.plain_http() { ClientProtocol::HttpsExcept(vec![r.registry.clone()]) } else { ClientProtocol::Https };
        Client::new(ClientConfig {
            protocol,
            connect_timeout: Some(CONNECT_TIMEOUT),
            read_timeout: Some(READ_TIMEOUT),
            ..Default::default()
        })
    }

    fn reference(r: &OciRef, digest: Option<&str>) -> Reference {
        match digest.or(r.digest.as_deref()) {
            Some(d) => Reference::with_digest(r.registry.clone(), r.path(), d.to_string()),
            None => Reference::with_tag(r.registry.clone(), r.path(), r.version().to_string()),
        }
    }

    /// Runs `op` anonymously (or with what worked before), then once more
    /// with the user's credentials if the registry refused.
    async fn with_auth<T, F, Fut>(&self, r: &OciRef, op: F) -> Result<T, FetchError>
    where
        F: Fn(Client, RegistryAuth) -> Fut,
        Fut: std::future::Future<Output = Result<T, OciDistributionError>>,
    {
        let known = self.clients.lock().ok().and_then(|c| c.get(&r.registry).cloned());
        let (client, auth) = known.clone().unwrap_or_else(|| (Self::client(r), RegistryAuth::Anonymous));
        match op(client.clone(), auth.clone()).await.map_err(classify_oci) {
            Err(FetchError::Denied) if matches!(auth, RegistryAuth::Anonymous) => {
                let Some(auth) = credentials(&r.registry) else { return Err(FetchError::Denied) };
                let client = Self::client(r);
                let out = op(client.clone(), auth.clone()).await.map_err(classify_oci)?;
                if let Ok(mut c) = self.clients.lock() {
                    c.insert(r.registry.clone(), (client, auth));
                }
                Ok(out)
            }
            Ok(out) => {
                if known.is_none() {
                    if let Ok(mut c) = self.clients.lock() {
                        c.insert(r.registry.clone(), (client, auth));
                    }
                }
                Ok(out)
            }
            Err(e) => Err(e),
        }
    }

    /// The manifest's bytes and digest (checked by oci-client against a
    /// digest reference), by tag or by `digest`.
    pub async fn manifest(&self, r: &OciRef, digest: Option<&str>) -> Result<(Vec<u8>, String), FetchError> {
        let reference = Self::reference(r, digest);
        self.with_auth(r, |client, auth| {
            let reference = reference.clone();
            async move {
                let (bytes, digest) = client.pull_manifest_raw(&reference, &auth, &[MANIFEST_MEDIA_TYPE]).await?;
                Ok((bytes.to_vec(), digest))
            }
        })
        .await
    }

    /// A layer's bytes, checked against its digest by oci-client.
    pub async fn blob(&self, r: &OciRef, digest: &str, size: i64) -> Result<Vec<u8>, FetchError> {
        let reference = Self::reference(r, None);
        let descriptor = oci_client::manifest::OciDescriptor {
            media_type: LAYER_MEDIA_TYPE.into(),
            digest: digest.into(),
            size,
            ..Default::default()
        };
        self.with_auth(r, |client, auth| {
            let (reference, descriptor) = (reference.clone(), descriptor.clone());
            async move {
                // pull_blob uses the auth stored by an earlier call on this client.
                client.store_auth_if_needed(reference.resolve_registry(), &auth).await;
                let mut out = Vec::new();
                client.pull_blob(&reference, &descriptor, &mut out).await?;
                Ok(out)
            }
        })
        .await
    }

    /// A direct tarball. `https://localhost…` is fetched over plain HTTP, as
    /// the reference does; GitHub URLs carry `GITHUB_TOKEN` when it is set.
    pub async fn tarball(&self, url: &str) -> Result<Vec<u8>, FetchError> {
        install_crypto();
        let mut parsed = reqwest::Url::parse(url).map_err(|e| FetchError::Other(e.to_string()))?;
        if parsed.host_str() == Some("localhost") {
            let _ = parsed.set_scheme("http");
        }
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .user_agent("devcontainer")
            .build()
            .map_err(|e| FetchError::Other(chain(&e)))?;
        let mut request = client.get(parsed);
        let github = url.starts_with("https://github.com") || url.starts_with("https://api.github.com");
        if let (true, Ok(token)) = (github, std::env::var("GITHUB_TOKEN")) {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.map_err(|e| classify_reqwest(&e))?;
        match response.status().as_u16() {
            200..=299 => {}
            401 | 403 => return Err(FetchError::Denied),
            404 => return Err(FetchError::NotFound),
            code => return Err(FetchError::Other(format!("HTTP {code}"))),
        }
        let bytes = response.bytes().await.map_err(|e| classify_reqwest(&e))?;
        Ok(bytes.to_vec())
    }
}

/// The user's credentials for a registry: the docker config (a helper
/// named in `credHelpers` or `credsStore`, or `auths`), else `GITHUB_TOKEN`
/// for ghcr.io.
fn credentials(registry: &str) -> Option<RegistryAuth> {
    match docker_credential::get_credential(registry) {
        Ok(docker_credential::DockerCredential::UsernamePassword(user, password)) => {
            return Some(RegistryAuth::Basic(user, password));
        }
        // An identity token is an OAuth refresh token; the registry's token
        // service exchanges it, which oci-client does not: try it as a bearer.
        Ok(docker_credential::DockerCredential::IdentityToken(token)) => return Some(RegistryAuth::Bearer(token)),
        Err(_) => {}
    }
    match std::env::var("GITHUB_TOKEN") {
        Ok(token) if registry == "ghcr.io" && !token.is_empty() => Some(RegistryAuth::Basic("USERNAME".into(), token)),
        _ => None,
    }
}
