//! `ssh://[user@]host[:port]` engines, the way the docker CLI reaches them:
//! `ssh … docker system dial-stdio` on the far side, and the Engine API
//! spoken over that process's stdin and stdout (ADR 0012).
//!
//! One ssh connection per workroom command: a ControlMaster is started
//! first (authentication happens once, and its failure is said in one
//! line), and every HTTP connection bollard opens, an exec's upgraded
//! stream included, is one more `dial-stdio` session multiplexed over it. It
//! is bollard's custom transport over a hyper client whose connector spawns
//! those sessions; nothing listens on a local socket.
//!
//! The master detaches (`-f`) with `ControlPersist` as a bound: it ends at
//! once when the command's `Engine` goes (`-O exit`), and within
//! [`MASTER_IDLE`] of its last session if workroom was killed.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// How long ssh may take to connect and authenticate: what `ConnectTimeout`
/// gets, and the bound on the whole master start.
const SSH_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The master lingers this long after its last session when nobody told it
/// to exit (a workroom killed mid-command): long enough for the sessions of
/// one command, short enough not to keep a connection open for nothing.
const MASTER_IDLE: Duration = Duration::from_secs(10);

/// The most of a session's stderr kept for its error line.
const STDERR_KEPT: usize = 4096;

/// How long a session's end of output may wait for ssh's exit status, so
/// that the reason is recorded before hyper reports a closed connection.
const SESSION_SETTLE: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SshError {
    #[error("{host}: {problem}")]
    Address { host: String, problem: String },
    #[error(
        "ssh {target} refused the key ({line}); load the key into the agent (`ssh-add`) or name it with \
         IdentityFile in ~/.ssh/config"
    )]
    KeyRefused { target: String, line: String },
    #[error("ssh {target} failed: {line}")]
    Failed { target: String, line: String },
    #[error(
        "{target} has no docker CLI for `docker system dial-stdio` ({line}); install it there, on the PATH \
         of a non-interactive ssh session"
    )]
    NoDocker { target: String, line: String },
    #[error("`docker system dial-stdio` on {target} failed: {line}")]
    Dial { target: String, line: String },
    #[error("cannot run {program}: {reason}")]
    Spawn { program: String, reason: String },
}

/// Where to ssh to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub user: Option<String>,
    pub host: String,
    pub port: Option<u16>,
}

impl Target {
    /// `ssh://[user@]host[:port]`, as the docker CLI takes it (no path).
    pub fn parse(url: &str) -> Result<Target, SshError> {
        let bad = |problem: &str| SshError::Address { host: url.to_string(), problem: problem.to_string() };
        let rest = url.strip_prefix("ssh://").ok_or_else(|| bad("not an ssh:// address"))?;
        if rest.contains('/') && !rest.ends_with('/') {
            return Err(bad("an ssh:// engine address takes no path (the docker CLI's rule)"));
        }
        let rest = rest.trim_end_matches('/');
        let (user, hostport) = match rest.rsplit_once('@') {
            Some((u, h)) if !u.is_empty() => (Some(u.to_string()), h),
            Some(_) => return Err(bad("the user before `@` is empty")),
            None => (None, rest),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) if !h.contains(']') || h.ends_with(']') => {
                let port = p.parse::<u16>().map_err(|_| bad("the port is not a number from 1 to 65535"))?;
                (h.to_string(), Some(port).filter(|p| *p != 0).ok_or_else(|| bad("port 0"))?.into())
            }
            _ => (hostport.to_string(), None),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        if host.is_empty() || host.starts_with('-') {
            return Err(bad("no host name"));
        }
        Ok(Target { user, host, port })
    }

    /// `user@host:port` for messages.
    pub fn display(&self) -> String {
        let user = self.user.as_ref().map(|u| format!("{u}@")).unwrap_or_default();
        let port = self.port.map(|p| format!(":{p}")).unwrap_or_default();
        format!("{user}{}{port}", self.host)
    }

    /// `[-p PORT] [-l USER] -- HOST`.
    fn args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(p) = self.port {
            args.extend(["-p".to_string(), p.to_string()]);
        }
        if let Some(u) = &self.user {
            args.extend(["-l".to_string(), u.clone()]);
        }
        args.extend(["--".to_string(), self.host.clone()]);
        args
    }
}

