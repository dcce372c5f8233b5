//! The room's shape for inner containers and its network, applied to a
//! create plan: pure, so each choice is a unit test.
//!
//! Nested containers get `/dev/fuse` (fuse-overlayfs needs it for layered
//! storage without kernel overlay mounts), a size-capped in-memory tmpfs for
//! inner storage, and workroom's seccomp profile (`plan::seccomp`): Docker's
//! default plus user and mount namespaces, which rootless podman needs. No
//! capability is added and the room is never privileged. What the engine
//! itself forbids (an old engine, Podman's API, AppArmor) is named, and the
//! room is then made without nested containers.

use super::create::CreatePlan;
use super::seccomp;
use crate::settings::NetworkMode;
use bollard::models::DeviceMapping;

/// Where inner container storage lives: a tmpfs, so it is gone with the
/// room's stop or removal and never grows the container's writable layer.
/// One folder per user under it (see `room::nested`).
pub const INNER_STORAGE: &str = "/var/lib/workroom-containers";

/// The tmpfs cap: room for a few small images and their layers; memory it
/// takes is charged to the room, so it must not be unbounded.
pub const INNER_STORAGE_BYTES: i64 = 2 << 30;

/// On a room made with nested containers: `up` prepares them at each start.
pub const NESTED_LABEL: &str = "workroom.nested";

/// [`NESTED_LABEL`]'s value on a room that asked for nested containers on an
/// engine that cannot give them: made without, and not to be recreated for
/// them on every `up`.
pub const NESTED_REFUSED: &str = "refused";

/// What the settings decided for the room.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoomShape {
    pub nested: bool,
    pub network: NetworkMode,
}

/// Said at `up` when the room is made this way.
pub const HOST_NETWORK_WITH_NESTED: &str = "[network] mode = \"host\" with nested containers: \
     inner containers share the host network too (their ports are the host's ports)";

/// What the engine is, as far as nested containers care (from `docker info`
/// and `docker version`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineFacts {
    /// e.g. `Docker Engine 20.10.24`, `Podman Engine 4.9.3`.
    pub product: String,
    pub podman: bool,
    /// The engine's own API version, e.g. `1.41`.
    pub api_version: String,
    /// `Architecture` from `docker info`, e.g. `x86_64`.
    pub arch: String,
    /// `SecurityOptions` from `docker info`, e.g. `name=seccomp,profile=default`.
    pub security_options: Vec<String>,
}

/// The oldest engine API that keeps a profile's `errnoRet` (Docker 20.10):
/// an older engine drops it, and `clone3` would then fail with EPERM
/// instead of ENOSYS, so glibc would not fall back to `clone` and no thread
/// could start in the room.
const MIN_API: (u32, u32) = (1, 41);

/// What the engine lets a nested room be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confinement {
    /// Nested containers can run: with workroom's seccomp profile (`Some`,
    /// the `SecurityOpt` entry) or, on an engine with no seccomp filter, with
    /// nothing to widen (`None`). `apparmor`: the engine confines containers
    /// with AppArmor, whose `docker-default` refuses every mount, so inner
    /// containers can start only where the configuration lifts it.
    Allowed { profile: Option<String>, apparmor: bool },
    /// Nested containers cannot work on this engine, and why.
    Refused(String),
}

/// The decision from the engine's facts.
pub fn confinement(facts: &EngineFacts) -> Confinement {
    let has = |name: &str| {
        let name = format!("name={name}");
        facts.security_options.iter().any(|o| o.split(',').any(|kv| kv == name))
    };
    if facts.podman {
        return Confinement::Refused(format!(
            "the engine is {}, whose Docker API takes a seccomp profile only as a file on its own host, \
             so workroom's cannot be passed",
            facts.product
        ));
    }
    if api_version(&facts.api_version).is_none_or(|v| v < MIN_API) {
        return Confinement::Refused(format!(
            "the engine ({}, API {}) is older than Docker 20.10 and would apply workroom's seccomp profile \
             without its errno values",
            facts.product, facts.api_version
        ));
    }
    let profile = if has("seccomp") {
        let Some(profile) = seccomp::profile(&facts.arch) else {
            return Confinement::Refused(format!(
                "workroom's seccomp profile is written for x86_64 and arm64 engines; this one is {}",
                facts.arch
            ));
        };
        Some(seccomp::security_opt(&profile))
    } else {
        None
    };
    Confinement::Allowed { profile, apparmor: has("apparmor") }
}

