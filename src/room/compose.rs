//! A compose room: the service devcontainer.json names, in the user's
//! compose project, run by the real compose program. The sequence of making
//! one (`up` comes here from its one branch point when the config is a
//! compose config), starting a stopped one, and `stop`/`down` by
//! `shutdownAction`. The decisions are in `plan/compose.rs`.
//!
//! Making: `compose config` (the project as compose reads it) → the
//! service's image (built or pulled by compose) → the room's plan, as for
//! an image room → the override file, in workroom's state folder →
//! `compose up --no-start` → (egress `allowlist` or `none`: the project's
//! network checked to be what was asked, `plan/compose/egress.rs`) → the
//! daemon uploaded into the created service container → `compose up -d
//! --no-recreate`. A refused `up` removes every
//! container, network and volume of the project that was not there before.
//!
//! The override names the service's container after the room, so every
//! other command finds a compose room as it finds any room (one inspect by
//! name), and a second `up` takes the same fast path as image rooms
//! without running compose at all.

use super::creating::{self, CreatorLock, Lock};
use super::make::{Created, Making, RoomPlan};
use crate::config::{Compose, Loaded};
use crate::engine::compose::{declares_name, ComposeError, Program, ProjectObjects};
use crate::engine::{Engine, EngineError};
use crate::notices::Notices;
use crate::plan::compose::{self as plan, OverrideError, OverrideInputs, ProjectInputs, Service};
use crate::plan::create;
use crate::plan::egress::RoomNetwork;
use crate::settings::EgressMode;
use anyhow::Context as _;
use bollard::models::{ContainerInspectResponse, ContainerStateStatusEnum, ContainerSummary};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long `stop` gives the project's containers before compose kills
/// them: the daemon ends its panes' shells with SIGHUP first, at once.
const STOP_GRACE_SECONDS: &str = "10";

/// How long an `up` waits for another making the same compose room: that
/// one may be building the service's image, which takes minutes.
const MAKE_WAIT: Duration = Duration::from_secs(600);

