//! Docker exec: the one way workroom reaches into a room. A non-tty exec
//! multiplexes stdout and stderr; `ExecOutput` turns stdout into a plain
//! `AsyncRead` (the daemon link's bytes pass untouched) and keeps stderr aside.
//! The exec is created through bollard and started over a connection of our
//! own (`hijack.rs`).

use super::hijack::{self, BoxIo, Channel, Demux, Next, StartError};
use super::{DockerEngine, EngineError};
use bollard::errors::Error as BollardError;
use bollard::exec::CreateExecOptions;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf};
use tokio::sync::mpsc;

/// What to run.
#[derive(Debug, Clone, Default)]
pub struct ExecSpec {
    pub argv: Vec<String>,
    pub user: Option<String>,
    pub env: Vec<String>,
    pub workdir: Option<String>,
    pub tty: bool,
    pub stdin: bool,
    /// The engine's own detach sequence for this exec (`None`: docker's
    /// default, ctrl-p ctrl-q, which the engine swallows).
    pub detach_keys: Option<String>,
}

/// A started exec: its output and, if asked for, its stdin.
pub struct ExecStream {
    pub id: String,
    pub output: ExecOutput,
    pub input: Pin<Box<dyn AsyncWrite + Send>>,
    /// The socket `input` writes to, as a descriptor of its own, where the
    /// engine's connection is a socket: bytes spliced into it land after
    /// whatever `input` wrote and flushed before.
    pub input_socket: Option<std::os::fd::OwnedFd>,
}

/// Stdout as bytes; stderr pieces go to `stderr` (bounded: a daemon that only
/// ever writes a line or two there cannot grow memory through it).
pub struct ExecOutput {
    io: ReadHalf<BoxIo>,
    demux: Demux,
    /// What was read from the engine and not yet handed on: `buf[start..end]`.
    /// Allocated once, zeroed once: every read lands in the same warm memory.
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    stderr: Option<mpsc::Sender<bytes::Bytes>>,
    /// The engine's stream ended (with `failed` when it broke): it is not
    /// read again.
    ended: bool,
    failed: Option<std::io::Error>,
}

/// Stderr chunks kept before further ones are dropped.
const STDERR_CHUNKS: usize = 64;

/// The exec output's read buffer. dockerd writes its pieces of at most
/// 32 KiB as they come; a quarter MiB takes everything a busy engine has
/// queued in one read, and the link's reader then decodes it in one go.
const READ_BUFFER: usize = 256 * 1024;

impl ExecOutput {
    fn new(io: ReadHalf<BoxIo>, raw: bool, already_read: &[u8]) -> ExecOutput {
        let mut buf = vec![0u8; READ_BUFFER.max(already_read.len())].into_boxed_slice();
        buf[..already_read.len()].copy_from_slice(already_read);
        ExecOutput {
            io,
            demux: Demux::new(raw),
            buf,
            start: 0,
            end: already_read.len(),
            stderr: None,
            ended: false,
            failed: None,
        }
    }

    /// A receiver of the exec's stderr; call before reading.
    pub fn take_stderr(&mut self) -> mpsc::Receiver<bytes::Bytes> {
        let (tx, rx) = mpsc::channel(STDERR_CHUNKS);
        self.stderr = Some(tx);
        rx
    }
}

