//! Peer messaging on the engine: a peer group's anchor image and container,
//! its socket volume and its host registry folder, made when a participating
//! room is created. The decisions are in `plan::peers`; this is the sequence
//! of calls.
//!
//! Nothing here may block `up`: when the anchor or the volume cannot be made,
//! the caller creates the room without peers and says why.

use super::{creating, daemon};
use crate::engine::{Engine, EngineError};
use crate::link::RoomLink;
use crate::plan::labels;
use crate::plan::peers::{self, AnchorAction, AnchorFacts, Names, PeerJoin};
use anyhow::{bail, Context as _};
use bollard::models::{ContainerCreateBody, ContainerSummary, HostConfig, Mount, MountType};
use std::collections::HashMap;
use std::path::Path;
use workroomd::proto::{Request, Response};
use workroomd::users::{self, GroupEntry, PasswdEntry};

/// This install's scope: `WORKROOM_SCOPE` from the environment.
/// What `up` says once a room made now has joined its group: the
/// preparation's warnings, what its users turned out to be (kept, so every
/// later `up` says it too) and, for information, who else shares the group.
pub async fn say_joined(
    engine: &Engine,
    link: &RoomLink,
    (name, id): (&str, &str),
    remote_user: &str,
    p: &Prepared,
    say: &crate::notices::Notices,
) {
    for w in &p.warnings {
        say.warn(w.clone());
    }
    let lasting = verify(link, name, remote_user, p, &p.names.volume).await;
    for w in &lasting {
        say.warn(w.clone());
    }
    super::notes::save(id, &lasting);
    // Informational: an engine that cannot list now costs the line only.
    if let Ok(members) = group_rooms(engine, &p.names).await {
        let others: Vec<String> = members
            .iter()
            .filter(|c| c.id.as_deref() != Some(id))
            .filter_map(|c| c.names.as_ref()?.first().map(|n| n.trim_start_matches('/').to_string()))
            .collect();
        say.note(peers::sharing_note(name, &p.names, &others));
    }
}

pub fn scope_from_env() -> Option<String> {
    std::env::var(peers::SCOPE_ENV).ok().filter(|s| !s.is_empty())
}

/// What a new participating room gets, and what to tell the user.
pub struct Prepared {
    pub join: PeerJoin,
    /// The group's anchor and volume.
    pub names: Names,
    /// The anchor's id, which Docker stores in the room's `PidMode`.
    pub anchor_id: String,
    /// The uid:gid the room's sessions were expected to run as.
    pub ids: (u32, u32),
    /// The owner the socket volume has.
    pub owner: String,
    pub warnings: Vec<String>,
}

/// The room's users as its configuration names them.
pub struct RoomUsers<'a> {
    /// Whose home and ids the room's sessions get.
    pub remote: &'a str,
    /// `updateRemoteUserUID`.
    pub update_uid: bool,
    /// The configuration file, and the users it names (property, user),
    /// each refused when the image lacks it.
    pub config: &'a str,
    pub named: Vec<(&'static str, &'a str)>,
}

/// Decides the room's home and session uid from the image's passwd, then
/// makes sure the anchor of its group (`group` and that uid) runs, the
/// group's volume exists and is initialised, and its registry folder
/// (under `registry_root`) exists.
pub async fn prepare(
    engine: &Engine,
    scope: Option<&str>,
    group: &str,
    image: &str,
    room_users: &RoomUsers<'_>,
    registry_root: &Path,
) -> anyhow::Result<Prepared> {
    let RoomUsers { remote: remote_user, update_uid, .. } = *room_users;
    let mut warnings = Vec::new();
    let passwd = if remote_user == "root" || remote_user == "0" {
        Vec::new()
    } else {
        let (passwd, groups) = image_users(engine, scope, image).await.context("read the image's /etc/passwd")?;
        // A user the image lacks is refused (after the start, by the
        // daemon's reading); refused here, before anything is made, its
        // refusal is the only line rather than following a peer warning.
        super::users::check(room_users.config, &room_users.named, &passwd, &groups)?;
        passwd
    };
    let home = peers::home_of(remote_user, &passwd)
        .with_context(|| format!("{image} has no home folder for {remote_user} in /etc/passwd"))?;
    let host = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
    let ids = peers::session_ids(remote_user, &passwd, host, update_uid)
        .with_context(|| format!("{image} has no user {remote_user} in /etc/passwd"))?;

    let names = peers::names(scope, group, ids.0);
    let registry = peers::registry_folder(registry_root, group, ids.0);

    let daemon = daemon::for_engine(engine).await?;
    let digest = daemon.digest();
    let anchor_image = anchor_image_of(engine, &daemon.bytes, &digest).await?;
    let (anchor_id, owner) = ensure_group(engine, &names, &anchor_image, &digest, ids, &mut warnings).await?;
    warnings.extend(ensure_registry(&registry, ids)?);
    Ok(Prepared {
        join: PeerJoin {
            anchor: names.anchor.clone(),
            volume: names.volume.clone(),
            registry: registry.display().to_string(),
            home,
        },
        names,
        anchor_id,
        ids,
        owner,
        warnings,
    })
}

