//! The create request of a room, decided from the loaded configuration and
//! the image, with no I/O (the host's files that `runArgs` names are read
//! through the [`run_args::Host`] the caller passes): every choice here is
//! a table test.
//!
//! The room's main process is always the daemon, as root, under Docker's init
//! with restart policy `unless-stopped`. The image's ENTRYPOINT/CMD run only
//! with `overrideCommand: false`, as the daemon's supervised child, as the
//! container user. `containerUser` therefore shapes the program and the
//! default remote user, not the daemon (which must be root to run hooks as
//! any user and to move the remote user's uid).

use super::labels::{self, Labels};
use super::metadata::{self, Merged, RoomMetadata};
use super::mounts::{self, MountSpec};
use super::run_args::{self, RunArgs};
use crate::config::{AppPort, Loaded};
use bollard::models::{
    ContainerCreateBody, HostConfig, Mount, MountBindOptions, MountTmpfsOptions, MountVolumeOptions, NetworkingConfig,
    PortBinding, RestartPolicy, RestartPolicyNameEnum,
};
use std::collections::HashMap;
use std::path::Path;
use workroomd::room;

/// What the plan needs to know of the image (from one inspect).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImageFacts {
    /// The image's `USER`, if any.
    pub user: Option<String>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// Its `devcontainer.metadata` label, as written.
    pub metadata: Option<String>,
    /// The image's `WORKDIR`, where its program starts.
    pub working_dir: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CreatePlan {
    pub name: String,
    pub image: String,
    pub remote_user: String,
    pub body: ContainerCreateBody,
    /// Named volumes the mounts refer to; the engine creates missing ones on
    /// create, so a refused `up` must remove those it did not find before.
    pub named_volumes: Vec<String>,
    /// What `up` says when it makes the room: metadata it could not use,
    /// and what metadata widens (privileges, capabilities).
    pub warnings: Vec<String>,
    /// `runArgs --platform`: a parameter of the create call.
    pub platform: Option<String>,
    /// A linked checkout's git folder, mounted (`plan::git`).
    pub git: Option<super::git::GitPlan>,
}

/// The folder of the daemon's binary, socket and state in every room.
const WORKROOM_DIR: &str = "/.workroom";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    // The problem is in the message and deliberately not a `source`: the
    // error chain printed on one line would say it twice.
    #[error("{config}: {problem}")]
    RunArgs { config: String, problem: run_args::RunArgsError },
    #[error("{config}: `{property}`: {problem}")]
    Mount { config: String, property: String, problem: mounts::MountError },
    /// The engine refused what these properties asked for (its message).
    #[error("{config}: {properties}: the engine refused it: {message}; {hint}")]
    Refused { config: String, properties: String, message: String, hint: &'static str },
    /// The engine refused the room for something its host lacks.
    #[error("{hint} (the engine said: {message})")]
    HostLacks { message: String, hint: &'static str },
}

impl PlanError {
    /// An engine refusal of the room's create or start, naming what the
    /// engine's host lacks, or else the properties behind it, when its
    /// message lets us tell.
    pub fn refused(loaded: &Loaded, message: &str) -> Option<PlanError> {
        if let Some(hint) = super::blame::host_lacks(message) {
            return Some(PlanError::HostLacks { message: message.to_string(), hint });
        }
        super::blame::blame(loaded, message).map(|b| PlanError::Refused {
            config: loaded.config_path.display().to_string(),
            properties: b.named(),
            message: message.to_string(),
            hint: b.hint,
        })
    }
}

/// The user hooks, panes and `exec` run as: the merged `remoteUser`, else
/// `containerUser`, else the image's `USER`, else root.
pub fn remote_user(merged: &Merged, image: &ImageFacts) -> String {
    merged
        .remote_user
        .clone()
        .or_else(|| merged.container_user.clone())
        .or_else(|| image.user.clone())
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "root".into())
}

