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
const COMPOSE_ON_PATH: &str = "workroom runs `docker compose`, else `docker-compose`, from the PATH";
const OWN_STATE: &str = "workroom keeps its state in its own folders and in the room's daemon folder";
const OWN_LOGS: &str = "workroom's diagnostic logs are asked for with WORKROOM_LOG=debug";
const AS_IT_COMES: &str = "output is passed on as it comes, not rendered for a terminal size";
const WORKTREE_ROOMS: &str =
    "workroom binds a worktree's or submodule's git folder itself, and keeps the other worktrees safe (docs/adr/0013)";
const NOT_YET: &str = "not yet supported by workroom's devcontainer face";
const CLASSIC_BUILDER: &str = "the engine's classic builder builds, which has no BuildKit";
const CACHE_TO: &str = "the classic builder exports no cache; the engine's own cache is kept";
const ALWAYS_LOCKED: &str = "workroom reads and writes the lockfile unless --no-lockfile";
const NO_SYNTAX: &str = "workroom's generated Dockerfiles carry no syntax directive";
const NO_AUTO_MAPPING: &str = "only the reference's renamed features (gradle, maven, jupyterlab) are mapped, always";
const SECRETS: &str =
    "its values would reach the hooks but not be masked in their output, as the reference masks them; not yet";
const ID_LABEL_FIND: &str = "the configuration and its room are found from the workspace folder";

/// Flags every command of the reference takes.
const GLOBAL: &[Flag] = &[
    flag("oci-auth-hardening", Bool, Ignored(NO_OCI_AUTH)),
    flag("allow-cross-origin-auth-host", Many, Ignored(NO_OCI_AUTH)),
];

pub const UP: &[Flag] = &[
    flag("workspace-folder", Value, Used),
    flag("config", Value, Used),
    flag("override-config", Value, Used),
    flag("log-format", Value, Used),
    flag("mount", Many, Used),
    flag("id-label", Many, Used),
    flag("remove-existing-container", Bool, Used),
    flag("expect-existing-container", Bool, Used),
    flag("skip-post-attach", Bool, Used),
    flag("skip-post-create", Bool, Used),
    flag("skip-non-blocking-commands", Bool, Used),
    flag("remote-env", Many, Used),
    flag("additional-features", Value, Used),
    flag("build-no-cache", Bool, Used),
    flag("cache-from", Many, Used),
    flag("default-user-env-probe", Value, Used),
    flag("update-remote-user-uid-default", Value, Used),
    flag("mount-workspace-git-root", Bool, Used),
    flag("include-configuration", Bool, Used),
    flag("include-merged-configuration", Bool, Used),
    flag("no-lockfile", Bool, Used),
    flag("frozen-lockfile", Bool, Used),
    flag("experimental-frozen-lockfile", Bool, Used),
    flag("experimental-lockfile", Bool, Ignored(ALWAYS_LOCKED)),
    flag("prebuild", Bool, Used),
    flag("secrets-file", Value, Refused(SECRETS)),
    flag("dotfiles-repository", Value, Used),
    flag("dotfiles-install-command", Value, Used),
    flag("dotfiles-target-path", Value, Used),
    flag("cache-to", Many, Ignored(CACHE_TO)),
    flag("buildkit", Value, Ignored(CLASSIC_BUILDER)),
    flag("docker-path", Value, Ignored(ENGINE_API)),
    flag("docker-compose-path", Value, Ignored(COMPOSE_ON_PATH)),
    flag("container-data-folder", Value, Ignored(OWN_STATE)),
    flag("container-system-data-folder", Value, Ignored(OWN_STATE)),
    flag("container-session-data-folder", Value, Ignored(OWN_STATE)),
    flag("user-data-folder", Value, Ignored(OWN_STATE)),
    flag("workspace-mount-consistency", Value, Ignored("a Docker Desktop for Mac option; engines on Linux ignore it")),
    flag("gpu-availability", Value, Ignored("hostRequirements.gpu is a warning in workroom")),
    flag("mount-git-worktree-common-dir", Bool, Ignored(WORKTREE_ROOMS)),
    flag("log-level", Value, Ignored(OWN_LOGS)),
    flag("terminal-columns", Value, Ignored(AS_IT_COMES)),
    flag("terminal-rows", Value, Ignored(AS_IT_COMES)),
    flag("skip-feature-auto-mapping", Bool, Ignored(NO_AUTO_MAPPING)),
    flag("omit-config-remote-env-from-metadata", Bool, Refused(NOT_YET)),
    flag("omit-syntax-directive", Bool, Ignored(NO_SYNTAX)),
];