/// The rooms that joined the group of `names` (running or not), this
/// install's only.
pub async fn group_rooms(engine: &Engine, names: &Names) -> Result<Vec<ContainerSummary>, EngineError> {
    let filters = super::scoped(vec![
        labels::SCHEMA.to_string(),
        format!("{}=1", peers::PEER_LABEL),
        format!("{}={}", peers::GROUP_LABEL, names.group),
        format!("{}={}", peers::UID_LABEL, names.uid),
    ]);
    engine.list(&filters).await
}

/// The anchor's one-file image, imported if missing: also what the
/// workspace probe (`workspace_volume.rs`) makes its throwaway container
/// from, since it is on every engine workroom has used, without a registry.
pub(super) async fn daemon_image(engine: &Engine) -> anyhow::Result<String> {
    let daemon = daemon::for_engine(engine).await?;
    anchor_image_of(engine, &daemon.bytes, &daemon.digest()).await
}

/// How long an `up` waits for another of this host importing the anchor
/// image (a 2 MB tar: well under a second on a healthy engine); past this
/// it imports the image itself.
const IMPORT_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A one-file image: the daemon at its room path, nothing else. Imported,
/// never pulled, tagged with the daemon's digest. Also what the daemon
/// volume is filled from (`daemon_volume.rs`), for any daemon's digest.
pub(super) async fn anchor_image_of(engine: &Engine, binary: &[u8], digest: &str) -> anyhow::Result<String> {
    let image = format!("{}:{digest}", peers::ANCHOR_REPO);
    if engine.inspect_image(&image).await?.is_some() {
        return Ok(image);
    }
    // Ups at once on an engine that lacks it would each import it, and
    // every import but the last would be left untagged: one imports, under
    // a lock of this host's, and the others find its image.
    let _importing = creating::wait_to_make(&format!("{}-{digest}", peers::ANCHOR_REPO), IMPORT_WAIT).await;
    if engine.inspect_image(&image).await?.is_some() {
        return Ok(image);
    }
    let tar = daemon::upload_tar(binary).context("pack the daemon for the anchor image")?;
    // No scope label: the image is the engine's, shared by every scope's
    // anchor, and a container takes its image's labels, so a sweep by one
    // scope's label would take another scope's anchor with it.
    let changes = vec![format!("LABEL {}={digest}", peers::DAEMON_LABEL), format!("LABEL {}=1", labels::SCHEMA)];
    let id = engine.import_rootfs(tar, peers::ANCHOR_REPO, digest, changes).await.context("import the anchor image")?;
    // An engine that names the import otherwise (Podman once made every
    // one `workroom-anchor:latest`) would fail every later use of it by
    // name, one stray image per `up`: said here, and nothing left behind.
    if engine.inspect_image(&image).await?.is_none() {
        if !id.is_empty() {
            let _ = engine.remove_image(&id).await;
        }
        bail!("the engine imported the anchor image but did not name it {image}; it was removed");
    }
    Ok(image)
}

