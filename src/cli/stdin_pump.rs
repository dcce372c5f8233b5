//! Our stdin, carried to a writer (an exec's input) until the command ends,
//! and then not one byte more.
//!
//! The stdin a person runs `workroom exec` with is usually their terminal,
//! shared with the shell that started us. Tokio's `stdin()` reads it on a
//! blocking thread that `abort()` cannot cancel, and the runtime waits for
//! that thread at shutdown: `exec -- id` then hung until a key was pressed,
//! and ate that key. Setting `O_NONBLOCK` instead would change the open file
//! the parent shell shares, and break the shell after we exit.
//!
//! So a plain thread polls stdin together with a cancellation pipe and reads
//! only when stdin is readable, at most the bytes already waiting
//! (`FIONREAD`); `stop` wakes it through the pipe and joins it. Once `stop`
//! returns, stdin is ours no more: whatever is typed after that is the
//! shell's.

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::pin::Pin;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// The most read from stdin at once.
const CHUNK: usize = 64 * 1024;

/// Chunks in flight between the reading thread and the writer. Bounded, so
/// a command that does not read its stdin stops us reading ours instead of
/// growing memory with a large piped file.
const IN_FLIGHT: usize = 8;

pub struct StdinPump {
    /// Written once by `stop`: wakes the thread's poll.
    cancel: OwnedFd,
    thread: std::thread::JoinHandle<()>,
    writer: tokio::task::JoinHandle<()>,
}

impl StdinPump {
    /// Starts carrying stdin to `input`; at the end of stdin, `input` is shut
    /// down (the command sees the end of its input).
    pub fn start(mut input: Pin<Box<dyn AsyncWrite + Send>>) -> std::io::Result<StdinPump> {
        let (wake, cancel) = nix::unistd::pipe()?;
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(IN_FLIGHT);
        let thread = std::thread::Builder::new().name("stdin".into()).spawn(move || read_until_cancelled(wake, tx))?;
        let writer = tokio::spawn(async move {
            while let Some(bytes) = rx.recv().await {
                if input.write_all(&bytes).await.is_err() || input.flush().await.is_err() {
                    return;
                }
            }
            let _ = input.shutdown().await;
        });
        Ok(StdinPump { cancel, thread, writer })
    }

    /// Stops reading stdin; when this returns, the thread has ended and no
    /// further byte will be read.
    pub async fn stop(self) {
        // The writer first: dropping its receiver releases a thread blocked
        // on a full channel, so the join below cannot wait on the command.
        self.writer.abort();
        let _ = self.writer.await;
        let _ = nix::unistd::write(&self.cancel, &[1]);
        // Prompt: the thread is in poll (woken by the pipe) or just past a
        // read of bytes that were already waiting.
        let _ = self.thread.join();
    }
}

/// The thread: poll stdin and `wake`; read what is waiting; stop on the
/// wake, at the end of stdin, or when the writer is gone.
fn read_until_cancelled(wake: OwnedFd, tx: mpsc::Sender<Vec<u8>>) {
    let stdin = std::io::stdin();
    let mut buf = vec![0u8; CHUNK];
    loop {
        let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN), PollFd::new(wake.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
        }
        if fds[1].any().unwrap_or(true) {
            return;
        }
        let ready = fds[0].revents().unwrap_or(PollFlags::empty());
        if ready.contains(PollFlags::POLLNVAL) {
            return;
        }
        if ready.is_empty() {
            continue;
        }
        // Only what is already there: a read never waits for, and so never
        // takes, a key pressed after the command ended. Files and /dev/null
        // have no count to give, and a read of them does not wait either.
        let want = waiting_bytes(&stdin).map_or(CHUNK, |n| n.clamp(1, CHUNK));
        match stdin.lock().read(&mut buf[..want]) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if tx.blocking_send(buf[..n].to_vec()).is_err() {
                    return;
                }
            }
        }
    }
}

/// The bytes a terminal or pipe holds for the next read (`FIONREAD`).
fn waiting_bytes(fd: &impl AsRawFd) -> Option<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, which lives for the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) };
    (rc == 0).then_some(n.max(0) as usize)
}

/// What stdin is, which decides how `exec` attaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdinKind {
    Terminal,
    /// `/dev/null`, or a stdin that was closed (the standard library opens
    /// /dev/null in its place before `main`): there is nothing to carry.
    Null,
    /// A pipe, a file or a socket.
    Data,
}

impl StdinKind {
    pub fn of_stdin() -> StdinKind {
        use std::io::IsTerminal;
        let stdin = std::io::stdin();
        if stdin.is_terminal() {
            return StdinKind::Terminal;
        }
        let null = nix::sys::stat::stat("/dev/null").ok();
        match (nix::sys::stat::fstat(stdin.as_fd()).ok(), null) {
            (Some(ours), Some(null))
                if ours.st_mode & libc::S_IFMT == libc::S_IFCHR && ours.st_rdev == null.st_rdev =>
            {
                StdinKind::Null
            }
            _ => StdinKind::Data,
        }
    }
}
