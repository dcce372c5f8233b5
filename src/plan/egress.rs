//! A room in `allowlist` or `none` egress mode, applied to its create
//! plan: pure, so each choice is a unit test.
//!
//! The room gets the engine's `none` network: a loopback and nothing
//! else, so no address outside it (the internet, the host, the engine's
//! bridge, other containers) has a route, and no capability is added to
//! change that. Root in the room cannot add an interface or a route
//! without `NET_ADMIN`, which a room in these modes may not ask for. The
//! daemon link needs no network: it is the engine's exec.
//!
//! A compose room cannot leave its siblings behind: it stays on its
//! project's network, which `plan/compose/egress.rs` makes internal with
//! no address of the host's on it, and root in every service of the
//! project loses `NET_RAW` (with it, a raw frame reaches the host's own
//! IPv6 link-local address on that bridge: measured, ADR 0015).
//!
//! In `allowlist` mode every process gets the proxy in its environment,
//! under the names tools read (`HTTPS_PROXY`, `https_proxy`, ...), and
//! what never goes through it: loopback and a compose room's siblings.

use super::create::CreatePlan;
use crate::egress::policy::Mode;
use crate::egress::PROXY_PORT;

/// On a room made in `allowlist` or `none` mode: the mode, which the
/// room's forwarder reads to serve its proxy, and `up` compares.
pub const EGRESS_LABEL: &str = "workroom.egress";

/// What cannot hold in a room with no route out.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EgressPlanError {
    #[error(
        "[egress] mode = \"{mode}\" gives the room no network, and {what} asks for one; \
         remove one of the two (`--egress open` keeps the network)"
    )]
    NetworkAsked { mode: &'static str, what: String },
    #[error(
        "[egress] mode = \"{mode}\" with runArgs/capAdd `{cap}`: root in the room could then make its own \
         route out; remove the capability or use `--egress open`"
    )]
    Capability { mode: &'static str, cap: String },
    #[error(
        "[egress] mode = \"{mode}\" on a privileged room: root there could make its own route out; \
         remove `privileged` or use `--egress open`"
    )]
    Privileged { mode: &'static str },
}

/// Where a room in `allowlist` or `none` mode is left with no route out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoomNetwork<'a> {
    /// The engine's `none` network: a loopback alone (image and
    /// Dockerfile rooms).
    Nothing,
    /// The compose project's internal network, shared with these services
    /// (the room's own included), reached by name directly.
    Project { services: &'a [String] },
}

/// The proxy's address as the room's tools are given it.
pub fn proxy_url() -> String {
    format!("http://127.0.0.1:{PROXY_PORT}")
}

/// The environment an `allowlist` room's processes get: the proxy under
/// every name tools read, and what never goes through it (loopback, and
/// the names in `direct`: a compose room's siblings, which the proxy
/// would refuse as names it cannot look up).
pub fn proxy_env(direct: &[String]) -> Vec<(String, String)> {
    let url = proxy_url();
    let mut env = Vec::new();
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        env.push((name.to_string(), url.clone()));
        env.push((name.to_ascii_lowercase(), url.clone()));
    }
    let none = ["localhost", "127.0.0.1", "::1"]
        .into_iter()
        .chain(direct.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(",");
    env.push(("NO_PROXY".into(), none.clone()));
    env.push(("no_proxy".into(), none));
    env
}

/// The capabilities that let root in a room change its network.
const NETWORK_CAPS: &[&str] = &["NET_ADMIN", "SYS_ADMIN", "ALL"];

/// The capability that, on a network shared with others, lets root send
/// frames of its own making: to the host's IPv6 link-local address on the
/// project's bridge, which answers (measured, ADR 0015). Harmless on the
/// `none` network, which has no other end.
pub const RAW_FRAMES_CAP: &str = "NET_RAW";

/// Applies `mode` to an image or Dockerfile room's create plan; the
/// warnings to say.
pub fn apply(plan: &mut CreatePlan, mode: Mode) -> Result<Vec<String>, EgressPlanError> {
    apply_on(plan, mode, RoomNetwork::Nothing)
}

