//! Which property of devcontainer.json an engine refusal is about. The
//! engine answers a bad mount, a taken port or a privilege it cannot grant
//! with a message that names neither the property nor the file; this reads
//! the message for the thing it names (a path, a volume, a port, privilege)
//! and finds the properties that asked for it.

use super::mounts;
use crate::config::{AppPort, Loaded};

/// The properties to blame and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blame {
    /// `mounts[1]`, `appPort`, `runArgs`, …; several when more than one
    /// asked for the same thing.
    pub properties: Vec<String>,
    pub hint: &'static str,
}

impl Blame {
    /// The properties as they are named in a message: `` `a` and `b` ``.
    pub fn named(&self) -> String {
        let quoted: Vec<String> = self.properties.iter().map(|p| format!("`{p}`")).collect();
        quoted.join(" and ")
    }
}

/// The properties behind an engine refusal of the room's create or start,
/// or `None` when the message names nothing we can trace.
pub fn blame(loaded: &Loaded, message: &str) -> Option<Blame> {
    let found = |properties: Vec<String>, hint| (!properties.is_empty()).then_some(Blame { properties, hint });
    if let Some(path) = after(message, "bind source path does not exist: ") {
        let path = path.trim();
        return found(mounts_with_source(loaded, path), "create that folder on the host, or fix the path");
    }
    if message.contains("for a local volume name") {
        let name = quoted(message)?;
        return found(mounts_with_source(loaded, &name), "a volume name has letters, digits and _ . - only");
    }
    if message.contains("address already in use") || message.contains("port is already allocated") {
        let port = taken_port(message)?;
        return found(ports_publishing(loaded, port), "another program holds that host port; free it or pick another");
    }
    // `--gpus` on an engine with no GPU runtime (nvidia-container-toolkit).
    if message.contains("could not select device driver") {
        let asks = |a: &String| a == "--gpus" || a.starts_with("--gpus=");
        let properties = match loaded.model.run_args.iter().any(asks) {
            true => vec!["runArgs".to_string()],
            false => Vec::new(),
        };
        return found(
            properties,
            "`--gpus` asks for GPUs and the engine has no GPU runtime; install nvidia-container-toolkit \
             on its host, or mark `hostRequirements.gpu` \"optional\" to start without GPUs",
        );
    }
    let privilege = ["unable to apply caps", "privileged", "operation not permitted"];
    if privilege.iter().any(|p| message.contains(p)) {
        return found(
            privileges(loaded),
            "this engine does not grant that privilege; remove it, or use another engine",
        );
    }
    None
}

/// What the engine's host lacks, when a refusal of the room says so: the
/// next action, whatever the configuration asked. `None` for any other
/// refusal.
pub fn host_lacks(message: &str) -> Option<&'static str> {
    // Every room runs under the engine's init (`Init: true`). Podman's is
    // catatonit, a package of its own that podman only recommends, so a
    // host without it refuses every room at create: 4.3 says
    // "container-init binary not found on the host: stat
    // /usr/libexec/podman/catatonit: …" (seen), later versions "lookup init
    // binary: exec: \"catatonit\": …".
    let podman = ["container-init binary not found", "lookup init binary"];
    if podman.iter().any(|p| message.contains(p)) {
        return Some(
            "the engine has no init to run the room under; on a Podman host install the catatonit package \
             (apt-get install catatonit, dnf install catatonit)",
        );
    }
    None
}

fn after<'a>(message: &'a str, marker: &str) -> Option<&'a str> {
    message.find(marker).map(|i| &message[i + marker.len()..])
}

/// The first `"…"` of the message.
fn quoted(message: &str) -> Option<String> {
    let start = message.find('"')? + 1;
    let len = message[start..].find('"')?;
    Some(message[start..start + len].to_string())
}

