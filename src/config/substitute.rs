//! `${...}` variable substitution with the reference CLI's semantics
//! (devcontainers/cli `variableSubstitution.ts`):
//!
//! - a variable is the shortest `${...}` on one line; the text inside is split
//!   on `:` into a name and arguments, so a default cannot itself hold a `:`
//!   (the reference drops what follows, and so do we);
//! - only string values are substituted, never keys, and the result is not
//!   scanned again;
//! - `localEnv`/`env` read the host environment; an unset variable becomes its
//!   default or the empty string; a missing variable name is an error;
//! - `localWorkspaceFolder[Basename]` and `containerWorkspaceFolder[Basename]`
//!   come from the workspace; `devcontainerId` is filled in a second pass from
//!   the container's id labels, `containerEnv` in a third once a container
//!   exists; until then, and for any unknown name, the text stays as written.

use serde_json::Value;
use std::collections::HashMap;

/// What a substitution pass may resolve; `None` leaves those variables as written.
#[derive(Debug, Default, Clone)]
pub struct Context<'a> {
    /// The host environment, for `localEnv` and `env`.
    pub local_env: Option<&'a HashMap<String, String>>,
    pub local_workspace_folder: Option<&'a str>,
    pub container_workspace_folder: Option<&'a str>,
    pub devcontainer_id: Option<&'a str>,
    /// The running container's environment, for `containerEnv`.
    pub container_env: Option<&'a HashMap<String, String>>,
}

/// A `${localEnv}` or `${containerEnv}` that names no variable. Holds the
/// variable as written; the caller adds the file and property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingName(pub String);

/// Substitutes every string in `value` (recursively through arrays and object
/// values); on error returns the offending variable and the property path.
pub fn substitute_value(ctx: &Context, value: &Value) -> Result<Value, (MissingName, String)> {
    substitute_at(ctx, value, &mut String::new())
}

fn substitute_at(ctx: &Context, value: &Value, path: &mut String) -> Result<Value, (MissingName, String)> {
    Ok(match value {
        Value::String(s) => Value::String(substitute_str(ctx, s).map_err(|e| (e, path.clone()))?),
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                out.push(substitute_at(ctx, item, path)?);
                path.truncate(len);
            }
            Value::Array(out)
        }
        Value::Object(map) => {
            let mut out = serde_json::Map::with_capacity(map.len());
            for (key, item) in map {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                out.insert(key.clone(), substitute_at(ctx, item, path)?);
                path.truncate(len);
            }
            Value::Object(out)
        }
        other => other.clone(),
    })
}

/// Substitutes the variables of one string.
pub fn substitute_str(ctx: &Context, input: &str) -> Result<String, MissingName> {
    // The container workspace folder may itself use variables
    // (`/workspaces/${localWorkspaceFolderBasename}`): resolve it first, as the
    // reference does, with a context that does not recurse into it.
    let resolved_folder;
    let ctx = match ctx.container_workspace_folder {
        Some(folder) if folder.contains("${") => {
            let inner = Context { container_workspace_folder: None, ..ctx.clone() };
            resolved_folder = replace_all(&inner, folder)?;
            Context { container_workspace_folder: Some(&resolved_folder), ..ctx.clone() }
        }
        _ => ctx.clone(),
    };
    replace_all(&ctx, input)
}

