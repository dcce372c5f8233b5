//! A compose room in `allowlist` or `none` egress mode, decided without
//! I/O: the whole project on one network with no route out, and what of
//! the user's compose files would open a way around it, refused by name.
//!
//! The room cannot take the engine's `none` network as an image room
//! does: its siblings (a database, a cache) would be lost. Instead the
//! project's `default` network, which every service without network
//! settings of its own joins, is made `internal` with
//! `com.docker.network.bridge.inhibit_ipv4`: the host keeps no address on
//! that bridge, so no packet of the project's reaches it, another network
//! or the internet, while the services reach each other by name through
//! the engine's DNS. Measured on Docker 20.10.24 (ADR 0015): `internal`
//! alone still lets every service reach the host's services at the
//! network's gateway; with `inhibit_ipv4` the gateway, the host's
//! addresses, another bridge's containers and 8.8.8.8 find no route
//! (EHOSTUNREACH), and a sibling answers by name.
//!
//! Two holes remain on such a bridge, and both are closed for every
//! service: the host keeps an IPv6 link-local address on it, which root
//! with `NET_RAW` reaches with frames of its own making (the containers'
//! own IPv6 is off, and `/proc/sys` is read-only), so `NET_RAW` is
//! dropped; and a service that joins another network, takes the host's,
//! or may change its own network (privileged, `NET_ADMIN`) is refused.
//! An engine that does not keep the option (Podman's API drops it, and
//! its internal network keeps the gateway address, measured) is refused
//! after the check of the network compose made, before any service runs.

use crate::egress::policy::Mode;
use crate::plan::egress::RAW_FRAMES_CAP;
use bollard::models::NetworkInspect;
use serde_json::{json, Map, Value};

/// The bridge driver's option that leaves the host no IPv4 address on the
/// network (Docker's; Podman's API drops it).
pub const INHIBIT_IPV4: &str = "com.docker.network.bridge.inhibit_ipv4";

/// The project network every service without network settings joins.
const DEFAULT_NETWORK: &str = "default";

/// Capabilities a service of such a project may not be given: with them
/// root makes its own route out (or, on the shared bridge, its own frames).
const REFUSED_CAPS: &[&str] = &["NET_ADMIN", "SYS_ADMIN", "NET_RAW", "ALL"];

/// A project whose services can all be held on its internal network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectEgress {
    /// Every service of the project: each loses `NET_RAW`, and an
    /// `allowlist` room reaches them directly (`NO_PROXY`).
    pub services: Vec<String>,
    /// The engine's name of the project's network, checked once compose
    /// made it.
    pub network: String,
}

/// What of the compose files would open a way around the internal network.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProjectEgressError {
    #[error(
        "service {service:?} has `network_mode: {network_mode}`, a way around the project's internal network \
         that [egress] mode = \"{mode}\" puts every service on; remove it (`service:NAME` of a service of the \
         project is kept) or use `--egress open`"
    )]
    NetworkMode { service: String, network_mode: String, mode: &'static str },
    #[error(
        "service {service:?} joins network {network:?}, which has a route to the host; with [egress] mode = \
         \"{mode}\" every service is on the project's internal network alone: leave `networks:` out of the \
         service or use `--egress open`"
    )]
    OwnNetwork { service: String, network: String, mode: &'static str },
    #[error(
        "service {service:?} is `privileged`: root there could make its own route out of [egress] mode = \
         \"{mode}\"; remove it or use `--egress open`"
    )]
    Privileged { service: String, mode: &'static str },
    #[error(
        "service {service:?} has `cap_add: {cap}`: root there could make its own route out of [egress] mode = \
         \"{mode}\"; remove it or use `--egress open`"
    )]
    Capability { service: String, cap: String, mode: &'static str },
    #[error(
        "`networks: default:` sets {keys}; with [egress] mode = \"{mode}\" workroom makes the project's default \
         network itself, internal: remove those keys or use `--egress open`"
    )]
    DefaultNetwork { keys: String, mode: &'static str },
}

/// What the engine made of the project's network, when it is not what
/// was asked: the room would reach the host through it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the engine made network {network} {what}, so the project could reach the host through it; egress mode \
     `{mode}` cannot hold for a compose room on this engine (Podman's API drops `{INHIBIT_IPV4}`): use \
     `--egress open`, or an image or Dockerfile config, where the room gets no network at all"
)]
pub struct NetworkRefusal {
    pub network: String,
    pub what: String,
    pub mode: &'static str,
}

