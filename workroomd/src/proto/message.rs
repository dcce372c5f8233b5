//! The typed payloads: JSON, because the messages are small, rare next to the
//! byte streams, and readable in a hex dump when something goes wrong.
//!
//! Evolution: fields added later carry `#[serde(default)]` so an older peer's
//! message still reads; a new [`Request`] variant reaches an older daemon as
//! an unreadable request, which the link answers with [`Response::Error`]
//! naming the daemon's version. Anything an older peer could not safely
//! ignore bumps [`PROTOCOL`](super::PROTOCOL).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::{INITIAL_WINDOW, PROTOCOL};
use crate::users::{GroupEntry, PasswdEntry};
use crate::VERSION;

/// Which end of the link a program is. The host opens odd stream ids, the
/// daemon even ones, so the two never pick the same id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Host,
    Daemon,
}

impl Role {
    /// The other end.
    pub fn peer(self) -> Role {
        match self {
            Role::Host => Role::Daemon,
            Role::Daemon => Role::Host,
        }
    }

    /// The program that plays this role, for messages naming versions.
    pub fn program(self) -> &'static str {
        match self {
            Role::Host => "workroom",
            Role::Daemon => "workroomd",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Host => "host",
            Role::Daemon => "daemon",
        })
    }
}

/// The payload of the `Hello` frame each side sends first.
///
/// Its shape must never change: it is how two different protocol versions
/// find out they differ. New information goes in new optional fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub protocol: u32,
    /// The sending program's version (the host passes its own, which may
    /// differ from this library's).
    pub version: String,
    pub role: Role,
    /// The window the sender gives each stream the peer sends on, at its
    /// start; its presence also says the sender widens windows by granting
    /// more than it received (up to [`MAX_WINDOW`](super::MAX_WINDOW)) and
    /// takes such grants. Absent from workroom before windows grew: both
    /// sides then keep [`FIXED_WINDOW`](super::FIXED_WINDOW).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u32>,
    /// A daemon's: it runs lifecycle hooks as jobs of its own
    /// ([`Request::RunHook`], [`Request::SetStartPlan`]), in this version
    /// of them ([`HOOK_JOBS`]). Absent from daemons before (and from hosts):
    /// a host then claims markers and runs each command itself, as it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<u32>,
}

/// The version of hook jobs a daemon names in its hello ([`Hello::hooks`]).
/// A change an older host could misread takes a new number, which such a
/// host does not take for its own.
pub const HOOK_JOBS: u32 = 1;

impl Hello {
    /// This library's protocol and version in the given role.
    pub fn new(role: Role) -> Hello {
        Hello {
            protocol: PROTOCOL,
            version: VERSION.to_owned(),
            role,
            window: Some(u32::try_from(INITIAL_WINDOW).expect("the window fits a u32")),
            hooks: (role == Role::Daemon).then_some(HOOK_JOBS),
        }
    }

    /// Whether the peer is a daemon that runs hooks as its own jobs, in the
    /// version this library speaks.
    pub fn runs_hook_jobs(&self) -> bool {
        self.role == Role::Daemon && self.hooks == Some(HOOK_JOBS)
    }

    /// "workroomd 0.1.0 speaks protocol 1", for messages naming both sides.
    pub fn describe(&self) -> String {
        format!("{} {} speaks protocol {}", self.role.program(), self.version, self.protocol)
    }
}

/// The payload of `Refuse` and `Reset` frames.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reason {
    pub message: String,
}

/// How a process ended: the payload of an `Exit` frame. Exactly one of the
/// two is set for a process that ended; both `None` means the daemon could not
/// tell (it lost the child).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ExitStatus {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl ExitStatus {
    /// How it ended, as a label: `exited with status 3`, `killed by signal
    /// 9 (SIGKILL)`, or `ended with its status unknown`.
    pub fn summary(&self) -> String {
        match (self.code, self.signal) {
            (Some(code), _) => format!("exited with status {code}"),
            (None, Some(signal)) => match signal_name(signal) {
                Some(name) => format!("killed by signal {signal} ({name})"),
                None => format!("killed by signal {signal}"),
            },
            (None, None) => "ended with its status unknown".to_string(),
        }
    }

    /// [`summary`](Self::summary) said of a program: "its program
    /// exited with status 3", "... was killed by signal 9 (SIGKILL)".
    pub fn describe(&self) -> String {
        match (self.code, self.signal) {
            (None, Some(_)) => format!("was {}", self.summary()),
            _ => self.summary(),
        }
    }

    /// The name of the signal that killed it (`SIGKILL`), for the common ones.
    pub fn signal_name(&self) -> Option<&'static str> {
        self.signal.and_then(signal_name)
    }

    /// The status a shell reports for it: the code, or 128 + the signal.
    pub fn shell_code(&self) -> i32 {
        self.code.unwrap_or_else(|| 128 + self.signal.unwrap_or(0))
    }
}

