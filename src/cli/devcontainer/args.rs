//! The reference CLI's command lines, read as its yargs reads them: flags
//! as `--name value` or `--name=value`, a boolean as `--name`, `--name true`
//! or `--name=false`, a repeatable flag as often as given. Each flag of
//! each command is in a table saying whether workroom uses it, accepts and
//! ignores it (and why), or refuses it (and why), so the one-line answers
//! and docs/guide.md's table come from the same place.

use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bool,
    /// One value; given twice, the last wins (as yargs' strings do).
    Value,
    /// Repeatable: every value, in order.
    Many,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    Used,
    /// Accepted; the reason says why it changes nothing.
    Ignored(&'static str),
    /// Refused with this reason: going on without it would make something
    /// other than what the caller asked for.
    Refused(&'static str),
}

#[derive(Debug, Clone, Copy)]
pub struct Flag {
    pub name: &'static str,
    pub kind: Kind,
    pub use_: Use,
}

const fn flag(name: &'static str, kind: Kind, use_: Use) -> Flag {
    Flag { name, kind, use_ }
}

use Kind::{Bool, Many, Value};
use Use::{Ignored, Refused, Used};

const NO_OCI_AUTH: &str = "workroom pulls through the engine and does no registry authentication of its own";
const ENGINE_API: &str = "workroom talks to the engine's API, not to a docker CLI";
const OWN_STATE: &str = "workroom keeps its state in its own folders and in the room's daemon folder";
const OWN_LOGS: &str = "workroom's diagnostic logs are asked for with WORKROOM_LOG=debug";
const AS_IT_COMES: &str = "output is passed on as it comes, not rendered for a terminal size";
const GIT_MOUNTS: &str = "workroom binds the workspace folder and, for a worktree or submodule, its git folder itself";
const NOT_YET: &str = "not yet supported by workroom's devcontainer face";

/// Flags every command of the reference takes.
const GLOBAL: &[Flag] = &[
    flag("oci-auth-hardening", Bool, Ignored(NO_OCI_AUTH)),
    flag("allow-cross-origin-auth-host", Many, Ignored(NO_OCI_AUTH)),
];

pub const UP: &[Flag] = &[
    flag("workspace-folder", Value, Used),
    flag("config", Value, Used),
    flag("log-format", Value, Used),
    flag("mount", Many, Used),
    flag("id-label", Many, Used),
    flag("remove-existing-container", Bool, Used),
    flag("expect-existing-container", Bool, Used),
    flag("skip-post-attach", Bool, Used),
    flag("no-lockfile", Bool, Used),
    flag("frozen-lockfile", Bool, Used),
    flag(
        "skip-non-blocking-commands",
        Bool,
        Ignored("up waits for every due hook, so the room is as ready as asked, later"),
    ),
    flag(
        "remote-env",
        Many,
        Ignored("not yet: up's hooks take remoteEnv from the configuration only (exec --remote-env takes it)"),
    ),
    flag("skip-post-create", Bool, Refused("not yet: workroom's up runs every hook that is due")),
    flag("prebuild", Bool, Refused(NOT_YET)),
    flag("override-config", Value, Refused(NOT_YET)),
    flag("additional-features", Value, Refused(NOT_YET)),
    flag("build-no-cache", Bool, Refused(NOT_YET)),
    flag("dotfiles-repository", Value, Refused(NOT_YET)),
    flag("dotfiles-install-command", Value, Ignored("only used with --dotfiles-repository")),
    flag("dotfiles-target-path", Value, Ignored("only used with --dotfiles-repository")),
    flag("secrets-file", Value, Refused(NOT_YET)),
    flag("include-configuration", Bool, Ignored("not yet: read-configuration prints the configuration")),
    flag(
        "include-merged-configuration",
        Bool,
        Ignored("not yet: read-configuration --include-merged-configuration prints it"),
    ),
    flag("cache-from", Many, Ignored("a build cache hint; the engine builds with its own cache")),
    flag("cache-to", Many, Ignored(NOT_YET)),
    flag("buildkit", Value, Ignored("the engine decides how it builds")),
    flag("docker-path", Value, Ignored(ENGINE_API)),
    flag("docker-compose-path", Value, Ignored("workroom runs the compose it finds on the PATH")),
    flag("container-data-folder", Value, Ignored(OWN_STATE)),
    flag("container-system-data-folder", Value, Ignored(OWN_STATE)),
    flag("container-session-data-folder", Value, Ignored(OWN_STATE)),
    flag("user-data-folder", Value, Ignored(OWN_STATE)),
    flag("workspace-mount-consistency", Value, Ignored("a Docker Desktop for Mac option; engines on Linux ignore it")),
    flag("gpu-availability", Value, Ignored("not yet: hostRequirements.gpu is a warning in workroom")),
    flag("mount-workspace-git-root", Bool, Ignored(GIT_MOUNTS)),
    flag("mount-git-worktree-common-dir", Bool, Ignored(GIT_MOUNTS)),
    flag("log-level", Value, Ignored(OWN_LOGS)),
    flag("terminal-columns", Value, Ignored(AS_IT_COMES)),
    flag("terminal-rows", Value, Ignored(AS_IT_COMES)),
    flag("default-user-env-probe", Value, Ignored("not yet: userEnvProbe in devcontainer.json decides")),
    flag("update-remote-user-uid-default", Value, Ignored("not yet: updateRemoteUserUID in devcontainer.json decides")),
];

pub const EXEC: &[Flag] = &[
    flag("workspace-folder", Value, Used),
    flag("config", Value, Used),
    flag("container-id", Value, Used),
    flag("remote-env", Many, Used),
    flag("log-format", Value, Used),
    flag("id-label", Many, Used),
    flag("override-config", Value, Refused(NOT_YET)),
    flag("docker-path", Value, Ignored(ENGINE_API)),
    flag("docker-compose-path", Value, Ignored(ENGINE_API)),
    flag("container-data-folder", Value, Ignored(OWN_STATE)),
    flag("container-system-data-folder", Value, Ignored(OWN_STATE)),
    flag("user-data-folder", Value, Ignored(OWN_STATE)),
    flag("mount-workspace-git-root", Bool, Ignored(GIT_MOUNTS)),
    flag("mount-git-worktree-common-dir", Bool, Ignored(GIT_MOUNTS)),
    flag("log-level", Value, Ignored(OWN_LOGS)),
    flag("terminal-columns", Value, Ignored(AS_IT_COMES)),
    flag("terminal-rows", Value, Ignored(AS_IT_COMES)),
    flag("default-user-env-probe", Value, Ignored("the environment `up` probed for the room's start is used")),
];

pub const READ_CONFIGURATION: &[Flag] = &[
    flag("workspace-folder", Value, Used),
    flag("config", Value, Used),
    flag("include-merged-configuration", Bool, Used),
    flag("log-format", Value, Used),
    flag("container-id", Value, Ignored("the configuration and its room are found from the workspace folder")),
    flag("id-label", Many, Ignored("the configuration and its room are found from the workspace folder")),
    flag("include-features-configuration", Bool, Ignored(NOT_YET)),
    flag("additional-features", Value, Refused(NOT_YET)),
    flag("override-config", Value, Refused(NOT_YET)),
    flag("docker-path", Value, Ignored(ENGINE_API)),
    flag("docker-compose-path", Value, Ignored(ENGINE_API)),
    flag("user-data-folder", Value, Ignored(OWN_STATE)),
    flag("mount-workspace-git-root", Bool, Ignored(GIT_MOUNTS)),
    flag("mount-git-worktree-common-dir", Bool, Ignored(GIT_MOUNTS)),
    flag("log-level", Value, Ignored(OWN_LOGS)),
    flag("terminal-columns", Value, Ignored(AS_IT_COMES)),
    flag("terminal-rows", Value, Ignored(AS_IT_COMES)),
];

/// A command line read against a command's table.
#[derive(Debug, Default)]
pub struct Parsed {
    values: BTreeMap<&'static str, Vec<String>>,
    /// The words that are not flags; for exec, the command and its arguments.
    pub positional: Vec<String>,
    /// Each accepted-and-ignored flag given, with why.
    pub ignored: Vec<(&'static str, &'static str)>,
}

impl Parsed {
    /// The last value of a flag.
    pub fn one(&self, name: &str) -> Option<&str> {
        self.values.get(name).and_then(|v| v.last()).map(String::as_str)
    }

    pub fn all(&self, name: &str) -> &[String] {
        self.values.get(name).map(Vec::as_slice).unwrap_or_default()
    }

    /// A boolean flag: given bare or as true.
    pub fn on(&self, name: &str) -> bool {
        self.one(name) == Some("true")
    }
}

/// A command line the face refuses, in one line naming the flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    #[error("devcontainer {command}: unknown flag --{flag} (docs/guide.md lists the flags workroom takes)")]
    Unknown { command: String, flag: String },
    #[error("devcontainer {command}: --{flag} takes true or false, not {value:?}")]
    NotBool { command: String, flag: String, value: String },
    #[error("devcontainer {command}: --{flag} needs a value")]
    NoValue { command: String, flag: String },
    #[error("devcontainer {command}: --{flag} is refused: {why}")]
    Refused { command: String, flag: String, why: &'static str },
    #[error("--{flag} {text:?} is not NAME=VALUE")]
    NotNameValue { flag: String, text: String },
    #[error("--mount {text:?} is not type=<bind|volume>,source=<source>,target=<target>[,external=<true|false>]")]
    NotMount { text: String },
}

/// Reads `args` (after the command's words) against `table`. With
/// `stop_at_word` (exec), the first word that is not a flag and all after
/// it are the positional words, flags or not, as `exec CMD ARGS…` needs.
/// The error is one line naming the flag.
pub fn parse(command: &str, table: &[Flag], args: &[String], stop_at_word: bool) -> Result<Parsed, ArgsError> {
    let command = command.to_string();
    let mut parsed = Parsed::default();
    let mut words = args.iter().peekable();
    while let Some(word) = words.next() {
        if word == "--" {
            parsed.positional.extend(words.by_ref().cloned());
            break;
        }
        let Some(body) = word.strip_prefix("--") else {
            parsed.positional.push(word.clone());
            if stop_at_word {
                parsed.positional.extend(words.by_ref().cloned());
                break;
            }
            continue;
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let Some(flag) = table.iter().chain(GLOBAL).find(|f| f.name == name) else {
            return Err(ArgsError::Unknown { command, flag: name.to_string() });
        };
        let value = match (flag.kind, inline) {
            (Kind::Bool, Some(v)) => match bool_word(&v) {
                Some(b) => b.to_string(),
                None => return Err(ArgsError::NotBool { command, flag: name.to_string(), value: v }),
            },
            (Kind::Bool, None) => match words.peek().and_then(|w| bool_word(w)) {
                Some(b) => {
                    words.next();
                    b.to_string()
                }
                None => "true".to_string(),
            },
            (_, Some(v)) => v,
            (_, None) => match words.next() {
                Some(v) => v.clone(),
                None => return Err(ArgsError::NoValue { command, flag: name.to_string() }),
            },
        };
        match flag.use_ {
            Use::Refused(why) => return Err(ArgsError::Refused { command, flag: name.to_string(), why }),
            Use::Ignored(why) => {
                if !parsed.ignored.iter().any(|(n, _)| *n == flag.name) {
                    parsed.ignored.push((flag.name, why));
                }
            }
            Use::Used => {}
        }
        parsed.values.entry(flag.name).or_default().push(value);
    }
    Ok(parsed)
}

fn bool_word(word: &str) -> Option<bool> {
    match word {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// `NAME=VALUE` of `--remote-env` and `--id-label`.
pub fn name_value(flag: &str, text: &str) -> Result<(String, String), ArgsError> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(ArgsError::NotNameValue { flag: flag.to_string(), text: text.to_string() }),
    }
}

/// The reference's `--mount type=<bind|volume>,source=<source>,target=<target>[,external=<true|false>]`
/// as the engine's mount spec (`external` is the reference's own key: it
/// says a volume is not to be made, which the engine never does anyway).
pub fn mount_spec(text: &str) -> Result<String, ArgsError> {
    let mut kind = None;
    let mut target = None;
    let mut kept = Vec::new();
    for part in text.split(',') {
        let (key, value) = part.split_once('=').unwrap_or((part, ""));
        match key {
            "type" => kind = Some(value),
            "target" | "dst" | "destination" => target = Some(value),
            "external" => continue,
            _ => {}
        }
        kept.push(part);
    }
    match (kind, target) {
        (Some("bind" | "volume"), Some(t)) if !t.is_empty() => Ok(kept.join(",")),
        _ => Err(ArgsError::NotMount { text: text.to_string() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn flags_take_values_spaced_or_after_an_equals_sign_and_repeat() {
        let p = parse(
            "up",
            UP,
            &words(
                "--workspace-folder /w --mount=type=bind,source=/a,target=/b --mount type=volume,source=v,target=/v",
            ),
            false,
        )
        .unwrap();
        assert_eq!(p.one("workspace-folder"), Some("/w"));
        assert_eq!(p.all("mount"), ["type=bind,source=/a,target=/b", "type=volume,source=v,target=/v"]);
    }

    #[test]
    fn a_boolean_flag_is_bare_or_takes_true_or_false_as_yargs_reads_it() {
        let p = parse(
            "up",
            UP,
            &words("--remove-existing-container --skip-post-attach false --expect-existing-container=true"),
            false,
        )
        .unwrap();
        assert!(p.on("remove-existing-container"));
        assert!(!p.on("skip-post-attach"));
        assert!(p.on("expect-existing-container"));
        let e = parse("up", UP, &words("--skip-post-attach=yes"), false).unwrap_err().to_string();
        assert_eq!(e, "devcontainer up: --skip-post-attach takes true or false, not \"yes\"");
    }

    #[test]
    fn an_unknown_flag_is_one_line_naming_it() {
        let e = parse("up", UP, &words("--workspace-folder /w --frobnicate"), false).unwrap_err().to_string();
        assert_eq!(e.lines().count(), 1);
        assert!(e.contains("unknown flag --frobnicate"), "{e}");
    }

    #[test]
    fn a_refused_flag_says_why_and_an_ignored_one_is_listed_once_with_why() {
        let e = parse("up", UP, &words("--additional-features {}"), false).unwrap_err().to_string();
        assert!(e.starts_with("devcontainer up: --additional-features is refused: not yet"), "{e}");
        let p = parse("up", UP, &words("--log-level debug --log-level trace --docker-path /x"), false).unwrap();
        assert_eq!(p.ignored, [("log-level", OWN_LOGS), ("docker-path", ENGINE_API)]);
    }

    #[test]
    fn exec_takes_the_command_and_its_flags_after_the_first_word_without_a_double_dash() {
        let p = parse("exec", EXEC, &words("--workspace-folder /w ls -la --color=never"), true).unwrap();
        assert_eq!(p.one("workspace-folder"), Some("/w"));
        assert_eq!(p.positional, ["ls", "-la", "--color=never"]);
        let p = parse("exec", EXEC, &words("--container-id abc -- sh -c true"), true).unwrap();
        assert_eq!(p.positional, ["sh", "-c", "true"]);
    }

    #[test]
    fn a_value_flag_at_the_end_without_its_value_is_refused() {
        assert_eq!(
            parse("exec", EXEC, &words("--container-id"), true).unwrap_err().to_string(),
            "devcontainer exec: --container-id needs a value"
        );
    }

    #[test]
    fn the_references_mount_form_becomes_the_engines_without_external() {
        assert_eq!(
            mount_spec("type=volume,source=v,target=/v,external=true").unwrap(),
            "type=volume,source=v,target=/v"
        );
        assert_eq!(mount_spec("type=bind,source=/a,target=/b").unwrap(), "type=bind,source=/a,target=/b");
        assert_eq!(
            mount_spec("source=/a,target=/b").unwrap_err().to_string(),
            "--mount \"source=/a,target=/b\" is not type=<bind|volume>,source=<source>,target=<target>[,external=<true|false>]"
        );
        assert!(mount_spec("type=tmpfs,target=/b").is_err());
        assert!(mount_spec("type=bind,source=/a").is_err());
    }

    #[test]
    fn name_value_needs_a_name_and_keeps_equals_signs_in_the_value() {
        assert_eq!(name_value("remote-env", "A=b=c").unwrap(), ("A".into(), "b=c".into()));
        assert_eq!(name_value("remote-env", "=x").unwrap_err().to_string(), "--remote-env \"=x\" is not NAME=VALUE");
        assert!(name_value("remote-env", "novalue").is_err());
    }
}
