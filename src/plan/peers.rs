//! Peer messaging, decided without I/O. Agent CLIs such as Claude Code find
//! each other when three things hold, and a participating room gets all three
//! from its peer group:
//! - one PID namespace: `PidMode: container:<anchor>`, so a registry entry's
//!   pid answers `kill(pid, 0)` in every room of the group;
//! - one inbox folder: the group's volume [`Names::volume`] at [`SOCKS_DIR`],
//!   0700 and owned by the group's uid (the CLI silently falls back to a
//!   private `/tmp/cc-socks-<uid>` when the folder is looser or someone else's);
//! - one session registry: the group's host folder bound at the remote
//!   user's `~/.claude`.
//!
//! The same folder keeps the agents' own state for the whole group:
//! `CLAUDE_CONFIG_DIR` points Claude Code at it, so its `.claude.json`
//! (login, onboarding, trusted folders), which it otherwise keeps beside
//! `~/.claude` and loses with the container, lives with the group; Codex
//! gets `CODEX_HOME` in a folder of its own inside it ([`agent_env`]).
//!
//! A group is a trust domain keyed by a name (`peer_group`, `default` unless
//! set) and the uid its sessions run as: rooms of one group share processes
//! and, as one uid, can reach each other's files through `/proc/PID/root`;
//! rooms of different groups share nothing.
//!
//! The anchor is a container of its own, running `workroomd anchor` as PID 1
//! from a one-file image imported from the daemon this workroom carries; it
//! reaps the orphans of every room. See docs/adr/0005-peer-messaging.md.

use super::labels::{self, Labels};
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, HostConfig, Mount, MountType, RestartPolicy, RestartPolicyNameEnum,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use workroomd::users::PasswdEntry;

/// The peer group of a room whose settings name none. Here, with the
/// groups, so that plan needs nothing of the settings (which read the
/// caps' types from plan).
pub const DEFAULT_PEER_GROUP: &str = "default";

/// Where agent CLIs put their inbox sockets (Claude Code's fixed path).
pub const SOCKS_DIR: &str = "/tmp/cc-socks";
/// The folder in the remote user's home that holds the session registry.
pub const REGISTRY_IN_HOME: &str = ".claude";
/// Claude Code keeps all its state (`.claude.json` too) in this folder
/// when the variable names one.
pub const CLAUDE_CONFIG_ENV: &str = "CLAUDE_CONFIG_DIR";
/// Codex keeps its state (`auth.json`, `config.toml`, sessions) here.
pub const CODEX_HOME_ENV: &str = "CODEX_HOME";
/// Codex's folder inside the group's: its own, next to Claude Code's files
/// (ADR 0005 says why it is not a second bind).
pub const CODEX_IN_REGISTRY: &str = "codex";
/// Claude Code's state file: beside `~/.claude` without
/// [`CLAUDE_CONFIG_ENV`], inside the named folder with it.
pub const CLAUDE_STATE_FILE: &str = ".claude.json";

/// Names a second workroom install (or a test run) on the same engine: its
/// rooms, anchors and volumes carry `workroom.scope=<value>`, the anchor and
/// volume names end in `-<value>`, the default registry folder is its own,
/// and `list`/`stop`/`down` see only its own.
pub const SCOPE_ENV: &str = "WORKROOM_SCOPE";
pub const SCOPE_LABEL: &str = "workroom.scope";
/// What a workroom container is when it is not a room; `list` hides and
/// `stop --all` sweeps the anchor by it.
pub const ROLE_LABEL: &str = "workroom.role";
pub const ROLE_ANCHOR: &str = "peer-anchor";
/// Throwaway containers (passwd probe, volume init): workroom's, never a room
/// (no schema label, so `list` never shows them even while they live).
pub const JOB_LABEL: &str = "workroom.job";
/// The daemon build an anchor or anchor image was made from.
pub const DAEMON_LABEL: &str = "workroom.daemon";
/// On the socket volume: the `uid:gid` it was given at creation.
pub const OWNER_LABEL: &str = "workroom.peer.owner";
/// On a room: whether it was made to take part (`1`) or not (`0`).
pub const PEER_LABEL: &str = "workroom.peer";
/// On a room that wanted peers (its name folds the group in, even when it
/// could not join), and on its group's anchor and volume: the group's name.
pub const GROUP_LABEL: &str = "workroom.peer.group";
/// On a room that joined, and on its group's anchor and volume: the uid the
/// group's sessions run as (the other half of the group's key).
pub const UID_LABEL: &str = "workroom.peer.uid";
/// On a room that joined: the id of the anchor whose namespace it holds.
/// Docker stores `PidMode` as `container:<id>`; with this label a reattach
/// checks the room against its group without inspecting the anchor.
pub const ANCHOR_LABEL: &str = "workroom.peer.anchor";

/// The repository of the anchor image; the tag is the daemon's digest, so a
/// new daemon gets a new image and old ones are never overwritten in place.
pub const ANCHOR_REPO: &str = "workroom-anchor";

/// The objects of one peer group: a group is its name and the uid its
/// sessions run as (Claude Code only uses a socket folder its own uid owns,
/// so rooms of two uids could never message each other anyway; keying by
/// uid means no folder belongs to whichever uid came first, and no root
/// room writes root-owned files into a user's registry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    pub anchor: String,
    pub volume: String,
    pub scope: Option<String>,
    pub group: String,
    pub uid: u32,
}

