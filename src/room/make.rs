//! Making a room, the part every kind of room shares: its plan (the
//! image's metadata under devcontainer.json, the peers it joins, nested
//! containers, labels, host requirements), the create of an image or
//! Dockerfile room, and its first start: the daemon answers and the users
//! the configuration names are the image's. Compose rooms are created by
//! the compose program (`compose.rs`) from the same plan and checked by the
//! same [`started`]; `up.rs` decides when a room is made and what follows.
//!
//! A refused make leaves nothing behind: a container it created is removed,
//! with the named volumes the engine made for it.

use super::creating::{self, PEER_CREATE_WAIT};
use super::{daemon, image, peers};
use crate::config::Loaded;
use crate::engine::{Engine, EngineError};
use crate::link::{RoomLink, RoomLinkError};
use crate::notices::Notices;
use crate::plan::metadata::{self, RoomMetadata};
use crate::plan::peers as peer_plan;
use crate::plan::platform::PLATFORM_LABEL;
use crate::plan::{create, identity};
use crate::retry::{Backoff, Pace};
use anyhow::{bail, Context as _};
use bollard::models::ContainerInspectResponse;
use std::time::Duration;

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
    /// What the room's forwarder carries besides ports (`[forward]`).
    pub forward: crate::forward::settings::ForwardSettings,
    /// How a new room reaches the network (`[egress]`, `--egress`).
    pub egress: crate::settings::EgressMode,
    /// What an `allowlist` room's proxy lets through, as written.
    pub egress_allow: Vec<String>,
    /// The resource caps the settings ask (`plan::caps` meets them with
    /// `runArgs`' own).
    pub caps: crate::plan::caps::Asked,
    /// How its images are made when it is made (`--build-no-cache`).
    pub build: image::BuildHow,
    /// `--remote-env`: for this `up`'s hooks only, over the user's probed
    /// environment and under `remoteEnv`, as the reference orders them.
    pub remote_env: std::collections::BTreeMap<String, String>,
    /// Which of the due hooks run (`--skip-post-create`,
    /// `--skip-non-blocking-commands`).
    pub hooks: super::hooks::Scope,
    /// `userEnvProbe` when no metadata sets it (`--default-user-env-probe`).
    pub user_env_probe: Option<crate::config::UserEnvProbe>,
    /// `updateRemoteUserUID` when no metadata sets it
    /// (`--update-remote-user-uid-default`).
    pub uid_default: super::hooks::UidDefault,
    /// Dotfiles to install after postCreateCommand (`--dotfiles-repository`).
    pub dotfiles: Option<super::hooks::Dotfiles>,
}

/// Who is making which room, and how: what every making step reads.
#[derive(Clone, Copy)]
pub(super) struct Making<'a> {
    pub engine: &'a Engine,
    pub loaded: &'a Loaded,
    pub name: &'a str,
    pub options: &'a UpOptions,
    /// This install's scope (`WORKROOM_SCOPE`), if any.
    pub scope: Option<&'a str>,
    pub say: &'a Notices,
}

pub(super) enum Created {
    /// We made it: our create won (with what peer messaging gave it, and
    /// the metadata it was made with, and the link its users were checked
    /// over).
    Ours(ContainerInspectResponse, Option<Box<peers::Prepared>>, Box<(RoomMetadata, RoomLink)>),
    /// A concurrent `up` made it first.
    Theirs(ContainerInspectResponse),
}

/// The name a room's Dockerfile image gets: `workroom-build/<room>`
/// (`.` is valid in a container name but not in an image repository).
pub fn build_tag(room: &str) -> String {
    format!("workroom-build/{}", room.trim_start_matches(identity::NAME_PREFIX).replace('.', "-"))
}

