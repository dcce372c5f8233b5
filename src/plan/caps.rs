//! Resource caps: how much of the engine's host a room may take (CPUs,
//! memory and swap, processes, the size of `/tmp`), decided without I/O
//! from workroom's settings (`[caps]` in `.workroom.toml` or the user's
//! config.toml, `customizations.workroom.caps`, `up --cpus …`) and the
//! `runArgs` forms `--cpus`, `--memory`, `--memory-swap`, `--pids-limit`
//! and `--tmpfs /tmp`.
//!
//! A cap is a ceiling: when the settings and `runArgs` both give one, the
//! lower holds and a warning names both, so neither a project's `runArgs`
//! nor a person's settings can lift the other's. (Among the settings, key
//! by key as for every setting: the flag, `.workroom.toml`,
//! `customizations.workroom`, the user's file.)
//!
//! A memory cap is the room's whole memory: swap is capped at the same
//! figure (`memory_swap` counts memory and swap together, as `docker run
//! --memory-swap` does, and is `memory` unless given), where `docker run`
//! would give as much swap again, so a capped room does not go on in swap.
//! A room with a memory cap also starts its processes
//! [`OOM_SCORE_GAP`](workroomd::room::OOM_SCORE_GAP) above the score its
//! daemon lowers itself to (ADR 0014), so the kernel's OOM killer takes
//! them and not the daemon.

use super::create::CreatePlan;
use bollard::models::HostConfig;
use serde::de::Error as _;
use serde::Deserialize;

/// The label holding a room's caps as made ([`Caps::json`]), for `list`,
/// which reads labels only.
pub const CAPS_LABEL: &str = "workroom.caps";

/// The smallest memory cap: the daemon takes up to 16 MiB with busy panes
/// (the performance budget), a shell and a hook need some too, and the
/// OOM order needs half the cap to outweigh the daemon (ADR 0014).
pub const MIN_MEMORY: i64 = 64 << 20;

/// The fewest processes a room may be capped at: the daemon, its init, a
/// relay per link, a shell per pane and what a hook runs, with room to
/// spare (threads count as processes here).
pub const MIN_PIDS: i64 = 32;

/// The most CPUs a cap may name; beyond any machine, so a larger figure is
/// a typo.
const MAX_CPUS: f64 = 4096.0;

/// What `/tmp` is mounted with when the settings size it: executable,
/// since compilers and test runners run what they build there (Docker's
/// own default for a tmpfs is `noexec`).
const TMP_OPTIONS: &str = "rw,exec,nosuid,nodev,mode=1777";

/// Where `tmp` puts the tmpfs.
pub const TMP: &str = "/tmp";

/// One room's caps, as made or as wanted; `None`: not capped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caps {
    /// CPUs in billionths, as the engine counts them (`NanoCpus`).
    pub nano_cpus: Option<i64>,
    /// Bytes.
    pub memory: Option<i64>,
    /// Memory and swap together, in bytes; `-1`: swap without a cap.
    pub memory_swap: Option<i64>,
    pub pids: Option<i64>,
    /// The size of `/tmp` as a tmpfs, in bytes.
    pub tmp: Option<i64>,
}

/// Where a setting came from, to name it in a warning or an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `workroom up --memory …`.
    Flag,
    /// `[caps]` in `.workroom.toml`.
    Project,
    /// `customizations.workroom.caps` in devcontainer.json.
    Customizations,
    /// `[caps]` in the user's config.toml.
    User,
}

impl Source {
    /// The key and its value as said where they came from.
    fn said(self, key: &str, value: &str) -> String {
        match self {
            Source::Flag => format!("`workroom up --{} {value}`", key.replace('_', "-")),
            Source::Project => format!("[caps] {key} = {value} in .workroom.toml"),
            Source::Customizations => format!("customizations.workroom.caps.{key} = {value} in devcontainer.json"),
            Source::User => format!("[caps] {key} = {value} in the user's config.toml"),
        }
    }
}