/// What the configuration alone cannot make (a `runArgs` flag that has no
/// place in a room, a malformed mount): refused by `config` as by `up`,
/// which checks it before a build or pull leaves an image behind. The dry
/// plan it made, for what the caller checks against it (the caps).
pub fn check(loaded: &Loaded, host: &dyn run_args::Host) -> Result<CreatePlan, PlanError> {
    let metadata = metadata::for_new_room(loaded, "", None, &[]);
    let facts = ImageFacts::default();
    let inputs =
        Inputs { name: "", image: "", facts: &facts, metadata: &metadata, metadata_privileged: true, peer: None, host };
    plan_with_peers(loaded, &inputs)
}

/// The plan of a room apart from the peers, with the image's metadata
/// applied as the reference applies it (the table tests' shorthand).
#[cfg(test)]
pub fn plan(name: &str, image: &str, loaded: &Loaded, facts: &ImageFacts) -> Result<CreatePlan, PlanError> {
    let metadata = metadata::for_new_room(loaded, image, facts.metadata.as_deref(), &[]);
    let host = &run_args::ThisHost;
    plan_with_peers(
        loaded,
        &Inputs { name, image, facts, metadata: &metadata, metadata_privileged: true, peer: None, host },
    )
}

/// What a room's plan is made from, besides its configuration.
pub struct Inputs<'a> {
    /// The room's container name.
    pub name: &'a str,
    pub image: &'a str,
    pub facts: &'a ImageFacts,
    /// The image's metadata merged under devcontainer.json.
    pub metadata: &'a RoomMetadata,
    /// `privileged` asked by metadata holds (`[containers]
    /// metadata_privileged`, on unless turned off).
    pub metadata_privileged: bool,
    /// The peers it joins (`Some`) or none; whether it may join (the anchor
    /// and volume exist) is decided by the caller.
    pub peer: Option<&'a super::peers::PeerJoin>,
    /// The host's files and environment as `runArgs` reads them
    /// (`--env-file`, `--label-file`, `-e NAME`): the plan's one window on
    /// the host, a trait so the plan stays pure.
    pub host: &'a dyn run_args::Host,
}

#[cfg(test)]
impl<'a> Inputs<'a> {
    /// The table tests' inputs: privileged metadata applied, no peers, this
    /// host's files.
    pub fn of(name: &'a str, image: &'a str, facts: &'a ImageFacts, metadata: &'a RoomMetadata) -> Inputs<'a> {
        Inputs { name, image, facts, metadata, metadata_privileged: true, peer: None, host: &run_args::ThisHost }
    }
}