/// Gets the image, creates the container, uploads the daemon and starts it.
/// On any failure after the create, the container and the volumes the engine
/// made for it are removed again.
pub(super) async fn create_image_room(making: &Making<'_>) -> anyhow::Result<Created> {
    let Making { engine, loaded, name, options, say, .. } = *making;
    // `.` is valid in a container name but not in an image repository.
    let build_tag = build_tag(name);
    // A dry plan first: what the config cannot make (an unsupported runArg, a
    // bad mount) is refused before a build or pull leaves an image behind.
    // The plan is pure; the image facts only shape the program and the user.
    let mut dry = create::check(loaded, &super::HostFiles)?;
    crate::plan::caps::apply(&mut dry, &options.caps)?;
    // The egress mode's refusals (a privileged room, a network of its own)
    // come before anything is pulled or built.
    crate::plan::egress::apply(&mut dry, options.egress)
        .map_err(|e| anyhow::anyhow!("{}: {e}", loaded.config_path.display()))?;
    // Before anything of the room's is made: whether the engine sees the
    // workspace folder, or the workspace goes into a volume.
    let workspace = super::workspace_volume::decide(engine, loaded, name, options.workspace).await?;
    let (image, found) = image::ensure_with(engine, loaded, &build_tag, &options.build, say).await?;
    let base = (image, image::facts(&found));
    let (image, facts) = super::features::image_for(engine, loaded, base, options.lock, &options.build, say).await?;
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
    // The daemon from the engine's daemon volume (made and filled once per
    // engine and daemon) alongside the plan; uploaded when it cannot be had.
    let (planned, daemon_volume) = tokio::join!(
        room_plan(making, loaded, &image, &facts, crate::plan::egress::RoomNetwork::Nothing),
        super::daemon_volume::ensure(engine, &daemon)
    );
    let RoomPlan { mut plan, metadata, peers: peer_setup } = planned?;
    let daemon_volume = match daemon_volume {
        Ok(volume) => {
            crate::plan::create::daemon_from_volume(&mut plan, &volume);
            Some(volume)
        }
        Err(e) => {
            tracing::warn!("the daemon is uploaded into {name}: no daemon volume ({e:#})");
            None
        }
    };
    plan.body.labels.get_or_insert_with(Default::default).insert(PLATFORM_LABEL.into(), daemon.arch.platform().into());
    crate::plan::workspace::label(&mut plan, &workspace);
    let workspace_target = super::workspace_volume::workspace_mount(loaded).map(|m| m.target).unwrap_or_default();
    if let Some(volume) = &workspace.volume {
        if let Some(w) = crate::plan::workspace::leave_out_git(&mut plan) {
            say.warn(format!("{name}: {w}"));
        }
        // The peer registry is a folder of this host too: on the engine, a
        // volume of the group's stands in for it.
        let registry = peer_setup.as_ref().map(|p| (p.join.registry.clone(), format!("{}-registry", p.names.volume)));
        let registry = registry.as_ref().map(|(f, v)| (f.as_str(), v.as_str()));
        for w in crate::plan::workspace::into_volume(&mut plan, &workspace_target, volume, registry) {
            say.warn(format!("{name}: {w}"));
        }
    }
    if options.egress == crate::egress::policy::Mode::Allowlist && !workspace.in_volume() {
        if let Some(folder) = egress_socket_folder(name, say) {
            crate::plan::egress::bind_socket_folder(&mut plan, &folder);
        }
    }
    let upload_folder = plan.upload_folder();
    let tar = match daemon_volume {
        Some(_) => None,
        None => Some(
            daemon::upload_tar_into(&daemon.bytes, workroomd::room::DAEMON_PATH, upload_folder)
                .context("pack the daemon for upload")?,
        ),
    };

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
                say.say(format!(
                    "{name}: the workspace volume {volume} exists and is kept as it is (`workroom sync push` sends local edits)"
                ));
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
            super::workspace_volume::upload(engine, &id, (folder, files.clone()), &workspace_target, &label, say)
                .await?;
            if let Err(e) = super::sync::record_upload(name, folder, &files) {
                say.warn(format!("{name}: `workroom sync` will take every file as changed: {e:#}"));
            }
        }
        if let Some(tar) = tar {
            engine.upload(&id, upload_folder, tar).await.context("upload the daemon into the room")?;
        }
        engine.start(&id).await.map_err(|e| match &daemon_volume {
            Some(volume) if super::daemon_volume::start_lacks_daemon(&e.to_string()) => anyhow::anyhow!(
                "{e}: the daemon volume {volume} holds no daemon (filled elsewhere at the same moment, or emptied); \
                 `docker volume rm {volume}` once no room uses it, then `up` again"
            ),
            _ => blamed(loaded, e),
        })?;
        started(engine, loaded, &metadata, &id, name).await
    }
    .await;
    match prepared {
        Ok((c, link)) => Ok(Created::Ours(c, peer_setup.map(Box::new), Box::new((metadata, link)))),
        Err(e) if engine_stalled(&e) => Err(e.context(kept(name))),
        Err(e) => {
            let _ = engine.remove(&id, true).await;
            for v in plan.named_volumes.iter().filter(|v| !volumes_before.contains(v)) {
                let _ = engine.remove_volume(v).await;
            }
            Err(e.context(format!("{name} was not made (removed again)")))
        }
    }
}

