//! `hostRequirements` at the making of a room: the engine's host measured
//! (its info, and the disk of its data folder when the engine is local),
//! the shortfalls said, and the GPUs given when the engine has them, left out when optional and it has
//! none.

use crate::config::Loaded;
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
    let run_args_gpus = loaded.model.run_args.iter().any(|a| a == "--gpus" || a.starts_with("--gpus="));
    let verdict = host_requirements::check(req, &host, run_args_gpus);
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
