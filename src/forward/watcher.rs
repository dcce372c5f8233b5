//! `workroom watch`: the host's half of a room the engine starts by itself.
//!
//! A room comes back whole from a start nobody typed (its restart policy
//! after a host reboot, an engine restart, `docker start`): the daemon runs
//! postStartCommand, and a background forwarder that was running follows
//! the room to its new start ([`super::rejoin`]). What a reboot also ends is
//! that forwarder, and with a state folder under `/run` or `/tmp` its files
//! too, so ports, the ssh-agent and git credentials waited for the next
//! `workroom` command. The watcher is the process that is there after a
//! reboot (a systemd user unit, `forward::unit`): it follows the engine's
//! start events for containers with our schema label (and this install's
//! scope), and for each running room with something to carry and no
//! forwarder serving its start, it starts the room's forwarder as `up`
//! does ([`super::background::ensure`], under the room's start lock, so
//! several watchers and a concurrent `up` start one). It reads what it
//! needs from the room's labels and the configuration they name; it runs
//! no lifecycle hook and changes no room.
//!
//! The engine going away (its stream ends, a call fails) is waited out at
//! [`Pace::ENGINE_RETURN`] for as long as it takes: the watcher is a login
//! service, and an engine started after the login, or stopped for an
//! upgrade, is followed when it answers. It then looks at every room
//! again, as starts went unseen meanwhile.

use super::background;
use crate::engine::{Engine, EngineError};
use crate::notices::Notices;
use crate::plan::{labels, peers};
use crate::retry::{Backoff, Pace};
use crate::room::resolve::Resolved;
use bollard::models::ContainerInspectResponse;
use futures_util::StreamExt;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// A room the watcher may have to forward, as its inspect describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    pub id: String,
    /// The container's name, without the engine's leading `/`.
    pub name: String,
    /// `State.StartedAt`: the start to be served.
    pub started_at: String,
    /// `devcontainer.local_folder` and `devcontainer.config_file`: the
    /// configuration the room was made from.
    pub folder: Option<PathBuf>,
    pub config: Option<PathBuf>,
    /// An `allowlist` room: its forwarder serves its only way out.
    pub egress: bool,
}

/// What the watcher makes of a container it was told about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// Running, ours, of this install's scope: looked after.
    Room(Watched),
    /// Without our schema label, of another scope, or a peer anchor: never
    /// touched.
    NotOurs,
    /// Ours, not running (or between the stop and start of a restart): its
    /// start, when it comes, is an event of its own.
    NotRunning,
}

impl Seen {
    /// What an inspect of a container says, for a watcher of `scope`
    /// (`WORKROOM_SCOPE`; `None` looks after every room).
    pub fn of(c: &ContainerInspectResponse, scope: Option<&str>) -> Seen {
        let labels = c.config.as_ref().and_then(|c| c.labels.as_ref());
        let label = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
        if label(labels::SCHEMA).is_none() || peers::is_anchor(labels) {
            return Seen::NotOurs;
        }
        if scope.is_some_and(|s| label(peers::SCOPE_LABEL) != Some(s)) {
            return Seen::NotOurs;
        }
        let state = c.state.as_ref();
        let running = state.and_then(|s| s.running) == Some(true) && state.and_then(|s| s.restarting) != Some(true);
        let started_at = state.and_then(|s| s.started_at.clone()).unwrap_or_default();
        let (Some(id), Some(name)) = (c.id.clone(), c.name.as_deref()) else { return Seen::NotRunning };
        if !running || started_at.is_empty() {
            return Seen::NotRunning;
        }
        Seen::Room(Watched {
            id,
            name: name.trim_start_matches('/').to_string(),
            started_at,
            folder: label(labels::LOCAL_FOLDER).map(PathBuf::from),
            config: label(labels::CONFIG_FILE).map(PathBuf::from),
            egress: crate::plan::egress::mode_of(labels) == crate::settings::EgressMode::Allowlist,
        })
    }
}

/// What the watcher did for one start of a room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It started the room's forwarder: these are its lines.
    Started { pid: u32, lines: Vec<String> },
    /// A forwarder (`up`'s, another watcher's, or one that followed the
    /// room) serves the start.
    Served { pid: u32 },
    /// No `forwardPorts`, and this host offers no ssh-agent or git
    /// credentials.
    Nothing,
    /// Stopped again before its forwarder was looked at: its next start is
    /// an event of its own.
    Stopped,
    /// The room's configuration cannot be read, or the forwarder did not
    /// start: why.
    Failed(String),
}

