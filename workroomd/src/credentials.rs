//! Credentials carried from the host: the ssh-agent socket and the git
//! credential helper, served only while a host link offers them
//! ([`Request::OfferCredentials`]).
//!
//! # Why a second folder
//!
//! The daemon's own socket stays root's alone (0700 folder): whoever reaches
//! it can run anything as anyone. The remote user's programs (ssh, git) must
//! reach the agent and the credential helper though, so those two sockets
//! live in [`AGENT_DIR`], a folder made 0700 and owned by the remote user.
//! Neither socket speaks the daemon protocol: the agent socket carries the
//! ssh-agent protocol untouched, and the credential socket takes one
//! request and gives one answer. So a program in the room gains exactly what
//! the host offered, and no way to reach the daemon's requests.
//!
//! Both sockets admit only processes of this room ([`crate::admit`]): rooms
//! of a peer group share a PID namespace, and a same-uid process of another
//! room could otherwise reach them through `/proc/<pid>/root`.
//!
//! # The credential socket
//!
//! `workroomd git-credential <get|store|erase>` (configured as the remote
//! user's git credential helper) writes `<operation>\n<git's input>` and
//! shuts down its write side; the daemon answers `ok\n<output>` or
//! `error <message>\n`, then closes.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::AbortHandle;
use workroomd::pipe;
use workroomd::proto::{Link, Request, Response, StreamError, StreamHandle, MAX_CREDENTIAL_INPUT};
use workroomd::room;

use crate::report::chain;
use crate::state::State;