/// What the settings ask, each cap with where it was said.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Asked {
    pub nano_cpus: Option<(i64, Source)>,
    pub memory: Option<(i64, Source)>,
    pub memory_swap: Option<(i64, Source)>,
    pub pids: Option<(i64, Source)>,
    pub tmp: Option<(i64, Source)>,
}

/// The `[caps]` table (and `customizations.workroom.caps`, and the
/// flags) as written: every key optional, unknown keys refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapsFile {
    #[serde(default, deserialize_with = "de_cpus")]
    pub cpus: Option<i64>,
    #[serde(default, deserialize_with = "de_memory")]
    pub memory: Option<i64>,
    #[serde(default, deserialize_with = "de_memory_swap")]
    pub memory_swap: Option<i64>,
    #[serde(default, deserialize_with = "de_pids")]
    pub pids: Option<i64>,
    #[serde(default, deserialize_with = "de_tmp")]
    pub tmp: Option<i64>,
}

impl CapsFile {
    /// Key by key: `self` where it says something, else `under`.
    pub fn over(self, under: CapsFile) -> CapsFile {
        CapsFile {
            cpus: self.cpus.or(under.cpus),
            memory: self.memory.or(under.memory),
            memory_swap: self.memory_swap.or(under.memory_swap),
            pids: self.pids.or(under.pids),
            tmp: self.tmp.or(under.tmp),
        }
    }
}

/// The caps the settings ask: each key from the first of `files` (most
/// important first) that gives it.
pub fn asked(files: &[(&CapsFile, Source)]) -> Asked {
    let first = |pick: fn(&CapsFile) -> Option<i64>| files.iter().find_map(|(f, s)| pick(f).map(|v| (v, *s)));
    Asked {
        nano_cpus: first(|f| f.cpus),
        memory: first(|f| f.memory),
        memory_swap: first(|f| f.memory_swap),
        pids: first(|f| f.pids),
        tmp: first(|f| f.tmp),
    }
}

/// A value as a caps key takes it: TOML and JSON numbers, or text.
#[derive(Deserialize)]
#[serde(untagged)]
enum Raw {
    Int(i64),
    Float(f64),
    Text(String),
}

impl Raw {
    fn shown(&self) -> String {
        match self {
            Raw::Int(n) => n.to_string(),
            Raw::Float(f) => f.to_string(),
            Raw::Text(t) => format!("{t:?}"),
        }
    }
}

fn raw<'de, D: serde::Deserializer<'de>>(d: D, key: &str, want: &str) -> Result<Raw, D::Error> {
    Raw::deserialize(d).map_err(|_| D::Error::custom(format!("caps.{key} must be {want}")))
}

/// A figure of CPUs such as `2` or `1.5`, in billionths.
pub fn parse_cpus(text: &str) -> Result<i64, CapsError> {
    let cpus: f64 = text.trim().parse().map_err(|_| CapsError::NotCpus { text: text.to_string() })?;
    cpus_of(cpus)
}

fn cpus_of(cpus: f64) -> Result<i64, CapsError> {
    if !cpus.is_finite() || cpus <= 0.0 || cpus > MAX_CPUS {
        return Err(CapsError::CpusOutOfRange { cpus });
    }
    let nano = (cpus * 1e9).round() as i64;
    // The engine refuses less than a hundredth of a CPU.
    if nano < 10_000_000 {
        return Err(CapsError::CpusTooFew { cpus });
    }
    Ok(nano)
}

/// A size such as `512m`, `4g` or a number of bytes.
pub fn parse_size(text: &str) -> Result<i64, CapsError> {
    super::mounts::parse_size(text).filter(|b| *b > 0).ok_or_else(|| CapsError::NotSize { text: text.to_string() })
}

/// A memory cap: a size of at least [`MIN_MEMORY`].
pub fn parse_memory(text: &str) -> Result<i64, CapsError> {
    let bytes = parse_size(text)?;
    at_least_min_memory(bytes)
}

