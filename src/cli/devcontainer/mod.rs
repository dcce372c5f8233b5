//! The devcontainer face: the reference CLI's command lines, for the
//! programs that drive it (devcontainers/ci, Coder's agent, VS Code, CI
//! scripts). The same binary takes them when run as `devcontainer` (a link
//! to it) or as `workroom devcontainer ARGS…`.
//!
//! Each command calls the room operation the workroom command calls
//! (`room::up::up`, `exec_cmd`, `config_cmd::read`) and keeps the
//! reference's contract: the result is one JSON line on stdout, logs go to
//! stderr as text or, with `--log-format json`, as the reference's JSON
//! lines. What the face cannot do yet is refused or said to be ignored, in
//! one line (docs/guide.md has the table).

mod args;
mod log;

use super::{RoomArgs, WorkspaceArgs};
use crate::engine::Engine;
use crate::notices::{Event, Notices};
use crate::room::resolve::{Resolved, UpFlags};
use crate::room::up;
use anyhow::{bail, Context as _};
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
enum Command {
    Up,
    Exec,
    ReadConfiguration,
    /// A reference command workroom's face has not taken on yet.
    NotYet(&'static str),
    /// An authoring command: for Feature and Template authors, which
    /// workroom leaves to the reference CLI.
    Authoring(String),
}

/// A command word the face cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum CommandError {
    #[error("devcontainer: no command given (up, exec, read-configuration; docs/guide.md lists them)")]
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
        "exec" => (Command::Exec, at + 1),
        "read-configuration" => (Command::ReadConfiguration, at + 1),
        "build" => (Command::NotYet("build"), at + 1),
        "run-user-commands" => (Command::NotYet("run-user-commands"), at + 1),
        "set-up" => (Command::NotYet("set-up"), at + 1),
        "outdated" => (Command::NotYet("outdated"), at + 1),
        "upgrade" => (Command::NotYet("upgrade"), at + 1),
        "features" if matches!(second, Some("resolve-dependencies" | "info")) => (
            Command::NotYet(if second == Some("info") { "features info" } else { "features resolve-dependencies" }),
            at + 2,
        ),
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
                 up, exec and read-configuration take the reference CLI's command lines;\n\
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
    // Flags before the command word are the reference's global ones.
    let rest: Vec<String> =
        words[..rest].iter().filter(|w| w.starts_with("--")).chain(&words[rest..]).cloned().collect();
    let (name, table, stop_at_word) = match &command {
        Command::Up => ("up", args::UP, false),
        Command::Exec => ("exec", args::EXEC, true),
        Command::ReadConfiguration => ("read-configuration", args::READ_CONFIGURATION, false),
        Command::NotYet(name) => {
            log.error(&format!(
                "devcontainer {name}: not yet provided by workroom's devcontainer face; \
                 `workroom up` builds and starts rooms (docs/guide.md)"
            ));
            return EXIT_FAILED;
        }
        Command::Authoring(name) => {
            log.error(&format!(
                "devcontainer {name}: not provided: workroom runs rooms, and leaves authoring and publishing \
                 Features and Templates to the reference CLI"
            ));
            return EXIT_FAILED;
        }
    };
    let parsed = match args::parse(name, table, &rest, stop_at_word) {
        Ok(parsed) => parsed,
        Err(e) => {
            log.error(&e.to_string());
            return EXIT_FAILED;
        }
    };
    for (flag, why) in &parsed.ignored {
        log.info(&format!("devcontainer {name}: --{flag} is accepted and ignored: {why}"));
    }
    if let Some(format) = parsed.one("log-format").filter(|f| !matches!(*f, "text" | "json")) {
        log.error(&format!("devcontainer {name}: --log-format takes text or json, not {format:?}"));
        return EXIT_FAILED;
    }
    match command {
        Command::Up => up_command(&parsed, log),
        Command::Exec => exec_command(&parsed, log),
        Command::ReadConfiguration => read_configuration(&parsed, log),
        Command::NotYet(_) | Command::Authoring(_) => EXIT_FAILED,
    }
}