fn replace_all(ctx: &Context, input: &str) -> Result<String, MissingName> {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        // The reference's `/\$\{(.*?)\}/g`: the shortest match, and `.` does
        // not cross a line break.
        let Some(end) = after.find(['}', '\n', '\r', '\u{2028}', '\u{2029}']) else {
            break;
        };
        if after.as_bytes()[end] != b'}' {
            // No `}` on this line: this `${` is text; look again after it.
            out.push_str(&rest[..start + 2]);
            rest = after;
            continue;
        }
        out.push_str(&rest[..start]);
        let whole = &rest[start..start + 2 + end + 1];
        out.push_str(&resolve(ctx, whole, &after[..end])?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn resolve(ctx: &Context, whole: &str, inner: &str) -> Result<String, MissingName> {
    let mut parts = inner.split(':');
    let name = parts.next().unwrap_or_default();
    let args: Vec<&str> = parts.collect();
    let keep = || Ok(whole.to_string());
    match name {
        "localEnv" | "env" => match ctx.local_env {
            Some(env) => lookup(env, &args, whole),
            None => keep(),
        },
        "containerEnv" => match ctx.container_env {
            Some(env) => lookup(env, &args, whole),
            None => keep(),
        },
        "localWorkspaceFolder" => ctx.local_workspace_folder.map_or_else(keep, |f| Ok(f.to_string())),
        "localWorkspaceFolderBasename" => {
            ctx.local_workspace_folder.map_or_else(keep, |f| Ok(posix_basename(f).to_string()))
        }
        "containerWorkspaceFolder" => ctx.container_workspace_folder.map_or_else(keep, |f| Ok(f.to_string())),
        "containerWorkspaceFolderBasename" => {
            ctx.container_workspace_folder.map_or_else(keep, |f| Ok(posix_basename(f).to_string()))
        }
        "devcontainerId" => ctx.devcontainer_id.map_or_else(keep, |id| Ok(id.to_string())),
        _ => keep(),
    }
}

fn lookup(env: &HashMap<String, String>, args: &[&str], whole: &str) -> Result<String, MissingName> {
    let Some(name) = args.first() else {
        return Err(MissingName(whole.to_string()));
    };
    Ok(match (env.get(*name), args.get(1)) {
        (Some(value), _) => value.clone(),
        (None, Some(default)) => default.to_string(),
        // As a shell does: an unset variable is empty.
        (None, None) => String::new(),
    })
}

/// `path.posix.basename`: the last segment, ignoring trailing slashes.
pub fn posix_basename(path: &str) -> &str {
    let trimmed = path.trim_end_matches('/');
    trimmed.rsplit('/').next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn local<'a>(env: &'a HashMap<String, String>) -> Context<'a> {
        Context {
            local_env: Some(env),
            local_workspace_folder: Some("/home/ann/src/app"),
            container_workspace_folder: Some("/workspaces/app"),
            ..Default::default()
        }
    }

    #[test]
    fn local_env_reads_the_host_environment_and_env_is_its_alias() {
        let e = env(&[("USER", "ann")]);
        assert_eq!(substitute_str(&local(&e), "${localEnv:USER}-${env:USER}").unwrap(), "ann-ann");
    }

    #[test]
    fn an_unset_variable_takes_its_default_or_becomes_empty() {
        let e = env(&[]);
        assert_eq!(substitute_str(&local(&e), "a${localEnv:NOPE:fallback}b").unwrap(), "afallbackb");
        assert_eq!(substitute_str(&local(&e), "a${localEnv:NOPE}b").unwrap(), "ab");
    }

    #[test]
    fn a_set_but_empty_variable_wins_over_the_default() {
        let e = env(&[("EMPTY", "")]);
        assert_eq!(substitute_str(&local(&e), "${localEnv:EMPTY:dflt}").unwrap(), "");
    }

    #[test]
    fn a_default_is_cut_at_its_first_colon_as_the_reference_does() {
        let e = env(&[]);
        assert_eq!(substitute_str(&local(&e), "${localEnv:NOPE:http://x}").unwrap(), "http");
    }

    #[test]
    fn local_env_without_a_name_is_an_error() {
        let e = env(&[]);
        assert_eq!(substitute_str(&local(&e), "x ${localEnv} y").unwrap_err(), MissingName("${localEnv}".into()));
    }

    #[test]
    fn workspace_folders_and_their_basenames() {
        let e = env(&[]);
        let s = "${localWorkspaceFolder}|${localWorkspaceFolderBasename}|${containerWorkspaceFolder}|${containerWorkspaceFolderBasename}";
        assert_eq!(substitute_str(&local(&e), s).unwrap(), "/home/ann/src/app|app|/workspaces/app|app");
    }

    #[test]
    fn the_container_workspace_folder_may_use_variables_itself() {
        let e = env(&[]);
        let ctx = Context { container_workspace_folder: Some("/work/${localWorkspaceFolderBasename}"), ..local(&e) };
        assert_eq!(substitute_str(&ctx, "${containerWorkspaceFolder}").unwrap(), "/work/app");
    }

    #[test]
    fn unknown_variables_and_later_passes_stay_as_written() {
        let e = env(&[]);
        let s = "${unknown} ${devcontainerId} ${containerEnv:PATH} ${localEnv:NOPE:x}";
        assert_eq!(substitute_str(&local(&e), s).unwrap(), "${unknown} ${devcontainerId} ${containerEnv:PATH} x");
    }

    #[test]
    fn devcontainer_id_and_container_env_resolve_in_their_own_passes() {
        let cenv = env(&[("PATH", "/usr/bin")]);
        let ctx = Context { devcontainer_id: Some("abc"), container_env: Some(&cenv), ..Default::default() };
        assert_eq!(
            substitute_str(&ctx, "${devcontainerId} ${containerEnv:PATH} ${containerEnv:NOPE:d} ${localEnv:X}")
                .unwrap(),
            "abc /usr/bin d ${localEnv:X}"
        );
    }

    #[test]
    fn the_result_is_not_substituted_again() {
        let e = env(&[("A", "${localEnv:B}"), ("B", "no")]);
        assert_eq!(substitute_str(&local(&e), "${localEnv:A}").unwrap(), "${localEnv:B}");
    }

    #[test]
    fn the_shortest_match_wins_and_a_brace_on_another_line_does_not_close() {
        let e = env(&[("A", "1")]);
        assert_eq!(substitute_str(&local(&e), "${localEnv:A}}").unwrap(), "1}");
        assert_eq!(substitute_str(&local(&e), "${x\n} ${localEnv:A}").unwrap(), "${x\n} 1");
        assert_eq!(substitute_str(&local(&e), "tail ${").unwrap(), "tail ${");
    }

    #[test]
    fn values_are_substituted_in_arrays_and_objects_but_keys_are_not() {
        let e = env(&[("A", "1")]);
        let v = json!({"${localEnv:A}": ["${localEnv:A}", {"k": "${localEnv:A}"}], "n": 5});
        let out = substitute_value(&local(&e), &v).unwrap();
        assert_eq!(out, json!({"${localEnv:A}": ["1", {"k": "1"}], "n": 5}));
    }

    #[test]
    fn an_error_names_the_property_path() {
        let e = env(&[]);
        let v = json!({"mounts": ["ok", {"source": "${env}"}]});
        let (missing, path) = substitute_value(&local(&e), &v).unwrap_err();
        assert_eq!(missing, MissingName("${env}".into()));
        assert_eq!(path, "mounts[1].source");
    }

    #[test]
    fn basename_follows_posix_path_basename() {
        assert_eq!(posix_basename("/a/b"), "b");
        assert_eq!(posix_basename("/a/b/"), "b");
        assert_eq!(posix_basename("b"), "b");
        assert_eq!(posix_basename("/"), "");
        assert_eq!(posix_basename(""), "");
    }
}
