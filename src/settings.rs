//! workroom's own settings (not devcontainer.json's): the user's
//! `$XDG_CONFIG_HOME/workroom/config.toml` (else `~/.config/workroom/config.toml`)
//! and the project's `.workroom.toml` in the workspace folder. For each key the
//! project wins over the user, and a command-line flag wins over both.
//!
//! Reading the files is the only I/O here; [`merge`] is pure and table-tested.
//!
//! ```toml
//! peer_messaging = true                       # agents in rooms find each other
//! peer_group = "default"                      # who they find: rooms of this group (and uid)
//! peer_registry = "~/.local/share/workroom/peers"   # <this>/<group>/<uid> is bound at ~/.claude
//!
//! [forward]
//! ssh_agent = true                            # the host's ssh-agent in the room
//! git_credentials = true                      # the host's git credentials in the room
//!
//! [containers]
//! nested = false                              # podman/buildah inside the room, never --privileged
//! metadata_privileged = true                  # `privileged: true` from image/feature metadata applies (said loudly)
//!
//! [network]
//! mode = "bridge"                             # or "host": the room on the host's network
//!
//! workspace = "auto"                         # or "volume": the workspace uploaded into a volume; "bind": never
//! worktrees = "../{repo}.worktrees"          # where `up --worktree NAME` puts NAME (relative: to the main checkout)
//!
//! [panes]
//! history_lines = 10000                       # lines each pane keeps above its screen
//! history_bytes = 524288                      # and at most this many bytes of them
//!
//! [caps]                                      # resource caps of a room, when it is made
//! cpus = 2                                    # CPUs (1.5: a CPU and a half)
//! memory = "4g"                               # memory; swap is capped at the same unless…
//! memory_swap = "6g"                          # …memory and swap together (-1: swap uncapped)
//! pids = 512                                  # processes (and threads)
//! tmp = "1g"                                  # /tmp as an in-memory tmpfs of this size
//! ```
//!
//! `nested` and `network.mode` may also come from devcontainer.json's
//! `customizations.workroom.nested` / `customizations.workroom.network`,
//! and `[caps]` from `customizations.workroom.caps` (an object of the same
//! keys); the order is `.workroom.toml`, then devcontainer.json, then the
//! user's file. Caps meet `runArgs`' own in `plan::caps` (the lower holds).

use crate::plan::caps::{self, Asked, CapsFile};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The project's settings file, in the workspace folder.
pub const PROJECT_FILE: &str = ".workroom.toml";

pub use crate::plan::peers::DEFAULT_PEER_GROUP;
/// The longest peer group name: it becomes part of the anchor's and the
/// socket volume's names, which `docker ps` shows.
pub const MAX_PEER_GROUP: usize = 32;

/// A peer group's name: lower-case letters, digits and inner dashes. It is
/// part of container and volume names and of a host folder's path, so no
/// `.` (the names stay injective), no `/` and nothing a name cannot hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("peer group {0:?}: use lower-case letters, digits and inner dashes, at most {MAX_PEER_GROUP} characters")]
pub struct BadPeerGroup(pub String);

pub fn check_peer_group(name: &str) -> Result<(), BadPeerGroup> {
    let ok = !name.is_empty()
        && name.len() <= MAX_PEER_GROUP
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    ok.then_some(()).ok_or_else(|| BadPeerGroup(name.to_string()))
}

/// One settings file as written: every key optional, unknown keys refused
/// (a typo such as `peer_mesaging` must not silently keep the default).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettingsFile {
    pub peer_messaging: Option<bool>,
    pub peer_group: Option<String>,
    pub peer_registry: Option<PathBuf>,
    pub workspace: Option<WorkspaceMode>,
    pub worktrees: Option<PathBuf>,
    #[serde(default)]
    pub forward: ForwardFile,
    #[serde(default)]
    pub containers: ContainersFile,
    #[serde(default)]
    pub network: NetworkFile,
    #[serde(default)]
    pub panes: PanesFile,
    #[serde(default)]
    pub caps: CapsFile,
    /// `customizations.workroom.caps`, kept apart from the file's own so a
    /// warning can say where a cap came from.
    #[serde(skip)]
    pub customization_caps: CapsFile,
    #[serde(default)]
    pub egress: EgressFile,
}

