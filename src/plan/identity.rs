//! Which container is a workspace's room. The name is a pure function of the
//! workspace, the config file and the settings folded into the identity, so
//! every `up` of one workspace finds the same room without any registry, and
//! concurrent `up`s race on one name (the engine lets one create win).

use super::peers::DEFAULT_PEER_GROUP;
use sha2::{Digest, Sha256};
use std::path::Path;

/// Every room's name starts so; `list` and `stop --all` also filter on labels.
pub const NAME_PREFIX: &str = "workroom-";

/// Hex digits of the hash in a name: 8 (32 bits) keeps names short; a clash
/// needs ~65k workspaces with one basename on one engine.
const HASH_DIGITS: usize = 8;

/// The longest basename part kept; Docker names may be long but `docker ps`
/// columns and hostnames (63) are not.
const MAX_BASENAME: usize = 40;

/// What `.peer` adds to a named room: sanitising never yields a `.`, so a
/// suffixed name can never be another name's plain form.
pub const PEER_SUFFIX: &str = ".peer";

/// `workroom-<basename>-<hash>` for a workspace room. Peer messaging is part
/// of the identity: a room that joins the peers' PID namespace and one that
/// does not are different containers (Docker cannot change `PidMode` in place).
/// `peer` means the default peer group; see [`room_name_in`].
pub fn room_name(local_folder: &Path, config_file: &Path, peer: bool) -> String {
    room_name_in(local_folder, config_file, peer.then_some(DEFAULT_PEER_GROUP))
}

/// [`room_name`] for a room in peer group `group` (`None`: peers off). The
/// group is part of the identity too: rooms of two groups hold two PID
/// namespaces, so one workspace's rooms in two groups are two containers.
pub fn room_name_in(local_folder: &Path, config_file: &Path, group: Option<&str>) -> String {
    let mut hasher = Sha256::new();
    // A version tag and separators that cannot occur in paths make the seed
    // injective; the tag lets a future scheme change names deliberately.
    hasher.update(b"workroom-room-v1\0");
    hasher.update(local_folder.as_os_str().as_encoded_bytes());
    hasher.update(b"\0");
    hasher.update(config_file.as_os_str().as_encoded_bytes());
    if let Some(group) = group {
        // Appended only when on, so rooms without peers keep the names they
        // had before the setting existed; still injective, since a path can
        // hold no NUL. The default group adds nothing more, so rooms made
        // before groups existed keep their names.
        hasher.update(b"\0peer");
        if group != DEFAULT_PEER_GROUP {
            hasher.update(b"\0");
            hasher.update(group.as_bytes());
        }
    }
    let hash = hex::encode(hasher.finalize());
    let base = local_folder.file_name().map(|b| sanitize(&b.to_string_lossy())).unwrap_or_default();
    let base = if base.is_empty() { "room".to_string() } else { base };
    format!("{NAME_PREFIX}{base}-{}", &hash[..HASH_DIGITS])
}

/// `workroom-<NAME>` for `up --name NAME`, `workroom-<NAME>.peer` with peers
/// on; `None` when nothing of NAME survives sanitising.
pub fn named_room_name(name: &str, peer: bool) -> Option<String> {
    named_room_name_in(name, peer.then_some(DEFAULT_PEER_GROUP))
}

/// [`named_room_name`] in peer group `group`: `workroom-<NAME>.peer` in the
/// default group, `workroom-<NAME>.peer.<group>` in another (a group holds
/// no `.`, so the suffix parses back one way).
pub fn named_room_name_in(name: &str, group: Option<&str>) -> Option<String> {
    let base = sanitize(name);
    if base.is_empty() {
        return None;
    }
    let suffix = match group {
        None => String::new(),
        Some(DEFAULT_PEER_GROUP) => PEER_SUFFIX.to_string(),
        Some(group) => format!("{PEER_SUFFIX}.{group}"),
    };
    Some(format!("{NAME_PREFIX}{base}{suffix}"))
}

/// Whether `candidate` is the room `up --name` makes of the same NAME under
/// some peer setting: `plain` itself (peers off), `plain.peer` (the default
/// group) or `plain.peer.<group>`. What the drift check of a named room
/// looks for, so another setting never silently makes a second container.
pub fn is_named_variant(candidate: &str, plain: &str) -> bool {
    let Some(rest) = candidate.strip_prefix(plain) else {
        return false;
    };
    let Some(rest) = rest.strip_prefix(PEER_SUFFIX) else {
        return rest.is_empty();
    };
    match rest.strip_prefix('.') {
        None => rest.is_empty(),
        Some(group) => !group.is_empty() && !group.contains('.'),
    }
}

