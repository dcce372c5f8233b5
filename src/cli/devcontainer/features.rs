//! The face's Feature commands for users of Features (not their authors):
//! `outdated` (each feature's locked, wanted and newest version),
//! `upgrade` (the lockfile resolved afresh, written or printed),
//! `features info MODE FEATURE` (a published feature's manifest, tags and
//! dependencies) and `features resolve-dependencies` (the install order).
//! They print what the reference prints: its JSON exactly, its text in
//! its shape. A failure is one line on stderr and exit status 1, as the
//! reference's.

use super::args::Parsed;
use super::log::Log;
use super::EXIT_FAILED;
use crate::config::{self, LoadRequest, Loaded};
use crate::features::reference::{self, OciRef, Source};
use crate::features::versions::{self, Version};
use crate::features::{lockfile, Cache, FeatureError, Fetcher, LockMode};
use anyhow::Context as _;
use serde_json::{json, Map, Value};

/// Runs `work` and prints its text on stdout, or its error on stderr.
fn run(name: &str, log: Log, work: impl std::future::Future<Output = anyhow::Result<String>>) -> i32 {
    let done = super::runtime().and_then(|rt| rt.block_on(work));
    match done {
        Ok(text) => match crate::output::print(&text) {
            Ok(()) => 0,
            Err(e) => {
                log.error(&format!("devcontainer {name}: cannot print the result: {e}"));
                EXIT_FAILED
            }
        },
        Err(e) => {
            let chain: Vec<String> = e.chain().map(ToString::to_string).collect();
            log.error(&format!("devcontainer {name}: {}", chain.join(": ")));
            EXIT_FAILED
        }
    }
}

/// The configuration, read as `read-configuration` reads it (a file no
/// room could be made from still names its features).
fn configuration(p: &Parsed) -> anyhow::Result<Loaded> {
    let request = LoadRequest { runnable_only: false, ..super::load_request(p) };
    Ok(config::load(&request)?)
}

/// The lockfile beside the configuration, if there is one.
fn lockfile_of(loaded: &Loaded) -> anyhow::Result<Option<Value>> {
    let path = lockfile::path_for(&loaded.config_path);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// The OCI features the configuration names, as written and as references.
fn oci_features(loaded: &Loaded) -> anyhow::Result<Vec<(String, OciRef)>> {
    let folder = loaded.config_path.parent().unwrap_or(std::path::Path::new("/"));
    let mut out = Vec::new();
    for (id, _) in &loaded.model.features {
        let classified = reference::classify(id, folder)
            .map_err(|e| anyhow::anyhow!("{}: `features[{id:?}]`: {e}", loaded.config_path.display()))?;
        if let Source::Oci(r) = classified.source {
            out.push((id.clone(), r));
        }
    }
    Ok(out)
}

fn fetch_error(r: &OciRef) -> impl FnOnce(crate::features::FetchError) -> FeatureError + '_ {
    move |e| e.into_feature_error(&r.to_reference(), &r.registry)
}

/// `outdated [--output-format json]`.
pub(super) fn outdated(p: &Parsed, log: Log) -> i32 {
    let json_out = p.one("output-format") == Some("json");
    run("outdated", log, async move {
        let loaded = configuration(p)?;
        let locked = lockfile_of(&loaded)?;
        let fetcher = Fetcher::default();
        let mut rows = Vec::new();
        for (id, r) in oci_features(&loaded)? {
            let tags = fetcher.tags(&r).await.map_err(fetch_error(&r))?;
            let pinned = locked.as_ref().and_then(|l| l["features"][&id]["version"].as_str()).map(str::to_string);
            let mut line = versions::outdated(pinned.as_deref(), r.tag.as_deref(), &tags);
            // A digest names one version: the one its manifest declares.
            if r.digest.is_some() && pinned.is_none() {
                let (manifest, _) = fetcher.manifest(&r, None).await.map_err(fetch_error(&r))?;
                let declared = declared_version(&manifest);
                line.current = declared.map(|v| v.to_string());
                line.wanted = declared;
            }
            rows.push((id, r.resource(), line));
        }
        Ok(if json_out { outdated_json(&rows) } else { outdated_text(&rows) })
    })
}

/// The version a feature's manifest declares (its `dev.containers.metadata`).
fn declared_version(manifest: &[u8]) -> Option<Version> {
    let manifest: Value = serde_json::from_slice(manifest).ok()?;
    let metadata: Value = serde_json::from_str(manifest["annotations"]["dev.containers.metadata"].as_str()?).ok()?;
    Version::parse(metadata["version"].as_str()?)
}

