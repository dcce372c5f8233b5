//! `up`, `run-user-commands` and `set-up`: the room made or found, started,
//! and the hooks that are due run, by `room::up::up` as `workroom up` does.
//! `run-user-commands` and `set-up` ask it of a room that exists; a
//! container workroom did not make cannot be set up, since its hooks run
//! through the daemon a room gets when workroom creates it.

use super::args::{self, ArgsError, Parsed};
use super::log::Log;
use crate::engine::Engine;
use crate::features::LockMode;
use crate::room::hooks::Scope;
use crate::room::resolve::{Resolved, UpFlags};
use crate::room::up::{self as room_up, UpOptions};
use anyhow::bail;
use serde_json::{json, Map, Value};

/// An error the reference words a way callers may match: its `message`
/// and its `description`, both kept in the result line.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(super) struct Described {
    pub message: String,
    pub description: String,
}

/// `up`: the workspace's room, made or found, started, its due hooks run;
/// the reference's result line on stdout, success or error.
pub(super) fn up(p: &Parsed, log: Log) -> i32 {
    let result = super::runtime().and_then(|rt| rt.block_on(up_room(p, log)));
    let result = result.and_then(|up| with_configuration(p, log, up));
    super::finish("up", log, result)
}

async fn up_room(p: &Parsed, log: Log) -> anyhow::Result<Map<String, Value>> {
    let mut resolved = super::resolved(p)?;
    for w in resolved.warnings() {
        log.warn(&w);
    }
    add_command_line(&mut resolved, p)?;
    let engine = Engine::connect().await?;
    if p.on("expect-existing-container") && resolved.find(&engine).await?.is_none() {
        // The reference's words, which callers may match.
        bail!("The expected container does not exist.");
    }
    let options = up_options(&resolved, p)?;
    let notices = log.notices();
    let r = room_up::up(&engine, &resolved.loaded, &options, &notices).await?;
    // Key for key and in the reference's order (a compose room's project
    // after the container), for callers that compare the text.
    let mut out = Map::new();
    out.insert("outcome".into(), json!("success"));
    out.insert("containerId".into(), json!(r.container_id));
    if let crate::config::Source::Compose(_) = resolved.loaded.model.source {
        out.insert("composeProjectName".into(), json!(compose_project(&engine, &r.container_id).await?));
    }
    out.insert("remoteUser".into(), json!(r.remote_user));
    out.insert("remoteWorkspaceFolder".into(), json!(r.remote_workspace_folder));
    Ok(out)
}

/// The result with `configuration` and `mergedConfiguration` when asked
/// (`--include-configuration`, `--include-merged-configuration`), read as
/// `read-configuration` reads them once the room is up, and the
/// reference's `ociAuthDiagnostics` last.
fn with_configuration(p: &Parsed, log: Log, mut out: Map<String, Value>) -> anyhow::Result<Value> {
    let (configuration, merged) = (p.on("include-configuration"), p.on("include-merged-configuration"));
    if configuration || merged {
        let extra = p.one("additional-features").map(args::additional_features).transpose();
        let extra = extra?.unwrap_or_default();
        let adjust = |loaded: &mut crate::config::Loaded| super::add_features(loaded, &extra);
        let warn = move |w: &str| log.warn(w);
        let read = crate::cli::config_cmd::read_with(super::load_request(p), &adjust, merged, &warn)?;
        for (key, wanted) in [("configuration", configuration), ("mergedConfiguration", merged)] {
            let Some(mut value) = read.json.get(key).cloned().filter(|_| wanted) else { continue };
            if let Some(path) = value.get("configFilePath").and_then(Value::as_str) {
                value["configFilePath"] = super::file_uri(path);
            }
            out.insert(key.into(), value);
        }
    }
    out.insert("ociAuthDiagnostics".into(), super::oci_auth_diagnostics());
    Ok(Value::Object(out))
}

