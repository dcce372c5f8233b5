//! `workroom config`: the resolved configuration, as a summary or in the
//! reference CLI's `read-configuration --workspace-folder` JSON shape, so tools
//! can swap one for the other.

use super::WorkspaceArgs;
use crate::config::{self, Command, Hook, LoadRequest, Loaded, Source};
use crate::output;
use serde_json::{json, Value};

pub fn run(args: &WorkspaceArgs, as_json: bool) -> anyhow::Result<i32> {
    let loaded = config::load(&LoadRequest::new(
        &args.workspace_folder,
        args.config.clone(),
    ))?;
    if as_json {
        output::print_json(&reference_shape(&loaded))?;
    } else {
        output::print(&summary(&loaded))?;
    }
    for unknown in &loaded.model.unknown {
        eprintln!(
            "warning: {}: unknown property `{unknown}` (ignored)",
            loaded.config_path.display()
        );
    }
    Ok(0)
}

/// `{"configuration": {...}, "workspace": {...}}` with `configFilePath` a plain path.
pub fn reference_shape(loaded: &Loaded) -> Value {
    let mut configuration = loaded.json.clone();
    configuration.insert("configFilePath".into(), json!(loaded.config_path));
    let mut workspace = serde_json::Map::new();
    workspace.insert("workspaceFolder".into(), json!(loaded.workspace.folder));
    // The reference prints the empty string it was given for "no mount".
    let mount = loaded.workspace.mount.clone().unwrap_or_default();
    workspace.insert("workspaceMount".into(), json!(mount));
    json!({ "configuration": configuration, "workspace": workspace })
}

fn summary(loaded: &Loaded) -> String {
    let m = &loaded.model;
    let mut out = String::new();
    let mut line = |k: &str, v: String| out.push_str(&format!("{k:<18}{v}\n"));
    line("config", loaded.config_path.display().to_string());
    if let Some(name) = &m.name {
        line("name", name.clone());
    }
    line(
        "source",
        match &m.source {
            Source::Image(image) => format!("image {image}"),
            Source::Dockerfile(b) => format!(
                "build {} (context {})",
                b.dockerfile.display(),
                b.context.display()
            ),
        },
    );
    line("workspace folder", loaded.workspace.folder.clone());
    line(
        "workspace mount",
        loaded
            .workspace
            .mount
            .clone()
            .unwrap_or_else(|| "(none)".into()),
    );
    line(
        "remote user",
        m.remote_user
            .clone()
            .or(m.container_user.clone())
            .unwrap_or_else(|| "(image user)".into()),
    );
    for hook in Hook::ALL {
        if let Some(cmd) = m.lifecycle.get(hook) {
            line(hook.property(), describe(cmd));
        }
    }
    out
}

fn describe(cmd: &Command) -> String {
    match cmd {
        Command::Shell(s) => s.clone(),
        Command::Exec(argv) => format!("{argv:?}"),
        Command::Parallel(named) => named
            .iter()
            .map(|(n, c)| format!("{n}: {}", describe(c)))
            .collect::<Vec<_>>()
            .join("; "),
    }
}
