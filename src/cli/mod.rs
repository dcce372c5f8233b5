//! The command line: flags are parsed by clap into `Args`, then each command
//! validates and runs. Errors bubble up as `anyhow::Error` and `main` prints
//! the chain on one line.

mod agents_cmd;
mod config_cmd;
pub mod devcontainer;
mod egress_cmd;
mod exec_cmd;
mod forward_cmd;
mod pane_cmd;
mod progress;
mod rooms;
mod shell_cmd;
mod stdin_pump;
mod sync_cmd;
mod terminal;
mod up_cmd;
mod watch_cmd;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(name = "workroom", version, about = "Long-lived development rooms from devcontainer.json")]
pub struct Args {
    #[command(subcommand)]
    pub command: Cmd,
}

/// Which workspace and which configuration; shared by every command that
/// starts from a workspace.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkspaceArgs {
    /// The workspace folder (default: the current folder).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workspace_folder: PathBuf,
    /// A devcontainer.json elsewhere than `.devcontainer/devcontainer.json` or `.devcontainer.json`.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

impl WorkspaceArgs {
    /// The workspace's configuration and settings (`flags` over the files):
    /// the one way every command gets from its arguments to its room.
    pub fn resolve(&self, flags: crate::settings::Flags) -> anyhow::Result<crate::room::resolve::Resolved> {
        crate::room::resolve::Resolved::load(&self.workspace_folder, self.config.clone(), flags)
    }
}

/// Which room: the workspace's, or one by name.
#[derive(Debug, Clone, clap::Args)]
pub struct RoomArgs {
    #[command(flatten)]
    pub workspace: WorkspaceArgs,
    /// A running room by its name (as `workroom list` shows it; `workroom-`
    /// may be left off) instead of the workspace folder's.
    #[arg(long, value_name = "NAME")]
    pub room: Option<String>,
}

impl RoomArgs {
    /// The running room these arguments name.
    async fn running(&self, engine: &crate::engine::Engine) -> anyhow::Result<crate::room::resolve::Room> {
        match &self.room {
            Some(name) => Ok(crate::room::resolve::running_named(engine, name).await?),
            None => Ok(self.workspace.resolve(Default::default())?.running(engine).await?),
        }
    }

    /// The running room and the configuration it is used with: a named
    /// room's from its labels, else the workspace's.
    async fn running_with_config(
        &self,
        engine: &crate::engine::Engine,
    ) -> anyhow::Result<(crate::room::resolve::Room, crate::room::resolve::Resolved)> {
        let ws = &self.workspace;
        crate::room::resolve::running(engine, self.room.as_deref(), &ws.workspace_folder, ws.config.clone()).await
    }
}

/// What a room operation says, drawn on stderr as it comes (and its
/// notices kept for its result).
fn on_stderr() -> crate::notices::Notices {
    let stderr = progress::Stderr::new();
    crate::notices::Notices::new(move |e| stderr.show(e))
}

/// Says what a command that makes the room should say about its file first.
fn print_warnings(resolved: &crate::room::resolve::Resolved) {
    for w in resolved.warnings() {
        eprintln!("warning: {w}");
    }
}

/// Peer messaging for the rooms a command makes (wins over the settings files).
#[derive(Debug, Clone, clap::Args)]
pub struct PeerArgs {
    /// Let agents in this room find and message agents in other rooms
    /// (`--peer=false`: stay apart). Default: `peer_messaging` in
    /// .workroom.toml, else in the user's config.toml, else on.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub peer: Option<bool>,
    /// The peer group: agents find only rooms of the same group (and uid).
    /// Default: `peer_group` in .workroom.toml, else in config.toml, else `default`.
    #[arg(long, value_name = "NAME", value_parser = peer_group)]
    pub peer_group: Option<String>,
}

impl PeerArgs {
    fn flags(self) -> crate::settings::Flags {
        crate::settings::Flags { peer: self.peer, peer_group: self.peer_group, ..Default::default() }
    }
}