/// Lower-case letters, digits and single dashes, nothing else. Never a `.`:
/// suffixes such as `.peer` can then never be produced by sanitising.
pub fn sanitize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars().flat_map(char::to_lowercase) {
        let c = if c.is_ascii_alphanumeric() { c } else { '-' };
        if c == '-' && (out.is_empty() || out.ends_with('-')) {
            continue;
        }
        out.push(c);
        if out.len() >= MAX_BASENAME {
            break;
        }
    }
    out.trim_end_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_rooms_variants_are_its_peer_settings_and_no_other_name() {
        let plain = named_room_name_in("infra", None).unwrap();
        for group in [None, Some(DEFAULT_PEER_GROUP), Some("b")] {
            let variant = named_room_name_in("infra", group).unwrap();
            assert!(is_named_variant(&variant, &plain), "{variant}");
        }
        for other in [
            "workroom-infra-2",
            "workroom-infrastructure",
            "workroom-infra.peer.",
            "workroom-infra.peer.a.b",
            "workroom-infra.peerx",
        ] {
            assert!(!is_named_variant(other, &plain), "{other}");
        }
    }

    #[test]
    fn the_name_is_stable_and_readable() {
        let a = room_name(
            Path::new("/home/ann/My App"),
            Path::new("/home/ann/My App/.devcontainer/devcontainer.json"),
            false,
        );
        assert_eq!(
            a,
            room_name(
                Path::new("/home/ann/My App"),
                Path::new("/home/ann/My App/.devcontainer/devcontainer.json"),
                false
            )
        );
        assert!(a.starts_with("workroom-my-app-"), "{a}");
        assert_eq!(a.len(), "workroom-my-app-".len() + 8);
    }

    #[test]
    fn another_folder_or_config_gives_another_room() {
        let cfg = Path::new("/w/.devcontainer/devcontainer.json");
        let other_cfg = Path::new("/w/.devcontainer/python/devcontainer.json");
        assert_ne!(room_name(Path::new("/w"), cfg, false), room_name(Path::new("/w"), other_cfg, false));
        assert_ne!(room_name(Path::new("/a/w"), cfg, false), room_name(Path::new("/b/w"), cfg, false));
    }

    #[test]
    fn sanitizing_never_yields_a_dot_or_an_edge_dash() {
        assert_eq!(sanitize("infra.peer"), "infra-peer");
        assert_eq!(sanitize("--A__b..c--"), "a-b-c");
        assert_eq!(sanitize("日本"), "");
        assert_eq!(sanitize(&"x".repeat(100)).len(), MAX_BASENAME);
    }

    #[test]
    fn an_unusable_basename_still_gives_a_valid_name() {
        let n = room_name(Path::new("/"), Path::new("/.devcontainer.json"), false);
        assert!(n.starts_with("workroom-room-"), "{n}");
    }

    #[test]
    fn peer_messaging_is_folded_into_a_workspace_rooms_name() {
        let (w, c) = (Path::new("/w/app"), Path::new("/w/app/.devcontainer.json"));
        let plain = room_name(w, c, false);
        let peer = room_name(w, c, true);
        assert_ne!(plain, peer);
        assert!(peer.starts_with("workroom-app-"), "{peer}");
        // The setting sits after a NUL, which no path can hold (the kernel
        // refuses it), so no folder or config file name reproduces the seed.
        let tricky = [
            (Path::new("/w/app"), Path::new("/w/app/.devcontainer.jsonpeer")),
            (Path::new("/w/app"), Path::new("/w/app/.devcontainer.json/peer")),
            (Path::new("/w/apppeer"), Path::new("/w/app/.devcontainer.json")),
        ];
        for (w2, c2) in tricky {
            assert_ne!(room_name(w2, c2, false), peer, "{w2:?} {c2:?}");
        }
    }

    #[test]
    fn the_peer_group_is_folded_into_the_name_and_the_default_group_keeps_the_old_one() {
        let (w, c) = (Path::new("/w/app"), Path::new("/w/app/.devcontainer.json"));
        assert_eq!(room_name_in(w, c, Some("default")), room_name(w, c, true));
        assert_eq!(room_name_in(w, c, None), room_name(w, c, false));
        let all = [
            room_name_in(w, c, None),
            room_name_in(w, c, Some("default")),
            room_name_in(w, c, Some("a")),
            room_name_in(w, c, Some("b")),
        ];
        let distinct: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), all.len(), "{all:?}");
        assert_eq!(named_room_name_in("infra", Some("a")).as_deref(), Some("workroom-infra.peer.a"));
        assert_eq!(named_room_name_in("infra", Some("default")).as_deref(), Some("workroom-infra.peer"));
        assert_eq!(named_room_name_in("infra", None).as_deref(), Some("workroom-infra"));
    }

    #[test]
    fn a_named_room_with_peers_never_shares_a_container_with_another_name() {
        // (name, peer, expected)
        let table = [
            ("infra", false, Some("workroom-infra")),
            ("infra", true, Some("workroom-infra.peer")),
            ("infra-peer", false, Some("workroom-infra-peer")),
            ("infra.peer", false, Some("workroom-infra-peer")),
            ("infra-peer", true, Some("workroom-infra-peer.peer")),
            ("Infra", true, Some("workroom-infra.peer")),
            ("..", true, None),
        ];
        for (name, peer, expected) in table {
            assert_eq!(named_room_name(name, peer).as_deref(), expected, "{name} peer={peer}");
        }
        // Injective across the flag for every sanitised name: the plain form
        // never holds a `.`, the peer form always ends in `.peer`.
        for name in ["infra", "infra-peer", "infra.peer", "a", "peer", "x.peer.peer"] {
            let off = named_room_name(name, false).unwrap();
            for other in ["infra", "infra-peer", "infra.peer", "a", "peer", "x.peer.peer"] {
                assert_ne!(off, named_room_name(other, true).unwrap(), "{name} vs {other} --peer");
            }
        }
    }
}