/// The names of the signals a program commonly dies of (Linux numbers);
/// others are said by number alone.
fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => return None,
    })
}

/// What the host asks of the daemon: the payload of an `Open` frame.
///
/// Every request gets exactly one [`Response`] as the first frame the daemon
/// sends on its stream. A request that [`is_streaming`](Self::is_streaming)
/// then carries byte streams until each side sends `Eof`; any other request
/// is over with that reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// The daemon's identity and the supervised program's state:
    /// [`Response::Status`].
    Status,
    /// Run a command: [`Response::Started`] (or `Error`), then its stdout as
    /// `Data`, its stderr as `Stderr`, `Exit` when it ends and `Eof` once its
    /// output is drained. The host's `Data` is its stdin; the host's `Eof`
    /// closes it.
    Run(RunRequest),
    /// The image's accounts, read from `/etc/passwd` and `/etc/group`:
    /// [`Response::Users`].
    Users,
    /// [`Response::Ready`], then every `Data` frame comes back on the same
    /// stream until the host's `Eof`, which is answered with `Eof`. Measures
    /// and tests the link itself.
    Echo,
    /// All lifecycle markers: [`Response::Markers`].
    GetMarkers,
    /// Sets or removes one marker: [`Response::MarkerSet`].
    ///
    /// Markers are small facts the daemon keeps for the container's lifetime
    /// (across daemon restarts), e.g. `on_create` → `"done"` for a
    /// once-per-container hook, or `post_start` → the boot id it last ran
    /// for. `expected` makes it a compare-and-set, so two hosts running `up`
    /// at once cannot both claim the same once-only hook.
    SetMarker {
        key: String,
        /// The new value; `None` removes the marker.
        value: Option<String>,
        /// Apply only if the marker currently has this value.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expected: Option<Expected>,
    },
    /// Runs a lifecycle hook as the daemon's own job, once (daemons whose
    /// hello names [`Hello::hooks`]). In one step, with nothing in between
    /// that a host's death could cut, the daemon looks at the marker `key`
    /// and claims it and starts the hook, or finds it done, or finds its
    /// own job of it running: [`Response::Hook`]. A job runs to its end
    /// whoever watches; its output is kept (bounded) for whoever follows.
    ///
    /// After `started` or `following`: the hook's output so far and then
    /// live as `Data` (lines labelled `[postCreateCommand] ...`), on
    /// failure one `Stderr` frame with the one-line reason, `Exit`, `Eof`.
    /// After `done` or `busy`: `Eof`. The host sends `Eof` at once.
    RunHook(HookRun),
    /// Hands the daemon the room's start plan, which it keeps in the room
    /// and runs itself at each later start of the container, as
    /// postStartCommand (under the marker `post-start`, with that start's
    /// boot id): [`Response::Done`].
    SetStartPlan(StartPlan),
    /// Host to daemon, streaming: dial TCP `host:port` from inside the room
    /// (`127.0.0.1` for a plain forwarded port). [`Response::Ready`] once
    /// connected, or `Error` ("connection refused on <host>:<port> in the
    /// room"); then the connection's bytes both ways as `Data`, and `Eof` in
    /// either direction is a half-close (shutdown of the write side).
    Connect { host: String, port: u16 },
    /// Host to daemon, non-streaming: this link carries credentials for the
    /// room until it closes. The daemon then serves the agent socket (when
    /// `ssh_agent`) and answers the git credential helper (when
    /// `git_credentials`), opening the streams below toward this link.
    /// [`Response::Ready`], or `Error` naming what could not be set up.
    OfferCredentials {
        /// The remote user, who alone may reach the sockets.
        user: String,
        ssh_agent: bool,
        git_credentials: bool,
    },
    /// Host to daemon, non-streaming: this link checks and dials the room's
    /// egress until it closes. The daemon serves an HTTP proxy on the
    /// room's `127.0.0.1:port` and carries each of its connections to the
    /// newest such link as an [`Request::Egress`] stream; the proxy reads
    /// nothing of what it carries. [`Response::Ready`] once it listens, or
    /// `Error` naming why it cannot.
    OfferEgress { port: u16 },
    /// Daemon to host (an even stream id), streaming: one connection to the
    /// room's egress proxy. `Ready` at once, then the client's bytes as
    /// `Data` and what the host answers (the proxy's own answer, then the
    /// far server's bytes) as `Data` back: the host reads the request,
    /// checks it against the room's policy, and dials.
    Egress,
    /// Daemon to host (an even stream id), streaming: one connection to the
    /// host's ssh-agent (`$SSH_AUTH_SOCK`). `Ready` once the host reached its
    /// agent, then the agent protocol's bytes both ways as `Data`.
    SshAgent,
    /// Daemon to host, non-streaming: run `git credential <operation>`
    /// (`fill`, `approve` or `reject`) on the host with `input` on its
    /// stdin; [`Response::Credential`] with its stdout. `input` is at most
    /// [`MAX_CREDENTIAL_INPUT`] bytes.
    GitCredential { operation: String, input: String },
    /// Opens a pane (a pty and a program the daemon holds) unless one of that
    /// name is there: [`Response::PaneOpened`]. A pane whose program
    /// exited stays (its screen readable) until it is killed, or replaced
    /// by an `OpenPane` with `replace_exited`.
    OpenPane(PaneRequest),
    /// Watches and types into a pane: [`Response::Ready`], then a repaint of
    /// the current screen as `Data`, then the pane's live output as `Data`.
    /// The host's `Data` is typed into the pane; the host's `Eof` detaches
    /// (the pane goes on). When the pane's program ends: `Exit`, then `Eof`.
    /// A pane that ended with its room's restart answers
    /// [`Response::PaneEnded`] (then `Eof`).
    ///
    /// The first `Data` is a paint: the pane's history (unless `history`
    /// is false: a client reattaching after a hand-off has it already),
    /// then its screen, alternate screen, modes and title. Every byte the
    /// pane writes follows, in order; a client that falls more than its
    /// bound behind gets a marker line and a new paint instead of what it
    /// missed. The latest client's size is the pane's.
    ///
    /// A pane whose program exited answers [`Response::PaneEnded`] with its
    /// last screen and status (then `Eof`).
    Attach {
        pane: String,
        /// The client's window; 0 keeps the pane's size.
        #[serde(default)]
        rows: u16,
        #[serde(default)]
        cols: u16,
        #[serde(default = "yes")]
        history: bool,
        /// Who types, when the client wants its keys counted: the daemon
        /// counts the bytes it takes from this typist, across hand-offs,
        /// and answers [`Response::Attached`] rather than `Ready`, so the
        /// client sends again what it typed into a link that was closing.
        /// A daemon of before ignores it and answers `Ready`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        typist: Option<Typist>,
    },
    /// The text of a pane: [`Response::Captured`], then the text as
    /// `Data`, then `Eof`.
    CapturePane(CaptureRequest),
    /// Types `text` into a pane as if a client had: [`Response::Done`];
    /// `Error` when its program exited.
    TypeIn { pane: String, text: String },
    /// Sets a pane's window size (its program gets `SIGWINCH`): [`Response::Done`].
    ResizePane { pane: String, rows: u16, cols: u16 },
    /// [`Response::Panes`].
    ListPanes,
    /// Hangs up a pane's session (then kills it if it lingers): [`Response::Done`]
    /// once the pane is gone. A pane whose program exited is removed at once.
    KillPane { pane: String },
    /// Replaces the daemon by the binary at `binary` (a path in the room) in
    /// place, keeping the panes: [`Response::HandOff`]. With `dry_run` the
    /// daemon only compares digests (an empty `binary` just names its own).
    HandOff {
        binary: String,
        #[serde(default)]
        force: bool,
        #[serde(default)]
        dry_run: bool,
    },
}