/// The group's anchor, running, and its socket volume, initialised: the
/// anchor's id and the volume's owner. Rooms of a new group brought up at
/// once (agents started side by side) each found no volume and each ran
/// the job that initialises it, ten throwaway containers where one was
/// due, on the engine all ten rooms wait on. So what is missing is made
/// under the group's lock on this host (the creator lock, keyed by the
/// anchor's name), and the others wait for it and find it made; an `up`
/// that finds the group made, with nobody making it, takes no lock and
/// makes the same two engine calls as before. Other hosts still race, as
/// the engine's refusals allow (`create_anchor`).
async fn ensure_group(
    engine: &Engine,
    names: &Names,
    image: &str,
    digest: &str,
    ids: (u32, u32),
    warnings: &mut Vec<String>,
) -> anyhow::Result<(String, String)> {
    if let Some(made) = made_group(engine, names, digest).await? {
        return Ok(made);
    }
    let _making = creating::wait_to_make(&names.anchor, creating::PEER_CREATE_WAIT).await;
    let anchor_id = ensure_anchor(engine, names, image, digest, warnings).await?;
    let owner = ensure_volume(engine, names, image, ids).await?;
    Ok((anchor_id, owner))
}

/// The group as [`ensure_group`] leaves it, when it is so already: the
/// anchor running this build's daemon, the volume there, and no `up` of
/// this host making either (a volume whose initialising job still runs
/// is there before it is ready).
async fn made_group(engine: &Engine, names: &Names, digest: &str) -> anyhow::Result<Option<(String, String)>> {
    let Some(anchor) = engine.inspect_container(&names.anchor).await?.map(|c| AnchorFacts::of(&c)) else {
        return Ok(None);
    };
    if peers::anchor_action(Some(&anchor), digest, &[]) != AnchorAction::Use {
        return Ok(None);
    }
    let Some(volume) = engine.volume_labels(&names.volume).await? else { return Ok(None) };
    if matches!(creating::try_lock(&names.anchor), creating::Lock::Busy) {
        return Ok(None);
    }
    Ok(Some((anchor.id, owner_of(&volume))))
}

/// The owner a socket volume's label records; one made by hand or by an
/// older workroom has no record.
fn owner_of(volume_labels: &HashMap<String, String>) -> String {
    volume_labels.get(peers::OWNER_LABEL).cloned().unwrap_or_else(|| "unknown".into())
}

/// The group's anchor container, running; returns its id.
async fn ensure_anchor(
    engine: &Engine,
    names: &Names,
    image: &str,
    digest: &str,
    warnings: &mut Vec<String>,
) -> anyhow::Result<String> {
    let existing = engine.inspect_container(&names.anchor).await?.map(|c| AnchorFacts::of(&c));
    let holders = match &existing {
        Some(a) if a.ours && a.digest.as_deref() != Some(digest) => holders(engine, names, a).await?,
        _ => Vec::new(),
    };
    let existing_id = existing.as_ref().map(|a| a.id.clone()).unwrap_or_default();
    match peers::anchor_action(existing.as_ref(), digest, &holders) {
        AnchorAction::Use => Ok(existing_id),
        AnchorAction::Start => {
            start_tolerant(engine, &names.anchor).await?;
            Ok(existing_id)
        }
        AnchorAction::Create => create_anchor(engine, names, image, digest).await,
        AnchorAction::Replace => {
            engine.remove(&names.anchor, false).await?;
            create_anchor(engine, names, image, digest).await
        }
        AnchorAction::KeepOld { holders } => {
            warnings.push(format!(
                "{} is from another workroom build; it is kept because {} share its PID namespace (it only reaps, \
                 so peers still work; stop those rooms and the next `up` replaces it)",
                names.anchor,
                holders.join(", ")
            ));
            if !existing.as_ref().is_some_and(|a| a.running) {
                start_tolerant(engine, &names.anchor).await?;
            }
            Ok(existing_id)
        }
        AnchorAction::Foreign => bail!(
            "a container named {} exists but was not made by workroom; rename or remove it to use peer messaging",
            names.anchor
        ),
    }
}