#[derive(Debug, thiserror::Error)]
pub enum ComposeRoomError {
    #[error("{config}: `service` names {service:?}, which is not a service of {files}; its services: {services}")]
    NoService { config: String, service: String, files: String, services: String },
    #[error("{config}: `runServices` names {service:?}, which is not a service of {files}; its services: {services}")]
    NoRunService { config: String, service: String, files: String, services: String },
    #[error("{config}: service {service:?} has neither `image` nor `build` in {files}")]
    NoImage { config: String, service: String, files: String },
    #[error("image {image} of service {service:?} is not there after compose {action}")]
    ImageMissing { image: String, service: String, action: &'static str },
    #[error("{config}: {problem}")]
    Override { config: String, problem: OverrideError },
    #[error("{files}: {problem}")]
    Egress { files: String, problem: plan::egress::ProjectEgressError },
    #[error("compose made no container {name} for service {service:?}")]
    NotMade { name: String, service: String },
    #[error("cannot write {path}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("no place for the override file")]
    Folder(#[source] crate::folders::FolderError),
    #[error("another `up` has been making or starting {name} for {waited} s; run `up` again once it is done")]
    Busy { name: String, waited: u64 },
    #[error(transparent)]
    Compose(#[from] ComposeError),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// The project as compose reads it.
#[derive(Debug, Clone)]
struct Project {
    name: String,
    files: Vec<PathBuf>,
    env_file: Option<PathBuf>,
    service_name: String,
    service: Service,
    /// `version:` of the first file.
    version: Option<String>,
    /// The project as `compose config` printed it.
    printed: Value,
}

impl Project {
    /// `-p NAME -f FILE... [-f OVERRIDE] [--env-file FILE]`.
    fn global(&self, override_file: Option<&Path>) -> Vec<String> {
        global_args(&self.name, self.files.iter().map(|f| f.as_path()).chain(override_file), self.env_file.as_deref())
    }

    fn files_shown(&self) -> String {
        self.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", ")
    }
}

fn global_args<'a>(project: &str, files: impl Iterator<Item = &'a Path>, env_file: Option<&Path>) -> Vec<String> {
    let mut args = vec!["-p".to_string(), project.to_string()];
    for f in files {
        args.extend(["-f".to_string(), f.display().to_string()]);
    }
    if let Some(env) = env_file {
        args.extend(["--env-file".to_string(), env.display().to_string()]);
    }
    args
}

/// The compose program, run from the workspace folder as the reference runs it.
async fn program(loaded: &Loaded) -> Result<Program, ComposeError> {
    Ok(Program::find().await?.within(&loaded.workspace.local_folder))
}

/// Reads the project: `compose config` of the files, the service and
/// `runServices` checked against it, and the project's name.
async fn read_project(program: &Program, loaded: &Loaded, compose: &Compose) -> Result<Project, ComposeRoomError> {
    let config = loaded.config_path.display().to_string();
    let files_global = global_args("", compose.files.iter().map(|f| f.as_path()), compose.env_file.as_deref());
    // `config` needs no project name; the reference asks without one.
    let printed = program.config(&files_global[2..], &compose.files[0].display().to_string()).await?;
    let names = plan::service_names(&printed);
    let files = compose.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", ");
    let listed = || if names.is_empty() { "(none)".to_string() } else { names.join(", ") };
    let service = Service::of(&printed, &compose.service).ok_or_else(|| ComposeRoomError::NoService {
        config: config.clone(),
        service: compose.service.clone(),
        files: files.clone(),
        services: listed(),
    })?;
    if let Some(missing) = compose.run_services.iter().flatten().find(|s| !names.contains(s)) {
        return Err(ComposeRoomError::NoRunService { config, service: missing.clone(), files, services: listed() });
    }
    let config_name = printed.get("name").and_then(Value::as_str);
    // Only asked when compose printed the name it gives files in
    // `.devcontainer/` by itself.
    let files_name_it = config_name == Some("devcontainer")
        && compose.files.iter().any(|f| std::fs::read_to_string(f).is_ok_and(|t| declares_name(&t)));
    let workspace = &loaded.workspace.local_folder;
    let dot_env = std::fs::read_to_string(workspace.join(".env")).ok();
    let env_name = std::env::var("COMPOSE_PROJECT_NAME").ok();
    let name = plan::project_name(&ProjectInputs {
        env: env_name.as_deref(),
        dot_env: dot_env.as_deref(),
        config_name,
        files_name_it,
        first_file: &compose.files[0],
        workspace,
        // docker-compose 1.21 allowed `-` and `_`; an unknown version is
        // taken to be new, as the reference takes it.
        new_names: program.version.is_none_or(|v| v >= (1, 21, 0)),
        worktree: super::worktree::checkout_of(workspace).is_some_and(|c| c.linked),
    });
    let version = std::fs::read_to_string(&compose.files[0]).ok().and_then(|t| plan::file_version(&t));
    Ok(Project {
        name,
        files: compose.files.clone(),
        env_file: compose.env_file.clone(),
        service_name: compose.service.clone(),
        service,
        version,
        printed,
    })
}

/// The image the room's service runs, and what the plan needs of it.
struct ServiceImage {
    name: String,
    facts: create::ImageFacts,
    /// The room runs another image than the compose file names: the
    /// override's `image:` points at it.
    derived: bool,
}

/// The one way to the service's image: built by compose when the service
/// has `build:`, else the file's image, pulled by compose when missing.
///
/// The config's features extend that image, as the reference extends the
/// service's image, and the override then names the derived one.
async fn service_image(
    engine: &Engine,
    program: &Program,
    project: &Project,
    loaded: &Loaded,
    lock: crate::features::LockMode,
    how: &super::image::BuildHow,
    say: &Notices,
) -> anyhow::Result<ServiceImage> {
    let service = &project.service_name;
    let global = project.global(None);
    let (image, action) = if project.service.build {
        program.run(&global, &["build".to_string(), service.clone()], &|line| say.say(line)).await?;
        let image = project
            .service
            .image
            .clone()
            .unwrap_or_else(|| plan::default_image_name(&project.name, service, program.version));
        (image, "build")
    } else {
        let image = project.service.image.clone().ok_or_else(|| ComposeRoomError::NoImage {
            config: loaded.config_path.display().to_string(),
            service: service.clone(),
            files: project.files_shown(),
        })?;
        if engine.inspect_image(&image).await?.is_none() {
            program.run(&global, &["pull".to_string(), service.clone()], &|line| say.say(line)).await?;
        }
        (image, "pull")
    };
    let found = engine.inspect_image(&image).await?.ok_or_else(|| ComposeRoomError::ImageMissing {
        image: image.clone(),
        service: service.clone(),
        action,
    })?;
    let (name, facts) =
        super::features::image_for(engine, loaded, (image.clone(), super::image::facts(&found)), lock, how, say)
            .await?;
    Ok(ServiceImage { derived: name != image, name, facts })
}

/// The service's image as a compose room of `loaded` would be made from,
/// with the config's features: for `devcontainer build`.
pub(super) async fn service_image_for_build(
    engine: &Engine,
    loaded: &Loaded,
    compose: &Compose,
    lock: crate::features::LockMode,
    how: &super::image::BuildHow,
    say: &Notices,
) -> anyhow::Result<(String, bollard::models::ImageInspect)> {
    let program = program(loaded).await?;
    let project = read_project(&program, loaded, compose).await?;
    let (room, said) = plan::room_config(loaded);
    for w in said {
        say.warn(w);
    }
    let image = service_image(engine, &program, &project, &room, lock, how, say).await?;
    let found = engine.inspect_image(&image.name).await?.ok_or_else(|| ComposeRoomError::ImageMissing {
        image: image.name.clone(),
        service: project.service_name.clone(),
        action: "build",
    })?;
    Ok((image.name, found))
}

/// Makes the compose room `name` (`up`'s create step for a compose config).
pub(super) async fn create_room(asked: &Making<'_>, compose: &Compose) -> anyhow::Result<Created> {
    let Making { engine, loaded, name, options, say, .. } = *asked;
    // Two `up`s of one workspace: the second waits here, then finds the
    // room. Held until the room has started, or is removed again: another
    // `up` finding it `created` meanwhile waits instead of taking it for one
    // a dead `up` left.
    let _making = making(name).await?;
    if let Some(c) = engine.inspect_container(name).await? {
        return Ok(Created::Theirs(c));
    }
    let program = program(loaded).await?;
    let project = read_project(&program, loaded, compose).await?;
    let (room, said) = plan::room_config(loaded);
    for w in said {
        say.warn(w);
    }
    // In `allowlist` and `none` mode the whole project goes on its internal
    // network; what of the files would open a way around it, and the
    // room's own refusals, come before anything is built or pulled.
    let held = match options.egress {
        EgressMode::Open => None,
        mode => Some(
            plan::egress::project_egress(&project.printed, &project.name, mode)
                .map_err(|problem| ComposeRoomError::Egress { files: project.files_shown(), problem })?,
        ),
    };
    let network = match &held {
        Some(held) => RoomNetwork::Project { services: &held.services },
        None => RoomNetwork::Nothing,
    };
    let mut dry = create::check(&room, &super::HostFiles)?;
    crate::plan::caps::apply(&mut dry, &options.caps)?;
    crate::plan::egress::apply_on(&mut dry, options.egress, network)
        .map_err(|e| anyhow::anyhow!("{}: {e}", loaded.config_path.display()))?;
    let image = service_image(engine, &program, &project, &room, options.lock, &options.build, say).await?;
    let facts = plan::service_facts(&image.facts, &project.service);
    // A platform we carry no daemon for is refused before compose makes anything.
    let daemon = super::daemon::for_image(engine, &image.name).await?;
    let RoomPlan { mut plan, metadata, peers: peer_setup } =
        super::make::room_plan(asked, &room, &image.name, &facts, network).await?;
    let labels = plan.body.labels.get_or_insert_with(Default::default);
    labels.insert(crate::plan::platform::PLATFORM_LABEL.into(), daemon.arch.platform().into());
    labels.insert(plan::SHUTDOWN_LABEL.into(), shutdown_action(loaded).into());
    if let Some(env) = &project.env_file {
        labels.insert(plan::ENV_FILE_LABEL.into(), env.display().to_string());
    }
    let external = plan::external_volumes(&metadata.merged.mounts, peer_setup.as_ref().map(|p| p.join.volume.as_str()));
    let inputs = OverrideInputs {
        service: &project.service_name,
        version: project.version.as_deref(),
        image: image.derived.then_some(image.name.as_str()),
        container_name: name,
        external_volumes: &external,
    };
    let mut file = plan::override_file(&plan, &inputs)
        .map_err(|problem| ComposeRoomError::Override { config: loaded.config_path.display().to_string(), problem })?;
    if let Some(held) = &held {
        plan::egress::add_to_override(&mut file, held);
        if options.egress == EgressMode::Allowlist {
            if let Some(folder) = super::make::egress_socket_folder(name, say) {
                plan::egress::add_socket_folder(&mut file, &project.service_name, &folder);
            }
        }
    }
    let override_path = write_override(name, &file)?;
    let global = project.global(Some(&override_path));
    let services = plan::services_to_run(&project.service_name, compose.run_services.as_deref());
    let upload_folder = plan.upload_folder();
    let tar = super::daemon::upload_tar_into(&daemon.bytes, workroomd::room::DAEMON_PATH, upload_folder)
        .context("pack the daemon for upload")?;

    let before = engine.project_objects(&project.name).await?;
    let made = async {
        let up: Vec<String> = ["up", "--no-start"].map(String::from).into_iter().chain(services.clone()).collect();
        program.run(&global, &up, &|line| say.say(line)).await?;
        if let Some(held) = &held {
            // Before any service runs: the network is what was asked, or
            // the engine dropped what holds the project in.
            let made = engine.inspect_network(&held.network).await?;
            plan::egress::network_holds(&held.network, made.as_ref(), options.egress)?;
        }
        let c = engine.inspect_container(name).await?.ok_or_else(|| ComposeRoomError::NotMade {
            name: name.to_string(),
            service: project.service_name.clone(),
        })?;
        let id = c.id.clone().unwrap_or_else(|| name.to_string());
        engine.upload(&id, upload_folder, tar).await.context("upload the daemon into the room")?;
        // `--no-recreate`: a container compose would otherwise replace
        // (its configuration hash changed) keeps the daemon just uploaded.
        let start: Vec<String> =
            ["up", "-d", "--no-recreate"].map(String::from).into_iter().chain(services.clone()).collect();
        program.run(&global, &start, &|line| say.say(line)).await?;
        super::make::started(engine, &room, &metadata, &id, name).await
    }
    .await;
    match made {
        Ok((c, link)) => Ok(Created::Ours(c, peer_setup.map(Box::new), Box::new((metadata, link)))),
        Err(e) if super::make::engine_stalled(&e) => Err(e.context(super::make::kept(name))),
        Err(e) => {
            remove_made(engine, &project.name, &before).await;
            Err(e.context(format!("{name} was not made (what it made of compose project {} is removed)", project.name)))
        }
    }
}

/// `shutdownAction` of a compose config: `stopCompose` unless `none`.
fn shutdown_action(loaded: &Loaded) -> &'static str {
    match loaded.model.shutdown_action.as_deref() {
        Some("none") => "none",
        _ => "stopCompose",
    }
}