pub const BUILD: &[Flag] = &[
    flag("workspace-folder", Value, Used),
    flag("config", Value, Used),
    flag("log-format", Value, Used),
    flag("image-name", Many, Used),
    flag("no-cache", Bool, Used),
    flag("platform", Value, Used),
    flag("push", Bool, Used),
    flag("label", Many, Used),
    flag("cache-from", Many, Used),
    flag("additional-features", Value, Used),
    flag("no-lockfile", Bool, Used),
    flag("frozen-lockfile", Bool, Used),
    flag("experimental-frozen-lockfile", Bool, Used),
    flag("experimental-lockfile", Bool, Ignored(ALWAYS_LOCKED)),
    flag("cache-to", Value, Ignored(CACHE_TO)),
    flag("buildkit", Value, Ignored(CLASSIC_BUILDER)),
    flag("output", Value, Refused("workroom builds into the engine's image store; --output is BuildKit's exporter")),
    flag("docker-path", Value, Ignored(ENGINE_API)),
    flag("docker-compose-path", Value, Ignored(COMPOSE_ON_PATH)),
    flag("user-data-folder", Value, Ignored(OWN_STATE)),
    flag("log-level", Value, Ignored(OWN_LOGS)),
    flag("skip-feature-auto-mapping", Bool, Ignored(NO_AUTO_MAPPING)),
    flag(
        "skip-persisting-customizations-from-features",
        Bool,
        Ignored("features' customizations are kept in the image's label"),
    ),
    flag("omit-syntax-directive", Bool, Ignored(NO_SYNTAX)),
];

pub const EXEC: &[Flag] = &[
    flag("workspace-folder", Value, Used),
    flag("config", Value, Used),
    flag("override-config", Value, Used),
    flag("container-id", Value, Used),
    flag("remote-env", Many, Used),
    flag("log-format", Value, Used),
    flag("id-label", Many, Used),
    flag("mount-workspace-git-root", Bool, Used),
    flag("docker-path", Value, Ignored(ENGINE_API)),
    flag("docker-compose-path", Value, Ignored(COMPOSE_ON_PATH)),
    flag("container-data-folder", Value, Ignored(OWN_STATE)),
    flag("container-system-data-folder", Value, Ignored(OWN_STATE)),
    flag("user-data-folder", Value, Ignored(OWN_STATE)),
    flag("mount-git-worktree-common-dir", Bool, Ignored(WORKTREE_ROOMS)),
    flag("log-level", Value, Ignored(OWN_LOGS)),
    flag("terminal-columns", Value, Ignored(AS_IT_COMES)),
    flag("terminal-rows", Value, Ignored(AS_IT_COMES)),
    flag("default-user-env-probe", Value, Ignored("the environment `up` probed for the room's start is used")),
    flag("skip-feature-auto-mapping", Bool, Ignored(NO_AUTO_MAPPING)),
];

pub const READ_CONFIGURATION: &[Flag] = &[
    flag("workspace-folder", Value, Used),
    flag("config", Value, Used),
    flag("override-config", Value, Used),
    flag("include-merged-configuration", Bool, Used),
    flag("additional-features", Value, Used),
    flag("mount-workspace-git-root", Bool, Used),
    flag("log-format", Value, Used),
    flag("container-id", Value, Ignored(ID_LABEL_FIND)),
    flag("id-label", Many, Ignored(ID_LABEL_FIND)),
    flag("include-features-configuration", Bool, Refused(NOT_YET)),
    flag("docker-path", Value, Ignored(ENGINE_API)),
    flag("docker-compose-path", Value, Ignored(COMPOSE_ON_PATH)),
    flag("user-data-folder", Value, Ignored(OWN_STATE)),
    flag("mount-git-worktree-common-dir", Bool, Ignored(WORKTREE_ROOMS)),
    flag("log-level", Value, Ignored(OWN_LOGS)),
    flag("terminal-columns", Value, Ignored(AS_IT_COMES)),
    flag("terminal-rows", Value, Ignored(AS_IT_COMES)),
    flag("skip-feature-auto-mapping", Bool, Ignored(NO_AUTO_MAPPING)),
];

