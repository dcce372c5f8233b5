//! `workroom up`: make the room exist, run, and be ready, then run what is
//! due of its lifecycle. The decisions (name, create request, what is due)
//! are in `plan`; this file is the sequence of engine and daemon calls.
//!
//! A refused `up` leaves nothing behind: a container it created is removed,
//! with the named volumes the engine made for it.

use super::{daemon, hooks, image, peers, ready};
use crate::config::{Hook, Loaded};
use crate::engine::{Engine, EngineError};
use crate::link::RoomLink;
use crate::plan::metadata::{self, RoomMetadata};
use crate::plan::peers::{self as peer_plan, Names, RoomPeerFacts};
use crate::plan::platform::{room_platform, PLATFORM_LABEL};
use crate::plan::{create, identity, labels};
use anyhow::{bail, Context as _};
use bollard::models::{ContainerInspectResponse, ContainerStateStatusEnum};
use std::time::{Duration, Instant};

/// How long `up` waits for a room another `up` is creating to start. A
/// create, upload and start take well under a second on a healthy engine;
/// past this the other `up` has most likely died and the room is half-made.
const PEER_CREATE_WAIT: Duration = Duration::from_secs(60);

/// How long a freshly started daemon may take to answer.
const DAEMON_READY_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Default)]
pub struct UpOptions {
    pub recreate: bool,
    /// Run postAttachCommand (skipped by `--skip-post-attach`).
    pub post_attach: bool,
    /// Take part in peer messaging (settings and `--peer`).
    pub peer: bool,
    /// The host folder bound at `~/.claude` in participating rooms.
    pub peer_registry: std::path::PathBuf,
    /// `up --name NAME`: a named room instead of the workspace's own.
    pub name: Option<String>,
    /// Nested containers and the network (settings).
    pub shape: crate::plan::nested::RoomShape,
    /// `privileged: true` from image or feature metadata is not applied
    /// (`[containers] metadata_privileged = false`).
    pub refuse_metadata_privileged: bool,
}

#[derive(Debug, Clone)]
pub struct UpResult {
    pub name: String,
    pub container_id: String,
    pub remote_user: String,
    pub remote_workspace_folder: String,
    pub created: bool,
    /// The platform of the room's daemon (`linux/arm64`), from its label.
    pub platform: String,
}