/// `workroom-peer-anchor.<group>.<uid>[-<scope>]` and the same for the
/// socket volume. Injective: a group holds no `.` (see
/// `settings::check_peer_group`; written without a link, as plan reads
/// nothing of the settings) and a uid only digits, so the
/// first `-` after the uid starts the scope.
pub fn names(scope: Option<&str>, group: &str, uid: u32) -> Names {
    let suffix = scope.map(|s| format!("-{s}")).unwrap_or_default();
    Names {
        anchor: format!("workroom-peer-anchor.{group}.{uid}{suffix}"),
        volume: format!("workroom-peer-socks.{group}.{uid}{suffix}"),
        scope: scope.map(str::to_string),
        group: group.to_string(),
        uid,
    }
}

/// The host folder of one group's session registry, under the registry
/// root (`peer_registry`): `<root>/<group>/<uid>`.
pub fn registry_folder(root: &Path, group: &str, uid: u32) -> PathBuf {
    root.join(group).join(uid.to_string())
}

/// Labels every workroom-made object of this scope carries.
pub fn scope_labels(scope: Option<&str>) -> Labels {
    scope.iter().map(|s| (SCOPE_LABEL.to_string(), s.to_string())).collect()
}

/// Labels of a group's anchor and volume: the scope, the group and the uid.
pub fn group_labels(names: &Names) -> Labels {
    let mut labels = scope_labels(names.scope.as_deref());
    labels.insert(GROUP_LABEL.into(), names.group.clone());
    labels.insert(UID_LABEL.into(), names.uid.to_string());
    labels
}

/// Labels of a room: the group it wanted (`None`: peers off) and, when it
/// joined, the uid and the anchor's id.
pub fn room_labels(wants: Option<&str>, joined: Option<(&Names, &str)>) -> Labels {
    let mut labels = Labels::new();
    if let Some(group) = wants {
        labels.insert(GROUP_LABEL.into(), group.into());
    }
    if let Some((names, anchor_id)) = joined {
        labels.insert(UID_LABEL.into(), names.uid.to_string());
        labels.insert(ANCHOR_LABEL.into(), anchor_id.into());
    }
    labels
}

/// What a participating room is given, once the anchor and volume exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerJoin {
    pub anchor: String,
    pub volume: String,
    /// The host folder of the session registry.
    pub registry: String,
    /// The remote user's home in the room.
    pub home: String,
}

/// Adds the shared PID namespace, the socket volume and the registry bind.
/// Docker's init is off: the engine inserts docker-init only into a private
/// PID namespace (20.10 ignores `Init: true` here, measured), so the daemon
/// is the room's main process itself, gets `docker stop`'s SIGTERM directly
/// (it handles it) and the room's orphans go to the anchor, which reaps.
/// Saying `false` keeps `inspect` truthful.
pub fn join(host: &mut HostConfig, j: &PeerJoin) {
    host.init = Some(false);
    host.pid_mode = Some(format!("container:{}", j.anchor));
    let mounts = host.mounts.get_or_insert_with(Vec::new);
    mounts.push(Mount {
        target: Some(SOCKS_DIR.into()),
        source: Some(j.volume.clone()),
        typ: Some(MountType::VOLUME),
        ..Default::default()
    });
    mounts.push(Mount {
        target: Some(registry_in_room(&j.home)),
        source: Some(j.registry.clone()),
        typ: Some(MountType::BIND),
        ..Default::default()
    });
}

/// Where the room sees its group's folder: the remote user's `~/.claude`.
pub fn registry_in_room(home: &str) -> String {
    format!("{}/{REGISTRY_IN_HOME}", home.trim_end_matches('/'))
}

/// The agents' state variables of a participating room whose remote user's
/// home is `home`: Claude Code's config folder is the group's folder, and
/// Codex's a folder of its own inside it. `user_sets` says whether the
/// user's `containerEnv`/`remoteEnv` (or `runArgs -e`) already names a
/// variable: theirs wins, and for Claude Code that is said, since its
/// sessions then register elsewhere and peers may not see each other.
/// Returns `KEY=value` entries for the container's environment and the
/// warnings.
pub fn agent_env(room: &str, home: &str, user_sets: impl Fn(&str) -> bool) -> (Vec<String>, Vec<String>) {
    let folder = registry_in_room(home);
    let mut env = Vec::new();
    let mut warnings = Vec::new();
    if user_sets(CLAUDE_CONFIG_ENV) {
        warnings.push(format!(
            "{room}: your {CLAUDE_CONFIG_ENV} is used, not the peer group's folder {folder}: Claude Code there keeps \
             its login apart from the group's, and unless it names {folder} its sessions register elsewhere and \
             peers may not see each other"
        ));
    } else {
        env.push(format!("{CLAUDE_CONFIG_ENV}={folder}"));
    }
    if !user_sets(CODEX_HOME_ENV) {
        env.push(format!("{CODEX_HOME_ENV}={folder}/{CODEX_IN_REGISTRY}"));
    }
    (env, warnings)
}

/// What `up` does about Claude Code's state in a room made before the
/// group kept it (no [`CLAUDE_CONFIG_ENV`] in its environment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateMove {
    /// Nothing to do: the room uses the group's folder, or the user chose
    /// their own, or it is in no group.
    Nothing,
    /// The group's folder (a host folder) has no state yet: copy the
    /// room's `from` (in the room) to `to` (on the host) if it exists.
    Copy { from: String, to: PathBuf },
    /// Say how the room comes to use the group's state, and do nothing.
    Say(String),
}

