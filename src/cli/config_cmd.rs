//! `workroom config`: the resolved configuration, as a summary or in the
//! reference CLI's `read-configuration --workspace-folder` JSON shape, so tools
//! can swap one for the other; with `--include-merged-configuration`, its
//! `mergedConfiguration` too (devcontainer.json merged with the image's
//! metadata, or the room's when it exists).

use super::WorkspaceArgs;
use crate::config::{self, Command, Hook, LoadRequest, Loaded, Source};
use crate::engine::Engine;
use crate::output;
use crate::plan::metadata::{self, RoomMetadata};
use anyhow::Context as _;
use bollard::models::ContainerInspectResponse;
use serde_json::Value;

pub fn run(args: &WorkspaceArgs, as_json: bool, include_merged: bool) -> anyhow::Result<i32> {
    let read = read(args, as_json && include_merged, &|w| eprintln!("warning: {w}"))?;
    if as_json {
        output::print_json(&read.json)?;
    } else {
        output::print(&summary(&read.loaded, read.workspace_line.as_deref()))?;
    }
    for warning in read.loaded.warnings() {
        eprintln!("warning: {warning}");
    }
    Ok(0)
}

/// The configuration as read, for `workroom config` and the devcontainer
/// face's `read-configuration` alike.
pub(super) struct Read {
    pub loaded: Loaded,
    /// The reference's `read-configuration` shape (with `mergedConfiguration`
    /// when asked), and workroom's own under `workroom`.
    pub json: Value,
    workspace_line: Option<String>,
}

/// Reads the workspace's configuration; `warn` hears what merging the
/// image's metadata says.
pub(super) fn read(args: &WorkspaceArgs, include_merged: bool, warn: &dyn Fn(&str)) -> anyhow::Result<Read> {
    read_with(LoadRequest::new(&args.workspace_folder, args.config.clone()), &|_| {}, include_merged, warn)
}