/// The ssh program and its leading arguments: `WORKROOM_SSH_COMMAND` (split
/// on whitespace, e.g. `ssh -F /path/config`), else `ssh`.
fn ssh_command() -> Vec<String> {
    std::env::var("WORKROOM_SSH_COMMAND")
        .ok()
        .map(|c| c.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| vec!["ssh".to_string()])
}

/// The command's one ssh connection.
pub struct Master {
    target: Target,
    /// The ssh program and its leading arguments.
    ssh: Vec<String>,
    dir: tempfile::TempDir,
    /// The last session's failure, for the error line a broken HTTP
    /// connection cannot carry.
    failure: Mutex<Option<SshError>>,
}

impl Master {
    fn control(&self) -> PathBuf {
        self.dir.path().join("ctl")
    }

    fn base(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new(&self.ssh[0]);
        cmd.args(&self.ssh[1..]).arg("-S").arg(self.control());
        cmd
    }

    /// Starts the master; the one place where ssh's own failures show.
    async fn start(target: Target, ssh: Vec<String>) -> Result<Arc<Master>, SshError> {
        // Short, in /tmp: a control socket's path is limited to ~100 bytes.
        let dir = tempfile::Builder::new()
            .prefix("wr-ssh-")
            .tempdir_in("/tmp")
            .map_err(|e| SshError::Spawn { program: "ssh".into(), reason: e.to_string() })?;
        let program = ssh[0].clone();
        let master = Arc::new(Master { target, ssh, dir, failure: Mutex::new(None) });
        let log = master.dir.path().join("master.log");
        let mut cmd = master.base();
        cmd.args(["-M", "-f", "-N", "-E"])
            .arg(&log)
            .arg("-o")
            .arg(format!("ControlPersist={}", MASTER_IDLE.as_secs()))
            .arg("-o")
            .arg(format!("ConnectTimeout={}", SSH_CONNECT_TIMEOUT.as_secs()))
            .args(master.target.args())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| SshError::Spawn { program: program.clone(), reason: e.to_string() })?;
        // `-f`: the foreground ssh exits once authenticated and the master
        // listens; with its status, or its error in the log.
        let status = match tokio::time::timeout(SSH_CONNECT_TIMEOUT + Duration::from_secs(5), child.wait()).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(SshError::Spawn { program, reason: e.to_string() }),
            Err(_) => {
                return Err(SshError::Failed {
                    target: master.target.display(),
                    line: format!("no answer within {} s", SSH_CONNECT_TIMEOUT.as_secs()),
                })
            }
        };
        if !status.success() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(classify_master(&master.target, &text));
        }
        Ok(master)
    }

    /// A `docker system dial-stdio` session over the master.
    pub(super) fn dial(self: &Arc<Self>) -> std::io::Result<DialStdio> {
        let mut cmd = self.base();
        cmd.args(self.target.args()).args(["docker", "system", "dial-stdio"]);
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = tokio::process::Command::from(cmd).kill_on_drop(true).spawn()?;
        let stdin = child.stdin.take().ok_or_else(|| std::io::Error::other("no stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| std::io::Error::other("no stdout"))?;
        let mut stderr = child.stderr.take().ok_or_else(|| std::io::Error::other("no stderr"))?;
        // Whatever the session says on stderr and how it ends becomes the
        // error line, if the engine's answer never comes.
        let master = self.clone();
        let (settled_tx, settled_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let mut said = Vec::new();
            let _ = (&mut stderr).take(STDERR_KEPT as u64).read_to_end(&mut said).await;
            let status = child.wait().await.ok().and_then(|s| s.code());
            let text = String::from_utf8_lossy(&said).into_owned();
            if let Some(failure) = classify_session(&master.target, status, &text) {
                *master.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(failure);
            }
            let _ = settled_tx.send(());
        });
        let settled = Box::pin(async move {
            let _ = tokio::time::timeout(SESSION_SETTLE, settled_rx).await;
        });
        Ok(DialStdio { stdin: Some(stdin), stdout, settled: Some(settled) })
    }

    /// What went wrong with the last session that failed, if one did.
    pub fn failure(&self) -> Option<SshError> {
        self.failure.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        // The master is detached: tell it to go now, not after MASTER_IDLE.
        let mut cmd = self.base();
        cmd.args(["-O", "exit"]).args(self.target.args());
        let _ = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status();
    }
}

/// The last meaningful line ssh wrote.
fn last_line(text: &str) -> String {
    text.lines().map(str::trim).rfind(|l| !l.is_empty()).unwrap_or("ssh said nothing").to_string()
}