fn at_least_min_memory(bytes: i64) -> Result<i64, CapsError> {
    if bytes < MIN_MEMORY {
        return Err(CapsError::MemoryBelowLeast { bytes });
    }
    Ok(bytes)
}

/// Memory and swap together: a size, or `-1` for swap without a cap.
pub fn parse_memory_swap(text: &str) -> Result<i64, CapsError> {
    if text.trim() == "-1" {
        return Ok(-1);
    }
    parse_size(text).map_err(|_| CapsError::NotSwap { text: text.to_string() })
}

/// A process cap: at least [`MIN_PIDS`].
pub fn parse_pids(text: &str) -> Result<i64, CapsError> {
    let n: i64 = text.trim().parse().map_err(|_| CapsError::NotPids { text: text.to_string() })?;
    pids_of(n)
}

fn pids_of(n: i64) -> Result<i64, CapsError> {
    if n < MIN_PIDS {
        return Err(CapsError::PidsBelowLeast { pids: n });
    }
    Ok(n)
}

fn de_cpus<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    let nano = match raw(d, "cpus", "a number of CPUs such as 2 or 1.5")? {
        Raw::Int(n) => cpus_of(n as f64),
        Raw::Float(f) => cpus_of(f),
        Raw::Text(t) => parse_cpus(&t),
    };
    nano.map(Some).map_err(|e| D::Error::custom(format!("caps.cpus: {e}")))
}

fn size_key<'de, D: serde::Deserializer<'de>>(
    d: D,
    key: &str,
    then: fn(i64) -> Result<i64, CapsError>,
    text: fn(&str) -> Result<i64, CapsError>,
) -> Result<Option<i64>, D::Error> {
    let value = raw(d, key, "a size such as 512m or 4g")?;
    let bytes = match &value {
        Raw::Int(n) if *n > 0 => then(*n),
        Raw::Text(t) => text(t),
        other => Err(CapsError::FigureNotSize { figure: other.shown() }),
    };
    bytes.map(Some).map_err(|e| D::Error::custom(format!("caps.{key}: {e}")))
}

fn de_memory<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    size_key(d, "memory", at_least_min_memory, parse_memory)
}

fn de_memory_swap<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    let value = raw(d, "memory_swap", "a size such as 512m or 4g, or -1")?;
    let bytes = match &value {
        Raw::Int(-1) => Ok(-1),
        Raw::Int(n) if *n > 0 => Ok(*n),
        Raw::Text(t) => parse_memory_swap(t),
        other => Err(CapsError::FigureNotSwap { figure: other.shown() }),
    };
    bytes.map(Some).map_err(|e| D::Error::custom(format!("caps.memory_swap: {e}")))
}

fn de_pids<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    let n = match raw(d, "pids", "a whole number of processes")? {
        Raw::Int(n) => pids_of(n),
        Raw::Text(t) => parse_pids(&t),
        other => Err(CapsError::FigureNotPids { figure: other.shown() }),
    };
    n.map(Some).map_err(|e| D::Error::custom(format!("caps.pids: {e}")))
}

fn de_tmp<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    size_key(d, "tmp", Ok, parse_size)
}