/// How long the anchor's name may be taken yet not inspectable. The engine
/// reserves a name before the container it names can be inspected, so an
/// `up` whose create lost the race (409) may find nothing for a moment (one
/// round in three of five rooms of a new group at once did). Five seconds
/// cover a loaded engine; past them the other `up` has most likely failed
/// and removed what it made.
const ANCHOR_NAME_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Creates and starts the anchor; returns its id. Several `up`s of a new
/// group race here: one creates, the others take its anchor.
async fn create_anchor(engine: &Engine, names: &Names, image: &str, digest: &str) -> anyhow::Result<String> {
    let mut wait = crate::retry::Backoff::new(crate::retry::Pace::RACE, ANCHOR_NAME_WAIT);
    let id = loop {
        match engine.create_container(&names.anchor, peers::anchor_body(image, digest, names)).await {
            Ok(id) => break id,
            // Another `up` made it first: start theirs (starting twice is harmless).
            Err(EngineError::Refused { status: 409, .. }) => {
                if let Some(id) = engine.inspect_container(&names.anchor).await?.and_then(|c| c.id) {
                    break id;
                }
                if wait.expired() {
                    bail!(
                        "{} was taken by another `up` but never appeared in {} s",
                        names.anchor,
                        ANCHOR_NAME_WAIT.as_secs()
                    );
                }
            }
            Err(e) => return Err(anyhow::Error::new(e).context(format!("create {}", names.anchor))),
        }
        wait.pause().await;
    };
    start_tolerant(engine, &names.anchor).await?;
    Ok(id)
}

/// Starts a container that a concurrent `up` may be starting too.
async fn start_tolerant(engine: &Engine, name: &str) -> anyhow::Result<()> {
    match engine.start(name).await {
        Ok(()) | Err(EngineError::Refused { status: 304, .. }) => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context(format!("start {name}"))),
    }
}

/// Rooms whose `PidMode` names the anchor (by name or by the id Docker stores).
async fn holders(engine: &Engine, names: &Names, anchor: &AnchorFacts) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for c in super::all_rooms(engine).await? {
        let Some(id) = c.id.as_deref() else { continue };
        if id == anchor.id {
            continue;
        }
        if let Some(room) = engine.inspect_container(id).await? {
            let mode = room.host_config.as_ref().and_then(|h| h.pid_mode.as_deref());
            if peers::joins(mode, &names.anchor, Some(&anchor.id)) {
                out.push(room.name.unwrap_or_default().trim_start_matches('/').to_string());
            }
        }
    }
    Ok(out)
}

/// The socket volume, created and given to `ids` 0700 on first sight (only
/// a real not-found is absent). Returns the owner it has.
async fn ensure_volume(engine: &Engine, names: &Names, anchor_image: &str, ids: (u32, u32)) -> anyhow::Result<String> {
    if let Some(existing) = engine.volume_labels(&names.volume).await? {
        return Ok(owner_of(&existing));
    }
    let owner = peers::owner_label(ids);
    let mut volume_labels: HashMap<String, String> = peers::group_labels(names).into_iter().collect();
    volume_labels.insert(labels::SCHEMA.into(), labels::SCHEMA_VERSION.into());
    volume_labels.insert(peers::OWNER_LABEL.into(), owner.clone());
    engine.create_volume(&names.volume, volume_labels).await?;
    if let Err(e) = init_volume(engine, names, anchor_image, &owner).await {
        return Err(match engine.remove_volume(&names.volume).await {
            Ok(()) => e.context(format!("{} could not be initialised (removed again)", names.volume)),
            Err(r) => e.context(format!(
                "{} could not be initialised, and removing it failed too ({r}); `docker volume rm {}`",
                names.volume, names.volume
            )),
        });
    }
    Ok(owner)
}

