//! Peer messaging, decided without I/O. Agent CLIs such as Claude Code find
//! each other when three things hold, and a participating room gets all three:
//! - one PID namespace: `PidMode: container:<anchor>`, so a registry entry's
//!   pid answers `kill(pid, 0)` in every room;
//! - one inbox folder: the volume [`Names::volume`] at [`SOCKS_DIR`], 0700 and
//!   owned by the session user (the CLI silently falls back to a private
//!   `/tmp/cc-socks-<uid>` when the folder is looser or someone else's);
//! - one session registry: a host folder bound at the remote user's `~/.claude`.
//!
//! The anchor is a container of its own, running `workroomd anchor` as PID 1
//! from a one-file image imported from the daemon this workroom carries; it
//! reaps the orphans of every room. See docs/adr/0005-peer-messaging.md.

use super::labels::{self, Labels};
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, HostConfig, Mount, MountType, RestartPolicy, RestartPolicyNameEnum,
};
use workroomd::users::PasswdEntry;

/// Where agent CLIs put their inbox sockets (Claude Code's fixed path).
pub const SOCKS_DIR: &str = "/tmp/cc-socks";
/// The folder in the remote user's home that holds the session registry.
pub const REGISTRY_IN_HOME: &str = ".claude";

/// Names a second workroom install (or a test run) on the same engine: its
/// rooms, anchor and volume carry `workroom.scope=<value>`, the anchor and
/// volume names end in `-<value>`, and `list`/`stop`/`down` see only its own.
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

/// The repository of the anchor image; the tag is the daemon's digest, so a
/// new daemon gets a new image and old ones are never overwritten in place.
pub const ANCHOR_REPO: &str = "workroom-anchor";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    pub anchor: String,
    pub volume: String,
    pub scope: Option<String>,
}

pub fn names(scope: Option<&str>) -> Names {
    let suffix = scope.map(|s| format!("-{s}")).unwrap_or_default();
    Names {
        anchor: format!("workroom-peer-anchor{suffix}"),
        volume: format!("workroom-peer-socks{suffix}"),
        scope: scope.map(str::to_string),
    }
}

/// Labels every workroom-made object of this scope carries.
pub fn scope_labels(names: &Names) -> Labels {
    names.scope.iter().map(|s| (SCOPE_LABEL.to_string(), s.clone())).collect()
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
        target: Some(format!("{}/{REGISTRY_IN_HOME}", j.home.trim_end_matches('/'))),
        source: Some(j.registry.clone()),
        typ: Some(MountType::BIND),
        ..Default::default()
    });
}