impl AsyncRead for ExecOutput {
    /// Fills `out` with as much stdout as the engine has already sent, not
    /// one of its pieces a call: the link's reader then decodes a quarter
    /// MiB a wake-up instead of a few KiB.
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let before = out.filled().len();
        loop {
            match this.demux.next(&this.buf[this.start..this.end]) {
                Next::Header(n) => {
                    this.start += n;
                    continue;
                }
                Next::Output { channel, len } => {
                    let len = match channel {
                        Channel::Stdout => len.min(out.remaining()),
                        _ => len,
                    };
                    let piece = &this.buf[this.start..this.start + len];
                    match channel {
                        Channel::Stdout => out.put_slice(piece),
                        Channel::Stderr => {
                            if let Some(tx) = &this.stderr {
                                let _ = tx.try_send(bytes::Bytes::copy_from_slice(piece));
                            }
                        }
                        Channel::Other => {}
                    }
                    this.demux.took(len);
                    this.start += len;
                    if out.remaining() == 0 {
                        return Poll::Ready(Ok(()));
                    }
                    continue;
                }
                Next::More => {}
            }
            // Bytes given first: an end or an error waits for the next call.
            let some = out.filled().len() > before;
            if this.ended {
                return match this.failed.take() {
                    Some(e) if !some => Poll::Ready(Err(e)),
                    failed => {
                        this.failed = failed;
                        Poll::Ready(Ok(()))
                    }
                };
            }
            // Keep what is left (part of a header) at the front.
            if this.start > 0 {
                this.buf.copy_within(this.start..this.end, 0);
                this.end -= this.start;
                this.start = 0;
            }
            let mut room = ReadBuf::new(&mut this.buf[this.end..]);
            match Pin::new(&mut this.io).poll_read(cx, &mut room) {
                Poll::Pending if some => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(())) if room.filled().is_empty() => {
                    this.ended = true;
                    if this.demux.mid_piece() || this.end > 0 {
                        this.failed = Some(std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "the engine closed the exec's stream in the middle of a piece",
                        ));
                    }
                }
                Poll::Ready(Ok(())) => this.end += room.filled().len(),
                Poll::Ready(Err(e)) => {
                    this.ended = true;
                    this.failed = Some(e);
                }
            }
        }
    }
}

impl DockerEngine {
    /// Creates and starts an exec, attached.
    pub async fn exec(&self, container: &str, spec: &ExecSpec) -> Result<ExecStream, EngineError> {
        let options = CreateExecOptions {
            cmd: Some(spec.argv.clone()),
            user: spec.user.clone(),
            env: (!spec.env.is_empty()).then(|| spec.env.clone()),
            working_dir: spec.workdir.clone(),
            tty: Some(spec.tty),
            detach_keys: spec.detach_keys.clone(),
            attach_stdin: Some(spec.stdin),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            ..Default::default()
        };
        let what = format!("container {container}");
        let created = super::logged("create_exec", container, self.docker.create_exec(container, options))
            .await
            .map_err(|e| self.map(format!("exec in {container}"), what.clone(), e))?;
        // Started over a connection of our own (hijack.rs says why).
        let version = self.docker.client_version();
        let path = format!("/v{}.{}/exec/{}/start", version.major_version, version.minor_version, created.id);
        let body = serde_json::json!({ "Detach": false, "Tty": spec.tty }).to_string();
        let started = hijack::start(&self.transport, &path, body);
        let started = match super::logged("start_exec", container, started).await {
            Ok(started) => started,
            Err(StartError::Refused { status, message }) => {
                let refusal = BollardError::DockerResponseServerError { status_code: status, message };
                return Err(self.map(format!("start exec in {container}"), what, refusal));
            }
            Err(StartError::TimedOut(bound)) => {
                return Err(EngineError::NoAnswer { host: self.host().to_string(), seconds: bound.as_secs() })
            }
            Err(e) => return Err(EngineError::Unreachable { host: self.host().to_string(), reason: e.to_string() }),
        };
        let (read, write) = tokio::io::split(started.io);
        Ok(ExecStream {
            id: created.id,
            output: ExecOutput::new(read, spec.tty, &started.already_read),
            input: Box::pin(write),
            input_socket: started.socket,
        })
    }

    /// The exit code of a finished exec (`None` while it still runs).
    pub async fn exec_exit_code(&self, exec_id: &str) -> Result<Option<i64>, EngineError> {
        let inspect = super::logged("inspect_exec", exec_id, self.docker.inspect_exec(exec_id))
            .await
            .map_err(|e| self.map(format!("inspect exec {exec_id}"), format!("exec {exec_id}"), e))?;
        Ok(if inspect.running == Some(true) { None } else { inspect.exit_code })
    }

    pub async fn resize_exec(&self, exec_id: &str, rows: u16, cols: u16) -> Result<(), EngineError> {
        let options = bollard::exec::ResizeExecOptions { height: rows, width: cols };
        super::logged("resize_exec", exec_id, self.docker.resize_exec(exec_id, options))
            .await
            .map_err(|e| self.map(format!("resize exec {exec_id}"), format!("exec {exec_id}"), e))
    }
}