/// The `[egress]` table: how the room reaches the network.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressFile {
    pub mode: Option<EgressMode>,
    /// `host[:port]` patterns and `@presets` the proxy lets through.
    pub allow: Option<Vec<String>>,
}

/// The `[panes]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PanesFile {
    pub history_lines: Option<u32>,
    pub history_bytes: Option<u64>,
}

/// The `[containers]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainersFile {
    pub nested: Option<bool>,
    pub metadata_privileged: Option<bool>,
}

/// The `[network]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkFile {
    pub mode: Option<NetworkMode>,
}

/// The room's network: the engine's default bridge, or the host's own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    #[default]
    Bridge,
    Host,
}

/// How a new room gets the workspace: bound from this host's folder, or
/// uploaded into a volume on the engine (an engine that cannot see this
/// host's folders: another machine). `auto` asks the engine (ADR 0012).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum WorkspaceMode {
    #[default]
    Auto,
    Bind,
    Volume,
}

impl WorkspaceMode {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkspaceMode::Auto => "auto",
            WorkspaceMode::Bind => "bind",
            WorkspaceMode::Volume => "volume",
        }
    }
}

pub use crate::egress::policy::Mode as EgressMode;

/// The `[forward]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardFile {
    pub ssh_agent: Option<bool>,
    pub git_credentials: Option<bool>,
}

/// The settings a command runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Rooms join their peer group's PID namespace, socket volume and registry.
    pub peer_messaging: bool,
    /// The group's name; with the room's session uid it keys the group.
    pub peer_group: String,
    /// The host folder under which each group keeps its registry
    /// (`<this>/<group>/<uid>`, bound at the remote user's `~/.claude`);
    /// `~/` is the host user's home.
    pub peer_registry: PathBuf,
    /// Panes, exec and hooks get an `SSH_AUTH_SOCK` carried to the host's agent.
    pub ssh_agent: bool,
    /// `git credential` in the room asks the host's git.
    pub git_credentials: bool,
    /// Inner containers (podman/buildah) in the room, without privileges.
    pub nested: bool,
    /// `privileged: true` asked by an image's or feature's metadata (as
    /// docker-in-docker does) is applied, with a loud line; off: refused,
    /// the room is made unprivileged. devcontainer.json's own word always holds.
    pub metadata_privileged: bool,
    pub network: NetworkMode,
    /// Each new pane's history: lines and bytes (`None`: the daemon's
    /// defaults, 10,000 lines and 512 KiB).
    pub history_lines: Option<u32>,
    pub history_bytes: Option<u64>,
    /// How a new room gets the workspace.
    pub workspace: WorkspaceMode,
    /// The folder `up --worktree NAME` makes NAME in (`~` expanded; `{repo}`
    /// and a relative path are the worktree module's to resolve, against the
    /// main checkout). `None`: beside the repository.
    pub worktrees: Option<PathBuf>,
    /// How the room reaches the network: the flag's, else the strictest
    /// of the two files' (a project file cannot loosen what the user's
    /// own file asks: the workspace is writable from the room).
    pub egress: EgressMode,
    /// What the proxy lets through: the flags', the user's file's and the
    /// project's patterns, in that order.
    pub egress_allow: Vec<String>,
    /// The resource caps asked of a room made now, each with where it was said.
    pub caps: Asked,
}

impl Settings {
    /// The peer group a room is made in; `None` with peer messaging off.
    pub fn wanted_group(&self) -> Option<&str> {
        self.peer_messaging.then_some(self.peer_group.as_str())
    }
}

/// What the command line says; `None` leaves the files' word.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flags {
    pub peer: Option<bool>,
    /// `--peer-group NAME`, checked by the caller ([`check_peer_group`]).
    pub peer_group: Option<String>,
    /// `--workspace auto|bind|volume`.
    pub workspace: Option<WorkspaceMode>,
    /// `--egress open|allowlist|none`.
    pub egress: Option<EgressMode>,
    /// `--egress-allow PATTERN`, each checked by the caller.
    pub egress_allow: Vec<String>,
    /// `up --cpus`, `--memory`, `--memory-swap`, `--pids`, `--tmp`.
    pub caps: CapsFile,
}

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("cannot read {path}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
}