/// The room's egress socket folder, made private to this host's user
/// before the engine binds it; `None` (said) when it cannot be, and the
/// room's proxy connections then ride the link.
pub(super) fn egress_socket_folder(name: &str, say: &Notices) -> Option<String> {
    match crate::egress::store::made_socket_folder(name) {
        Ok(folder) => Some(folder.display().to_string()),
        Err(e) => {
            say.warn(format!("{name}: egress rides the link ({e:#})"));
            None
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

/// Whether `e` came of the engine no longer answering (a stall, or no
/// answer within its bound) rather than of the room: then a room being
/// made is kept as it is, for the next `up` to carry on with. Removing it
/// would throw away a healthy room (and its first hooks' chance) for a
/// fault of the engine's, and a removal could not be sent anyway.
pub(super) fn engine_stalled(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| match cause.downcast_ref::<crate::link::RoomLinkError>() {
        Some(link) => link.is_engine_stall(),
        None => matches!(cause.downcast_ref::<EngineError>(), Some(EngineError::NoAnswer { .. })),
    })
}

/// Whether the engine is stalled: the seconds a small call took, when that
/// was [`crate::engine::STALLED_AFTER`] or more (or it got no answer).
pub(super) async fn stall(engine: &Engine, id: &str) -> Option<u64> {
    let asked = std::time::Instant::now();
    let answered = engine.inspect_container(id).await.is_ok();
    let took = asked.elapsed();
    (!answered || took >= crate::engine::STALLED_AFTER).then_some(took.as_secs())
}

/// What a room kept after an engine stall is, to the user.
pub(super) fn kept(name: &str) -> String {
    format!("{name} is kept as far as it was made; `workroom up` carries on once the engine answers")
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
    making: &Making<'_>,
    loaded: &Loaded,
    image: &str,
    facts: &create::ImageFacts,
    network: crate::plan::egress::RoomNetwork<'_>,
) -> anyhow::Result<RoomPlan> {
    let Making { engine, name, options, scope, say, .. } = *making;
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
                say.warn(format!("{name} starts without peer messaging: {}", chain.join(": ")));
                None
            }
        }
    } else {
        None
    };
    let inputs = create::Inputs {
        name,
        image,
        facts,
        metadata: &metadata,
        metadata_privileged: !options.refuse_metadata_privileged,
        peer: peer_setup.as_ref().map(|p| &p.join),
        host: &super::HostFiles,
    };
    let mut plan = create::plan_with_peers(loaded, &inputs)?;
    let confinement = match options.shape.nested {
        true => super::nested::confinement(engine).await,
        false => crate::plan::nested::Confinement::Allowed { profile: None, apparmor: false },
    };
    for w in crate::plan::nested::apply(&mut plan, options.shape, &confinement) {
        say.warn(format!("{name}: {w}"));
    }
    for w in crate::plan::caps::apply(&mut plan, &options.caps)? {
        say.warn(format!("{name}: {w}"));
    }
    let config = loaded.config_path.display().to_string();
    let egress = crate::plan::egress::apply_on(&mut plan, options.egress, network);
    for w in egress.map_err(|e| anyhow::anyhow!("{config}: {e}"))? {
        say.warn(format!("{name}: {w}"));
    }
    // Before the create: when the engine refuses what metadata asked for
    // (privileged, a capability), the line saying who asked is already out.
    for w in metadata.warnings.iter().chain(&plan.warnings) {
        say.warn(w.clone());
    }
    let room_labels = plan.body.labels.get_or_insert_with(Default::default);
    room_labels.extend(peer_plan::scope_labels(scope));
    let wants = options.peer.then_some(options.peer_group.as_str());
    let joined = peer_setup.as_ref().map(|p| (&p.names, p.anchor_id.as_str()));
    room_labels.extend(peer_plan::room_labels(wants, joined));
    room_labels.insert(creating::CREATOR_HOST_LABEL.to_string(), creating::host_name());
    super::requirements::apply(engine, loaded, &mut plan, say).await;
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