pub async fn up(engine: &Engine, loaded: &Loaded, options: &UpOptions) -> anyhow::Result<UpResult> {
    let names = peers::names_from_env();
    let name = match &options.name {
        Some(n) => identity::named_room_name(n, options.peer)
            .with_context(|| format!("--name {n:?} has no letter or digit to name a room by"))?,
        None => identity::room_name(&loaded.workspace.local_folder, &loaded.config_path, options.peer),
    };
    if let Some(cmd) = loaded.model.lifecycle.get(Hook::Initialize) {
        hooks::run_on_host(cmd, &loaded.workspace.local_folder).await?;
    }
    let mut existing = engine.inspect_container(&name).await?;
    if let (Some(c), true) = (&existing, options.recreate) {
        eprintln!("removing {name} to recreate it");
        engine.remove(c.id.as_deref().unwrap_or(&name), false).await?;
        existing = None;
    }
    let (container, created, prepared, made_with) = match existing {
        Some(c) => (c, false, None, None),
        None => match create_room(engine, loaded, &name, options, &names).await? {
            Created::Ours(c, prepared, metadata) => (c, true, prepared, Some(*metadata)),
            Created::Theirs(c) => (c, false, None, None),
        },
    };
    check_compatible(&container, loaded, &name)?;
    if !created {
        check_peer_drift(engine, &container, &name, options.peer, &names).await?;
    }
    let made_nested = label(&container, crate::plan::nested::NESTED_LABEL);
    let nested = made_nested == Some("1");
    // A room the engine could not give nested containers was said so when
    // made; recreating it would not change that.
    let refused = made_nested == Some(crate::plan::nested::NESTED_REFUSED);
    if !created && !refused && nested != options.shape.nested {
        // Said on the fast path too: costs no engine call.
        let made = if nested { "on" } else { "off" };
        eprintln!(
            "warning: {name} was made with nested containers {made}; `workroom up --recreate` applies [containers] nested = {}",
            options.shape.nested
        );
    }
    let id = container.id.clone().unwrap_or_else(|| name.clone());
    let remote_user = label(&container, labels::REMOTE_USER).unwrap_or("root").to_string();
    let platform = room_platform(label(&container, PLATFORM_LABEL)).to_string();
    let result = |created| UpResult {
        name: name.clone(),
        container_id: id.clone(),
        remote_user: remote_user.clone(),
        remote_workspace_folder: loaded.workspace.folder.clone(),
        created,
        platform: platform.clone(),
    };
    // The fast path: running, hooks recorded done for this start, and no
    // postAttach to run: nothing is due, so no link to the daemon is needed.
    let running = container.state.as_ref().and_then(|s| s.running) == Some(true);
    let started_at = container.state.as_ref().and_then(|s| s.started_at.clone()).unwrap_or_default();
    // The image's own postAttach counts too; its label says so without a
    // round trip (it holds the image's entries).
    let attach_due = options.post_attach
        && (loaded.model.lifecycle.get(Hook::PostAttach).is_some()
            || !metadata::of_container(loaded, &name, label(&container, labels::METADATA))
                .merged
                .hook(Hook::PostAttach)
                .is_empty());
    if running && !created && !attach_due && ready::is_done(&id, &started_at) {
        return Ok(result(false));
    }
    if !running {
        peers::wake_anchor(engine, &container).await;
    }
    ensure_running(engine, &container, &name).await?;

    let link = wait_for_daemon(engine, &id).await?;
    if nested {
        // Before the hooks, so they can use podman; the storage tmpfs is
        // empty after every start, so this runs at each one.
        for w in super::nested::prepare(&link, &remote_user).await {
            eprintln!("warning: {name}: {w}");
        }
    }
    let container_env = super::container_env(&container);
    let metadata = match made_with {
        Some(m) => m,
        None => image_metadata(engine, loaded, &container, &name).await?,
    };
    // Before the hooks, so they can use the forwarded credentials.
    crate::cli::forward_cmd::start_for_up(loaded, &name)?;
    let mut ctx = hooks::HookContext::new(loaded, &metadata.merged, &remote_user, &container_env);
    ctx.env.extend(crate::forward::room_env(&name));
    // userEnvProbe (default loginInteractiveShell, as the reference): the
    // user's shell environment, under remoteEnv, for the hooks and for exec.
    let mode = metadata.merged.user_env_probe.unwrap_or(crate::config::UserEnvProbe::LoginInteractiveShell);
    let probed = super::probe::probe(&link, &remote_user, mode, &ctx.cwd).await;
    if let Some(probed) = &probed {
        ctx.env = probed.clone().into_iter().chain(std::mem::take(&mut ctx.env)).collect();
    }
    hooks::run_due(&link, &ctx, options.post_attach).await?;
    if let Some(p) = &prepared {
        for w in p.warnings.iter().cloned().chain(peers::verify(&link, &name, &remote_user, p, &names.volume).await) {
            eprintln!("warning: {w}");
        }
    }
    // Remember that this start needs nothing more (the start time is read
    // after the start, so a room we just started records its own).
    if let Some(started) = engine.inspect_container(&id).await?.and_then(|c| c.state?.started_at) {
        ready::mark_done(&id, &started, probed.as_ref());
    }
    super::handoff::advise(&link, &container).await;
    Ok(result(created))
}

enum Created {
    /// We made it: our create won (with what peer messaging gave it, and
    /// the metadata it was made with).
    Ours(ContainerInspectResponse, Option<peers::Prepared>, Box<RoomMetadata>),
    /// A concurrent `up` made it first.
    Theirs(ContainerInspectResponse),
}