/// Where the user's settings file is, from the environment.
pub fn user_file(env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let folder = crate::folders::workroom_in(crate::folders::Kind::Config, |k| env(k).map(Into::into))?;
    Some(folder.join("config.toml"))
}

/// The default registry root: `$XDG_DATA_HOME/workroom/peers`, else
/// `~/.local/share/workroom/peers`; a host folder, so it outlives rooms. An
/// install with a `WORKROOM_SCOPE` keeps its own under
/// `workroom/scopes/<scope>/peers`, as it has its own anchors and volumes.
pub fn default_registry(env: impl Fn(&str) -> Option<String>) -> PathBuf {
    // Without a home the registry still needs a place: the root's.
    let data = crate::folders::workroom_in(crate::folders::Kind::Data, |k| env(k).map(Into::into))
        .unwrap_or_else(|| PathBuf::from("/.local/share/workroom"));
    match env("WORKROOM_SCOPE").filter(|v| !v.is_empty()) {
        // One path component whatever the scope says: it names a folder
        // here, never a way out of this one.
        Some(scope) => data.join("scopes").join(scope.replace(['/', '\0'], "_").replace("..", "__")).join("peers"),
        None => data.join("peers"),
    }
}

/// Flag over project over user over default, key by key.
pub fn merge(user: &SettingsFile, project: &SettingsFile, flags: Flags, default_registry: PathBuf) -> Settings {
    Settings {
        peer_messaging: flags.peer.or(project.peer_messaging).or(user.peer_messaging).unwrap_or(true),
        peer_group: flags
            .peer_group
            .or_else(|| project.peer_group.clone())
            .or_else(|| user.peer_group.clone())
            .unwrap_or_else(|| DEFAULT_PEER_GROUP.into()),
        peer_registry: project.peer_registry.clone().or_else(|| user.peer_registry.clone()).unwrap_or(default_registry),
        ssh_agent: project.forward.ssh_agent.or(user.forward.ssh_agent).unwrap_or(true),
        git_credentials: project.forward.git_credentials.or(user.forward.git_credentials).unwrap_or(true),
        nested: project.containers.nested.or(user.containers.nested).unwrap_or(false),
        metadata_privileged: project
            .containers
            .metadata_privileged
            .or(user.containers.metadata_privileged)
            .unwrap_or(true),
        network: project.network.mode.or(user.network.mode).unwrap_or_default(),
        history_lines: project.panes.history_lines.or(user.panes.history_lines),
        history_bytes: project.panes.history_bytes.or(user.panes.history_bytes),
        workspace: flags.workspace.or(project.workspace).or(user.workspace).unwrap_or_default(),
        worktrees: project.worktrees.clone().or_else(|| user.worktrees.clone()),
        egress: flags
            .egress
            .unwrap_or_else(|| project.egress.mode.unwrap_or_default().max(user.egress.mode.unwrap_or_default())),
        egress_allow: {
            let mut allow = flags.egress_allow.clone();
            for written in [&user.egress.allow, &project.egress.allow].into_iter().flatten().flatten() {
                if !allow.contains(written) {
                    allow.push(written.clone());
                }
            }
            allow
        },
        caps: caps::asked(&[
            (&flags.caps, caps::Source::Flag),
            (&project.caps, caps::Source::Project),
            (&project.customization_caps, caps::Source::Customizations),
            (&user.caps, caps::Source::User),
        ]),
    }
}