/// `listen tcp4 127.0.0.1:8080: bind: address already in use` and
/// `Bind for 0.0.0.0:8080 failed: port is already allocated`.
fn taken_port(message: &str) -> Option<u16> {
    let address = after(message, "listen tcp4 ")
        .or_else(|| after(message, "listen tcp6 "))
        .or_else(|| after(message, "listen tcp "))
        .or_else(|| after(message, "listen udp "))
        .or_else(|| after(message, "Bind for "))?;
    let address = address.split([' ', ',']).next()?.trim_end_matches(':');
    address.rsplit(':').next()?.parse().ok()
}

/// `workspaceMount`, `mounts[i]` and `runArgs` that mount `source`.
fn mounts_with_source(loaded: &Loaded, source: &str) -> Vec<String> {
    let mut out = Vec::new();
    let workspace = loaded.workspace.mount.as_deref().and_then(|m| mounts::parse(m).ok());
    if workspace.and_then(|m| m.source).as_deref() == Some(source) {
        out.push("workspaceMount".to_string());
    }
    for (i, mount) in loaded.model.mounts.iter().enumerate() {
        if mounts::from_config(mount).ok().and_then(|m| m.source).as_deref() == Some(source) {
            out.push(format!("mounts[{i}]"));
        }
    }
    if run_args_mention(loaded, source) {
        out.push("runArgs".to_string());
    }
    out
}

/// `appPort` and `runArgs` that publish host port `port`.
fn ports_publishing(loaded: &Loaded, port: u16) -> Vec<String> {
    let mut out = Vec::new();
    let several = loaded.model.app_port.len() > 1;
    for (i, p) in loaded.model.app_port.iter().enumerate() {
        let host_port = match p {
            AppPort::Port(n) => Some(*n),
            // `[ip:]host:container[/proto]`: the host port is the middle.
            AppPort::Spec(s) => {
                let spec = s.split('/').next().unwrap_or_default();
                let parts: Vec<&str> = spec.split(':').collect();
                parts.len().checked_sub(2).and_then(|at| parts[at].parse().ok())
            }
        };
        if host_port == Some(port) {
            out.push(if several { format!("appPort[{i}]") } else { "appPort".to_string() });
        }
    }
    if run_args_mention(loaded, &port.to_string()) {
        out.push("runArgs".to_string());
    }
    out
}

/// `privileged`, `capAdd` and `runArgs` that ask for more than the default
/// privileges.
fn privileges(loaded: &Loaded) -> Vec<String> {
    let m = &loaded.model;
    let mut out = Vec::new();
    if m.privileged == Some(true) {
        out.push("privileged".to_string());
    }
    if !m.cap_add.is_empty() {
        out.push("capAdd".to_string());
    }
    let asks = |a: &String| a.starts_with("--privileged") || a.starts_with("--cap-add") || a.starts_with("--device");
    if m.run_args.iter().any(asks) {
        out.push("runArgs".to_string());
    }
    out
}