pub const RUN_USER_COMMANDS: &[Flag] = &[
    flag("workspace-folder", Value, Used),
    flag("config", Value, Used),
    flag("override-config", Value, Used),
    flag("container-id", Value, Used),
    flag("id-label", Many, Used),
    flag("mount-workspace-git-root", Bool, Used),
    flag("log-format", Value, Used),
    flag("remote-env", Many, Used),
    flag("skip-post-attach", Bool, Used),
    flag("skip-non-blocking-commands", Bool, Used),
    flag("stop-for-personalization", Bool, Used),
    flag("default-user-env-probe", Value, Used),
    flag("prebuild", Bool, Used),
    flag("secrets-file", Value, Refused(SECRETS)),
    flag("dotfiles-repository", Value, Used),
    flag("dotfiles-install-command", Value, Used),
    flag("dotfiles-target-path", Value, Used),
    flag("docker-path", Value, Ignored(ENGINE_API)),
    flag("docker-compose-path", Value, Ignored(COMPOSE_ON_PATH)),
    flag("container-data-folder", Value, Ignored(OWN_STATE)),
    flag("container-system-data-folder", Value, Ignored(OWN_STATE)),
    flag("container-session-data-folder", Value, Ignored(OWN_STATE)),
    flag("user-data-folder", Value, Ignored(OWN_STATE)),
    flag("mount-git-worktree-common-dir", Bool, Ignored(WORKTREE_ROOMS)),
    flag("log-level", Value, Ignored(OWN_LOGS)),
    flag("terminal-columns", Value, Ignored(AS_IT_COMES)),
    flag("terminal-rows", Value, Ignored(AS_IT_COMES)),
    flag("skip-feature-auto-mapping", Bool, Ignored(NO_AUTO_MAPPING)),
];

pub const SET_UP: &[Flag] = &[
    flag("container-id", Value, Used),
    flag("config", Value, Used),
    flag("log-format", Value, Used),
    flag("remote-env", Many, Used),
    flag("skip-post-create", Bool, Used),
    flag("skip-non-blocking-commands", Bool, Used),
    flag("default-user-env-probe", Value, Used),
    flag("include-configuration", Bool, Used),
    flag("include-merged-configuration", Bool, Used),
    flag("dotfiles-repository", Value, Used),
    flag("dotfiles-install-command", Value, Used),
    flag("dotfiles-target-path", Value, Used),
    flag("docker-path", Value, Ignored(ENGINE_API)),
    flag("container-data-folder", Value, Ignored(OWN_STATE)),
    flag("container-system-data-folder", Value, Ignored(OWN_STATE)),
    flag("container-session-data-folder", Value, Ignored(OWN_STATE)),
    flag("user-data-folder", Value, Ignored(OWN_STATE)),
    flag("log-level", Value, Ignored(OWN_LOGS)),
    flag("terminal-columns", Value, Ignored(AS_IT_COMES)),
    flag("terminal-rows", Value, Ignored(AS_IT_COMES)),
];

pub const OUTDATED: &[Flag] = &[
    flag("workspace-folder", Value, Used),
    flag("config", Value, Used),
    flag("output-format", Value, Used),
    flag("log-format", Value, Used),
    flag("log-level", Value, Ignored(OWN_LOGS)),
    flag("user-data-folder", Value, Ignored(OWN_STATE)),
    flag("terminal-columns", Value, Ignored(AS_IT_COMES)),
    flag("terminal-rows", Value, Ignored(AS_IT_COMES)),
];

pub const UPGRADE: &[Flag] = &[
    flag("workspace-folder", Value, Used),
    flag("config", Value, Used),
    flag("dry-run", Bool, Used),
    flag("feature", Value, Refused(NOT_YET)),
    flag("target-version", Value, Refused(NOT_YET)),
    flag("docker-path", Value, Ignored(ENGINE_API)),
    flag("docker-compose-path", Value, Ignored(COMPOSE_ON_PATH)),
    flag("log-level", Value, Ignored(OWN_LOGS)),
];

pub const FEATURES_INFO: &[Flag] = &[flag("output-format", Value, Used), flag("log-level", Value, Ignored(OWN_LOGS))];

pub const FEATURES_RESOLVE_DEPENDENCIES: &[Flag] =
    &[flag("workspace-folder", Value, Used), flag("log-level", Value, Ignored(OWN_LOGS))];