/// A size as a person writes it: the largest unit that divides it.
pub fn size_text(bytes: i64) -> String {
    for (shift, unit) in [(40, "t"), (30, "g"), (20, "m"), (10, "k")] {
        if bytes > 0 && bytes % (1i64 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// CPUs as a person writes them (`1.5`).
pub fn cpus_text(nano: i64) -> String {
    let text = format!("{:.3}", nano as f64 / 1e9);
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Why the caps cannot be read or made. The figures' own variants name
/// no key: the flag (through clap) or the setting (`caps.KEY: `) is put
/// before them by whoever read the figure.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CapsError {
    #[error("{text:?} is not a number of CPUs such as 2 or 1.5")]
    NotCpus { text: String },
    #[error("{cpus} CPUs: give more than 0 and at most {max}", max = MAX_CPUS)]
    CpusOutOfRange { cpus: f64 },
    #[error("{cpus} CPUs: the engine takes at least 0.01")]
    CpusTooFew { cpus: f64 },
    #[error("{text:?} is not a size such as 512m or 4g")]
    NotSize { text: String },
    /// A TOML or JSON figure (not a string), as written.
    #[error("{figure} is not a size such as 512m or 4g")]
    FigureNotSize { figure: String },
    #[error(
        "{} is below the least a room runs in, {} (its daemon, a shell and a hook)",
        size_text(*.bytes),
        size_text(MIN_MEMORY)
    )]
    MemoryBelowLeast { bytes: i64 },
    #[error("{text:?} is not a size such as 512m or 4g, or -1 for swap without a cap")]
    NotSwap { text: String },
    #[error("{figure} is not a size such as 512m or 4g, or -1 for swap without a cap")]
    FigureNotSwap { figure: String },
    #[error("{text:?} is not a whole number of processes")]
    NotPids { text: String },
    #[error("{figure} is not a whole number of processes")]
    FigureNotPids { figure: String },
    #[error("{pids} processes is below the least a room runs with, {least}", least = MIN_PIDS)]
    PidsBelowLeast { pids: i64 },
    #[error(
        "caps: {swap} is less than {memory}: memory_swap counts memory and swap together, as \
         `docker run --memory-swap` does"
    )]
    SwapBelowMemory { swap: String, memory: String },
    #[error("caps: {swap} needs a memory cap too (memory_swap counts memory and swap together)")]
    SwapWithoutMemory { swap: String },
    #[error(
        "caps: {cpus} and runArgs `--cpu-quota`/`--cpu-period` cannot both be given (the engine takes \
         one or the other); use runArgs `--cpus`, or leave the setting out"
    )]
    CpusAndQuota { cpus: String },
}

/// The caps decided, and what was said deciding them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decided {
    pub caps: Caps,
    pub warnings: Vec<String>,
}

/// One cap from the settings and from `runArgs`: the lower, and a warning
/// naming both when they differ.
fn lower(
    key: &str,
    asked: Option<(i64, Source)>,
    run: Option<i64>,
    flag: &str,
    text: fn(i64) -> String,
    warnings: &mut Vec<String>,
) -> Option<i64> {
    match (asked, run) {
        (Some((a, source)), Some(r)) => {
            let held = a.min(r);
            if a != r {
                // `--tmpfs /tmp:size=` takes its value without a space.
                let space = if flag.ends_with('=') { "" } else { " " };
                warnings.push(format!(
                    "caps: runArgs `{flag}{space}{}` and {} both cap {key}; the lower, {}, holds",
                    text(r),
                    source.said(key, &text(a)),
                    text(held)
                ));
            }
            Some(held)
        }
        (Some((a, _)), None) => Some(a),
        (None, r) => r,
    }
}

/// `-1` (no cap on swap) as the largest figure, so the lower of two is a
/// plain minimum.
fn swap_order(bytes: i64) -> i64 {
    if bytes < 0 {
        i64::MAX
    } else {
        bytes
    }
}

fn swap_text(bytes: i64) -> String {
    if bytes < 0 {
        "-1".into()
    } else {
        size_text(bytes)
    }
}