fn workspace_args(p: &Parsed) -> WorkspaceArgs {
    WorkspaceArgs {
        workspace_folder: PathBuf::from(p.one("workspace-folder").unwrap_or(".")),
        config: p.one("config").map(PathBuf::from),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

/// `up`: the workspace's room, made or found, started, its due hooks run;
/// the reference's result line on stdout, success or error.
fn up_command(p: &Parsed, log: Log) -> i32 {
    let result = runtime().and_then(|rt| rt.block_on(up_room(p, log)));
    let line = match result {
        Ok(value) => value,
        Err(e) => {
            let message: Vec<String> = e.chain().map(ToString::to_string).collect();
            log.error(&message.join(": "));
            json!({ "outcome": "error", "message": message.join(": "), "description": e.to_string() })
        }
    };
    let failed = line["outcome"] != "success";
    if let Err(e) = crate::output::print_json_line(&line) {
        log.error(&format!("devcontainer up: cannot print the result: {e}"));
        return EXIT_FAILED;
    }
    if failed {
        EXIT_FAILED
    } else {
        0
    }
}

async fn up_room(p: &Parsed, log: Log) -> anyhow::Result<Value> {
    let mut resolved = workspace_args(p).resolve(Default::default())?;
    for w in resolved.warnings() {
        log.warn(&w);
    }
    add_command_line(&mut resolved, p)?;
    let engine = Engine::connect().await?;
    if p.on("expect-existing-container") && resolved.find(&engine).await?.is_none() {
        // The reference's words, which callers may match.
        bail!("The expected container does not exist.");
    }
    use crate::features::LockMode;
    let lock = match (p.on("frozen-lockfile"), p.on("no-lockfile")) {
        (true, _) => LockMode::Frozen,
        (_, true) => LockMode::Skip,
        _ => LockMode::Write,
    };
    let flags = UpFlags {
        recreate: p.on("remove-existing-container"),
        post_attach: !p.on("skip-post-attach"),
        name: None,
        lock,
    };
    // With JSON logs, a notice keeps its level; the rest is plain lines on
    // stderr, which the face's relay wraps (`log.rs`).
    let stderr = super::progress::Stderr::new();
    let notices = Notices::new(move |e| match (log.0, e) {
        (Format::Json, Event::Notice(n)) => log.notice(n),
        (_, e) => stderr.show(e),
    });
    let r = up::up(&engine, &resolved.loaded, &resolved.up_options(flags), &notices).await?;
    // Key for key and in the reference's order (a compose room's project
    // after the container), for callers that compare the text.
    let mut out = serde_json::Map::new();
    out.insert("outcome".into(), json!("success"));
    out.insert("containerId".into(), json!(r.container_id));
    if let crate::config::Source::Compose(_) = resolved.loaded.model.source {
        out.insert("composeProjectName".into(), json!(compose_project(&engine, &r.container_id).await?));
    }
    out.insert("remoteUser".into(), json!(r.remote_user));
    out.insert("remoteWorkspaceFolder".into(), json!(r.remote_workspace_folder));
    // The reference's report on its own registry client's credential
    // lookups; workroom pulls through the engine, so none happen.
    out.insert(
        "ociAuthDiagnostics".into(),
        json!({
            "authLookupWouldBeBlocked": false,
            "registryRedirectWouldPreventCredentialForwarding": false,
            "authServerRedirect": false,
        }),
    );
    let out = Value::Object(out);
    Ok(out)
}

/// The compose label the engine's compose gives every service container.
const COMPOSE_PROJECT_LABEL: &str = "com.docker.compose.project";

async fn compose_project(engine: &Engine, id: &str) -> anyhow::Result<String> {
    let c = engine.inspect_container(id).await?.with_context(|| format!("the room {id} is gone"))?;
    c.config
        .and_then(|c| c.labels)
        .and_then(|mut l| l.remove(COMPOSE_PROJECT_LABEL))
        .with_context(|| format!("the room {id} has no {COMPOSE_PROJECT_LABEL} label"))
}

/// `--mount` and `--id-label` as the reference applies them: both go on a
/// room made now, through `runArgs` as a file would put them there, so the
/// room's recorded configuration (its `devcontainer.metadata` label and the
/// hash `up` compares) is the file's alone, as the reference records none
/// of them. A room that exists keeps what it was made with, as the
/// reference's does.
fn add_command_line(resolved: &mut Resolved, p: &Parsed) -> Result<(), args::ArgsError> {
    let run_args = &mut resolved.loaded.model.run_args;
    for mount in p.all("mount") {
        run_args.extend(["--mount".to_string(), args::mount_spec(mount)?]);
    }
    for label in p.all("id-label") {
        let (name, value) = args::name_value("id-label", label)?;
        run_args.extend(["--label".to_string(), format!("{name}={value}")]);
    }
    Ok(())
}

/// `exec CMD ARGS…`: the command's exit status passed through.
fn exec_command(p: &Parsed, log: Log) -> i32 {
    if p.positional.is_empty() {
        log.error("devcontainer exec: no command given (devcontainer exec --workspace-folder DIR CMD ARGS…)");
        return EXIT_FAILED;
    }
    let mut remote_env = Vec::new();
    for pair in p.all("remote-env") {
        match args::name_value("remote-env", pair) {
            Ok(pair) => remote_env.push(pair),
            Err(e) => {
                log.error(&format!("devcontainer exec: {e}"));
                return EXIT_FAILED;
            }
        }
    }
    let ran = runtime().and_then(|rt| {
        rt.block_on(async {
            let room = match (p.one("container-id"), p.all("id-label")) {
                (Some(id), _) => Some(id.to_string()),
                (None, []) => None,
                (None, labels) => Some(labelled_room(labels).await?),
            };
            let room = RoomArgs { workspace: workspace_args(p), room };
            super::exec_cmd::run(&room, false, p.positional.clone(), &remote_env).await
        })
    });
    match ran {
        Ok(code) => code,
        Err(e) => {
            log.error(&format!("devcontainer exec: {e:#}"));
            EXIT_FAILED
        }
    }
}

/// The running container that carries every `--id-label` (as `up
/// --id-label` put them on the room), by id.
async fn labelled_room(labels: &[String]) -> anyhow::Result<String> {
    for label in labels {
        args::name_value("id-label", label)?;
    }
    let engine = Engine::connect().await?;
    let found = engine.list(labels).await?;
    let running: Vec<&str> = found
        .iter()
        .filter(|c| c.state == Some(bollard::models::ContainerSummaryStateEnum::RUNNING))
        .filter_map(|c| c.id.as_deref())
        .collect();
    match running[..] {
        [id] => Ok(id.to_string()),
        [] => bail!(
            "no running container carries the labels {}; `devcontainer up --id-label` makes one",
            labels.join(", ")
        ),
        _ => bail!(
            "{} running containers carry the labels {}; --container-id names one",
            running.len(),
            labels.join(", ")
        ),
    }
}

/// `read-configuration`: the reference's JSON on one stdout line.
fn read_configuration(p: &Parsed, log: Log) -> i32 {
    let warn = move |w: &str| log.warn(w);
    let read = super::config_cmd::read(&workspace_args(p), p.on("include-merged-configuration"), &warn);
    match read {
        Ok(read) => {
            for w in read.loaded.warnings() {
                log.warn(&w);
            }
            let mut out = read.json;
            for key in ["configuration", "mergedConfiguration"] {
                if let Some(path) = out.get(key).and_then(|c| c.get("configFilePath")).and_then(Value::as_str) {
                    out[key]["configFilePath"] = file_uri(path);
                }
            }
            match crate::output::print_json_line(&out) {
                Ok(()) => 0,
                Err(e) => {
                    log.error(&format!("devcontainer read-configuration: cannot print the result: {e}"));
                    EXIT_FAILED
                }
            }
        }
        Err(e) => {
            let chain: Vec<String> = e.chain().map(ToString::to_string).collect();
            log.error(&chain.join(": "));
            EXIT_FAILED
        }
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
        assert!(matches!(command_of(&words("features info ghcr.io/x")), Ok((Command::NotYet("features info"), 2))));
        match command_of(&words("templates apply --workspace-folder /w")) {
            Ok((Command::Authoring(name), 2)) => assert_eq!(name, "templates apply"),
            _ => panic!("templates apply is an authoring command"),
        }
        let e = command_of(&words("frobnicate")).err().unwrap();
        assert_eq!(e, CommandError::Unknown { word: "frobnicate".into() });
        assert!(e.to_string().contains("unknown command \"frobnicate\""), "{e}");
        assert_eq!(command_of(&words("--log-format=json")).err(), Some(CommandError::None));
    }

    #[test]
    fn a_configuration_path_is_printed_as_the_references_uri_object() {
        assert_eq!(file_uri("/w/.devcontainer.json")["fsPath"], "/w/.devcontainer.json");
        assert_eq!(file_uri("/w/.devcontainer.json")["scheme"], "vscode-fileHost");
    }
}