/// `up`'s resource caps for a room made now, over `[caps]` in the
/// settings; a cap in `runArgs` too: the lower holds.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Caps (when the room is made; default: [caps] in .workroom.toml, else config.toml)")]
pub struct CapsArgs {
    /// The CPUs the room may use (1.5: a CPU and a half).
    #[arg(long, value_name = "N", value_parser = crate::plan::caps::parse_cpus)]
    pub cpus: Option<i64>,
    /// The room's memory (512m, 4g); swap is capped at the same unless --memory-swap says.
    #[arg(long, value_name = "SIZE", value_parser = crate::plan::caps::parse_memory)]
    pub memory: Option<i64>,
    /// Memory and swap together (-1: swap without a cap).
    #[arg(long, value_name = "SIZE", value_parser = crate::plan::caps::parse_memory_swap, allow_hyphen_values = true)]
    pub memory_swap: Option<i64>,
    /// The most processes (and threads) the room may run.
    #[arg(long, value_name = "N", value_parser = crate::plan::caps::parse_pids)]
    pub pids: Option<i64>,
    /// /tmp as an in-memory tmpfs of SIZE (it counts against --memory).
    #[arg(long, value_name = "SIZE", value_parser = crate::plan::caps::parse_size)]
    pub tmp: Option<i64>,
}

impl CapsArgs {
    fn file(self) -> crate::plan::caps::CapsFile {
        crate::plan::caps::CapsFile {
            cpus: self.cpus,
            memory: self.memory,
            memory_swap: self.memory_swap,
            pids: self.pids,
            tmp: self.tmp,
        }
    }
}

/// The reference CLI's `up` flags that make sense on this face too (the
/// `devcontainer` face takes the same, with the reference's spelling).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct UpExtraArgs {
    /// NAME=VALUE for this `up`'s lifecycle hooks only, over remoteEnv's (repeatable; not kept).
    #[arg(long = "remote-env", value_name = "NAME=VALUE", value_parser = env_pair)]
    pub remote_env: Vec<(String, String)>,
    /// A mount for a room made now, as `runArgs --mount` takes it (repeatable).
    #[arg(long = "mount", value_name = "SPEC", value_parser = mount_spec)]
    pub mounts: Vec<String>,
    /// A label NAME=VALUE for a room made now (repeatable).
    #[arg(long = "id-label", value_name = "NAME=VALUE", value_parser = env_pair)]
    pub id_labels: Vec<(String, String)>,
    /// Run no lifecycle hook this time (they stay due for the next `up`).
    #[arg(long, conflicts_with = "skip_non_blocking_commands")]
    pub skip_post_create: bool,
    /// Run the hooks up to the one `waitFor` names, no further.
    #[arg(long)]
    pub skip_non_blocking_commands: bool,
}

/// A NAME=VALUE word with no name.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not NAME=VALUE")]
pub struct NotNameValue(String);

fn env_pair(text: &str) -> Result<(String, String), NotNameValue> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(NotNameValue(text.to_string())),
    }
}

fn mount_spec(text: &str) -> Result<String, crate::plan::mounts::MountError> {
    crate::plan::mounts::parse(text).map(|_| text.to_string())
}

/// `up --worktree NAME [--branch B] [--from REF]`.
#[derive(Debug, Clone, clap::Args)]
pub struct WorktreeArgs {
    /// Make the git worktree NAME of the repository of the workspace folder
    /// (or reuse the one there) and bring its room up. It goes in
    /// `<repo>.worktrees/NAME` beside the main checkout, or where the
    /// `worktrees` setting says. Needs git on the host.
    #[arg(long, value_name = "NAME", value_parser = worktree_name)]
    pub worktree: Option<String>,
    /// The worktree's branch (default NAME); an existing branch is checked
    /// out, a new one made from --from.
    #[arg(long, value_name = "BRANCH", requires = "worktree")]
    pub branch: Option<String>,
    /// Where a new branch starts (default: HEAD of the checkout this runs in).
    #[arg(long, value_name = "REF", requires = "worktree")]
    pub from: Option<String>,
}