/// The caps from what the settings ask and what `runArgs` set in `run`
/// (the create request's host config before [`apply`]). `tmp_taken` names
/// what else is mounted at `/tmp`, which a tmpfs there would clash with.
pub fn decide(asked: &Asked, run: &HostConfig, tmp_taken: Option<&str>) -> Result<Decided, CapsError> {
    let mut warnings = Vec::new();
    let positive = |v: Option<i64>| v.filter(|v| *v > 0);
    let quota = positive(run.cpu_quota).is_some() || positive(run.cpu_period).is_some();
    if let (Some((nano, source)), true) = (asked.nano_cpus, quota) {
        return Err(CapsError::CpusAndQuota { cpus: source.said("cpus", &cpus_text(nano)) });
    }
    let nano_cpus = lower("cpus", asked.nano_cpus, positive(run.nano_cpus), "--cpus", cpus_text, &mut warnings);
    let run_memory = positive(run.memory);
    let memory = lower("memory", asked.memory, run_memory, "--memory", size_text, &mut warnings);

    // Each side's swap ceiling: its own, else its memory (no swap).
    let settings_swap = match (asked.memory_swap, asked.memory) {
        (Some((swap, source)), Some((mem, mem_source))) if swap >= 0 && swap < mem => {
            return Err(CapsError::SwapBelowMemory {
                swap: source.said("memory_swap", &size_text(swap)),
                memory: mem_source.said("memory", &size_text(mem)),
            })
        }
        (Some(swap), _) => Some(swap),
        (None, Some((mem, source))) => Some((mem, source)),
        (None, None) => None,
    };
    let run_swap_written = run.memory_swap.filter(|s| *s > 0 || *s == -1);
    let run_swap = run_swap_written.or(run_memory);
    let memory_swap = match (settings_swap, run_swap) {
        (Some((s, source)), Some(r)) => {
            let held = if swap_order(s) <= swap_order(r) { s } else { r };
            // Said only when both were written: an implied ceiling (the
            // memory's own) is already said with the memory.
            let both_written = asked.memory_swap.is_some() && run_swap_written.is_some();
            if s != r && both_written {
                warnings.push(format!(
                    "caps: runArgs `--memory-swap {}` and {} both cap memory_swap; the lower, {}, holds",
                    swap_text(r),
                    source.said("memory_swap", &swap_text(s)),
                    swap_text(held)
                ));
            }
            Some(held)
        }
        (Some((s, _)), None) => Some(s),
        (None, r) => r,
    };
    let memory_swap = match (memory_swap, memory) {
        (Some(swap), None) => {
            let swap = match asked.memory_swap {
                Some((s, source)) => source.said("memory_swap", &swap_text(s)),
                None => format!("runArgs `--memory-swap {}`", swap_text(swap)),
            };
            return Err(CapsError::SwapWithoutMemory { swap });
        }
        (Some(swap), Some(mem)) if swap >= 0 && swap < mem => {
            return Err(CapsError::SwapBelowMemory {
                swap: format!("memory_swap {}", size_text(swap)),
                memory: format!("memory {}", size_text(mem)),
            })
        }
        (swap, _) => swap,
    };

    let run_pids = positive(run.pids_limit);
    let pids = lower("pids", asked.pids, run_pids, "--pids-limit", |n| n.to_string(), &mut warnings);

    let run_tmp = run.tmpfs.as_ref().and_then(|t| t.get(TMP)).map(|opts| tmpfs_size(opts));
    let tmp = match (asked.tmp, run_tmp, tmp_taken) {
        (Some((size, source)), _, Some(what)) => {
            warnings.push(format!("caps: {} is not applied: /tmp is {what}", source.said("tmp", &size_text(size))));
            None
        }
        (asked, Some(run_size), _) => lower("tmp", asked, run_size, "--tmpfs /tmp:size=", size_text, &mut warnings),
        (asked, None, _) => asked.map(|(size, _)| size),
    };
    if let (Some(tmp), Some(mem)) = (tmp, memory) {
        if tmp >= mem {
            // tmpfs pages are the room's memory, and no process holds them.
            warnings.push(format!(
                "caps: /tmp ({}) can hold the room's whole memory ({}): a full /tmp leaves its processes none, \
                 and the OOM killer takes them one by one; size tmp below memory",
                size_text(tmp),
                size_text(mem)
            ));
        }
    }
    let caps = Caps { nano_cpus, memory, memory_swap, pids, tmp };
    Ok(Decided { caps, warnings })
}

/// The `size=` of a tmpfs's options, when it has one we can read.
fn tmpfs_size(options: &str) -> Option<i64> {
    options.split(',').find_map(|o| o.strip_prefix("size=")).and_then(super::mounts::parse_size)
}