fn classify_master(target: &Target, log: &str) -> SshError {
    let line = last_line(log);
    let target = target.display();
    if log.contains("Permission denied") {
        SshError::KeyRefused { target, line }
    } else {
        SshError::Failed { target, line }
    }
}

/// A session that ended without a reason is not a failure to report.
fn classify_session(target: &Target, status: Option<i32>, stderr: &str) -> Option<SshError> {
    let target = target.display();
    let line = last_line(stderr);
    match status {
        Some(0) => None,
        // The shell's "command not found".
        Some(127) => Some(SshError::NoDocker { target, line }),
        _ if stderr.contains("docker: not found") || stderr.contains("docker: command not found") => {
            Some(SshError::NoDocker { target, line })
        }
        Some(255) => Some(SshError::Failed { target, line }),
        _ if stderr.trim().is_empty() => None,
        _ => Some(SshError::Dial { target, line }),
    }
}

/// One session's stdio as a byte stream for hyper.
pub struct DialStdio {
    /// Dropped at shutdown: closing the pipe is the half-close that tells
    /// the far side (an exec's stdin ends); `ChildStdin`'s own shutdown
    /// does nothing.
    stdin: Option<tokio::process::ChildStdin>,
    stdout: tokio::process::ChildStdout,
    /// Resolves once the session's exit is classified (or after
    /// [`SESSION_SETTLE`]): the end of its output is held back until then,
    /// so that a request failing on it finds the reason in `failure`.
    settled: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

fn closed() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the session's input is closed")
}

