//! What a key of `features` names, classified as the reference CLI does
//! (`getFeatureIdType`, `getRef`, `processFeatureIdentifier`): an OCI
//! reference, a local folder beside devcontainer.json, or a tarball URL.
//! The deprecated short ids (`node`, `golang`, …) map to their
//! `ghcr.io/devcontainers/features/*:1` successors with a warning. Pure.

use std::path::{Component, Path, PathBuf};

/// The registry path the old short ids moved to.
const NEW_FEATURE_PATH: &str = "ghcr.io/devcontainers/features";

/// Short ids of `microsoft/vscode-dev-containers` that moved as they were.
const MIGRATED: &[&str] = &[
    "aws-cli",
    "azure-cli",
    "desktop-lite",
    "docker-in-docker",
    "docker-from-docker",
    "dotnet",
    "git",
    "git-lfs",
    "github-cli",
    "java",
    "kubectl-helm-minikube",
    "node",
    "powershell",
    "python",
    "ruby",
    "rust",
    "sshd",
    "terraform",
];

/// Short ids that moved under another name.
const RENAMED: &[(&str, &str)] = &[("golang", "go"), ("common", "common-utils")];

/// Short ids that became an option of another feature (`updateDeprecatedFeaturesIntoOptions`).
pub const INTO_OPTIONS: &[(&str, &str, &str)] = &[
    ("gradle", "java", "installGradle"),
    ("maven", "java", "installMaven"),
    ("jupyterlab", "python", "installJupyterlab"),
];

/// An OCI reference to a feature: `registry/namespace/id[:tag|@sha256:…]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciRef {
    /// With its port, as written (`localhost:5000`).
    pub registry: String,
    pub namespace: String,
    pub id: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

impl OciRef {
    /// `namespace/id`: the repository in the registry.
    pub fn path(&self) -> String {
        format!("{}/{}", self.namespace, self.id)
    }

    /// `registry/namespace/id`, without tag or digest.
    pub fn resource(&self) -> String {
        format!("{}/{}", self.registry, self.path())
    }

    /// The most specific version named: the digest, else the tag.
    pub fn version(&self) -> &str {
        self.digest.as_deref().or(self.tag.as_deref()).unwrap_or("latest")
    }

    /// `registry/namespace/id:tag` or `…@digest`.
    pub fn to_reference(&self) -> String {
        match &self.digest {
            Some(d) => format!("{}@{d}", self.resource()),
            None => format!("{}:{}", self.resource(), self.version()),
        }
    }

    /// The reference CLI speaks plain HTTP to `localhost` only; so do we.
    pub fn plain_http(&self) -> bool {
        host_of(&self.registry) == "localhost"
    }
}

fn host_of(authority: &str) -> &str {
    authority.rsplit_once(':').map_or(authority, |(host, _)| host)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Oci(OciRef),
    /// An absolute folder inside the config's folder.
    Local(PathBuf),
    /// `https://…/devcontainer-feature-<id>.tgz`.
    Tarball(String),
}

/// A classified key of `features`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    pub source: Source,
    /// The feature's id as the reference names it (the last path segment,
    /// the folder's name, or the tarball's `<id>`).
    pub id: String,
    /// The short id's replacement, said once.
    pub warning: Option<String>,
}

/// Why a key of `features` names nothing we can install; the caller
/// prefixes it with the property.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    #[error("legacy feature {0:?} is not supported (see https://containers.dev/features for its replacement); a local feature is written \"./{0}\"")]
    Legacy(String),
    #[error("a feature tarball is fetched over https:// (plain http is used for localhost only, written https://localhost:PORT/…)")]
    PlainHttp,
    #[error("a local feature is a relative path such as \"./my-feature\", not an absolute one")]
    AbsolutePath,
    #[error("a local feature must be a folder inside {0}")]
    OutsideFolder(String),
    #[error("{url:?} is not a valid URL ({reason})")]
    Url { url: String, reason: String },
    #[error("a feature tarball must be named devcontainer-feature-<id>.tgz, found {0:?}")]
    TarballName(String),
    #[error("the tarball's feature id {0:?} may hold only letters, digits, '-' and '_'")]
    TarballId(String),
    #[error("a feature reference may not start with '.' (a local feature is written \"./name\")")]
    LeadingDot,
    #[error("{0:?} is not a digest such as sha256:<64 hex digits>")]
    Digest(String),
    #[error("{0:?} is not a valid tag")]
    Tag(String),
    #[error("an OCI feature is written registry/namespace/id[:tag], e.g. ghcr.io/devcontainers/features/node:1")]
    TooShort,
    #[error("{0:?} is not a registry host (the reference's GitHub-release features are not supported; publish the feature to an OCI registry)")]
    NotARegistry(String),
    #[error("{namespace}/{id:?} is not a valid repository path")]
    Repository { namespace: String, id: String },
}