/// How `up` makes and starts the room, from the settings and the command line.
fn up_options(resolved: &Resolved, p: &Parsed) -> Result<UpOptions, ArgsError> {
    let lock = match (p.on("frozen-lockfile") || p.on("experimental-frozen-lockfile"), p.on("no-lockfile")) {
        (true, _) => LockMode::Frozen,
        (_, true) => LockMode::Skip,
        _ => LockMode::Write,
    };
    let flags = UpFlags {
        recreate: p.on("remove-existing-container"),
        post_attach: !p.on("skip-post-attach"),
        name: None,
        lock,
    };
    let mut options = resolved.up_options(flags);
    options.build.no_cache = p.on("build-no-cache");
    options.build.cache_from = p.all("cache-from").to_vec();
    hook_options(&mut options, p)?;
    Ok(options)
}

/// What the command line says of the hooks: which run, with what added
/// to their environment, and the defaults of what the metadata leaves open.
fn hook_options(options: &mut UpOptions, p: &Parsed) -> Result<(), ArgsError> {
    options.remote_env = p.pairs("remote-env")?.into_iter().collect();
    // In the reference's order of precedence.
    options.hooks = match (p.on("skip-post-create"), p.on("skip-non-blocking-commands"), p.on("prebuild")) {
        (true, _, _) => Scope::None,
        (_, true, _) => Scope::UntilWaitFor,
        (_, _, true) => Scope::Prebuild,
        _ if p.on("stop-for-personalization") => Scope::Until(crate::config::Hook::PostCreate),
        _ => Scope::All,
    };
    options.user_env_probe = p.one("default-user-env-probe").map(args::user_env_probe).transpose()?;
    options.uid_default =
        p.one("update-remote-user-uid-default").map(args::uid_default).transpose()?.unwrap_or_default();
    options.dotfiles = p.one("dotfiles-repository").map(|repository| crate::room::hooks::Dotfiles {
        repository: repository.to_string(),
        install_command: p.one("dotfiles-install-command").map(str::to_string),
        target: p.one("dotfiles-target-path").unwrap_or(DOTFILES_TARGET).to_string(),
    });
    Ok(())
}

/// Where dotfiles are cloned unless `--dotfiles-target-path` says (the reference's default).
const DOTFILES_TARGET: &str = "~/dotfiles";

/// The compose label the engine's compose gives every service container.
const COMPOSE_PROJECT_LABEL: &str = "com.docker.compose.project";

async fn compose_project(engine: &Engine, id: &str) -> anyhow::Result<String> {
    use anyhow::Context as _;
    let c = engine.inspect_container(id).await?.with_context(|| format!("the room {id} is gone"))?;
    c.config
        .and_then(|c| c.labels)
        .and_then(|mut l| l.remove(COMPOSE_PROJECT_LABEL))
        .with_context(|| format!("the room {id} has no {COMPOSE_PROJECT_LABEL} label"))
}

/// `--mount` and `--id-label` as the reference applies them: both go on a
/// room made now, through `runArgs` as a file would put them there, so the
/// room's recorded configuration (its `devcontainer.metadata` label and the
/// hash `up` compares) is the file's alone, as the reference records none
/// of them. A room that exists keeps what it was made with, as the
/// reference's does.
fn add_command_line(resolved: &mut Resolved, p: &Parsed) -> Result<(), ArgsError> {
    let run_args = &mut resolved.loaded.model.run_args;
    for mount in p.all("mount") {
        run_args.extend(["--mount".to_string(), args::mount_spec(mount)?]);
    }
    for (name, value) in p.pairs("id-label")? {
        run_args.extend(["--label".to_string(), format!("{name}={value}")]);
    }
    Ok(())
}

