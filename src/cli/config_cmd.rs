//! `workroom config`: the resolved configuration, as a summary or in the
//! reference CLI's `read-configuration --workspace-folder` JSON shape, so tools
//! can swap one for the other.

use super::WorkspaceArgs;
use crate::config::{self, Command, Hook, LoadRequest, Loaded, Source};
use crate::output;

pub fn run(args: &WorkspaceArgs, as_json: bool) -> anyhow::Result<i32> {
    let loaded = config::load(&LoadRequest::new(&args.workspace_folder, args.config.clone()))?;
    if as_json {
        output::print_json(&loaded.reference_json())?;
    } else {
        output::print(&summary(&loaded))?;
    }
    for unknown in &loaded.model.unknown {
        eprintln!("warning: {}: unknown property `{unknown}` (ignored)", loaded.config_path.display());
    }
    Ok(0)
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
            Source::Dockerfile(b) => format!("build {} (context {})", b.dockerfile.display(), b.context.display()),
        },
    );
    line("workspace folder", loaded.workspace.folder.clone());
    line("workspace mount", loaded.workspace.mount.clone().unwrap_or_else(|| "(none)".into()));
    line("remote user", m.remote_user.clone().or(m.container_user.clone()).unwrap_or_else(|| "(image user)".into()));
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
        Command::Parallel(named) => {
            named.iter().map(|(n, c)| format!("{n}: {}", describe(c))).collect::<Vec<_>>().join("; ")
        }
    }
}
