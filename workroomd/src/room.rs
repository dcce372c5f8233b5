//! Where the daemon lives in a room. One folder at the root that no image
//! ships, so nothing of the image is shadowed or clashes with it.

/// The daemon binary, uploaded before the container's first start.
pub const DAEMON_PATH: &str = "/.workroom/bin/workroomd";
/// The folder the daemon creates for its socket: 0700, root's.
pub const RUN_DIR: &str = "/.workroom/run";
/// The daemon's socket; reached through `docker exec -u root <room> workroomd relay`.
pub const SOCKET_PATH: &str = "/.workroom/run/workroomd.sock";
/// State that survives a container restart (lifecycle markers).
pub const STATE_DIR: &str = "/.workroom/state";
