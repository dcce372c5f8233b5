//! From `features` to an ordered list of fetched, validated features: the
//! reference's `generateFeaturesConfig` (deprecated ids into options, the
//! dependency worklist, the override order, the rounds, the lockfile),
//! with the cache in front of the network.

use super::cache::{digest_of, Cache};
use super::fetch::{FetchError, Fetcher, CONFIG_MEDIA_TYPE, LAYER_MEDIA_TYPE};
use super::order::{self, Key, Node, Soft};
use super::reference::{classify, OciRef, Source, INTO_OPTIONS};
use super::{lockfile, options, FeatureError, Report};
use crate::config::Loaded;
use serde_json::{Map, Value};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};

/// What `up` does with `devcontainer-lock.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LockMode {
    /// Pin to it, and write it when the resolution differs (the default).
    #[default]
    Write,
    /// Pin to it and refuse any difference (`--frozen-lockfile`).
    Frozen,
    /// Pin to it, never write it (`workroom config`).
    ReadOnly,
    /// Neither read nor write it (`--no-lockfile`).
    Skip,
    /// Read it for nothing and write nothing: every feature resolved afresh
    /// by its tag, for `upgrade` to write what [`lockfile_of`] makes of it.
    Unpinned,
}

/// A feature ready to install.
#[derive(Debug, Clone)]
pub struct Feature {
    /// The id as written in `features` or in a `dependsOn`.
    pub user_id: String,
    /// The feature's own id (last path segment, folder or tarball name).
    pub id: String,
    pub source: Source,
    /// The manifest's digest (OCI) or the tarball's: what the lockfile pins.
    pub integrity: Option<String>,
    /// Its devcontainer-feature.json.
    pub json: Map<String, Value>,
    /// Its files.
    pub folder: PathBuf,
    /// The options `install.sh` gets: defaults under the user's values.
    pub values: Map<String, Value>,
}

impl Feature {
    /// The id without its tag or digest (`getFeatureIdWithoutVersion`),
    /// which the reference shows in the install banner for OCI features.
    pub fn id_without_version(&self) -> Option<String> {
        match self.source {
            Source::Oci(_) => {
                // The first `:` or `@` after the last `/` (a port comes before it).
                let after = self.user_id.rfind('/').map_or(0, |i| i + 1);
                let cut = self.user_id[after..].find([':', '@']).map(|i| after + i);
                Some(cut.map_or(self.user_id.clone(), |i| self.user_id[..i].to_string()))
            }
            _ => None,
        }
    }
}

#[derive(Debug)]
pub struct Resolved {
    /// In install order.
    pub features: Vec<Feature>,
}

/// What one fetch found (memoised per id: a feature several others depend
/// on is fetched once).
#[derive(Debug, Clone)]
struct Fetched {
    source: Source,
    id: String,
    integrity: Option<String>,
    json: Map<String, Value>,
    folder: PathBuf,
}

struct Resolver<'a> {
    loaded: &'a Loaded,
    config_dir: PathBuf,
    cache: &'a Cache,
    fetcher: &'a Fetcher,
    report: &'a dyn Report,
    lockfile: Option<Value>,
    fetched: HashMap<String, Fetched>,
}