/// `run-user-commands`: the due hooks of a room that exists (by
/// `--container-id`, `--id-label` or the workspace folder), as far as the
/// flags say; `{"outcome":"success","result":…}` with the reference's
/// word for where they stopped.
pub(super) fn run_user_commands(p: &Parsed, log: Log) -> i32 {
    let result = super::runtime().and_then(|rt| {
        rt.block_on(async {
            let engine = Engine::connect().await?;
            let id = match (p.one("container-id"), p.all("id-label")) {
                (Some(id), _) => Some(id.to_string()),
                (None, []) => None,
                (None, labels) => Some(super::exec::labelled_room(labels).await.map_err(not_found)?),
            };
            let resolved = match &id {
                Some(id) => of_room(&engine, id).await?,
                None => {
                    let resolved = super::resolved(p)?;
                    resolved.running(&engine).await.map_err(not_found)?;
                    resolved
                }
            };
            let stop = match (p.on("skip-non-blocking-commands"), p.on("prebuild"), p.on("stop-for-personalization")) {
                (true, _, _) => "skipNonBlocking",
                (_, true, _) => "prebuild",
                (_, _, true) => "stopForPersonalization",
                _ => "done",
            };
            let mut flags = UpFlags { post_attach: !p.on("skip-post-attach"), ..Default::default() };
            flags.lock = LockMode::ReadOnly;
            let mut options = resolved.up_options(flags);
            hook_options(&mut options, p)?;
            let notices = log.notices();
            room_up::up(&engine, &resolved.loaded, &options, &notices).await?;
            Ok(json!({ "outcome": "success", "result": stop }))
        })
    });
    super::finish("run-user-commands", log, result)
}

/// The reference's words for a room that is not there.
fn not_found(e: impl Into<anyhow::Error>) -> anyhow::Error {
    let e = e.into();
    Described {
        message: format!("Dev container not found. ({e:#})"),
        description: "An error occurred running user commands in the container.".into(),
    }
    .into()
}

/// A running room by id or name, with the configuration its labels name;
/// refused for a container workroom did not make, and for a room `up`
/// would not find from that configuration (one made with `--name`).
async fn of_room(engine: &Engine, id: &str) -> anyhow::Result<Resolved> {
    use crate::room::resolve::FindError;
    let (room, resolved) = match crate::room::resolve::by_name(engine, id).await {
        Ok(found) => found,
        Err(FindError::NotOurs { name }) => bail!(
            "{name} was not made by workroom: its hooks cannot be run, since they run through the daemon a room \
             gets when workroom creates it; `devcontainer up` makes a room"
        ),
        Err(e) => return Err(not_found(e)),
    };
    let Some(resolved) = resolved else {
        bail!("{}: the devcontainer.json it was made from cannot be read now; run `up` from its workspace", room.name)
    };
    if resolved.room_name() != room.name {
        bail!(
            "{} was made by `workroom up --name` (or under other settings); `workroom up` with the same flags runs its hooks",
            room.name
        );
    }
    Ok(resolved)
}

/// `set-up --container-id ID`: a room of workroom's is set up as `up`
/// would (its due hooks, as far as the flags say); `{"outcome":"success"}`,
/// with the configuration when asked.
pub(super) fn set_up(p: &Parsed, log: Log) -> i32 {
    let Some(id) = p.one("container-id") else {
        let e = anyhow::anyhow!("devcontainer set-up needs --container-id (the container to set up)");
        return super::finish("set-up", log, Err(e));
    };
    let result = super::runtime().and_then(|rt| {
        rt.block_on(async {
            let engine = Engine::connect().await?;
            let mut resolved = of_room(&engine, id).await?;
            if let Some(config) = p.one("config") {
                let folder = resolved.loaded.workspace.local_folder.clone();
                resolved = Resolved::load(&folder, Some(config.into()), Default::default())?;
            }
            let flags = UpFlags { lock: LockMode::ReadOnly, post_attach: true, ..Default::default() };
            let mut options = resolved.up_options(flags);
            hook_options(&mut options, p)?;
            let notices = log.notices();
            room_up::up(&engine, &resolved.loaded, &options, &notices).await?;
            let mut out = Map::new();
            out.insert("outcome".into(), json!("success"));
            if p.on("include-configuration") {
                out.insert("configuration".into(), Value::Object(resolved.loaded.json.clone()));
            }
            if p.on("include-merged-configuration") {
                let c = engine.inspect_container(id).await?;
                if let Some(c) = c {
                    let metadata = crate::room::metadata_of(&resolved.loaded, &c);
                    out.insert(
                        "mergedConfiguration".into(),
                        Value::Object(metadata.configuration(&resolved.loaded.json)),
                    );
                }
            }
            Ok(Value::Object(out))
        })
    });
    super::finish("set-up", log, result)
}
