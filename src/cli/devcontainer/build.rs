//! `build`: the room's image as `up` makes it (`room::build`), named by
//! `--image-name`, pushed with `--push`; `{"outcome":"success","imageName":[…]}`.

use super::args::{ArgsError, Parsed};
use super::log::Log;
use crate::engine::Engine;
use crate::features::LockMode;
use crate::plan::platform::Platform;
use crate::room::build::{self, BuildOptions};
use serde_json::json;

pub(super) fn build(p: &Parsed, log: Log) -> i32 {
    let result = super::runtime().and_then(|rt| rt.block_on(build_image(p, log)));
    super::finish("build", log, result)
}

async fn build_image(p: &Parsed, log: Log) -> anyhow::Result<serde_json::Value> {
    let options = options(p)?;
    let resolved = super::resolved(p)?;
    for w in resolved.warnings() {
        log.warn(&w);
    }
    let engine = Engine::connect().await?;
    let notices = log.notices();
    let built = build::build(&engine, &resolved.loaded, &resolved.room_name(), &options, &notices).await?;
    Ok(json!({
        "outcome": "success",
        "imageName": built.image_names,
        "ociAuthDiagnostics": super::oci_auth_diagnostics(),
    }))
}

fn options(p: &Parsed) -> Result<BuildOptions, ArgsError> {
    let lock = match (p.on("frozen-lockfile") || p.on("experimental-frozen-lockfile"), p.on("no-lockfile")) {
        (true, _) => LockMode::Frozen,
        (_, true) => LockMode::Skip,
        _ => LockMode::Write,
    };
    let platform = match p.one("platform") {
        None => None,
        Some(text) => Some(Platform::parse(text).ok_or_else(|| ArgsError::NotPlatform { text: text.to_string() })?),
    };
    let mut options = BuildOptions {
        lock,
        image_names: p.all("image-name").to_vec(),
        labels: p.pairs("label")?,
        push: p.on("push"),
        ..Default::default()
    };
    options.how.no_cache = p.on("no-cache");
    options.how.platform = platform;
    options.how.cache_from = p.all("cache-from").to_vec();
    Ok(options)
}
