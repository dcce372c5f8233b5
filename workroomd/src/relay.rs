//! `workroomd relay`: connects the daemon's socket to its stdin/stdout. It
//! is the far end of `docker exec -i <room> workroomd relay` and writes
//! nothing of its own to stdout, so the host sees the daemon's bytes only;
//! a failure to connect is said on stderr.
//!
//! First it hands its stdin and stdout themselves to the daemon (one byte,
//! [`HAND_OVER`], with the two fds as `SCM_RIGHTS`): when they are pipes, as
//! `docker exec` gives them, the daemon runs the link on them directly and
//! answers [`TAKEN`]; the relay then only waits for the daemon to close the
//! socket (the link's end), so its exec lives exactly as long as the link.
//! No byte passes through the relay: one process and two thread wake-ups
//! fewer on every round trip (a keystroke's echo) and one copy fewer per
//! byte. Anything else (a terminal, an older daemon that never answers with
//! [`TAKEN`]) gets [`RELAYED`] and the copy loops below.
//!
//! Blocking threads, not an async runtime: two copies need nothing more, and
//! the relay starts on every host command, so it must start fast.

use std::io::{self, Read, Write};
use std::mem::MaybeUninit;
use std::net::Shutdown;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// The relay's first byte: its stdin and stdout come with it. The protocol
/// itself starts with the magic `WORKROOM`, so the two cannot be confused.
pub const HAND_OVER: u8 = 0;
/// The daemon's answer: it runs the link on the relay's stdin and stdout.
pub const TAKEN: u8 = b'Y';
/// The daemon's answer: copy the bytes through the socket as before.
pub const RELAYED: u8 = b'N';
/// The size asked for a handed-over pipe: Linux's default ceiling for a
/// pipe (`/proc/sys/fs/pipe-max-size`), the link's largest frames several
/// times over.
const PIPE_SIZE: usize = 1 << 20;

/// Bytes moved per read. Large enough that a bulk transfer costs few
/// syscalls; the relay holds two of them and nothing else.
const CHUNK: usize = 128 * 1024;

pub fn run(socket: &Path) -> i32 {
    let stream = match UnixStream::connect(socket) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("workroomd relay: cannot reach the daemon at {}: {e}", socket.display());
            return 1;
        }
    };
    match hand_over(&stream) {
        // The daemon runs the link on our stdio: wait for its end.
        Ok(true) => {
            let mut rest = [0u8; 64];
            while matches!((&stream).read(&mut rest), Ok(n) if n > 0) {}
            return 0;
        }
        Ok(false) => {}
        Err(e) => {
            eprintln!("workroomd relay: cannot reach the daemon at {}: {e}", socket.display());
            return 1;
        }
    }
    let upstream = match stream.try_clone() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("workroomd relay: {e}");
            return 1;
        }
    };
    // stdin → socket. At stdin's end, half-close: the daemon then closes the
    // link, which ends the copy below, so a closed stdin never leaves the
    // relay hanging.
    std::thread::spawn(move || {
        let mut upstream = upstream;
        let _ = copy(&mut io::stdin().lock(), &mut upstream);
        let _ = upstream.shutdown(Shutdown::Write);
    });
    // socket → stdout, until the daemon closes or stdout is gone.
    let mut downstream = stream;
    match copy(&mut downstream, &mut io::stdout().lock()) {
        Ok(()) => 0,
        Err(_) => {
            // The host went away; tell the daemon by closing both ways.
            let _ = downstream.shutdown(Shutdown::Both);
            0
        }
    }
}

/// Copies until end of input, flushing each chunk (stdout is line-buffered
/// by std; the link is binary and must not wait for a newline).
fn copy(from: &mut impl Read, to: &mut impl Write) -> io::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
        to.flush()?;
    }
}

/// Offers stdin and stdout to the daemon; whether it took them.
fn hand_over(stream: &UnixStream) -> io::Result<bool> {
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let fds = [rustix::stdio::stdin(), rustix::stdio::stdout()];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    control.push(SendAncillaryMessage::ScmRights(&fds));
    sendmsg(stream, &[io::IoSlice::new(&[HAND_OVER])], &mut control, SendFlags::empty())?;
    let mut answer = [0u8; 1];
    let mut reader = stream;
    reader.read_exact(&mut answer)?;
    Ok(answer[0] == TAKEN)
}

/// What a new connection on the daemon's socket carries.
pub enum Accepted {
    /// A relay handed over its stdin and stdout (pipes): the link runs on
    /// them; the socket, kept open until the link ends, tells the relay when
    /// to exit.
    Stdio { input: tokio::net::unix::pipe::Receiver, output: tokio::net::unix::pipe::Sender },
    /// The protocol runs on the socket; `first` is its first byte, already
    /// read (the magic's `W`), or `None` after a refused hand-over.
    Socket { first: Option<u8> },
}

/// The daemon's side: reads a connection's first byte (with any fds) and
/// takes a relay's stdio when it is a pair of pipes.
pub async fn accept(stream: &tokio::net::UnixStream) -> io::Result<Accepted> {
    let (first, fds) = loop {
        stream.readable().await?;
        match stream.try_io(tokio::io::Interest::READABLE, || first_byte(stream)) {
            Ok(got) => break got,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    };
    if first != HAND_OVER {
        return Ok(Accepted::Socket { first: Some(first) });
    }
    let answer = match <[OwnedFd; 2]>::try_from(fds) {
        Ok([input, output]) => {
            // The daemon alone now moves the link's bytes to and from the
            // exec's pipes: larger pipes mean fewer wake-ups per MiB on both
            // sides (the kernel's default is 64 KiB). Best effort.
            let _ = rustix::pipe::fcntl_setpipe_size(&input, PIPE_SIZE);
            let _ = rustix::pipe::fcntl_setpipe_size(&output, PIPE_SIZE);
            use tokio::net::unix::pipe;
            match (pipe::Receiver::from_owned_fd(input), pipe::Sender::from_owned_fd(output)) {
                (Ok(input), Ok(output)) => Some(Accepted::Stdio { input, output }),
                _ => None,
            }
        }
        Err(_) => None,
    };
    let (byte, accepted) = match answer {
        Some(a) => (TAKEN, a),
        None => (RELAYED, Accepted::Socket { first: None }),
    };
    loop {
        stream.writable().await?;
        match stream.try_write(&[byte]) {
            Ok(_) => return Ok(accepted),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

fn first_byte(stream: &impl AsFd) -> io::Result<(u8, Vec<OwnedFd>)> {
    use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let got = recvmsg(stream, &mut [io::IoSliceMut::new(&mut byte)], &mut control, RecvFlags::CMSG_CLOEXEC)?;
    if got.bytes == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    Ok((byte[0], fds))
}