/// The line the watcher says of a handled start: the room and its start
/// first, so a log reader (and a test) finds each start's one line.
pub fn said(room: &str, started_at: &str, outcome: &Outcome) -> String {
    let what = match outcome {
        Outcome::Started { pid, lines } => {
            let carried: Vec<&str> =
                lines.iter().map(|l| l.strip_prefix(room).and_then(|l| l.strip_prefix(": ")).unwrap_or(l)).collect();
            format!("started its forwarder (pid {pid}): {}", carried.join(", "))
        }
        Outcome::Served { pid } => format!("its forwarder (pid {pid}) serves it"),
        Outcome::Nothing => "nothing to forward".to_string(),
        Outcome::Stopped => "stopped again before its forwarder was looked at".to_string(),
        Outcome::Failed(why) => format!("not forwarded: {why}"),
    };
    format!("{room} started at {started_at}: {what}")
}

/// The starts already handled, by container id: an event and the first
/// look can both report one start, and a burst of events (`restart` beside
/// `start`) another.
#[derive(Debug, Default)]
struct Handled(HashMap<String, String>);

impl Handled {
    /// Whether `started_at` is a start of `id` not handled yet; marks it.
    fn first(&mut self, id: &str, started_at: &str) -> bool {
        self.0.insert(id.to_string(), started_at.to_string()).as_deref() != Some(started_at)
    }
}

/// Why the watcher stops.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// An engine address or setting that no wait will mend.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Follows the engine and keeps the rooms' forwarders, until the caller
/// drops it (SIGTERM). Returns only when the engine's address is wrong.
pub async fn watch(log: Arc<Notices>) -> Result<(), WatchError> {
    let watcher = Watcher {
        filters: crate::room::scoped(vec![labels::SCHEMA.to_string()]),
        scope: crate::room::peers::scope_from_env(),
        handled: Arc::default(),
        log,
    };
    let engine = watcher.connect().await?;
    let mut away = Away::default();
    loop {
        let why = watcher.follow(&engine, &mut away).await;
        away.went(&engine, &why, &watcher.log);
        away.pause().await;
    }
}

/// Whether the engine is away, and how long to pause before looking again.
#[derive(Default)]
struct Away {
    since: Option<Backoff>,
    /// Whether the engine was followed once: the first time is said as the
    /// watcher being ready, the next ones as the engine's return.
    followed: bool,
}

impl Away {
    /// The engine did not answer, or ended the stream: said once.
    fn went(&mut self, engine: &Engine, why: &str, log: &Notices) {
        if self.since.is_none() {
            log.say(format!("the engine at {} {why}; waiting for it to answer", engine.host()));
        }
        // Never given up on (the deadline is not looked at): the pace
        // alone matters, at most a look every 5 s.
        self.since.get_or_insert_with(|| Backoff::new(Pace::ENGINE_RETURN, crate::forward::rejoin::ENGINE_RETURN_WAIT));
    }

    /// The engine answered, its starts are followed and its rooms listed:
    /// said once, and the pace starts again.
    fn back(&mut self, engine: &Engine, log: &Notices) {
        if !std::mem::replace(&mut self.followed, true) {
            log.say(format!("watching the engine at {} for rooms that start", engine.host()));
        } else if self.since.is_some() {
            log.say(format!("the engine at {} answers again; looking at every room", engine.host()));
        }
        self.since = None;
    }

    async fn pause(&mut self) {
        if let Some(wait) = self.since.as_mut() {
            wait.pause().await;
        }
    }
}

struct Watcher {
    /// Our schema label, and this install's scope: the only containers the
    /// engine is asked about.
    filters: Vec<String>,
    scope: Option<String>,
    handled: Arc<Mutex<Handled>>,
    log: Arc<Notices>,
}