/// Gets the image, creates the container, uploads the daemon and starts it.
/// On any failure after the create, the container and the volumes the engine
/// made for it are removed again.
async fn create_room(
    engine: &Engine,
    loaded: &Loaded,
    name: &str,
    options: &UpOptions,
    names: &Names,
) -> anyhow::Result<Created> {
    // `.` is valid in a container name but not in an image repository.
    let build_tag = format!("workroom-build/{}", name.trim_start_matches(identity::NAME_PREFIX).replace('.', "-"));
    // A dry plan first: what the config cannot make (an unsupported runArg, a
    // bad mount) is refused before a build or pull leaves an image behind.
    // The plan is pure; the image facts only shape the program and the user.
    create::check(loaded)?;
    let (image, facts) = image::ensure(engine, loaded, &build_tag).await?;
    // Before anything is made for the room: a platform we carry no daemon
    // for is refused here, and an image built for it is ours to remove.
    let daemon = match daemon::for_image(engine, &image).await {
        Ok(d) => d,
        Err(e) => {
            if image == build_tag {
                image::remove(engine, &image).await;
            }
            return Err(e.into());
        }
    };
    let metadata = metadata::for_new_room(loaded, &image, facts.metadata.as_deref(), &[]);
    let peer_setup = if options.peer {
        let user = create::remote_user(&metadata.merged, &facts);
        let update_uid = metadata.merged.update_remote_user_uid.unwrap_or(true);
        match peers::prepare(engine, names, &image, &user, update_uid, &options.peer_registry).await {
            Ok(p) => Some(p),
            Err(e) => {
                // Never blocks `up`: the room is made without peers, and the
                // next reattach says so until it is recreated.
                let chain: Vec<String> = e.chain().map(ToString::to_string).collect();
                eprintln!("warning: {name} starts without peer messaging: {}", chain.join(": "));
                None
            }
        }
    } else {
        None
    };
    let mut plan = create::plan_with_peers(
        name,
        &image,
        loaded,
        &facts,
        &metadata,
        !options.refuse_metadata_privileged,
        peer_setup.as_ref().map(|p| &p.join),
    )?;
    let confinement = match options.shape.nested {
        true => super::nested::confinement(engine).await,
        false => crate::plan::nested::Confinement::Allowed { profile: None, apparmor: false },
    };
    for w in crate::plan::nested::apply(&mut plan, options.shape, &confinement) {
        eprintln!("warning: {name}: {w}");
    }
    // Before the create: when the engine refuses what metadata asked for
    // (privileged, a capability), the line saying who asked is already out.
    for w in metadata.warnings.iter().chain(&plan.warnings) {
        eprintln!("warning: {w}");
    }
    let room_labels = plan.body.labels.get_or_insert_with(Default::default);
    room_labels.extend(peer_plan::scope_labels(names));
    room_labels.insert(PLATFORM_LABEL.into(), daemon.arch.platform().into());
    super::requirements::apply(engine, loaded, &mut plan).await;
    let upload_folder = plan.upload_folder();
    let tar = daemon::upload_tar_into(&daemon.bytes, workroomd::room::DAEMON_PATH, upload_folder)
        .context("pack the daemon for upload")?;

    let mut volumes_before = Vec::new();
    for v in &plan.named_volumes {
        if engine.volume_exists(v).await? {
            volumes_before.push(v.clone());
        }
    }
    // Another `up` of this workspace may create it first (409): use theirs.
    // The engine reserves the name before the container can be inspected, so
    // for a moment the name is taken yet "no such container"; and a peer's
    // failed `up` removes what it made. Either way: look again, or create.
    let deadline = Instant::now() + PEER_CREATE_WAIT;
    let mut pause = Duration::from_millis(10);
    let id = loop {
        match engine.create_container_on(name, plan.platform.as_deref(), plan.body.clone()).await {
            Ok(id) => break id,
            Err(EngineError::Refused { status: 409, .. }) => {
                if let Some(c) = engine.inspect_container(name).await? {
                    return Ok(Created::Theirs(c));
                }
                if Instant::now() >= deadline {
                    bail!("{name} is taken but cannot be inspected (another workroom creating it?); try `up` again");
                }
            }
            Err(e) => return Err(blamed(loaded, e)),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    };
    let prepared = async {
        engine.upload(&id, upload_folder, tar).await.context("upload the daemon into the room")?;
        engine.start(&id).await.map_err(|e| blamed(loaded, e))?;
        engine.inspect_container(&id).await?.with_context(|| format!("{name} vanished after its start"))
    }
    .await;
    match prepared {
        Ok(c) => Ok(Created::Ours(c, peer_setup, Box::new(metadata))),
        Err(e) => {
            let _ = engine.remove(&id, true).await;
            for v in plan.named_volumes.iter().filter(|v| !volumes_before.contains(v)) {
                let _ = engine.remove_volume(v).await;
            }
            Err(e.context(format!("{name} was not made (removed again)")))
        }
    }
}

/// The metadata of a room made before this `up`: its image's label (by the
/// id it was made from, so a retag does not change it) under the current
/// devcontainer.json. When the image is gone, the room's own label stands
/// in for it, as the reference reads a room.
async fn image_metadata(
    engine: &Engine,
    loaded: &Loaded,
    c: &ContainerInspectResponse,
    name: &str,
) -> anyhow::Result<RoomMetadata> {
    let shown = c.config.as_ref().and_then(|c| c.image.clone()).unwrap_or_default();
    let found = match c.image.as_deref() {
        Some(id) => engine.inspect_image(id).await?,
        None => None,
    };
    Ok(match found {
        Some(image) => metadata::for_new_room(loaded, &shown, image::facts(&image).metadata.as_deref(), &[]),
        None => metadata::of_container(loaded, name, label(c, labels::METADATA)),
    })
}

/// An engine refusal of the create or start, as the properties of
/// devcontainer.json that asked for what it refused, when we can tell.
fn blamed(loaded: &Loaded, e: EngineError) -> anyhow::Error {
    match &e {
        EngineError::Refused { message, .. } => match create::PlanError::refused(loaded, message) {
            Some(named) => named.into(),
            None => e.into(),
        },
        _ => e.into(),
    }
}

fn label<'a>(c: &'a ContainerInspectResponse, key: &str) -> Option<&'a str> {
    c.config.as_ref()?.labels.as_ref()?.get(key).map(String::as_str)
}

