//! `workroom config`: the resolved configuration, as a summary or in the
//! reference CLI's `read-configuration --workspace-folder` JSON shape, so tools
//! can swap one for the other.

use super::WorkspaceArgs;
use crate::config::{self, Command, Hook, LoadRequest, Loaded, Source};
use crate::output;

pub fn run(args: &WorkspaceArgs, as_json: bool) -> anyhow::Result<i32> {
    // As the reference's read-configuration: `${devcontainerId}` and
    // `${containerEnv:...}` are substituted only when the room exists.
    let mut request =
        LoadRequest { id_without_container: false, ..LoadRequest::new(&args.workspace_folder, args.config.clone()) };
    let mut loaded = config::load(&request)?;
    if let Some(env) = room_env(&loaded) {
        request.container_env = Some(env);
        loaded = config::load(&request)?;
    }
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

/// The environment of the workspace's room, if the engine answers and the
/// room exists. An unreachable engine is not an error here: the
/// configuration is still worth printing, with those variables as written.
fn room_env(loaded: &Loaded) -> Option<std::collections::HashMap<String, String>> {
    let settings = crate::settings::load(&loaded.workspace.local_folder, Default::default()).ok()?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
    runtime.block_on(async {
        let engine = crate::engine::Engine::connect().await.ok()?;
        let room = crate::room::locate(&engine, loaded, settings.wanted_group()).await.ok()??;
        Some(crate::room::container_env(&room))
    })
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
