//! `pipe::splice` over two real links in memory: a "client" connection on
//! the host side, a "server" connection on the daemon side, as a forwarded
//! port joins them. Every wait is bounded by [`GUARD`].

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use workroomd::pipe;
use workroomd::proto::{Link, Request, Response, Role};

const GUARD: Duration = Duration::from_secs(30);
const PIPE: usize = 64 * 1024;

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, future).await.unwrap_or_else(|_| panic!("{what} hung"))
}

async fn pair() -> (Link, Link) {
    let (a, b) = tokio::io::duplex(PIPE);
    let (host, daemon) = tokio::join!(Link::handshake(a, Role::Host), Link::handshake(b, Role::Daemon));
    (host.unwrap().0, daemon.unwrap().0)
}

/// Opens `request` from `opener`, accepts it on `acceptor`, and splices each
/// end onto an in-memory connection; returns the far ends (client, server).
async fn forwarded(opener: &Link, acceptor: &Link, request: Request) -> (DuplexStream, DuplexStream) {
    let (client, client_far) = tokio::io::duplex(PIPE);
    let (server, server_far) = tokio::io::duplex(PIPE);
    let stream = opener.open(request).await.unwrap();
    let (_, accepted) = within("accept", acceptor.accept()).await.unwrap();
    accepted.reply(Response::Ready).await.unwrap();
    assert_eq!(within("reply", stream.recv_reply()).await.unwrap(), Response::Ready);
    tokio::spawn(async move {
        let (r, w) = tokio::io::split(client_far);
        let _ = pipe::splice(&stream, r, w).await;
    });
    tokio::spawn(async move {
        let (r, w) = tokio::io::split(server_far);
        let _ = pipe::splice(&accepted, r, w).await;
    });
    (client, server)
}

#[tokio::test]
async fn each_direction_half_closes_on_its_own() {
    let (host, daemon) = pair().await;
    let (mut client, mut server) = forwarded(&host, &daemon, Request::Connect { host: "x".into(), port: 1 }).await;
    client.write_all(b"request").await.unwrap();
    client.shutdown().await.unwrap();
    let mut got = Vec::new();
    within("the server sees the client's end", server.read_to_end(&mut got)).await.unwrap();
    assert_eq!(got, b"request");
    // The other direction is still open after the client's half-close.
    server.write_all(b"response").await.unwrap();
    server.shutdown().await.unwrap();
    let mut back = Vec::new();
    within("the client sees the server's end", client.read_to_end(&mut back)).await.unwrap();
    assert_eq!(back, b"response");
}

#[tokio::test]
async fn the_daemon_opens_streams_the_host_accepts() {
    let (host, daemon) = pair().await;
    let (mut agent_client, mut host_agent) = forwarded(&daemon, &host, Request::SshAgent).await;
    agent_client.write_all(b"\0\0\0\x01\x0b").await.unwrap();
    let mut buf = [0u8; 5];
    within("bytes reach the host's agent", host_agent.read_exact(&mut buf)).await.unwrap();
    assert_eq!(&buf, b"\0\0\0\x01\x0b");
}

#[tokio::test]
async fn a_dropped_client_connection_ends_the_servers_input() {
    let (host, daemon) = pair().await;
    let (client, mut server) = forwarded(&host, &daemon, Request::Connect { host: "x".into(), port: 1 }).await;
    drop(client);
    let mut rest = Vec::new();
    let _ = within("the server sees end of input", server.read_to_end(&mut rest)).await;
    assert!(rest.is_empty());
}