fn yes() -> bool {
    true
}

/// The largest git credential request either side passes on: git's
/// credential descriptions are a few short `key=value` lines, and a request
/// travels in one frame; anything this large is not a credential.
pub const MAX_CREDENTIAL_INPUT: usize = 64 * 1024;

impl Request {
    /// Whether the stream carries bytes after the reply. The link uses it to
    /// know when a stream is over, so both sides must agree: it is part of the
    /// protocol.
    pub fn is_streaming(&self) -> bool {
        match self {
            Request::Run(_)
            | Request::RunHook(_)
            | Request::Echo
            | Request::Connect { .. }
            | Request::SshAgent
            | Request::Egress
            | Request::Attach { .. }
            | Request::CapturePane(_) => true,
            Request::Status
            | Request::Users
            | Request::GetMarkers
            | Request::SetMarker { .. }
            | Request::SetStartPlan(_)
            | Request::OfferCredentials { .. }
            | Request::OfferEgress { .. }
            | Request::GitCredential { .. }
            | Request::OpenPane(_)
            | Request::ResizePane { .. }
            | Request::ListPanes
            | Request::KillPane { .. }
            | Request::TypeIn { .. }
            | Request::HandOff { .. } => false,
        }
    }
}

/// A client that types into a pane, as it names itself on each attach
/// ([`Request::Attach`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Typist {
    /// A number the client chose, the same on each of its attaches.
    pub id: u64,
    /// How many bytes it sent before this attach, over all its links: a
    /// daemon that does not know the typist (its first attach, or a
    /// daemon of before handed off to this one) takes them as taken, so
    /// the counts it answers are in the client's own numbering and never
    /// ask for what may have been typed already.
    pub sent: u64,
}

