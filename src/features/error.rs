//! Errors of resolving, fetching and installing features. Each names the
//! feature as written, the file, or the registry, and the next action.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum FeatureError {
    #[error("{config}: features[{id:?}]: {reason}", config = .config.display())]
    Reference { config: PathBuf, id: String, reason: String },

    #[error("{config}", config = .config.display())]
    Options {
        config: PathBuf,
        #[source]
        source: super::options::OptionError,
    },

    #[error("{config}", config = .config.display())]
    Cycle {
        config: PathBuf,
        #[source]
        source: super::order::Cycle,
    },

    #[error("{config}: overrideFeatureInstallOrder[{index}] {id:?}: {reason}", config = .config.display())]
    Override { config: PathBuf, index: usize, id: String, reason: String },

    #[error("{reference}: {registry} refused us{hint}; `docker login {registry}` and try again")]
    Unauthorized { reference: String, registry: String, hint: &'static str },

    #[error("{reference}: {registry} rejected the credentials from {origin}; `docker login {registry}` with ones it accepts and try again")]
    Rejected { reference: String, registry: String, origin: String },

    #[error("{reference}: the registry is not trusted: {reason}; add the certificate of the authority that signed it to this machine's trusted ones (a .crt in /usr/local/share/ca-certificates, then `update-ca-certificates`), or point SSL_CERT_FILE at a bundle that holds it")]
    Untrusted { reference: String, reason: String },

    #[error("{reference} was not found in its registry; check the feature's id and tag")]
    NotFound { reference: String },

    #[error("{reference}: the registry cannot be reached and the feature is not in the cache ({reason})")]
    Offline { reference: String, reason: String },

    #[error("{reference}: {reason}")]
    Registry { reference: String, reason: String },

    #[error("{reference} is not a dev container feature: its manifest's {field} is {found:?}, expected {expected:?}")]
    MediaType { reference: String, field: &'static str, found: String, expected: &'static str },

    #[error("{what}: the content's digest is {actual}, not the {expected} the {pinned_by} names")]
    Digest { what: String, expected: String, actual: String, pinned_by: &'static str },

    #[error("{path}: {reason}", path = .path.display())]
    Metadata { path: PathBuf, reason: String },

    #[error("the feature cache at {path}", path = .path.display())]
    Cache {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{path}: {reason}", path = .path.display())]
    Lockfile { path: PathBuf, reason: String },

    #[error("{path} does not exist (--frozen-lockfile); run `workroom up` once without the flag to write it", path = .path.display())]
    FrozenMissing { path: PathBuf },

    #[error(
        "{path} does not match the configuration (--frozen-lockfile): {changes}",
        path = .path.display(),
        changes = .changes.join("; ")
    )]
    Frozen { path: PathBuf, changes: Vec<String> },
}
