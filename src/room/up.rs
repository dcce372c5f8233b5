//! `workroom up`: make the room exist, run, and be ready, then run what is
//! due of its lifecycle. The decisions (name, create request, what is due)
//! are in `plan`; this file is the sequence of engine and daemon calls.
//!
//! A refused `up` leaves nothing behind: a container it created is removed,
//! with the named volumes the engine made for it.

use super::{creating, daemon, hooks, image, peers, ready};
use crate::config::{Hook, Loaded};
use crate::engine::{Engine, EngineError};
use crate::forward::background::Check;
use crate::link::RoomLink;
use crate::plan::metadata::{self, RoomMetadata};
use crate::plan::peers::{self as peer_plan, Beside, RoomPeerFacts};
use crate::plan::platform::{room_platform, PLATFORM_LABEL};
use crate::plan::{create, identity, labels};
use crate::retry::{Backoff, Pace};
use anyhow::{bail, Context as _};
use bollard::models::{ContainerInspectResponse, ContainerStateStatusEnum};
use std::time::Duration;

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
    /// The peer group to take part in (settings and `--peer-group`).
    pub peer_group: String,
    /// The host folder bound at `~/.claude` in participating rooms.
    pub peer_registry: std::path::PathBuf,
    /// `up --name NAME`: a named room instead of the workspace's own.
    pub name: Option<String>,
    /// Nested containers and the network (settings).
    pub shape: crate::plan::nested::RoomShape,
    /// `privileged: true` from image or feature metadata is not applied
    /// (`[containers] metadata_privileged = false`).
    pub refuse_metadata_privileged: bool,
    /// `--frozen-lockfile` / `--no-lockfile`.
    pub lock: crate::features::LockMode,
    /// How a new room gets the workspace (settings and `--workspace`).
    pub workspace: crate::settings::WorkspaceMode,
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
    /// How the room got its workspace (bound, or in a volume), from its labels.
    pub workspace: crate::plan::workspace::Decision,
    /// A linked checkout's git folder as mounted, from its label.
    pub git: Option<crate::plan::git::Summary>,
}

