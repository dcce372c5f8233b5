//! `workroom up`: make the room exist, run, and be ready, then run what is
//! due of its lifecycle. [`up`] reads as its steps:
//! settle or make the room → the fast path → start → link → hooks → report.
//!
//! Making a room (its plan, the create, the first start) is `make.rs`,
//! shared with compose rooms; the "room being made" lock and its waits are
//! `creating.rs`; the decisions are in `plan`. What `up` says goes to the
//! caller's [`Notices`] and comes back in [`UpResult::notices`]: nothing
//! here prints.

use super::creating::{self, PEER_CREATE_WAIT};
use super::make::{self, label, Created};
use super::{hooks, peers, ready};
use crate::config::{Hook, Loaded};
use crate::engine::Engine;
use crate::forward::background::Check;
use crate::link::RoomLink;
use crate::notices::{Notice, Notices};
use crate::plan::metadata::{self, RoomMetadata};
use crate::plan::peers::{self as peer_plan, Beside};
use crate::plan::platform::{room_platform, PLATFORM_LABEL};
use crate::plan::{identity, labels};
use crate::settings::EgressMode;
use anyhow::{bail, Context as _};
use bollard::models::{ContainerInspectResponse, ContainerStateStatusEnum};
use std::collections::BTreeMap;

pub use super::make::UpOptions;

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
    /// How the room reaches the network, from its label.
    pub egress: EgressMode,
    /// The room's resource caps, from its host config as the engine holds it.
    pub caps: crate::plan::caps::Caps,
    /// Every warning, note and progress line `up` said, in order.
    pub notices: Vec<Notice>,
}

/// The room as the first step left it: what every later step reads.
struct Room {
    name: String,
    container: ContainerInspectResponse,
    id: String,
    created: bool,
    remote_user: String,
    /// For a room made now: the metadata it was made with and the link its
    /// users were checked over, and the peers it joined.
    made: Option<(RoomMetadata, RoomLink)>,
    prepared: Option<Box<peers::Prepared>>,
    /// For a room made before: the metadata its label recorded, under
    /// devcontainer.json as it is now (pure; no engine call).
    recorded: Option<RoomMetadata>,
}

impl Room {
    fn running(&self) -> bool {
        self.container.state.as_ref().and_then(|s| s.running) == Some(true)
    }

    fn started_at(&self) -> String {
        self.container.state.as_ref().and_then(|s| s.started_at.clone()).unwrap_or_default()
    }

    /// The egress mode the room was made in (its label).
    fn egress(&self) -> EgressMode {
        crate::plan::egress::mode_of(self.container.config.as_ref().and_then(|c| c.labels.as_ref()))
    }

    fn nested(&self) -> bool {
        label(&self.container, crate::plan::nested::NESTED_LABEL) == Some("1")
    }

    fn result(&self, loaded: &Loaded, say: &Notices) -> UpResult {
        let c = &self.container;
        UpResult {
            name: self.name.clone(),
            container_id: self.id.clone(),
            remote_user: self.remote_user.clone(),
            remote_workspace_folder: loaded.workspace.folder.clone(),
            created: self.created,
            platform: room_platform(label(c, PLATFORM_LABEL)).to_string(),
            workspace: crate::plan::workspace::Decision::of_labels(c.config.as_ref().and_then(|c| c.labels.as_ref())),
            git: label(c, labels::GIT).and_then(|g| serde_json::from_str(g).ok()),
            egress: self.egress(),
            caps: crate::plan::caps::Caps::of_container(c),
            notices: say.take(),
        }
    }
}