/// Checks the project as `compose config` printed it; the services to
/// hold and the network to check once made.
pub fn project_egress(printed: &Value, project: &str, mode: Mode) -> Result<ProjectEgress, ProjectEgressError> {
    let mode = mode.as_str();
    let network = format!("{project}_{DEFAULT_NETWORK}");
    let empty = Map::new();
    let services = printed.get("services").and_then(Value::as_object).unwrap_or(&empty);
    for (name, s) in services {
        let service = || name.clone();
        if let Some(m) = s.get("network_mode").and_then(Value::as_str).filter(|m| !m.is_empty()) {
            let in_project = m.strip_prefix("service:").is_some_and(|other| services.contains_key(other));
            if m != "none" && !in_project {
                return Err(ProjectEgressError::NetworkMode { service: service(), network_mode: m.into(), mode });
            }
        }
        let joined: Vec<String> = match s.get("networks") {
            Some(Value::Object(m)) => m.keys().cloned().collect(),
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::to_string).collect(),
            _ => Vec::new(),
        };
        if let Some(own) = joined.into_iter().find(|n| n != DEFAULT_NETWORK) {
            return Err(ProjectEgressError::OwnNetwork { service: service(), network: own, mode });
        }
        if s.get("privileged").and_then(Value::as_bool) == Some(true) {
            return Err(ProjectEgressError::Privileged { service: service(), mode });
        }
        let caps = s.get("cap_add").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        for cap in caps.iter().filter_map(Value::as_str) {
            let upper = cap.to_ascii_uppercase();
            if REFUSED_CAPS.contains(&upper.trim_start_matches("CAP_")) {
                return Err(ProjectEgressError::Capability { service: service(), cap: cap.into(), mode });
            }
        }
    }
    let declared = printed.get("networks").and_then(|n| n.get(DEFAULT_NETWORK)).and_then(Value::as_object);
    // compose 2 prints the default network's name; anything else the
    // files set (external, a driver, IPv6, ipam) is the user's network,
    // which would not be ours to make internal.
    let keys: Vec<&str> = declared
        .iter()
        .flat_map(|d| d.iter())
        .filter(|(k, v)| {
            let ours = k.as_str() == "name" && v.as_str() == Some(network.as_str());
            !(is_unset(v) || ours)
        })
        .map(|(k, _)| k.as_str())
        .collect();
    if !keys.is_empty() {
        return Err(ProjectEgressError::DefaultNetwork { keys: keys.join(", "), mode });
    }
    Ok(ProjectEgress { services: services.keys().cloned().collect(), network })
}

