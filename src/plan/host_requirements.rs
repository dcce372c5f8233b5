//! `hostRequirements` against what the engine's host has. A shortfall is a
//! warning, not a refusal: the reference CLI warns for a missing GPU and
//! checks nothing else (its cpus, memory and storage are for cloud hosts
//! that pick a machine by them); on a laptop the room may still be useful.

use crate::config::{Gpu, HostRequirements};

/// What the engine reported of its host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineHost {
    pub cpus: u64,
    /// Bytes.
    pub memory: u64,
    /// The size in bytes of the filesystem holding the engine's data, when
    /// it could be measured (a local engine).
    pub storage: Option<u64>,
    /// An nvidia runtime is installed: the reference's test for a GPU.
    pub gpu: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// One line each, for `warning: `.
    pub warnings: Vec<String>,
    /// Give the room every GPU (what the reference's `--gpus all` does).
    pub use_gpus: bool,
    /// GPUs are optional and the engine has none: leave out what `runArgs`
    /// `--gpus` asked, which the engine would refuse.
    pub drop_gpus: bool,
    /// One line each, for `note: `.
    pub notes: Vec<String>,
}

/// `run_args_gpus`: `runArgs` asks for GPUs (`--gpus`).
pub fn check(req: &HostRequirements, host: &EngineHost, run_args_gpus: bool) -> Verdict {
    let mut warnings = Vec::new();
    if let Some(cpus) = req.cpus.filter(|c| *c > host.cpus) {
        warnings.push(format!("`hostRequirements.cpus` asks for {cpus} CPUs; the engine's host has {}", host.cpus));
    }
    if let Some(memory) = req.memory.filter(|m| *m > host.memory) {
        warnings.push(format!(
            "`hostRequirements.memory` asks for {}; the engine's host has {}",
            bytes(memory),
            bytes(host.memory)
        ));
    }
    if let (Some(storage), Some(has)) = (req.storage, host.storage) {
        if storage > has {
            warnings.push(format!(
                "`hostRequirements.storage` asks for {}; the engine's disk holds {}",
                bytes(storage),
                bytes(has)
            ));
        }
    }
    if req.gpu == Gpu::Required && !host.gpu {
        warnings.push(
            "`hostRequirements.gpu`: the engine has no GPU support (no nvidia runtime); \
             mark it \"optional\" if the room can do without"
                .into(),
        );
    }
    let drop_gpus = req.gpu == Gpu::Optional && !host.gpu;
    let mut notes = Vec::new();
    if drop_gpus {
        notes.push(match run_args_gpus {
            true => "`hostRequirements.gpu` is \"optional\" and the engine has no GPU runtime: \
                     the room starts without GPUs (`runArgs` `--gpus` left out)"
                .into(),
            false => "`hostRequirements.gpu` is \"optional\" and the engine has no GPU runtime: \
                      the room starts without GPUs"
                .into(),
        });
    }
    Verdict { warnings, use_gpus: host.gpu && req.gpu != Gpu::No, drop_gpus, notes }
}

/// Bytes in the largest binary unit that keeps a whole number.
fn bytes(n: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift {
            return format!("{:.1} {unit}", n as f64 / (1u64 << shift) as f64).replace(".0 ", " ");
        }
    }
    format!("{n} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: EngineHost = EngineHost { cpus: 2, memory: 24 << 30, storage: Some(250 << 30), gpu: false };

    #[test]
    fn host_requirements_beyond_the_engines_host_are_each_a_warning() {
        let req =
            HostRequirements { cpus: Some(8), memory: Some(64 << 30), storage: Some(1 << 40), gpu: Gpu::Required };
        let v = check(&req, &HOST, false);
        assert_eq!(
            v.warnings,
            [
                "`hostRequirements.cpus` asks for 8 CPUs; the engine's host has 2",
                "`hostRequirements.memory` asks for 64 GiB; the engine's host has 24 GiB",
                "`hostRequirements.storage` asks for 1 TiB; the engine's disk holds 250 GiB",
                "`hostRequirements.gpu`: the engine has no GPU support (no nvidia runtime); mark it \"optional\" if the room can do without",
            ]
        );
        assert!(!v.use_gpus);
    }

    #[test]
    fn requirements_the_host_meets_say_nothing() {
        let req = HostRequirements { cpus: Some(2), memory: Some(4 << 30), storage: Some(32 << 30), gpu: Gpu::No };
        assert_eq!(check(&req, &HOST, false), Verdict::default());
    }

    #[test]
    fn storage_is_not_judged_when_the_engines_disk_cannot_be_measured() {
        let req = HostRequirements { storage: Some(1 << 50), ..Default::default() };
        assert_eq!(check(&req, &EngineHost { storage: None, ..HOST }, false).warnings, Vec::<String>::new());
    }

    #[test]
    fn a_gpu_is_given_to_the_room_when_the_engine_has_one_as_the_reference_does() {
        let gpu_host = EngineHost { gpu: true, ..HOST };
        for (gpu, used) in [(Gpu::Required, true), (Gpu::Optional, true), (Gpu::No, false)] {
            let v = check(&HostRequirements { gpu, ..Default::default() }, &gpu_host, false);
            assert_eq!((v.use_gpus, v.warnings.len()), (used, 0), "{gpu:?}");
        }
    }

    #[test]
    fn optional_gpus_on_an_engine_without_a_gpu_runtime_are_left_out_with_a_note_not_refused() {
        let req = HostRequirements { gpu: Gpu::Optional, ..Default::default() };
        let v = check(&req, &HOST, true);
        assert_eq!((v.use_gpus, v.drop_gpus, v.warnings.len()), (false, true, 0));
        assert_eq!(
            v.notes,
            ["`hostRequirements.gpu` is \"optional\" and the engine has no GPU runtime: \
              the room starts without GPUs (`runArgs` `--gpus` left out)"]
        );
        let with_gpu = check(&req, &EngineHost { gpu: true, ..HOST }, true);
        assert_eq!((with_gpu.drop_gpus, with_gpu.notes.len()), (false, 0));
    }

    #[test]
    fn sizes_are_shown_in_readable_units() {
        assert_eq!(bytes(1536 << 20), "1.5 GiB");
        assert_eq!(bytes(512), "512 bytes");
    }
}
