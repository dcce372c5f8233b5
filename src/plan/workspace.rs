//! Where a new room's workspace comes from: bound from this host's folder
//! (what `workspaceMount` says), or, when the engine cannot see that folder
//! (an engine on another machine), uploaded into a named volume mounted at
//! the same place (ADR 0012). Pure: the probe's answer and the setting come
//! in, the decision and the changed create request go out.

use super::create::CreatePlan;
use super::mounts::MountSpec;
use crate::settings::WorkspaceMode;
use bollard::models::{Mount, MountType};

/// The workspace volume of room `workroom-x-1234` is `workroom-ws-x-1234`.
pub const VOLUME_PREFIX: &str = "workroom-ws-";

/// On the room: `bind` or `volume`, how it got its workspace.
pub const MODE_LABEL: &str = "workroom.workspace";
/// On the room in volume mode: the volume's name.
pub const VOLUME_LABEL: &str = "workroom.workspace_volume";
/// On the room: why ([`Reason::as_str`]).
pub const REASON_LABEL: &str = "workroom.workspace_reason";
/// On the volume: the room it was made for.
pub const ROOM_LABEL: &str = "workroom.workspace_of";

/// The workspace volume of room `room`.
pub fn volume_name(room: &str) -> String {
    format!("{VOLUME_PREFIX}{}", room.strip_prefix(super::identity::NAME_PREFIX).unwrap_or(room))
}

/// Why the workspace is where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// `workspace = "bind"|"volume"` or `--workspace`.
    Setting,
    /// The probe bound the folder on the engine and found its files.
    EngineSees,
    /// The probe could not bind it, or found other files there.
    EngineCannotSee,
    /// `workspaceMount` binds no host folder (a volume, or none): nothing
    /// to upload, nothing to ask.
    NotABind,
    /// The room exists; its label says how it was made.
    Made,
}

impl Reason {
    const ALL: [Reason; 5] =
        [Reason::Setting, Reason::EngineSees, Reason::EngineCannotSee, Reason::NotABind, Reason::Made];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Setting => "setting",
            Reason::EngineSees => "engine sees the folder",
            Reason::EngineCannotSee => "engine cannot see the folder",
            Reason::NotABind => "workspaceMount binds no host folder",
            Reason::Made => "as the room was made",
        }
    }
}

/// How the room gets (or got) its workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// `Some(volume)`: uploaded into that volume; `None`: as `workspaceMount` says.
    pub volume: Option<String>,
    pub reason: Reason,
}

impl Decision {
    pub fn in_volume(&self) -> bool {
        self.volume.is_some()
    }

    /// What `up --json` shows as `workspace`, and `config --json` as
    /// `workroom.workspace`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "mode": if self.in_volume() { "volume" } else { "bind" },
            "volume": self.volume,
            "reason": self.reason.as_str(),
        })
    }

    /// From a room's labels.
    pub fn of_labels(labels: Option<&std::collections::HashMap<String, String>>) -> Decision {
        let get = |k: &str| labels.and_then(|l| l.get(k)).cloned();
        let volume = (get(MODE_LABEL).as_deref() == Some("volume")).then(|| get(VOLUME_LABEL)).flatten();
        let why = get(REASON_LABEL);
        let reason = Reason::ALL.into_iter().find(|r| Some(r.as_str()) == why.as_deref()).unwrap_or(Reason::Made);
        Decision { volume, reason }
    }
}

/// Whether `decide` needs the probe's answer: only `auto` with a bind.
pub fn needs_probe(mode: WorkspaceMode, workspace_mount: Option<&MountSpec>) -> bool {
    mode == WorkspaceMode::Auto && workspace_mount.is_some_and(|m| m.kind == "bind")
}

/// The decision for room `room`; `engine_sees` is the probe's answer, asked
/// only when [`needs_probe`] says so.
pub fn decide(
    room: &str,
    mode: WorkspaceMode,
    workspace_mount: Option<&MountSpec>,
    engine_sees: Option<bool>,
) -> Decision {
    let bind = workspace_mount.is_some_and(|m| m.kind == "bind");
    let volume = Some(volume_name(room));
    match (mode, bind, engine_sees) {
        (_, false, _) => Decision { volume: None, reason: Reason::NotABind },
        (WorkspaceMode::Volume, true, _) => Decision { volume, reason: Reason::Setting },
        (WorkspaceMode::Bind, true, _) => Decision { volume: None, reason: Reason::Setting },
        (WorkspaceMode::Auto, true, Some(false)) => Decision { volume, reason: Reason::EngineCannotSee },
        // No answer is taken as the bind the config asks for: the engine's
        // own refusal then says what is wrong.
        (WorkspaceMode::Auto, true, _) => Decision { volume: None, reason: Reason::EngineSees },
    }
}