fn outdated_json(rows: &[(String, String, versions::Outdated)]) -> String {
    let mut features = Map::new();
    for (id, _, o) in rows {
        let mut entry = Map::new();
        let mut put = |key: &str, v: Option<String>| {
            if let Some(v) = v {
                entry.insert(key.into(), Value::String(v));
            }
        };
        put("current", o.current.clone());
        put("wanted", o.wanted.map(|v| v.to_string()));
        put("wantedMajor", o.wanted.map(|v| v.0.to_string()));
        put("latest", o.latest.map(|v| v.to_string()));
        put("latestMajor", o.latest.map(|v| v.0.to_string()));
        features.insert(id.clone(), Value::Object(entry));
    }
    format!("{}\n", json!({ "features": features }))
}

/// The reference's table: a column each, two spaces apart, the last unpadded.
fn outdated_text(rows: &[(String, String, versions::Outdated)]) -> String {
    let dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|(_, resource, o)| {
            vec![
                resource.clone(),
                dash(o.current.clone()),
                dash(o.wanted.map(|v| v.to_string())),
                dash(o.latest.map(|v| v.to_string())),
            ]
        })
        .collect();
    crate::output::table(&["Feature", "Current", "Wanted", "Latest"], &rows)
}

/// `upgrade [--dry-run]`: every feature resolved afresh by its tag; the
/// lockfile written, or printed with `--dry-run`.
pub(super) fn upgrade(p: &Parsed, log: Log) -> i32 {
    let dry_run = p.on("dry-run");
    run("upgrade", log, async move {
        let loaded = configuration(p)?;
        let say = log.notices();
        let resolved =
            crate::features::resolve(&loaded, LockMode::Unpinned, &Cache::user(), &Fetcher::default(), &say).await?;
        let Some(resolved) = resolved else {
            anyhow::bail!("{} names no features: there is no lockfile to upgrade", loaded.config_path.display())
        };
        let new = crate::features::lockfile_of(&resolved.features);
        if dry_run {
            return Ok(lockfile::text(&new));
        }
        crate::features::write_lockfile(&lockfile::path_for(&loaded.config_path), &new)?;
        Ok(String::new())
    })
}

/// `features info manifest|tags|dependencies|verbose FEATURE [--output-format json]`.
pub(super) fn info(p: &Parsed, log: Log) -> i32 {
    let json_out = p.one("output-format") == Some("json");
    run("features info", log, async move {
        let [mode, feature] = &p.positional[..] else {
            anyhow::bail!("give the mode (manifest, tags, dependencies or verbose) and the feature");
        };
        if !matches!(mode.as_str(), "manifest" | "tags" | "dependencies" | "verbose") {
            anyhow::bail!("the mode is manifest, tags, dependencies or verbose, not {mode:?}");
        }
        let r = reference::parse_oci(feature).map_err(|e| anyhow::anyhow!("{feature:?}: {e}"))?;
        let fetcher = Fetcher::default();
        let mut out = Map::new();
        let mut text = String::new();
        if matches!(mode.as_str(), "manifest" | "verbose" | "dependencies") {
            let (bytes, digest) = fetcher.manifest(&r, None).await.map_err(fetch_error(&r))?;
            let manifest: Value = serde_json::from_slice(&bytes).context("the manifest is not JSON")?;
            let canonical = format!("{}@{digest}", r.resource());
            if mode == "dependencies" {
                text.push_str(&boxed("Dependency Tree (Render with https://mermaid.live/)"));
                text.push_str(&flowchart(&[(feature.clone(), depends_on(&manifest))]));
                text.push('\n');
            } else {
                text.push_str(&boxed("Manifest"));
                text.push_str(&format!("{}\n\n", serde_json::to_string_pretty(&manifest)?));
                text.push_str(&boxed("Canonical Identifier"));
                text.push_str(&format!("{canonical}\n\n"));
                out.insert("manifest".into(), manifest);
                out.insert("canonicalId".into(), Value::String(canonical));
            }
        }
        if matches!(mode.as_str(), "tags" | "verbose") {
            let tags = fetcher.tags(&r).await.map_err(fetch_error(&r))?;
            text.push_str(&boxed("Published Tags"));
            text.push_str(&format!("{}\n", tags.join("\n   ")));
            out.insert("publishedTags".into(), json!(tags));
        }
        Ok(if json_out { format!("{}\n", pretty4(&Value::Object(out))?) } else { text })
    })
}

/// A heading in the reference's box, bold as it prints it.
fn boxed(title: &str) -> String {
    let line = "─".repeat(title.chars().count());
    format!("┌{line}┐\n│\x1b[1m{title}\x1b[22m│\n└{line}┘\n")
}

/// JSON as the reference prints `features info`'s (four spaces).
fn pretty4(v: &Value) -> anyhow::Result<String> {
    use serde::Serialize as _;
    let mut out = Vec::new();
    let mut ser =
        serde_json::Serializer::with_formatter(&mut out, serde_json::ser::PrettyFormatter::with_indent(b"    "));
    v.serialize(&mut ser)?;
    Ok(String::from_utf8(out)?)
}

