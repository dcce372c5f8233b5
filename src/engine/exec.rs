//! Docker exec: the one way workroom reaches into a room. A non-tty exec
//! multiplexes stdout and stderr; `ExecOutput` turns stdout into a plain
//! `AsyncRead` (the daemon link's bytes pass untouched) and keeps stderr aside.

use super::{DockerEngine, EngineError};
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use futures_util::{Stream, StreamExt};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
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
}

type LogStream = Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// Stdout as bytes; stderr chunks go to `stderr` (bounded: a daemon that only
/// ever writes a line or two there cannot grow memory through it).
pub struct ExecOutput {
    stream: LogStream,
    pending: bytes::Bytes,
    stderr: Option<mpsc::Sender<bytes::Bytes>>,
    /// The engine's stream ended (with `failed` when it broke): it is not
    /// polled again.
    ended: bool,
    failed: Option<std::io::Error>,
}

/// Stderr chunks kept before further ones are dropped.
const STDERR_CHUNKS: usize = 64;

impl ExecOutput {
    /// A receiver of the exec's stderr; call before reading.
    pub fn take_stderr(&mut self) -> mpsc::Receiver<bytes::Bytes> {
        let (tx, rx) = mpsc::channel(STDERR_CHUNKS);
        self.stderr = Some(tx);
        rx
    }
}

impl AsyncRead for ExecOutput {
    /// Fills `buf` with as much stdout as the engine has already sent, not
    /// one of its messages a call: dockerd cuts the stream into pieces of
    /// 32 KiB at most, and the link's reader then decodes a quarter MiB a
    /// wake-up instead of a few KiB.
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let start = buf.filled().len();
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.remaining());
                buf.put_slice(&self.pending.split_to(n));
                if buf.remaining() == 0 {
                    return Poll::Ready(Ok(()));
                }
            }
            // Bytes given first: an end or an error waits for the next call.
            let some = buf.filled().len() > start;
            if self.ended {
                return match self.failed.take() {
                    Some(e) if !some => Poll::Ready(Err(e)),
                    failed => {
                        self.failed = failed;
                        Poll::Ready(Ok(()))
                    }
                };
            }
            match self.stream.poll_next_unpin(cx) {
                Poll::Pending if some => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => self.ended = true,
                Poll::Ready(Some(Err(e))) => {
                    self.ended = true;
                    self.failed = Some(std::io::Error::other(e));
                }
                Poll::Ready(Some(Ok(LogOutput::StdOut { message } | LogOutput::Console { message }))) => {
                    self.pending = message;
                }
                Poll::Ready(Some(Ok(LogOutput::StdErr { message }))) => {
                    if let Some(tx) = &self.stderr {
                        let _ = tx.try_send(message);
                    }
                }
                Poll::Ready(Some(Ok(LogOutput::StdIn { .. }))) => {}
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
        // A larger read buffer than bollard's 8 KiB default: the daemon link
        // carries bulk data and fewer, larger reads cost less.
        let start = StartExecOptions { detach: false, tty: spec.tty, output_capacity: Some(256 * 1024) };
        match super::logged("start_exec", container, self.docker.start_exec(&created.id, Some(start))).await {
            Ok(StartExecResults::Attached { output, input }) => Ok(ExecStream {
                id: created.id,
                output: ExecOutput {
                    stream: output,
                    pending: bytes::Bytes::new(),
                    stderr: None,
                    ended: false,
                    failed: None,
                },
                input,
            }),
            Ok(StartExecResults::Detached) => unreachable!("started attached"),
            Err(e) => Err(self.map(format!("start exec in {container}"), what, e)),
        }
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
        self.docker
            .resize_exec(exec_id, options)
            .await
            .map_err(|e| self.map(format!("resize exec {exec_id}"), format!("exec {exec_id}"), e))
    }
}
