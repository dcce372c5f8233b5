//! Where the daemon lives in a room. One folder at the root that no image
//! ships, so nothing of the image is shadowed or clashes with it.

/// The daemon binary every exec names. In a room made from a daemon volume
/// it is a link to [`DIST_PATH`], made by the daemon at its start, or the
/// binary a hand-off installed; in other rooms (compose, older rooms) the
/// binary uploaded before the container's first start.
pub const DAEMON_PATH: &str = "/.workroom/bin/workroomd";
/// Where the engine's daemon volume (one per daemon digest, shared by the
/// rooms, read-only) is mounted: an image or Dockerfile room's entrypoint.
/// Not `/.workroom/bin`, which a hand-off and the nested-containers
/// wrapper write to, and which no room may share with another.
pub const DIST_DIR: &str = "/.workroom/dist";
/// The daemon in [`DIST_DIR`].
pub const DIST_PATH: &str = "/.workroom/dist/workroomd";

/// Where an `allowlist` room on an engine that sees this host's folders has
/// its host forwarder's egress socket: a folder of the host's, bound
/// read-only. The daemon hands each proxy connection's socket to the host
/// through it (`SCM_RIGHTS`), so the bytes go host to room with no exec
/// stream between; without it they ride the link.
pub const EGRESS_DIR: &str = "/.workroom/egress";
/// The socket in [`EGRESS_DIR`].
pub const EGRESS_SOCKET: &str = "/.workroom/egress/proxy.sock";

/// Whether `path` is where a room's daemon is started from: its entrypoint's
/// first word.
pub fn is_daemon_path(path: &str) -> bool {
    path == DAEMON_PATH || path == DIST_PATH
}
/// The folder the daemon creates for its socket: 0700, root's.
pub const RUN_DIR: &str = "/.workroom/run";
/// The daemon's socket; reached through `docker exec -u root <room> workroomd relay`.
pub const SOCKET_PATH: &str = "/.workroom/run/workroomd.sock";
/// State that survives a container restart (lifecycle markers).
pub const STATE_DIR: &str = "/.workroom/state";
/// The remote user's folder (0700, the user's) for the sockets carrying the
/// host's credentials; see the daemon's `credentials` module.
pub const AGENT_DIR: &str = "/.workroom/agent";
/// `SSH_AUTH_SOCK` in the room while the host forwards its ssh-agent.
pub const AGENT_SOCKET: &str = "/.workroom/agent/agent.sock";
/// Where `workroomd git-credential` asks for the host's git credentials.
pub const CREDENTIAL_SOCKET: &str = "/.workroom/agent/git-credential.sock";
/// The git credential helper configured for the remote user.
pub const CREDENTIAL_HELPER: &str = "/.workroom/bin/workroomd git-credential";
/// `serve`'s flag naming a worktree room's common git folder in the room;
/// the daemon keeps the other worktrees registered (`worktrees.rs`).
pub const GIT_COMMON_ARG: &str = "--git-common";

/// postStartCommand's marker: the boot id of the start it last ran for.
pub const POST_START_MARKER: &str = "post-start";
/// The marker holding the digest of the start plan the daemon keeps.
pub const START_PLAN_MARKER: &str = "start-plan";
/// What a once-per-container hook's marker says once it ran.
pub const MARKER_DONE: &str = "done";

/// How far above the daemon's OOM score the room's other processes start
/// (ADR 0014): the host starts a room with a memory cap at this score
/// (`HostConfig.OomScoreAdj`), the daemon lowers its own as far as the
/// kernel lets it without a capability, and starts every child this far
/// above itself. The kernel adds a score's thousandths of the memory cap
/// to a process's size when it chooses what to kill, so half the cap
/// outweighs the daemon's few MiB whatever the others hold.
pub const OOM_SCORE_GAP: i32 = 500;