pub async fn up(engine: &Engine, loaded: &Loaded, options: &UpOptions, say: &Notices) -> anyhow::Result<UpResult> {
    let name = room_name(loaded, options)?;
    let existing = engine.inspect_container(&name).await?;
    // A room to be made or started takes the full path: what the host
    // offers it is asked now, while the engine works.
    let running_before = existing.as_ref().and_then(|c| c.state.as_ref()?.running) == Some(true);
    let full_check = (!running_before || options.recreate).then(|| Check::full(loaded, options.forward));
    let mut room = settle_or_make(engine, loaded, options, name, existing, say).await?;
    if !room.created {
        super::reattach::say(engine, loaded, options, &room.container, &room.name, room.recorded.as_ref(), say).await;
    }
    if !room.created {
        super::forwarder::check_egress(&room.name, room.egress(), options)?;
    }
    if fast_path(engine, loaded, options, &room, say).await {
        return Ok(room.result(loaded, say));
    }
    start(engine, loaded, &mut room, say).await?;
    let started_at = room.started_at();
    let (link, metadata) = link(engine, loaded, &mut room, say).await?;
    // Before the hooks, so they can use the forwarded credentials.
    let check = full_check.unwrap_or_else(|| Check::full(loaded, options.forward));
    super::forwarder::keep(loaded, &room.name, room.egress(), options, &started_at, check, say).await;
    let (probed, complete) = run_hooks(engine, loaded, options, &room, &link, &metadata, say).await?;
    report(engine, &room, &link, probed.as_ref(), complete, say).await?;
    Ok(room.result(loaded, say))
}

/// The room's container name: `--name`'s, or the workspace's.
fn room_name(loaded: &Loaded, options: &UpOptions) -> anyhow::Result<String> {
    let wants = options.peer.then_some(options.peer_group.as_str());
    Ok(match &options.name {
        Some(n) => identity::named_room_name_in(n, wants)
            .with_context(|| format!("--name {n:?} has no letter or digit to name a room by"))?,
        None => identity::room_name_in(&loaded.workspace.local_folder, &loaded.config_path, wants),
    })
}

/// Step 1: the room exists, made now or found (waiting for one another
/// `up` is making; removing it first for `--recreate`), and is one this
/// workroom can drive.
async fn settle_or_make(
    engine: &Engine,
    loaded: &Loaded,
    options: &UpOptions,
    name: String,
    mut existing: Option<ContainerInspectResponse>,
    say: &Notices,
) -> anyhow::Result<Room> {
    let scope = peers::scope_from_env();
    // The workspace's rooms of another peer setting or group, looked for
    // only when the room must be made (one `list` on that path, none on the
    // others), and before initializeCommand, so a refused `up` runs nothing.
    let others = match (&existing, options.recreate) {
        (None, _) | (Some(_), true) => super::siblings(engine, loaded, options.name.as_deref(), &name).await?,
        _ => Vec::new(),
    };
    let beside = match options.recreate {
        true => Beside::Alone,
        false => {
            let siblings: Vec<_> = others.iter().map(|(s, _)| s.clone()).collect();
            let subject = match &options.name {
                Some(n) => format!("--name {n}"),
                None => loaded.workspace.local_folder.display().to_string(),
            };
            peer_plan::beside(&subject, &name, options.peer.then_some(options.peer_group.as_str()), &siblings)
        }
    };
    if let Beside::Refuse(why) = &beside {
        bail!("{why}");
    }
    if let Some(cmd) = loaded.model.lifecycle.get(Hook::Initialize) {
        hooks::run_on_host(cmd, &loaded.workspace.local_folder, say).await?;
    }
    if options.recreate {
        // Held while removing, so of concurrent recreates one removes and
        // says so, and the others find the room gone and say nothing. Let go
        // before the create, which takes it again as any `up` does.
        let _removing = creating::wait_to_make(&name, PEER_CREATE_WAIT).await;
        if let Some(c) = existing.take() {
            if creating::remove_for_recreate(engine, c.id.as_deref().unwrap_or(&name)).await? {
                say.say(format!("removed {name} to recreate it"));
            }
        }
        for (other, id) in &others {
            if creating::remove_for_recreate(engine, id).await? {
                say.say(format!("removed {} to recreate it as {name}", other.name));
            }
            ready::forget(id);
            super::notes::forget(id);
        }
    }
    let making = make::Making { engine, loaded, name: &name, options, scope: scope.as_deref(), say };
    let (container, made) = loop {
        match existing.take() {
            // Being made by another `up`, or left half-made by a dead one.
            Some(c) if creating::is_created(&c) => existing = creating::settle_created(engine, &c, &name, say).await?,
            Some(c) => break (c, None),
            // The branch point of compose rooms: how the room is made (and
            // started, below); the rest of `up` is the same for every room.
            None => match match &loaded.model.source {
                crate::config::Source::Compose(compose) => {
                    if options.workspace == crate::settings::WorkspaceMode::Volume {
                        let folder = loaded.workspace.local_folder.display().to_string();
                        return Err(super::workspace_volume::WorkspaceError::Compose { folder }.into());
                    }
                    super::compose::create_room(&making, compose).await?
                }
                _ => make::create_image_room(&making).await?,
            } {
                Created::Ours(c, prepared, made) => break (c, Some((prepared, made))),
                Created::Theirs(c) => existing = Some(c),
            },
        }
    };
    super::reattach::check_compatible(&container, loaded, &name, say)?;
    if let Beside::Note(note) = beside {
        say.note(note);
    }
    let id = container.id.clone().unwrap_or_else(|| name.clone());
    let remote_user = label(&container, labels::REMOTE_USER).unwrap_or("root").to_string();
    let created = made.is_some();
    let recorded = (!created).then(|| metadata::of_container(loaded, &name, label(&container, labels::METADATA)));
    let (prepared, made) = match made {
        Some((prepared, made)) => (prepared, Some(*made)),
        None => (None, None),
    };
    Ok(Room { name, container, id, created, remote_user, made, prepared, recorded })
}

