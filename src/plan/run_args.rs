//! `runArgs`: the `docker run` flags, mapped onto the create request as the
//! docker CLI maps them. Every flag with a field in the request is taken, in
//! its long (`--memory 4g`, `--memory=4g`) and short (`-m 4g`, `-m4g`, `-it`)
//! spellings. A flag the docker CLI acts on itself (`-i`, `-t`, `--detach`) is
//! accepted and has nothing to do; `--rm` and `--name`, which the reference
//! accepts, are taken and left out with a warning. What truly cannot apply to a room is
//! refused by name with the reason, before anything is made: silently
//! dropping a flag the user relies on is worse than saying so.
//!
//! The one input beyond the arguments is the host's: `--env-file`,
//! `--label-file` and a bare `-e NAME` read a file or the environment, as the
//! docker CLI does, through [`Host`] so that the table tests need neither.

use super::mounts::{self, MountSpec};
use bollard::models::{
    ContainerCreateBody, DeviceMapping, DeviceRequest, EndpointIpamConfig, EndpointSettings, HealthConfig, HostConfig,
    HostConfigLogConfig, ResourcesBlkioWeightDevice, ResourcesUlimits, RestartPolicy, ThrottleDevice,
};
use std::path::Path;

/// What the flags ask for. The plan merges the first group with
/// devcontainer.json's own properties, and starts from `host` and `body`
/// for the rest.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunArgs {
    pub env: Vec<String>,
    pub labels: Vec<(String, String)>,
    pub mounts: Vec<MountSpec>,
    /// `-v src:dst[:opts]` in the engine's own bind syntax.
    pub binds: Vec<String>,
    pub cap_add: Vec<String>,
    pub cap_drop: Vec<String>,
    pub security_opt: Vec<String>,
    pub privileged: bool,
    /// `-p` specs, published as `appPort` strings are.
    pub publish: Vec<String>,
    /// `-u`: the user of the image's program (`overrideCommand: false`).
    pub user: Option<String>,
    /// `--entrypoint`: replaces the image's program (and its CMD, as in
    /// `docker run`) when `overrideCommand` is false; with the default the
    /// image's program does not run at all, as in the reference CLI.
    pub entrypoint: Option<String>,
    /// `--init`: the room always runs under init; kept to say so in tests.
    pub init: Option<bool>,
    /// `--platform`: a query parameter of the create call, not a body field.
    pub platform: Option<String>,
    /// `--network`, and the endpoint settings `--ip`, `--ip6`,
    /// `--link-local-ip`, `--network-alias` and `--mac-address` give it.
    pub network: Option<String>,
    pub endpoint: Option<EndpointSettings>,
    /// `--name`: the reference accepts it, but workroom names its rooms
    /// (and finds them by their labels); kept so the plan can say the room
    /// keeps its own name.
    pub name: Option<String>,
    /// Flags taken and left out, each a line saying what happens instead.
    pub ignored: Vec<String>,
    /// Every other field a flag sets, in the engine's own types.
    pub host: HostConfig,
    pub body: ContainerCreateBody,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunArgsError {
    #[error("runArgs: `{flag}` cannot apply to a room: {why}")]
    Unsupported { flag: String, why: &'static str },
    #[error("runArgs: `{0}` is not a docker run flag")]
    Unknown(String),
    #[error("runArgs: `{0}` needs a value")]
    MissingValue(String),
    #[error("runArgs: `{flag}` value {value:?} is invalid: {why}")]
    Invalid { flag: String, value: String, why: String },
    #[error("runArgs: {0:?} is not a flag; each item must be a flag or a flag's value")]
    NotAFlag(String),
    #[error("runArgs: `{flag}` {path}: cannot read it ({reason})")]
    File { flag: String, path: String, reason: String },
    #[error("runArgs: `{flag}` value {value:?} is invalid: {field:?} is neither `all` nor a count")]
    GpusCount { flag: String, value: String, field: String },
    #[error("runArgs: `{flag}` value {value:?} is invalid: unknown field `{field}`")]
    GpusField { flag: String, value: String, field: String },
    #[error("runArgs: `{flag}` value {value:?} is invalid: `options` are not supported by the docker CLI either")]
    GpusOptions { flag: String, value: String },
    #[error("runArgs: `{flag}` value {value:?} is invalid: count and device cannot be given together")]
    GpusCountAndDevice { flag: String, value: String },
}

/// What the flags may read on the host.
pub trait Host {
    /// A variable of the host environment (`-e NAME` with no value).
    fn var(&self, name: &str) -> Option<String>;
    /// A file (`--env-file`, `--label-file`); `path` is absolute.
    fn read(&self, path: &Path) -> std::io::Result<String>;
}

/// This process's environment and files, for the table tests of other
/// plan modules; what a room is made with reads them through the `room`
/// layer's own (`room::HostFiles`), so nothing here does I/O.
#[cfg(test)]
pub struct ThisHost;

#[cfg(test)]
impl Host for ThisHost {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
    fn read(&self, path: &Path) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }
}