/// The project file with devcontainer.json's `customizations.workroom`
/// beneath it: `.workroom.toml` wins key by key, the user's file comes after
/// both. Unknown keys there are left alone (the object is shared with other
/// tools' conventions); a known key of the wrong type is an error.
pub fn under_customizations(
    mut project: SettingsFile,
    customizations: Option<&serde_json::Map<String, serde_json::Value>>,
    config: &Path,
) -> Result<SettingsFile, SettingsError> {
    let Some(ours) = customizations.and_then(|c| c.get("workroom")) else { return Ok(project) };
    let bad = |field: &str, want: &str| SettingsError::Parse {
        path: config.display().to_string(),
        message: format!("`customizations.workroom.{field}` must be {want}"),
    };
    let Some(ours) = ours.as_object() else {
        return Err(SettingsError::Parse {
            path: config.display().to_string(),
            message: "`customizations.workroom` must be an object".into(),
        });
    };
    if let Some(v) = ours.get("nested") {
        let v = v.as_bool().ok_or_else(|| bad("nested", "true or false"))?;
        project.containers.nested = project.containers.nested.or(Some(v));
    }
    if let Some(v) = ours.get("network") {
        let mode = match v.as_str() {
            Some("host") => NetworkMode::Host,
            Some("bridge") => NetworkMode::Bridge,
            _ => return Err(bad("network", "\"host\" or \"bridge\"")),
        };
        project.network.mode = project.network.mode.or(Some(mode));
    }
    if let Some(v) = ours.get("egress") {
        let table: EgressFile = serde_json::from_value(v.clone()).map_err(|e| {
            bad("egress", &format!("{{\"mode\": \"open|allowlist|none\", \"allow\": [\"pattern\", ...]}} ({e})"))
        })?;
        check_egress(&table).map_err(|(problem, _)| SettingsError::Parse {
            path: config.display().to_string(),
            message: format!("`customizations.workroom.egress.allow`: {problem}"),
        })?;
        project.egress.mode = project.egress.mode.or(table.mode);
        if project.egress.allow.is_none() {
            project.egress.allow = table.allow;
        }
    }
    if let Some(v) = ours.get("caps") {
        project.customization_caps = serde_json::from_value(v.clone()).map_err(|e| {
            // Ours name the key as `caps.KEY`; serde_json's own (an unknown
            // key, not an object) name none.
            let said = json_message(&e);
            let message = match said.strip_prefix("caps.") {
                Some(rest) => format!("customizations.workroom.caps.{rest}"),
                None => format!("customizations.workroom.caps: {said}"),
            };
            SettingsError::Parse { path: config.display().to_string(), message }
        })?;
    }
    Ok(project)
}

/// serde_json's message without its position (which is in the value we
/// handed it, not in the file).
fn json_message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// `~/x` against the host user's home; other paths as written.
pub fn expand_home(path: &Path, home: Option<&str>) -> PathBuf {
    match (path.strip_prefix("~"), home) {
        (Ok(rest), Some(home)) => Path::new(home).join(rest),
        _ => path.to_path_buf(),
    }
}

pub fn parse(text: &str, path: &Path) -> Result<SettingsFile, SettingsError> {
    let file: SettingsFile = toml::from_str(text).map_err(|e| SettingsError::Parse {
        path: path.display().to_string(),
        message: e.message().to_string() + &line_of(text, e.span()),
    })?;
    if let Some(group) = &file.peer_group {
        check_peer_group(group).map_err(|message| SettingsError::Parse {
            path: path.display().to_string(),
            message: format!("`peer_group`: {message}"),
        })?;
    }
    check_egress(&file.egress).map_err(|(problem, written)| {
        let line = text.lines().position(|l| l.contains(&written)).map(|i| format!(" (line {})", i + 1));
        SettingsError::Parse {
            path: path.display().to_string(),
            message: format!("[egress] allow: {problem}{}", line.unwrap_or_default()),
        }
    })?;
    Ok(file)
}

/// Each `allow` pattern parses: the error and the pattern as written.
fn check_egress(table: &EgressFile) -> Result<(), (crate::egress::policy::PatternError, String)> {
    for written in table.allow.iter().flatten() {
        crate::egress::policy::rules(&[written]).map_err(|e| (e, written.clone()))?;
    }
    Ok(())
}

fn line_of(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    span.map(|s| format!(" (line {})", text[..s.start.min(text.len())].matches('\n').count() + 1)).unwrap_or_default()
}

fn read(path: &Path) -> Result<SettingsFile, SettingsError> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse(&text, path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(SettingsFile::default()),
        Err(source) => Err(SettingsError::Read { path: path.display().to_string(), source }),
    }
}

