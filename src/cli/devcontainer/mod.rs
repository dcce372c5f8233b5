//! The devcontainer face: the reference CLI's command lines, for the
//! programs that drive it (devcontainers/ci, Coder's agent, VS Code, CI
//! scripts). The same binary takes them when run as `devcontainer` (a link
//! to it) or as `workroom devcontainer ARGS…`.
//!
//! Each command calls the room operation the workroom command calls
//! (`room::up::up`, `room::build::build`, `exec_cmd`, `config_cmd::read`)
//! and keeps the reference's contract: the result is one JSON line on
//! stdout (`{"outcome":"error","message":…,"description":…}` and exit
//! status 1 when it failed), logs go to stderr as text or, with
//! `--log-format json`, as the reference's JSON lines. What the face cannot
//! do is refused or said to be ignored, in one line; `args.rs`' tables say
//! which, and docs/guide.md's table is held to them by a test.
//!
//! # Layout
//!
//! - `args`: the command lines, read against each command's flag table;
//! - `log`: stderr, as text or JSON lines;
//! - `up`: `up`, `run-user-commands` and `set-up` (a room made or found,
//!   its hooks run);
//! - `build`: `build`;
//! - `exec`: `exec` and `read-configuration`;
//! - `features`: `outdated`, `upgrade`, `features info` and `features
//!   resolve-dependencies`.

mod args;
mod build;
mod exec;
mod features;
mod log;
mod up;

use crate::config::{LoadRequest, Loaded};
use crate::room::resolve::Resolved;
use args::Parsed;
use log::{Format, Log};
use serde_json::{json, Value};
use std::path::PathBuf;

/// The file name this binary answers to as the reference CLI.
pub const FACE_NAME: &str = "devcontainer";

/// Whether the program was started as `devcontainer` (argv[0]'s file name).
pub fn is_face(argv0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(argv0).file_name().is_some_and(|n| n == FACE_NAME)
}

/// The reference's exit status for a command that failed.
const EXIT_FAILED: i32 = 1;

/// Runs a reference command line (the words after `devcontainer`); the
/// result is the process's exit status. `linked`: run as `devcontainer`,
/// not as `workroom devcontainer` (whose main set up the logs already).
pub fn main(words: Vec<String>, linked: bool) -> i32 {
    let format = Format::asked(&words);
    // Every line on stderr goes through the log from here on, the room
    // code's and the hooks' output included, so `--log-format json` holds
    // for all of them. Not for exec: the command's own stderr is its
    // output, passed through untouched.
    let exec = matches!(command_of(&words), Ok((Command::Exec, _)));
    let relay = match format {
        Format::Json if !exec => match log::JsonStderr::install() {
            Ok(relay) => Some(relay),
            Err(e) => {
                eprintln!("devcontainer: cannot relay stderr as JSON lines: {e}");
                return EXIT_FAILED;
            }
        },
        Format::Json | Format::Text => None,
    };
    if linked {
        // What `workroom`'s own main sets up, said through the face's log.
        let log = Log(format);
        if let Some(line) = crate::logs::init() {
            log.warn(&line);
        }
        crate::engine::on_silence(move |line| log.info(&format!("workroom: {line}")));
    }
    let code = dispatch(&words, Log(format));
    if let Some(relay) = relay {
        relay.finish();
    }
    code
}

/// What each reference command is to workroom.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Command {
    Up,
    Build,
    Exec,
    ReadConfiguration,
    RunUserCommands,
    SetUp,
    Outdated,
    Upgrade,
    FeaturesInfo,
    FeaturesResolveDependencies,
    /// An authoring command: for Feature and Template authors, which
    /// workroom leaves to the reference CLI.
    Authoring(String),
}

impl Command {
    /// Its name, its flags, and whether the first word that is not a flag
    /// starts words that are the command's own (`exec CMD ARGS…`).
    fn table(&self) -> (&'static str, &'static [args::Flag]) {
        match self {
            Command::Up => ("up", args::UP),
            Command::Build => ("build", args::BUILD),
            Command::Exec => ("exec", args::EXEC),
            Command::ReadConfiguration => ("read-configuration", args::READ_CONFIGURATION),
            Command::RunUserCommands => ("run-user-commands", args::RUN_USER_COMMANDS),
            Command::SetUp => ("set-up", args::SET_UP),
            Command::Outdated => ("outdated", args::OUTDATED),
            Command::Upgrade => ("upgrade", args::UPGRADE),
            Command::FeaturesInfo => ("features info", args::FEATURES_INFO),
            Command::FeaturesResolveDependencies => {
                ("features resolve-dependencies", args::FEATURES_RESOLVE_DEPENDENCIES)
            }
            Command::Authoring(_) => ("", &[]),
        }
    }

    /// How many words it takes that are not flags (`None`: any number).
    fn positional(&self) -> Option<usize> {
        match self {
            Command::Exec => None,
            // `build [path]`: the reference takes and ignores it.
            Command::Build => Some(1),
            Command::FeaturesInfo => Some(2),
            _ => Some(0),
        }
    }
}

