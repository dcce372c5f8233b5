//! The room's shape for inner containers and its network, applied to a
//! create plan: pure, so each choice is a unit test.
//!
//! Nested containers get `/dev/fuse` (fuse-overlayfs needs it for layered
//! storage without kernel overlay mounts) and a size-capped in-memory tmpfs
//! for inner storage: nothing more. No capability is added and the room is
//! never privileged: whatever the engine's seccomp profile refuses stays
//! refused, and workroom says so instead of widening the room.

use super::create::CreatePlan;
use crate::settings::NetworkMode;
use bollard::models::{DeviceMapping, Mount, MountTmpfsOptions, MountType};

/// Where inner container storage lives: a tmpfs, so it is gone with the
/// room's stop or removal and never grows the container's writable layer.
/// One folder per user under it (see `room::nested`).
pub const INNER_STORAGE: &str = "/var/lib/workroom-containers";

/// The tmpfs cap: room for a few small images and their layers; memory it
/// takes is charged to the room, so it must not be unbounded.
pub const INNER_STORAGE_BYTES: i64 = 2 << 30;

/// On a room made with nested containers: `up` prepares them at each start.
pub const NESTED_LABEL: &str = "workroom.nested";

/// What the settings decided for the room.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoomShape {
    pub nested: bool,
    pub network: NetworkMode,
}

/// Said at `up` when the room is made this way.
pub const HOST_NETWORK_WITH_NESTED: &str = "[network] mode = \"host\" with nested containers: \
     inner containers share the host network too (their ports are the host's ports)";

/// Shapes `plan` and returns the warnings `up` prints.
pub fn apply(plan: &mut CreatePlan, shape: RoomShape) -> Vec<String> {
    let mut warnings = Vec::new();
    if shape.nested {
        plan.body.labels.get_or_insert_with(Default::default).insert(NESTED_LABEL.into(), "1".into());
        let host = plan.body.host_config.get_or_insert_with(Default::default);
        host.devices.get_or_insert_with(Vec::new).push(DeviceMapping {
            path_on_host: Some("/dev/fuse".into()),
            path_in_container: Some("/dev/fuse".into()),
            cgroup_permissions: Some("rwm".into()),
        });
        host.mounts.get_or_insert_with(Vec::new).push(Mount {
            target: Some(INNER_STORAGE.into()),
            typ: Some(MountType::TMPFS),
            tmpfs_options: Some(MountTmpfsOptions {
                size_bytes: Some(INNER_STORAGE_BYTES),
                // Sticky and world-writable like /tmp: each user's folder is
                // made (and owned) by the room at `up`.
                mode: Some(0o1777),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    if shape.network == NetworkMode::Host {
        let host = plan.body.host_config.get_or_insert_with(Default::default);
        if let Some(other) = host.network_mode.as_deref().filter(|m| *m != "host") {
            warnings.push(format!("[network] mode = \"host\" replaces runArgs --network {other}"));
        }
        host.network_mode = Some("host".into());
        // The engine refuses published ports on the host network, and they
        // would mean nothing there: the room's ports are the host's.
        if host.port_bindings.take().is_some() {
            warnings.push("[network] mode = \"host\": appPort and -p publish nothing on the host network".into());
            plan.body.exposed_ports = None;
        }
        if shape.nested {
            warnings.push(HOST_NETWORK_WITH_NESTED.into());
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load, LoadRequest};
    use crate::plan::create;

    fn planned(json: &str, shape: RoomShape) -> (CreatePlan, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".devcontainer.json"), json).unwrap();
        let loaded = load(&LoadRequest { env: Default::default(), ..LoadRequest::new(dir.path(), None) }).unwrap();
        let mut p = create::plan("r", "img", &loaded, &create::ImageFacts::default()).unwrap();
        let w = apply(&mut p, shape);
        (p, w)
    }

    #[test]
    fn a_nested_room_gets_fuse_and_a_capped_tmpfs_and_no_privilege_or_capability() {
        let (p, w) = planned(r#"{ "image": "x" }"#, RoomShape { nested: true, network: NetworkMode::Bridge });
        assert!(w.is_empty(), "{w:?}");
        let h = p.body.host_config.unwrap();
        let fuse = h.devices.unwrap();
        assert_eq!(fuse.len(), 1);
        assert_eq!(fuse[0].path_on_host.as_deref(), Some("/dev/fuse"));
        let m = h.mounts.unwrap().into_iter().find(|m| m.target.as_deref() == Some(INNER_STORAGE)).unwrap();
        assert_eq!(m.typ, Some(MountType::TMPFS));
        assert_eq!(m.tmpfs_options.unwrap().size_bytes, Some(INNER_STORAGE_BYTES));
        assert_eq!(h.privileged, Some(false));
        assert_eq!(h.cap_add, None);
        assert_eq!(h.security_opt, None);
        assert_eq!(h.network_mode, None);
        assert_eq!(p.body.labels.unwrap().get(NESTED_LABEL).map(String::as_str), Some("1"));
    }

    #[test]
    fn a_plain_room_is_left_as_planned() {
        let (p, w) = planned(r#"{ "image": "x" }"#, RoomShape::default());
        assert!(w.is_empty());
        let h = p.body.host_config.as_ref().unwrap();
        assert_eq!((h.devices.as_ref(), h.network_mode.as_ref()), (None, None));
        assert!(!h.mounts.as_ref().unwrap().iter().any(|m| m.target.as_deref() == Some(INNER_STORAGE)));
        assert_eq!((h.privileged, h.cap_add.as_ref()), (Some(false), None));
    }

    #[test]
    fn host_network_with_nested_warns_that_inner_containers_share_it() {
        let (p, w) = planned(r#"{ "image": "x" }"#, RoomShape { nested: true, network: NetworkMode::Host });
        assert_eq!(p.body.host_config.unwrap().network_mode.as_deref(), Some("host"));
        assert_eq!(w, vec![HOST_NETWORK_WITH_NESTED.to_string()]);
        let (_, w) = planned(r#"{ "image": "x" }"#, RoomShape { nested: false, network: NetworkMode::Host });
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn host_network_drops_published_ports_and_an_other_network_with_a_warning() {
        let (p, w) = planned(
            r#"{ "image": "x", "appPort": [8080], "runArgs": ["--network", "mynet"] }"#,
            RoomShape { nested: false, network: NetworkMode::Host },
        );
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("--network mynet") && w[1].contains("publish nothing"), "{w:?}");
        let h = p.body.host_config.unwrap();
        assert_eq!((h.network_mode.as_deref(), h.port_bindings), (Some("host"), None));
        assert_eq!(p.body.exposed_ports, None);
    }
}