/// A command for the daemon to run (see [`Request::Run`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRequest {
    /// Program and arguments; the program is looked up in the child's `PATH`.
    pub argv: Vec<String>,
    /// `name`, `uid`, `name:group` or `uid:gid`, resolved by the daemon with
    /// [`resolve_user`](crate::users::resolve_user); `None` runs as the
    /// daemon's own user.
    #[serde(default)]
    pub user: Option<String>,
    /// Set on top of the base environment: the daemon's own (the container's
    /// `Env`, which holds `containerEnv`) plus `HOME`, `USER`, `LOGNAME` and
    /// `SHELL` of the user. A map, not a list: a name set twice has no
    /// meaning, and a sorted map makes requests comparable in tests.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working folder; `None` is the user's home.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Whether the host will send stdin. When `false` the child's stdin is
    /// `/dev/null` and the host should send `Eof` at once.
    #[serde(default)]
    pub stdin: bool,
    /// Run `argv` through the user's login shell (`<shell> -lc 'exec "$@"'`),
    /// so profile scripts shape the environment as devcontainer's
    /// `userEnvProbe: loginShell` expects. Named for what it does rather than
    /// `login_env`, which reads like a variable set.
    #[serde(default)]
    pub login_shell: bool,
}

/// One command of a hook, as the daemon runs it: `argv` (a string command
/// is `/bin/sh -c ...`), its output labelled `[label]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookStep {
    /// `postCreateCommand`, `postCreateCommand:build` (a parallel object's
    /// entry), `... from feature X` (another origin than devcontainer.json).
    pub label: String,
    pub argv: Vec<String>,
}

/// Who runs a hook's commands, and where; as a [`RunRequest`]'s.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookCommands {
    /// Run one after the other, the first failure ending the hook; the
    /// steps of one entry at once (a parallel object), waited for together.
    pub commands: Vec<Vec<HookStep>>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub cwd: Option<String>,
}

/// A hook for the daemon to run once (see [`Request::RunHook`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookRun {
    /// The marker that records it, named after the hook's property
    /// (`postCreateCommand`), or `post-start`.
    pub key: String,
    /// The marker's value once it ran: `done`, or for postStart the boot id
    /// of the start it ran for. Any other value (absent, an earlier boot,
    /// the daemon's own claim of an earlier start, cut off when the room
    /// stopped) makes it due; a host's claim (`running:HOST:PID:NONCE`, an
    /// `up` of a workroom before hook jobs) is answered `busy`.
    pub done: String,
    /// The hook's property (`postCreateCommand`): names its reference-CLI
    /// marker file and the lines about it.
    pub hook: String,
    pub run: HookCommands,
    /// The container time the reference CLI (devcontainers/cli) records in
    /// its marker file for this hook, `~/.devcontainer/.<hook>Marker` of the
    /// user: `Created` for the create hooks, `State.StartedAt` for
    /// postStart. When set, a file holding it means the reference ran the
    /// hook (it is recorded done, not run), and otherwise the daemon writes
    /// it before the hook starts and removes it if the hook fails.
    #[serde(default)]
    pub reference_time: Option<String>,
}

/// What the daemon runs at each start of its container as postStartCommand
/// (see [`Request::SetStartPlan`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartPlan {
    pub run: HookCommands,
    /// Markers that must say `done` before it runs at a start: the create
    /// hooks' (a room whose postCreateCommand has not run yet gets its
    /// postStart from the `up` that runs them, after them).
    #[serde(default)]
    pub after: Vec<String>,
    /// The host's digest of the plan; the daemon keeps it as the marker
    /// `start-plan`, so an `up` sees in the markers it reads anyway whether
    /// the daemon holds this plan already.
    pub digest: String,
}

/// How a [`Request::RunHook`] found its hook (the payload of [`Response::Hook`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum HookState {
    /// This request claimed it and started it; its output follows.
    Started,
    /// A job of the daemon runs it already (started by another request, or
    /// at the container's start); its output follows, from the oldest kept.
    Following,
    /// Its marker says it ran.
    Done,
    /// A host's claim holds it (`current`): a workroom before hook jobs
    /// runs it, or its `up` died; the host decides, as it always did.
    Busy { current: String },
}

/// A pane to open (see [`Request::OpenPane`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaneRequest {
    /// `[A-Za-z0-9._-]`, at most 64 characters (it names files in the room).
    pub name: String,
    /// `None`: the user's login shell from the image's passwd (`/bin/sh`
    /// when it names none), started as a login shell.
    #[serde(default)]
    pub argv: Option<Vec<String>>,
    /// As in [`RunRequest::user`]; `None` is root.
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub rows: u16,
    #[serde(default)]
    pub cols: u16,
    /// Lines of history the pane keeps; 0 is the daemon's default.
    #[serde(default)]
    pub history_lines: u32,
    /// The history's cap in bytes; 0 is the daemon's default.
    #[serde(default)]
    pub history_bytes: u64,
    /// The client's `LANG` and `LC_*`: each is used when the image has that
    /// locale, else `C.UTF-8` where the image provides it.
    #[serde(default)]
    pub locale: BTreeMap<String, String>,
    /// A pane of this name whose program exited is replaced by a new one
    /// (`workroom shell -d`); without it, the exited pane is answered as it
    /// is, so an attach can show its last screen (`workroom shell`).
    #[serde(default)]
    pub replace_exited: bool,
    /// Run `argv` through the user's login shell, as [`RunRequest::login_shell`]
    /// does, so a command finds what the profile puts on `PATH` as it
    /// would typed into a shell pane. Ignored without `argv` (the login
    /// shell itself runs).
    #[serde(default)]
    pub login_shell: bool,
}