/// Removes what compose made of `project` since `before`: its new
/// containers, then networks, then volumes (a refused `up` leaves none).
async fn remove_made(engine: &Engine, project: &str, before: &ProjectObjects) {
    let Ok(now) = engine.project_objects(project).await else { return };
    for id in now.containers.iter().filter(|c| !before.containers.contains(c)) {
        let _ = engine.remove(id, true).await;
    }
    for n in now.networks.iter().filter(|n| !before.networks.contains(n)) {
        let _ = engine.remove_network(n).await;
    }
    for v in now.volumes.iter().filter(|v| !before.volumes.contains(v)) {
        let _ = engine.remove_volume(v).await;
    }
}

/// Starts a stopped compose room with its project, as made: the files its
/// labels name, `up -d --no-recreate` of the services the config runs.
pub(super) async fn start(
    engine: &Engine,
    loaded: &Loaded,
    compose: &Compose,
    c: &ContainerInspectResponse,
    name: &str,
    say: &Notices,
) -> anyhow::Result<()> {
    let _making = making(name).await?;
    let c = engine.inspect_container(name).await?.unwrap_or_else(|| c.clone());
    match c.state.as_ref().and_then(|s| s.status) {
        Some(ContainerStateStatusEnum::RUNNING) => return Ok(()),
        Some(ContainerStateStatusEnum::PAUSED) => anyhow::bail!("{name} is paused; `docker unpause {name}` first"),
        _ => {}
    }
    let labels = c.config.as_ref().and_then(|c| c.labels.clone()).unwrap_or_default();
    let Some(global) = made_with(&labels) else {
        // Its files are gone: the room alone, through the engine.
        engine.start(c.id.as_deref().unwrap_or(name)).await?;
        return Ok(());
    };
    let program = program(loaded).await?;
    let services = plan::services_to_run(&compose.service, compose.run_services.as_deref());
    let start: Vec<String> = ["up", "-d", "--no-recreate"].map(String::from).into_iter().chain(services).collect();
    program.run(&global, &start, &|line| say.say(line)).await?;
    Ok(())
}