/// Decided from the room's inspect (its environment and the registry bind)
/// and one stat of the group's host folder: no engine call, so the fast path
/// pays nothing when nothing is due. `user_sets_config`: the config names
/// [`CLAUDE_CONFIG_ENV`] in `remoteEnv` (the inspect shows `containerEnv`).
pub fn state_move(
    room: &str,
    env: &HashMap<String, String>,
    user_sets_config: bool,
    registry: Option<&(String, String)>,
    group_has_state: impl Fn(&Path) -> bool,
) -> StateMove {
    let Some((source, target)) = registry else { return StateMove::Nothing };
    if env.contains_key(CLAUDE_CONFIG_ENV) || user_sets_config {
        return StateMove::Nothing;
    }
    let home = target.strip_suffix(&format!("/{REGISTRY_IN_HOME}")).unwrap_or(target);
    let from = format!("{home}/{CLAUDE_STATE_FILE}");
    let recreate = format!(
        "`workroom up --recreate` makes {room} keep Claude Code's state in its peer group's folder ({target}, with \
         {CLAUDE_CONFIG_ENV}), shared by every room of the group"
    );
    // A registry in a volume (an engine that cannot see this host's
    // folders) is not ours to write into from here.
    if !source.starts_with('/') {
        return StateMove::Say(format!(
            "{room} keeps Claude Code's state in {from}, apart from its peer group's; copy it to {target}/ in the \
             room, then {recreate}"
        ));
    }
    let to = Path::new(source).join(CLAUDE_STATE_FILE);
    if group_has_state(&to) {
        return StateMove::Say(format!("{room} keeps Claude Code's state in {from}, not its peer group's; {recreate}"));
    }
    StateMove::Copy { from, to }
}

/// Said after [`StateMove::Copy`] copied the room's state.
pub fn state_copied(room: &str, from: &str, to: &Path) -> String {
    format!(
        "copied {room}'s {from} (Claude Code's login and settings) to its peer group's folder {}; \
         `workroom up --recreate` makes {room} use it, and every room of the group shares it",
        to.display()
    )
}