pub async fn up(engine: &Engine, loaded: &Loaded, options: &UpOptions) -> anyhow::Result<UpResult> {
    let scope = peers::scope_from_env();
    let wants = options.peer.then_some(options.peer_group.as_str());
    let name = match &options.name {
        Some(n) => identity::named_room_name_in(n, wants)
            .with_context(|| format!("--name {n:?} has no letter or digit to name a room by"))?,
        None => identity::room_name_in(&loaded.workspace.local_folder, &loaded.config_path, wants),
    };
    let mut existing = engine.inspect_container(&name).await?;
    // A room to be made or started takes the full path: what the host
    // offers it is asked now, while the engine works.
    let running_before = existing.as_ref().and_then(|c| c.state.as_ref()?.running) == Some(true);
    let full_check = (!running_before || options.recreate).then(|| Check::full(loaded));
    // The workspace's rooms of another peer setting or group, looked for
    // only when the room must be made (one `list` on that path, none on the
    // others), and before initializeCommand, so a refused `up` runs nothing.
    let others = match (&existing, options.recreate) {
        (None, _) | (Some(_), true) => siblings(engine, loaded, options.name.as_deref(), &name).await?,
        _ => Vec::new(),
    };
    let beside = if options.recreate {
        Beside::Alone
    } else {
        let siblings: Vec<_> = others.iter().map(|(s, _)| s.clone()).collect();
        let subject = match &options.name {
            Some(n) => format!("--name {n}"),
            None => loaded.workspace.local_folder.display().to_string(),
        };
        peer_plan::beside(&subject, &name, wants, &siblings)
    };
    if let Beside::Refuse(why) = &beside {
        bail!("{why}");
    }
    if let Some(cmd) = loaded.model.lifecycle.get(Hook::Initialize) {
        hooks::run_on_host(cmd, &loaded.workspace.local_folder).await?;
    }
    if options.recreate {
        // Held while removing, so of concurrent recreates one removes and
        // says so, and the others find the room gone and say nothing. Let go
        // before the create, which takes it again as any `up` does.
        let _removing = creating::wait_to_make(&name, PEER_CREATE_WAIT).await;
        if let Some(c) = existing.take() {
            if remove_for_recreate(engine, c.id.as_deref().unwrap_or(&name)).await? {
                eprintln!("removed {name} to recreate it");
            }
        }
        for (other, id) in &others {
            if remove_for_recreate(engine, id).await? {
                eprintln!("removed {} to recreate it as {name}", other.name);
            }
            ready::forget(id);
            super::notes::forget(id);
        }
    }
    let (container, created, prepared, made) = loop {
        match existing.take() {
            // Being made by another `up`, or left half-made by a dead one.
            Some(c) if is_created(&c) => existing = settle_created(engine, &c, &name).await?,
            Some(c) => break (c, false, None, None),
            // The branch point of compose rooms: how the room is made (and
            // started, below); the rest of `up` is the same for every room.
            None => match match &loaded.model.source {
                crate::config::Source::Compose(compose) => {
                    if options.workspace == crate::settings::WorkspaceMode::Volume {
                        let folder = loaded.workspace.local_folder.display().to_string();
                        return Err(super::workspace_volume::WorkspaceError::Compose { folder }.into());
                    }
                    super::compose::create_room(engine, loaded, compose, &name, options, scope.as_deref()).await?
                }
                _ => create_room(engine, loaded, &name, options, scope.as_deref()).await?,
            } {
                Created::Ours(c, prepared, made) => break (c, true, prepared, Some(made)),
                Created::Theirs(c) => existing = Some(c),
            },
        }
    };
    check_compatible(&container, loaded, &name)?;
    if let Beside::Note(note) = beside {
        eprintln!("note: {note}");
    }
    if !created {
        // Said on every `up` while they hold, the fast path included: from
        // the inspect, a stat of the registry and a host file; no engine call.
        for w in standing_warnings(&container, &name, wants, scope.as_deref()) {
            eprintln!("warning: {w}");
        }
        // A room from before the group kept agent state: decided from the
        // inspect; the room is read only when its state is to be copied.
        let made = metadata::of_container(loaded, &name, label(&container, labels::METADATA));
        let own_config = made.merged.remote_env.iter().any(|(k, _)| k == peer_plan::CLAUDE_CONFIG_ENV);
        if let Some(line) = peers::move_agent_state(engine, &container, &name, own_config).await {
            eprintln!("note: {line}");
        }
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
        workspace: crate::plan::workspace::Decision::of_labels(
            container.config.as_ref().and_then(|c| c.labels.as_ref()),
        ),
        git: label(&container, labels::GIT).and_then(|g| serde_json::from_str(g).ok()),
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
        // State files only: a forwarder that died or belongs to an earlier
        // start is replaced without a daemon link.
        keep_forwarder(loaded, &name, &started_at, Check::Fast).await;
        // Only rooms that run the image's program pay a link for its state.
        let entrypoint = container.config.as_ref().and_then(|c| c.entrypoint.clone()).unwrap_or_default();
        if super::program::has_program(&entrypoint) {
            if let Some(line) = super::program::state(engine, &id).await {
                eprintln!("{name}: the image's program {line}");
            }
        }
        return Ok(result(false));
    }
    if !running {
        peers::wake_anchor(engine, &container).await;
    }
    match &loaded.model.source {
        crate::config::Source::Compose(compose) if !running => {
            super::compose::start(engine, loaded, compose, &container, &name).await?
        }
        _ => ensure_running(engine, &container, &name).await?,
    }
    let started_at = match running {
        true => started_at,
        false => engine.inspect_container(&id).await?.and_then(|c| c.state?.started_at).unwrap_or_default(),
    };

    let (made_with, made_link) = match made {
        Some(made) => {
            let (metadata, link) = *made;
            (Some(metadata), Some(link))
        }
        None => (None, None),
    };
    let link = match made_link {
        Some(link) => link,
        None => wait_for_daemon(engine, &id).await?,
    };
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
    keep_forwarder(loaded, &name, &started_at, full_check.unwrap_or_else(|| Check::full(loaded))).await;
    let mut ctx = hooks::HookContext::new(loaded, &metadata.merged, &remote_user, &container_env);
    ctx.created_at = container.created.clone().unwrap_or_default();
    ctx.started_at = started_at.clone();
    ctx.env.extend(crate::forward::room_env(&name));
    // userEnvProbe (default loginInteractiveShell, as the reference): the
    // user's shell environment, under remoteEnv, for the hooks and for exec.
    let mode = metadata.merged.user_env_probe.unwrap_or(crate::config::UserEnvProbe::LoginInteractiveShell);
    let probed = super::probe::probe(&link, &remote_user, mode, &ctx.cwd)
        .await
        .map(|env| super::probe::with_container_path(env, container_env.get("PATH"), &remote_user));
    if let Some(probed) = &probed {
        ctx.env = probed.clone().into_iter().chain(std::mem::take(&mut ctx.env)).collect();
    }
    hooks::run_due(&link, &ctx, options.post_attach).await?;
    if let Some(p) = &prepared {
        for w in &p.warnings {
            eprintln!("warning: {w}");
        }
        // What the room's users turned out to be holds for its whole life:
        // kept, so every later `up` says it too.
        let lasting = peers::verify(&link, &name, &remote_user, p, &p.names.volume).await;
        for w in &lasting {
            eprintln!("warning: {w}");
        }
        super::notes::save(&id, &lasting);
        // Informational: an engine that cannot list now costs the line only.
        if let Ok(members) = peers::group_rooms(engine, &p.names).await {
            let others: Vec<String> = members
                .iter()
                .filter(|c| c.id.as_deref() != Some(id.as_str()))
                .filter_map(|c| c.names.as_ref()?.first().map(|n| n.trim_start_matches('/').to_string()))
                .collect();
            eprintln!("note: {}", peer_plan::sharing_note(&name, &p.names, &others));
        }
    }
    // Remember that this start needs nothing more (the start time is read
    // after the start, so a room we just started records its own).
    if let Some(started) = engine.inspect_container(&id).await?.and_then(|c| c.state?.started_at) {
        ready::mark_done(&id, &started, probed.as_ref());
    }
    if let Some(line) = link.status().await.ok().as_ref().and_then(super::program::describe) {
        eprintln!("{name}: the image's program {line}");
    }
    super::handoff::advise(&link, &container).await;
    Ok(result(created))
}

