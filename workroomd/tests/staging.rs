//! Spliced data frames (`proto::splice`, `staging`) over real pipes and a
//! real TCP connection, as the daemon's end of `docker exec` carries a
//! forwarded port: the daemon's link writes to a pipe, and a socket's bytes
//! reach it through a staging pipe, never through our memory. Every wait is
//! bounded by [`GUARD`].

use std::os::fd::AsFd;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use workroomd::proto::{Event, Hello, Link, Request, Response, Role, StreamError, StreamHandle};
use workroomd::staging::{FdOut, PacedPipe, Staging};

const GUARD: Duration = Duration::from_secs(60);

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, future).await.unwrap_or_else(|_| panic!("{what} hung"))
}

/// A daemon-side link whose output is a pipe it can splice into (and
/// paces its writes to, as `serve` sets it up), and the
/// host-side link reading that pipe (and writing the other one).
async fn pipe_links() -> (Link, Link) {
    let (to_host, from_daemon) = tokio::net::unix::pipe::pipe().unwrap();
    let (to_daemon, from_host) = tokio::net::unix::pipe::pipe().unwrap();
    let out = FdOut::pipe(to_host.as_fd()).unwrap();
    let to_host = PacedPipe::new(to_host);
    let (daemon, host) = tokio::join!(
        Link::handshake_spliced(from_host, to_host, Box::new(out), Hello::new(Role::Daemon)),
        Link::handshake_with(from_daemon, to_daemon, Hello::new(Role::Host)),
    );
    (daemon.unwrap().0, host.unwrap().0)
}

/// Opens a streaming request from the host and accepts it on the daemon.
async fn stream(host: &Link, daemon: &Link) -> (StreamHandle, StreamHandle) {
    let opened = host.open(Request::Connect { host: "x".into(), port: 1 }).await.unwrap();
    let (_, accepted) = within("accept", daemon.accept()).await.unwrap();
    accepted.reply(Response::Ready).await.unwrap();
    assert_eq!(within("reply", opened.recv_reply()).await.unwrap(), Response::Ready);
    (opened, accepted)
}

/// A pattern in which a lost, repeated or reordered stretch shows.
fn pattern(at: usize) -> u8 {
    (at as u32).wrapping_mul(2654435761).rotate_right(13) as u8
}

async fn connected() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    let (server, _) = listener.accept().await.unwrap();
    (client, server)
}

#[tokio::test]
async fn a_socket_staged_into_a_pipe_link_arrives_whole_and_in_order_beside_another_stream() {
    const TOTAL: usize = 48 << 20;
    let (daemon, host) = pipe_links().await;
    let (bulk_host, bulk_daemon) = stream(&host, &daemon).await;
    let (chat_host, chat_daemon) = stream(&host, &daemon).await;
    assert!(bulk_daemon.can_splice());
    let (mut client, server) = connected().await;

    let writer = tokio::spawn(async move {
        let mut at = 0;
        while at < TOTAL {
            let chunk: Vec<u8> = (at..(at + 100_003).min(TOTAL)).map(pattern).collect();
            client.write_all(&chunk).await.unwrap();
            at += chunk.len();
        }
        client.shutdown().await.unwrap();
    });
    let staged = tokio::spawn(async move {
        let staging = Staging::new().unwrap();
        staging.send_socket(&bulk_daemon, &server).await.unwrap();
    });
    // Small frames on another stream of the same link, between the staged
    // ones: the writer must never cut into a staged frame's bytes.
    let chatter = tokio::spawn(async move {
        for i in 0..200u32 {
            chat_daemon.send_data(format!("line {i}\n").as_bytes()).await.unwrap();
            tokio::task::yield_now().await;
        }
        chat_daemon.send_eof().await.unwrap();
    });

    let (mut received, mut lines) = (0usize, Vec::new());
    let (mut bulk_done, mut chat_done) = (false, false);
    while !(bulk_done && chat_done) {
        tokio::select! {
            event = bulk_host.recv(), if !bulk_done => match event {
                Some(Event::Data(bytes)) => {
                    for (i, byte) in bytes.iter().enumerate() {
                        assert_eq!(*byte, pattern(received + i), "byte {} of the staged stream", received + i);
                    }
                    received += bytes.len();
                }
                Some(Event::Eof) | None => bulk_done = true,
                Some(other) => panic!("unexpected {other:?} on the staged stream"),
            },
            event = chat_host.recv(), if !chat_done => match event {
                Some(Event::Data(bytes)) => lines.extend_from_slice(&bytes),
                Some(Event::Eof) | None => chat_done = true,
                Some(other) => panic!("unexpected {other:?} on the other stream"),
            },
            () = tokio::time::sleep(GUARD) => panic!("the streams stalled at {received} bytes"),
        }
    }
    assert_eq!(received, TOTAL, "every byte the socket carried, and the end after them");
    let expected: String = (0..200).map(|i| format!("line {i}\n")).collect();
    assert_eq!(String::from_utf8(lines).unwrap(), expected);
    within("the writer", writer).await.unwrap();
    within("the staged sender", staged).await.unwrap();
    within("the other stream", chatter).await.unwrap();
}

#[tokio::test]
async fn a_staged_send_waits_for_credit_and_a_host_that_does_not_read_holds_only_its_window() {
    let (daemon, host) = pipe_links().await;
    let (bulk_host, bulk_daemon) = stream(&host, &daemon).await;
    let (mut client, server) = connected().await;
    let staged = tokio::spawn(async move {
        let staging = Staging::new().unwrap();
        staging.send_socket(&bulk_daemon, &server).await
    });
    // More than the window; the sender blocks on credit, then on the socket.
    let writer = tokio::spawn(async move {
        let chunk = vec![7u8; 1 << 20];
        for _ in 0..8 {
            if client.write_all(&chunk).await.is_err() {
                break;
            }
        }
        client
    });
    // The host takes nothing: what it holds grows to its window and stops.
    let window = bulk_host.receive_window();
    within("the window to fill", async {
        while bulk_host.buffered() < window {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert_eq!(bulk_host.buffered(), window, "never more than the window");
    // Reading all of it lets the rest through.
    let mut received = 0;
    while received < 8 << 20 {
        match within("the rest", bulk_host.recv()).await {
            Some(Event::Data(bytes)) => received += bytes.len(),
            other => panic!("unexpected {other:?}"),
        }
    }
    drop(within("the writer", writer).await.unwrap());
    assert_eq!(within("the end", bulk_host.recv()).await, Some(Event::Eof));
    within("the staged sender", staged).await.unwrap().unwrap();
}

#[tokio::test]
async fn a_link_whose_output_is_not_a_pipe_refuses_staged_sends() {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (host, daemon) = tokio::join!(Link::handshake(a, Role::Host), Link::handshake(b, Role::Daemon));
    let (host, daemon) = (host.unwrap().0, daemon.unwrap().0);
    let (_opened, accepted) = stream(&host, &daemon).await;
    assert!(!accepted.can_splice());
    let staging = Staging::new().unwrap();
    let (_client, server) = connected().await;
    match staging.send_socket(&accepted, &server).await {
        Err(workroomd::pipe::SpliceError::Stream(StreamError::Misuse(_))) => {}
        other => panic!("expected a refusal, got {other:?}"),
    }
}