/// Classifies `user_id`; `config_dir` is devcontainer.json's folder.
pub fn classify(user_id: &str, config_dir: &Path) -> Result<Classified, ReferenceError> {
    let (mapped, warning) = backward_compatible(user_id);
    if !mapped.contains('/') && !mapped.contains('\\') {
        return Err(ReferenceError::Legacy(user_id.to_string()));
    }
    if mapped.starts_with("https://") {
        return tarball(&mapped).map(|(url, id)| Classified { source: Source::Tarball(url), id, warning });
    }
    if mapped.starts_with("http://") {
        return Err(ReferenceError::PlainHttp);
    }
    if mapped.starts_with('/') {
        return Err(ReferenceError::AbsolutePath);
    }
    if mapped.starts_with("./") || mapped.starts_with("../") {
        let folder = normalize(&config_dir.join(&mapped));
        if !folder.starts_with(config_dir) || folder == config_dir {
            return Err(ReferenceError::OutsideFolder(config_dir.display().to_string()));
        }
        let id = folder.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        return Ok(Classified { source: Source::Local(folder), id, warning });
    }
    let oci = parse_oci(&mapped)?;
    Ok(Classified { id: oci.id.clone(), source: Source::Oci(oci), warning })
}

/// `getBackwardCompatibleFeatureId`: the short ids' successors.
fn backward_compatible(user_id: &str) -> (String, Option<String>) {
    let moved = |to: &str| {
        let mapped = format!("{NEW_FEATURE_PATH}/{to}:1");
        let warning = format!("feature {user_id:?} is deprecated; installing {mapped:?}, which replaced it");
        (mapped, Some(warning))
    };
    if MIGRATED.contains(&user_id) {
        return moved(user_id);
    }
    if let Some((_, to)) = RENAMED.iter().find(|(from, _)| *from == user_id) {
        return moved(to);
    }
    (user_id.to_string(), None)
}

/// Lexical `..` and `.` removal (the folder may not exist yet when refused).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The URL and id of a direct tarball reference.
fn tarball(url: &str) -> Result<(String, String), ReferenceError> {
    let parsed =
        reqwest::Url::parse(url).map_err(|e| ReferenceError::Url { url: url.to_string(), reason: e.to_string() })?;
    let name = parsed.path().rsplit('/').next().unwrap_or_default();
    // The reference's /devcontainer-feature-(.*).tgz/ (unanchored, `.` any character).
    let id = name
        .find("devcontainer-feature-")
        .map(|at| &name[at + "devcontainer-feature-".len()..])
        .filter(|rest| rest.len() > 4 && rest.ends_with("tgz"))
        .map(|rest| &rest[..rest.len() - 4])
        .ok_or_else(|| ReferenceError::TarballName(name.to_string()))?;
    if !valid_id(id) {
        return Err(ReferenceError::TarballId(id.to_string()));
    }
    Ok((parsed.to_string(), id.to_string()))
}

fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// `getRef`: the reference lower-cases the whole input first.
pub fn parse_oci(input: &str) -> Result<OciRef, ReferenceError> {
    let input = input.to_lowercase();
    if input.starts_with('.') {
        return Err(ReferenceError::LeadingDot);
    }
    let last_slash = input.rfind('/');
    let (resource, tag, digest) = if let Some(at) = input.rfind('@') {
        let digest = &input[at + 1..];
        match digest.split_once(':') {
            Some(("sha256", hex)) if hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit()) => {}
            _ => return Err(ReferenceError::Digest(digest.to_string())),
        }
        (&input[..at], None, Some(digest.to_string()))
    } else {
        match input.rfind(':') {
            Some(colon) if Some(colon) > last_slash => (&input[..colon], Some(input[colon + 1..].to_string()), None),
            _ => (input.as_str(), Some("latest".to_string()), None),
        }
    };
    if let Some(tag) = &tag {
        let ok = !tag.is_empty()
            && tag.len() <= 128
            && tag.chars().next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            && tag.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !ok {
            return Err(ReferenceError::Tag(tag.clone()));
        }
    }
    let mut parts: Vec<&str> = resource.split('/').collect();
    if parts.get(1) == Some(&"devcontainers-contrib") {
        // The reference redirects the renamed collection.
        parts[1] = "devcontainers-extra";
    }
    if parts.len() < 3 {
        return Err(ReferenceError::TooShort);
    }
    let registry = parts[0].to_string();
    if !registry.contains('.') && !registry.starts_with("localhost") {
        return Err(ReferenceError::NotARegistry(registry));
    }
    let id = parts[parts.len() - 1].to_string();
    let namespace = parts[1..parts.len() - 1].join("/");
    if !valid_repository_path(&format!("{namespace}/{id}")) {
        return Err(ReferenceError::Repository { namespace, id });
    }
    Ok(OciRef { registry, namespace, id, tag, digest })
}