/// Flags that take no value (`--flag`, `--flag=false`).
const BOOLEAN: &[&str] = &[
    "privileged",
    "init",
    "read-only",
    "rm",
    "publish-all",
    "oom-kill-disable",
    "no-healthcheck",
    "interactive",
    "tty",
    "detach",
    "sig-proxy",
    "disable-content-trust",
    "quiet",
    "use-api-socket",
    "help",
];

/// `docker run`'s one-letter flags.
fn long_of_short(c: char) -> Option<&'static str> {
    Some(match c {
        'a' => "attach",
        'c' => "cpu-shares",
        'd' => "detach",
        'e' => "env",
        'h' => "hostname",
        'i' => "interactive",
        'l' => "label",
        'm' => "memory",
        'p' => "publish",
        'P' => "publish-all",
        'q' => "quiet",
        't' => "tty",
        'u' => "user",
        'v' => "volume",
        'w' => "workdir",
        _ => return None,
    })
}

/// Old spellings the docker CLI still takes.
fn canonical(name: &str) -> &str {
    match name {
        "net" => "network",
        "net-alias" => "network-alias",
        "dns-opt" => "dns-option",
        other => other,
    }
}

/// Reads `args` as `docker run` would; relative files are read from `folder`.
pub fn parse(args: &[String], folder: &Path, host: &dyn Host) -> Result<RunArgs, RunArgsError> {
    let mut out = RunArgs::default();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        // Each (flag as written, long name, inline value) this item holds.
        let mut flags: Vec<(String, &str, Option<String>)> = Vec::new();
        if let Some(long) = arg.strip_prefix("--").filter(|l| !l.is_empty()) {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let name = canonical(name);
            let known = BOOLEAN.contains(&name) || KNOWN_VALUED.contains(&name);
            if !known {
                return Err(RunArgsError::Unknown(format!("--{name}")));
            }
            let name = BOOLEAN.iter().chain(KNOWN_VALUED).find(|k| **k == name).copied().unwrap_or_default();
            flags.push((format!("--{name}"), name, inline));
        } else if let Some(shorts) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            // `-it`: booleans run together; `-m4g`, `-m=4g`: a value attached.
            for (at, c) in shorts.char_indices() {
                let long = long_of_short(c).ok_or_else(|| RunArgsError::Unknown(format!("-{c}")))?;
                if BOOLEAN.contains(&long) {
                    flags.push((format!("-{c}"), long, None));
                    continue;
                }
                let rest = &shorts[at + c.len_utf8()..];
                let inline = (!rest.is_empty()).then(|| rest.strip_prefix('=').unwrap_or(rest).to_string());
                flags.push((format!("-{c}"), long, inline));
                break;
            }
        } else {
            return Err(RunArgsError::NotAFlag(arg.clone()));
        }
        for (written, name, inline) in flags {
            if BOOLEAN.contains(&name) {
                let on = match inline.as_deref() {
                    None => true,
                    Some(v) => parse_bool(v).ok_or_else(|| RunArgsError::Invalid {
                        flag: written.clone(),
                        value: v.to_string(),
                        why: "expected true or false".into(),
                    })?,
                };
                boolean(&mut out, &written, name, on)?;
                continue;
            }
            let value = match inline {
                Some(v) => v,
                None => {
                    let v = args.get(i).cloned().ok_or_else(|| RunArgsError::MissingValue(written.clone()))?;
                    i += 1;
                    v
                }
            };
            let mut flag = Flag { written: &written, folder, host };
            flag.apply(&mut out, name, &value)?;
        }
    }
    Ok(out)
}

fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

fn boolean(out: &mut RunArgs, written: &str, name: &str, on: bool) -> Result<(), RunArgsError> {
    let unsupported = |why| Err(RunArgsError::Unsupported { flag: written.to_string(), why });
    match name {
        "privileged" => out.privileged = on,
        "init" => out.init = Some(on),
        "read-only" => out.host.readonly_rootfs = Some(on),
        "publish-all" => out.host.publish_all_ports = Some(on),
        "oom-kill-disable" => out.host.oom_kill_disable = Some(on),
        "no-healthcheck" if on => {
            out.body.healthcheck = Some(HealthConfig { test: Some(vec!["NONE".into()]), ..Default::default() })
        }
        // Refusing it would refuse configs the reference runs; the room
        // simply is not removed at its stop.
        "rm" if on => out.ignored.push(format!(
            "runArgs: `{written}` is ignored: a room outlives its stops (restart policy unless-stopped); \
             `workroom down` removes it"
        )),
        "use-api-socket" if on => {
            return unsupported("it is the docker CLI's own mount of its socket; mount the socket in `mounts` instead")
        }
        "help" if on => return unsupported("it prints docker's help"),
        // What the docker CLI does with its own terminal and streams; the
        // room is made through the API and reached through exec.
        _ => {}
    }
    Ok(())
}

/// Flags that take a value; see [`Flag::apply`].
const KNOWN_VALUED: &[&str] = &[
    "add-host",
    "annotation",
    "attach",
    "blkio-weight",
    "blkio-weight-device",
    "cap-add",
    "cap-drop",
    "cgroup-parent",
    "cgroupns",
    "cidfile",
    "cpu-count",
    "cpu-percent",
    "cpu-period",
    "cpu-quota",
    "cpu-rt-period",
    "cpu-rt-runtime",
    "cpu-shares",
    "cpus",
    "cpuset-cpus",
    "cpuset-mems",
    "detach-keys",
    "device",
    "device-cgroup-rule",
    "device-read-bps",
    "device-read-iops",
    "device-write-bps",
    "device-write-iops",
    "dns",
    "dns-option",
    "dns-search",
    "domainname",
    "entrypoint",
    "env",
    "env-file",
    "expose",
    "gpus",
    "group-add",
    "health-cmd",
    "health-interval",
    "health-retries",
    "health-start-interval",
    "health-start-period",
    "health-timeout",
    "hostname",
    "io-maxbandwidth",
    "io-maxiops",
    "ip",
    "ip6",
    "ipc",
    "isolation",
    "kernel-memory",
    "label",
    "label-file",
    "link",
    "link-local-ip",
    "log-driver",
    "log-opt",
    "mac-address",
    "memory",
    "memory-reservation",
    "memory-swap",
    "memory-swappiness",
    "mount",
    "name",
    "network",
    "network-alias",
    "oom-score-adj",
    "pid",
    "pids-limit",
    "platform",
    "publish",
    "pull",
    "restart",
    "runtime",
    "security-opt",
    "shm-size",
    "stop-signal",
    "stop-timeout",
    "storage-opt",
    "sysctl",
    "tmpfs",
    "ulimit",
    "user",
    "userns",
    "uts",
    "volume",
    "volume-driver",
    "volumes-from",
    "workdir",
];

struct Flag<'a> {
    written: &'a str,
    folder: &'a Path,
    host: &'a dyn Host,
}