/// Every command's table, for the guide's (a test holds them equal).
#[cfg(test)]
pub const TABLES: &[(&str, &[Flag])] = &[
    ("up", UP),
    ("build", BUILD),
    ("exec", EXEC),
    ("read-configuration", READ_CONFIGURATION),
    ("run-user-commands", RUN_USER_COMMANDS),
    ("set-up", SET_UP),
    ("outdated", OUTDATED),
    ("upgrade", UPGRADE),
    ("features info", FEATURES_INFO),
    ("features resolve-dependencies", FEATURES_RESOLVE_DEPENDENCIES),
    ("every command", GLOBAL),
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

    /// A boolean flag whose default is true: on unless given as false.
    pub fn on_unless_false(&self, name: &str) -> bool {
        self.one(name) != Some("false")
    }

    /// Each `NAME=VALUE` of a repeatable flag.
    pub fn pairs(&self, name: &str) -> Result<Vec<(String, String)>, ArgsError> {
        self.all(name).iter().map(|text| name_value(name, text)).collect()
    }
}

/// A command line the face refuses, in one line naming the flag and
/// carrying what was given.
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
    #[error("--additional-features {text:?} is not a JSON object of feature ids and their options")]
    FeaturesNotObject { text: String },
    /// The parser's own words, kept as text: as a source they would be
    /// said twice in the face's result line, which joins the chain.
    #[error("--additional-features is not JSON ({error})")]
    FeaturesNotJson { text: String, error: String },
    #[error(
        "--default-user-env-probe takes none, loginShell, loginInteractiveShell or interactiveShell, not {value:?}"
    )]
    NotUserEnvProbe { value: String },
    #[error("--update-remote-user-uid-default takes never, on or off, not {value:?}")]
    NotUidDefault { value: String },
    #[error("--platform {text:?} is not os/arch[/variant] (linux/amd64, linux/arm64)")]
    NotPlatform { text: String },
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
        let find = |name: &str| table.iter().chain(GLOBAL).find(|f| f.name == name);
        // yargs reads `--no-NAME` as `--NAME false` for a boolean that is not
        // itself named so (`--no-cache` and `--no-lockfile` are flags).
        let negated = match (find(name), name.strip_prefix("no-").and_then(find)) {
            (None, Some(f)) if f.kind == Kind::Bool && inline.is_none() => Some(f),
            _ => None,
        };
        let Some(flag) = find(name).or(negated) else {
            return Err(ArgsError::Unknown { command, flag: name.to_string() });
        };
        let name = flag.name;
        let value = match (flag.kind, inline) {
            (Kind::Bool, None) if negated.is_some() => "false".to_string(),
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

/// `--additional-features '{"id": {options}, …}'`: the features, in the
/// order written.
pub fn additional_features(text: &str) -> Result<Vec<(String, serde_json::Value)>, ArgsError> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(features)) => Ok(features.into_iter().collect()),
        Ok(_) => Err(ArgsError::FeaturesNotObject { text: text.to_string() }),
        Err(e) => Err(ArgsError::FeaturesNotJson { text: text.to_string(), error: e.to_string() }),
    }
}

/// `--default-user-env-probe`'s value.
pub fn user_env_probe(text: &str) -> Result<crate::config::UserEnvProbe, ArgsError> {
    use crate::config::UserEnvProbe as P;
    Ok(match text {
        "none" => P::None,
        "loginShell" => P::LoginShell,
        "loginInteractiveShell" => P::LoginInteractiveShell,
        "interactiveShell" => P::InteractiveShell,
        other => return Err(ArgsError::NotUserEnvProbe { value: other.to_string() }),
    })
}