/// Why the credential sockets could not be served, or one request through
/// them could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error(transparent)]
    User(#[from] crate::spawn::SpawnError),
    /// `what`: make, own, restrict, give to the user, serve.
    #[error("cannot {what} {path}")]
    Path { what: String, path: &'static str, source: std::io::Error },
    #[error("cannot read the request")]
    ReadRequest(#[source] std::io::Error),
    #[error("the request is larger than {MAX_CREDENTIAL_INPUT} bytes")]
    TooLarge,
    #[error("the request is not UTF-8")]
    NotUtf8,
    #[error("no workroom host process is connected to this room")]
    NoHost,
    #[error("asking the host")]
    Link(#[from] StreamError),
    /// The host's own message, a sentence already.
    #[error("{0}")]
    Host(String),
    #[error("the host answered {0}")]
    Unexpected(String),
    #[error("no credentials from the host ({CREDENTIAL_SOCKET}); is `workroom up` running for this room?")]
    NoDaemon(#[source] std::io::Error),
    #[error("cannot ask the daemon through {CREDENTIAL_SOCKET}")]
    Ask(#[source] std::io::Error),
}

fn at(what: impl Into<String>, path: &'static str) -> impl FnOnce(std::io::Error) -> CredentialsError {
    let what = what.into();
    move |source| CredentialsError::Path { what, path, source }
}

/// The remote user's folder for the two sockets below.
pub const AGENT_DIR: &str = room::AGENT_DIR;
/// What `SSH_AUTH_SOCK` points to in the room.
pub const AGENT_SOCKET: &str = room::AGENT_SOCKET;
/// Where the credential helper asks.
pub const CREDENTIAL_SOCKET: &str = room::CREDENTIAL_SOCKET;

/// How long one credential request may take end to end: the host's helper
/// may ask a keychain, but git waits on us with the user at the prompt, and
/// a helper that never answers must not hang `git push` forever.
pub const CREDENTIAL_DEADLINE: Duration = Duration::from_secs(30);

/// What the host link offers, kept while it is connected. The newest offer
/// wins: a host that reconnects replaces the one that is going away.
struct Offer {
    id: u64,
    link: Link,
    ssh_agent: bool,
    git_credentials: bool,
}

/// The offers and the socket servers, one per daemon, in its [`State`].
#[derive(Default)]
pub struct Credentials {
    registry: Mutex<Registry>,
}

#[derive(Default)]
struct Registry {
    offers: Vec<Offer>,
    next_id: u64,
    agent: Option<AbortHandle>,
    credential: Option<AbortHandle>,
}

impl Credentials {
    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        workroomd::locks::lock(&self.registry)
    }

    /// The newest link offering `kind`.
    fn current_link(&self, kind: Kind) -> Option<Link> {
        let reg = self.registry();
        reg.offers
            .iter()
            .rev()
            .find(|o| match kind {
                Kind::Agent => o.ssh_agent,
                Kind::Credential => o.git_credentials,
            })
            .map(|o| o.link.clone())
    }
}

/// Which socket a connection came in on.
#[derive(Clone, Copy)]
enum Kind {
    Agent,
    Credential,
}

impl Kind {
    fn socket(self) -> &'static str {
        match self {
            Kind::Agent => AGENT_SOCKET,
            Kind::Credential => CREDENTIAL_SOCKET,
        }
    }
}

/// Handles `Request::OfferCredentials` on `link`: the sockets are served
/// until the link closes (and no other link offers them).
pub async fn offer(
    state: Arc<State>,
    link: Link,
    handle: StreamHandle,
    user: String,
    ssh_agent: bool,
    git_credentials: bool,
) {
    let prepared = prepare(&state, &user, ssh_agent, git_credentials);
    let reply = match &prepared {
        Ok(()) => Response::Ready,
        Err(e) => Response::failed(e),
    };
    let _ = handle.reply(reply).await;
    drop(handle);
    if prepared.is_err() {
        return;
    }
    let id = {
        let mut reg = state.credentials.registry();
        reg.next_id += 1;
        let id = reg.next_id;
        reg.offers.push(Offer { id, link: link.clone(), ssh_agent, git_credentials });
        id
    };
    let reason = link.closed().await;
    tracing::info!(offer = id, "credentials offer ended: {reason}");
    let mut reg = state.credentials.registry();
    reg.offers.retain(|o| o.id != id);
    if !reg.offers.iter().any(|o| o.ssh_agent) {
        stop(&mut reg.agent, AGENT_SOCKET);
    }
    if !reg.offers.iter().any(|o| o.git_credentials) {
        stop(&mut reg.credential, CREDENTIAL_SOCKET);
    }
}

fn stop(task: &mut Option<AbortHandle>, socket: &str) {
    if let Some(task) = task.take() {
        task.abort();
        let _ = std::fs::remove_file(socket);
    }
}

/// Makes the user's folder and binds the sockets not yet served.
fn prepare(state: &Arc<State>, user: &str, ssh_agent: bool, git_credentials: bool) -> Result<(), CredentialsError> {
    let resolved = crate::spawn::resolve(user)?;
    let dir = Path::new(AGENT_DIR);
    // Made root's first and handed over after the mode is set, so there is
    // no moment when another user could enter it.
    std::fs::create_dir_all(dir).map_err(at("make", AGENT_DIR))?;
    std::os::unix::fs::chown(dir, Some(0), Some(0)).map_err(at("own", AGENT_DIR))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(at("restrict", AGENT_DIR))?;
    std::os::unix::fs::chown(dir, Some(resolved.uid), Some(resolved.gid))
        .map_err(at(format!("give {user}"), AGENT_DIR))?;
    let mut reg = state.credentials.registry();
    let wanted = [(ssh_agent, Kind::Agent, AGENT_SOCKET), (git_credentials, Kind::Credential, CREDENTIAL_SOCKET)];
    for (want, kind, path) in wanted {
        let slot = match kind {
            Kind::Agent => &mut reg.agent,
            Kind::Credential => &mut reg.credential,
        };
        if !want || slot.as_ref().is_some_and(|t| !t.is_finished()) {
            continue;
        }
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).map_err(at("serve", path))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(at("restrict", path))?;
        std::os::unix::fs::chown(path, Some(resolved.uid), Some(resolved.gid))
            .map_err(at(format!("give {user}"), path))?;
        *slot = Some(tokio::spawn(serve(state.clone(), listener, kind)).abort_handle());
    }
    Ok(())
}

async fn serve(state: Arc<State>, listener: UnixListener, kind: Kind) {
    loop {
        match listener.accept().await {
            Ok((conn, _)) => {
                if let Err(refused) = state.namespace.admit(&conn) {
                    tracing::warn!("refused a connection on {}: {refused}", kind.socket());
                    continue;
                }
                let state = state.clone();
                tokio::spawn(async move {
                    match kind {
                        Kind::Agent => agent_connection(&state, conn).await,
                        Kind::Credential => credential_connection(&state, conn).await,
                    }
                });
            }
            Err(e) => {
                tracing::error!(socket = kind.socket(), "credentials socket: {e}");
                return;
            }
        }
    }
}

async fn agent_connection(state: &State, conn: UnixStream) {
    // With no host, closing the connection is what ssh reads as "no agent".
    let Some(link) = state.credentials.current_link(Kind::Agent) else { return };
    let stream = match pipe::open_ready(&link, Request::SshAgent).await {
        Ok(s) => s,
        Err(pipe::OpenError::Refused(message)) => return tracing::warn!("ssh-agent: the host says: {message}"),
        Err(e) => return tracing::warn!("ssh-agent: {e}"),
    };
    let (reader, writer) = conn.into_split();
    if let Err(e) = pipe::splice(&stream, reader, writer).await {
        tracing::debug!("ssh-agent: {e}");
    }
}

async fn credential_connection(state: &State, mut conn: UnixStream) {
    let answer = match tokio::time::timeout(CREDENTIAL_DEADLINE, credential_answer(state, &mut conn)).await {
        Ok(Ok(output)) => format!("ok\n{output}"),
        Ok(Err(e)) => format!("error {}\n", chain(&e)),
        Err(_) => format!("error the host gave no answer within {} s\n", CREDENTIAL_DEADLINE.as_secs()),
    };
    let _ = conn.write_all(answer.as_bytes()).await;
    let _ = conn.shutdown().await;
}

async fn credential_answer(state: &State, conn: &mut UnixStream) -> Result<String, CredentialsError> {
    let mut request = Vec::new();
    // One byte past the cap tells "too large" from "exactly at the cap".
    let limit = (MAX_CREDENTIAL_INPUT + 64) as u64;
    conn.take(limit + 1).read_to_end(&mut request).await.map_err(CredentialsError::ReadRequest)?;
    if request.len() as u64 > limit {
        return Err(CredentialsError::TooLarge);
    }
    let request = String::from_utf8(request).map_err(|_| CredentialsError::NotUtf8)?;
    let (operation, input) = request.split_once('\n').unwrap_or((request.as_str(), ""));
    let link = state.credentials.current_link(Kind::Credential).ok_or(CredentialsError::NoHost)?;
    let ask = Request::GitCredential { operation: operation.to_owned(), input: input.to_owned() };
    match link.request(ask).await? {
        Response::Credential { output } => Ok(output),
        Response::Error { message } => Err(CredentialsError::Host(message)),
        other => Err(CredentialsError::Unexpected(format!("{other:?}"))),
    }
}

/// The git operation the host runs for a helper operation (git's helper
/// protocol names differ from `git credential`'s).
fn host_operation(helper_op: &str) -> Option<&'static str> {
    match helper_op {
        "get" => Some("fill"),
        "store" => Some("approve"),
        "erase" => Some("reject"),
        _ => None,
    }
}

/// `workroomd git-credential <get|store|erase>`: git's credential helper in
/// the room. Blocking std I/O: it is a short-lived child of git.
pub fn helper(args: &[String]) -> i32 {
    let Some(op) = args.first().map(String::as_str) else {
        eprintln!("usage: workroomd git-credential get|store|erase");
        return 2;
    };
    let Some(operation) = host_operation(op) else {
        // git says helpers ignore operations they do not know.
        return 0;
    };
    let mut input = String::new();
    if std::io::stdin().take(MAX_CREDENTIAL_INPUT as u64 + 1).read_to_string(&mut input).is_err()
        || input.len() > MAX_CREDENTIAL_INPUT
    {
        eprintln!("workroom credential helper: the request is not text or is larger than {MAX_CREDENTIAL_INPUT} bytes");
        return 1;
    }
    match ask_daemon(operation, &input) {
        Ok(answer) => match answer.split_once('\n') {
            Some(("ok", output)) => {
                // `get` answers with credentials; store/erase print nothing.
                if operation == "fill" {
                    print!("{}", filter_fill_output(output));
                }
                0
            }
            _ => {
                eprintln!("workroom credential helper: {}", answer.trim_start_matches("error ").trim_end());
                1
            }
        },
        Err(e) => {
            eprintln!("workroom credential helper: {}", chain(&e));
            1
        }
    }
}

fn ask_daemon(operation: &str, input: &str) -> Result<String, CredentialsError> {
    let mut conn = std::os::unix::net::UnixStream::connect(CREDENTIAL_SOCKET).map_err(CredentialsError::NoDaemon)?;
    conn.set_read_timeout(Some(CREDENTIAL_DEADLINE + Duration::from_secs(1))).map_err(CredentialsError::Ask)?;
    conn.write_all(format!("{operation}\n{input}").as_bytes()).map_err(CredentialsError::Ask)?;
    conn.shutdown(std::net::Shutdown::Write).map_err(CredentialsError::Ask)?;
    let mut answer = String::new();
    conn.take(MAX_CREDENTIAL_INPUT as u64 * 2).read_to_string(&mut answer).map_err(CredentialsError::Ask)?;
    Ok(answer)
}

/// `git credential fill` prints the whole description; a helper's `get`
/// answer is the same `key=value` lines, so pass them on, keeping only
/// well-formed lines (a stray line would make git abort).
fn filter_fill_output(output: &str) -> String {
    output.lines().filter(|l| l.contains('=')).map(|l| format!("{l}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helper_operations_map_to_git_credential_commands() {
        assert_eq!(host_operation("get"), Some("fill"));
        assert_eq!(host_operation("store"), Some("approve"));
        assert_eq!(host_operation("erase"), Some("reject"));
        assert_eq!(host_operation("capability"), None);
    }

    #[test]
    fn fill_output_keeps_only_key_value_lines() {
        assert_eq!(filter_fill_output("protocol=https\nhost=x\n\nnoise\n"), "protocol=https\nhost=x\n");
    }
}