/// Step 2, the fast path: running, hooks recorded done for this start, and
/// no postAttach to run. Nothing is due, so no link to the daemon is
/// needed; `true` when `up` is done.
async fn fast_path(engine: &Engine, loaded: &Loaded, options: &UpOptions, room: &Room, say: &Notices) -> bool {
    // The image's own postAttach counts too; the room's label says so
    // without a round trip (it holds the image's entries).
    let attach_due = options.post_attach
        && options.hooks == hooks::Scope::All
        && (loaded.model.lifecycle.get(Hook::PostAttach).is_some()
            || room.recorded.as_ref().is_some_and(|m| !m.merged.hook(Hook::PostAttach).is_empty()));
    let started_at = room.started_at();
    if !room.running() || room.created || attach_due || !ready::is_done(&room.id, &started_at) {
        return false;
    }
    // State files only: a forwarder that died or belongs to an earlier
    // start is replaced without a daemon link.
    let fast = Check::Fast(options.forward);
    super::forwarder::keep(loaded, &room.name, room.egress(), options, &started_at, fast, say).await;
    // Only rooms that run the image's program pay a link for its state.
    let entrypoint = room.container.config.as_ref().and_then(|c| c.entrypoint.clone()).unwrap_or_default();
    if super::program::has_program(&entrypoint) {
        if let Some(line) = super::program::state(engine, &room.id).await {
            say.say(format!("{}: the image's program {line}", room.name));
        }
    }
    true
}

/// Step 3: the room runs, and `room` says so, with this start's time.
async fn start(engine: &Engine, loaded: &Loaded, room: &mut Room, say: &Notices) -> anyhow::Result<()> {
    if room.running() {
        return Ok(());
    }
    peers::wake_anchor(engine, &room.container).await;
    let name = &room.name;
    match (&loaded.model.source, room.container.state.as_ref().and_then(|s| s.status)) {
        (crate::config::Source::Compose(compose), _) => {
            super::compose::start(engine, loaded, compose, &room.container, name, say).await?
        }
        // Settled before we get here; seen only if it changed since.
        (_, Some(ContainerStateStatusEnum::CREATED)) => bail!("{name} is being made by another `up`; run `up` again"),
        (_, Some(ContainerStateStatusEnum::PAUSED)) => bail!("{name} is paused; `docker unpause {name}` first"),
        _ => engine.start(&room.id).await?,
    }
    let now = engine.inspect_container(&room.id).await?;
    room.container = now.with_context(|| format!("{} vanished after its start", room.name))?;
    Ok(())
}