impl AsyncRead for DialStdio {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut self.stdout).poll_read(cx, buf))?;
        let at_end = buf.filled().len() == before && buf.remaining() > 0;
        if at_end {
            if let Some(settled) = self.settled.as_mut() {
                std::task::ready!(settled.as_mut().poll(cx));
                self.settled = None;
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for DialStdio {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.stdin.as_mut() {
            Some(stdin) => Pin::new(stdin).poll_write(cx, data),
            None => Poll::Ready(Err(closed())),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.stdin.as_mut() {
            Some(stdin) => Pin::new(stdin).poll_flush(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if let Some(stdin) = self.stdin.as_mut() {
            std::task::ready!(Pin::new(stdin).poll_flush(cx))?;
        }
        self.stdin = None;
        Poll::Ready(Ok(()))
    }
}

impl hyper_util::client::legacy::connect::Connection for DialStdio {
    fn connected(&self) -> hyper_util::client::legacy::connect::Connected {
        hyper_util::client::legacy::connect::Connected::new()
    }
}

/// hyper's connector: each connection is a new session over the master.
#[derive(Clone)]
struct Connector {
    master: Arc<Master>,
}

impl tower_service::Service<hyper::Uri> for Connector {
    type Response = hyper_util::rt::TokioIo<DialStdio>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: hyper::Uri) -> Self::Future {
        let dialed = self.master.dial().map(hyper_util::rt::TokioIo::new);
        Box::pin(async move { dialed })
    }
}

/// A bollard client for the ssh engine `url`, with its master; `timeout` is
/// bollard's per-request bound.
pub async fn connect(url: &str, timeout: Duration) -> Result<(bollard::Docker, Arc<Master>), SshError> {
    connect_with(url, timeout, ssh_command()).await
}

async fn connect_with(
    url: &str,
    timeout: Duration,
    ssh: Vec<String>,
) -> Result<(bollard::Docker, Arc<Master>), SshError> {
    let target = Target::parse(url)?;
    let master = Master::start(target, ssh).await?;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(Connector { master: master.clone() });
    let failed = master.clone();
    let transport = move |req: bollard::BollardRequest| {
        let client = client.clone();
        let failed = failed.clone();
        async move {
            match client.request(req).await {
                Ok(r) => Ok(r),
                // The session's own words, when it said any, over hyper's.
                Err(e) => Err(match failed.failure() {
                    Some(why) => bollard::errors::Error::IOError { err: std::io::Error::other(why.to_string()) },
                    None => bollard::errors::Error::from(e),
                }),
            }
        }
    };
    let docker = bollard::Docker::connect_with_custom_transport(
        transport,
        Some("http://docker"),
        timeout.as_secs(),
        bollard::API_DEFAULT_VERSION,
    )
    .map_err(|e| SshError::Failed { target: master.target.display(), line: e.to_string() })?;
    Ok((docker, master))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ssh_address_gives_user_host_and_port_as_the_docker_cli_reads_them() {
        let t = |user: Option<&str>, host: &str, port: Option<u16>| Target {
            user: user.map(str::to_string),
            host: host.to_string(),
            port,
        };
        assert_eq!(Target::parse("ssh://box").unwrap(), t(None, "box", None));
        assert_eq!(Target::parse("ssh://me@box:2222").unwrap(), t(Some("me"), "box", Some(2222)));
        assert_eq!(Target::parse("ssh://root@127.0.0.1:22/").unwrap(), t(Some("root"), "127.0.0.1", Some(22)));
        assert_eq!(Target::parse("ssh://me@[::1]:2200").unwrap(), t(Some("me"), "::1", Some(2200)));
        assert_eq!(Target::parse("ssh://me@box:2222").unwrap().display(), "me@box:2222");
        assert_eq!(
            Target::parse("ssh://me@box:2222").unwrap().args(),
            ["-p", "2222", "-l", "me", "--", "box"],
            "the host comes after `--`, so no address is read as an option"
        );
    }

    #[test]
    fn a_bad_ssh_address_is_refused_with_what_is_wrong() {
        for (url, problem) in [
            ("ssh://box/var/run/docker.sock", "takes no path"),
            ("ssh://@box", "user before `@` is empty"),
            ("ssh://box:http", "port is not a number"),
            ("ssh://", "no host name"),
            ("ssh://-oProxyCommand=x", "no host name"),
        ] {
            let err = Target::parse(url).unwrap_err().to_string();
            assert!(err.starts_with(&format!("{url}: ")) && err.contains(problem), "{url}: {err}");
        }
    }

    #[test]
    fn ssh_failures_are_told_apart_by_what_ssh_and_the_far_shell_said() {
        let target = Target::parse("ssh://root@h:2222").unwrap();
        let refused = classify_master(&target, "debug\nroot@h: Permission denied (publickey).\n");
        assert!(matches!(refused, SshError::KeyRefused { .. }), "{refused:?}");
        assert!(refused.to_string().starts_with("ssh root@h:2222 refused the key (root@h: Permission denied"));
        let down = classify_master(&target, "ssh: connect to host h port 2222: Connection refused\n");
        assert_eq!(down.to_string(), "ssh root@h:2222 failed: ssh: connect to host h port 2222: Connection refused");
        let missing = classify_session(&target, Some(127), "bash: line 1: docker: command not found\n").unwrap();
        assert!(missing.to_string().starts_with("root@h:2222 has no docker CLI"), "{missing}");
        let dial = classify_session(&target, Some(1), "Cannot connect to the Docker daemon at unix:///x\n").unwrap();
        assert!(matches!(dial, SshError::Dial { .. }), "{dial:?}");
        assert_eq!(classify_session(&target, Some(0), ""), None);
    }

    #[test]
    fn an_ssh_program_that_cannot_run_is_named_with_why() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let err = runtime
            .block_on(connect_with("ssh://box", Duration::from_secs(5), vec!["/nonexistent/ssh".into()]))
            .err()
            .expect("no such program")
            .to_string();
        assert!(err.starts_with("cannot run /nonexistent/ssh: ") && err.contains("No such file"), "{err}");
    }

    /// CI saw hyper's "connection closed before message completed" instead
    /// of the missing docker CLI: the session's output ended before ssh's
    /// exit status was read. A stand-in ssh that closes its output first
    /// and says why a second later pins that order.
    #[test]
    fn a_session_whose_output_ends_before_its_reason_still_reports_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let ssh = dir.path().join("ssh");
        std::fs::write(
            &ssh,
            "#!/bin/sh\n\
             for a in \"$@\"; do case \"$a\" in -M|-O) exit 0;; esac; done\n\
             exec >&-\n\
             sleep 1\n\
             echo 'sh: 1: docker: not found' >&2\n\
             exit 127\n",
        )
        .unwrap();
        std::fs::set_permissions(&ssh, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let err = runtime.block_on(async {
            let (docker, _master) =
                connect_with("ssh://root@h:2222", Duration::from_secs(20), vec![ssh.display().to_string()])
                    .await
                    .unwrap();
            docker.ping().await.unwrap_err().to_string()
        });
        assert!(
            err.contains("root@h:2222 has no docker CLI for `docker system dial-stdio` (sh: 1: docker: not found)"),
            "{err}"
        );
    }
}