/// What to capture of a pane (see [`Request::CapturePane`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureRequest {
    pub pane: String,
    /// The last `lines` lines only.
    #[serde(default)]
    pub lines: Option<u32>,
    /// Colours and attributes as SGR escapes.
    #[serde(default)]
    pub escapes: bool,
    /// The screen alone, without the history.
    #[serde(default)]
    pub screen_only: bool,
    /// Answer only once the pane changed since this count (from an earlier
    /// [`Response::Captured`]), or after a while without change.
    #[serde(default)]
    pub changed_since: Option<u64>,
}

/// One pane, as [`Response::Panes`] and [`Response::PaneOpened`] show it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaneInfo {
    pub name: String,
    pub command: Vec<String>,
    pub pid: u32,
    pub rows: u16,
    pub cols: u16,
    /// Clients attached now.
    pub clients: u32,
    pub created_unix_ms: u64,
    /// Lines in its history now.
    #[serde(default)]
    pub history: u64,
    /// How its program ended; `None` while it runs. An exited pane stays,
    /// readable, until it is killed or replaced.
    #[serde(default)]
    pub exited: Option<ExitStatus>,
}

/// What a pane that ended left (see [`Request::Attach`]): one that ended
/// with its room's restart, or one whose program exited.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndedPane {
    /// "pane main ended when the room restarted at ..." or "pane main
    /// exited with status 3".
    pub message: String,
    /// The last screen saved, as bytes that repaint it; `None` if none was kept.
    pub screen: Option<String>,
    /// How its program ended, when the daemon saw it end (not across a
    /// restart).
    #[serde(default)]
    pub status: Option<ExitStatus>,
}

/// The outcome of a [`Request::HandOff`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HandOffOutcome {
    /// The daemon already runs that binary (same digest); nothing was done.
    Current,
    /// A dry run found a different binary.
    Differs,
    /// The new binary passed its check; the daemon is exec'ing it now and
    /// this connection ends. Reconnect and ask again to confirm.
    HandingOff,
}

/// A guard for [`Request::SetMarker`]: the marker's value must currently be
/// `current` (`None`: the marker must be absent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expected {
    pub current: Option<String>,
}

/// The daemon's answer: the payload of a `Reply` frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Response {
    Status(DaemonStatus),
    /// The command of a [`Request::Run`] runs as this pid.
    Started {
        pid: u32,
    },
    /// A streaming request was accepted; its streams follow.
    Ready,
    Users {
        users: Vec<PasswdEntry>,
        groups: Vec<GroupEntry>,
    },
    Markers {
        markers: BTreeMap<String, String>,
    },
    MarkerSet {
        /// False when `expected` did not hold; nothing changed.
        applied: bool,
        /// The marker's value after the request.
        current: Option<String>,
    },
    /// [`Request::RunHook`]: how the hook was found.
    Hook(HookState),
    /// The answer to [`Request::GitCredential`]: `git credential`'s stdout.
    Credential {
        output: String,
    },
    /// [`Request::OpenPane`]: the pane, and whether this request made it.
    /// `ended` is set when a pane of that name had ended with the room's
    /// restart and this one replaces it.
    PaneOpened {
        pane: PaneInfo,
        created: bool,
        #[serde(default)]
        ended: Option<EndedPane>,
        /// Set when this pane replaced one of its name whose program had
        /// exited so (`replace_exited`).
        #[serde(default)]
        replaced: Option<ExitStatus>,
    },
    /// [`Request::ListPanes`].
    Panes {
        panes: Vec<PaneInfo>,
    },
    /// [`Request::Attach`] to a pane that ended with its room's restart.
    PaneEnded(EndedPane),
    /// [`Request::Attach`] with a `typist`: as `Ready`, and how many of the
    /// bytes that typist sent the pane took, counted from its first byte
    /// ([`Typist::sent`]; across a hand-off, what reached the pty). The
    /// client sends again what it typed beyond.
    Attached {
        typed: u64,
    },
    /// [`Request::HandOff`]: `digest` names the binary the daemon runs (for
    /// `Current`) or the new one.
    HandOff {
        outcome: HandOffOutcome,
        digest: String,
        version: String,
    },
    /// [`Request::CapturePane`]: the text follows as `Data`. `changes`
    /// counts the pane's changes (for `changed_since`); `exited` says the
    /// pane's program ended so and its text will not change again.
    Captured {
        changes: u64,
        rows: u16,
        cols: u16,
        #[serde(default)]
        exited: Option<ExitStatus>,
    },
    /// A request that has nothing to answer succeeded.
    Done,
    /// The request failed; a streaming request's stream ends here too.
    Error {
        message: String,
    },
}