/// A command word the face cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum CommandError {
    #[error("devcontainer: no command given (up, build, exec, read-configuration, …; docs/guide.md lists them)")]
    None,
    #[error("devcontainer: unknown command {word:?} (docs/guide.md lists the commands)")]
    Unknown { word: String },
}

fn command_of(words: &[String]) -> Result<(Command, usize), CommandError> {
    let first = words.iter().position(|w| !w.starts_with("--"));
    let Some(at) = first else { return Err(CommandError::None) };
    let second = words.get(at + 1).map(String::as_str);
    Ok(match words[at].as_str() {
        "up" => (Command::Up, at + 1),
        "build" => (Command::Build, at + 1),
        "exec" => (Command::Exec, at + 1),
        "read-configuration" => (Command::ReadConfiguration, at + 1),
        "run-user-commands" => (Command::RunUserCommands, at + 1),
        "set-up" => (Command::SetUp, at + 1),
        "outdated" => (Command::Outdated, at + 1),
        "upgrade" => (Command::Upgrade, at + 1),
        "features" if second == Some("info") => (Command::FeaturesInfo, at + 2),
        "features" if second == Some("resolve-dependencies") => (Command::FeaturesResolveDependencies, at + 2),
        "features" | "templates" => {
            let sub = second.filter(|s| !s.starts_with("--")).map(|s| format!(" {s}")).unwrap_or_default();
            (Command::Authoring(format!("{}{sub}", words[at])), at + 2)
        }
        other => return Err(CommandError::Unknown { word: other.to_string() }),
    })
}

fn dispatch(words: &[String], log: Log) -> i32 {
    // `--version` and `--help` alone, as callers probe a CLI before using it.
    // The version is workroom's: claiming the reference's would be a lie.
    match words {
        // A closed stdout (`devcontainer --version | true`) is a quiet
        // end, as for any of our output; nothing else can fail here.
        [only] if only == "--version" => {
            let _ = crate::output::print(&format!("{}\n", env!("CARGO_PKG_VERSION")));
            return 0;
        }
        [only] if only == "--help" => {
            let _ = crate::output::print(
                "devcontainer <command> (workroom's devcontainer face)\n\n\
                 up, build, exec, read-configuration, run-user-commands, set-up, outdated, upgrade,\n\
                 features info and features resolve-dependencies take the reference CLI's command lines;\n\
                 docs/guide.md, \"Using workroom where the devcontainer CLI is expected\", lists every flag.\n",
            );
            return 0;
        }
        _ => {}
    }
    let (command, rest) = match command_of(words) {
        Ok(found) => found,
        Err(e) => {
            log.error(&e.to_string());
            return EXIT_FAILED;
        }
    };
    if let Command::Authoring(name) = &command {
        log.error(&format!(
            "devcontainer {name}: not provided: workroom runs rooms, and leaves authoring and publishing \
             Features and Templates to the reference CLI"
        ));
        return EXIT_FAILED;
    }
    // Flags before the command word are the reference's global ones.
    let rest: Vec<String> =
        words[..rest].iter().filter(|w| w.starts_with("--")).chain(&words[rest..]).cloned().collect();
    let (name, table) = command.table();
    let parsed = match args::parse(name, table, &rest, command.positional().is_none()) {
        Ok(parsed) => parsed,
        Err(e) => {
            log.error(&e.to_string());
            return EXIT_FAILED;
        }
    };
    if let Some(most) = command.positional() {
        if let Some(extra) = parsed.positional.get(most) {
            log.error(&format!("devcontainer {name}: unexpected word {extra:?} (docs/guide.md lists the flags)"));
            return EXIT_FAILED;
        }
    }
    for (flag, why) in &parsed.ignored {
        log.info(&format!("devcontainer {name}: --{flag} is accepted and ignored: {why}"));
    }
    for (flag, choices) in [("log-format", &["text", "json"][..]), ("output-format", &["text", "json"][..])] {
        if let Some(given) = parsed.one(flag).filter(|f| !choices.contains(f)) {
            log.error(&format!("devcontainer {name}: --{flag} takes {}, not {given:?}", choices.join(" or ")));
            return EXIT_FAILED;
        }
    }
    match command {
        Command::Up => up::up(&parsed, log),
        Command::RunUserCommands => up::run_user_commands(&parsed, log),
        Command::SetUp => up::set_up(&parsed, log),
        Command::Build => build::build(&parsed, log),
        Command::Exec => exec::exec(&parsed, log),
        Command::ReadConfiguration => exec::read_configuration(&parsed, log),
        Command::Outdated => features::outdated(&parsed, log),
        Command::Upgrade => features::upgrade(&parsed, log),
        Command::FeaturesInfo => features::info(&parsed, log),
        Command::FeaturesResolveDependencies => features::resolve_dependencies(&parsed, log),
        Command::Authoring(_) => EXIT_FAILED,
    }
}