fn worktree_name(name: &str) -> Result<String, crate::plan::worktree::BadWorktreeName> {
    crate::plan::worktree::check_name(name).map(|()| name.to_string())
}

/// An `--egress-allow` pattern, checked as the settings files' are.
fn egress_pattern(text: &str) -> Result<String, crate::egress::policy::PatternError> {
    crate::egress::policy::rules(&[text]).map(|_| text.to_string())
}

fn peer_group(name: &str) -> Result<String, crate::settings::BadPeerGroup> {
    crate::settings::check_peer_group(name).map(|()| name.to_string())
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Print the resolved configuration (substituted, with workspace defaults).
    Config {
        #[command(flatten)]
        workspace: WorkspaceArgs,
        /// The reference CLI's `read-configuration` shape.
        #[arg(long)]
        json: bool,
        /// Add `mergedConfiguration`: devcontainer.json merged with the image's
        /// `devcontainer.metadata` (the room's, when it exists), as the reference does.
        #[arg(long, requires = "json")]
        include_merged_configuration: bool,
    },
    /// Make or find the workspace's room, start it and run the lifecycle hooks that are due.
    Up {
        #[command(flatten)]
        workspace: WorkspaceArgs,
        /// Print the reference CLI's result JSON.
        #[arg(long)]
        json: bool,
        /// Remove the room first and make it anew (applies a changed config).
        #[arg(long)]
        recreate: bool,
        /// Do not run postAttachCommand.
        #[arg(long)]
        skip_post_attach: bool,
        #[command(flatten)]
        peer: PeerArgs,
        /// A named room (`workroom-NAME`) instead of the workspace's own.
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// Refuse to go on if devcontainer-lock.json is missing or would change.
        #[arg(long, conflicts_with = "no_lockfile")]
        frozen_lockfile: bool,
        /// Neither read nor write devcontainer-lock.json.
        #[arg(long)]
        no_lockfile: bool,
        /// How a new room gets the workspace: `auto` asks the engine whether it
        /// sees this folder, `volume` uploads it into a volume, `bind` binds it.
        /// Default: `workspace` in .workroom.toml, else config.toml, else auto.
        #[arg(long = "workspace", value_name = "MODE")]
        workspace_mode: Option<crate::settings::WorkspaceMode>,
        /// How a new room reaches the network: `open`; `allowlist`, no route out
        /// but a proxy that lets through what `--egress-allow` and `[egress] allow`
        /// name; or `none`. Default: `[egress] mode` in .workroom.toml or
        /// config.toml (the stricter of the two), else open.
        #[arg(long = "egress", value_name = "MODE")]
        egress: Option<crate::settings::EgressMode>,
        /// A `host[:port]` pattern (`*.github.com:443`) or a preset (`@pypi`)
        /// the allowlist proxy lets through, besides the settings' (repeatable).
        #[arg(long = "egress-allow", value_name = "PATTERN", value_parser = egress_pattern)]
        egress_allow: Vec<String>,
        #[command(flatten)]
        worktree: WorktreeArgs,
        #[command(flatten)]
        caps: CapsArgs,
        // Boxed: `Up` is the largest command by far, and every other one
        // would carry its size.
        #[command(flatten)]
        extra: Box<UpExtraArgs>,
    },
    /// Run one command in the room (as the remote user, in the workspace folder).
    Exec {
        #[command(flatten)]
        room: RoomArgs,
        /// Allocate a terminal (for interactive programs).
        #[arg(short = 't', long)]
        tty: bool,
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// A terminal on a pane of the room (made if missing; the workspace's room is brought
    /// up first, a `--room` must be running). Detach with ctrl-p ctrl-q (the pane goes on);
    /// `workroom shell` again reattaches. With -d, no terminal: the pane is made running
    /// CMD (default: the login shell), left detached, and its name printed.
    Shell {
        #[command(flatten)]
        room: RoomArgs,
        /// The pane's name.
        #[arg(default_value = "main")]
        pane: String,
        /// The keys that detach, in docker's notation (default ctrl-p,ctrl-q).
        #[arg(long, value_name = "KEYS", conflicts_with = "detach")]
        detach_keys: Option<String>,
        /// Make the pane and return at once, without a terminal (tmux's `new-session -d`).
        /// A pane of that name that runs is kept (an error if CMD is given); one whose
        /// program exited is replaced.
        #[arg(short = 'd', long)]
        detach: bool,
        /// A detached pane's window size until a client attaches (default 80x24).
        #[arg(long, value_name = "COLSxROWS", requires = "detach", value_parser = shell_cmd::parse_size)]
        size: Option<shell_cmd::Size>,
        /// With -d: the pane's command, run through the login shell (after `--`).
        #[arg(last = true, requires = "detach", value_name = "CMD")]
        command: Vec<String>,
    },
    /// List the room's panes: name, pid, size, attached clients, age, command.
    Panes {
        #[command(flatten)]
        room: RoomArgs,
        #[arg(long)]
        json: bool,
    },
    /// Print a pane's history and screen as text (tmux's capture-pane, across rooms).
    Capture {
        #[command(flatten)]
        room: RoomArgs,
        #[arg(default_value = "main")]
        pane: String,
        /// Only the last N lines.
        #[arg(long, value_name = "N")]
        lines: Option<u32>,
        /// Keep colours and attributes as escape sequences.
        #[arg(long)]
        escapes: bool,
        /// One JSON object: the pane, its size, its change count and its lines.
        #[arg(long)]
        json: bool,
    },
    /// Type into a pane: the words joined by spaces, or with --keys tmux's
    /// key names (Enter, Tab, Escape, Up, C-c, M-x, F5, ...) among plain words.
    Send {
        #[command(flatten)]
        room: RoomArgs,
        #[arg(default_value = "main")]
        pane: String,
        /// Read key names among the words, as tmux's send-keys does.
        #[arg(long)]
        keys: bool,
        #[arg(last = true, required = true, value_name = "TEXT")]
        text: Vec<String>,
    },
    /// Wait until a pane's screen shows a match of a regular expression; print its line.
    /// Exits 124 when --timeout passes first.
    Wait {
        #[command(flatten)]
        room: RoomArgs,
        #[arg(default_value = "main")]
        pane: String,
        /// The regular expression (Rust's regex syntax), matched on the screen as
        /// lines joined by newlines: `^` and `$` match at each line's start and end,
        /// and a pattern may span lines with `\n`.
        #[arg(long = "for", value_name = "REGEX")]
        pattern: String,
        /// Give up after S seconds.
        #[arg(long, value_name = "S")]
        timeout: Option<f64>,
        /// Print the match as JSON: pane, match, line.
        #[arg(long)]
        json: bool,
    },
    /// End a pane (its session is hung up, then killed if it lingers).
    KillPane {
        #[command(flatten)]
        room: RoomArgs,
        pane: String,
    },
    /// Replace the room's daemon by a new one in place, keeping the panes.
    /// Prints `handed off`, or `current` when the room already runs it.
    HandOff {
        #[command(flatten)]
        room: RoomArgs,
        /// The new daemon (default: the one this workroom carries).
        #[arg(long, value_name = "PATH")]
        binary: Option<PathBuf>,
        /// Hand off even to the binary that already runs.
        #[arg(long)]
        force: bool,
    },
    /// The agent sessions of the room's peer group (live, with their
    /// socket): room, branch, agent, pid, status, pane and age.
    Agents {
        #[command(flatten)]
        room: RoomArgs,
        /// One JSON array of objects with every key on every agent.
        #[arg(long)]
        json: bool,
    },
    /// A terminal on the pane that holds an agent of the room's peer group
    /// (as `workroom shell --room ROOM PANE`).
    Attach {
        #[command(flatten)]
        room: RoomArgs,
        /// The agent: its name, session id or pid as `workroom agents`
        /// prints them, or a unique prefix of a name or id.
        agent: String,
        /// The keys that detach, in docker's notation (default ctrl-p,ctrl-q).
        #[arg(long, value_name = "KEYS")]
        detach_keys: Option<String>,
    },
    /// List rooms: name, state, image, age, branch, workspace; a repository's
    /// rooms (its worktrees' too) together under its main checkout.
    List {
        #[arg(long)]
        json: bool,
        /// The peer groups' anchors too, with every row's peer group.
        #[arg(long)]
        all: bool,
    },
    /// Stop a room (the workspace's, a named one, or all rooms made by workroom).
    Stop {
        /// A room name (see `workroom list`).
        name: Option<String>,
        #[arg(long, conflicts_with = "name")]
        all: bool,
        #[arg(long, value_name = "DIR", default_value = ".")]
        workspace_folder: PathBuf,
    },
    /// Remove a room (its panes and container; the workspace is untouched).
    /// With --worktree NAME, then the worktree too (its branch is kept).
    Down {
        name: Option<String>,
        #[arg(long, conflicts_with = "name")]
        all: bool,
        /// Also remove the room's anonymous volumes.
        #[arg(long)]
        volumes: bool,
        /// Remove the room of the worktree NAME (as `up --worktree NAME` made
        /// it), then the worktree; refused when it has uncommitted changes or
        /// commits on no other branch or upstream.
        #[arg(long, value_name = "NAME", value_parser = worktree_name, conflicts_with_all = ["name", "all"])]
        worktree: Option<String>,
        /// Remove the worktree even with uncommitted or unpushed work.
        #[arg(long, requires = "worktree")]
        force: bool,
        #[arg(long, value_name = "DIR", default_value = ".")]
        workspace_folder: PathBuf,
    },
    /// Forward host ports (127.0.0.1 only) to ports in the room, over the daemon link.
    ///
    /// `workroom forward [ROOM] PORT[:CONTAINER_PORT]...`; a CONTAINER_PORT may be
    /// `HOST:PORT` (a name the room resolves). With no ports, the configuration's
    /// `forwardPorts`.
    Forward {
        #[command(flatten)]
        workspace: WorkspaceArgs,
        /// Run detached, as the room's host process (also carries credentials);
        /// it ends with the room.
        #[arg(long)]
        background: bool,
        #[arg(long, hide = true)]
        detached: bool,
        #[arg(value_name = "[ROOM] PORT[:CONTAINER_PORT]")]
        args: Vec<String>,
    },
    /// What the rooms' forwarders carry: room, host port, target, label, pid, state.
    Ports {
        name: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Carry changes between this folder and a room whose workspace is a
    /// volume (an engine that cannot see this folder): `pull` brings the
    /// room's, `push` sends these. A file changed on both sides since the
    /// last sync is reported and left alone (exit status 1).
    Sync {
        #[command(subcommand)]
        direction: SyncDirection,
    },
    /// The reference devcontainer CLI's command lines (`up`, `exec`,
    /// `read-configuration`), as when this binary runs as `devcontainer`
    /// through a link; see docs/guide.md.
    #[command(disable_help_flag = true)]
    Devcontainer {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
        args: Vec<String>,
    },
    /// An `allowlist` room's egress: its policy (no action), changes to it while
    /// the room runs, and the log of what was allowed and refused.
    Egress {
        /// `allow PATTERN...`: let them through from now on (`host[:port]`,
        /// `*.example.com`, `@preset`); `deny PATTERN...`: refuse them, even
        /// where a broader rule allows them; `reset`: drop every allow and deny
        /// made while the room ran; `log`: each request (time, host:port,
        /// allowed or refused, bytes, duration), then the refusals by host.
        /// None: print the policy.
        action: Option<EgressVerb>,
        #[arg(value_name = "PATTERN", value_parser = egress_pattern)]
        patterns: Vec<String>,
        #[command(flatten)]
        room: RoomArgs,
        /// `log`: keep printing requests as they come.
        #[arg(short, long)]
        follow: bool,
        /// The policy, or each logged request, as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Follow the engine and start the forwarder (ports, ssh-agent, git
    /// credentials) of every room it starts by itself, after a host reboot
    /// say, when none serves it. Runs no hook and changes no room.
    /// `--install` runs it at each login (a systemd user unit).
    Watch {
        /// Write the systemd user unit that runs `workroom watch` at login,
        /// and enable and start it when a user manager answers.
        #[arg(long, conflicts_with = "uninstall")]
        install: bool,
        /// Stop and remove that unit.
        #[arg(long)]
        uninstall: bool,
    },
    /// The daemon's and the supervised program's output.
    Logs {
        name: Option<String>,
        #[arg(short, long)]
        follow: bool,
        #[arg(long, value_name = "DIR", default_value = ".")]
        workspace_folder: PathBuf,
    },
}

/// What `workroom egress` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EgressVerb {
    Allow,
    Deny,
    Reset,
    Log,
}

#[derive(Debug, Subcommand)]
pub enum SyncDirection {
    /// Bring files changed in the room here.
    Pull {
        #[command(flatten)]
        workspace: WorkspaceArgs,
        /// Only this file or folder (relative to the workspace folder).
        path: Option<PathBuf>,
    },
    /// Send files changed here into the room.
    Push {
        #[command(flatten)]
        workspace: WorkspaceArgs,
        /// Only this file or folder (relative to the workspace folder).
        path: Option<PathBuf>,
    },
}

/// The program: its arguments parsed, the logs and the engine's silence
/// notice set up, the command run, and its error, if any, printed as the
/// whole chain on one line (each cause adds what the one before lacks),
/// exit 2. A closed stdout is a quiet success (`workroom list | head`).
pub fn main() -> std::process::ExitCode {
    use clap::Parser as _;
    let mut words = std::env::args_os();
    if words.next().is_some_and(|argv0| devcontainer::is_face(&argv0)) {
        // Run through a link named `devcontainer`: the reference CLI's command lines.
        let words = words.map(|w| w.to_string_lossy().into_owned()).collect();
        return std::process::ExitCode::from(devcontainer::main(words, true).clamp(0, 255) as u8);
    }
    let args = Args::parse();
    if let Some(line) = crate::logs::init() {
        eprintln!("warning: {line}");
    }
    crate::engine::on_silence(|line| eprintln!("workroom: {line}"));
    match run(args) {
        Ok(code) => std::process::ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) if e.is::<crate::output::BrokenPipe>() => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let chain: Vec<String> = e.chain().map(ToString::to_string).collect();
            eprintln!("workroom: {}", chain.join(": "));
            std::process::ExitCode::from(2)
        }
    }
}