/// Step 4: a link to the room's daemon (the one its making opened, if it
/// was made now), the room prepared for nested containers, and its
/// metadata: computed once here, for the hooks.
async fn link(
    engine: &Engine,
    loaded: &Loaded,
    room: &mut Room,
    say: &Notices,
) -> anyhow::Result<(RoomLink, RoomMetadata)> {
    let (link, metadata) = match room.made.take() {
        Some((metadata, link)) => (link, metadata),
        None => (
            make::wait_for_daemon(engine, &room.id).await?,
            super::reattach::metadata(engine, loaded, &room.container, room.recorded.as_ref()).await?,
        ),
    };
    if room.nested() {
        // Before the hooks, so they can use podman; the storage tmpfs is
        // empty after every start, so this runs at each one.
        for w in super::nested::prepare(&link, &room.remote_user).await {
            say.warn(format!("{}: {w}", room.name));
        }
    }
    Ok((link, metadata))
}

/// Step 5: the user's environment probed, and the hooks due run with it;
/// the probed environment, for the ready record, and whether every due
/// hook ran (the options may stop them early).
async fn run_hooks(
    engine: &Engine,
    loaded: &Loaded,
    options: &UpOptions,
    room: &Room,
    link: &RoomLink,
    metadata: &RoomMetadata,
    say: &Notices,
) -> anyhow::Result<(Option<BTreeMap<String, String>>, bool)> {
    let container_env = super::container_env(&room.container);
    let mut ctx = hooks::HookContext::new(loaded, &metadata.merged, &room.remote_user, &container_env, say);
    ctx.created_at = room.container.created.clone().unwrap_or_default();
    ctx.started_at = room.started_at();
    ctx.uid_default = options.uid_default;
    ctx.dotfiles = options.dotfiles.clone();
    ctx.env.extend(crate::forward::room_env(&room.name));
    // userEnvProbe (default loginInteractiveShell, as the reference): the
    // user's shell environment, under remoteEnv, for the hooks and for exec.
    let mode = metadata
        .merged
        .user_env_probe
        .or(options.user_env_probe)
        .unwrap_or(crate::config::UserEnvProbe::LoginInteractiveShell);
    let probed = match super::probe::probe(link, &room.remote_user, mode, &ctx.cwd, say).await {
        Ok(probed) => probed,
        // Hooks run without the probed environment only when the profile
        // is to blame; an engine that stopped carrying the link fails this
        // `up`, the room kept, and the next one probes again.
        Err(late) => match make::stall(engine, &room.id).await {
            Some(seconds) => {
                let host = engine.host();
                bail!(
                    "the engine at {host} stopped answering during userEnvProbe (a call took {seconds} s); {}",
                    make::kept(&room.name)
                )
            }
            None => {
                say.warn(late.to_string());
                None
            }
        },
    }
    .map(|env| super::probe::with_container_path(env, container_env.get("PATH"), &room.remote_user));
    let remote = std::mem::take(&mut ctx.env);
    let under = probed.clone().unwrap_or_default();
    if !options.remote_env.is_empty() {
        ctx.plan_env = Some(under.clone().into_iter().chain(remote.clone()).collect());
    }
    ctx.env = under.into_iter().chain(options.remote_env.clone()).chain(remote).collect();
    let complete = hooks::run_due(link, &ctx, options.post_attach, options.hooks).await?;
    Ok((probed, complete))
}

/// Step 6: what a room made now learnt of its users and peers, the start
/// recorded done, and the daemon's program and version.
async fn report(
    engine: &Engine,
    room: &Room,
    link: &RoomLink,
    probed: Option<&BTreeMap<String, String>>,
    complete: bool,
    say: &Notices,
) -> anyhow::Result<()> {
    let (name, id) = (&room.name, &room.id);
    if let Some(p) = &room.prepared {
        peers::say_joined(engine, link, (name, id), &room.remote_user, p, say).await;
    }
    // Remember that this start needs nothing more (the start time is read
    // after the start, so a room we just started records its own); unless
    // hooks were left for a later `up`, which must not take the fast path.
    if complete {
        if let Some(started) = engine.inspect_container(id).await?.and_then(|c| c.state?.started_at) {
            ready::mark_done(id, &started, probed);
        }
    }
    if let Some(line) = link.status().await.ok().as_ref().and_then(super::program::describe) {
        say.say(format!("{name}: the image's program {line}"));
    }
    if let Some(note) = super::handoff::advice(link, &room.container).await {
        say.note(note);
    }
    Ok(())
}