/// The anchor: the daemon as PID 1 (no Docker init, the anchor reaps
/// itself), no network, restarted with the engine, never auto-removed.
pub fn anchor_body(image: &str, digest: &str, names: &Names) -> ContainerCreateBody {
    let mut labels = group_labels(names);
    labels.insert(labels::SCHEMA.into(), labels::SCHEMA_VERSION.into());
    labels.insert(labels::VERSION.into(), env!("CARGO_PKG_VERSION").into());
    labels.insert(ROLE_LABEL.into(), ROLE_ANCHOR.into());
    labels.insert(DAEMON_LABEL.into(), digest.into());
    ContainerCreateBody {
        image: Some(image.into()),
        user: Some("0".into()),
        entrypoint: Some(vec![workroomd::room::DAEMON_PATH.into(), "anchor".into()]),
        cmd: Some(Vec::new()),
        labels: Some(labels.into_iter().collect()),
        working_dir: Some("/".into()),
        host_config: Some(HostConfig {
            init: Some(false),
            auto_remove: Some(false),
            network_mode: Some("none".into()),
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::UNLESS_STOPPED),
                maximum_retry_count: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// What the anchor container looks like, from one inspect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnchorFacts {
    pub id: String,
    pub ours: bool,
    pub digest: Option<String>,
    pub running: bool,
}

impl AnchorFacts {
    pub fn of(c: &ContainerInspectResponse) -> AnchorFacts {
        let labels = c.config.as_ref().and_then(|c| c.labels.as_ref());
        let get = |k: &str| labels.and_then(|l| l.get(k)).cloned();
        AnchorFacts {
            id: c.id.clone().unwrap_or_default(),
            ours: get(ROLE_LABEL).as_deref() == Some(ROLE_ANCHOR) && get(labels::SCHEMA).is_some(),
            digest: get(DAEMON_LABEL),
            running: c.state.as_ref().and_then(|s| s.running) == Some(true),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnchorAction {
    Create,
    Use,
    Start,
    /// From another daemon build and no room holds its namespace: remove it
    /// and make a new one.
    Replace,
    /// From another daemon build but rooms hold its namespace: replacing it
    /// would kill them, so keep it (it only reaps) and say so.
    KeepOld {
        holders: Vec<String>,
    },
    /// The name is taken by a container workroom did not make.
    Foreign,
}

/// `holders`: rooms whose `PidMode` names the existing anchor.
pub fn anchor_action(existing: Option<&AnchorFacts>, digest: &str, holders: &[String]) -> AnchorAction {
    match existing {
        None => AnchorAction::Create,
        Some(a) if !a.ours => AnchorAction::Foreign,
        Some(a) if a.digest.as_deref() != Some(digest) => {
            if holders.is_empty() {
                AnchorAction::Replace
            } else {
                AnchorAction::KeepOld { holders: holders.to_vec() }
            }
        }
        Some(a) if a.running => AnchorAction::Use,
        Some(_) => AnchorAction::Start,
    }
}

/// Whether a room's `PidMode` joins the container `anchor` (by name, or by
/// the id Docker stores in its place).
pub fn joins(pid_mode: Option<&str>, anchor_name: &str, anchor_id: Option<&str>) -> bool {
    match pid_mode.and_then(|m| m.strip_prefix("container:")) {
        Some(target) => target == anchor_name || anchor_id.is_some_and(|id| !id.is_empty() && id == target),
        None => false,
    }
}

/// The remote user's home in the room, decided before create from the
/// image's passwd (mounts cannot be added later). `None`: no such user, so
/// no registry bind (a warning, not a failure).
pub fn home_of(user: &str, passwd: &[PasswdEntry]) -> Option<String> {
    if user == "root" || user == "0" {
        return Some(passwd.iter().find(|e| e.uid == 0).map_or("/root".into(), |e| e.home.clone()));
    }
    let entry = match user.parse::<u32>() {
        Ok(uid) => passwd.iter().find(|e| e.uid == uid),
        Err(_) => passwd.iter().find(|e| e.name == user),
    }?;
    Some(entry.home.clone()).filter(|h| h.starts_with('/') && h != "/")
}

/// The uid:gid the remote user's sessions will run as: the image's, or the
/// host user's when `updateRemoteUserUID` will move it (the same condition
/// the hook applies: not root, not numeric, host user not root).
pub fn session_ids(user: &str, passwd: &[PasswdEntry], host: (u32, u32), update_uid: bool) -> Option<(u32, u32)> {
    if user == "root" || user == "0" {
        return Some((0, 0));
    }
    if let Ok(uid) = user.parse::<u32>() {
        return Some(passwd.iter().find(|e| e.uid == uid).map_or((uid, uid), |e| (e.uid, e.gid)));
    }
    let entry = passwd.iter().find(|e| e.name == user)?;
    if update_uid && host.0 != 0 {
        return Some(host);
    }
    Some((entry.uid, entry.gid))
}

pub fn owner_label(ids: (u32, u32)) -> String {
    format!("{}:{}", ids.0, ids.1)
}

/// Said at `up` when the room's sessions would not own the socket folder:
/// the CLI would fall back to a private folder and see no peer. Only the
/// uid counts: the folder is 0700, and the CLI checks its owner's uid.
pub fn owner_warning(room: &str, user: &str, ids: (u32, u32), volume: &str, owner: &str) -> Option<String> {
    let owner_uid = owner.split(':').next().unwrap_or_default();
    (owner_uid != ids.0.to_string()).then(|| {
        format!(
            "{room}: {user} runs as {} but {volume} at {SOCKS_DIR} belongs to {owner}; agents here will silently \
             use a private folder and see no peers (`workroom up --recreate` puts the room in the group of its uid)",
            owner_label(ids)
        )
    })
}

/// What a room has of peer messaging, from its inspect.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoomPeerFacts {
    pub pid_mode: Option<String>,
    /// The volume mounted at [`SOCKS_DIR`], if any.
    pub socks_volume: Option<String>,
    /// Made to take part and given the namespace (`workroom.peer=1`).
    pub joined: bool,
    /// The group it wanted ([`GROUP_LABEL`]).
    pub group: Option<String>,
    /// The uid of its group ([`UID_LABEL`]), when it joined one.
    pub uid: Option<u32>,
    /// The anchor it joined ([`ANCHOR_LABEL`]).
    pub anchor_id: Option<String>,
    /// The registry bind: the host folder and where the room sees it.
    pub registry: Option<(String, String)>,
}

impl RoomPeerFacts {
    pub fn of(c: &ContainerInspectResponse) -> RoomPeerFacts {
        let pid_mode = c.host_config.as_ref().and_then(|h| h.pid_mode.clone()).filter(|m| !m.is_empty());
        let mounts = c.mounts.iter().flatten();
        let socks_volume = mounts
            .clone()
            .find(|m| m.destination.as_deref() == Some(SOCKS_DIR))
            .and_then(|m| m.name.clone().or_else(|| m.source.clone()));
        let registry = mounts
            .filter(|m| m.destination.as_deref().is_some_and(|d| d.ends_with(&format!("/{REGISTRY_IN_HOME}"))))
            .find_map(|m| Some((m.source.clone()?, m.destination.clone()?)));
        let labels = c.config.as_ref().and_then(|c| c.labels.as_ref());
        RoomPeerFacts { pid_mode, socks_volume, registry, ..RoomPeerFacts::of_labels(labels) }
    }

    /// What the labels alone say (a `list` gives labels, not mounts).
    pub fn of_labels(labels: Option<&HashMap<String, String>>) -> RoomPeerFacts {
        let get = |k: &str| labels.and_then(|l| l.get(k)).filter(|v| !v.is_empty()).cloned();
        RoomPeerFacts {
            joined: get(PEER_LABEL).as_deref() == Some("1"),
            group: get(GROUP_LABEL),
            uid: get(UID_LABEL).and_then(|u| u.parse().ok()),
            anchor_id: get(ANCHOR_LABEL),
            ..Default::default()
        }
    }

    /// The group folded into the room's name: its label, or the default
    /// group for a room that joined before groups had labels.
    pub fn made_in(&self) -> Option<&str> {
        self.group.as_deref().or(self.joined.then_some(DEFAULT_PEER_GROUP))
    }
}

/// Reattach: the room as made against what the settings want (`Some(group)`
/// or peers off). One warning naming the room and the way out, or nothing.
/// Pure, from the room's inspect alone: `up` says it on every run, the fast
/// path included, at no engine call.
pub fn drift(room: &str, facts: &RoomPeerFacts, wants: Option<&str>, scope: Option<&str>) -> Option<String> {
    let remake = format!("`workroom up --recreate` makes {room} anew");
    let shares_pids = facts.pid_mode.as_deref().is_some_and(|m| m.starts_with("container:"));
    let Some(group) = wants else {
        return (facts.joined || shares_pids || facts.socks_volume.is_some()).then(|| {
            format!(
                "{room} was made with peer messaging but peers are off for it: it can see the process table of \
                 every room in its peer group; {remake}"
            )
        });
    };
    let Some(uid) = facts.uid else {
        if facts.joined {
            return Some(format!(
                "{room} was made by a workroom without peer groups: it shares with the rooms of every user; \
                 {remake} in peer group {group}"
            ));
        }
        return Some(format!(
            "{room} lacks the peers' PID namespace and socket volume: agents in it will see no peers; {remake}"
        ));
    };
    let names = names(scope, facts.group.as_deref().unwrap_or(group), uid);
    let in_namespace = joins(facts.pid_mode.as_deref(), &names.anchor, facts.anchor_id.as_deref());
    let has_volume = facts.socks_volume.as_deref() == Some(names.volume.as_str());
    let lacks = match (in_namespace, has_volume) {
        (true, true) => return None,
        (false, false) => format!("the peers' PID namespace ({}) and {}", names.anchor, names.volume),
        (false, true) => format!("the peers' PID namespace ({})", names.anchor),
        (true, false) => format!("the socket volume {} at {SOCKS_DIR}", names.volume),
    };
    Some(format!("{room} lacks {lacks}: agents in it will see no peers; {remake}"))
}

/// How a room was made, in words: "with peer messaging off" or "in peer
/// group a".
pub fn describe(made: Option<&str>) -> String {
    match made {
        Some(group) => format!("in peer group {group}"),
        None => "with peer messaging off".into(),
    }
}

/// Another room of the same workspace and config, made with another peer
/// setting or group (so under another name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sibling {
    pub name: String,
    pub running: bool,
    /// The group folded into its name (`None`: peers off).
    pub made: Option<String>,
}

/// What `up` does when the room it wants does not exist yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Beside {
    /// No other room of the workspace: make it.
    Alone,
    /// Another room of the workspace runs: make nothing, say which and how.
    Refuse(String),
    /// Others exist but are stopped: make it, and say they are there.
    Note(String),
}

/// Never silently a second room next to a running one: the workspace's room
/// made with the other peer setting (or another group) is named with the
/// two ways out.
pub fn beside(folder: &str, wanted: &str, wants: Option<&str>, siblings: &[Sibling]) -> Beside {
    if let Some(running) = siblings.iter().find(|s| s.running) {
        return Beside::Refuse(format!(
            "{folder} already has a running room, {}, made {}; the settings now want it {}, which is another \
             container (Docker cannot move a room into or out of a PID namespace): `workroom up --recreate` replaces \
             {} with {wanted}, or `workroom stop {}` and `workroom up` makes {wanted} beside it",
            running.name,
            describe(running.made.as_deref()),
            describe(wants),
            running.name,
            running.name,
        ));
    }
    match siblings {
        [] => Beside::Alone,
        stopped => Beside::Note(
            stopped
                .iter()
                .map(|s| {
                    format!(
                        "{} (made {}) stays stopped beside {wanted}; `workroom down {}` removes it",
                        s.name,
                        describe(s.made.as_deref()),
                        s.name
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
        ),
    }
}

/// Said once, when a room is made in a group: who shares with it, what that
/// means, and the two ways out.
pub fn sharing_note(room: &str, names: &Names, others: &[String]) -> String {
    let group = format!("peer group {} (uid {})", names.group, names.uid);
    let ways_out = "`peer_group = \"NAME\"` in .workroom.toml makes a separate group, `peer_messaging = false` keeps \
                    the room apart";
    if others.is_empty() {
        format!(
            "{room} is the first room of {group}: rooms that join it can message its agents and, as uid {}, reach \
             its files through /proc; {ways_out}",
            names.uid
        )
    } else {
        format!(
            "{room} shares {group} with {}: their agents can message each other and, as uid {}, reach each other's \
             files through /proc; {ways_out}",
            others.join(", "),
            names.uid
        )
    }
}

/// A group as `list --all` shows it: `a (uid 1000)`; empty for none.
pub fn group_column(labels: Option<&HashMap<String, String>>) -> String {
    let facts = RoomPeerFacts::of_labels(labels);
    match (facts.group, facts.uid) {
        (Some(g), Some(uid)) => format!("{g} (uid {uid})"),
        (Some(g), None) => g,
        _ => String::new(),
    }
}

/// Whether a listed container is the anchor (so `list` hides it).
pub fn is_anchor(labels: Option<&HashMap<String, String>>) -> bool {
    labels.and_then(|l| l.get(ROLE_LABEL)).map(String::as_str) == Some(ROLE_ANCHOR)
}

/// `stop --all`/`down --all` order: rooms first, anchors last, because the
/// end of the anchor's PID 1 kills every process in the namespace at once,
/// before the rooms' daemons could end their panes' shells gently.
pub fn sweep_order<T>(containers: Vec<T>, labels_of: impl Fn(&T) -> Option<&HashMap<String, String>>) -> Vec<T> {
    let (mut rooms, anchors): (Vec<T>, Vec<T>) = containers.into_iter().partition(|c| !is_anchor(labels_of(c)));
    rooms.extend(anchors);
    rooms
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn pw(name: &str, uid: u32, home: &str) -> PasswdEntry {
        PasswdEntry {
            name: name.into(),
            uid,
            gid: uid + 1,
            gecos: String::new(),
            home: home.into(),
            shell: String::new(),
        }
    }

    #[test]
    fn a_group_and_its_uid_name_the_anchor_and_volume_and_a_scope_ends_them() {
        let n = names(None, "default", 1000);
        assert_eq!(
            (n.anchor.as_str(), n.volume.as_str()),
            ("workroom-peer-anchor.default.1000", "workroom-peer-socks.default.1000")
        );
        let n = names(Some("t1"), "a", 0);
        assert_eq!(
            (n.anchor.as_str(), n.volume.as_str()),
            ("workroom-peer-anchor.a.0-t1", "workroom-peer-socks.a.0-t1")
        );
        let l = group_labels(&n);
        assert_eq!(l.get(SCOPE_LABEL).map(String::as_str), Some("t1"));
        assert_eq!((l[GROUP_LABEL].as_str(), l[UID_LABEL].as_str()), ("a", "0"));
        assert!(scope_labels(None).is_empty());
        assert_eq!(registry_folder(Path::new("/r"), "a", 1000), Path::new("/r/a/1000"));
    }

    #[test]
    fn no_two_groups_uids_or_scopes_share_an_anchor() {
        // Groups hold no `.` and uids only digits, so a name parses back one
        // way; these are the near misses a looser scheme would merge.
        let keys = [
            (None, "a", 1000),
            (None, "a-1000", 1),
            (Some("1"), "a", 1000),
            (Some("1000-1"), "a", 1),
            (None, "a", 10001),
            (Some("1"), "a", 100),
            (None, "default", 0),
            (None, "default", 1000),
        ];
        let anchors: std::collections::HashSet<String> = keys.iter().map(|(s, g, u)| names(*s, g, *u).anchor).collect();
        assert_eq!(anchors.len(), keys.len(), "{anchors:?}");
    }

    #[test]
    fn a_participating_room_joins_the_anchor_the_volume_and_the_registry() {
        let mut host = HostConfig { mounts: Some(vec![Mount::default()]), ..Default::default() };
        let j = PeerJoin { anchor: "a".into(), volume: "v".into(), registry: "/reg".into(), home: "/home/dev/".into() };
        join(&mut host, &j);
        assert_eq!(host.pid_mode.as_deref(), Some("container:a"));
        let mounts = host.mounts.unwrap();
        assert_eq!(mounts.len(), 3, "the config's own mounts stay");
        assert_eq!((mounts[1].source.as_deref(), mounts[1].target.as_deref()), (Some("v"), Some(SOCKS_DIR)));
        assert_eq!(mounts[1].typ, Some(MountType::VOLUME));
        assert_eq!(
            (mounts[2].source.as_deref(), mounts[2].target.as_deref()),
            (Some("/reg"), Some("/home/dev/.claude"))
        );
    }

    #[test]
    fn a_participating_room_keeps_claude_codes_and_codexs_state_in_its_groups_folder() {
        let (env, warnings) = agent_env("r", "/home/dev/", |_| false);
        assert_eq!(env, ["CLAUDE_CONFIG_DIR=/home/dev/.claude", "CODEX_HOME=/home/dev/.claude/codex"]);
        assert!(warnings.is_empty(), "{warnings:?}");
        let (env, _) = agent_env("r", "/root", |_| false);
        assert_eq!(env[0], "CLAUDE_CONFIG_DIR=/root/.claude");
    }

    #[test]
    fn the_users_own_agent_state_folders_win_and_theirs_for_claude_code_is_warned() {
        let (env, warnings) = agent_env("workroom-x", "/home/dev", |k| k == CLAUDE_CONFIG_ENV);
        assert_eq!(env, ["CODEX_HOME=/home/dev/.claude/codex"], "the user's own is not overridden");
        let [w] = warnings.as_slice() else { panic!("one warning: {warnings:?}") };
        assert!(w.starts_with("workroom-x: your CLAUDE_CONFIG_DIR is used") && w.contains("peers may not see"), "{w}");
        let (env, warnings) = agent_env("r", "/home/dev", |k| k == CODEX_HOME_ENV);
        assert_eq!(env, ["CLAUDE_CONFIG_DIR=/home/dev/.claude"]);
        assert!(warnings.is_empty(), "Codex has no peers to lose: {warnings:?}");
    }

    #[test]
    fn a_room_made_before_the_group_kept_agent_state_moves_it_over_or_is_told_how() {
        let bind = ("/reg/a/1000".to_string(), "/home/dev/.claude".to_string());
        let old: HashMap<String, String> = HashMap::from([("PATH".into(), "/usr/bin".into())]);
        let new = HashMap::from([(CLAUDE_CONFIG_ENV.to_string(), "/home/dev/.claude".to_string())]);
        let none = |_: &Path| false;
        let has = |_: &Path| true;
        assert_eq!(state_move("r", &new, false, Some(&bind), none), StateMove::Nothing, "uses the group's");
        assert_eq!(state_move("r", &old, true, Some(&bind), none), StateMove::Nothing, "the user's remoteEnv rules");
        assert_eq!(state_move("r", &old, false, None, none), StateMove::Nothing, "no group");
        assert_eq!(
            state_move("r", &old, false, Some(&bind), none),
            StateMove::Copy { from: "/home/dev/.claude.json".into(), to: "/reg/a/1000/.claude.json".into() }
        );
        let StateMove::Say(said) = state_move("r", &old, false, Some(&bind), has) else { panic!("the group has one") };
        assert!(said.contains("`workroom up --recreate` makes r keep Claude Code's state"), "{said}");
        let in_volume = ("workroom-peer-socks.a.1000-registry".to_string(), "/home/dev/.claude".to_string());
        let StateMove::Say(said) = state_move("r", &old, false, Some(&in_volume), none) else { panic!("a volume") };
        assert!(said.contains("copy it to /home/dev/.claude/ in the room, then"), "{said}");
        let copied = state_copied("r", "/home/dev/.claude.json", Path::new("/reg/a/1000/.claude.json"));
        assert!(copied.contains("`workroom up --recreate` makes r use it") && !copied.contains('\n'), "{copied}");
    }

    #[test]
    fn the_anchor_reaps_as_pid_1_without_dockers_init_and_is_never_auto_removed() {
        let b = anchor_body("workroom-anchor:abc", "abc", &names(Some("s"), "a", 1000));
        assert_eq!(b.entrypoint.as_deref(), Some(&["/.workroom/bin/workroomd".to_string(), "anchor".into()][..]));
        let h = b.host_config.unwrap();
        assert_eq!((h.init, h.auto_remove), (Some(false), Some(false)));
        assert_eq!(h.network_mode.as_deref(), Some("none"));
        let l = b.labels.unwrap();
        assert_eq!(l.get(ROLE_LABEL).map(String::as_str), Some(ROLE_ANCHOR));
        assert!(l.contains_key(labels::SCHEMA), "stop --all finds it by the schema label");
        assert_eq!(l.get(DAEMON_LABEL).map(String::as_str), Some("abc"));
        assert_eq!(l.get(SCOPE_LABEL).map(String::as_str), Some("s"));
        assert_eq!((l[GROUP_LABEL].as_str(), l[UID_LABEL].as_str()), ("a", "1000"), "list --all shows its group");
    }

    #[test]
    fn an_old_anchor_is_replaced_only_when_no_room_holds_its_namespace() {
        let a =
            |ours, digest: &str, running| AnchorFacts { id: "id".into(), ours, digest: Some(digest.into()), running };
        let held = vec!["workroom-x".to_string()];
        // (existing, holders, expected)
        let table = [
            (None, vec![], AnchorAction::Create),
            (Some(a(true, "new", true)), vec![], AnchorAction::Use),
            (Some(a(true, "new", false)), held.clone(), AnchorAction::Start),
            (Some(a(true, "old", true)), vec![], AnchorAction::Replace),
            (Some(a(true, "old", true)), held.clone(), AnchorAction::KeepOld { holders: held.clone() }),
            (Some(a(false, "new", true)), vec![], AnchorAction::Foreign),
        ];
        for (existing, holders, expected) in table {
            assert_eq!(anchor_action(existing.as_ref(), "new", &holders), expected, "{existing:?} {holders:?}");
        }
    }

    #[test]
    fn the_home_and_ids_come_from_the_images_passwd() {
        let passwd = vec![pw("root", 0, "/root"), pw("dev", 1000, "/home/dev"), pw("nobody", 65534, "/nonexistent")];
        assert_eq!(home_of("root", &passwd).as_deref(), Some("/root"));
        assert_eq!(home_of("0", &[]).as_deref(), Some("/root"));
        assert_eq!(home_of("dev", &passwd).as_deref(), Some("/home/dev"));
        assert_eq!(home_of("1000", &passwd).as_deref(), Some("/home/dev"));
        assert_eq!(home_of("ghost", &passwd), None);
        // (user, host ids, updateRemoteUserUID, expected)
        let table = [
            ("root", (4242, 4343), true, Some((0, 0))),
            ("dev", (0, 0), true, Some((1000, 1001))),
            ("dev", (4242, 4343), true, Some((4242, 4343))),
            ("dev", (4242, 4343), false, Some((1000, 1001))),
            ("1000", (4242, 4343), true, Some((1000, 1001))),
            ("ghost", (4242, 4343), true, None),
        ];
        for (user, host, update, expected) in table {
            assert_eq!(session_ids(user, &passwd, host, update), expected, "{user} {host:?} {update}");
        }
    }

    #[test]
    fn a_room_whose_user_would_not_own_the_socket_folder_is_warned() {
        assert_eq!(owner_warning("r", "dev", (1000, 1000), "v", "1000:1000"), None);
        assert_eq!(owner_warning("r", "dev", (1000, 1000), "v", "1000:50"), None, "a 0700 folder: the gid is moot");
        let w = owner_warning("r", "dev", (1000, 1000), "v", "0:0").unwrap();
        assert!(
            w.contains("dev runs as 1000:1000") && w.contains("belongs to 0:0") && w.contains("see no peers"),
            "{w}"
        );
    }

    #[test]
    fn reattach_warns_both_ways_and_names_the_room_and_the_way_out() {
        let n = names(None, "default", 1000);
        let joined = |pid: Option<&str>, vol: Option<&str>| RoomPeerFacts {
            pid_mode: pid.map(str::to_string),
            socks_volume: vol.map(str::to_string),
            joined: true,
            group: Some("default".into()),
            uid: Some(1000),
            anchor_id: Some("0123abcd".into()),
            registry: None,
        };
        let full_by_id = joined(Some("container:0123abcd"), Some(&n.volume));
        let full_by_name = joined(Some(&format!("container:{}", n.anchor)), Some(&n.volume));
        let no_volume = joined(Some("container:0123abcd"), None);
        let elsewhere = joined(Some("container:feedbeef"), Some(&n.volume));
        let bare = RoomPeerFacts::default();
        let degraded = RoomPeerFacts { group: Some("default".into()), ..Default::default() };
        let before_groups = RoomPeerFacts {
            joined: true,
            pid_mode: Some("container:0123abcd".into()),
            socks_volume: Some("workroom-peer-socks".into()),
            ..Default::default()
        };
        // (facts, wants, expected fragment or None)
        let table = [
            (&full_by_id, Some("default"), None),
            (&full_by_name, Some("default"), None),
            (&bare, None, None),
            (&degraded, Some("default"), Some("will see no peers")),
            (&no_volume, Some("default"), Some("lacks the socket volume")),
            (&elsewhere, Some("default"), Some("lacks the peers' PID namespace")),
            (&before_groups, Some("default"), Some("without peer groups")),
            (&full_by_id, None, Some("can see the process table of every room in its peer group")),
            (&elsewhere, None, Some("can see the process table")),
        ];
        for (f, wants, expected) in table {
            let got = drift("workroom-app-1", f, wants, None);
            match expected {
                None => assert_eq!(got, None, "{f:?} wants={wants:?}"),
                Some(frag) => {
                    let w = got.unwrap_or_else(|| panic!("no warning for {f:?} wants={wants:?}"));
                    assert!(w.contains(frag), "{w}");
                    assert!(w.contains("`workroom up --recreate` makes workroom-app-1 anew"), "the way out: {w}");
                }
            }
        }
    }

    #[test]
    fn a_rooms_facts_come_from_its_labels_and_mounts() {
        let c: ContainerInspectResponse = serde_json::from_value(serde_json::json!({
            "Config": { "Labels": {
                "workroom.peer": "1", "workroom.peer.group": "a", "workroom.peer.uid": "1000",
                "workroom.peer.anchor": "abc"
            }},
            "HostConfig": { "PidMode": "container:abc" },
            "Mounts": [
                { "Type": "volume", "Name": "workroom-peer-socks.a.1000", "Destination": "/tmp/cc-socks" },
                { "Type": "bind", "Source": "/reg/a/1000", "Destination": "/home/dev/.claude" }
            ]
        }))
        .unwrap();
        let f = RoomPeerFacts::of(&c);
        assert!(f.joined);
        assert_eq!((f.group.as_deref(), f.uid, f.anchor_id.as_deref()), (Some("a"), Some(1000), Some("abc")));
        assert_eq!(f.socks_volume.as_deref(), Some("workroom-peer-socks.a.1000"));
        assert_eq!(f.registry, Some(("/reg/a/1000".into(), "/home/dev/.claude".into())));
        assert_eq!(f.made_in(), Some("a"));
        assert_eq!(drift("r", &f, Some("a"), None), None);
        let old = RoomPeerFacts { joined: true, ..Default::default() };
        assert_eq!(old.made_in(), Some("default"), "a room from before group labels was in the one group");
        assert_eq!(RoomPeerFacts::default().made_in(), None);
    }

    #[test]
    fn up_never_makes_a_second_room_beside_a_running_one() {
        let sib = |name: &str, running, made: Option<&str>| Sibling {
            name: name.into(),
            running,
            made: made.map(str::to_string),
        };
        assert_eq!(beside("/w", "workroom-w-2", Some("default"), &[]), Beside::Alone);
        let Beside::Refuse(why) = beside("/w", "workroom-w-2", Some("default"), &[sib("workroom-w-1", true, None)])
        else {
            panic!("a running sibling must refuse")
        };
        assert!(why.starts_with("/w already has a running room, workroom-w-1, made with peer messaging off"), "{why}");
        assert!(why.contains("want it in peer group default"), "{why}");
        assert!(why.contains("`workroom up --recreate` replaces workroom-w-1"), "{why}");
        assert!(why.contains("`workroom stop workroom-w-1`"), "{why}");
        let Beside::Refuse(why) = beside("/w", "workroom-w-1", None, &[sib("workroom-w-3", true, Some("a"))]) else {
            panic!("a running sibling must refuse")
        };
        assert!(why.contains("made in peer group a") && why.contains("want it with peer messaging off"), "{why}");
        let Beside::Note(note) = beside("/w", "workroom-w-2", Some("b"), &[sib("workroom-w-1", false, Some("a"))])
        else {
            panic!("a stopped sibling is noted")
        };
        assert!(
            note.contains("workroom-w-1 (made in peer group a) stays stopped")
                && note.contains("`workroom down workroom-w-1`"),
            "{note}"
        );
    }

    #[test]
    fn the_first_up_in_a_group_names_who_shares_and_the_ways_out() {
        let n = names(None, "a", 1000);
        let alone = sharing_note("workroom-x", &n, &[]);
        assert!(alone.contains("first room of peer group a (uid 1000)"), "{alone}");
        let shared = sharing_note("workroom-x", &n, &["workroom-y".into(), "workroom-z".into()]);
        assert!(shared.contains("shares peer group a (uid 1000) with workroom-y, workroom-z"), "{shared}");
        for s in [alone, shared] {
            assert!(s.contains("peer_group = \"NAME\"") && s.contains("peer_messaging = false"), "{s}");
            assert!(!s.contains('\n'), "one line: {s}");
        }
    }

    #[test]
    fn list_all_shows_a_group_with_its_uid() {
        let l = HashMap::from([(GROUP_LABEL.to_string(), "a".to_string()), (UID_LABEL.to_string(), "0".to_string())]);
        assert_eq!(group_column(Some(&l)), "a (uid 0)");
        assert_eq!(group_column(None), "");
    }

    #[test]
    fn list_hides_the_peer_anchor() {
        let anchor = HashMap::from([(ROLE_LABEL.to_string(), ROLE_ANCHOR.to_string())]);
        let room = HashMap::from([(labels::SCHEMA.to_string(), "1".to_string())]);
        assert!(is_anchor(Some(&anchor)));
        assert!(!is_anchor(Some(&room)));
        assert!(!is_anchor(None));
    }

    #[test]
    fn stop_all_sweeps_the_peer_anchor_after_the_rooms() {
        let anchor = HashMap::from([(ROLE_LABEL.to_string(), ROLE_ANCHOR.to_string())]);
        let room = HashMap::new();
        let all = vec![("anchor", anchor), ("a", room.clone()), ("b", room)];
        let order: Vec<&str> = sweep_order(all, |c| Some(&c.1)).into_iter().map(|c| c.0).collect();
        assert_eq!(order, ["a", "b", "anchor"]);
    }
}