impl Flag<'_> {
    fn invalid(&self, value: &str, why: impl Into<String>) -> RunArgsError {
        RunArgsError::Invalid { flag: self.written.to_string(), value: value.to_string(), why: why.into() }
    }

    fn unsupported(&self, why: &'static str) -> RunArgsError {
        RunArgsError::Unsupported { flag: self.written.to_string(), why }
    }

    fn int(&self, v: &str) -> Result<i64, RunArgsError> {
        v.trim().parse().map_err(|_| self.invalid(v, "not a whole number"))
    }

    fn size(&self, v: &str) -> Result<i64, RunArgsError> {
        mounts::parse_size(v).ok_or_else(|| self.invalid(v, "not a size such as 512m or 4g"))
    }

    fn duration(&self, v: &str) -> Result<i64, RunArgsError> {
        parse_duration(v).ok_or_else(|| self.invalid(v, "not a duration such as 30s, 1m30s or 500ms"))
    }

    fn key_value(&self, v: &str) -> Result<(String, String), RunArgsError> {
        v.split_once('=')
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .ok_or_else(|| self.invalid(v, "expected key=value"))
    }

    fn read(&self, v: &str) -> Result<String, RunArgsError> {
        let path = self.folder.join(v);
        self.host.read(&path).map_err(|e| RunArgsError::File {
            flag: self.written.to_string(),
            path: path.display().to_string(),
            reason: e.to_string(),
        })
    }

    fn endpoint<'o>(&self, out: &'o mut RunArgs) -> &'o mut EndpointSettings {
        out.endpoint.get_or_insert_with(Default::default)
    }

    fn apply(&mut self, out: &mut RunArgs, name: &str, v: &str) -> Result<(), RunArgsError> {
        let h = &mut out.host;
        match name {
            // Ours to merge with devcontainer.json's own properties.
            "env" => match v.split_once('=') {
                Some(_) => out.env.push(v.to_string()),
                // `-e NAME`: the host's value, or nothing when it has none.
                None => out.env.extend(self.host.var(v).map(|val| format!("{v}={val}"))),
            },
            "env-file" => {
                let text = self.read(v)?;
                for line in text.lines().map(|l| l.trim_start()).filter(|l| !l.is_empty() && !l.starts_with('#')) {
                    match line.split_once('=') {
                        Some((key, _)) if key.contains(char::is_whitespace) => {
                            return Err(self.invalid(v, format!("the variable {key:?} contains whitespace")))
                        }
                        Some(_) => out.env.push(line.to_string()),
                        None => out.env.extend(self.host.var(line).map(|val| format!("{line}={val}"))),
                    }
                }
            }
            "label" => {
                let (k, val) = v.split_once('=').unwrap_or((v, ""));
                out.labels.push((k.to_string(), val.to_string()));
            }
            "label-file" => {
                let text = self.read(v)?;
                for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
                    let (k, val) = line.split_once('=').unwrap_or((line, ""));
                    out.labels.push((k.to_string(), val.to_string()));
                }
            }
            "mount" => out.mounts.push(mounts::parse(v).map_err(|e| self.invalid(v, e.problem))?),
            "volume" => out.binds.push(v.to_string()),
            "cap-add" => out.cap_add.push(v.to_string()),
            "cap-drop" => out.cap_drop.push(v.to_string()),
            "security-opt" => out.security_opt.push(v.to_string()),
            "publish" => out.publish.push(v.to_string()),
            "user" => out.user = Some(v.to_string()),
            "entrypoint" => out.entrypoint = Some(v.to_string()),
            "platform" => out.platform = Some(v.to_string()),
            "network" => out.network = Some(v.to_string()),
            "ip" => self.endpoint(out).ipam_config.get_or_insert_with(Default::default).ipv4_address = Some(v.into()),
            "ip6" => self.endpoint(out).ipam_config.get_or_insert_with(Default::default).ipv6_address = Some(v.into()),
            "link-local-ip" => self
                .endpoint(out)
                .ipam_config
                .get_or_insert_with(EndpointIpamConfig::default)
                .link_local_ips
                .get_or_insert_with(Vec::new)
                .push(v.into()),
            "network-alias" => self.endpoint(out).aliases.get_or_insert_with(Vec::new).push(v.into()),
            "mac-address" => self.endpoint(out).mac_address = Some(v.into()),

            // The container's own settings.
            "hostname" => out.body.hostname = Some(v.into()),
            "domainname" => out.body.domainname = Some(v.into()),
            "workdir" => {
                if !v.starts_with('/') {
                    return Err(self.invalid(v, "the working folder must be an absolute path"));
                }
                out.body.working_dir = Some(v.into())
            }
            "stop-signal" => out.body.stop_signal = Some(v.into()),
            "stop-timeout" => out.body.stop_timeout = Some(self.int(v)?),
            "expose" => {
                let exposed = out.body.exposed_ports.get_or_insert_with(Vec::new);
                exposed.extend(
                    expose(v).ok_or_else(|| self.invalid(v, "expected a port or a range such as 8000-8010[/udp]"))?,
                )
            }
            "health-cmd" => {
                out.body.healthcheck.get_or_insert_with(Default::default).test =
                    Some(vec!["CMD-SHELL".into(), v.into()])
            }
            "health-interval" => {
                out.body.healthcheck.get_or_insert_with(Default::default).interval = Some(self.duration(v)?)
            }
            "health-timeout" => {
                out.body.healthcheck.get_or_insert_with(Default::default).timeout = Some(self.duration(v)?)
            }
            "health-start-period" => {
                out.body.healthcheck.get_or_insert_with(Default::default).start_period = Some(self.duration(v)?)
            }
            "health-start-interval" => {
                out.body.healthcheck.get_or_insert_with(Default::default).start_interval = Some(self.duration(v)?)
            }
            "health-retries" => out.body.healthcheck.get_or_insert_with(Default::default).retries = Some(self.int(v)?),

            // The host config.
            "add-host" => h.extra_hosts.get_or_insert_with(Vec::new).push(v.into()),
            "annotation" => {
                let (k, val) = self.key_value(v)?;
                h.annotations.get_or_insert_with(Default::default).insert(k, val);
            }
            "blkio-weight" => {
                h.blkio_weight = Some(v.parse().map_err(|_| self.invalid(v, "a weight from 10 to 1000, or 0"))?)
            }
            "blkio-weight-device" => {
                let (path, weight) = v.rsplit_once(':').ok_or_else(|| self.invalid(v, "expected /dev/x:weight"))?;
                let weight = weight.parse().map_err(|_| self.invalid(v, "the weight is not a number"))?;
                h.blkio_weight_device
                    .get_or_insert_with(Vec::new)
                    .push(ResourcesBlkioWeightDevice { path: Some(path.into()), weight: Some(weight) });
            }
            "device-read-bps" | "device-write-bps" | "device-read-iops" | "device-write-iops" => {
                let (path, rate) = v.rsplit_once(':').ok_or_else(|| self.invalid(v, "expected /dev/x:rate"))?;
                let rate = if name.ends_with("bps") { self.size(rate)? } else { self.int(rate)? };
                let list = match name {
                    "device-read-bps" => &mut h.blkio_device_read_bps,
                    "device-write-bps" => &mut h.blkio_device_write_bps,
                    "device-read-iops" => &mut h.blkio_device_read_iops,
                    _ => &mut h.blkio_device_write_iops,
                };
                list.get_or_insert_with(Vec::new).push(ThrottleDevice { path: Some(path.into()), rate: Some(rate) });
            }
            "cgroup-parent" => h.cgroup_parent = Some(v.into()),
            "cgroupns" => h.cgroupns_mode = Some(word(v).ok_or_else(|| self.invalid(v, "expected host or private"))?),
            "cpu-count" => h.cpu_count = Some(self.int(v)?),
            "cpu-percent" => h.cpu_percent = Some(self.int(v)?),
            "cpu-period" => h.cpu_period = Some(self.int(v)?),
            "cpu-quota" => h.cpu_quota = Some(self.int(v)?),
            "cpu-rt-period" => h.cpu_realtime_period = Some(self.int(v)?),
            "cpu-rt-runtime" => h.cpu_realtime_runtime = Some(self.int(v)?),
            "cpu-shares" => h.cpu_shares = Some(self.int(v)?),
            "cpus" => {
                let cpus: f64 = v
                    .parse()
                    .ok()
                    .filter(|c: &f64| c.is_finite() && *c >= 0.0)
                    .ok_or_else(|| self.invalid(v, "not a number of CPUs such as 1.5"))?;
                h.nano_cpus = Some((cpus * 1e9).round() as i64);
            }
            "cpuset-cpus" => h.cpuset_cpus = Some(v.into()),
            "cpuset-mems" => h.cpuset_mems = Some(v.into()),
            "device" => h.devices.get_or_insert_with(Vec::new).push(device(v)),
            "device-cgroup-rule" => h.device_cgroup_rules.get_or_insert_with(Vec::new).push(v.into()),
            "dns" => h.dns.get_or_insert_with(Vec::new).push(v.into()),
            "dns-option" => h.dns_options.get_or_insert_with(Vec::new).push(v.into()),
            "dns-search" => h.dns_search.get_or_insert_with(Vec::new).push(v.into()),
            "gpus" => {
                let request = gpus(self.written, v)?;
                h.device_requests.get_or_insert_with(Vec::new).push(request);
            }
            "group-add" => h.group_add.get_or_insert_with(Vec::new).push(v.into()),
            "io-maxbandwidth" => h.io_maximum_bandwidth = Some(self.size(v)?),
            "io-maxiops" => h.io_maximum_iops = Some(self.int(v)?),
            "ipc" => h.ipc_mode = Some(v.into()),
            "isolation" => {
                h.isolation = Some(word(v).ok_or_else(|| self.invalid(v, "expected default, process or hyperv"))?)
            }
            "link" => h.links.get_or_insert_with(Vec::new).push(v.into()),
            "log-driver" => h.log_config.get_or_insert_with(HostConfigLogConfig::default).typ = Some(v.into()),
            "log-opt" => {
                let (k, val) = self.key_value(v)?;
                let log = h.log_config.get_or_insert_with(HostConfigLogConfig::default);
                log.config.get_or_insert_with(Default::default).insert(k, val);
            }
            "memory" => h.memory = Some(self.size(v)?),
            "memory-reservation" => h.memory_reservation = Some(self.size(v)?),
            "memory-swap" => h.memory_swap = Some(if v.trim() == "-1" { -1 } else { self.size(v)? }),
            "memory-swappiness" => h.memory_swappiness = Some(self.int(v)?),
            "oom-score-adj" => h.oom_score_adj = Some(self.int(v)?),
            "pid" => h.pid_mode = Some(v.into()),
            "pids-limit" => h.pids_limit = Some(self.int(v)?),
            "restart" => {
                h.restart_policy = Some(restart(v).ok_or_else(|| {
                    self.invalid(v, "expected no, always, unless-stopped or on-failure[:max-retries]")
                })?)
            }
            "runtime" => h.runtime = Some(v.into()),
            "shm-size" => h.shm_size = Some(self.size(v)?),
            "storage-opt" => {
                let (k, val) = self.key_value(v)?;
                h.storage_opt.get_or_insert_with(Default::default).insert(k, val);
            }
            "sysctl" => {
                let (k, val) = self.key_value(v)?;
                h.sysctls.get_or_insert_with(Default::default).insert(k, val);
            }
            "tmpfs" => {
                let (path, opts) = v.split_once(':').unwrap_or((v, ""));
                h.tmpfs.get_or_insert_with(Default::default).insert(path.into(), opts.into());
            }
            "ulimit" => {
                let limit =
                    ulimit(v).ok_or_else(|| self.invalid(v, "expected name=soft[:hard], such as nofile=1024:2048"))?;
                h.ulimits.get_or_insert_with(Vec::new).push(limit);
            }
            "userns" => h.userns_mode = Some(v.into()),
            "uts" => h.uts_mode = Some(v.into()),
            "volume-driver" => h.volume_driver = Some(v.into()),
            "volumes-from" => h.volumes_from.get_or_insert_with(Vec::new).push(v.into()),

            // What the docker CLI does with its own streams and terminal.
            "attach" | "detach-keys" => {}
            "pull" if v == "missing" => {}
            "pull" => {
                return Err(self
                    .unsupported("workroom pulls an image only when it is missing; `docker pull IMAGE` refreshes it"))
            }
            "name" => out.name = Some(v.to_string()),
            "cidfile" => {
                return Err(
                    self.unsupported("the docker CLI writes that file; `workroom up --json` prints the container id")
                )
            }
            "kernel-memory" => {
                return Err(self.unsupported(
                    "kernel memory limits were removed from the Engine API (Docker 20.10 ignores them on cgroup v2)",
                ))
            }
            other => return Err(RunArgsError::Unknown(format!("--{other}"))),
        }
        Ok(())
    }
}