impl Watcher {
    /// The engine, waited for while it does not answer; an address or
    /// setting that is wrong ends the watcher.
    async fn connect(&self) -> Result<Engine, EngineError> {
        let mut said = false;
        let mut wait = Backoff::new(Pace::ENGINE_RETURN, crate::forward::rejoin::ENGINE_RETURN_WAIT);
        loop {
            match Engine::connect().await {
                Ok(engine) => return Ok(engine),
                Err(e @ (EngineError::Unreachable { .. } | EngineError::NoAnswer { .. } | EngineError::Ssh(_))) => {
                    if !said {
                        self.log.say(format!("{e}; waiting for it to answer"));
                        said = true;
                    }
                    wait.pause().await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One subscription to the engine's start events: every running room
    /// looked at first, then each start as it comes. Returns why it ended
    /// (the engine went away).
    async fn follow(&self, engine: &Engine, away: &mut Away) -> String {
        // The engine's own clock: the events are asked from before the
        // rooms are listed, so a start between the two is replayed, not
        // missed (a replayed start that was handled is skipped).
        let since = match engine.describe().await {
            Ok((info, _)) => info.system_time.unwrap_or_default(),
            Err(e) => return format!("did not answer ({e})"),
        };
        let mut starts = engine.labelled_starts(&self.filters, &since);
        let rooms = match crate::room::all_rooms(engine).await {
            Ok(rooms) => rooms,
            Err(e) => return format!("did not answer ({e})"),
        };
        away.back(engine, &self.log);
        for id in rooms.into_iter().filter_map(|c| c.id) {
            self.look_at(engine, id);
        }
        loop {
            match starts.next().await {
                Some(Ok(event)) => {
                    if let Some(id) = event.actor.and_then(|a| a.id) {
                        self.look_at(engine, id);
                    }
                }
                Some(Err(e)) => return format!("broke its event stream ({e})"),
                None => return "ended its event stream".to_string(),
            }
        }
    }

    /// Handles a start of container `id` on a task of its own: one room
    /// waiting on its forwarder holds up no other.
    fn look_at(&self, engine: &Engine, id: String) {
        let (engine, scope, handled, log) =
            (engine.clone(), self.scope.clone(), self.handled.clone(), self.log.clone());
        tokio::spawn(async move {
            match handle(&engine, &id, scope.as_deref(), &handled).await {
                Ok(Some((room, outcome))) => log.say(said(&room.name, &room.started_at, &outcome)),
                Ok(None) => {}
                // The engine going away ends the event stream too, and
                // every room is looked at again once it answers.
                Err(e) => log.warn(format!("cannot look at container {id}: {e}")),
            }
        });
    }
}

/// One start of container `id`: `None` when it is not ours, not running,
/// or that start was handled already.
async fn handle(
    engine: &Engine,
    id: &str,
    scope: Option<&str>,
    handled: &Mutex<Handled>,
) -> Result<Option<(Watched, Outcome)>, EngineError> {
    let Seen::Room(room) = look(engine, id, scope).await? else { return Ok(None) };
    if !workroomd::locks::lock(handled).first(&room.id, &room.started_at) {
        return Ok(None);
    }
    let outcome = match configuration(&room) {
        Ok(resolved) => {
            keep_forwarder(engine, &room, &resolved, scope).await.unwrap_or_else(|e| Outcome::Failed(format!("{e:#}")))
        }
        Err(why) => Outcome::Failed(why.to_string()),
    };
    Ok(Some((room, outcome)))
}

async fn look(engine: &Engine, id: &str, scope: Option<&str>) -> Result<Seen, EngineError> {
    Ok(engine.inspect_container(id).await?.map_or(Seen::NotRunning, |c| Seen::of(&c, scope)))
}

/// The configuration the room was made from, read again from the files its
/// labels name (the same reading `workroom forward ROOM` makes).
fn configuration(room: &Watched) -> Result<Resolved, ConfigurationError> {
    let (Some(folder), Some(config)) = (&room.folder, &room.config) else {
        return Err(ConfigurationError::NotNamed);
    };
    Resolved::load(folder, Some(config.clone()), Default::default())
        .map_err(|e| ConfigurationError::Unreadable { config: config.clone(), cause: format!("{e:#}") })
}

/// Why a room's configuration cannot be read again.
#[derive(Debug, thiserror::Error)]
enum ConfigurationError {
    #[error("its labels name no devcontainer.json")]
    NotNamed,
    /// `cause` is the whole chain on one line, as the log shows it.
    #[error("{} cannot be read now: {cause}", config.display())]
    Unreadable { config: PathBuf, cause: String },
}

/// Under the room's start lock: the room looked at again (the start may
/// have changed while another holder had the lock), then the forwarder
/// `up` would start, unless one serves the start.
async fn keep_forwarder(
    engine: &Engine,
    room: &Watched,
    resolved: &Resolved,
    scope: Option<&str>,
) -> anyhow::Result<Outcome> {
    let held = super::state::lock_start(&room.name).await?;
    let started_at = match look(engine, &room.id, scope).await? {
        Seen::Room(now) => now.started_at,
        Seen::NotOurs | Seen::NotRunning => return Ok(Outcome::Stopped),
    };
    let asked = background::carries(&resolved.loaded, (&resolved.settings).into());
    let egress = room.egress;
    let carries = async move { egress || asked.await };
    match background::ensure(&held, &room.name, &started_at, carries).await? {
        Some(status) => Ok(Outcome::Started { pid: status.pid, lines: background::started_lines(&status) }),
        None => match super::state::background_pid(&room.name) {
            Some(pid) => Ok(Outcome::Served { pid }),
            None => Ok(Outcome::Nothing),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::{ContainerConfig, ContainerState};

    const START: &str = "2026-12-05T08:00:00.5Z";

    fn container(labels: &[(&str, &str)], running: bool) -> ContainerInspectResponse {
        ContainerInspectResponse {
            id: Some("abc".into()),
            name: Some("/workroom-app-1a2b".into()),
            config: Some(ContainerConfig {
                labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            }),
            state: Some(ContainerState {
                running: Some(running),
                restarting: Some(false),
                started_at: Some(START.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    const ROOM: [(&str, &str); 3] = [
        (labels::SCHEMA, "1"),
        (labels::LOCAL_FOLDER, "/src/app"),
        (labels::CONFIG_FILE, "/src/app/.devcontainer.json"),
    ];

    #[test]
    fn a_running_room_is_looked_after_with_the_configuration_its_labels_name() {
        let Seen::Room(room) = Seen::of(&container(&ROOM, true), None) else { panic!("not taken for a room") };
        assert_eq!(room.name, "workroom-app-1a2b");
        assert_eq!(room.started_at, START);
        assert_eq!(room.folder, Some(PathBuf::from("/src/app")));
        assert_eq!(room.config, Some(PathBuf::from("/src/app/.devcontainer.json")));
    }

    #[test]
    fn a_container_without_our_schema_label_is_never_ours_even_with_the_reference_clis_labels() {
        let foreign = [(labels::LOCAL_FOLDER, "/src/app"), (labels::CONFIG_FILE, "/src/app/.devcontainer.json")];
        assert_eq!(Seen::of(&container(&foreign, true), None), Seen::NotOurs);
        assert_eq!(Seen::of(&container(&[], true), None), Seen::NotOurs);
    }

    #[test]
    fn a_peer_anchor_and_a_room_of_another_scope_are_not_looked_after() {
        let anchor = [(labels::SCHEMA, "1"), (peers::ROLE_LABEL, peers::ROLE_ANCHOR)];
        assert_eq!(Seen::of(&container(&anchor, true), None), Seen::NotOurs);
        let scoped = [(labels::SCHEMA, "1"), (peers::SCOPE_LABEL, "other")];
        assert_eq!(Seen::of(&container(&scoped, true), Some("mine")), Seen::NotOurs);
        assert_eq!(
            Seen::of(&container(&ROOM, true), Some("mine")),
            Seen::NotOurs,
            "an unscoped room, a scoped watcher"
        );
        let mine = [(labels::SCHEMA, "1"), (peers::SCOPE_LABEL, "mine")];
        assert!(matches!(Seen::of(&container(&mine, true), Some("mine")), Seen::Room(_)));
    }

    #[test]
    fn a_room_that_is_not_running_or_is_restarting_waits_for_its_start_event() {
        assert_eq!(Seen::of(&container(&ROOM, false), None), Seen::NotRunning);
        let mut restarting = container(&ROOM, true);
        if let Some(state) = restarting.state.as_mut() {
            state.restarting = Some(true);
        }
        assert_eq!(Seen::of(&restarting, None), Seen::NotRunning);
    }

    #[test]
    fn a_start_is_handled_once_and_the_next_start_again() {
        let mut handled = Handled::default();
        assert!(handled.first("abc", START));
        assert!(!handled.first("abc", START), "the same start twice");
        assert!(handled.first("abc", "2026-12-05T09:00:00Z"));
        assert!(handled.first("def", START), "another room");
    }

    #[test]
    fn each_handled_start_is_one_line_naming_the_room_and_its_start() {
        let started =
            Outcome::Started { pid: 42, lines: vec!["r: 8080 listening".into(), "r: ssh-agent forwarded".into()] };
        assert_eq!(
            said("r", START, &started),
            format!("r started at {START}: started its forwarder (pid 42): 8080 listening, ssh-agent forwarded")
        );
        assert_eq!(
            said("r", START, &Outcome::Served { pid: 7 }),
            format!("r started at {START}: its forwarder (pid 7) serves it")
        );
        assert_eq!(said("r", START, &Outcome::Nothing), format!("r started at {START}: nothing to forward"));
        assert_eq!(
            said("r", START, &Outcome::Failed("why".into())),
            format!("r started at {START}: not forwarded: why")
        );
    }
}