/// Removes the room `up --recreate` replaces; `true` when this call removed
/// it, `false` when another did. Concurrent recreates of this host take
/// turns under the room's lock, so the later ones find it gone; those of
/// another host race: the engine refuses all but one (409, removal in
/// progress), and those wait for it to be gone, then race to create, where
/// one wins and the others use its room. Removing by id never touches the
/// winner's new room.
async fn remove_for_recreate(engine: &Engine, id: &str) -> anyhow::Result<bool> {
    if engine.inspect_container(id).await?.is_none() {
        return Ok(false);
    }
    match engine.remove(id, false).await {
        Ok(()) => return Ok(true),
        Err(EngineError::Refused { status: 409, .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let mut wait = Backoff::new(Pace::RACE, PEER_CREATE_WAIT);
    while engine.inspect_container(id).await?.is_some() {
        if wait.expired() {
            bail!("another `up --recreate` has been removing {id} for {} s; try again", PEER_CREATE_WAIT.as_secs());
        }
        wait.pause().await;
    }
    Ok(false)
}

/// Starts the room's background forwarder when it has none for this start
/// and there is something to carry. A forwarder that cannot start (every
/// port taken) is a warning: the room and its hooks do not depend on it.
async fn keep_forwarder(loaded: &Loaded, name: &str, started_at: &str, check: Check) {
    match crate::forward::background::ensure_for_up(loaded, name, started_at, check).await {
        Ok(Some(status)) => crate::forward::background::print_started(&status),
        Ok(None) => {}
        Err(e) => eprintln!("warning: {name}: ports and credentials are not forwarded: {e:#}"),
    }
}

pub(super) enum Created {
    /// We made it: our create won (with what peer messaging gave it, and
    /// the metadata it was made with, and the link its users were checked
    /// over).
    Ours(ContainerInspectResponse, Option<Box<peers::Prepared>>, Box<(RoomMetadata, RoomLink)>),
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
    scope: Option<&str>,
) -> anyhow::Result<Created> {
    // `.` is valid in a container name but not in an image repository.
    let build_tag = format!("workroom-build/{}", name.trim_start_matches(identity::NAME_PREFIX).replace('.', "-"));
    // A dry plan first: what the config cannot make (an unsupported runArg, a
    // bad mount) is refused before a build or pull leaves an image behind.
    // The plan is pure; the image facts only shape the program and the user.
    create::check(loaded)?;
    // Before anything of the room's is made: whether the engine sees the
    // workspace folder, or the workspace goes into a volume.
    let workspace = super::workspace_volume::decide(engine, loaded, name, options.workspace).await?;
    let (image, facts) = image::ensure(engine, loaded, &build_tag).await?;
    let (image, facts) = super::features::image_for(engine, loaded, (image, facts), options.lock).await?;
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
    let RoomPlan { mut plan, metadata, peers: peer_setup } =
        room_plan(engine, loaded, name, options, scope, &image, &facts).await?;
    plan.body.labels.get_or_insert_with(Default::default).insert(PLATFORM_LABEL.into(), daemon.arch.platform().into());
    crate::plan::workspace::label(&mut plan, &workspace);
    let workspace_target = super::workspace_volume::workspace_mount(loaded).map(|m| m.target).unwrap_or_default();
    if let Some(volume) = &workspace.volume {
        if let Some(w) = crate::plan::git::leave_out(&mut plan) {
            eprintln!("warning: {name}: {w}");
        }
        // The peer registry is a folder of this host too: on the engine, a
        // volume of the group's stands in for it.
        let registry = peer_setup.as_ref().map(|p| (p.join.registry.clone(), format!("{}-registry", p.names.volume)));
        let registry = registry.as_ref().map(|(f, v)| (f.as_str(), v.as_str()));
        for w in crate::plan::workspace::into_volume(&mut plan, &workspace_target, volume, registry) {
            eprintln!("warning: {name}: {w}");
        }
    }
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
    // Held until the room has started (or is removed again): a waiter that
    // can take it knows this `up` died and takes the room over.
    // A creator stuck for a minute: go on unlocked; the create's own 409
    // handling still keeps one room.
    let _creator = creating::wait_to_make(name, PEER_CREATE_WAIT).await;
    // Made here, after `volumes_before`, so a refused `up` removes a volume
    // it made; one that was there (a room removed without `--volumes`) is
    // the room's truth, kept as it is.
    let fresh_volume = match &workspace.volume {
        Some(volume) => {
            let fresh = super::workspace_volume::ensure_volume(engine, volume, name, loaded).await?;
            if !fresh {
                eprintln!(
                    "{name}: the workspace volume {volume} exists and is kept as it is (`workroom sync push` sends local edits)"
                );
            }
            fresh
        }
        None => false,
    };
    let mut wait = Backoff::new(Pace::RACE, PEER_CREATE_WAIT);
    let id = loop {
        match engine.create_container_on(name, plan.platform.as_deref(), plan.body.clone()).await {
            Ok(id) => break id,
            Err(EngineError::Refused { status: 409, .. }) => {
                if let Some(c) = engine.inspect_container(name).await? {
                    return Ok(Created::Theirs(c));
                }
                if wait.expired() {
                    bail!("{name} is taken but cannot be inspected (another workroom creating it?); try `up` again");
                }
            }
            Err(e) => {
                remove_volumes_made(engine, &plan.named_volumes, &volumes_before).await;
                return Err(blamed(loaded, e));
            }
        }
        wait.pause().await;
    };
    let prepared = async {
        if fresh_volume {
            let folder = &loaded.workspace.local_folder;
            let (files, git) = super::workspace_volume::files_of(folder)?;
            let volume = workspace.volume.as_deref().unwrap_or_default();
            let how = if git { "as .gitignore keeps it" } else { "every file" };
            let label = format!("uploading the workspace into {volume} ({how})");
            super::workspace_volume::upload(engine, &id, folder, &workspace_target, files.clone(), &label).await?;
            if let Err(e) = super::sync::record_upload(name, folder, &files) {
                eprintln!("warning: {name}: `workroom sync` will take every file as changed: {e:#}");
            }
        }
        engine.upload(&id, upload_folder, tar).await.context("upload the daemon into the room")?;
        engine.start(&id).await.map_err(|e| blamed(loaded, e))?;
        started(engine, loaded, &metadata, &id, name).await
    }
    .await;
    match prepared {
        Ok((c, link)) => Ok(Created::Ours(c, peer_setup.map(Box::new), Box::new((metadata, link)))),
        Err(e) => {
            let _ = engine.remove(&id, true).await;
            for v in plan.named_volumes.iter().filter(|v| !volumes_before.contains(v)) {
                let _ = engine.remove_volume(v).await;
            }
            Err(e.context(format!("{name} was not made (removed again)")))
        }
    }
}

/// Removes the named volumes a refused create leaves (the workspace volume
/// of volume mode among them), all but those that were there before this
/// `up`: those are a removed room's truth and are kept.
async fn remove_volumes_made(engine: &Engine, volumes: &[String], before: &[String]) {
    for v in volumes.iter().filter(|v| !before.contains(v)) {
        let _ = engine.remove_volume(v).await;
    }
}

/// What any room is made from, whoever makes it (the engine for image and
/// Dockerfile rooms, the compose program for compose rooms).
pub(super) struct RoomPlan {
    pub plan: create::CreatePlan,
    pub metadata: RoomMetadata,
    /// The peers it joins, when it does.
    pub peers: Option<peers::Prepared>,
}

/// From the room's image to its plan: the image's metadata merged under
/// devcontainer.json, the peers it joins, nested containers, the labels and
/// the host's requirements; every line about what it widens is said here,
/// before anything is made.
pub(super) async fn room_plan(
    engine: &Engine,
    loaded: &Loaded,
    name: &str,
    options: &UpOptions,
    scope: Option<&str>,
    image: &str,
    facts: &create::ImageFacts,
) -> anyhow::Result<RoomPlan> {
    let metadata = metadata::for_new_room(loaded, image, facts.metadata.as_deref(), &[]);
    let peer_setup = if options.peer {
        let user = create::remote_user(&metadata.merged, facts);
        let update_uid = metadata.merged.update_remote_user_uid.unwrap_or(true);
        let (group, registry) = (&options.peer_group, &options.peer_registry);
        let config = loaded.config_path.display().to_string();
        let users =
            peers::RoomUsers { remote: &user, update_uid, config: &config, named: named_users(&metadata.merged) };
        match peers::prepare(engine, scope, group, image, &users, registry).await {
            Ok(p) => Some(p),
            // A user the image lacks: the room could not run; its refusal
            // is the one line, with nothing made.
            Err(e) if e.downcast_ref::<super::users::MissingUser>().is_some() => return Err(e),
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
        image,
        loaded,
        facts,
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
    room_labels.extend(peer_plan::scope_labels(scope));
    let wants = options.peer.then_some(options.peer_group.as_str());
    let joined = peer_setup.as_ref().map(|p| (&p.names, p.anchor_id.as_str()));
    room_labels.extend(peer_plan::room_labels(wants, joined));
    room_labels.insert(creating::CREATOR_HOST_LABEL.to_string(), creating::host_name());
    super::requirements::apply(engine, loaded, &mut plan).await;
    Ok(RoomPlan { plan, metadata, peers: peer_setup })
}

/// A room just started for the first time: its daemon answers, and the
/// users the configuration names are the image's (else it is refused).
pub(super) async fn started(
    engine: &Engine,
    loaded: &Loaded,
    metadata: &RoomMetadata,
    id: &str,
    name: &str,
) -> anyhow::Result<(ContainerInspectResponse, RoomLink)> {
    let link = wait_for_daemon(engine, id).await?;
    check_users(&link, loaded, &metadata.merged).await?;
    let c = engine.inspect_container(id).await?.with_context(|| format!("{name} vanished after its start"))?;
    Ok((c, link))
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

/// The users the config names must be the image's: one missing would make
/// every exec, pane and hook fail, so the room is refused (and removed).
/// The users the configuration names (property, user spec).
fn named_users(m: &metadata::Merged) -> Vec<(&'static str, &str)> {
    [("remoteUser", &m.remote_user), ("containerUser", &m.container_user)]
        .into_iter()
        .filter_map(|(property, user)| Some((property, user.as_deref().filter(|u| !u.is_empty())?)))
        .collect()
}

async fn check_users(link: &RoomLink, loaded: &Loaded, m: &metadata::Merged) -> anyhow::Result<()> {
    let wanted = named_users(m);
    if wanted.is_empty() {
        return Ok(());
    }
    let (passwd, groups) = link.users().await?;
    super::users::check(&loaded.config_path.display().to_string(), &wanted, &passwd, &groups)?;
    Ok(())
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

/// The workspace's rooms other than `wanted` (made with another peer
/// setting or group), with their ids.
/// The rooms of this workspace (or of this `--name`) made with another peer
/// setting or group than `wanted`.
async fn siblings(
    engine: &Engine,
    loaded: &Loaded,
    named: Option<&str>,
    wanted: &str,
) -> anyhow::Result<Vec<(peer_plan::Sibling, String)>> {
    let rooms = match named.and_then(|n| identity::named_room_name_in(n, None)) {
        Some(plain) => super::named_rooms(engine, &plain).await?,
        None => super::workspace_rooms(engine, loaded).await?,
    };
    let mut found = Vec::new();
    for c in rooms {
        let Some(name) = c.names.as_ref().and_then(|n| n.first()).map(|n| n.trim_start_matches('/').to_string()) else {
            continue;
        };
        if name == wanted {
            continue;
        }
        let made = RoomPeerFacts::of_labels(c.labels.as_ref()).made_in().map(str::to_string);
        let running = c.state == Some(bollard::models::ContainerSummaryStateEnum::RUNNING);
        let id = c.id.clone().unwrap_or_else(|| name.clone());
        found.push((peer_plan::Sibling { name, running, made }, id));
    }
    Ok(found)
}

/// Reattach: what still holds against the room as made. Peer drift both
/// ways (pure, from the inspect), the registry folder's owner (one stat),
/// and what `up` learnt at create about the room's users (a host file).
/// Warns, never refuses: the room still works, only its peer messaging
/// differs.
fn standing_warnings(
    c: &ContainerInspectResponse,
    name: &str,
    wants: Option<&str>,
    scope: Option<&str>,
) -> Vec<String> {
    let facts = RoomPeerFacts::of(c);
    let mut warnings: Vec<String> = peer_plan::drift(name, &facts, wants, scope).into_iter().collect();
    if let (Some((registry, _)), Some(uid)) = (&facts.registry, facts.uid) {
        warnings.extend(peers::registry_owner_warning(std::path::Path::new(registry), uid));
    }
    warnings.extend(c.id.as_deref().map(super::notes::read).unwrap_or_default());
    warnings
}

fn is_created(c: &ContainerInspectResponse) -> bool {
    c.state.as_ref().and_then(|s| s.status) == Some(ContainerStateStatusEnum::CREATED)
}

async fn ensure_running(engine: &Engine, c: &ContainerInspectResponse, name: &str) -> anyhow::Result<()> {
    let status = c.state.as_ref().and_then(|s| s.status);
    match status {
        Some(ContainerStateStatusEnum::RUNNING) => Ok(()),
        // Settled before we get here; seen only if it changed since.
        Some(ContainerStateStatusEnum::CREATED) => bail!("{name} is being made by another `up`; run `up` again"),
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
/// start it without its daemon. Wait for it to start, unless its creator on
/// this host is gone (its lock is free): then nobody will start it, so it
/// is removed and `None` says to make the room afresh. Never-started rooms
/// hold nothing of the user's (no hook ran).
async fn settle_created(
    engine: &Engine,
    c: &ContainerInspectResponse,
    name: &str,
) -> anyhow::Result<Option<ContainerInspectResponse>> {
    let id = c.id.clone().unwrap_or_else(|| name.to_string());
    let ours = label(c, creating::CREATOR_HOST_LABEL) == Some(creating::host_name().as_str());
    let mut wait = Backoff::new(Pace::MAKING, PEER_CREATE_WAIT);
    loop {
        let lock = if ours { creating::try_lock(name) } else { creating::Lock::Busy };
        let Some(now) = engine.inspect_container(&id).await? else { return Ok(None) };
        if !is_created(&now) {
            return Ok(Some(now));
        }
        if let creating::Lock::Held(_held) = lock {
            // Looked at while holding the lock, so no creator can be midway.
            eprintln!("{name} was left unstarted by an `up` that died; making it again");
            remove_for_recreate(engine, &id).await?;
            return Ok(None);
        }
        if wait.expired() {
            bail!("{name} was created but never started (an interrupted `up` on another host?); `workroom down` it and run `up` again");
        }
        wait.pause().await;
    }
}

/// Connects to the daemon, retrying while it is still starting (the relay
/// fails until the daemon has bound its socket).
async fn wait_for_daemon(engine: &Engine, id: &str) -> anyhow::Result<RoomLink> {
    let mut wait = Backoff::new(Pace::STARTING, DAEMON_READY_WAIT);
    loop {
        match RoomLink::connect(engine, id).await {
            Ok(link) => return Ok(link),
            Err(e) if e.is_retryable() && !wait.expired() => {}
            Err(e) => return Err(anyhow::Error::new(e).context(format!("the daemon in {id} did not answer"))),
        }
        wait.pause().await;
    }
}