/// The engine's enums deserialise from the words the flags use.
fn word<T: serde::de::DeserializeOwned>(w: &str) -> Option<T> {
    serde_json::from_value(serde_json::Value::String(w.to_string())).ok()
}

/// `--device /dev/x[:/dev/y[:rwm]]`.
fn device(spec: &str) -> DeviceMapping {
    let mut parts = spec.splitn(3, ':');
    let host = parts.next().unwrap_or_default().to_string();
    let container = parts.next().map(str::to_string).unwrap_or_else(|| host.clone());
    let perms = parts.next().unwrap_or("rwm").to_string();
    DeviceMapping { path_on_host: Some(host), path_in_container: Some(container), cgroup_permissions: Some(perms) }
}

/// `--restart no|always|unless-stopped|on-failure[:N]`.
fn restart(v: &str) -> Option<RestartPolicy> {
    let (name, retries) = match v.split_once(':') {
        Some(("on-failure", n)) => ("on-failure", Some(n.parse().ok()?)),
        Some(_) => return None,
        None => (v, None),
    };
    if !matches!(name, "no" | "always" | "unless-stopped" | "on-failure") {
        return None;
    }
    Some(RestartPolicy { name: word(name), maximum_retry_count: retries })
}

/// `--ulimit name=soft[:hard]`; the hard limit defaults to the soft one.
fn ulimit(v: &str) -> Option<ResourcesUlimits> {
    let (name, limits) = v.split_once('=')?;
    let (soft, hard) = match limits.split_once(':') {
        Some((s, h)) => (s.parse().ok()?, h.parse().ok()?),
        None => {
            let s = limits.parse().ok()?;
            (s, s)
        }
    };
    Some(ResourcesUlimits { name: Some(name.into()), soft: Some(soft), hard: Some(hard) })
}