/// The create request with the workspace bind at `target` replaced by the
/// volume, and the peer registry's bind (`registry`: its host folder and
/// the volume that stands in for it on the engine) by a volume too. Returns
/// a warning for each other bind of a host path, which names a folder of
/// the engine's host, not of this one (`/var/run/docker.sock` is meant so;
/// `${localEnv:HOME}` is not).
pub fn into_volume(plan: &mut CreatePlan, target: &str, volume: &str, registry: Option<(&str, &str)>) -> Vec<String> {
    let mut warnings = Vec::new();
    let mut volumes = vec![volume.to_string()];
    let host = plan.body.host_config.get_or_insert_with(Default::default);
    for m in host.mounts.iter_mut().flatten() {
        if m.typ != Some(MountType::BIND) {
            continue;
        }
        if m.target.as_deref() == Some(target) {
            *m = Mount {
                target: Some(target.to_string()),
                source: Some(volume.to_string()),
                typ: Some(MountType::VOLUME),
                ..Default::default()
            };
        } else if let Some((_, stand_in)) = registry.filter(|(folder, _)| m.source.as_deref() == Some(*folder)) {
            m.typ = Some(MountType::VOLUME);
            m.source = Some(stand_in.to_string());
            m.bind_options = None;
            volumes.push(stand_in.to_string());
        } else {
            warnings.push(format!(
                "the mount of {} at {} binds that path on the engine's host, not on this one",
                m.source.as_deref().unwrap_or_default(),
                m.target.as_deref().unwrap_or_default()
            ));
        }
    }
    for bind in host.binds.iter().flatten() {
        warnings.push(format!("`-v {bind}` binds a path on the engine's host, not on this one"));
    }
    for v in volumes {
        if !plan.named_volumes.contains(&v) {
            plan.named_volumes.push(v);
        }
    }
    warnings
}

/// The room's labels for `decision`, so every later command reads it from
/// the one inspect it makes anyway.
pub fn label(plan: &mut CreatePlan, decision: &Decision) {
    let labels = plan.body.labels.get_or_insert_with(Default::default);
    labels.insert(MODE_LABEL.into(), if decision.in_volume() { "volume" } else { "bind" }.into());
    labels.insert(REASON_LABEL.into(), decision.reason.as_str().into());
    if let Some(v) = &decision.volume {
        labels.insert(VOLUME_LABEL.into(), v.clone());
    }
}

