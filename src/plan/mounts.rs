//! The `docker run --mount` syntax that devcontainer.json uses for
//! `workspaceMount` and string `mounts`: comma-separated `key=value` fields,
//! a field in double quotes when it holds a comma.

use crate::config::Mount as ConfigMount;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MountSpec {
    /// `bind`, `volume` or `tmpfs`.
    pub kind: String,
    pub source: Option<String>,
    pub target: String,
    pub read_only: bool,
    pub consistency: Option<String>,
    pub bind_propagation: Option<String>,
    pub volume_nocopy: bool,
    pub tmpfs_size: Option<i64>,
    pub tmpfs_mode: Option<i64>,
}

/// A field the engine would not understand, named so the user can fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("mount {spec:?}: {problem}")]
pub struct MountError {
    pub spec: String,
    pub problem: String,
}

pub fn parse(spec: &str) -> Result<MountSpec, MountError> {
    let err = |problem: String| MountError { spec: spec.to_string(), problem };
    let mut m = MountSpec { kind: "volume".into(), ..Default::default() };
    let mut target = None;
    for field in split_fields(spec) {
        let (key, value) = match field.split_once('=') {
            Some((k, v)) => (k.trim().to_ascii_lowercase(), Some(v.to_string())),
            None => (field.trim().to_ascii_lowercase(), None),
        };
        let need = |v: Option<String>| v.ok_or_else(|| err(format!("`{key}` needs a value")));
        match key.as_str() {
            "type" => m.kind = need(value)?,
            "source" | "src" => m.source = Some(need(value)?).filter(|s| !s.is_empty()),
            "target" | "destination" | "dst" => target = Some(need(value)?),
            "readonly" | "ro" => {
                m.read_only = match value.as_deref() {
                    None | Some("1") | Some("true") => true,
                    Some("0") | Some("false") => false,
                    Some(v) => return Err(err(format!("`{key}` must be true or false, found {v:?}"))),
                }
            }
            "consistency" => m.consistency = Some(need(value)?),
            "bind-propagation" => m.bind_propagation = Some(need(value)?),
            "volume-nocopy" => m.volume_nocopy = value.as_deref().is_none_or(|v| v == "true" || v == "1"),
            "tmpfs-size" => {
                let v = need(value)?;
                m.tmpfs_size = Some(parse_size(&v).ok_or_else(|| err(format!("`tmpfs-size` {v:?} is not a size")))?)
            }
            "tmpfs-mode" => {
                let v = need(value)?;
                m.tmpfs_mode =
                    Some(i64::from_str_radix(&v, 8).map_err(|_| err(format!("`tmpfs-mode` {v:?} is not octal")))?)
            }
            "" => {}
            other => return Err(err(format!("unknown field `{other}`"))),
        }
    }
    if !matches!(m.kind.as_str(), "bind" | "volume" | "tmpfs") {
        return Err(err(format!("type must be bind, volume or tmpfs, found {:?}", m.kind)));
    }
    m.target = target.filter(|t| !t.is_empty()).ok_or_else(|| err("no target".into()))?;
    if m.kind == "bind" && m.source.is_none() {
        return Err(err("a bind mount needs a source".into()));
    }
    Ok(m)
}

/// The object form of `mounts` items.
pub fn from_config(mount: &ConfigMount) -> Result<MountSpec, MountError> {
    match mount {
        ConfigMount::Spec(s) => parse(s),
        ConfigMount::Object { kind, source, target, .. } => {
            Ok(MountSpec { kind: kind.clone(), source: source.clone(), target: target.clone(), ..Default::default() })
        }
    }
}

/// Splits on commas outside double quotes, dropping the quotes (CSV, as the
/// docker CLI reads `--mount`, `--gpus` and the other list flags).
pub(super) fn split_fields(spec: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    for c in spec.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(String::new()),
            c => fields.last_mut().expect("never empty").push(c),
        }
    }
    fields
}

/// A size as the docker CLI reads memory and tmpfs sizes (`RAMInBytes`):
/// a number, maybe with a fraction, then an optional binary unit
/// (`k`, `m`, `g`, `t`, `p`, upper or lower case, with `b` or `ib` after).
pub fn parse_size(s: &str) -> Option<i64> {
    let s = s.trim().to_ascii_lowercase();
    let s = s.strip_suffix('b').unwrap_or(&s);
    let s = s.strip_suffix('i').unwrap_or(s);
    let (number, shift) = match s.chars().last()? {
        'k' => (&s[..s.len() - 1], 10),
        'm' => (&s[..s.len() - 1], 20),
        'g' => (&s[..s.len() - 1], 30),
        't' => (&s[..s.len() - 1], 40),
        'p' => (&s[..s.len() - 1], 50),
        _ => (s, 0),
    };
    let number = number.trim_end();
    if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return None;
    }
    let bytes = number.parse::<f64>().ok()? * (1u64 << shift) as f64;
    (bytes.is_finite() && bytes < i64::MAX as f64).then_some(bytes as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bind_mount_with_aliases_and_flags() {
        let m = parse("type=bind,src=/a,dst=/b,readonly,consistency=cached").unwrap();
        assert_eq!(m.kind, "bind");
        assert_eq!(m.source.as_deref(), Some("/a"));
        assert_eq!(m.target, "/b");
        assert!(m.read_only);
        assert_eq!(m.consistency.as_deref(), Some("cached"));
    }

    #[test]
    fn quoted_fields_may_hold_commas() {
        let m = parse("type=bind,\"source=/home/a,b\",\"target=/workspaces/a,b\"").unwrap();
        assert_eq!(m.source.as_deref(), Some("/home/a,b"));
        assert_eq!(m.target, "/workspaces/a,b");
    }

    #[test]
    fn the_type_defaults_to_volume() {
        let m = parse("source=cache,target=/cache").unwrap();
        assert_eq!((m.kind.as_str(), m.source.as_deref()), ("volume", Some("cache")));
    }

    #[test]
    fn unknown_fields_and_missing_targets_are_named() {
        assert_eq!(parse("type=bind,source=/a,target=/b,colour=red").unwrap_err().problem, "unknown field `colour`");
        assert_eq!(parse("type=volume,source=v").unwrap_err().problem, "no target");
        assert!(parse("type=bind,target=/b").unwrap_err().problem.contains("needs a source"));
        assert!(parse("type=nfs,target=/b").unwrap_err().problem.contains("bind, volume or tmpfs"));
    }

    #[test]
    fn tmpfs_size_and_mode() {
        let m = parse("type=tmpfs,target=/t,tmpfs-size=64m,tmpfs-mode=1777").unwrap();
        assert_eq!(m.tmpfs_size, Some(64 << 20));
        assert_eq!(m.tmpfs_mode, Some(0o1777));
    }
}