/// Runs the command; the returned code is the process's exit status.
pub fn run(args: Args) -> anyhow::Result<i32> {
    if let Cmd::Config { workspace, json, include_merged_configuration } = &args.command {
        // A runtime of its own, only if the engine is asked.
        return config_cmd::run(workspace, *json, *include_merged_configuration);
    }
    match &args.command {
        // No engine, no runtime: a file and `systemctl`.
        Cmd::Watch { install: true, .. } => return watch_cmd::install(),
        Cmd::Watch { uninstall: true, .. } => return watch_cmd::uninstall(),
        _ => {}
    }
    if let Cmd::Devcontainer { args } = args.command {
        // Its own runtime, as its read-configuration needs none.
        return Ok(devcontainer::main(args, false));
    }
    // One thread: a CLI waits on one thing at a time, and a multi-thread
    // runtime costs start-up time `up` on a running room cannot spare.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        match args.command {
            Cmd::Config { .. } | Cmd::Devcontainer { .. } => unreachable!("handled above"),
            Cmd::Up {
                workspace,
                json,
                recreate,
                skip_post_attach,
                peer,
                name,
                frozen_lockfile,
                no_lockfile,
                workspace_mode,
                egress,
                egress_allow,
                worktree,
                caps,
                extra,
            } => {
                use crate::features::LockMode;
                let lock = match (frozen_lockfile, no_lockfile) {
                    (true, _) => LockMode::Frozen,
                    (_, true) => LockMode::Skip,
                    _ => LockMode::Write,
                };
                let flags = crate::room::resolve::UpFlags { recreate, post_attach: !skip_post_attach, name, lock };
                let settings = crate::settings::Flags {
                    workspace: workspace_mode,
                    egress,
                    egress_allow,
                    caps: caps.file(),
                    ..peer.flags()
                };
                up_cmd::run(&workspace, worktree, flags, settings, *extra, json).await
            }
            Cmd::Exec { room, tty, command } => exec_cmd::run(&room, tty, command, &[]).await,
            Cmd::Shell { room, pane, detach_keys, detach: false, .. } => {
                shell_cmd::shell(&room, &pane, detach_keys.as_deref()).await
            }
            Cmd::Shell { room, pane, size, command, detach: true, .. } => {
                shell_cmd::shell_detached(&room, &pane, size.unwrap_or_default(), command).await
            }
            Cmd::Panes { room, json } => shell_cmd::panes(&room, json).await,
            Cmd::Capture { room, pane, lines, escapes, json } => {
                pane_cmd::capture(&room, &pane, lines, escapes, json).await
            }
            Cmd::Send { room, pane, keys, text } => pane_cmd::send(&room, &pane, keys, &text).await,
            Cmd::Wait { room, pane, pattern, timeout, json } => {
                pane_cmd::wait(&room, &pane, &pattern, timeout, json).await
            }
            Cmd::KillPane { room, pane } => shell_cmd::kill_pane(&room, &pane).await,
            Cmd::HandOff { room, binary, force } => shell_cmd::hand_off(&room, binary.as_deref(), force).await,
            Cmd::List { json, all } => rooms::list(json, all).await,
            Cmd::Agents { room, json } => agents_cmd::run(&room, json).await,
            Cmd::Attach { room, agent, detach_keys } => agents_cmd::attach(&room, &agent, detach_keys.as_deref()).await,
            Cmd::Stop { name, all, workspace_folder } => rooms::stop(name.as_deref(), all, &workspace_folder).await,
            // clap refuses a NAME or --all beside --worktree.
            Cmd::Down { volumes, worktree: Some(worktree), force, workspace_folder, .. } => {
                rooms::down_worktree(&workspace_folder, &worktree, force, volumes).await
            }
            Cmd::Down { name, all, volumes, worktree: None, workspace_folder, .. } => {
                rooms::down(name.as_deref(), all, &workspace_folder, volumes).await
            }
            Cmd::Forward { workspace, background, detached, args } => {
                forward_cmd::forward(forward_cmd::ForwardArgs { workspace, args, background, detached }).await
            }
            Cmd::Sync { direction } => match direction {
                SyncDirection::Pull { workspace, path } => {
                    sync_cmd::run(&workspace, crate::plan::sync::Direction::Pull, path.as_deref()).await
                }
                SyncDirection::Push { workspace, path } => {
                    sync_cmd::run(&workspace, crate::plan::sync::Direction::Push, path.as_deref()).await
                }
            },
            Cmd::Watch { .. } => watch_cmd::run().await,
            Cmd::Ports { name, json } => forward_cmd::ports(name.as_deref(), json).await,
            Cmd::Egress { action, patterns, room, follow, json } => {
                egress_cmd::run(&room, egress_cmd::Asked { action, patterns, follow, json }).await
            }
            Cmd::Logs { name, follow, workspace_folder } => {
                rooms::logs(name.as_deref(), &workspace_folder, follow).await
            }
        }
    })
}