/// An engine that cannot see this host's folders (the workspace goes into a
/// volume) cannot bind the git folder either: its mounts, the daemon's
/// `--git-common` and the label come out again, and the returned line says
/// what git in the room then lacks.
pub fn leave_out_git(plan: &mut CreatePlan) -> Option<String> {
    let git = plan.git.take()?;
    let targets: Vec<&str> = git.mounts.iter().map(|m| m.target.as_str()).collect();
    if let Some(host) = plan.body.host_config.as_mut() {
        if let Some(mounts) = host.mounts.as_mut() {
            mounts.retain(|m| !targets.contains(&m.target.as_deref().unwrap_or_default()));
        }
    }
    if let Some(entrypoint) = plan.body.entrypoint.as_mut() {
        if let Some(i) = entrypoint.iter().position(|a| a == workroomd::room::GIT_COMMON_ARG) {
            entrypoint.drain(i..(i + 2).min(entrypoint.len()));
        }
    }
    if let Some(labels) = plan.body.labels.as_mut() {
        labels.remove(super::labels::GIT);
    }
    Some(format!(
        "the workspace is a git {} whose git folder {} is on this host, not the engine's; git in the room will not find it",
        git.summary.kind, git.summary.host_folder
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::mounts;
    use bollard::models::{ContainerCreateBody, HostConfig};

    fn bind() -> MountSpec {
        mounts::parse("type=bind,source=/tmp/w,target=/workspaces/w").unwrap()
    }

    #[test]
    fn the_workspace_goes_into_a_volume_when_forced_or_when_the_engine_cannot_see_the_folder() {
        use WorkspaceMode::*;
        let vol = || Some("workroom-ws-w-1".to_string());
        let named = mounts::parse("type=volume,source=v,target=/workspaces/w").unwrap();
        // (mode, workspaceMount, probe, volume, reason)
        type Row = (WorkspaceMode, Option<MountSpec>, Option<bool>, Option<String>, Reason);
        let table: [Row; 8] = [
            (Auto, Some(bind()), Some(true), None, Reason::EngineSees),
            (Auto, Some(bind()), Some(false), vol(), Reason::EngineCannotSee),
            (Auto, Some(bind()), None, None, Reason::EngineSees),
            (Volume, Some(bind()), Some(true), vol(), Reason::Setting),
            (Bind, Some(bind()), Some(false), None, Reason::Setting),
            (Volume, Some(named.clone()), None, None, Reason::NotABind),
            (Auto, Some(named), None, None, Reason::NotABind),
            (Volume, None, None, None, Reason::NotABind),
        ];
        for (mode, mount, sees, volume, reason) in table {
            let d = decide("workroom-w-1", mode, mount.as_ref(), sees);
            assert_eq!(d, Decision { volume, reason }, "{mode:?} {mount:?} {sees:?}");
        }
    }

    #[test]
    fn only_auto_with_a_bind_asks_the_engine() {
        assert!(needs_probe(WorkspaceMode::Auto, Some(&bind())));
        assert!(!needs_probe(WorkspaceMode::Volume, Some(&bind())));
        assert!(!needs_probe(WorkspaceMode::Bind, Some(&bind())));
        assert!(!needs_probe(WorkspaceMode::Auto, None));
    }

    #[test]
    fn the_volume_replaces_the_workspace_bind_at_its_target_and_other_binds_are_said() {
        let m = |spec: &str| {
            let s = mounts::parse(spec).unwrap();
            Mount {
                target: Some(s.target),
                source: s.source,
                typ: serde_json::from_value(serde_json::json!(s.kind)).ok(),
                ..Default::default()
            }
        };
        let mut plan = CreatePlan {
            name: "workroom-w-1".into(),
            image: "i".into(),
            remote_user: "root".into(),
            body: ContainerCreateBody {
                host_config: Some(HostConfig {
                    mounts: Some(vec![
                        m("type=bind,source=/tmp/w,target=/workspaces/w"),
                        m("type=bind,source=/var/run/docker.sock,target=/var/run/docker.sock"),
                        m("type=volume,source=cache,target=/cache"),
                        m("type=bind,source=/home/me/.local/share/workroom/peers/default/0,target=/root/.claude"),
                    ]),
                    binds: Some(vec!["/home/me/.ssh:/root/.ssh".into()]),
                    ..Default::default()
                }),
                ..Default::default()
            },
            named_volumes: vec!["cache".into()],
            warnings: vec![],
            platform: None,
            git: None,
        };
        let registry = Some(("/home/me/.local/share/workroom/peers/default/0", "workroom-peers-default-0-registry"));
        let warnings = into_volume(&mut plan, "/workspaces/w", "workroom-ws-w-1", registry);
        let mounts = plan.body.host_config.as_ref().unwrap().mounts.clone().unwrap();
        assert_eq!(mounts[0].typ, Some(MountType::VOLUME));
        assert_eq!(mounts[0].source.as_deref(), Some("workroom-ws-w-1"));
        assert_eq!(mounts[0].target.as_deref(), Some("/workspaces/w"));
        assert_eq!(mounts[1].typ, Some(MountType::BIND), "other binds stay");
        assert_eq!(mounts[3].typ, Some(MountType::VOLUME), "the peer registry is on the engine");
        assert_eq!(mounts[3].source.as_deref(), Some("workroom-peers-default-0-registry"));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("/var/run/docker.sock at /var/run/docker.sock"), "{warnings:?}");
        assert!(warnings[1].contains("/home/me/.ssh:/root/.ssh"), "{warnings:?}");
        assert_eq!(
            plan.named_volumes,
            ["cache", "workroom-ws-w-1", "workroom-peers-default-0-registry"],
            "a refused up removes them"
        );
        let decision = Decision { volume: Some("workroom-ws-w-1".into()), reason: Reason::EngineCannotSee };
        label(&mut plan, &decision);
        assert_eq!(Decision::of_labels(plan.body.labels.as_ref()), decision, "the labels say it back");
    }

    #[test]
    fn the_volume_is_named_after_the_room_without_the_prefix_twice() {
        assert_eq!(volume_name("workroom-app-1a2b3c4d"), "workroom-ws-app-1a2b3c4d");
        assert_eq!(volume_name("other"), "workroom-ws-other");
    }
}