impl Response {
    pub fn error(message: impl Into<String>) -> Response {
        Response::Error { message: message.into() }
    }

    /// An error with its whole chain of causes on one line (`a: b: c`):
    /// the host cannot walk the chain of an error that crossed the wire.
    pub fn failed(error: &dyn std::error::Error) -> Response {
        let mut message = error.to_string();
        let mut cause = error.source();
        while let Some(e) = cause {
            message.push_str(": ");
            message.push_str(&e.to_string());
            cause = e.source();
        }
        Response::Error { message }
    }

    /// Whether this reply ends its stream: the request does not stream, or
    /// it failed. Part of the protocol, like [`Request::is_streaming`].
    pub fn ends_stream(&self, streaming: bool) -> bool {
        !streaming || matches!(self, Response::Error { .. })
    }
}

/// The daemon's answer to [`Request::Status`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonStatus {
    pub version: String,
    pub protocol: u32,
    /// Changes on every container start: lifecycle hooks that run once per
    /// start compare against it.
    pub boot_id: String,
    pub started_at_unix_ms: u64,
    pub pid: u32,
    pub program: ProgramStatus,
    /// How often the program was restarted since the container started
    /// (absent from daemons before restarts: read as 0).
    #[serde(default)]
    pub program_restarts: u32,
}