/// The plan of a room from its configuration and `inputs`.
pub fn plan_with_peers(loaded: &Loaded, inputs: &Inputs<'_>) -> Result<CreatePlan, PlanError> {
    let Inputs { name, image, facts, metadata, metadata_privileged, peer, host } = *inputs;
    let m = &loaded.model;
    let merged = &metadata.merged;
    let config = loaded.config_path.display().to_string();
    let run = run_args::parse(&m.run_args, &loaded.workspace.local_folder, host)
        .map_err(|problem| PlanError::RunArgs { config: config.clone(), problem })?;
    let remote_user = remote_user(merged, facts);
    let mut warnings = run.ignored.clone();
    if let Some(asked) = &run.name {
        warnings.push(format!(
            "runArgs: `--name {asked}` is ignored: the room keeps its name {name} (workroom names its rooms \
             and finds them by their labels); `workroom up --name NAME` names a room"
        ));
    }

    let mut specs: Vec<(String, MountSpec)> = Vec::new();
    if let Some(ws) = &loaded.workspace.mount {
        let spec = mounts::parse(ws).map_err(|problem| PlanError::Mount {
            config: config.clone(),
            property: "workspaceMount".into(),
            problem,
        })?;
        specs.push(("workspaceMount".into(), spec));
    }
    let git = match super::git::for_workspace(loaded) {
        Ok(git) => git,
        Err(skip) => {
            warnings.push(skip.to_string());
            None
        }
    };
    specs.extend(git.iter().flat_map(|g| g.mounts.iter().map(|m| ("git".to_string(), m.clone()))));
    // devcontainer.json's own mounts are refused by name when bad; one
    // that only metadata brings is a warning and left out (its image, not
    // the user's file, is at fault).
    for mount in &merged.mounts {
        match (m.mounts.iter().position(|own| own == mount), mounts::from_config(mount)) {
            (_, Ok(spec)) => specs.push(("mounts".into(), spec)),
            (Some(i), Err(problem)) => {
                return Err(PlanError::Mount { config: config.clone(), property: format!("mounts[{i}]"), problem })
            }
            (None, Err(problem)) => warnings.push(format!("image metadata: {problem}; not mounted")),
        }
    }
    specs.extend(run.mounts.iter().map(|s| ("runArgs".to_string(), s.clone())));
    if run.host.readonly_rootfs == Some(true) {
        // The daemon is uploaded into `/.workroom` before the first start
        // and keeps its socket and state there: with a read-only root that
        // must be a volume (the engine refuses an upload into a read-only
        // root, and a tmpfs is not there before the start). Anonymous: it
        // goes with the container.
        specs.push((
            "runArgs".into(),
            MountSpec { kind: "volume".into(), target: WORKROOM_DIR.into(), ..Default::default() },
        ));
    }
    if let Some(warning) = folder_outside_the_workspace(&loaded.workspace.folder, &specs) {
        warnings.push(warning);
    }
    let named_volumes =
        specs.iter().filter(|(_, s)| s.kind == "volume").filter_map(|(_, s)| s.source.clone()).collect();

    let mut entrypoint = vec![room::DAEMON_PATH.to_string(), "serve".to_string()];
    if let Some(common) = git.as_ref().and_then(|g| g.common_in_room.clone()) {
        entrypoint.extend([workroomd::room::GIT_COMMON_ARG.to_string(), common]);
    }
    for command in &merged.entrypoints {
        entrypoint.extend(["--entrypoint".to_string(), command.clone()]);
    }
    if merged.override_command == Some(false) {
        // `--entrypoint` replaces the image's ENTRYPOINT and drops its CMD,
        // as in `docker run`; an empty one leaves the CMD alone.
        let program: Vec<String> = match run.entrypoint.as_deref() {
            Some("") => facts.cmd.clone(),
            Some(entrypoint) => vec![entrypoint.to_string()],
            None => facts.entrypoint.iter().chain(&facts.cmd).cloned().collect(),
        };
        if !program.is_empty() {
            let user = run.user.clone().or_else(|| merged.container_user.clone()).or_else(|| facts.user.clone());
            if let Some(user) = user.filter(|u| !u.is_empty()) {
                entrypoint.extend(["--program-user".to_string(), user]);
            }
            // The container's own working folder stays `/` (the daemon's);
            // the program starts where Docker would start it.
            if let Some(dir) = facts.working_dir.clone().filter(|d| !d.is_empty()) {
                entrypoint.extend(["--program-cwd".to_string(), dir]);
            }
            entrypoint.push("--".into());
            entrypoint.extend(program);
        }
    }

    let mut env: Vec<String> = merged.container_env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    env.extend(run.env.iter().cloned());
    if let Some(j) = peer {
        // The user's own value wins, from any of the places they can set it.
        let user_sets = |key: &str| {
            merged.container_env.iter().any(|(k, _)| k == key)
                || merged.remote_env.iter().any(|(k, _)| k == key)
                || run.env.iter().any(|e| e.split_once('=').map_or(e.as_str(), |(k, _)| k) == key)
        };
        let (agent_env, said) = super::peers::agent_env(name, &j.home, user_sets);
        env.extend(agent_env);
        warnings.extend(said);
    }

    let (privileged, said) = metadata.privileged(name, metadata_privileged);
    warnings.extend(said);
    let widening = metadata.widening();
    if !widening.is_empty() {
        warnings.push(format!("image metadata widens {name}: {}", widening.join(", ")));
    }

    let mut labels: Labels = labels::for_room(loaded, metadata.label(&remote_user), &remote_user, &run.labels);
    labels.insert(super::peers::PEER_LABEL.into(), if peer.is_some() { "1" } else { "0" }.into());
    if let Some(summary) = git.as_ref().and_then(|g| serde_json::to_string(&g.summary).ok()) {
        labels.insert(labels::GIT.into(), summary);
    }
    let (exposed, bindings) = ports(&m.app_port, &run);

    let mut host = HostConfig {
        // The daemon is the main process and reaps nothing itself.
        init: Some(true),
        // `unless-stopped` unless `runArgs --restart` says otherwise.
        restart_policy: run
            .host
            .restart_policy
            .clone()
            .or(Some(RestartPolicy { name: Some(RestartPolicyNameEnum::UNLESS_STOPPED), maximum_retry_count: None })),
        mounts: Some(specs.iter().map(|(_, s)| to_engine_mount(s)).collect()),
        binds: (!run.binds.is_empty()).then(|| run.binds.clone()),
        privileged: Some(privileged || run.privileged),
        cap_add: non_empty(merged.cap_add.iter().chain(&run.cap_add).cloned().collect()),
        cap_drop: non_empty(run.cap_drop.clone()),
        security_opt: non_empty(merged.security_opt.iter().chain(&run.security_opt).cloned().collect()),
        port_bindings: (!bindings.is_empty()).then_some(bindings),
        network_mode: run.network.clone(),
        ..run.host.clone()
    };
    if let Some(j) = peer {
        super::peers::join(&mut host, j);
    }
    // `--ip`, `--network-alias`, …: the endpoint on the network the room
    // joins, as the docker CLI keys it ("default" without `--network`).
    let networking_config = run.endpoint.clone().map(|endpoint| NetworkingConfig {
        endpoints_config: Some(HashMap::from([(run.network.clone().unwrap_or_else(|| "default".into()), endpoint)])),
    });
    let body = ContainerCreateBody {
        image: Some(image.to_string()),
        // Numeric: an image's passwd may lack a `root` entry.
        user: Some("0".into()),
        entrypoint: Some(entrypoint),
        cmd: Some(Vec::new()),
        env: non_empty(env),
        labels: Some(labels.into_iter().collect()),
        exposed_ports: non_empty(run.body.exposed_ports.iter().flatten().cloned().chain(exposed).collect()),
        working_dir: run.body.working_dir.clone().or(Some("/".into())),
        host_config: Some(host),
        networking_config,
        ..run.body.clone()
    };
    Ok(CreatePlan {
        name: name.to_string(),
        image: image.to_string(),
        remote_user,
        body,
        named_volumes,
        warnings,
        platform: run.platform.clone(),
        git,
    })
}