fn api_version(v: &str) -> Option<(u32, u32)> {
    let (major, minor) = v.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The inner storage tmpfs, as `HostConfig.Tmpfs` options: `exec`, which a
/// `Mounts` tmpfs cannot have on Docker 20.10 (it is always `noexec` there,
/// and crun then cannot run an inner container's program).
fn storage_tmpfs_options() -> String {
    format!("rw,exec,nosuid,nodev,size={INNER_STORAGE_BYTES},mode=1777")
}

/// Shapes `plan` and returns the lines `up` prints. `confinement` matters
/// only when `shape.nested`.
pub fn apply(plan: &mut CreatePlan, shape: RoomShape, confinement: &Confinement) -> Vec<String> {
    let mut warnings = Vec::new();
    if shape.nested {
        nested(plan, confinement, &mut warnings);
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

fn nested(plan: &mut CreatePlan, confinement: &Confinement, warnings: &mut Vec<String>) {
    let host = plan.body.host_config.get_or_insert_with(Default::default);
    let privileged = host.privileged == Some(true);
    let own_opts = host.security_opt.clone().unwrap_or_default();
    let own_seccomp = own_opts.iter().any(|o| seccomp::is_seccomp_opt(o));
    let apparmor_lifted = own_opts.iter().any(|o| o == "apparmor=unconfined" || o == "apparmor:unconfined");
    let refused = match confinement {
        Confinement::Refused(why) => Some(why.as_str()),
        Confinement::Allowed { apparmor: true, .. } if !privileged && !apparmor_lifted => Some(
            "the engine confines containers with AppArmor, whose docker-default profile refuses every mount, \
             so no inner container can start (workroom does not lift it; securityOpt apparmor=unconfined would)",
        ),
        Confinement::Allowed { .. } => None,
    };
    let labels = plan.body.labels.get_or_insert_with(Default::default);
    if let Some(why) = refused {
        labels.insert(NESTED_LABEL.into(), NESTED_REFUSED.into());
        warnings.push(format!("nested containers are off: {why}; the room starts without them"));
        return;
    }
    labels.insert(NESTED_LABEL.into(), "1".into());
    let host = plan.body.host_config.get_or_insert_with(Default::default);
    host.devices.get_or_insert_with(Vec::new).push(DeviceMapping {
        path_on_host: Some("/dev/fuse".into()),
        path_in_container: Some("/dev/fuse".into()),
        cgroup_permissions: Some("rwm".into()),
    });
    host.tmpfs.get_or_insert_with(Default::default).insert(INNER_STORAGE.into(), storage_tmpfs_options());
    // A privileged room has no seccomp filter to widen; a configuration
    // with its own profile keeps it (the engine applies only one).
    match confinement {
        Confinement::Allowed { profile: Some(_), .. } if privileged => {}
        Confinement::Allowed { profile: Some(_), .. } if own_seccomp => warnings.push(
            "nested containers: the configuration's own seccomp securityOpt stays; workroom's profile is not added"
                .into(),
        ),
        Confinement::Allowed { profile: Some(opt), .. } => {
            host.security_opt.get_or_insert_with(Vec::new).push(opt.clone());
            warnings.push(seccomp::WIDENING.into());
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load, LoadRequest};
    use crate::plan::create;

    fn docker(security: &[&str]) -> EngineFacts {
        EngineFacts {
            product: "Docker Engine 20.10.24".into(),
            podman: false,
            api_version: "1.41".into(),
            arch: "x86_64".into(),
            security_options: security.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn ours() -> Confinement {
        confinement(&docker(&["name=seccomp,profile=default"]))
    }

    fn planned(json: &str, shape: RoomShape, c: &Confinement) -> (CreatePlan, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".devcontainer.json"), json).unwrap();
        let loaded = load(&LoadRequest { env: Default::default(), ..LoadRequest::new(dir.path(), None) }).unwrap();
        let mut p = create::plan("r", "img", &loaded, &create::ImageFacts::default()).unwrap();
        let w = apply(&mut p, shape, c);
        (p, w)
    }

    const NESTED: RoomShape = RoomShape { nested: true, network: NetworkMode::Bridge };

    fn label(p: &CreatePlan) -> Option<&str> {
        p.body.labels.as_ref()?.get(NESTED_LABEL).map(String::as_str)
    }

    #[test]
    fn a_nested_room_gets_fuse_an_exec_tmpfs_and_our_profile_but_no_privilege_or_capability() {
        let (p, w) = planned(r#"{ "image": "x" }"#, NESTED, &ours());
        assert_eq!(w, vec![seccomp::WIDENING.to_string()]);
        let h = p.body.host_config.as_ref().unwrap();
        let fuse = h.devices.as_ref().unwrap();
        assert_eq!(fuse.len(), 1);
        assert_eq!(fuse[0].path_on_host.as_deref(), Some("/dev/fuse"));
        let tmpfs = &h.tmpfs.as_ref().unwrap()[INNER_STORAGE];
        assert!(
            tmpfs.split(',').any(|o| o == "exec") && tmpfs.contains(&format!("size={INNER_STORAGE_BYTES}")),
            "{tmpfs}"
        );
        assert_eq!(h.privileged, Some(false));
        assert_eq!(h.cap_add, None);
        let opts = h.security_opt.as_ref().unwrap();
        assert_eq!(opts.len(), 1);
        let profile: serde_json::Value = serde_json::from_str(opts[0].strip_prefix("seccomp=").unwrap()).unwrap();
        assert_eq!(profile["defaultAction"], "SCMP_ACT_ALLOW");
        assert_eq!(h.network_mode, None);
        assert_eq!(label(&p), Some("1"));
    }

    #[test]
    fn a_plain_room_is_left_as_planned_and_the_engine_is_not_consulted() {
        let (p, w) = planned(r#"{ "image": "x" }"#, RoomShape::default(), &Confinement::Refused("unasked".into()));
        assert!(w.is_empty());
        let h = p.body.host_config.as_ref().unwrap();
        assert_eq!((h.devices.as_ref(), h.network_mode.as_ref(), h.tmpfs.as_ref()), (None, None, None));
        assert_eq!((h.privileged, h.cap_add.as_ref(), h.security_opt.as_ref()), (Some(false), None, None));
        assert_eq!(label(&p), None);
    }

    #[test]
    fn an_engine_that_cannot_take_the_profile_gives_a_room_without_nested_and_one_line_why() {
        for (facts, says) in [
            (
                EngineFacts { product: "Podman Engine 4.9.3".into(), podman: true, ..docker(&["name=seccomp"]) },
                "the engine is Podman Engine 4.9.3",
            ),
            (
                EngineFacts {
                    product: "Docker Engine 19.03.15".into(),
                    api_version: "1.40".into(),
                    ..docker(&["name=seccomp"])
                },
                "(Docker Engine 19.03.15, API 1.40) is older than Docker 20.10",
            ),
            (EngineFacts { arch: "s390x".into(), ..docker(&["name=seccomp"]) }, "this one is s390x"),
            (
                docker(&["name=apparmor", "name=seccomp,profile=default"]),
                "AppArmor, whose docker-default profile refuses every mount",
            ),
        ] {
            let (p, w) = planned(r#"{ "image": "x" }"#, NESTED, &confinement(&facts));
            assert_eq!(w.len(), 1, "{w:?}");
            assert!(w[0].starts_with("nested containers are off: ") && w[0].contains(says), "{w:?}");
            assert!(w[0].ends_with("; the room starts without them"), "{w:?}");
            let h = p.body.host_config.as_ref().unwrap();
            assert_eq!((h.devices.as_ref(), h.tmpfs.as_ref(), h.security_opt.as_ref()), (None, None, None));
            assert_eq!(label(&p), Some(NESTED_REFUSED));
        }
    }

    #[test]
    fn an_engine_without_seccomp_gets_nested_without_a_profile() {
        let c = confinement(&docker(&[]));
        assert_eq!(c, Confinement::Allowed { profile: None, apparmor: false });
        let (p, w) = planned(r#"{ "image": "x" }"#, NESTED, &c);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(p.body.host_config.as_ref().unwrap().security_opt, None);
        assert_eq!(label(&p), Some("1"));
    }

    #[test]
    fn apparmor_lifted_by_the_configuration_lets_nested_run_with_our_profile_beside_it() {
        let c = confinement(&docker(&["name=apparmor", "name=seccomp,profile=default"]));
        let (p, w) = planned(r#"{ "image": "x", "securityOpt": ["apparmor=unconfined"] }"#, NESTED, &c);
        assert_eq!(w, vec![seccomp::WIDENING.to_string()]);
        let opts = p.body.host_config.unwrap().security_opt.unwrap();
        assert_eq!(opts.len(), 2);
        assert!(opts[1].starts_with("seccomp={"), "{opts:?}");
    }

    #[test]
    fn the_configurations_own_seccomp_profile_stays_and_ours_is_not_added() {
        let (p, w) =
            planned(r#"{ "image": "x", "runArgs": ["--security-opt", "seccomp=unconfined"] }"#, NESTED, &ours());
        assert_eq!(p.body.host_config.unwrap().security_opt.unwrap(), ["seccomp=unconfined"]);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("own seccomp securityOpt stays"), "{w:?}");
    }

    #[test]
    fn a_privileged_room_gets_no_profile_since_it_has_no_filter() {
        let (p, w) = planned(r#"{ "image": "x", "privileged": true }"#, NESTED, &ours());
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(p.body.host_config.as_ref().unwrap().security_opt, None);
        assert_eq!(label(&p), Some("1"));
    }

    #[test]
    fn engine_api_versions_compare_as_numbers() {
        let at = |v: &str| confinement(&EngineFacts { api_version: v.into(), ..docker(&["name=seccomp"]) });
        assert!(matches!(at("1.41"), Confinement::Allowed { profile: Some(_), .. }));
        assert!(matches!(at("1.100"), Confinement::Allowed { .. }));
        assert!(matches!(at("1.9"), Confinement::Refused(_)));
        assert!(matches!(at(""), Confinement::Refused(_)));
    }

    #[test]
    fn host_network_with_nested_warns_that_inner_containers_share_it() {
        let (p, w) = planned(r#"{ "image": "x" }"#, RoomShape { nested: true, network: NetworkMode::Host }, &ours());
        assert_eq!(p.body.host_config.unwrap().network_mode.as_deref(), Some("host"));
        assert_eq!(w, vec![seccomp::WIDENING.to_string(), HOST_NETWORK_WITH_NESTED.to_string()]);
        let (_, w) = planned(r#"{ "image": "x" }"#, RoomShape { nested: false, network: NetworkMode::Host }, &ours());
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn host_network_drops_published_ports_and_an_other_network_with_a_warning() {
        let (p, w) = planned(
            r#"{ "image": "x", "appPort": [8080], "runArgs": ["--network", "mynet"] }"#,
            RoomShape { nested: false, network: NetworkMode::Host },
            &ours(),
        );
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("--network mynet") && w[1].contains("publish nothing"), "{w:?}");
        let h = p.body.host_config.unwrap();
        assert_eq!((h.network_mode.as_deref(), h.port_bindings), (Some("host"), None));
        assert_eq!(p.body.exposed_ports, None);
    }
}