/// What is mounted at `/tmp` in the create request besides a tmpfs of
/// `HostConfig.Tmpfs` (a bind, a volume, a tmpfs mount), said for a
/// warning.
fn tmp_taken(host: &HostConfig) -> Option<String> {
    let mounted = host.mounts.iter().flatten().find(|m| m.target.as_deref() == Some(TMP));
    if let Some(m) = mounted {
        let kind = m.typ.map(|t| t.to_string()).unwrap_or_else(|| "mount".into());
        return Some(format!("a {kind} mount (mounts or runArgs)"));
    }
    let bound = host.binds.iter().flatten().any(|b| b.split(':').nth(1) == Some(TMP));
    bound.then(|| "a volume of runArgs `-v`".to_string())
}

/// Shapes `plan` by the caps and returns the lines `up` prints; the caps
/// are recorded in [`CAPS_LABEL`].
pub fn apply(plan: &mut CreatePlan, asked: &Asked) -> Result<Vec<String>, CapsError> {
    let host = plan.body.host_config.get_or_insert_with(Default::default);
    let Decided { caps, warnings } = decide(asked, host, tmp_taken(host).as_deref())?;
    host.nano_cpus = caps.nano_cpus;
    host.memory = caps.memory;
    host.memory_swap = caps.memory_swap;
    host.pids_limit = caps.pids;
    if let Some(size) = caps.tmp {
        let tmpfs = host.tmpfs.get_or_insert_with(Default::default);
        let options = match tmpfs.get(TMP) {
            // runArgs' own options stay; only the size is the cap's.
            Some(own) => {
                let mut kept: Vec<&str> = own.split(',').filter(|o| !o.starts_with("size=") && !o.is_empty()).collect();
                let size = format!("size={size}");
                kept.push(&size);
                kept.join(",")
            }
            None => format!("{TMP_OPTIONS},size={size}"),
        };
        tmpfs.insert(TMP.into(), options);
    }
    if caps.memory.is_some() && host.oom_score_adj.is_none() {
        // The room's processes start this far above 0, where the daemon
        // lowers itself (ADR 0014); `runArgs --oom-score-adj` is the
        // user's own word and stays.
        host.oom_score_adj = Some(i64::from(workroomd::room::OOM_SCORE_GAP));
    }
    // Recorded even when empty: the label, not the engine's host config,
    // says what the room was made with, since an engine may add limits of
    // its own (Podman's default `pids_limit` of 2048) that are no cap of ours.
    plan.body.labels.get_or_insert_with(Default::default).insert(CAPS_LABEL.into(), caps.json().to_string());
    Ok(warnings)
}

impl Caps {
    /// The caps a container was made with, from its host config.
    pub fn of_host_config(h: &HostConfig) -> Caps {
        let positive = |v: Option<i64>| v.filter(|v| *v > 0);
        let memory = positive(h.memory);
        // A CPU quota of runArgs' `--cpu-quota` is not a cap of ours:
        // `decide` leaves it to the engine, so it is not read back either.
        Caps {
            nano_cpus: positive(h.nano_cpus),
            memory,
            memory_swap: memory.and(h.memory_swap.filter(|s| *s > 0 || *s == -1)),
            pids: positive(h.pids_limit),
            tmp: h.tmpfs.as_ref().and_then(|t| t.get(TMP)).and_then(|o| tmpfs_size(o)),
        }
    }

    /// The caps a room was made with: its label's, else (a room made
    /// before every room carried the label) what its host config holds.
    pub fn of_container(c: &bollard::models::ContainerInspectResponse) -> Caps {
        let labels = c.config.as_ref().and_then(|c| c.labels.as_ref());
        match labels.is_some_and(|l| l.contains_key(CAPS_LABEL)) {
            true => Caps::of_labels(labels),
            false => c.host_config.as_ref().map(Caps::of_host_config).unwrap_or_default(),
        }
    }