/// The `dependsOn` a feature's manifest declares.
fn depends_on(manifest: &Value) -> Vec<String> {
    let metadata = manifest["annotations"]["dev.containers.metadata"].as_str();
    let metadata: Value = metadata.and_then(|m| serde_json::from_str(m).ok()).unwrap_or_default();
    metadata["dependsOn"].as_object().map(|d| d.keys().cloned().collect()).unwrap_or_default()
}

/// A mermaid flowchart of features and what each depends on. Node names
/// are workroom's own (a digest of the id), not the reference's.
fn flowchart(features: &[(String, Vec<String>)]) -> String {
    use sha2::Digest as _;
    let node = |id: &str| hex::encode(sha2::Sha256::digest(id.as_bytes()))[..6].to_string();
    let mut out = String::from("flowchart\n");
    for (id, deps) in features {
        out.push_str(&format!("{}[{id}]\n", node(id)));
        for dep in deps {
            out.push_str(&format!("{} --> {}[{dep}]\n", node(id), node(dep)));
        }
    }
    out
}

/// `features resolve-dependencies`: the flowchart, then the install order
/// as the reference prints it (`{"installOrder":[{"id","options"}…]}`),
/// each feature by what it resolved to.
pub(super) fn resolve_dependencies(p: &Parsed, log: Log) -> i32 {
    run("features resolve-dependencies", log, async move {
        let loaded = configuration(p)?;
        let say = log.notices();
        let resolved =
            crate::features::resolve(&loaded, LockMode::ReadOnly, &Cache::user(), &Fetcher::default(), &say).await?;
        let features = resolved.map(|r| r.features).unwrap_or_default();
        let options_of = |user_id: &str| -> Value {
            let top = loaded.model.features.iter().find(|(id, _)| id == user_id).map(|(_, o)| o.clone());
            let dep = || features.iter().find_map(|f| f.json.get("dependsOn")?.get(user_id).cloned());
            match top.or_else(dep) {
                Some(Value::Object(o)) => Value::Object(o),
                _ => json!({}),
            }
        };
        let order: Vec<Value> = features
            .iter()
            .map(|f| {
                let id = match (&f.source, &f.integrity) {
                    (Source::Oci(r), Some(digest)) => format!("{}@{digest}", r.resource()),
                    (Source::Tarball(url), _) => url.clone(),
                    _ => f.user_id.clone(),
                };
                json!({ "id": id, "options": options_of(&f.user_id) })
            })
            .collect();
        let chart: Vec<(String, Vec<String>)> = features
            .iter()
            .map(|f| {
                let deps = f.json.get("dependsOn").and_then(Value::as_object);
                (f.user_id.clone(), deps.map(|d| d.keys().cloned().collect()).unwrap_or_default())
            })
            .collect();
        Ok(format!("{}\n{}\n", flowchart(&chart), serde_json::to_string_pretty(&json!({ "installOrder": order }))?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outdated_text_is_the_references_table_and_its_json_leaves_out_what_is_unknown() {
        let row = |id: &str, current: Option<&str>, wanted: Option<Version>, latest| {
            (
                format!("{id}:1"),
                id.to_string(),
                versions::Outdated { current: current.map(str::to_string), wanted, latest },
            )
        };
        let rows = vec![
            row("localhost:5999/wr/f/hello", Some("1.0.0"), Some(Version(1, 1, 0)), Some(Version(2, 0, 0))),
            row("localhost:5999/wr/f/dev", None, None, None),
        ];
        assert_eq!(
            outdated_text(&rows),
            "Feature                    Current  Wanted  Latest\n\
             localhost:5999/wr/f/hello  1.0.0    1.1.0   2.0.0\n\
             localhost:5999/wr/f/dev    -        -       -\n"
        );
        let json: Value = serde_json::from_str(&outdated_json(&rows)).unwrap();
        assert_eq!(
            json["features"]["localhost:5999/wr/f/hello:1"],
            json!({ "current": "1.0.0", "wanted": "1.1.0", "wantedMajor": "1", "latest": "2.0.0", "latestMajor": "2" })
        );
        assert_eq!(json["features"]["localhost:5999/wr/f/dev:1"], json!({}));
    }

    #[test]
    fn info_json_is_indented_by_four_spaces_and_headings_are_boxed() {
        assert_eq!(pretty4(&json!({ "a": [1] })).unwrap(), "{\n    \"a\": [\n        1\n    ]\n}");
        assert_eq!(boxed("Tags"), "┌────┐\n│\x1b[1mTags\x1b[22m│\n└────┘\n");
    }
}