/// `^[a-z0-9]+([._-][a-z0-9]+)*(\/[a-z0-9]+([._-][a-z0-9]+)*)*$`
fn valid_repository_path(path: &str) -> bool {
    path.split('/').all(|component| {
        let mut prev_sep = true;
        for c in component.chars() {
            let sep = matches!(c, '.' | '_' | '-');
            if !(sep || c.is_ascii_lowercase() || c.is_ascii_digit()) || (sep && prev_sep) {
                return false;
            }
            prev_sep = sep;
        }
        !component.is_empty() && !prev_sep
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oci(s: &str) -> OciRef {
        match classify(s, Path::new("/w/.devcontainer")).unwrap().source {
            Source::Oci(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_oci_reference_without_a_tag_means_latest() {
        let r = oci("ghcr.io/devcontainers/features/node");
        assert_eq!(
            (r.registry.as_str(), r.namespace.as_str(), r.id.as_str()),
            ("ghcr.io", "devcontainers/features", "node")
        );
        assert_eq!(r.tag.as_deref(), Some("latest"));
        assert_eq!(r.to_reference(), "ghcr.io/devcontainers/features/node:latest");
    }

    #[test]
    fn a_registry_port_is_not_a_tag_and_localhost_speaks_plain_http() {
        let r = oci("localhost:5000/wr/features/hello:1.2");
        assert_eq!(r.registry, "localhost:5000");
        assert_eq!(r.tag.as_deref(), Some("1.2"));
        assert!(r.plain_http());
        let untagged = oci("localhost:5000/wr/hello");
        assert_eq!(untagged.tag.as_deref(), Some("latest"));
        assert!(!oci("ghcr.io/a/b").plain_http());
    }

    #[test]
    fn a_digest_reference_pins_the_manifest_and_is_lower_cased() {
        let d = "sha256:".to_string() + &"Ab".repeat(32);
        let r = oci(&format!("GHCR.io/Owner/Features/Go@{d}"));
        assert_eq!(r.digest, Some(d.to_lowercase()));
        assert_eq!(r.tag, None);
        assert_eq!(r.resource(), "ghcr.io/owner/features/go");
    }

    #[test]
    fn bad_oci_references_are_refused_with_the_reason() {
        let dir = Path::new("/w/.devcontainer");
        assert!(classify("ghcr.io/node", dir).unwrap_err().to_string().contains("registry/namespace/id"));
        assert!(classify("owner/repo/feature", dir).unwrap_err().to_string().contains("not a registry host"));
        assert!(classify("ghcr.io/a/b@sha256:12", dir).unwrap_err().to_string().contains("not a digest"));
        assert!(classify("ghcr.io/a/b:-x", dir).unwrap_err().to_string().contains("not a valid tag"));
        assert!(classify("ghcr.io/a__b/c", dir).unwrap_err().to_string().contains("not a valid repository path"));
    }

    #[test]
    fn the_contrib_collection_is_redirected_to_extra() {
        assert_eq!(oci("ghcr.io/devcontainers-contrib/features/x:1").namespace, "devcontainers-extra/features");
    }

    #[test]
    fn deprecated_short_ids_map_to_their_successors_with_a_warning() {
        let c = classify("node", Path::new("/w")).unwrap();
        assert_eq!(c.source, Source::Oci(parse_oci("ghcr.io/devcontainers/features/node:1").unwrap()));
        assert!(c.warning.unwrap().contains("\"ghcr.io/devcontainers/features/node:1\""));
        assert_eq!(classify("golang", Path::new("/w")).unwrap().id, "go");
        assert!(classify("fish", Path::new("/w"))
            .unwrap_err()
            .to_string()
            .contains("legacy feature \"fish\" is not supported"));
    }

    #[test]
    fn a_local_feature_is_a_folder_inside_the_config_folder() {
        let dir = Path::new("/w/.devcontainer");
        let c = classify("./features/hello", dir).unwrap();
        assert_eq!(c.source, Source::Local(PathBuf::from("/w/.devcontainer/features/hello")));
        assert_eq!(c.id, "hello");
        assert!(classify("../outside", dir).unwrap_err().to_string().contains("inside /w/.devcontainer"));
        assert!(classify("./a/../../x", dir).unwrap_err().to_string().contains("inside"));
        assert!(classify("./..", dir).is_err());
        assert!(classify("/abs/feature", dir).unwrap_err().to_string().contains("relative path"));
    }

    #[test]
    fn a_tarball_is_named_after_its_feature() {
        let dir = Path::new("/w");
        let c = classify("https://localhost:8080/dl/devcontainer-feature-hello.tgz", dir).unwrap();
        assert_eq!(c.id, "hello");
        assert_eq!(c.source, Source::Tarball("https://localhost:8080/dl/devcontainer-feature-hello.tgz".into()));
        assert!(classify("https://example.com/hello.tgz", dir)
            .unwrap_err()
            .to_string()
            .contains("devcontainer-feature-<id>.tgz"));
        assert!(classify("https://example.com/devcontainer-feature-a b.tgz", dir).is_err());
        assert!(classify("http://example.com/devcontainer-feature-x.tgz", dir)
            .unwrap_err()
            .to_string()
            .contains("https://"));
    }
}
