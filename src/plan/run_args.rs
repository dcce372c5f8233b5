//! `runArgs`: the `docker run` flags that map onto the create request. The
//! rest are refused by name, since silently dropping a flag the user relies
//! on (a device, a network) is worse than saying so before anything is made.

use super::mounts::{self, MountSpec};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
    pub network: Option<String>,
    pub hostname: Option<String>,
    pub add_hosts: Vec<String>,
    pub devices: Vec<String>,
    pub shm_size: Option<i64>,
    pub memory: Option<i64>,
    pub nano_cpus: Option<i64>,
    pub tmpfs: Vec<(String, String)>,
    pub ipc: Option<String>,
    pub userns: Option<String>,
    pub publish: Vec<String>,
    pub sysctls: Vec<(String, String)>,
    pub dns: Vec<String>,
    pub group_add: Vec<String>,
    pub user: Option<String>,
    pub init: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunArgsError {
    #[error("runArgs: `{0}` is not supported by workroom (it has no place in a room's create request); remove it")]
    Unsupported(String),
    #[error("runArgs: `{0}` needs a value")]
    MissingValue(String),
    #[error("runArgs: `{flag}` value {value:?} is invalid: {why}")]
    Invalid { flag: String, value: String, why: String },
    #[error("runArgs: {0:?} is not a flag; each item must be a flag or a flag's value")]
    NotAFlag(String),
}

/// Flags that only shape the `docker run` invocation itself; meaningless for a
/// room created through the API, so they are accepted and ignored.
const IGNORED: &[&str] = &["-i", "-t", "-it", "-ti", "--interactive", "--tty", "-d", "--detach"];

pub fn parse(args: &[String]) -> Result<RunArgs, RunArgsError> {
    let mut out = RunArgs::default();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if IGNORED.contains(&arg.as_str()) {
            continue;
        }
        if !arg.starts_with('-') {
            return Err(RunArgsError::NotAFlag(arg.clone()));
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        // Boolean flags first: they take no value.
        match flag.as_str() {
            "--privileged" => {
                out.privileged = inline.as_deref().is_none_or(|v| v == "true");
                continue;
            }
            "--init" => {
                out.init = Some(inline.as_deref().is_none_or(|v| v == "true"));
                continue;
            }
            _ => {}
        }
        let mut value = || -> Result<String, RunArgsError> {
            if let Some(v) = &inline {
                return Ok(v.clone());
            }
            let v = args.get(i).cloned().ok_or_else(|| RunArgsError::MissingValue(flag.clone()))?;
            i += 1;
            Ok(v)
        };
        let invalid = |value: &str, why: &str| RunArgsError::Invalid {
            flag: flag.clone(),
            value: value.to_string(),
            why: why.to_string(),
        };
        match flag.as_str() {
            "-e" | "--env" => out.env.push(value()?),
            "-l" | "--label" => {
                let v = value()?;
                let (k, val) = v.split_once('=').unwrap_or((&v, ""));
                out.labels.push((k.to_string(), val.to_string()));
            }
            "--mount" => {
                let v = value()?;
                out.mounts.push(mounts::parse(&v).map_err(|e| invalid(&v, &e.problem))?);
            }
            "-v" | "--volume" => out.binds.push(value()?),
            "--cap-add" => out.cap_add.push(value()?),
            "--cap-drop" => out.cap_drop.push(value()?),
            "--security-opt" => out.security_opt.push(value()?),
            "--network" | "--net" => out.network = Some(value()?),
            "-h" | "--hostname" => out.hostname = Some(value()?),
            "--add-host" => out.add_hosts.push(value()?),
            "--device" => out.devices.push(value()?),
            "--shm-size" => {
                let v = value()?;
                out.shm_size = Some(mounts::parse_size(&v).ok_or_else(|| invalid(&v, "not a size such as 1g"))?);
            }
            "-m" | "--memory" => {
                let v = value()?;
                out.memory = Some(mounts::parse_size(&v).ok_or_else(|| invalid(&v, "not a size such as 4g"))?);
            }
            "--cpus" => {
                let v = value()?;
                let cpus: f64 = v.parse().map_err(|_| invalid(&v, "not a number"))?;
                out.nano_cpus = Some((cpus * 1e9) as i64);
            }
            "--tmpfs" => {
                let v = value()?;
                let (path, opts) = v.split_once(':').unwrap_or((&v, ""));
                out.tmpfs.push((path.to_string(), opts.to_string()));
            }
            "--ipc" => out.ipc = Some(value()?),
            "--userns" => out.userns = Some(value()?),
            "-p" | "--publish" => out.publish.push(value()?),
            "--sysctl" => {
                let v = value()?;
                let (k, val) = v.split_once('=').ok_or_else(|| invalid(&v, "expected key=value"))?;
                out.sysctls.push((k.to_string(), val.to_string()));
            }
            "--dns" => out.dns.push(value()?),
            "--group-add" => out.group_add.push(value()?),
            "-u" | "--user" => out.user = Some(value()?),
            other => return Err(RunArgsError::Unsupported(other.to_string())),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn common_flags_map_in_both_spellings() {
        let r = parse(&args(&[
            "--cap-add=SYS_PTRACE",
            "--security-opt",
            "seccomp=unconfined",
            "-e",
            "A=1",
            "--env=B=2",
            "--shm-size",
            "1g",
            "--add-host",
            "db:10.0.0.2",
            "--privileged",
            "-it",
        ]))
        .unwrap();
        assert_eq!(r.cap_add, ["SYS_PTRACE"]);
        assert_eq!(r.security_opt, ["seccomp=unconfined"]);
        assert_eq!(r.env, ["A=1", "B=2"]);
        assert_eq!(r.shm_size, Some(1 << 30));
        assert_eq!(r.add_hosts, ["db:10.0.0.2"]);
        assert!(r.privileged);
    }

    #[test]
    fn an_unknown_flag_is_refused_by_name() {
        let err = parse(&args(&["--gpus", "all"])).unwrap_err().to_string();
        assert!(err.starts_with("runArgs: `--gpus` is not supported"), "{err}");
    }

    #[test]
    fn a_flag_without_its_value_is_named() {
        assert_eq!(parse(&args(&["--cap-add"])).unwrap_err(), RunArgsError::MissingValue("--cap-add".into()));
    }

    #[test]
    fn a_bad_size_names_flag_and_value() {
        let err = parse(&args(&["--memory", "lots"])).unwrap_err().to_string();
        assert!(err.contains("`--memory` value \"lots\" is invalid"), "{err}");
    }

    #[test]
    fn a_stray_word_is_not_a_flag() {
        assert_eq!(parse(&args(&["debian"])).unwrap_err(), RunArgsError::NotAFlag("debian".into()));
    }
}