/// Whether an item of `runArgs` names `what` (a path, a volume, a port).
fn run_args_mention(loaded: &Loaded, what: &str) -> bool {
    loaded.model.run_args.iter().any(|a| a.split([',', '=', ':']).any(|part| part == what))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::loaded_for_test as loaded;

    fn blamed(config: &str, message: &str) -> Option<Vec<String>> {
        let (_d, l) = loaded(config);
        blame(&l, message).map(|b| b.properties)
    }

    #[test]
    fn a_missing_bind_source_names_the_mount_that_asked_for_it() {
        let message = "invalid mount config for type \"bind\": bind source path does not exist: /nope/x";
        let config = r#"{"image": "i", "mounts": ["type=volume,target=/v", "type=bind,source=/nope/x,target=/x"]}"#;
        assert_eq!(blamed(config, message), Some(vec!["mounts[1]".to_string()]));
        let config =
            r#"{"image": "i", "workspaceMount": "type=bind,source=/nope/x,target=/w", "workspaceFolder": "/w"}"#;
        assert_eq!(blamed(config, message), Some(vec!["workspaceMount".to_string()]));
        let config = r#"{"image": "i", "runArgs": ["-v", "/nope/x:/x"]}"#;
        assert_eq!(blamed(config, message), Some(vec!["runArgs".to_string()]));
    }

    #[test]
    fn a_bad_volume_name_names_the_mount_that_asked_for_it() {
        let message = "create bad/name: \"bad/name\" includes invalid characters for a local volume name, only \"[a-zA-Z0-9][a-zA-Z0-9_.-]\" are allowed";
        let config = r#"{"image": "i", "mounts": [{"type": "volume", "source": "bad/name", "target": "/x"}]}"#;
        assert_eq!(blamed(config, message), Some(vec!["mounts[0]".to_string()]));
    }

    #[test]
    fn a_taken_host_port_names_the_app_port_or_run_arg_that_publishes_it() {
        let taken = "driver failed programming external connectivity on endpoint r (abc): Error starting userland proxy: listen tcp4 127.0.0.1:47811: bind: address already in use";
        assert_eq!(blamed(r#"{"image": "i", "appPort": 47811}"#, taken), Some(vec!["appPort".to_string()]));
        assert_eq!(
            blamed(r#"{"image": "i", "appPort": [3000, "127.0.0.1:47811:80"]}"#, taken),
            Some(vec!["appPort[1]".to_string()])
        );
        let allocated = "driver failed programming external connectivity on endpoint r: Bind for 0.0.0.0:8080 failed: port is already allocated";
        assert_eq!(
            blamed(r#"{"image": "i", "runArgs": ["-p", "8080:80"]}"#, allocated),
            Some(vec!["runArgs".to_string()])
        );
    }

    #[test]
    fn a_privilege_the_engine_cannot_grant_names_every_property_that_asked_for_one() {
        let message = "failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: unable to apply caps: operation not permitted: unknown";
        assert_eq!(
            blamed(r#"{"image": "i", "runArgs": ["--privileged"]}"#, message),
            Some(vec!["runArgs".to_string()])
        );
        assert_eq!(
            blamed(r#"{"image": "i", "privileged": true, "capAdd": ["SYS_ADMIN"]}"#, message),
            Some(vec!["privileged".to_string(), "capAdd".to_string()])
        );
    }

    #[test]
    fn gpus_on_an_engine_without_a_gpu_runtime_name_run_args_and_the_missing_runtime() {
        let message = "could not select device driver \"\" with capabilities: [[gpu]]";
        let (_d, l) = loaded(r#"{"image": "i", "runArgs": ["--gpus", "all"]}"#);
        let b = blame(&l, message).unwrap();
        assert_eq!(b.properties, ["runArgs"]);
        assert!(b.hint.contains("no GPU runtime") && b.hint.contains("\"optional\""), "{}", b.hint);
        assert_eq!(blamed(r#"{"image": "i", "runArgs": ["--gpus=2"]}"#, message), Some(vec!["runArgs".to_string()]));
        assert_eq!(blamed(r#"{"image": "i"}"#, message), None);
    }

    #[test]
    fn podmans_refusal_for_want_of_catatonit_says_which_package_to_install() {
        // As Podman 4.3's API answered a create with `Init: true` on a host
        // whose /usr/libexec/podman held no catatonit.
        let seen = "container create: container-init binary not found on the host: stat \
                    /usr/libexec/podman/catatonit: no such file or directory";
        let later = "lookup init binary: exec: \"catatonit\": executable file not found in $PATH";
        for message in [seen, later] {
            let hint = host_lacks(message).unwrap_or_else(|| panic!("not read: {message}"));
            assert!(hint.contains("install the catatonit package"), "{hint}");
        }
        assert_eq!(host_lacks("no space left on device"), None);
        assert_eq!(host_lacks("bind source path does not exist: /x"), None);
    }

    #[test]
    fn a_refusal_that_no_property_asked_for_blames_none() {
        let message = "invalid mount config for type \"bind\": bind source path does not exist: /elsewhere";
        assert_eq!(blamed(r#"{"image": "i", "mounts": ["type=bind,source=/nope,target=/x"]}"#, message), None);
        assert_eq!(blamed(r#"{"image": "i"}"#, "no space left on device"), None);
    }
}