/// [`read`] from a request of the caller's (the devcontainer face's
/// `--override-config`, `--mount-workspace-git-root`), with `adjust`
/// applied to the configuration after each load (its
/// `--additional-features`).
pub(super) fn read_with(
    request: LoadRequest,
    adjust: &dyn Fn(&mut Loaded),
    include_merged: bool,
    warn: &dyn Fn(&str),
) -> anyhow::Result<Read> {
    // As the reference's read-configuration: `${devcontainerId}` and
    // `${containerEnv:...}` are substituted only when the room exists.
    // A file `up` cannot make a room from (no image, a compose file that
    // is not there) is still printed, as read-configuration prints it.
    let mut request = LoadRequest { id_without_container: false, runnable_only: false, ..request };
    let load = |request: &LoadRequest| -> anyhow::Result<Loaded> {
        let mut loaded = config::load(request)?;
        adjust(&mut loaded);
        Ok(loaded)
    };
    let mut loaded = load(&request)?;
    // What `up` would refuse before making anything, `config` refuses too
    // (of a compose config, what its room is planned from).
    match loaded.model.source {
        Source::Compose(_) => {
            crate::plan::create::check(&crate::plan::compose::room_config(&loaded).0, &crate::room::HostFiles)
                .map(drop)?
        }
        _ => crate::plan::create::check(&loaded, &crate::room::HostFiles).map(drop)?,
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let engine = runtime.block_on(Engine::connect());
    // The workspace's room, if the engine answers and the room exists. An
    // unreachable engine is not an error here: the configuration is still
    // worth printing, with the room's variables as written.
    let resolved = crate::room::resolve::Resolved::of(loaded.clone(), Default::default()).ok();
    let room = match (&engine, &resolved) {
        (Ok(engine), Some(resolved)) => runtime.block_on(resolved.find(engine)).ok().flatten(),
        _ => None,
    };
    if let Some(c) = &room {
        request.container_env = Some(crate::room::container_env(c));
        loaded = load(&request)?;
    }
    let workspace = resolved.as_ref().map(|r| workspace_view(r, room.as_ref()));
    let mut out = loaded.reference_json();
    // Beside the reference's keys, under a key of workroom's own.
    if let Some(workspace) = &workspace {
        out["workroom"] = serde_json::json!({ "workspace": workspace.json });
    }
    // A worktree's or submodule's git folder, as `up` mounts it.
    if let Ok(Some(git)) = crate::plan::git::for_workspace(&loaded) {
        out["workroom"]["git"] = serde_json::to_value(&git.summary)?;
    }
    if include_merged {
        let metadata = match &room {
            Some(c) => crate::room::metadata_of(&loaded, c),
            None => {
                let engine = engine.context("--include-merged-configuration reads the image's metadata")?;
                runtime.block_on(image_metadata(&engine, &loaded))?
            }
        };
        for w in &metadata.warnings {
            warn(w);
        }
        let configuration = out["configuration"].as_object().cloned().unwrap_or_default();
        out["mergedConfiguration"] = Value::Object(metadata.configuration(&configuration));
    }
    Ok(Read { loaded, json: out, workspace_line: workspace.map(|w| w.line) })
}

/// Where the room's workspace comes from (ADR 0012), as JSON and as a line.
struct WorkspaceView {
    json: Value,
    line: String,
}

/// An existing room's decision, from its labels; else what `up` would
/// decide without asking the engine; else that `up` will ask. `config`
/// makes nothing, so it never runs the probe (a throwaway container).
fn workspace_view(resolved: &crate::room::resolve::Resolved, room: Option<&ContainerInspectResponse>) -> WorkspaceView {
    use crate::plan::workspace as plan;
    let decided = |d: plan::Decision| {
        let line = match &d.volume {
            Some(volume) => format!("volume {volume} ({})", d.reason.as_str()),
            None => format!("bind ({})", d.reason.as_str()),
        };
        WorkspaceView { json: d.json(), line }
    };
    if let Some(c) = room {
        return decided(plan::Decision::of_labels(c.config.as_ref().and_then(|c| c.labels.as_ref())));
    }
    let mode = resolved.settings.workspace;
    let mount = crate::room::workspace_volume::workspace_mount(&resolved.loaded);
    if plan::needs_probe(mode, mount.as_ref()) {
        let reason = "up asks the engine whether it sees the folder";
        return WorkspaceView {
            json: serde_json::json!({ "mode": "auto", "volume": null, "reason": reason }),
            line: format!("auto ({reason})"),
        };
    }
    decided(plan::decide(&resolved.room_name(), mode, mount.as_ref(), None))
}

/// With no room, the metadata of the image `up` would start from: the
/// configured image, or a Dockerfile's base image (what the reference reads;
/// a build inherits its labels), under devcontainer.json.
async fn image_metadata(engine: &Engine, loaded: &Loaded) -> anyhow::Result<RoomMetadata> {
    let image = match &loaded.model.source {
        Source::Image(image) => image.clone(),
        Source::Dockerfile(build) => {
            let text = std::fs::read_to_string(&build.dockerfile)
                .with_context(|| format!("cannot read {}", build.dockerfile.display()))?;
            crate::plan::dockerfile::base_image(&text, &build.args, build.target.as_deref())
                .with_context(|| format!("{} names no base image for its target stage", build.dockerfile.display()))?
        }
        Source::Compose(c) => anyhow::bail!(
            "--include-merged-configuration of a compose config reads the service's image, which `workroom up` makes; \
             run it first (service {:?})",
            c.service
        ),
        Source::Unset => anyhow::bail!(
            "{}: --include-merged-configuration reads the image's metadata, and the file names no image; \
             set `image` or `build.dockerfile`",
            loaded.config_path.display()
        ),
    };
    let found = engine.inspect_image(&image).await?.with_context(|| {
        format!("image {image} is not present, so its metadata cannot be merged; `workroom up` pulls or builds it")
    })?;
    let label = crate::room::image::facts(&found).metadata;
    // Features are resolved (from the cache when it holds them) but not
    // built: their entries come between the image's and the file's.
    let features =
        crate::features::metadata_entries(loaded, &crate::features::Cache::user(), &super::on_stderr()).await?;
    Ok(metadata::for_new_room(loaded, &image, label.as_deref(), &features))
}

fn summary(loaded: &Loaded, workspace_from: Option<&str>) -> String {
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
            Source::Compose(c) => {
                let files: Vec<String> = c.files.iter().map(|f| f.display().to_string()).collect();
                format!("compose service {} of {}", c.service, files.join(", "))
            }
            Source::Unset => "none (no `image`, `build` or `dockerComposeFile`: `workroom up` needs one)".into(),
        },
    );
    line("workspace folder", loaded.workspace.folder.clone());
    line("workspace mount", loaded.workspace.mount.clone().unwrap_or_else(|| "(none)".into()));
    if let Some(from) = workspace_from {
        line("workspace from", from.to_string());
    }
    match crate::plan::git::for_workspace(loaded) {
        Ok(Some(git)) => line(
            "git folder",
            format!("{} ({}), at {} in the room", git.summary.host_folder, git.summary.kind, git.summary.room_folder),
        ),
        Ok(None) => {}
        Err(skip) => line("git folder", format!("none: {skip}")),
    }
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