fn is_unset(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// Adds to the override file: the default network, internal with no
/// address of the host's, and `NET_RAW` dropped from every service.
///
/// No service gets `networks:`: one without joins `default` as it is, and
/// one with `network_mode: service:NAME` or `none` may not have both.
pub fn add_to_override(file: &mut Value, egress: &ProjectEgress) {
    let Some(top) = file.as_object_mut() else { return };
    let services = top.entry("services").or_insert_with(|| json!({}));
    if let Some(services) = services.as_object_mut() {
        for name in &egress.services {
            let s = services.entry(name.clone()).or_insert_with(|| json!({}));
            let Some(s) = s.as_object_mut() else { continue };
            let drop = s.entry("cap_drop").or_insert_with(|| json!([]));
            if let Some(list) = drop.as_array_mut() {
                if !list.iter().any(|c| c.as_str() == Some(RAW_FRAMES_CAP)) {
                    list.push(json!(RAW_FRAMES_CAP));
                }
            }
        }
    }
    let networks = top.entry("networks").or_insert_with(|| json!({}));
    if let Some(networks) = networks.as_object_mut() {
        networks.insert(DEFAULT_NETWORK.into(), json!({ "internal": true, "driver_opts": { INHIBIT_IPV4: "true" } }));
    }
}

/// An `allowlist` compose room's egress socket folder (see
/// `plan::egress::bind_socket_folder`), bound read-only into the room's
/// service in compose's short form, which makes the folder when missing.
pub fn add_socket_folder(file: &mut Value, service: &str, host_folder: &str) {
    let Some(top) = file.as_object_mut() else { return };
    let services = top.entry("services").or_insert_with(|| json!({}));
    let Some(s) = services.as_object_mut().and_then(|s| s.entry(service).or_insert_with(|| json!({})).as_object_mut())
    else {
        return;
    };
    let volumes = s.entry("volumes").or_insert_with(|| json!([]));
    if let Some(list) = volumes.as_array_mut() {
        list.push(json!(format!("{host_folder}:{}:ro", workroomd::room::EGRESS_DIR)));
    }
}

/// Whether the network compose made is the one asked: internal, no IPv4
/// address of the host's, no IPv6.
pub fn network_holds(network: &str, made: Option<&NetworkInspect>, mode: Mode) -> Result<(), NetworkRefusal> {
    let refusal = |what: &str| NetworkRefusal { network: network.into(), what: what.into(), mode: mode.as_str() };
    let Some(n) = made else { return Err(refusal("(none: compose made no such network)")) };
    if n.internal != Some(true) {
        return Err(refusal("not internal"));
    }
    let inhibited = n.options.as_ref().and_then(|o| o.get(INHIBIT_IPV4)).is_some_and(|v| v == "true");
    if !inhibited {
        return Err(refusal(&format!("without {INHIBIT_IPV4}, with an address of the host's at its gateway")));
    }
    if n.enable_ipv6 == Some(true) {
        return Err(refusal("with IPv6"));
    }
    Ok(())
}

#[cfg(test)]
mod socket_tests {
    use super::*;

    #[test]
    fn the_socket_folder_is_bound_read_only_into_the_rooms_service_beside_its_own_volumes() {
        let mut file = json!({ "services": { "app": { "volumes": ["/w:/workspaces/w"] }, "db": {} } });
        add_socket_folder(&mut file, "app", "/state/egress/r.d");
        assert_eq!(
            file["services"]["app"]["volumes"],
            json!(["/w:/workspaces/w", "/state/egress/r.d:/.workroom/egress:ro"])
        );
        assert_eq!(file["services"]["db"], json!({}), "only the room's service");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn printed(services: Value) -> Value {
        json!({ "services": services })
    }

    #[test]
    fn a_project_of_plain_services_is_held_whole_on_its_default_network() {
        let p = printed(json!({
            "app": { "image": "a" },
            "db": { "image": "b", "networks": { "default": { "aliases": ["database"] } } },
            "side": { "image": "c", "network_mode": "service:app" },
            "off": { "image": "d", "network_mode": "none", "cap_add": ["SYS_PTRACE"] },
        }));
        let held = project_egress(&p, "proj_devcontainer", Mode::Allowlist).unwrap();
        assert_eq!(held.services, ["app", "db", "side", "off"]);
        assert_eq!(held.network, "proj_devcontainer_default");
        let named = json!({ "services": {}, "networks": { "default": { "name": "p_default", "external": false } } });
        assert!(project_egress(&named, "p", Mode::None).is_ok(), "compose 2 prints the default network's name");
    }

    #[test]
    fn a_service_with_a_way_around_the_network_is_refused_naming_it_and_the_property() {
        let cases = [
            (json!({ "db": { "network_mode": "host" } }), "`network_mode: host`"),
            (json!({ "db": { "network_mode": "bridge" } }), "`network_mode: bridge`"),
            (json!({ "db": { "network_mode": "container:other" } }), "`network_mode: container:other`"),
            (json!({ "db": { "network_mode": "service:gone" } }), "`network_mode: service:gone`"),
            (json!({ "db": { "networks": { "front": null } } }), "joins network \"front\""),
            (json!({ "db": { "networks": ["default", "front"] } }), "joins network \"front\""),
            (json!({ "db": { "privileged": true } }), "`privileged`"),
            (json!({ "db": { "cap_add": ["net_raw"] } }), "`cap_add: net_raw`"),
            (json!({ "db": { "cap_add": ["CAP_NET_ADMIN"] } }), "`cap_add: CAP_NET_ADMIN`"),
        ];
        for (services, named) in cases {
            let err = project_egress(&printed(services.clone()), "p", Mode::Allowlist).unwrap_err().to_string();
            assert!(err.starts_with("service \"db\" "), "{services}: {err}");
            assert!(err.contains(named) && err.contains("\"allowlist\"") && err.contains("--egress open"), "{err}");
        }
        let own = json!({ "services": {}, "networks": { "default": { "external": true, "name": "shared" } } });
        let err = project_egress(&own, "p", Mode::None).unwrap_err().to_string();
        assert!(err.contains("`networks: default:` sets external, name"), "{err}");
    }

    #[test]
    fn the_override_makes_the_default_network_internal_and_drops_net_raw_from_every_service() {
        let mut file = json!({ "services": { "app": { "cap_drop": ["NET_RAW"], "container_name": "r" } } });
        let held = ProjectEgress { services: vec!["app".into(), "db".into()], network: "p_default".into() };
        add_to_override(&mut file, &held);
        assert_eq!(file["services"]["app"]["cap_drop"], json!(["NET_RAW"]));
        assert_eq!(file["services"]["app"]["container_name"], "r");
        assert_eq!(file["services"]["db"], json!({ "cap_drop": ["NET_RAW"] }));
        assert_eq!(
            file["networks"]["default"],
            json!({ "internal": true, "driver_opts": { "com.docker.network.bridge.inhibit_ipv4": "true" } })
        );
        assert!(file["services"]["db"].get("networks").is_none());
    }

    #[test]
    fn a_network_the_engine_did_not_keep_internal_and_without_the_hosts_address_is_refused() {
        let kept = NetworkInspect {
            internal: Some(true),
            options: Some(HashMap::from([(INHIBIT_IPV4.to_string(), "true".to_string())])),
            enable_ipv6: Some(false),
            ..Default::default()
        };
        assert!(network_holds("p_default", Some(&kept), Mode::Allowlist).is_ok());
        // As Podman 4.3's API made it: internal, the option dropped.
        let podman = NetworkInspect { options: Some(HashMap::new()), ..kept.clone() };
        let err = network_holds("p_default", Some(&podman), Mode::Allowlist).unwrap_err().to_string();
        assert!(err.contains("p_default without com.docker.network.bridge.inhibit_ipv4"), "{err}");
        assert!(err.contains("`--egress open`"), "{err}");
        for made in [
            None,
            Some(NetworkInspect { internal: Some(false), ..kept.clone() }),
            Some(NetworkInspect { enable_ipv6: Some(true), ..kept.clone() }),
        ] {
            assert!(network_holds("p_default", made.as_ref(), Mode::None).is_err(), "{made:?}");
        }
    }
}