pub(super) fn label<'a>(c: &'a ContainerInspectResponse, key: &str) -> Option<&'a str> {
    c.config.as_ref()?.labels.as_ref()?.get(key).map(String::as_str)
}

/// How long after a start the daemon's exec path may still be missing: the
/// daemon makes it before anything else, in its first milliseconds; past
/// this the room has no daemon there, and waiting longer will not make one.
const DAEMON_LINK_WAIT: Duration = Duration::from_secs(3);

/// Connects to the daemon, retrying while it is still starting (the relay
/// fails until the daemon has bound its socket).
pub(super) async fn wait_for_daemon(engine: &Engine, id: &str) -> anyhow::Result<RoomLink> {
    let mut wait = Backoff::new(Pace::STARTING, DAEMON_READY_WAIT);
    let began = std::time::Instant::now();
    loop {
        match RoomLink::connect(engine, id).await {
            Ok(link) => return Ok(link),
            Err(e) if e.is_retryable() && !wait.expired() => {}
            // A daemon started from the daemon volume links the exec path
            // to itself first thing; the relay's exec can come sooner.
            Err(RoomLinkError::NoDaemon { .. }) if began.elapsed() < DAEMON_LINK_WAIT => {}
            // Not the daemon's fault: said as the engine's.
            Err(e) if e.is_engine_stall() => return Err(e.into()),
            Err(e) => return Err(anyhow::Error::new(e).context(format!("the daemon in {id} did not answer"))),
        }
        wait.pause().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_room_is_kept_when_the_engine_stalled_under_its_making_and_removed_when_the_daemon_failed() {
        let stalled = RoomLinkError::EngineStalled { room: "r".into(), host: "unix:///d.sock".into(), seconds: 5 };
        assert!(engine_stalled(&anyhow::Error::new(stalled).context("the start")));
        let silent = EngineError::NoAnswer { host: "unix:///d.sock".into(), seconds: 120 };
        assert!(engine_stalled(&anyhow::Error::new(silent).context("upload the daemon into the room")));
        let daemon = RoomLinkError::NotListening { room: "r".into(), detail: "cannot reach the daemon".into() };
        assert!(!engine_stalled(&anyhow::Error::new(daemon).context("the daemon in r did not answer")));
        let refused = EngineError::Refused { action: "start".into(), status: 500, message: "no".into() };
        assert!(!engine_stalled(&anyhow::Error::new(refused)));
    }
}