/// The anchor: the daemon as PID 1 (no Docker init, the anchor reaps
/// itself), no network, restarted with the engine, never auto-removed.
pub fn anchor_body(image: &str, digest: &str, names: &Names) -> ContainerCreateBody {
    let mut labels = scope_labels(names);
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
/// the CLI would fall back to a private folder and see no peer.
pub fn owner_warning(room: &str, user: &str, ids: (u32, u32), volume: &str, owner: &str) -> Option<String> {
    (owner_label(ids) != owner).then(|| {
        format!(
            "{room}: {user} runs as {} but {volume} at {SOCKS_DIR} belongs to {owner}; agents here will silently \
             use a private folder and see no peers (give the rooms one remote user id, or remove {volume} while no \
             room uses it)",
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
}

impl RoomPeerFacts {
    pub fn of(c: &ContainerInspectResponse) -> RoomPeerFacts {
        let pid_mode = c.host_config.as_ref().and_then(|h| h.pid_mode.clone()).filter(|m| !m.is_empty());
        let socks_volume = c
            .mounts
            .iter()
            .flatten()
            .find(|m| m.destination.as_deref() == Some(SOCKS_DIR))
            .and_then(|m| m.name.clone().or_else(|| m.source.clone()));
        RoomPeerFacts { pid_mode, socks_volume }
    }
}

/// Reattach: the room against the plan, both ways. One warning naming the
/// one container to stop, or nothing.
pub fn drift(room: &str, facts: &RoomPeerFacts, wants: bool, names: &Names, anchor_id: Option<&str>) -> Option<String> {
    let in_namespace = joins(facts.pid_mode.as_deref(), &names.anchor, anchor_id);
    let has_volume = facts.socks_volume.as_deref() == Some(names.volume.as_str());
    let remake = format!("stop and remove {room} (`workroom down {room}`) and run `workroom up` again");
    if wants && !(in_namespace && has_volume) {
        let lacks = match (in_namespace, has_volume) {
            (false, false) => format!("the peers' PID namespace ({}) and {}", names.anchor, names.volume),
            (false, true) => format!("the peers' PID namespace ({})", names.anchor),
            _ => format!("the socket volume {} at {SOCKS_DIR}", names.volume),
        };
        return Some(format!("{room} lacks {lacks}: agents in it will see no peers; {remake}"));
    }
    let shares_pids = facts.pid_mode.as_deref().is_some_and(|m| m.starts_with("container:"));
    if !wants && (in_namespace || shares_pids || has_volume) {
        return Some(format!(
            "{room} was made with peer messaging but peers are off for it: it can see the process table of every \
             peer room; {remake}"
        ));
    }
    None
}

/// Whether a listed container is the anchor (so `list` hides it).
pub fn is_anchor(labels: Option<&std::collections::HashMap<String, String>>) -> bool {
    labels.and_then(|l| l.get(ROLE_LABEL)).map(String::as_str) == Some(ROLE_ANCHOR)
}

/// `stop --all`/`down --all` order: rooms first, anchors last, because the
/// end of the anchor's PID 1 kills every process in the namespace at once,
/// before the rooms' daemons could end their panes' shells gently.
pub fn sweep_order<T>(
    containers: Vec<T>,
    labels_of: impl Fn(&T) -> Option<&std::collections::HashMap<String, String>>,
) -> Vec<T> {
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

    fn names_t() -> Names {
        names(None)
    }

    #[test]
    fn a_scope_renames_the_anchor_and_volume_and_labels_them() {
        assert_eq!(names(None).anchor, "workroom-peer-anchor");
        assert_eq!(names(None).volume, "workroom-peer-socks");
        let n = names(Some("t1"));
        assert_eq!((n.anchor.as_str(), n.volume.as_str()), ("workroom-peer-anchor-t1", "workroom-peer-socks-t1"));
        assert_eq!(scope_labels(&n).get(SCOPE_LABEL).map(String::as_str), Some("t1"));
        assert!(scope_labels(&names(None)).is_empty());
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
    fn the_anchor_reaps_as_pid_1_without_dockers_init_and_is_never_auto_removed() {
        let b = anchor_body("workroom-anchor:abc", "abc", &names(Some("s")));
        assert_eq!(b.entrypoint.as_deref(), Some(&["/.workroom/bin/workroomd".to_string(), "anchor".into()][..]));
        let h = b.host_config.unwrap();
        assert_eq!((h.init, h.auto_remove), (Some(false), Some(false)));
        assert_eq!(h.network_mode.as_deref(), Some("none"));
        let l = b.labels.unwrap();
        assert_eq!(l.get(ROLE_LABEL).map(String::as_str), Some(ROLE_ANCHOR));
        assert!(l.contains_key(labels::SCHEMA), "stop --all finds it by the schema label");
        assert_eq!(l.get(DAEMON_LABEL).map(String::as_str), Some("abc"));
        assert_eq!(l.get(SCOPE_LABEL).map(String::as_str), Some("s"));
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
        let w = owner_warning("r", "dev", (1000, 1000), "v", "0:0").unwrap();
        assert!(
            w.contains("dev runs as 1000:1000") && w.contains("belongs to 0:0") && w.contains("see no peers"),
            "{w}"
        );
    }

    #[test]
    fn reattach_warns_both_ways_and_names_the_one_container_to_stop() {
        let n = names_t();
        let facts = |pid: Option<&str>, vol: Option<&str>| RoomPeerFacts {
            pid_mode: pid.map(str::to_string),
            socks_volume: vol.map(str::to_string),
        };
        let full_by_id = facts(Some("container:0123abcd"), Some("workroom-peer-socks"));
        let full_by_name = facts(Some("container:workroom-peer-anchor"), Some("workroom-peer-socks"));
        let bare = facts(None, None);
        let no_volume = facts(Some("container:0123abcd"), None);
        let elsewhere = facts(Some("container:feedbeef"), Some("workroom-peer-socks"));
        // (facts, wants, expected fragment or None)
        let table = [
            (&full_by_id, true, None),
            (&full_by_name, true, None),
            (&bare, false, None),
            (&bare, true, Some("will see no peers")),
            (&no_volume, true, Some("lacks the socket volume")),
            (&elsewhere, true, Some("lacks the peers' PID namespace")),
            (&full_by_id, false, Some("can see the process table of every peer room")),
            (&elsewhere, false, Some("can see the process table")),
        ];
        for (f, wants, expected) in table {
            let got = drift("workroom-app-1", f, wants, &n, Some("0123abcd"));
            match expected {
                None => assert_eq!(got, None, "{f:?} wants={wants}"),
                Some(frag) => {
                    let w = got.unwrap_or_else(|| panic!("no warning for {f:?} wants={wants}"));
                    assert!(w.contains(frag), "{w}");
                    assert!(w.contains("`workroom down workroom-app-1`"), "names the container: {w}");
                }
            }
        }
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