/// The image's own program, which the daemon supervises when
/// `overrideCommand` is false.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ProgramStatus {
    /// `overrideCommand` is true (the default): there is no program.
    NotConfigured,
    Running {
        pid: u32,
    },
    Exited(ExitStatus),
    FailedToStart {
        message: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn wire<T: Serialize>(value: &T) -> Value {
        serde_json::to_value(value).unwrap()
    }

    fn round_trip<T>(value: &T)
    where
        T: Serialize + for<'de> Deserialize<'de> + PartialEq + fmt::Debug,
    {
        let bytes = serde_json::to_vec(value).unwrap();
        assert_eq!(&serde_json::from_slice::<T>(&bytes).unwrap(), value);
    }

    #[test]
    fn hello_has_the_documented_shape() {
        let hello = Hello { protocol: 1, version: "0.1.0".into(), role: Role::Daemon, window: None, hooks: None };
        assert_eq!(wire(&hello), json!({"protocol": 1, "version": "0.1.0", "role": "daemon"}));
        assert_eq!(hello.describe(), "workroomd 0.1.0 speaks protocol 1");
        let growing = Hello { window: Some(262_144), ..hello };
        assert_eq!(wire(&growing), json!({"protocol": 1, "version": "0.1.0", "role": "daemon", "window": 262_144}));
    }

    #[test]
    fn a_hello_of_before_without_a_window_still_reads() {
        let old: Hello = serde_json::from_value(json!({"protocol": 1, "version": "0.1.0", "role": "host"})).unwrap();
        assert_eq!(old.window, None);
    }

    #[test]
    fn only_a_daemons_hello_names_hook_jobs_and_one_of_before_runs_none() {
        assert_eq!(wire(&Hello::new(Role::Daemon))["hooks"], json!(HOOK_JOBS));
        assert_eq!(wire(&Hello::new(Role::Host)).get("hooks"), None);
        assert!(Hello::new(Role::Daemon).runs_hook_jobs());
        let before: Hello =
            serde_json::from_value(json!({"protocol": 1, "version": "0.1.0", "role": "daemon", "window": 1})).unwrap();
        assert!(!before.runs_hook_jobs(), "a daemon of before: the host claims and runs hooks itself");
        let later = Hello { hooks: Some(HOOK_JOBS + 1), ..Hello::new(Role::Daemon) };
        assert!(!later.runs_hook_jobs(), "a version this host does not know is not taken for its own");
    }

    #[test]
    fn a_hook_run_and_a_start_plan_have_the_documented_shape() {
        let run = Request::RunHook(HookRun {
            key: "postCreateCommand".into(),
            done: "done".into(),
            hook: "postCreateCommand".into(),
            run: HookCommands {
                commands: vec![vec![HookStep { label: "postCreateCommand".into(), argv: vec!["true".into()] }]],
                user: Some("dev".into()),
                env: BTreeMap::new(),
                cwd: Some("/w".into()),
            },
            reference_time: Some("2026-12-01T10:00:00Z".into()),
        });
        assert_eq!(
            wire(&run),
            json!({"op": "run_hook", "key": "postCreateCommand", "done": "done", "hook": "postCreateCommand",
                   "run": {"commands": [[{"label": "postCreateCommand", "argv": ["true"]}]],
                           "user": "dev", "env": {}, "cwd": "/w"},
                   "reference_time": "2026-12-01T10:00:00Z"})
        );
        assert!(run.is_streaming());
        round_trip(&run);
        let plan = Request::SetStartPlan(StartPlan {
            after: vec!["onCreateCommand".into()],
            digest: "ab".into(),
            ..Default::default()
        });
        assert!(!plan.is_streaming());
        round_trip(&plan);
        assert_eq!(wire(&Response::Hook(HookState::Started)), json!({"reply": "hook", "state": "started"}));
        round_trip(&Response::Hook(HookState::Busy { current: "running:h:1:2".into() }));
    }

    #[test]
    fn requests_are_tagged_by_op() {
        assert_eq!(wire(&Request::Status), json!({"op": "status"}));
        assert_eq!(wire(&Request::GetMarkers), json!({"op": "get_markers"}));
        let run = Request::Run(RunRequest {
            argv: vec!["true".into()],
            user: Some("1000".into()),
            stdin: true,
            ..RunRequest::default()
        });
        assert_eq!(
            wire(&run),
            json!({"op": "run", "argv": ["true"], "user": "1000", "env": {},
                   "cwd": null, "stdin": true, "login_shell": false})
        );
    }

    #[test]
    fn a_run_request_with_only_argv_reads_with_defaults() {
        let request: Request = serde_json::from_str(r#"{"op":"run","argv":["id"]}"#).unwrap();
        assert_eq!(request, Request::Run(RunRequest { argv: vec!["id".into()], ..RunRequest::default() }));
    }

    #[test]
    fn an_unknown_op_does_not_read_as_a_request() {
        assert!(serde_json::from_str::<Request>(r#"{"op":"frobnicate"}"#).is_err());
    }

    #[test]
    fn set_marker_omits_an_absent_guard_and_keeps_a_null_one() {
        let unguarded = Request::SetMarker { key: "on_create".into(), value: Some("done".into()), expected: None };
        assert_eq!(wire(&unguarded), json!({"op": "set_marker", "key": "on_create", "value": "done"}));
        let must_be_absent = Request::SetMarker {
            key: "on_create".into(),
            value: Some("done".into()),
            expected: Some(Expected { current: None }),
        };
        assert_eq!(wire(&must_be_absent)["expected"], json!({"current": null}));
        round_trip(&unguarded);
        round_trip(&must_be_absent);
    }

    #[test]
    fn responses_and_statuses_round_trip() {
        let status = Response::Status(DaemonStatus {
            version: "0.1.0".into(),
            protocol: 1,
            boot_id: "b00t".into(),
            started_at_unix_ms: 1_700_000_000_000,
            pid: 1,
            program: ProgramStatus::Exited(ExitStatus { code: None, signal: Some(9) }),
            program_restarts: 3,
        });
        assert_eq!(wire(&status)["program"], json!({"state": "exited", "code": null, "signal": 9}));
        assert_eq!(wire(&status)["program_restarts"], json!(3));
        // A daemon from before restarts sends none: read as 0.
        let older: DaemonStatus = serde_json::from_value(json!({
            "version": "0.1.0", "protocol": 1, "boot_id": "b", "started_at_unix_ms": 1, "pid": 1,
            "program": {"state": "not_configured"}
        }))
        .unwrap();
        assert_eq!(older.program_restarts, 0);
        for response in [
            status,
            Response::Started { pid: 42 },
            Response::Ready,
            Response::Users { users: vec![], groups: vec![] },
            Response::Markers { markers: BTreeMap::from([("post_start".into(), "b00t".into())]) },
            Response::MarkerSet { applied: false, current: Some("x".into()) },
            Response::error("no"),
        ] {
            round_trip(&response);
        }
        assert_eq!(wire(&Response::Started { pid: 42 }), json!({"reply": "started", "pid": 42}));
    }

    #[test]
    fn only_run_and_echo_stream() {
        assert!(Request::Echo.is_streaming());
        assert!(Request::Run(RunRequest::default()).is_streaming());
        assert!(!Request::Status.is_streaming());
        assert!(!Request::Users.is_streaming());
    }

    #[test]
    fn forwarding_requests_have_the_documented_shape() {
        let connect = Request::Connect { host: "127.0.0.1".into(), port: 8080 };
        assert_eq!(wire(&connect), json!({"op": "connect", "host": "127.0.0.1", "port": 8080}));
        assert!(connect.is_streaming());
        assert!(Request::SshAgent.is_streaming());
        let fill = Request::GitCredential { operation: "fill".into(), input: "protocol=https\n".into() };
        assert!(!fill.is_streaming());
        round_trip(&fill);
        let offer = Request::OfferCredentials { user: "dev".into(), ssh_agent: true, git_credentials: false };
        assert!(!offer.is_streaming());
        round_trip(&offer);
        round_trip(&Response::Credential { output: "username=u\n".into() });
    }

    #[test]
    fn the_egress_offer_is_answered_once_and_each_proxy_connection_streams() {
        let offer = Request::OfferEgress { port: 3128 };
        assert_eq!(wire(&offer), json!({"op": "offer_egress", "port": 3128}));
        assert!(!offer.is_streaming());
        assert_eq!(wire(&Request::Egress), json!({"op": "egress"}));
        assert!(Request::Egress.is_streaming());
        round_trip(&offer);
    }

    #[test]
    fn attach_streams_and_the_other_pane_requests_do_not() {
        assert!(Request::Attach { pane: "main".into(), rows: 24, cols: 80, history: true, typist: None }.is_streaming());
        assert!(Request::CapturePane(CaptureRequest::default()).is_streaming());
        for request in [
            Request::TypeIn { pane: "main".into(), text: "x".into() },
            Request::OpenPane(PaneRequest::default()),
            Request::ResizePane { pane: "main".into(), rows: 1, cols: 1 },
            Request::ListPanes,
            Request::KillPane { pane: "main".into() },
            Request::HandOff { binary: String::new(), force: false, dry_run: true },
        ] {
            assert!(!request.is_streaming(), "{request:?}");
        }
    }

    #[test]
    fn pane_requests_read_with_defaults_and_hand_off_outcomes_are_snake_case() {
        let request: Request = serde_json::from_str(r#"{"op":"attach","pane":"main"}"#).unwrap();
        // An older client's attach replays the history, as every attach did.
        assert_eq!(request, Request::Attach { pane: "main".into(), rows: 0, cols: 0, history: true, typist: None });
        let request: Request = serde_json::from_str(r#"{"op":"open_pane","name":"w"}"#).unwrap();
        assert_eq!(request, Request::OpenPane(PaneRequest { name: "w".into(), ..Default::default() }));
        let reply =
            Response::HandOff { outcome: HandOffOutcome::HandingOff, digest: "ab".into(), version: "0.1.0".into() };
        assert_eq!(
            wire(&reply),
            json!({"reply": "hand_off", "outcome": "handing_off", "digest": "ab", "version": "0.1.0"})
        );
        round_trip(&reply);
        round_trip(&Response::PaneEnded(EndedPane {
            message: "m".into(),
            screen: Some("s".into()),
            status: Some(ExitStatus { code: Some(3), signal: None }),
        }));
    }

    #[test]
    fn an_error_reply_ends_even_a_streaming_stream() {
        assert!(Response::error("spawn failed").ends_stream(true));
        assert!(!Response::Started { pid: 1 }.ends_stream(true));
        assert!(Response::Ready.ends_stream(false));
    }

    #[test]
    fn a_pane_from_a_daemon_before_exited_panes_reads_as_running() {
        let old: PaneInfo = serde_json::from_value(json!({
            "name": "main", "command": ["/bin/sh", "-l"], "pid": 7, "rows": 24, "cols": 80,
            "clients": 0, "created_unix_ms": 1
        }))
        .unwrap();
        assert_eq!(old.exited, None);
        let exited = PaneInfo { exited: Some(ExitStatus { code: Some(3), signal: None }), ..old };
        assert_eq!(wire(&exited)["exited"], json!({"code": 3, "signal": null}));
        round_trip(&exited);
        let reply: Response =
            serde_json::from_value(json!({"reply": "captured", "changes": 4, "rows": 24, "cols": 80})).unwrap();
        assert_eq!(reply, Response::Captured { changes: 4, rows: 24, cols: 80, exited: None });
        let ended: EndedPane = serde_json::from_value(json!({"message": "m", "screen": null})).unwrap();
        assert_eq!(ended.status, None);
    }

    #[test]
    fn an_exit_status_reads_as_its_status_or_its_signal_by_name() {
        let status = |code, signal| ExitStatus { code, signal };
        assert_eq!(status(Some(3), None).summary(), "exited with status 3");
        assert_eq!(status(None, Some(9)).summary(), "killed by signal 9 (SIGKILL)");
        assert_eq!(status(None, Some(40)).summary(), "killed by signal 40");
        assert_eq!(status(None, None).summary(), "ended with its status unknown");
        assert_eq!(status(Some(3), None).describe(), "exited with status 3");
        assert_eq!(status(None, Some(15)).describe(), "was killed by signal 15 (SIGTERM)");
        assert_eq!((status(Some(3), None).shell_code(), status(None, Some(1)).shell_code()), (3, 129));
    }

    #[test]
    fn exit_status_has_both_fields_even_when_null() {
        assert_eq!(wire(&ExitStatus { code: Some(3), signal: None }), json!({"code": 3, "signal": null}));
    }
}