/// `--update-remote-user-uid-default`'s value.
pub fn uid_default(text: &str) -> Result<crate::room::hooks::UidDefault, ArgsError> {
    use crate::room::hooks::UidDefault as U;
    match text {
        "never" => Ok(U::Never),
        "on" => Ok(U::On),
        "off" => Ok(U::Off),
        other => Err(ArgsError::NotUidDefault { value: other.to_string() }),
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
        let e = parse("up", UP, &words("--secrets-file s.json"), false).unwrap_err().to_string();
        assert!(e.starts_with("devcontainer up: --secrets-file is refused: its values"), "{e}");
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
    fn a_boolean_is_negated_by_no_as_yargs_does_unless_the_no_flag_is_one_itself() {
        let p = parse("up", UP, &words("--no-mount-workspace-git-root --no-lockfile"), false).unwrap();
        assert!(!p.on_unless_false("mount-workspace-git-root"));
        assert!(p.on("no-lockfile"));
        let p = parse("build", BUILD, &words("--no-cache"), false).unwrap();
        assert!(p.on("no-cache"));
        assert!(parse("up", UP, &words("--no-workspace-folder"), false).is_err(), "only booleans are negated");
    }

    #[test]
    fn additional_features_are_an_object_in_the_order_written() {
        let f = additional_features(r#"{"b": {"x": 1}, "a": "1"}"#).unwrap();
        assert_eq!(f.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), ["b", "a"]);
        assert_eq!(
            additional_features("[1]").unwrap_err().to_string(),
            "--additional-features \"[1]\" is not a JSON object of feature ids and their options"
        );
        let e = additional_features("{").unwrap_err();
        assert!(matches!(&e, ArgsError::FeaturesNotJson { text, .. } if text == "{"), "{e:?}");
        assert!(e.to_string().starts_with("--additional-features is not JSON (EOF while parsing"), "{e}");
    }

    #[test]
    fn the_probe_and_uid_defaults_take_the_references_words_only() {
        assert_eq!(user_env_probe("loginShell").unwrap(), crate::config::UserEnvProbe::LoginShell);
        assert_eq!(
            user_env_probe("login").unwrap_err().to_string(),
            "--default-user-env-probe takes none, loginShell, loginInteractiveShell or interactiveShell, not \"login\""
        );
        assert_eq!(uid_default("never").unwrap(), crate::room::hooks::UidDefault::Never);
        assert_eq!(uid_default("yes").unwrap_err(), ArgsError::NotUidDefault { value: "yes".into() });
        assert_eq!(
            uid_default("yes").unwrap_err().to_string(),
            "--update-remote-user-uid-default takes never, on or off, not \"yes\""
        );
    }

    /// docs/guide.md's section on the face.
    fn guide_section() -> &'static str {
        let guide = include_str!("../../../docs/guide.md");
        let section = guide.split("## 10. Using workroom where the devcontainer CLI is expected").nth(1).unwrap();
        section.split("\n## ").next().unwrap()
    }

    /// The rows of the guide's table for `command`: the flag and its cell.
    fn guide_rows(command: &str) -> Option<Vec<(String, String)>> {
        let table = guide_section().split(&format!("\n`{command}`:\n")).nth(1)?;
        let rows = table.lines().skip_while(|l| l.is_empty()).take_while(|l| l.starts_with('|')).skip(2);
        Some(
            rows.map(|row| {
                let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
                (cells[0].trim_matches('`').trim_start_matches("--").to_string(), cells[1..].join(" | "))
            })
            .collect(),
        )
    }

    #[test]
    fn the_guides_table_names_every_flag_of_every_command_as_the_tables_take_it() {
        for (command, table) in TABLES {
            if *command == "every command" {
                for f in *table {
                    assert!(guide_section().contains(&format!("`--{}`", f.name)), "the guide names --{}", f.name);
                }
                continue;
            }
            let Some(rows) = guide_rows(command) else {
                let commands = guide_section().lines().find(|l| l.starts_with(&format!("| `{command}`")));
                let commands =
                    commands.or_else(|| guide_section().lines().find(|l| l.contains(&format!("`{command}`"))));
                assert!(commands.is_some_and(|l| l.contains("not yet")), "the guide has no table for {command}");
                continue;
            };
            let flags: Vec<&str> = table.iter().map(|f| f.name).collect();
            let listed: Vec<&str> = rows.iter().map(|(f, _)| f.as_str()).collect();
            assert_eq!(listed, flags, "the guide's flags of {command}, in the table's order");
            for (f, (_, cell)) in table.iter().zip(&rows) {
                let ok = match f.use_ {
                    Use::Used => cell.starts_with("supported"),
                    Use::Ignored(why) => cell == &format!("accepted and ignored: {why}"),
                    Use::Refused(why) => cell == &format!("refused: {why}"),
                };
                assert!(ok, "{command} --{}: the guide says {cell:?}, the table {:?}", f.name, f.use_);
            }
        }
    }

    #[test]
    fn name_value_needs_a_name_and_keeps_equals_signs_in_the_value() {
        assert_eq!(name_value("remote-env", "A=b=c").unwrap(), ("A".into(), "b=c".into()));
        assert_eq!(name_value("remote-env", "=x").unwrap_err().to_string(), "--remote-env \"=x\" is not NAME=VALUE");
        assert!(name_value("remote-env", "novalue").is_err());
    }
}