/// The project options a container was made with, from compose's labels
/// (its project and files) and ours (the env file); `None` when a file is
/// gone.
fn made_with(labels: &std::collections::HashMap<String, String>) -> Option<Vec<String>> {
    let project = labels.get(plan::PROJECT_LABEL)?;
    let files: Vec<PathBuf> = labels.get(plan::CONFIG_FILES_LABEL)?.split(',').map(PathBuf::from).collect();
    if files.is_empty() || files.iter().any(|f| !f.is_file()) {
        return None;
    }
    let env_file = labels.get(plan::ENV_FILE_LABEL).map(PathBuf::from).filter(|f| f.is_file());
    Some(global_args(project, files.iter().map(|f| f.as_path()), env_file.as_deref()))
}

/// The compose project of a room, if it is a compose room.
pub fn project_of(c: &ContainerSummary) -> Option<&str> {
    c.labels.as_ref()?.get(plan::PROJECT_LABEL).map(String::as_str)
}

/// `stop` of a compose room, by its `shutdownAction`: the whole project
/// (`stopCompose`), or the room alone (`none`, returns `false`: the
/// caller stops it as any room).
pub async fn stop(engine: &Engine, c: &ContainerSummary, say: &Notices) -> anyhow::Result<bool> {
    shutdown(engine, c, say, &["stop".to_string(), "-t".to_string(), STOP_GRACE_SECONDS.to_string()]).await
}

