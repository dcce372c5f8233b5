//! `hostRequirements` at the making of a room: the engine's host measured
//! (its info, and the disk of its data folder when the engine is local),
//! the shortfalls said, and the GPUs given when the engine has them, left out when optional and it has
//! none.

use crate::config::{HostRequirements, Loaded};
use crate::engine::Engine;
use crate::notices::Notices;
use crate::plan::create::{self, CreatePlan};
use crate::plan::host_requirements::{self, EngineHost};

/// Warns of what the host lacks and adds the GPU request the reference
/// adds; never refuses (a warning is what the reference gives).
pub async fn apply(engine: &Engine, loaded: &Loaded, plan: &mut CreatePlan, say: &Notices) {
    let Some(req) = &loaded.model.host_requirements else { return };
    let config = loaded.config_path.display();
    let info = match engine.host_info().await {
        Ok(info) => info,
        Err(e) => return say.warn(format!("{config}: `hostRequirements` not checked: {:#}", anyhow::Error::new(e))),
    };
    let host = EngineHost {
        cpus: info.cpus,
        memory: info.memory,
        storage: disk_size(engine.host(), info.root_dir.as_deref()),
        gpu: info.nvidia,
    };
    settle(loaded, req, &host, plan, say);
}

/// The requirements against the host as measured: the shortfalls said,
/// the GPUs given or left out.
fn settle(loaded: &Loaded, req: &HostRequirements, host: &EngineHost, plan: &mut CreatePlan, say: &Notices) {
    let config = loaded.config_path.display();
    let run_args_gpus = loaded.model.run_args.iter().any(|a| a == "--gpus" || a.starts_with("--gpus="));
    let verdict = host_requirements::check(req, host, run_args_gpus);
    for w in &verdict.warnings {
        say.warn(format!("{config}: {w}"));
    }
    for n in &verdict.notes {
        say.note(format!("{config}: {n}"));
    }
    if verdict.use_gpus {
        create::request_all_gpus(plan);
    }
    if verdict.drop_gpus {
        create::drop_gpus(plan);
    }
}

/// The size of the filesystem holding a local engine's data folder; `None`
/// for a remote engine (its folder is not on this machine) or one we cannot
/// read (an engine in a VM behind a forwarded socket).
fn disk_size(host: &str, root_dir: Option<&str>) -> Option<u64> {
    if !host.starts_with("unix://") {
        return None;
    }
    let stat = nix::sys::statvfs::statvfs(root_dir?).ok()?;
    Some(stat.blocks() as u64 * stat.fragment_size() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::loaded_for_test as loaded;
    use crate::notices::{Level, Notice};
    use bollard::models::{ContainerCreateBody, DeviceRequest, HostConfig};

    fn plan_asking_gpus() -> CreatePlan {
        let gpus =
            DeviceRequest { count: Some(-1), capabilities: Some(vec![vec!["gpu".into()]]), ..Default::default() };
        CreatePlan {
            name: "wr-room".into(),
            image: "i".into(),
            remote_user: "root".into(),
            body: ContainerCreateBody {
                host_config: Some(HostConfig { device_requests: Some(vec![gpus]), ..Default::default() }),
                ..Default::default()
            },
            named_volumes: Vec::new(),
            warnings: Vec::new(),
            platform: None,
            git: None,
        }
    }

    #[test]
    fn a_host_short_of_memory_is_warned_of_and_optional_gpus_it_lacks_are_left_out_with_a_note_naming_the_file() {
        let (_dir, l) = loaded(
            r#"{ "image": "i", "runArgs": ["--gpus", "all"], "hostRequirements": { "memory": "8gb", "gpu": "optional" } }"#,
        );
        let req = l.model.host_requirements.clone().unwrap();
        let host = EngineHost { cpus: 4, memory: 2 << 30, storage: None, gpu: false };
        let mut plan = plan_asking_gpus();
        let said = Notices::kept();
        settle(&l, &req, &host, &mut plan, &said);
        let config = l.config_path.display();
        assert_eq!(
            said.take(),
            [
                Notice {
                    level: Level::Warning,
                    text: format!("{config}: `hostRequirements.memory` asks for 8 GiB; the engine's host has 2 GiB"),
                },
                Notice {
                    level: Level::Note,
                    text: format!(
                        "{config}: `hostRequirements.gpu` is \"optional\" and the engine has no GPU runtime: \
                         the room starts without GPUs (`runArgs` `--gpus` left out)"
                    ),
                },
            ]
        );
        let requests = plan.body.host_config.and_then(|h| h.device_requests).unwrap_or_default();
        assert!(requests.is_empty(), "{requests:?}");
    }

    #[test]
    fn a_host_that_meets_the_requirements_is_said_nothing_of() {
        let (_dir, l) = loaded(r#"{ "image": "i", "hostRequirements": { "cpus": 2, "memory": "1gb" } }"#);
        let req = l.model.host_requirements.clone().unwrap();
        let host = EngineHost { cpus: 8, memory: 16 << 30, storage: Some(1 << 40), gpu: false };
        let said = Notices::kept();
        settle(&l, &req, &host, &mut plan_asking_gpus(), &said);
        assert!(said.take().is_empty());
    }
}