/// Applies `mode` to a room's create plan, the room left on `network`;
/// the warnings to say.
pub fn apply_on(plan: &mut CreatePlan, mode: Mode, network: RoomNetwork) -> Result<Vec<String>, EgressPlanError> {
    if mode == Mode::Open {
        return Ok(Vec::new());
    }
    let mode_name = mode.as_str();
    let mut warnings = Vec::new();
    let host = plan.body.host_config.get_or_insert_with(Default::default);
    if let Some(network) = host.network_mode.as_deref().filter(|n| *n != "none") {
        let what = match network {
            "host" => "[network] mode = \"host\" (or runArgs --network host)".to_string(),
            other => format!("runArgs --network {other}"),
        };
        return Err(EgressPlanError::NetworkAsked { mode: mode_name, what });
    }
    if host.privileged == Some(true) {
        return Err(EgressPlanError::Privileged { mode: mode_name });
    }
    for cap in host.cap_add.iter().flatten() {
        let upper = cap.to_ascii_uppercase();
        let bare = upper.trim_start_matches("CAP_");
        let shared = matches!(network, RoomNetwork::Project { .. }) && bare == RAW_FRAMES_CAP;
        if NETWORK_CAPS.contains(&bare) || shared {
            return Err(EgressPlanError::Capability { mode: mode_name, cap: cap.clone() });
        }
    }
    let direct: &[String] = match network {
        RoomNetwork::Nothing => {
            host.network_mode = Some("none".into());
            &[]
        }
        // The override puts the service on the project's internal network.
        RoomNetwork::Project { services } => {
            let drop = host.cap_drop.get_or_insert_with(Vec::new);
            if !drop.iter().any(|c| c.to_ascii_uppercase().trim_start_matches("CAP_") == RAW_FRAMES_CAP) {
                drop.push(RAW_FRAMES_CAP.into());
            }
            services
        }
    };
    host.dns = None;
    host.extra_hosts = None;
    if host.port_bindings.take().is_some() {
        warnings.push(format!("[egress] mode = \"{mode_name}\": appPort and -p publish nothing from a room with no network; `forwardPorts` still reach it"));
        plan.body.exposed_ports = None;
    }
    // `--ip`, `--network-alias` name an endpoint on a network it no
    // longer joins.
    if plan.body.networking_config.take().is_some() {
        warnings.push(format!("[egress] mode = \"{mode_name}\": runArgs' network endpoint options are left out"));
    }
    if mode == Mode::Allowlist {
        let env = plan.body.env.get_or_insert_with(Vec::new);
        for (key, value) in proxy_env(direct) {
            let prefix = format!("{key}=");
            if let Some(own) = env.iter().find(|e| e.starts_with(&prefix)).filter(|e| **e != format!("{key}={value}")) {
                warnings.push(format!("[egress] mode = \"allowlist\": {own} is replaced by the room's proxy"));
            }
            env.retain(|e| !e.starts_with(&prefix));
            env.push(format!("{key}={value}"));
        }
    }
    plan.body.labels.get_or_insert_with(Default::default).insert(EGRESS_LABEL.into(), mode_name.into());
    Ok(warnings)
}

/// An `allowlist` room on an engine that sees this host's folders: the
/// host's egress socket folder (`egress::store::socket_folder`) bound
/// read-only at [`workroomd::room::EGRESS_DIR`], through which the daemon
/// hands each proxy connection to the host. A `Binds` entry, which the
/// engine makes when missing (a start after the folder was removed still
/// starts; the connections then ride the link).
pub fn bind_socket_folder(plan: &mut CreatePlan, host_folder: &str) {
    let host = plan.body.host_config.get_or_insert_with(Default::default);
    host.binds.get_or_insert_with(Vec::new).push(format!("{host_folder}:{}:ro", workroomd::room::EGRESS_DIR));
}