/// The most ports one `--expose` range may name: all of them.
const MAX_PORT: u32 = 65535;

/// `--expose 80`, `--expose 8000-8010/udp`: each port as `port/proto`.
fn expose(v: &str) -> Option<Vec<String>> {
    let (ports, proto) = v.split_once('/').unwrap_or((v, "tcp"));
    let (from, to) = match ports.split_once('-') {
        Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
        None => {
            let p = ports.parse::<u32>().ok()?;
            (p, p)
        }
    };
    if from == 0 || from > to || to > MAX_PORT {
        return None;
    }
    Some((from..=to).map(|p| format!("{p}/{proto}")).collect())
}

/// `--gpus all`, `--gpus 2`, `--gpus '"device=0,2",capabilities=compute'`,
/// as the docker CLI reads them (CSV fields); the capabilities default to
/// `gpu`. `flag` is the flag as written, for the refusal.
fn gpus(flag: &str, v: &str) -> Result<DeviceRequest, RunArgsError> {
    let (flag, value) = (flag.to_string(), v.to_string());
    let count = |n: &str| {
        n.parse().map_err(|_| RunArgsError::GpusCount { flag: flag.clone(), value: value.clone(), field: n.into() })
    };
    let mut request = DeviceRequest::default();
    let mut capabilities = Vec::new();
    for field in csv_fields(v) {
        match field.split_once('=') {
            None if field == "all" => request.count = Some(-1),
            None => request.count = Some(count(&field)?),
            Some(("count", "all")) => request.count = Some(-1),
            Some(("count", n)) => request.count = Some(count(n)?),
            Some(("device", ids)) => request.device_ids = Some(ids.split(',').map(str::to_string).collect()),
            Some(("driver", d)) => request.driver = Some(d.into()),
            Some(("capabilities", c)) => capabilities.extend(c.split(',').map(str::to_string)),
            Some(("options", _)) => return Err(RunArgsError::GpusOptions { flag, value }),
            Some((k, _)) => return Err(RunArgsError::GpusField { flag, value, field: k.into() }),
        }
    }
    if request.count.is_some() && request.device_ids.is_some() {
        return Err(RunArgsError::GpusCountAndDevice { flag, value });
    }
    if capabilities.is_empty() {
        capabilities.push("gpu".to_string());
    }
    request.capabilities = Some(vec![capabilities]);
    Ok(request)
}

/// Splits on commas outside double quotes, dropping the quotes and empty
/// fields.
fn csv_fields(v: &str) -> Vec<String> {
    let mut fields = super::mounts::split_fields(v);
    fields.retain(|f| !f.is_empty());
    fields
}

/// A Go duration (`1m30s`, `500ms`, `1.5h`) in nanoseconds.
fn parse_duration(v: &str) -> Option<i64> {
    let mut rest = v.trim();
    if rest.is_empty() {
        return None;
    }
    if rest == "0" {
        return Some(0);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let unit = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_end..];
        total += number * unit;
    }
    (total < i64::MAX as f64).then_some(total as i64)
}

#[cfg(test)]
mod tests;