/// The settings for a command on `workspace_folder`, from the process
/// environment, the two files and the flags.
pub fn load(workspace_folder: &Path, flags: Flags) -> Result<Settings, SettingsError> {
    load_with(workspace_folder, flags, None, Path::new(""))
}

/// [`load`] with devcontainer.json's `customizations` (from `config`) read
/// beneath the project file: what `up` uses to shape a new room.
pub fn load_with(
    workspace_folder: &Path,
    flags: Flags,
    customizations: Option<&serde_json::Map<String, serde_json::Value>>,
    config: &Path,
) -> Result<Settings, SettingsError> {
    let env = |k: &str| std::env::var(k).ok();
    let user = match user_file(env) {
        Some(path) => read(&path)?,
        None => SettingsFile::default(),
    };
    let project = under_customizations(read(&workspace_folder.join(PROJECT_FILE))?, customizations, config)?;
    let mut settings = merge(&user, &project, flags, default_registry(env));
    settings.peer_registry = expand_home(&settings.peer_registry, env("HOME").as_deref());
    if settings.peer_registry.is_relative() {
        // A project's relative path means its own folder, not wherever
        // workroom happened to be run from.
        settings.peer_registry = workspace_folder.join(&settings.peer_registry);
    }
    settings.worktrees = settings.worktrees.map(|w| expand_home(&w, env("HOME").as_deref()));
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_settings_file_says_the_os_error_once() {
        let dir = tempfile::tempdir().unwrap();
        // A folder where the file should be: reading it fails with EISDIR.
        let err = read(dir.path()).unwrap_err();
        let chain = format!("{:#}", anyhow::Error::new(err));
        assert_eq!(chain.matches("Is a directory").count(), 1, "{chain}");
    }

    fn file(peer: Option<bool>, registry: Option<&str>) -> SettingsFile {
        SettingsFile { peer_messaging: peer, peer_registry: registry.map(PathBuf::from), ..Default::default() }
    }

    #[test]
    fn peer_messaging_is_decided_by_flag_then_project_then_user_then_on() {
        let none = file(None, None);
        let on = file(Some(true), None);
        let off = file(Some(false), None);
        // (user, project, flag, expected)
        let table = [
            (&none, &none, None, true),
            (&off, &none, None, false),
            (&off, &on, None, true),
            (&on, &off, None, false),
            (&on, &off, Some(true), true),
            (&none, &on, Some(false), false),
            (&off, &off, Some(true), true),
        ];
        for (user, project, flag, expected) in table {
            let s = merge(user, project, Flags { peer: flag, ..Default::default() }, "/d".into());
            assert_eq!(s.peer_messaging, expected, "user {user:?} project {project:?} flag {flag:?}");
        }
    }

    #[test]
    fn the_registry_folder_is_the_projects_then_the_users_then_the_default() {
        let d = PathBuf::from("/default");
        let f = Flags::default;
        assert_eq!(merge(&file(None, None), &file(None, None), f(), d.clone()).peer_registry, d);
        assert_eq!(merge(&file(None, Some("/u")), &file(None, None), f(), d.clone()).peer_registry, Path::new("/u"));
        assert_eq!(merge(&file(None, Some("/u")), &file(None, Some("/p")), f(), d).peer_registry, Path::new("/p"));
    }

    #[test]
    fn the_panes_history_is_the_projects_then_the_users_then_the_daemons_default() {
        let user = parse("[panes]\nhistory_lines = 500\nhistory_bytes = 4096\n", Path::new("u")).unwrap();
        let project = parse("[panes]\nhistory_lines = 20000\n", Path::new("p")).unwrap();
        let s = merge(&user, &project, Flags::default(), PathBuf::from("/r"));
        assert_eq!((s.history_lines, s.history_bytes), (Some(20000), Some(4096)));
        let none = merge(&SettingsFile::default(), &SettingsFile::default(), Flags::default(), PathBuf::from("/r"));
        assert_eq!((none.history_lines, none.history_bytes), (None, None));
        assert!(parse("[panes]\nhistory = 1\n", Path::new("p")).is_err());
    }

    #[test]
    fn the_workspace_mode_is_the_flags_then_the_projects_then_the_users_then_auto() {
        let user = parse("workspace = \"volume\"\n", Path::new("u")).unwrap();
        let project = parse("workspace = \"bind\"\n", Path::new("p")).unwrap();
        let none = SettingsFile::default();
        let r = || PathBuf::from("/r");
        let flag = |m| Flags { workspace: Some(m), ..Default::default() };
        assert_eq!(merge(&user, &project, Flags::default(), r()).workspace, WorkspaceMode::Bind);
        assert_eq!(merge(&user, &none, Flags::default(), r()).workspace, WorkspaceMode::Volume);
        assert_eq!(merge(&user, &project, flag(WorkspaceMode::Volume), r()).workspace, WorkspaceMode::Volume);
        assert_eq!(merge(&none, &none, Flags::default(), r()).workspace, WorkspaceMode::Auto);
        let err = parse("workspace = \"nfs\"\n", Path::new("p")).unwrap_err().to_string();
        assert!(err.starts_with("p: unknown variant `nfs`"), "{err}");
    }

    #[test]
    fn the_worktrees_folder_is_the_projects_then_the_users_then_beside_the_repository() {
        let user = parse("worktrees = \"~/wt/{repo}\"\n", Path::new("u")).unwrap();
        let project = parse("worktrees = \".worktrees\"\n", Path::new("p")).unwrap();
        let none = SettingsFile::default();
        let r = || PathBuf::from("/r");
        let merged = |u: &SettingsFile, p: &SettingsFile| merge(u, p, Flags::default(), r()).worktrees;
        assert_eq!(merged(&user, &project), Some(PathBuf::from(".worktrees")));
        assert_eq!(merged(&user, &none), Some(PathBuf::from("~/wt/{repo}")));
        assert_eq!(merged(&none, &none), None);
        assert!(parse("worktree = \"x\"\n", Path::new("p")).is_err());
    }

    #[test]
    fn the_forward_table_is_read_key_by_key_with_the_project_winning() {
        let user = parse("[forward]\nssh_agent = false\ngit_credentials = false\n", Path::new("u")).unwrap();
        let project = parse("[forward]\ngit_credentials = true\n", Path::new("p")).unwrap();
        let s = merge(&user, &project, Flags::default(), PathBuf::from("/r"));
        assert_eq!((s.ssh_agent, s.git_credentials), (false, true));
        let none = merge(&SettingsFile::default(), &SettingsFile::default(), Flags::default(), PathBuf::from("/r"));
        assert_eq!((none.ssh_agent, none.git_credentials), (true, true));
        assert!(parse("[forward]\nssh_agnet = false\n", Path::new("p")).is_err());
    }

    #[test]
    fn privileged_from_metadata_applies_unless_the_project_or_user_file_refuses_it() {
        // (user file, project file, applies)
        let table = [
            ("", "", true),
            ("[containers]\nmetadata_privileged = false\n", "", false),
            ("[containers]\nmetadata_privileged = false\n", "[containers]\nmetadata_privileged = true\n", true),
            ("", "[containers]\nmetadata_privileged = false\n", false),
        ];
        for (user, project, applies) in table {
            let (u, p) = (parse(user, Path::new("u")).unwrap(), parse(project, Path::new("p")).unwrap());
            assert_eq!(
                merge(&u, &p, Flags::default(), "/r".into()).metadata_privileged,
                applies,
                "{user:?} {project:?}"
            );
        }
    }

    #[test]
    fn nested_and_network_come_from_the_project_file_then_devcontainer_json_then_the_user() {
        let custom = |v: serde_json::Value| v.as_object().cloned().unwrap();
        let user = parse("[containers]\nnested = true\n[network]\nmode = \"host\"\n", Path::new("u")).unwrap();
        let merged = |project: &str, c: Option<serde_json::Value>| {
            let p = parse(project, Path::new("p")).unwrap();
            let p = under_customizations(p, c.map(custom).as_ref(), Path::new("d.json")).unwrap();
            let s = merge(&user, &p, Flags::default(), "/r".into());
            (s.nested, s.network)
        };
        assert_eq!(merged("", None), (true, NetworkMode::Host));
        let c = serde_json::json!({ "workroom": { "nested": false, "network": "bridge" }, "vscode": {} });
        assert_eq!(merged("", Some(c.clone())), (false, NetworkMode::Bridge));
        assert_eq!(merged("[containers]\nnested = true\n", Some(c)), (true, NetworkMode::Bridge));
        let none = merge(&SettingsFile::default(), &SettingsFile::default(), Flags::default(), "/r".into());
        assert_eq!((none.nested, none.network), (false, NetworkMode::Bridge));
        assert!(parse("[network]\nmode = \"none\"\n", Path::new("p")).is_err());
        assert!(parse("[containers]\nnestd = true\n", Path::new("p")).is_err());
        let e = under_customizations(
            SettingsFile::default(),
            Some(&custom(serde_json::json!({ "workroom": { "network": "overlay" } }))),
            Path::new("/w/.devcontainer/devcontainer.json"),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "/w/.devcontainer/devcontainer.json: `customizations.workroom.network` must be \"host\" or \"bridge\""
        );
    }

    #[test]
    fn the_files_are_found_through_xdg_then_home() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(key, _)| *key == k).map(|(_, v)| v.to_string())
        };
        assert_eq!(user_file(env(&[("HOME", "/h")])), Some("/h/.config/workroom/config.toml".into()));
        assert_eq!(
            user_file(env(&[("HOME", "/h"), ("XDG_CONFIG_HOME", "/x")])),
            Some("/x/workroom/config.toml".into())
        );
        assert_eq!(user_file(env(&[])), None);
        assert_eq!(default_registry(env(&[("HOME", "/h")])), Path::new("/h/.local/share/workroom/peers"));
        assert_eq!(default_registry(env(&[("XDG_DATA_HOME", "/d")])), Path::new("/d/workroom/peers"));
    }

    #[test]
    fn the_default_registry_is_the_scopes_own() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(key, _)| *key == k).map(|(_, v)| v.to_string())
        };
        assert_eq!(
            default_registry(env(&[("HOME", "/h"), ("WORKROOM_SCOPE", "t1")])),
            Path::new("/h/.local/share/workroom/scopes/t1/peers")
        );
        assert_eq!(
            default_registry(env(&[("XDG_DATA_HOME", "/d"), ("WORKROOM_SCOPE", "../x")])),
            Path::new("/d/workroom/scopes/___x/peers"),
            "a scope is one folder, never a way out"
        );
        assert_eq!(
            default_registry(env(&[("HOME", "/h"), ("WORKROOM_SCOPE", "")])),
            Path::new("/h/.local/share/workroom/peers")
        );
    }

    #[test]
    fn the_peer_group_is_decided_by_flag_then_project_then_user_then_default() {
        let group = |g: Option<&str>| SettingsFile { peer_group: g.map(str::to_string), ..Default::default() };
        let flag = |g: Option<&str>| Flags { peer_group: g.map(str::to_string), ..Default::default() };
        // (user, project, flag, expected)
        let table = [
            (None, None, None, "default"),
            (Some("u"), None, None, "u"),
            (Some("u"), Some("p"), None, "p"),
            (Some("u"), Some("p"), Some("f"), "f"),
            (None, None, Some("f"), "f"),
        ];
        for (u, p, f, expected) in table {
            assert_eq!(merge(&group(u), &group(p), flag(f), "/r".into()).peer_group, expected, "{u:?} {p:?} {f:?}");
        }
    }

    #[test]
    fn a_peer_group_name_that_cannot_name_a_container_is_refused_naming_the_file() {
        for good in ["default", "a", "client-1", "x9"] {
            assert_eq!(check_peer_group(good), Ok(()), "{good}");
        }
        for bad in ["", "A", "a.b", "a/b", "-a", "a-", "a b", "ünï", &"x".repeat(MAX_PEER_GROUP + 1)] {
            assert!(check_peer_group(bad).is_err(), "{bad:?} accepted");
        }
        let e = parse("peer_group = \"Client.A\"\n", Path::new("/w/.workroom.toml")).unwrap_err().to_string();
        assert!(e.starts_with("/w/.workroom.toml: `peer_group`: peer group \"Client.A\""), "{e}");
        assert_eq!(
            parse("peer_group = \"client-a\"\n", Path::new("p")).unwrap().peer_group.as_deref(),
            Some("client-a")
        );
    }

    #[test]
    fn the_egress_mode_is_the_flags_else_the_stricter_files_and_the_patterns_are_all_of_them() {
        let user = parse("[egress]\nmode = \"allowlist\"\nallow = [\"@pypi\"]\n", Path::new("u")).unwrap();
        let loose =
            parse("[egress]\nmode = \"open\"\nallow = [\"*.example.org\", \"@pypi\"]\n", Path::new("p")).unwrap();
        let s = merge(&user, &loose, Flags::default(), "/d".into());
        assert_eq!(s.egress, EgressMode::Allowlist, "a project file cannot loosen the user's");
        assert_eq!(s.egress_allow, vec!["@pypi".to_string(), "*.example.org".to_string()]);
        let strict = parse("[egress]\nmode = \"none\"\n", Path::new("p")).unwrap();
        assert_eq!(merge(&user, &strict, Flags::default(), "/d".into()).egress, EgressMode::None);
        let flags =
            Flags { egress: Some(EgressMode::Open), egress_allow: vec!["a.example".into()], ..Default::default() };
        let s = merge(&user, &strict, flags, "/d".into());
        assert_eq!(s.egress, EgressMode::Open, "the command line is the person at the keyboard");
        assert_eq!(s.egress_allow[0], "a.example");
        assert_eq!(
            merge(&SettingsFile::default(), &SettingsFile::default(), Flags::default(), "/d".into()).egress,
            EgressMode::Open
        );
    }

    #[test]
    fn an_egress_table_under_customizations_is_read_and_a_bad_one_named() {
        let custom =
            |v: serde_json::Value| serde_json::json!({ "workroom": { "egress": v } }).as_object().unwrap().clone();
        let ok = custom(serde_json::json!({ "mode": "allowlist", "allow": ["@github"] }));
        let p = under_customizations(SettingsFile::default(), Some(&ok), Path::new("dc.json")).unwrap();
        assert_eq!(p.egress.mode, Some(EgressMode::Allowlist));
        assert_eq!(p.egress.allow, Some(vec!["@github".to_string()]));
        for bad in
            [serde_json::json!({ "mode": "closed" }), serde_json::json!({ "allow": ["a..b"] }), serde_json::json!("x")]
        {
            let err = under_customizations(SettingsFile::default(), Some(&custom(bad.clone())), Path::new("dc.json"))
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("dc.json: `customizations.workroom.egress"), "{bad}: {err}");
        }
        let err = parse("[egress]\nallow = [\"@nope\"]\n", Path::new("w.toml")).unwrap_err().to_string();
        assert!(err.contains("w.toml") && err.contains("@nope") && err.contains("line 2"), "{err}");
    }

    #[test]
    fn a_tilde_means_the_host_users_home() {
        assert_eq!(expand_home(Path::new("~/peers"), Some("/h")), Path::new("/h/peers"));
        assert_eq!(expand_home(Path::new("/abs"), Some("/h")), Path::new("/abs"));
        assert_eq!(expand_home(Path::new("~/p"), None), Path::new("~/p"));
    }

    #[test]
    fn a_misspelt_or_mistyped_key_is_an_error_naming_the_file_and_line() {
        let e = parse("\n\npeer_mesaging = false\n", Path::new("/w/.workroom.toml")).unwrap_err().to_string();
        assert!(e.starts_with("/w/.workroom.toml: "), "{e}");
        assert!(e.contains("peer_mesaging") && e.contains("line 3"), "{e}");
        let e = parse("peer_messaging = \"no\"", Path::new("c.toml")).unwrap_err().to_string();
        assert!(e.contains("c.toml") && e.contains("bool"), "{e}");
        assert_eq!(parse("peer_messaging = false", Path::new("c")).unwrap(), file(Some(false), None));
    }
}