/// The mode a room was made in, from its labels (none: `open`).
pub fn mode_of(labels: Option<&std::collections::HashMap<String, String>>) -> Mode {
    match labels.and_then(|l| l.get(EGRESS_LABEL)).map(String::as_str) {
        Some("allowlist") => Mode::Allowlist,
        Some("none") => Mode::None,
        _ => Mode::Open,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::{ContainerCreateBody, HostConfig, NetworkingConfig, PortBinding};
    use std::collections::HashMap;

    fn plan(host: HostConfig, env: &[&str]) -> CreatePlan {
        CreatePlan {
            name: "r".into(),
            image: "i".into(),
            remote_user: "root".into(),
            body: ContainerCreateBody {
                host_config: Some(host),
                env: Some(env.iter().map(|e| e.to_string()).collect()),
                ..Default::default()
            },
            named_volumes: Vec::new(),
            warnings: Vec::new(),
            platform: None,
            git: None,
        }
    }

    fn env(p: &CreatePlan) -> Vec<String> {
        p.body.env.clone().unwrap_or_default()
    }

    #[test]
    fn an_open_room_is_left_as_it_is() {
        let mut p = plan(HostConfig { network_mode: Some("mynet".into()), ..Default::default() }, &["A=1"]);
        let before = format!("{:?}", p.body);
        assert_eq!(apply(&mut p, Mode::Open).unwrap(), Vec::<String>::new());
        assert_eq!(format!("{:?}", p.body), before);
    }

    #[test]
    fn an_allowlist_room_has_no_network_and_the_proxy_under_every_name() {
        let mut p = plan(HostConfig::default(), &["A=1", "https_proxy=http://corp:8080"]);
        let warnings = apply(&mut p, Mode::Allowlist).unwrap();
        let host = p.body.host_config.as_ref().unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        let env = env(&p);
        for name in ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"] {
            assert!(env.contains(&format!("{name}=http://127.0.0.1:3128")), "{name} in {env:?}");
        }
        assert!(env.contains(&"NO_PROXY=localhost,127.0.0.1,::1".to_string()));
        assert!(env.contains(&"A=1".to_string()));
        assert_eq!(env.iter().filter(|e| e.starts_with("https_proxy=")).count(), 1);
        assert!(warnings.iter().any(|w| w.contains("https_proxy=http://corp:8080")), "{warnings:?}");
        assert_eq!(mode_of(p.body.labels.as_ref()), Mode::Allowlist);
    }

    #[test]
    fn a_none_room_has_no_network_and_no_proxy() {
        let mut p = plan(HostConfig::default(), &[]);
        apply(&mut p, Mode::None).unwrap();
        assert!(env(&p).is_empty(), "{:?}", env(&p));
        assert_eq!(mode_of(p.body.labels.as_ref()), Mode::None);
        assert_eq!(p.body.host_config.unwrap().network_mode.as_deref(), Some("none"));
    }

    #[test]
    fn a_network_privileges_or_a_network_capability_are_refused_naming_both_sides() {
        let cases = [
            HostConfig { network_mode: Some("host".into()), ..Default::default() },
            HostConfig { network_mode: Some("mynet".into()), ..Default::default() },
            HostConfig { privileged: Some(true), ..Default::default() },
            HostConfig { cap_add: Some(vec!["cap_net_admin".into()]), ..Default::default() },
            HostConfig { cap_add: Some(vec!["SYS_ADMIN".into()]), ..Default::default() },
        ];
        for host in cases {
            let mut p = plan(host.clone(), &[]);
            let err = apply(&mut p, Mode::Allowlist).unwrap_err();
            let text = err.to_string();
            assert!(text.contains("allowlist") && text.contains("--egress open"), "{host:?}: {text}");
        }
        let mut ok = plan(HostConfig { cap_add: Some(vec!["SYS_PTRACE".into()]), ..Default::default() }, &[]);
        assert!(apply(&mut ok, Mode::None).is_ok());
    }

    #[test]
    fn published_ports_and_endpoint_options_are_left_out_with_a_word() {
        let mut p = plan(
            HostConfig {
                port_bindings: Some(HashMap::from([("80/tcp".to_string(), Some(vec![PortBinding::default()]))])),
                ..Default::default()
            },
            &[],
        );
        p.body.networking_config = Some(NetworkingConfig::default());
        let warnings = apply(&mut p, Mode::Allowlist).unwrap();
        assert!(p.body.host_config.as_ref().unwrap().port_bindings.is_none());
        assert!(p.body.networking_config.is_none());
        assert_eq!(warnings.len(), 2, "{warnings:?}");
    }

    #[test]
    fn a_compose_room_keeps_its_project_network_loses_net_raw_and_reaches_its_siblings_without_the_proxy() {
        let services = ["app".to_string(), "db".to_string()];
        let network = RoomNetwork::Project { services: &services };
        let mut p = plan(HostConfig { cap_drop: Some(vec!["MKNOD".into()]), ..Default::default() }, &[]);
        apply_on(&mut p, Mode::Allowlist, network).unwrap();
        let host = p.body.host_config.as_ref().unwrap();
        assert_eq!(host.network_mode, None, "the override puts it on the project's internal network");
        assert_eq!(host.cap_drop.as_deref(), Some(&["MKNOD".to_string(), "NET_RAW".to_string()][..]));
        assert!(env(&p).contains(&"NO_PROXY=localhost,127.0.0.1,::1,app,db".to_string()), "{:?}", env(&p));
        assert_eq!(mode_of(p.body.labels.as_ref()), Mode::Allowlist);
        // NET_RAW is refused there, not in a room alone on the `none` network.
        let raw = || plan(HostConfig { cap_add: Some(vec!["NET_RAW".into()]), ..Default::default() }, &[]);
        let err = apply_on(&mut raw(), Mode::None, network).unwrap_err();
        assert!(err.to_string().contains("`NET_RAW`"), "{err}");
        assert!(apply(&mut raw(), Mode::None).is_ok());
    }

    #[test]
    fn a_room_without_the_label_is_open() {
        assert_eq!(mode_of(None), Mode::Open);
        assert_eq!(mode_of(Some(&HashMap::from([(EGRESS_LABEL.to_string(), "bogus".to_string())]))), Mode::Open);
    }
}