/// `workspaceFolder` outside the workspace mount (and every other mount):
/// `exec` and the hooks run there, and it exists only if the image has it,
/// which otherwise fails every `exec` at its start. Said at `up`, naming
/// both paths; a room without a workspace mount works in the image's own
/// folders, so nothing is said.
fn folder_outside_the_workspace(folder: &str, specs: &[(String, MountSpec)]) -> Option<String> {
    let (_, workspace) = specs.iter().find(|(property, _)| property == "workspaceMount")?;
    let inside = |target: &str| Path::new(folder).starts_with(target);
    if specs.iter().any(|(_, s)| inside(&s.target)) {
        return None;
    }
    Some(format!(
        "`workspaceFolder` {folder} is not inside the workspace mount at {}: commands run in {folder}, \
         which is there only if the image has it; set `workspaceFolder` under {} or `workspaceMount`'s target to it",
        workspace.target, workspace.target
    ))
}

impl CreatePlan {
    /// Where the daemon's upload is unpacked before the first start: `/`,
    /// or on a read-only root the daemon's own folder, a volume (the engine
    /// takes an upload into a read-only container only inside a volume).
    pub fn upload_folder(&self) -> &'static str {
        let read_only = self.body.host_config.as_ref().and_then(|h| h.readonly_rootfs) == Some(true);
        if read_only {
            WORKROOM_DIR
        } else {
            "/"
        }
    }
}

/// The daemon from the engine's daemon volume (ADR 0002), mounted read-only
/// at [`room::DIST_DIR`] and started from there, rather than uploaded
/// before the first start (which costs a new room ~65 ms: the engine mounts
/// the container's filesystem and unpacks in a chroot, whatever the size).
/// The volume is the engine's, shared by every room of its daemon: not one
/// of [`CreatePlan::named_volumes`], which a refused `up` removes.
pub fn daemon_from_volume(plan: &mut CreatePlan, volume: &str) {
    if let Some(first) = plan.body.entrypoint.as_mut().and_then(|e| e.first_mut()) {
        if first == room::DAEMON_PATH {
            *first = room::DIST_PATH.to_string();
        }
    }
    let host = plan.body.host_config.get_or_insert_with(Default::default);
    host.mounts.get_or_insert_with(Vec::new).push(bollard::models::Mount {
        target: Some(room::DIST_DIR.into()),
        source: Some(volume.into()),
        typ: Some(bollard::models::MountType::VOLUME),
        read_only: Some(true),
        ..Default::default()
    });
}