    /// The caps a room's labels record (`list` has labels, not the host
    /// config); none for a room made before caps were recorded.
    pub fn of_labels(labels: Option<&std::collections::HashMap<String, String>>) -> Caps {
        labels.and_then(|l| l.get(CAPS_LABEL)).and_then(|j| serde_json::from_str(j).ok()).map_or_else(
            Caps::default,
            |v: serde_json::Value| {
                let int = |k: &str| v.get(k).and_then(serde_json::Value::as_i64);
                Caps {
                    nano_cpus: v.get("cpus").and_then(serde_json::Value::as_f64).map(|c| (c * 1e9).round() as i64),
                    memory: int("memory"),
                    memory_swap: int("memory_swap"),
                    pids: int("pids"),
                    tmp: int("tmp"),
                }
            },
        )
    }

    /// For `up --json`, `list --json` and the label: each cap that is set,
    /// CPUs as a number, sizes in bytes.
    pub fn json(&self) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        if let Some(nano) = self.nano_cpus {
            out.insert("cpus".into(), serde_json::json!(nano as f64 / 1e9));
        }
        for (key, value) in
            [("memory", self.memory), ("memory_swap", self.memory_swap), ("pids", self.pids), ("tmp", self.tmp)]
        {
            if let Some(v) = value {
                out.insert(key.into(), serde_json::json!(v));
            }
        }
        serde_json::Value::Object(out)
    }

    /// One line for a person: `cpus 1.5, memory 256m, pids 200, /tmp 64m`,
    /// swap said only when the room may swap; `-` with no caps.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(nano) = self.nano_cpus {
            parts.push(format!("cpus {}", cpus_text(nano)));
        }
        if let Some(mem) = self.memory {
            let swap = match self.memory_swap {
                Some(-1) => " (+ swap)".to_string(),
                Some(s) if s > mem => format!(" (+{} swap)", size_text(s - mem)),
                _ => String::new(),
            };
            parts.push(format!("memory {}{swap}", size_text(mem)));
        }
        if let Some(pids) = self.pids {
            parts.push(format!("pids {pids}"));
        }
        if let Some(tmp) = self.tmp {
            parts.push(format!("/tmp {}", size_text(tmp)));
        }
        if parts.is_empty() {
            "-".into()
        } else {
            parts.join(", ")
        }
    }
}

/// How a cap's figure is written for a person.
type Text = fn(i64) -> String;

/// What a room made with `made` lacks against the caps `wanted` now:
/// one line naming each changed cap and the step that applies them.
pub fn drift(name: &str, made: &Caps, wanted: &Caps) -> Option<String> {
    let shown = |v: Option<i64>, text: fn(i64) -> String| v.map_or_else(|| "none".to_string(), text);
    let mut changed = Vec::new();
    let rows: [(&str, Option<i64>, Option<i64>, Text); 5] = [
        ("cpus", made.nano_cpus, wanted.nano_cpus, cpus_text),
        ("memory", made.memory, wanted.memory, size_text),
        ("memory_swap", made.memory_swap, wanted.memory_swap, swap_text),
        ("pids", made.pids, wanted.pids, |n| n.to_string()),
        ("tmp", made.tmp, wanted.tmp, size_text),
    ];
    for (key, was, now, text) in rows {
        if was != now {
            changed.push(format!("{key} {} (now {})", shown(was, text), shown(now, text)));
        }
    }
    if changed.is_empty() {
        return None;
    }
    Some(format!(
        "{name} was made with {}; caps apply only when a room is made: `workroom up --recreate` applies them",
        changed.join(", ")
    ))
}

/// The caps a room of this configuration would be made with now: for
/// `up` on a room made before, to say when its caps differ. `run` is
/// `runArgs` read again, `made` the room's host config (what is mounted
/// at `/tmp` is the room's own).
pub fn wanted(asked: &Asked, run: &HostConfig, made: &HostConfig) -> Result<Caps, CapsError> {
    decide(asked, run, tmp_taken(made).as_deref()).map(|d| d.caps)
}

#[cfg(test)]
mod tests;