/// The configuration a command line names: its workspace folder (the
/// current one by default), `--config`, `--override-config` and
/// `--mount-workspace-git-root`, as the reference reads them.
fn load_request(p: &Parsed) -> LoadRequest {
    LoadRequest {
        override_config: p.one("override-config").map(PathBuf::from),
        mount_git_root: p.on_unless_false("mount-workspace-git-root"),
        ..LoadRequest::new(p.one("workspace-folder").unwrap_or("."), p.one("config").map(PathBuf::from))
    }
}

/// `--additional-features`, after the file's own: one the file names
/// already is the file's, as the reference merges them.
fn add_features(loaded: &mut Loaded, extra: &[(String, Value)]) {
    for (id, options) in extra {
        if !loaded.model.features.iter().any(|(have, _)| have == id) {
            loaded.model.features.push((id.clone(), options.clone()));
        }
    }
}

/// The configuration and its room's settings, with the command line's
/// additional features.
fn resolved(p: &Parsed) -> anyhow::Result<Resolved> {
    let mut loaded = crate::config::load(&load_request(p))?;
    if let Some(text) = p.one("additional-features") {
        add_features(&mut loaded, &args::additional_features(text)?);
    }
    Ok(Resolved::of(loaded, Default::default())?)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

/// The reference's report on its own registry client's credential
/// lookups, in every result it prints; workroom pulls through the engine
/// and its own fetches ask no such questions, so none would be blocked.
fn oci_auth_diagnostics() -> Value {
    json!({
        "authLookupWouldBeBlocked": false,
        "registryRedirectWouldPreventCredentialForwarding": false,
        "authServerRedirect": false,
    })
}

/// Prints a command's result line: its value, or the reference's error
/// result for what failed; the exit status (1 for an error, as the
/// reference's).
fn finish(name: &str, log: Log, result: anyhow::Result<Value>) -> i32 {
    let line = match result {
        Ok(value) => value,
        Err(e) => {
            let (message, description) = match e.downcast_ref::<up::Described>() {
                Some(d) => (d.message.clone(), d.description.clone()),
                None => (e.chain().map(ToString::to_string).collect::<Vec<_>>().join(": "), e.to_string()),
            };
            log.error(&message);
            json!({ "outcome": "error", "message": message, "description": description })
        }
    };
    let failed = line["outcome"] == "error";
    if let Err(e) = crate::output::print_json_line(&line) {
        log.error(&format!("devcontainer {name}: cannot print the result: {e}"));
        return EXIT_FAILED;
    }
    if failed {
        EXIT_FAILED
    } else {
        0
    }
}

/// A file's path as the reference prints it: VS Code's URI object.
fn file_uri(path: &str) -> Value {
    json!({ "$mid": 1, "fsPath": path, "path": path, "scheme": "vscode-fileHost" })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn the_face_answers_to_devcontainer_through_any_folder() {
        assert!(is_face(std::ffi::OsStr::new("/usr/local/bin/devcontainer")));
        assert!(is_face(std::ffi::OsStr::new("devcontainer")));
        assert!(!is_face(std::ffi::OsStr::new("/usr/bin/workroom")));
        assert!(!is_face(std::ffi::OsStr::new("devcontainer-cli")));
    }

    #[test]
    fn commands_are_found_after_global_flags_and_authoring_ones_are_named() {
        assert!(matches!(command_of(&words("--oci-auth-hardening up --workspace-folder /w")), Ok((Command::Up, 2))));
        assert!(matches!(command_of(&words("features info tags ghcr.io/x")), Ok((Command::FeaturesInfo, 2))));
        assert!(matches!(command_of(&words("build --image-name x")), Ok((Command::Build, 1))));
        match command_of(&words("templates apply --workspace-folder /w")) {
            Ok((Command::Authoring(name), 2)) => assert_eq!(name, "templates apply"),
            _ => panic!("templates apply is an authoring command"),
        }
        match command_of(&words("features publish ./src")) {
            Ok((Command::Authoring(name), 2)) => assert_eq!(name, "features publish"),
            _ => panic!("features publish is an authoring command"),
        }
        let e = command_of(&words("frobnicate")).err().unwrap();
        assert_eq!(e, CommandError::Unknown { word: "frobnicate".into() });
        assert!(e.to_string().contains("unknown command \"frobnicate\""), "{e}");
        assert_eq!(command_of(&words("--log-format=json")).err(), Some(CommandError::None));
    }

    #[test]
    fn additional_features_follow_the_files_and_one_it_names_stays_the_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".devcontainer.json"), r#"{ "image": "x", "features": { "./a": { "o": 1 } } }"#)
            .unwrap();
        let mut loaded = crate::config::load(&LoadRequest::new(dir.path(), None)).unwrap();
        add_features(&mut loaded, &[("./a".into(), json!({ "o": 2 })), ("./b".into(), json!({}))]);
        assert_eq!(loaded.model.features, vec![("./a".to_string(), json!({ "o": 1 })), ("./b".into(), json!({}))]);
    }

    #[test]
    fn a_configuration_path_is_printed_as_the_references_uri_object() {
        assert_eq!(file_uri("/w/.devcontainer.json")["fsPath"], "/w/.devcontainer.json");
        assert_eq!(file_uri("/w/.devcontainer.json")["scheme"], "vscode-fileHost");
    }
}
