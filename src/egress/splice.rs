//! Bytes between two sockets with `splice(2)` through a pipe each way, so
//! they never enter our memory: the host's half of an egress connection
//! whose socket the daemon handed over (a local engine). The link's path
//! copies (`workroomd::pipe`); this one is what lets a proxied download
//! come near an open room's.

use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags};
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// What each direction's pipe is asked to hold: larger pipes mean fewer
/// wake-ups per byte; the kernel caps it at `/proc/sys/fs/pipe-max-size`
/// (1 MiB by default), and a refusal leaves the default 64 KiB.
const PIPE_SIZE: usize = 1024 * 1024;

/// Carries `a`'s bytes to `b` and `b`'s to `a`, each direction's end
/// passed on as a half-close, until both ended or one failed; counts what
/// went each way.
pub async fn both_ways(a: TcpStream, b: TcpStream, a_to_b: &AtomicU64, b_to_a: &AtomicU64) -> io::Result<()> {
    tokio::try_join!(one_way(&a, &b, a_to_b), one_way(&b, &a, b_to_a))?;
    Ok(())
}

async fn one_way(from: &TcpStream, to: &TcpStream, count: &AtomicU64) -> io::Result<()> {
    let (out, into) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
    let capacity = match nix::fcntl::fcntl(&into, FcntlArg::F_SETPIPE_SZ(PIPE_SIZE as i32)) {
        Ok(size) if size > 0 => size as usize,
        _ => 64 * 1024,
    };
    let flags = SpliceFFlags::SPLICE_F_NONBLOCK | SpliceFFlags::SPLICE_F_MOVE;
    let mut staged = 0usize;
    loop {
        if staged == 0 {
            // The pipe is empty, so a `WouldBlock` here is the socket's.
            from.readable().await?;
            match from.try_io(Interest::READABLE, || splice(from, &into, capacity, flags)) {
                Ok(0) => {
                    nix::sys::socket::shutdown(to.as_raw_fd(), nix::sys::socket::Shutdown::Write).or_else(|e| {
                        if e == nix::errno::Errno::ENOTCONN {
                            Ok(())
                        } else {
                            Err(e)
                        }
                    })?;
                    return Ok(());
                }
                Ok(n) => staged = n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
        // The pipe holds bytes, so a `WouldBlock` here is the socket's.
        to.writable().await?;
        match to.try_io(Interest::WRITABLE, || splice(&out, to, staged, flags)) {
            Ok(n) => {
                staged -= n;
                count.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

fn splice(from: impl AsFd, to: impl AsFd, len: usize, flags: SpliceFFlags) -> io::Result<usize> {
    Ok(nix::fcntl::splice(from, None, to, None, len, flags)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (dialled, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (dialled.unwrap(), accepted.unwrap().0)
    }

    #[tokio::test]
    async fn bytes_cross_both_ways_counted_and_each_end_is_passed_on() {
        let (mut client, client_far) = pair().await;
        let (server_far, mut server) = pair().await;
        let (sent, received) = (AtomicU64::new(0), AtomicU64::new(0));
        let carrying = both_ways(client_far, server_far, &sent, &received);
        let talking = async {
            let request = vec![7u8; 3 * 1024 * 1024 + 5];
            client.write_all(&request).await.unwrap();
            client.shutdown().await.unwrap();
            let mut got = Vec::new();
            server.read_to_end(&mut got).await.unwrap();
            assert_eq!(got, request, "the client's bytes and its end reach the server");
            server.write_all(b"answer").await.unwrap();
            server.shutdown().await.unwrap();
            let mut answer = Vec::new();
            client.read_to_end(&mut answer).await.unwrap();
            assert_eq!(answer, b"answer");
        };
        let (carried, ()) = tokio::join!(carrying, talking);
        carried.unwrap();
        assert_eq!(sent.load(Ordering::Relaxed), 3 * 1024 * 1024 + 5);
        assert_eq!(received.load(Ordering::Relaxed), 6);
    }
}
