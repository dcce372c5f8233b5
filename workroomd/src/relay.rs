//! `workroomd relay`: copies bytes between its stdin/stdout and the daemon's
//! socket. It is the far end of `docker exec -i <room> workroomd relay` and
//! writes nothing of its own to stdout, so the host sees the daemon's bytes
//! only; a failure to connect is said on stderr.
//!
//! Blocking threads, not an async runtime: two copies need nothing more, and
//! the relay starts on every host command, so it must start fast.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::Path;

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