/// Resolves the config's features; `None` when it has none.
pub async fn resolve(
    loaded: &Loaded,
    mode: LockMode,
    cache: &Cache,
    fetcher: &Fetcher,
    report: &dyn Report,
) -> Result<Option<Resolved>, FeatureError> {
    let features = into_options(&loaded.model.features, report);
    if features.is_empty() {
        return Ok(None);
    }
    let lock_path = lockfile::path_for(&loaded.config_path);
    let old_lockfile = match mode {
        LockMode::Skip | LockMode::Unpinned => None,
        _ => read_lockfile(&lock_path)?,
    };
    let config_dir = loaded.config_path.parent().unwrap_or(Path::new("/")).to_path_buf();
    let mut r = Resolver {
        loaded,
        config_dir,
        cache,
        fetcher,
        report,
        lockfile: old_lockfile.clone(),
        fetched: HashMap::new(),
    };

    // The worklist: every feature reached, each once.
    let mut nodes: Vec<Node> = Vec::new();
    let mut places: Vec<String> = Vec::new();
    let mut worklist: Vec<usize> = Vec::new();
    let mut queue: VecDeque<(String, Value, String, Option<usize>)> =
        features.into_iter().map(|(id, options)| (id.clone(), options, format!("features[{id:?}]"), None)).collect();
    while let Some((user_id, options, place, parent)) = queue.pop_front() {
        let fetched = r.fetch(&user_id, &place).await?;
        let node = Node {
            user_id: user_id.clone(),
            options: options.clone(),
            key: key_of(&fetched),
            aliases: None,
            depends_on: Vec::new(),
            installs_after: Vec::new(),
            priority: 0,
        };
        let index = nodes.len();
        nodes.push(node);
        places.push(place.clone());
        if let Some(p) = parent {
            nodes[p].depends_on.push(index);
        }
        if worklist.iter().any(|&w| order::equals(&nodes[w], &nodes[index])) {
            continue;
        }
        let json = &fetched.json;
        let own_id = json.get("currentId").or(json.get("id")).and_then(Value::as_str).unwrap_or(&fetched.id);
        let mut aliases = vec![own_id.to_string()];
        aliases.extend(strings(json.get("legacyIds")));
        nodes[index].aliases = Some(aliases);
        for soft in strings(json.get("installsAfter")) {
            let classified = classify(&soft, &r.config_dir).map_err(|reason| FeatureError::Reference {
                config: loaded.config_path.clone(),
                id: user_id.clone(),
                reason: format!("its installsAfter {soft:?}: {reason}"),
            })?;
            nodes[index].installs_after.push(soft_of(&classified.source));
        }
        match json.get("dependsOn") {
            None | Some(Value::Null) => {}
            Some(Value::Object(deps)) => {
                for (dep, dep_options) in deps {
                    let dep_place = format!("{place} dependsOn[{dep:?}]");
                    queue.push_back((dep.clone(), dep_options.clone(), dep_place, Some(index)));
                }
            }
            Some(_) => {
                return Err(FeatureError::Metadata {
                    path: fetched.folder.join("devcontainer-feature.json"),
                    reason: "`dependsOn` must be an object of feature ids and their options".into(),
                })
            }
        }
        worklist.push(index);
    }

    let overrides = loaded
        .model
        .override_feature_install_order
        .iter()
        .enumerate()
        .map(|(index, id)| {
            classify(id, &r.config_dir).map(|c| soft_of(&c.source)).map_err(|reason| FeatureError::Override {
                config: loaded.config_path.clone(),
                index,
                id: id.clone(),
                reason: reason.to_string(),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    order::apply_overrides(&mut nodes, &worklist, &overrides);
    let install_order = order::rounds(&nodes, &worklist)
        .map_err(|source| FeatureError::Cycle { config: loaded.config_path.clone(), source })?;

    let mut out = Vec::new();
    for index in install_order {
        let node = &nodes[index];
        let fetched = r.fetched[&node.user_id].clone();
        let empty = Map::new();
        let declared = fetched.json.get("options").and_then(Value::as_object).unwrap_or(&empty);
        let (values, warnings) = options::resolve(&places[index], declared, &node.options)
            .map_err(|source| FeatureError::Options { config: loaded.config_path.clone(), source })?;
        for w in warnings {
            report.warning(&format!("{}: {w}", loaded.config_path.display()));
        }
        out.push(Feature {
            user_id: node.user_id.clone(),
            id: fetched.id,
            source: fetched.source,
            integrity: fetched.integrity,
            json: fetched.json,
            folder: fetched.folder,
            values,
        });
    }
    settle_lockfile(mode, &lock_path, old_lockfile.as_ref(), &out)?;
    Ok(Some(Resolved { features: out }))
}

/// The reference's `updateDeprecatedFeaturesIntoOptions`: `gradle`, `maven`
/// and `jupyterlab` became options of `java` and `python`.
fn into_options(features: &[(String, Value)], report: &dyn Report) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = features.to_vec();
    for (old, to, option) in INTO_OPTIONS {
        if !features.iter().any(|(id, _)| id == old) {
            continue;
        }
        report.warning(&format!(
            "feature {old:?} is deprecated; it is the `{option}` option of ghcr.io/devcontainers/features/{to} now"
        ));
        let qualified = format!("ghcr.io/devcontainers/features/{to}");
        let existing =
            out.iter_mut().find(|(id, _)| id == to || *id == qualified || id.starts_with(&format!("{qualified}:")));
        match existing {
            Some((_, options)) => {
                let mut merged = match options.take() {
                    Value::Object(m) => m,
                    Value::String(v) => Map::from_iter([("version".to_string(), Value::String(v))]),
                    _ => Map::new(),
                };
                merged.insert((*option).to_string(), Value::Bool(true));
                *options = Value::Object(merged);
            }
            None => out.push((
                format!("{qualified}:1"),
                Value::Object(Map::from_iter([((*option).to_string(), Value::Bool(true))])),
            )),
        }
    }
    out.retain(|(id, _)| !INTO_OPTIONS.iter().any(|(old, _, _)| id == old));
    out
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
        .unwrap_or_default()
}

fn key_of(f: &Fetched) -> Key {
    match &f.source {
        Source::Oci(r) => Key::Oci {
            registry: r.registry.clone(),
            namespace: r.namespace.clone(),
            id: r.id.clone(),
            tag: r.tag.clone(),
            digest: f.integrity.clone().unwrap_or_default(),
        },
        Source::Local(p) => Key::Local(p.display().to_string()),
        Source::Tarball(u) => Key::Tarball(u.clone()),
    }
}

fn soft_of(source: &Source) -> Soft {
    match source {
        Source::Oci(r) => Soft::Oci { registry: r.registry.clone(), namespace: r.namespace.clone(), id: r.id.clone() },
        Source::Local(p) => Soft::Local(p.display().to_string()),
        Source::Tarball(u) => Soft::Tarball(u.clone()),
    }
}

fn read_lockfile(path: &Path) -> Result<Option<Value>, FeatureError> {
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim().is_empty() => Ok(None),
        Ok(text) => serde_json::from_str(&text).map(Some).map_err(|e| FeatureError::Lockfile {
            path: path.to_path_buf(),
            reason: format!("line {} column {}: {e}", e.line(), e.column()),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(FeatureError::Lockfile { path: path.to_path_buf(), reason: e.to_string() }),
    }
}

/// Writes, checks or leaves the lockfile, as `mode` says.
fn settle_lockfile(mode: LockMode, path: &Path, old: Option<&Value>, features: &[Feature]) -> Result<(), FeatureError> {
    if matches!(mode, LockMode::Skip | LockMode::ReadOnly | LockMode::Unpinned) {
        return Ok(());
    }
    let new = lockfile_of(features);
    let same = old.is_some_and(|o| lockfile::text(o) == lockfile::text(&new));
    match mode {
        LockMode::Frozen => match old {
            None => Err(FeatureError::FrozenMissing { path: path.to_path_buf() }),
            Some(_) if same => Ok(()),
            Some(o) => Err(FeatureError::Frozen { path: path.to_path_buf(), changes: lockfile::drift(o, &new) }),
        },
        _ if same => Ok(()),
        _ => write_lockfile(path, &new),
    }
}

/// Writes `lockfile` as the reference writes it.
pub fn write_lockfile(path: &Path, lockfile: &Value) -> Result<(), FeatureError> {
    std::fs::write(path, lockfile::text(lockfile))
        .map_err(|e| FeatureError::Lockfile { path: path.to_path_buf(), reason: format!("cannot write it: {e}") })
}

/// The lockfile these resolved features make: one entry per OCI or
/// tarball feature (local folders are not locked).
pub fn lockfile_of(features: &[Feature]) -> Value {
    let entries: Vec<lockfile::Entry> = features
        .iter()
        .filter_map(|f| {
            let integrity = f.integrity.clone()?;
            let resolved = match &f.source {
                Source::Oci(r) => format!("{}/{}@{integrity}", r.registry, r.path()),
                Source::Tarball(url) => url.clone(),
                Source::Local(_) => return None,
            };
            let depends_on = f.json.get("dependsOn").and_then(Value::as_object).map(|d| d.keys().cloned().collect());
            Some(lockfile::Entry {
                id: f.user_id.clone(),
                version: f.json.get("version").and_then(Value::as_str).map(String::from),
                resolved,
                integrity,
                depends_on: depends_on.unwrap_or_default(),
            })
        })
        .collect();
    lockfile::render(&entries)
}

impl Resolver<'_> {
    fn reference_error(&self, user_id: &str, reason: String) -> FeatureError {
        FeatureError::Reference { config: self.loaded.config_path.clone(), id: user_id.to_string(), reason }
    }

    async fn fetch(&mut self, user_id: &str, place: &str) -> Result<Fetched, FeatureError> {
        if let Some(f) = self.fetched.get(user_id) {
            return Ok(f.clone());
        }
        let classified =
            classify(user_id, &self.config_dir).map_err(|reason| self.reference_error(user_id, reason.to_string()))?;
        if let Some(w) = &classified.warning {
            self.report.warning(&format!("{}: {w}", self.loaded.config_path.display()));
        }
        let pin = lockfile::pinned(self.lockfile.as_ref(), user_id).map(String::from);
        let (folder, integrity) = match &classified.source {
            Source::Oci(r) => {
                let (folder, digest) = self.fetch_oci(r, pin.as_deref()).await?;
                (folder, Some(digest))
            }
            Source::Tarball(url) => {
                let (folder, digest) = self.fetch_tarball(url, pin.as_deref()).await?;
                (folder, Some(digest))
            }
            Source::Local(path) => {
                if !path.is_dir() {
                    return Err(self.reference_error(user_id, format!("the folder {} does not exist", path.display())));
                }
                (path.clone(), None)
            }
        };
        let json = read_feature_json(&folder, place)?;
        let fetched = Fetched { source: classified.source, id: classified.id, integrity, json, folder };
        self.fetched.insert(user_id.to_string(), fetched.clone());
        Ok(fetched)
    }

    /// The manifest (pinned: cache first; by tag: the registry, with the
    /// cache standing in when it cannot be reached), then its layer.
    async fn fetch_oci(&self, r: &OciRef, pin: Option<&str>) -> Result<(PathBuf, String), FeatureError> {
        let reference = r.to_reference();
        let pinned = pin.or(r.digest.as_deref());
        let mut announced = false;
        let mut downloaded = 0;
        let (manifest, digest) = match pinned.and_then(|d| self.cache.blob(d).map(|b| (b, d.to_string()))) {
            Some(hit) => hit,
            None => {
                self.report.fetching(&reference);
                announced = true;
                match self.fetcher.manifest(r, pinned).await {
                    Ok((bytes, _)) => {
                        downloaded += bytes.len();
                        let digest = digest_of(&bytes);
                        if let Some(expected) = pinned {
                            if digest != expected {
                                return Err(FeatureError::Digest {
                                    what: reference,
                                    expected: expected.into(),
                                    actual: digest,
                                    pinned_by: if pin.is_some() { "lockfile" } else { "reference" },
                                });
                            }
                        } else {
                            self.cache.remember(&reference, &digest)?;
                        }
                        self.cache.put_blob(&digest, &bytes)?;
                        (bytes, digest)
                    }
                    Err(e @ (FetchError::Offline(_) | FetchError::Untrusted(_))) => {
                        let cached = match pinned {
                            Some(_) => None,
                            None => self.cache.recall(&reference).and_then(|d| self.cache.blob(&d).map(|b| (b, d))),
                        };
                        let Some((bytes, digest)) = cached else {
                            return Err(e.into_feature_error(&reference, &r.registry));
                        };
                        self.report
                            .warning(&format!("{}; using the cached {digest}", e.unreachable(&reference, &r.registry)));
                        (bytes, digest)
                    }
                    Err(e) => return Err(e.into_feature_error(&reference, &r.registry)),
                }
            }
        };
        let manifest: Value = serde_json::from_slice(&manifest).map_err(|e| FeatureError::Registry {
            reference: reference.clone(),
            reason: format!("its manifest is not JSON: {e}"),
        })?;
        let config_type = manifest.pointer("/config/mediaType").and_then(Value::as_str).unwrap_or("");
        if config_type != CONFIG_MEDIA_TYPE {
            return Err(FeatureError::MediaType {
                reference,
                field: "config.mediaType",
                found: config_type.into(),
                expected: CONFIG_MEDIA_TYPE,
            });
        }
        let layer = manifest.pointer("/layers/0").cloned().unwrap_or(Value::Null);
        let layer_type = layer.get("mediaType").and_then(Value::as_str).unwrap_or("");
        if layer_type != LAYER_MEDIA_TYPE {
            return Err(FeatureError::MediaType {
                reference,
                field: "layers[0].mediaType",
                found: layer_type.into(),
                expected: LAYER_MEDIA_TYPE,
            });
        }
        let layer_digest = layer.get("digest").and_then(Value::as_str).unwrap_or("").to_string();
        if self.cache.blob(&layer_digest).is_none() {
            if !announced {
                self.report.fetching(&reference);
                announced = true;
            }
            let size = layer.get("size").and_then(Value::as_i64).unwrap_or(0);
            let bytes = self
                .fetcher
                .blob(r, &layer_digest, size)
                .await
                .map_err(|e| e.into_feature_error(&reference, &r.registry))?;
            let actual = digest_of(&bytes);
            if actual != layer_digest {
                return Err(FeatureError::Digest {
                    what: format!("{reference} layer"),
                    expected: layer_digest,
                    actual,
                    pinned_by: "manifest",
                });
            }
            self.cache.put_blob(&layer_digest, &bytes)?;
            downloaded += bytes.len();
        }
        if announced {
            self.report.fetched(&reference, downloaded);
        }
        Ok((self.cache.unpacked(&layer_digest, false)?, digest))
    }

    async fn fetch_tarball(&self, url: &str, pin: Option<&str>) -> Result<(PathBuf, String), FeatureError> {
        let digest = match pin.filter(|d| self.cache.blob(d).is_some()) {
            Some(d) => d.to_string(),
            None => {
                self.report.fetching(url);
                match self.fetcher.tarball(url).await {
                    Ok(bytes) => {
                        let digest = digest_of(&bytes);
                        if let Some(expected) = pin {
                            if digest != expected {
                                return Err(FeatureError::Digest {
                                    what: url.into(),
                                    expected: expected.into(),
                                    actual: digest,
                                    pinned_by: "lockfile",
                                });
                            }
                        }
                        self.cache.put_blob(&digest, &bytes)?;
                        self.cache.remember(url, &digest)?;
                        self.report.fetched(url, bytes.len());
                        digest
                    }
                    Err(e @ (FetchError::Offline(_) | FetchError::Untrusted(_))) => {
                        match self.cache.recall(url).filter(|d| pin.is_none() && self.cache.blob(d).is_some()) {
                            Some(d) => {
                                self.report.warning(&format!("{}; using the cached {d}", e.unreachable(url, url)));
                                d
                            }
                            None => return Err(e.into_feature_error(url, url)),
                        }
                    }
                    Err(e) => return Err(e.into_feature_error(url, url)),
                }
            }
        };
        Ok((self.cache.unpacked(&digest, true)?, digest))
    }
}

/// The feature's devcontainer-feature.json (JSON with comments), and a
/// check that it has an install.sh to run.
fn read_feature_json(folder: &Path, place: &str) -> Result<Map<String, Value>, FeatureError> {
    let path = folder.join("devcontainer-feature.json");
    let text = std::fs::read_to_string(&path).map_err(|e| FeatureError::Metadata {
        path: path.clone(),
        reason: format!(
            "{place} has no readable devcontainer-feature.json ({e}); features of the old v1 format are not supported"
        ),
    })?;
    let json = crate::config::parse_document(&path, &text)
        .map_err(|e| FeatureError::Metadata { path: path.clone(), reason: strip_path(&e.to_string(), &path) })?;
    if !folder.join("install.sh").is_file() {
        return Err(FeatureError::Metadata {
            path: folder.join("install.sh"),
            reason: format!("{place} has no install.sh"),
        });
    }
    Ok(json.map)
}

/// A config error already names the file; ours does too.
fn strip_path(message: &str, path: &Path) -> String {
    let p = path.display().to_string();
    message
        .strip_prefix(&p)
        .map(|m| m.trim_start_matches(':').trim_start().to_string())
        .unwrap_or_else(|| message.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Quiet(std::sync::Mutex<Vec<String>>);
    impl Report for Quiet {
        fn warning(&self, text: &str) {
            self.0.lock().unwrap().push(text.into());
        }
    }

    #[test]
    fn deprecated_features_become_options_of_their_successor() {
        let report = Quiet(Default::default());
        let features = vec![
            ("ghcr.io/devcontainers/features/java:1".to_string(), json!("17")),
            ("maven".to_string(), json!(true)),
            ("jupyterlab".to_string(), json!({})),
        ];
        let out = into_options(&features, &report);
        assert_eq!(
            out,
            vec![
                ("ghcr.io/devcontainers/features/java:1".to_string(), json!({ "version": "17", "installMaven": true })),
                ("ghcr.io/devcontainers/features/python:1".to_string(), json!({ "installJupyterlab": true })),
            ]
        );
        assert_eq!(report.0.lock().unwrap().len(), 2);
    }

    #[test]
    fn the_banner_id_drops_the_tag_or_digest_but_not_a_port() {
        let feature = |user_id: &str| Feature {
            user_id: user_id.into(),
            id: "x".into(),
            source: Source::Oci(super::super::reference::parse_oci(user_id).unwrap()),
            integrity: None,
            json: Map::new(),
            folder: PathBuf::new(),
            values: Map::new(),
        };
        assert_eq!(feature("localhost:5000/wr/x:1").id_without_version().unwrap(), "localhost:5000/wr/x");
        assert_eq!(feature("localhost:5000/wr/x").id_without_version().unwrap(), "localhost:5000/wr/x");
        let pinned = format!("ghcr.io/a/x@sha256:{}", "0".repeat(64));
        assert_eq!(feature(&pinned).id_without_version().unwrap(), "ghcr.io/a/x");
    }
}