/// `workroomd own UID:GID 700 /tmp/cc-socks` as root in a throwaway
/// container of the anchor image (no other image, no shell needed).
async fn init_volume(engine: &Engine, names: &Names, image: &str, owner: &str) -> anyhow::Result<()> {
    let mut job_labels = peers::scope_labels(names.scope.as_deref());
    job_labels.insert(peers::JOB_LABEL.into(), "peer-volume-init".into());
    let body = ContainerCreateBody {
        image: Some(image.into()),
        user: Some("0".into()),
        entrypoint: Some(vec![
            workroomd::room::DAEMON_PATH.into(),
            "own".into(),
            owner.into(),
            "700".into(),
            peers::SOCKS_DIR.into(),
        ]),
        cmd: Some(Vec::new()),
        labels: Some(job_labels.into_iter().collect()),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            mounts: Some(vec![Mount {
                target: Some(peers::SOCKS_DIR.into()),
                source: Some(names.volume.clone()),
                typ: Some(MountType::VOLUME),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let (code, output) = engine.run_job(&job_name("socks-init"), body).await?;
    if code != 0 {
        bail!("`workroomd own {owner} 700 {}` exited {code}: {output}", peers::SOCKS_DIR);
    }
    Ok(())
}

/// The image's /etc/passwd, read from a created, never started container.
async fn image_users(
    engine: &Engine,
    scope: Option<&str>,
    image: &str,
) -> anyhow::Result<(Vec<PasswdEntry>, Vec<GroupEntry>)> {
    let mut job_labels = peers::scope_labels(scope);
    job_labels.insert(peers::JOB_LABEL.into(), "passwd-probe".into());
    let body = ContainerCreateBody {
        image: Some(image.into()),
        // Never run; an entrypoint makes the create valid on images with no CMD.
        entrypoint: Some(vec![workroomd::room::DAEMON_PATH.into()]),
        labels: Some(job_labels.into_iter().collect()),
        host_config: Some(HostConfig { network_mode: Some("none".into()), ..Default::default() }),
        ..Default::default()
    };
    let id = engine.create_container(&job_name("passwd"), body).await?;
    let passwd = engine.read_file(&id, "/etc/passwd").await;
    let groups = engine.read_file(&id, "/etc/group").await;
    engine.remove(&id, true).await?;
    let text = |read: Option<Vec<u8>>| String::from_utf8_lossy(&read.unwrap_or_default()).into_owned();
    Ok((users::parse_passwd(&text(passwd?)), users::parse_group(&text(groups?))))
}

fn job_name(what: &str) -> String {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    format!("workroom-job-{what}-{}-{nanos:08x}", std::process::id())
}

/// The group's host registry folder, bound at `~/.claude`, and Codex's
/// folder in it: made 0700 for the session user (a root workroom gives them
/// to the room's ids; anyone else can only make them their own, which is
/// the room's too when updateRemoteUserUID applies). Returns a warning when
/// an existing registry belongs to someone else.
fn ensure_registry(registry: &Path, ids: (u32, u32)) -> anyhow::Result<Option<String>> {
    let warning = match registry.exists() {
        true => registry_owner_warning(registry, ids.0),
        false => {
            make_private(registry, ids)?;
            None
        }
    };
    // Also for a group made before Codex had a folder in it. Codex refuses
    // a `CODEX_HOME` that does not exist, so it is made before any room runs.
    let codex = registry.join(peers::CODEX_IN_REGISTRY);
    if warning.is_none() && !codex.exists() {
        make_private(&codex, ids)?;
    }
    Ok(warning)
}

fn make_private(folder: &Path, ids: (u32, u32)) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(folder).with_context(|| format!("create the peer group's folder {}", folder.display()))?;
    if nix::unistd::getuid().is_root() {
        std::os::unix::fs::chown(folder, Some(ids.0), Some(ids.1))
            .with_context(|| format!("give {} to {}:{}", folder.display(), ids.0, ids.1))?;
    }
    std::fs::set_permissions(folder, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("chmod 700 {}", folder.display()))?;
    Ok(())
}

/// A room made before its peer group kept Claude Code's state (no
/// `CLAUDE_CONFIG_DIR`): its `~/.claude.json` is copied into the group's
/// folder when the group has none yet, and the line says that `up
/// --recreate` makes the room use it; otherwise the line says how.
/// Decided from the inspect first (`plan::peers::state_move`): a room that
/// needs nothing costs no engine call, and only the copy reads the room.
pub async fn move_agent_state(
    engine: &Engine,
    c: &bollard::models::ContainerInspectResponse,
    room: &str,
    user_sets_config: bool,
) -> Option<String> {
    let facts = peers::RoomPeerFacts::of(c);
    let env = super::container_env(c);
    let (from, to) = match peers::state_move(room, &env, user_sets_config, facts.registry.as_ref(), |p| p.exists()) {
        peers::StateMove::Nothing => return None,
        peers::StateMove::Say(line) => return Some(line),
        peers::StateMove::Copy { from, to } => (from, to),
    };
    let uid = facts.uid?;
    let me = nix::unistd::getuid();
    let by_hand = |why: &str| {
        format!(
            "{room} keeps Claude Code's state in {from}, apart from its peer group's ({why}); copy it into ~/{} in              the room, then `workroom up --recreate` makes {room} use it",
            peers::REGISTRY_IN_HOME
        )
    };
    // Written on the host as the group's uid would write it: a root
    // workroom gives the file away, anyone else writes it as themselves,
    // which is only right when they are the group's uid.
    if !me.is_root() && me.as_raw() != uid {
        return Some(by_hand(&format!("its group's folder is uid {uid}'s, not this user's")));
    }
    let id = c.id.as_deref().unwrap_or(room);
    let bytes = match engine.read_file(id, &from).await {
        Ok(Some(bytes)) => bytes,
        // Never onboarded here: nothing to keep, nothing to say.
        Ok(None) => return None,
        Err(e) => return Some(by_hand(&format!("reading it failed: {e}"))),
    };
    use std::os::unix::fs::PermissionsExt;
    let written = workroomd::atomic::write_with_permissions(&to, &bytes, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| match me.is_root() {
            true => std::os::unix::fs::chown(&to, Some(uid), None),
            false => Ok(()),
        });
    Some(match written {
        Ok(()) => peers::state_copied(room, &from, &to),
        Err(e) => by_hand(&format!("writing {} failed: {e}", to.display())),
    })
}

/// Said while the registry folder belongs to another uid than the room's
/// sessions (`uid`): the agents could not register there, and would say
/// nothing. Root's sessions write anywhere, so never for uid 0.
pub fn registry_owner_warning(registry: &Path, uid: u32) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(registry).ok().filter(|m| m.is_dir())?;
    (meta.uid() != uid && uid != 0).then(|| {
        format!(
            "the peer registry {} belongs to uid {} but the room's sessions run as uid {uid}; agents there cannot \
             register (chown it, or set peer_registry)",
            registry.display(),
            meta.uid(),
        )
    })
}

/// After the first hooks (updateRemoteUserUID may have moved the user): the
/// user's home and ids as the room's passwd says, against what was planned.
pub async fn verify(link: &RoomLink, room: &str, user: &str, prepared: &Prepared, volume: &str) -> Vec<String> {
    let mut warnings = Vec::new();
    let users = match link.link().request(Request::Users).await {
        Ok(Response::Users { users, .. }) => users,
        _ => return vec![format!("{room}: could not read its users to check peer messaging")],
    };
    let entry = match user.parse::<u32>() {
        Ok(uid) => users.iter().find(|e| e.uid == uid),
        Err(_) => users.iter().find(|e| e.name == user),
    };
    if let Some(e) = entry {
        let bound = prepared.join.home.trim_end_matches('/');
        if e.home.trim_end_matches('/') != bound {
            warnings.push(format!(
                "{room}: {user}'s home is {} but the peer registry was bound at {bound}/{}; agents will not find it",
                e.home,
                peers::REGISTRY_IN_HOME
            ));
        }
    }
    let ids = entry.map_or(prepared.ids, |e| (e.uid, e.gid));
    warnings.extend(peers::owner_warning(room, user, ids, volume, &prepared.owner));
    warnings
}

/// A stopped room that shares the anchor's PID namespace cannot start while
/// the anchor is stopped (after `stop --all`): start the anchor first. Best
/// effort; the room's own start then reports what is wrong.
pub async fn wake_anchor(engine: &Engine, room: &bollard::models::ContainerInspectResponse) {
    let mode = room.host_config.as_ref().and_then(|h| h.pid_mode.as_deref());
    if let Some(target) = mode.and_then(|m| m.strip_prefix("container:")) {
        let _ = start_tolerant(engine, target).await;
    }
}