/// A room from an incompatible workroom cannot be driven; a config changed
/// since creation is said, not silently ignored.
fn check_compatible(c: &ContainerInspectResponse, loaded: &Loaded, name: &str) -> anyhow::Result<()> {
    match label(c, labels::SCHEMA) {
        Some(labels::SCHEMA_VERSION) => {}
        Some(other) => bail!(
            "{name} was made by workroom {} (room schema {other}, this workroom needs {}); recreate it with `workroom up --recreate`",
            label(c, labels::VERSION).unwrap_or("(unknown)"),
            labels::SCHEMA_VERSION
        ),
        None => bail!("a container named {name} exists but was not made by workroom; remove or rename it"),
    }
    if label(c, labels::CONFIG_HASH) != Some(&labels::config_hash(loaded)) {
        eprintln!(
            "warning: {} changed since {name} was made; `workroom up --recreate` applies the change",
            loaded.config_path.display()
        );
    }
    Ok(())
}

/// Reattach: the room as made against the plan, both ways; warns, never
/// refuses (the room still works, only its peer messaging differs).
async fn check_peer_drift(
    engine: &Engine,
    c: &ContainerInspectResponse,
    name: &str,
    wants: bool,
    names: &Names,
) -> anyhow::Result<()> {
    let facts = RoomPeerFacts::of(c);
    if !wants && facts.pid_mode.is_none() && facts.socks_volume.is_none() {
        return Ok(());
    }
    // Docker stores `container:<id>`; the anchor's id costs one inspect, made
    // only when the room's PidMode does not name the anchor already.
    let target = facts.pid_mode.as_deref().and_then(|m| m.strip_prefix("container:"));
    let anchor_id = match target {
        Some(t) if t != names.anchor => engine.inspect_container(&names.anchor).await?.and_then(|a| a.id),
        _ => None,
    };
    if let Some(w) = peer_plan::drift(name, &facts, wants, names, anchor_id.as_deref()) {
        eprintln!("warning: {w}");
    }
    Ok(())
}

async fn ensure_running(engine: &Engine, c: &ContainerInspectResponse, name: &str) -> anyhow::Result<()> {
    let status = c.state.as_ref().and_then(|s| s.status);
    match status {
        Some(ContainerStateStatusEnum::RUNNING) => Ok(()),
        Some(ContainerStateStatusEnum::CREATED) => wait_started_by_peer(engine, name).await,
        Some(ContainerStateStatusEnum::PAUSED) => {
            bail!("{name} is paused; `docker unpause {name}` first")
        }
        _ => {
            engine.start(c.id.as_deref().unwrap_or(name)).await?;
            Ok(())
        }
    }
}

/// A container in `created` state is one another `up` is preparing (the
/// daemon is uploaded before the first start); starting it ourselves could
/// start it without its daemon. Wait for it instead.
async fn wait_started_by_peer(engine: &Engine, name: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + PEER_CREATE_WAIT;
    let mut pause = Duration::from_millis(20);
    loop {
        let c = engine.inspect_container(name).await?.with_context(|| format!("{name} vanished while starting"))?;
        match c.state.as_ref().and_then(|s| s.status) {
            Some(ContainerStateStatusEnum::CREATED) if Instant::now() < deadline => {}
            Some(ContainerStateStatusEnum::CREATED) => bail!(
                "{name} was created but never started (an interrupted `up`?); `workroom down` it and run `up` again"
            ),
            _ => return Ok(()),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

/// Connects to the daemon, retrying while it is still starting (the relay
/// fails until the daemon has bound its socket).
async fn wait_for_daemon(engine: &Engine, id: &str) -> anyhow::Result<RoomLink> {
    let deadline = Instant::now() + DAEMON_READY_WAIT;
    let mut pause = Duration::from_millis(5);
    loop {
        match RoomLink::connect(engine, id).await {
            Ok(link) => return Ok(link),
            Err(e) if e.is_retryable() && Instant::now() < deadline => {}
            Err(e) => return Err(anyhow::Error::new(e).context(format!("the daemon in {id} did not answer"))),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}