/// `down` of a compose room, by its `shutdownAction`: the whole project
/// (`stopCompose`; with `volumes`, its volumes too), or the room alone
/// (`none`, returns `false`: the caller removes it as any room).
pub async fn down(engine: &Engine, c: &ContainerSummary, volumes: bool, say: &Notices) -> anyhow::Result<bool> {
    let mut args = vec!["down".to_string()];
    if volumes {
        args.push("--volumes".into());
    }
    let project = shutdown(engine, c, say, &args).await?;
    // The room goes, so its override goes too (its lock file stays: see
    // `creating`).
    if let Some(name) = c.names.iter().flatten().next().filter(|_| project_of(c).is_some()) {
        if let Some(dir) = crate::forward::state::dir() {
            let _ = std::fs::remove_file(override_path(&dir, name.trim_start_matches('/')));
        }
    }
    Ok(project)
}

async fn shutdown(engine: &Engine, c: &ContainerSummary, say: &Notices, args: &[String]) -> anyhow::Result<bool> {
    let labels = c.labels.clone().unwrap_or_default();
    let Some(project) = labels.get(plan::PROJECT_LABEL) else { return Ok(false) };
    if labels.get(plan::SHUTDOWN_LABEL).map(String::as_str) == Some("none") {
        return Ok(false);
    }
    let Some(global) = made_with(&labels) else {
        // The files are gone: what compose would stop or remove, by label.
        say.warn(format!("the compose files of project {project} are gone; acting on its containers by label"));
        let objects = engine.project_objects(project).await?;
        match args[0].as_str() {
            "down" => remove_made(engine, project, &ProjectObjects::default()).await,
            _ => {
                for id in &objects.containers {
                    engine.stop(id, std::time::Duration::from_secs(10)).await?;
                }
            }
        }
        return Ok(true);
    };
    let program = Program::find().await?;
    program.run(&global, args, &|line| say.say(line)).await?;
    Ok(true)
}

/// Where the override file of room `name` is written, in the state folder
/// `dir` (this user's alone: the file holds the room's environment).
fn override_path(dir: &Path, name: &str) -> PathBuf {
    dir.join("compose").join(format!("{name}.yml"))
}

/// Writes the override file (whole, then renamed into place: compose
/// never reads half a file).
fn write_override(name: &str, file: &Value) -> Result<PathBuf, ComposeRoomError> {
    let path = override_path(&crate::forward::state::made().map_err(ComposeRoomError::Folder)?, name);
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(path.parent().unwrap_or(Path::new("/")))?;
        workroomd::atomic::write(&path, serde_json::to_string_pretty(file).map_err(std::io::Error::other)?.as_bytes())
    };
    write().map_err(|source| ComposeRoomError::Write { path: path.clone(), source })?;
    Ok(path)
}

/// The room's "being made" lock, the one every kind of room takes, held
/// while compose makes or starts it.
async fn making(name: &str) -> Result<Option<CreatorLock>, ComposeRoomError> {
    match creating::wait_to_make(name, MAKE_WAIT).await {
        Lock::Held(lock) => Ok(Some(lock)),
        Lock::Unavailable => Ok(None),
        Lock::Busy => Err(ComposeRoomError::Busy { name: name.to_string(), waited: MAKE_WAIT.as_secs() }),
    }
}
