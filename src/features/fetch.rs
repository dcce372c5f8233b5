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
    /// The registry answered with a certificate we do not trust: the
    /// cache may stand in, as for `Offline`, but the cause is named.
    Untrusted(String),
    Denied,
    /// The registry refused the credentials from `origin` (the docker
    /// config file, a credential helper, or `GITHUB_TOKEN`).
    Rejected {
        origin: String,
    },
    NotFound,
    Other(String),
}

impl FetchError {
    pub fn into_feature_error(self, reference: &str, registry: &str) -> FeatureError {
        match self {
            FetchError::Offline(reason) => FeatureError::Offline { reference: reference.into(), reason },
            FetchError::Untrusted(reason) => FeatureError::Untrusted { reference: reference.into(), reason },
            FetchError::Rejected { origin } => {
                FeatureError::Rejected { reference: reference.into(), registry: registry.into(), origin }
            }
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

impl FetchError {
    /// Why the cache stands in, for the warning: the unreachable registry
    /// keeps the words of old; an untrusted one is named with the fix.
    pub fn unreachable(&self, reference: &str, registry: &str) -> String {
        match self {
            FetchError::Untrusted(reason) => {
                FeatureError::Untrusted { reference: reference.into(), reason: reason.clone() }.to_string()
            }
            _ if reference == registry => format!("{reference} cannot be reached"),
            _ => format!("{reference}: the registry cannot be reached"),
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
    if let Some(problem) = tls_error(e).and_then(certificate_problem) {
        FetchError::Untrusted(problem)
    } else if e.is_connect() || e.is_timeout() {
        FetchError::Offline(chain(e))
    } else {
        FetchError::Other(chain(e))
    }
}

/// The TLS error under a request's error, if the handshake is what
/// failed. The connector wraps it in `io::Error`s (two deep), whose
/// `source` skips the error each carries, so they are opened by hand.
fn tls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        next = match err.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            Some(carried) => Some(carried as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    None
}

/// What is wrong with a registry's certificate, in words, with rustls's
/// name for it so it can be searched; `None` for TLS errors that are not
/// about trusting the certificate.
pub(crate) fn certificate_problem(e: &rustls::Error) -> Option<String> {
    use rustls::CertificateError as C;
    let rustls::Error::InvalidCertificate(problem) = e else { return None };
    let words = match problem {
        C::UnknownIssuer => "its certificate is signed by an authority this machine does not trust",
        C::BadSignature => "its certificate's signature does not verify",
        C::Expired | C::ExpiredContext { .. } => "its certificate has expired",
        C::NotValidYet | C::NotValidYetContext { .. } => "its certificate is not valid yet",
        C::Revoked => "its certificate is revoked",
        C::NotValidForName | C::NotValidForNameContext { .. } => "its certificate is not for this host name",
        _ => "its certificate is not trusted",
    };
    Some(format!("{words} ({problem:?})", problem = Short(problem)))
}

/// rustls's name of a certificate error without the context some carry
/// (times, names), which the words before it already say.
struct Short<'a>(&'a rustls::CertificateError);

impl std::fmt::Debug for Short<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let full = format!("{:?}", self.0);
        let name = full.split(['(', ' ', '{']).next().unwrap_or(&full);
        f.write_str(name.strip_suffix("Context").unwrap_or(name))
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
                let Some((auth, origin)) = credentials(&r.registry) else { return Err(FetchError::Denied) };
                let client = Self::client(r);
                let out = match op(client.clone(), auth.clone()).await.map_err(classify_oci) {
                    Err(FetchError::Denied) => return Err(FetchError::Rejected { origin }),
                    other => other?,
                };
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

    /// The repository's tags, in the registry's order (`features info
    /// tags`, `outdated`).
    pub async fn tags(&self, r: &OciRef) -> Result<Vec<String>, FetchError> {
        let reference = Self::reference(r, None);
        self.with_auth(r, |client, auth| {
            let reference = reference.clone();
            async move { Ok(client.list_tags(&reference, &auth, None, None).await?.tags) }
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
/// for ghcr.io; with where they came from, for when they are rejected.
fn credentials(registry: &str) -> Option<(RegistryAuth, String)> {
    let found = match docker_credential::get_credential(registry) {
        Ok(docker_credential::DockerCredential::UsernamePassword(user, password)) => {
            Some(RegistryAuth::Basic(user, password))
        }
        // An identity token is an OAuth refresh token; the registry's token
        // service exchanges it, which oci-client does not: try it as a bearer.
        Ok(docker_credential::DockerCredential::IdentityToken(token)) => Some(RegistryAuth::Bearer(token)),
        Err(_) => None,
    };
    if let Some(auth) = found {
        let path = docker_config_file();
        let config = path
            .as_ref()
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
            .unwrap_or_default();
        let shown = path.map_or_else(|| "the docker config".to_string(), |p| p.display().to_string());
        return Some((auth, credential_origin(&config, &shown, registry)));
    }
    match std::env::var("GITHUB_TOKEN") {
        Ok(token) if registry == "ghcr.io" && !token.is_empty() => {
            Some((RegistryAuth::Basic("USERNAME".into(), token), "GITHUB_TOKEN".into()))
        }
        _ => None,
    }
}

/// The docker config file `docker_credential` reads: `$DOCKER_CONFIG/config.json`,
/// else `~/.docker/config.json`.
fn docker_config_file() -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("DOCKER_CONFIG")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| std::path::Path::new(&home).join(".docker")))?;
    Some(dir.join("config.json"))
}

/// Where a docker config's credentials for `registry` come from, in
/// `docker_credential`'s order: a `credHelpers` helper, then `auths`, then
/// the `credsStore` helper. Pure.
pub(crate) fn credential_origin(config: &serde_json::Value, path: &str, registry: &str) -> String {
    let helper = |name: &str, key: &str| format!("the credential helper docker-credential-{name} ({key} in {path})");
    if let Some(name) = config.pointer("/credHelpers").and_then(|h| h.get(registry)).and_then(|n| n.as_str()) {
        return helper(name, "credHelpers");
    }
    if config.pointer("/auths").and_then(|a| a.get(registry)).is_some() {
        return path.to_string();
    }
    match config.get("credsStore").and_then(|n| n.as_str()) {
        Some(name) => helper(name, "credsStore"),
        None => path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::CertificateError;
    use serde_json::json;

    #[test]
    fn an_unknown_issuer_is_named_as_an_authority_this_machine_does_not_trust() {
        let e = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        assert_eq!(
            certificate_problem(&e).as_deref(),
            Some("its certificate is signed by an authority this machine does not trust (UnknownIssuer)")
        );
        let expired = rustls::Error::InvalidCertificate(CertificateError::Expired);
        assert_eq!(certificate_problem(&expired).as_deref(), Some("its certificate has expired (Expired)"));
        assert_eq!(certificate_problem(&rustls::Error::DecryptError), None, "not about the certificate");
    }

    #[test]
    fn a_certificate_error_is_found_under_the_io_errors_the_connector_wraps_it_in() {
        let tls = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        let wrapped = std::io::Error::other(std::io::Error::new(std::io::ErrorKind::InvalidData, tls));
        assert!(matches!(
            tls_error(&wrapped),
            Some(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer))
        ));
        assert!(tls_error(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused)).is_none());
    }

    #[test]
    fn rejected_credentials_name_the_helper_or_the_file_they_came_from() {
        let path = "/home/u/.docker/config.json";
        let config = json!({
            "auths": { "reg.example": { "auth": "eDp5" } },
            "credHelpers": { "helped.example": "gcloud" },
            "credsStore": "pass"
        });
        assert_eq!(
            credential_origin(&config, path, "helped.example"),
            "the credential helper docker-credential-gcloud (credHelpers in /home/u/.docker/config.json)"
        );
        assert_eq!(credential_origin(&config, path, "reg.example"), path);
        assert_eq!(
            credential_origin(&config, path, "other.example"),
            "the credential helper docker-credential-pass (credsStore in /home/u/.docker/config.json)"
        );
        let line = FetchError::Rejected { origin: path.into() }.into_feature_error("reg.example/f:1", "reg.example");
        assert_eq!(
            line.to_string(),
            "reg.example/f:1: reg.example rejected the credentials from /home/u/.docker/config.json; \
             `docker login reg.example` with ones it accepts and try again"
        );
    }

    #[test]
    fn an_untrusted_registry_says_so_and_the_fix_where_an_unreachable_one_says_unreachable() {
        let untrusted = FetchError::Untrusted("its certificate has expired (Expired)".into());
        let warning = untrusted.unreachable("reg.example/f:1", "reg.example");
        assert!(
            warning.starts_with(
                "reg.example/f:1: the registry is not trusted: its certificate has expired (Expired); add"
            ),
            "{warning}"
        );
        assert!(warning.contains("update-ca-certificates"), "{warning}");
        let offline = FetchError::Offline("refused".into());
        assert_eq!(
            offline.unreachable("reg.example/f:1", "reg.example"),
            "reg.example/f:1: the registry cannot be reached"
        );
    }
}
