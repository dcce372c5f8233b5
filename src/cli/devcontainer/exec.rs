//! `exec` (a command in the room, its output and status passed through)
//! and `read-configuration` (the configuration, as the reference prints it).

use super::args::{self, Parsed};
use super::log::Log;
use super::{file_uri, EXIT_FAILED};
use crate::engine::Engine;
use anyhow::bail;
use serde_json::Value;

/// `exec CMD ARGS…`: the command's exit status passed through.
pub(super) fn exec(p: &Parsed, log: Log) -> i32 {
    if p.positional.is_empty() {
        log.error("devcontainer exec: no command given (devcontainer exec --workspace-folder DIR CMD ARGS…)");
        return EXIT_FAILED;
    }
    let remote_env = match p.pairs("remote-env") {
        Ok(pairs) => pairs,
        Err(e) => {
            log.error(&format!("devcontainer exec: {e}"));
            return EXIT_FAILED;
        }
    };
    let ran = super::runtime().and_then(|rt| {
        rt.block_on(async {
            let room = match (p.one("container-id"), p.all("id-label")) {
                (Some(id), _) => Some(id.to_string()),
                (None, []) => None,
                (None, labels) => Some(labelled_room(labels).await?),
            };
            let request = super::load_request(p);
            crate::cli::exec_cmd::run_with(room.as_deref(), &request, false, p.positional.clone(), &remote_env).await
        })
    });
    match ran {
        Ok(code) => code,
        Err(e) => {
            log.error(&format!("devcontainer exec: {e:#}"));
            EXIT_FAILED
        }
    }
}

/// The running container that carries every `--id-label` (as `up
/// --id-label` put them on the room), by id.
pub(super) async fn labelled_room(labels: &[String]) -> anyhow::Result<String> {
    for label in labels {
        args::name_value("id-label", label)?;
    }
    let engine = Engine::connect().await?;
    let found = engine.list(labels).await?;
    let running: Vec<&str> = found
        .iter()
        .filter(|c| c.state == Some(bollard::models::ContainerSummaryStateEnum::RUNNING))
        .filter_map(|c| c.id.as_deref())
        .collect();
    match running[..] {
        [id] => Ok(id.to_string()),
        // The reference's words, which callers may match.
        [] => bail!(
            "Dev container not found. (no running container carries the labels {}; `devcontainer up --id-label` makes one)",
            labels.join(", ")
        ),
        _ => bail!(
            "{} running containers carry the labels {}; --container-id names one",
            running.len(),
            labels.join(", ")
        ),
    }
}

/// `read-configuration`: the reference's JSON on one stdout line.
pub(super) fn read_configuration(p: &Parsed, log: Log) -> i32 {
    let warn = move |w: &str| log.warn(w);
    let extra = match p.one("additional-features").map(args::additional_features).transpose() {
        Ok(extra) => extra.unwrap_or_default(),
        Err(e) => {
            log.error(&format!("devcontainer read-configuration: {e}"));
            return EXIT_FAILED;
        }
    };
    let adjust = |loaded: &mut crate::config::Loaded| super::add_features(loaded, &extra);
    let include_merged = p.on("include-merged-configuration");
    let read = crate::cli::config_cmd::read_with(super::load_request(p), &adjust, include_merged, &warn);
    match read {
        Ok(read) => {
            for w in read.loaded.warnings() {
                log.warn(&w);
            }
            let mut out = read.json;
            for key in ["configuration", "mergedConfiguration"] {
                if let Some(path) = out.get(key).and_then(|c| c.get("configFilePath")).and_then(Value::as_str) {
                    out[key]["configFilePath"] = file_uri(path);
                }
            }
            match crate::output::print_json_line(&out) {
                Ok(()) => 0,
                Err(e) => {
                    log.error(&format!("devcontainer read-configuration: cannot print the result: {e}"));
                    EXIT_FAILED
                }
            }
        }
        Err(e) => {
            let chain: Vec<String> = e.chain().map(ToString::to_string).collect();
            log.error(&chain.join(": "));
            EXIT_FAILED
        }
    }
}