/// Every GPU of the engine, as `--gpus all` asks (unless `runArgs` already
/// asked for some).
pub fn request_all_gpus(plan: &mut CreatePlan) {
    let host = plan.body.host_config.get_or_insert_with(Default::default);
    let requests = host.device_requests.get_or_insert_with(Vec::new);
    if requests.is_empty() {
        requests.push(bollard::models::DeviceRequest {
            count: Some(-1),
            capabilities: Some(vec![vec!["gpu".into()]]),
            ..Default::default()
        });
    }
}

/// Leaves out the GPU requests (`runArgs` `--gpus`), which an engine with
/// no GPU runtime refuses, when `hostRequirements.gpu` is optional.
pub fn drop_gpus(plan: &mut CreatePlan) {
    let is_gpu =
        |r: &bollard::models::DeviceRequest| r.capabilities.iter().flatten().any(|set| set.iter().any(|c| c == "gpu"));
    if let Some(requests) = plan.body.host_config.as_mut().and_then(|h| h.device_requests.as_mut()) {
        requests.retain(|r| !is_gpu(r));
    }
}

fn non_empty<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

/// `appPort` numbers publish on loopback only, as the reference does; string
/// specs and `runArgs -p` are the user's own `-p` syntax.
fn ports(app_ports: &[AppPort], run: &RunArgs) -> (Vec<String>, HashMap<String, Option<Vec<PortBinding>>>) {
    let mut exposed = Vec::new();
    let mut bindings: HashMap<String, Option<Vec<PortBinding>>> = HashMap::new();
    let specs = app_ports
        .iter()
        .map(|p| match p {
            AppPort::Port(n) => format!("127.0.0.1:{n}:{n}"),
            AppPort::Spec(s) => s.clone(),
        })
        .chain(run.publish.iter().cloned());
    for spec in specs {
        let (spec, proto) = spec.split_once('/').map_or((spec.as_str(), "tcp"), |(s, p)| (s, p));
        let parts: Vec<&str> = spec.split(':').collect();
        let (ip, host_port, container_port) = match parts.as_slice() {
            [c] => (None, None, *c),
            [h, c] => (None, Some(*h), *c),
            [ip, h, c] => (Some(*ip), Some(*h).filter(|h| !h.is_empty()), *c),
            _ => continue,
        };
        let key = format!("{container_port}/{proto}");
        exposed.push(key.clone());
        let binding = PortBinding { host_ip: ip.map(str::to_string), host_port: host_port.map(str::to_string) };
        bindings.entry(key).or_insert_with(|| Some(Vec::new())).get_or_insert_with(Vec::new).push(binding);
    }
    (exposed, bindings)
}

fn to_engine_mount(s: &MountSpec) -> Mount {
    Mount {
        target: Some(s.target.clone()),
        source: s.source.clone(),
        typ: word(&s.kind),
        read_only: s.read_only.then_some(true),
        consistency: s.consistency.clone(),
        bind_options: s
            .bind_propagation
            .as_deref()
            .map(|p| MountBindOptions { propagation: word(p), ..Default::default() }),
        volume_options: s.volume_nocopy.then(|| MountVolumeOptions { no_copy: Some(true), ..Default::default() }),
        tmpfs_options: (s.tmpfs_size.is_some() || s.tmpfs_mode.is_some()).then(|| MountTmpfsOptions {
            size_bytes: s.tmpfs_size,
            mode: s.tmpfs_mode,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The engine's enums deserialise from the same words the --mount syntax uses.
fn word<T: serde::de::DeserializeOwned>(w: &str) -> Option<T> {
    serde_json::from_value(serde_json::Value::String(w.to_string())).ok()
}
