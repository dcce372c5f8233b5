//! The multiplexer end to end over in-memory pipes: real `Link`s on both
//! sides, or one real side against a hand-driven raw peer when the test needs
//! bytes an honest link would never send.
//!
//! Every wait is bounded by [`GUARD`]: a hang fails the test instead of
//! stalling the suite. Nothing sleeps to let things happen.

use std::future::Future;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;
use workroomd::proto::{
    DaemonStatus, Decoder, Event, ExitStatus, Frame, Hello, Kind, Link, LinkError, ProgramStatus, Reason, Request,
    Response, Role, RunRequest, StreamError, StreamHandle, FIXED_WINDOW, INITIAL_WINDOW, MAGIC, MAX_LINK_BUFFER,
    MAX_LINK_GROWTH, MAX_STREAMS, MAX_WINDOW, PROTOCOL,
};

/// Longest any step may take; only reached when something hangs (the
/// slowest step, a 20 MB echo in a debug build, takes about a second).
const GUARD: Duration = Duration::from_secs(30);

/// In-memory pipe capacity, like a Linux pipe's.
const PIPE: usize = 64 * 1024;

/// How often [`eventually`] looks again: short, since it only runs while a
/// condition is about to hold.
const PROBE_INTERVAL: Duration = Duration::from_millis(2);

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    within_for(GUARD, what, future).await
}

/// [`within`] with a guard of the caller's.
async fn within_for<T>(guard: Duration, what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(guard, future).await.unwrap_or_else(|_| panic!("{what} hung"))
}

/// Guards the 13-bytes-a-write echo: some 240,000 writes each way, which the
/// aarch64 build run by qemu-user took over 30 s to make on a loaded
/// two-core machine (CI, 2026-12-03); a guard only matters on a hang.
const SLOW_PIPE_GUARD: Duration = Duration::from_secs(180);

/// Polls a condition on shared state until it holds: a readiness probe for
/// states no event announces (a buffer filling up), bounded by [`GUARD`].
async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    within(what, async {
        while !condition() {
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
    })
    .await;
}

async fn pair() -> (Link, Link) {
    let (host_io, daemon_io) = tokio::io::duplex(PIPE);
    let (host, daemon) = within("handshake", async {
        tokio::join!(Link::handshake(host_io, Role::Host), Link::handshake(daemon_io, Role::Daemon))
    })
    .await;
    (host.unwrap().0, daemon.unwrap().0)
}

/// A deterministic, non-repeating pattern: misordered or dropped chunks
/// cannot compare equal by accident.
fn pattern(len: usize) -> Vec<u8> {
    let mut state = 0x2545_f491_u32;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state as u8
        })
        .collect()
}

fn status() -> Response {
    Response::Status(DaemonStatus {
        version: "0.1.0".into(),
        protocol: PROTOCOL,
        boot_id: "boot-1".into(),
        started_at_unix_ms: 1,
        pid: 1,
        program: ProgramStatus::NotConfigured,
        program_restarts: 0,
    })
}

/// A small daemon: echo, status, and a scripted run. Every accepted handle is
/// also passed to `accepted` so tests can look at the daemon's side.
fn serve(link: Link, accepted: mpsc::UnboundedSender<StreamHandle>) {
    tokio::spawn(async move {
        while let Some((request, stream)) = link.accept().await {
            let _ = accepted.send(stream.clone());
            tokio::spawn(async move {
                match request {
                    Request::Echo => echo(stream).await,
                    Request::Status => stream.reply(status()).await.unwrap(),
                    Request::Run(_) => scripted_run(stream).await.unwrap(),
                    _ => stream.reply(Response::error("unsupported")).await.unwrap(),
                }
            });
        }
    });
}

async fn echo(stream: StreamHandle) {
    stream.reply(Response::Ready).await.unwrap();
    while let Some(event) = stream.recv().await {
        match event {
            Event::Data(bytes) => {
                if stream.send_data(&bytes).await.is_err() {
                    return;
                }
            }
            Event::Eof => stream.send_eof().await.unwrap(),
            _ => return,
        }
    }
}

async fn scripted_run(stream: StreamHandle) -> Result<(), StreamError> {
    stream.reply(Response::Started { pid: 7 }).await?;
    stream.send_data(b"out").await?;
    stream.send_stderr(b"err").await?;
    stream.send_exit(ExitStatus { code: Some(3), signal: None }).await?;
    stream.send_eof().await?;
    // Wait for the host's end of stdin, so the stream ends cleanly.
    while stream.recv().await.is_some() {}
    Ok(())
}

/// Sends `data` and collects the echo concurrently (sequentially they would
/// deadlock once both windows are full, as with any echo).
async fn echo_through(stream: &StreamHandle, data: &[u8]) -> Vec<u8> {
    let send = async {
        stream.send_data(data).await.unwrap();
        stream.send_eof().await.unwrap();
    };
    let receive = async {
        let mut back = Vec::with_capacity(data.len());
        loop {
            match stream.recv().await {
                Some(Event::Data(bytes)) => back.extend_from_slice(&bytes),
                Some(Event::Eof) => break back,
                other => panic!("unexpected {other:?}"),
            }
        }
    };
    let ((), back) = tokio::join!(send, receive);
    assert_eq!(stream.recv().await, None, "nothing after eof");
    back
}

/// A peer driven by hand, frame by frame.
struct RawPeer {
    io: DuplexStream,
    decoder: Decoder,
}

impl RawPeer {
    async fn greet(mut io: DuplexStream, hello: &Hello) -> RawPeer {
        let mut bytes = MAGIC.to_vec();
        Frame::new(Kind::Hello, 0, serde_json::to_vec(hello).unwrap()).unwrap().encode(&mut bytes);
        io.write_all(&bytes).await.unwrap();
        RawPeer { io, decoder: Decoder::new() }
    }

    async fn expect_hello(&mut self) -> Hello {
        let mut magic = [0; 8];
        self.io.read_exact(&mut magic).await.unwrap();
        assert_eq!(magic, MAGIC);
        let frame = self.recv().await.expect("a hello");
        assert_eq!(frame.kind(), Kind::Hello);
        serde_json::from_slice(frame.payload()).unwrap()
    }

    async fn send(&mut self, kind: Kind, stream: u32, payload: &[u8]) {
        let mut bytes = Vec::new();
        Frame::new(kind, stream, payload.to_vec()).unwrap().encode(&mut bytes);
        self.io.write_all(&bytes).await.unwrap();
    }

    async fn send_json<T: serde::Serialize>(&mut self, kind: Kind, stream: u32, value: &T) {
        self.send(kind, stream, &serde_json::to_vec(value).unwrap()).await;
    }

    /// The next frame, or `None` when the other side closed.
    async fn recv(&mut self) -> Option<Frame> {
        loop {
            if let Some(frame) = self.decoder.decode().unwrap() {
                return Some(frame);
            }
            let n = self.io.read(self.decoder.unfilled_mut()).await.ok()?;
            if n == 0 {
                return None;
            }
            self.decoder.advance(n);
        }
    }
}

#[tokio::test]
async fn both_sides_learn_each_others_hello() {
    let (host_io, daemon_io) = tokio::io::duplex(PIPE);
    let host_hello = Hello { version: "9.9.9".into(), ..Hello::new(Role::Host) };
    let (reader, writer) = tokio::io::split(host_io);
    let (host, daemon) = within("handshake", async {
        tokio::join!(Link::handshake_with(reader, writer, host_hello.clone()), Link::handshake(daemon_io, Role::Daemon))
    })
    .await;
    let (host, seen_by_host) = host.unwrap();
    let (_daemon, seen_by_daemon) = daemon.unwrap();
    assert_eq!(seen_by_host, Hello::new(Role::Daemon));
    assert_eq!(seen_by_daemon, host_hello);
    assert_eq!(host.peer().describe(), format!("workroomd {} speaks protocol 1", workroomd::VERSION));
}

#[tokio::test]
async fn a_protocol_mismatch_is_refused_naming_both_versions() {
    let (host_io, daemon_io) = tokio::io::duplex(PIPE);
    let newer_host = Hello { protocol: PROTOCOL + 1, version: "0.2.0".into(), ..Hello::new(Role::Host) };
    let (reader, writer) = tokio::io::split(host_io);
    let (host, daemon) = within("handshake", async {
        tokio::join!(Link::handshake_with(reader, writer, newer_host), Link::handshake(daemon_io, Role::Daemon))
    })
    .await;
    let expected = format!(
        "protocol mismatch: workroomd {} speaks protocol {PROTOCOL}; workroom 0.2.0 speaks protocol {}",
        workroomd::VERSION,
        PROTOCOL + 1
    );
    for (side, result) in [("host", host.map(|_| ())), ("daemon", daemon.map(|_| ()))] {
        let err = result.expect_err(side);
        assert!(matches!(err, LinkError::ProtocolMismatch { .. }), "{side}: {err:?}");
        assert_eq!(err.to_string(), expected, "{side}");
    }
}

#[tokio::test]
async fn the_daemon_sends_a_refusal_then_closes() {
    let (host_io, daemon_io) = tokio::io::duplex(PIPE);
    let daemon = tokio::spawn(Link::handshake(daemon_io, Role::Daemon));
    let old_host = Hello { protocol: 0, version: "0.0.1".into(), ..Hello::new(Role::Host) };
    let mut host = RawPeer::greet(host_io, &old_host).await;
    within("refusal", async {
        assert_eq!(host.expect_hello().await.role, Role::Daemon);
        let refuse = host.recv().await.expect("a refuse frame");
        assert_eq!((refuse.kind(), refuse.stream()), (Kind::Refuse, 0));
        let reason: Reason = serde_json::from_slice(refuse.payload()).unwrap();
        assert!(reason.message.contains("workroom 0.0.1 speaks protocol 0"), "{}", reason.message);
        assert!(host.recv().await.is_none(), "closed after the refusal");
    })
    .await;
    assert!(daemon.await.unwrap().is_err());
}

#[tokio::test]
async fn a_peer_that_is_not_workroom_is_named_with_its_first_bytes() {
    let (host_io, mut other) = tokio::io::duplex(PIPE);
    other.write_all(b"HTTP/1.1 400 Bad Request\r\n").await.unwrap();
    let err = within("handshake", Link::handshake(host_io, Role::Host)).await.err().unwrap();
    assert_eq!(err.to_string(), r#"not a workroom daemon (first bytes were 48 54 54 50 2f 31 2e 31 ("HTTP/1.1"))"#);
}

#[tokio::test]
async fn a_peer_closing_before_its_hello_is_reported() {
    let (host_io, mut other) = tokio::io::duplex(PIPE);
    other.write_all(b"WORK").await.unwrap();
    drop(other);
    let err = within("handshake", Link::handshake(host_io, Role::Host)).await.err().unwrap();
    assert_eq!(err.to_string(), "the daemon closed the connection before its hello");
}

#[tokio::test]
async fn a_request_gets_its_reply_and_the_stream_ends_there() {
    let (host, daemon) = pair().await;
    let (accepted, mut daemon_streams) = mpsc::unbounded_channel();
    serve(daemon, accepted);
    let stream = host.open(Request::Status).await.unwrap();
    assert_eq!(within("reply", stream.recv_reply()).await.unwrap(), status());
    assert_eq!(within("end", stream.recv()).await, None);
    assert!(matches!(stream.send_data(b"x").await, Err(StreamError::Closed)));
    // The daemon's side is over too: nothing left to read there either.
    let on_daemon = daemon_streams.recv().await.unwrap();
    assert_eq!(within("daemon end", on_daemon.recv()).await, None);
    assert_eq!(within("request", host.request(Request::Status)).await.unwrap(), status());
}

#[tokio::test]
async fn a_run_delivers_reply_output_exit_and_eof_in_order() {
    let (host, daemon) = pair().await;
    serve(daemon, mpsc::unbounded_channel().0);
    let run = host.open(Request::Run(RunRequest { argv: vec!["x".into()], ..RunRequest::default() })).await.unwrap();
    run.send_eof().await.unwrap();
    assert_eq!(within("reply", run.recv_reply()).await.unwrap(), Response::Started { pid: 7 });
    let mut events = Vec::new();
    while let Some(event) = within("events", run.recv()).await {
        events.push(event);
    }
    assert_eq!(
        events,
        [
            Event::Data(b"out".to_vec()),
            Event::Stderr(b"err".to_vec()),
            Event::Exit(ExitStatus { code: Some(3), signal: None }),
            Event::Eof,
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_megabytes_echo_intact_through_one_stream() {
    let (host, daemon) = pair().await;
    serve(daemon, mpsc::unbounded_channel().0);
    let data = pattern(20 * 1024 * 1024);
    let stream = host.open(Request::Echo).await.unwrap();
    let back = within("echo", echo_through(&stream, &data)).await;
    assert_eq!(back.len(), data.len());
    assert!(back == data, "the echo differs from what was sent");
    assert_eq!(stream.recv_reply().await.unwrap(), Response::Ready);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owned_buffer_larger_than_the_window_through_a_pipe_taking_13_bytes_a_write_echoes_intact() {
    // A pipe that takes a few bytes per write cuts every vectored write of
    // a large frame (header and payload) anywhere; a buffer sent whole is
    // split as credit allows.
    let (host_io, daemon_io) = tokio::io::duplex(13);
    let (host, daemon) = within("handshake", async {
        tokio::join!(Link::handshake(host_io, Role::Host), Link::handshake(daemon_io, Role::Daemon))
    })
    .await;
    let (host, daemon) = (host.unwrap().0, daemon.unwrap().0);
    serve(daemon, mpsc::unbounded_channel().0);
    let data = pattern(3 * 1024 * 1024 + 17);
    let stream = host.open(Request::Echo).await.unwrap();
    let send = async {
        stream.send_data_vec(data.clone()).await.unwrap();
        stream.send_eof().await.unwrap();
    };
    let receive = async {
        let mut back = Vec::with_capacity(data.len());
        while let Some(Event::Data(bytes)) = stream.recv().await {
            back.extend_from_slice(&bytes);
        }
        back
    };
    let ((), back) = within_for(SLOW_PIPE_GUARD, "echo", async { tokio::join!(send, receive) }).await;
    assert_eq!(back.len(), data.len());
    assert!(back == data, "the echo differs from what was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_reader_stalls_does_not_block_another_and_buffers_at_most_a_window() {
    let (host, daemon) = pair().await;
    let (accepted, mut daemon_streams) = mpsc::unbounded_channel();
    serve(daemon, accepted);

    // The host never reads `stalled`'s echo: the daemon can return one
    // window, then its echo blocks, then the daemon stops taking the host's
    // bytes, then the host's sender blocks. Nothing grows past a window.
    let stalled = host.open(Request::Echo).await.unwrap();
    let stalled_on_daemon = within("accept", daemon_streams.recv()).await.unwrap();
    let filler = tokio::spawn({
        let stalled = stalled.clone();
        async move { stalled.send_data(&vec![1; 8 * INITIAL_WINDOW]).await }
    });
    eventually("the stalled stream to fill its window", || stalled.buffered() == INITIAL_WINDOW).await;

    let live = host.open(Request::Echo).await.unwrap();
    let data = pattern(4 * INITIAL_WINDOW);
    assert!(within("the live echo", echo_through(&live, &data)).await == data);

    assert_eq!(stalled.buffered(), INITIAL_WINDOW);
    // The daemon's echo read before it blocked: its window may have grown.
    assert!(stalled_on_daemon.buffered() <= stalled_on_daemon.receive_window());
    assert!(stalled_on_daemon.receive_window() <= MAX_WINDOW);
    assert!(!filler.is_finished(), "8 windows went out without credit");

    // Reading the stalled stream now lets everything through.
    let mut drained = 0;
    while drained < 8 * INITIAL_WINDOW {
        match within("the drain", stalled.recv()).await {
            Some(Event::Data(bytes)) => drained += bytes.len(),
            other => panic!("unexpected {other:?}"),
        }
        assert!(stalled.buffered() <= stalled.receive_window());
        assert!(stalled.receive_window() <= MAX_WINDOW);
    }
    within("the filler", filler).await.unwrap().unwrap();
}

#[tokio::test]
async fn dropping_a_handle_mid_stream_resets_the_peer() {
    let (host, daemon) = pair().await;
    let stream = host.open(Request::Echo).await.unwrap();
    let (_, on_daemon) = within("accept", daemon.accept()).await.unwrap();
    on_daemon.reply(Response::Ready).await.unwrap();
    stream.send_data(b"hi").await.unwrap();
    assert_eq!(within("data", on_daemon.recv()).await, Some(Event::Data(b"hi".to_vec())));
    drop(stream);
    assert_eq!(
        within("reset", on_daemon.recv()).await,
        Some(Event::Reset("the host reset the stream: the stream was dropped before it finished".into()))
    );
    assert_eq!(on_daemon.recv().await, None);
    let err = on_daemon.send_data(b"late").await.unwrap_err();
    assert!(matches!(err, StreamError::Reset { peer: Role::Host, .. }), "{err:?}");
}

#[tokio::test]
async fn a_request_dropped_without_an_answer_fails_the_opener() {
    let (host, daemon) = pair().await;
    let stream = host.open(Request::Status).await.unwrap();
    let (_, on_daemon) = within("accept", daemon.accept()).await.unwrap();
    drop(on_daemon);
    let err = within("reply", stream.recv_reply()).await.unwrap_err();
    assert_eq!(err.to_string(), "the daemon reset the stream: the request was dropped without an answer");
}

#[tokio::test]
async fn the_accepting_side_must_reply_before_sending() {
    let (host, daemon) = pair().await;
    let _stream = host.open(Request::Echo).await.unwrap();
    let (_, on_daemon) = within("accept", daemon.accept()).await.unwrap();
    assert!(matches!(on_daemon.send_data(b"early").await, Err(StreamError::Misuse(_))));
    assert!(matches!(on_daemon.recv_reply().await, Err(StreamError::Misuse(_))));
}

#[tokio::test]
async fn a_link_closed_mid_frame_ends_receivers_and_blocked_senders() {
    // A pipe larger than a window: the host's writer never blocks on it, so
    // the sender below waits for credit, not for the pipe, and the link
    // closes because of the read side, deterministically.
    let (host_io, daemon_io) = tokio::io::duplex(4 * INITIAL_WINDOW);
    let mut daemon = RawPeer::greet(daemon_io, &Hello::new(Role::Daemon)).await;
    let (host, _) = within("handshake", Link::handshake(host_io, Role::Host)).await.unwrap();
    daemon.expect_hello().await;

    let stream = host.open(Request::Echo).await.unwrap();
    let open = within("open", daemon.recv()).await.unwrap();
    assert_eq!((open.kind(), open.stream()), (Kind::Open, 1));
    daemon.send_json(Kind::Reply, 1, &Response::Ready).await;
    // A sender that will run out of credit: the raw daemon never grants any.
    let sender = tokio::spawn({
        let stream = stream.clone();
        async move { stream.send_data(&vec![0; 2 * INITIAL_WINDOW]).await }
    });
    assert_eq!(within("reply", stream.recv_reply()).await.unwrap(), Response::Ready);
    // Half a frame, then the connection drops.
    daemon.io.write_all(&[Kind::Data as u8, 0, 0, 0, 1, 0, 0, 0, 100, 1, 2, 3]).await.unwrap();
    drop(daemon);

    assert_eq!(
        within("recv", stream.recv()).await,
        Some(Event::Reset("link closed: the daemon closed the connection in the middle of a frame".into()))
    );
    assert_eq!(stream.recv().await, None);
    let err = within("the blocked sender", sender).await.unwrap().unwrap_err();
    assert!(matches!(err, StreamError::LinkClosed(_)), "{err:?}");
    assert!(within("accept", host.accept()).await.is_none());
    assert!(matches!(host.open(Request::Status).await, Err(StreamError::LinkClosed(_))));
}

#[tokio::test]
async fn dropping_every_handle_closes_the_link_for_the_peer() {
    let (host, daemon) = pair().await;
    let stream = daemon.open(Request::Echo).await.unwrap();
    assert_eq!(stream.id(), 2, "the daemon opens even ids");
    let (_, on_host) = within("accept", host.accept()).await.unwrap();
    drop((daemon, stream));
    // The host sees the reset first, then the end of the connection.
    assert!(matches!(within("reset", on_host.recv()).await, Some(Event::Reset(_))));
    assert_eq!(within("closed", host.closed()).await, "the daemon closed the connection");
    assert!(within("accept", host.accept()).await.is_none());
}

#[tokio::test]
async fn a_request_this_version_cannot_read_is_answered_with_an_error() {
    let (host_io, daemon_io) = tokio::io::duplex(PIPE);
    let mut host = RawPeer::greet(host_io, &Hello::new(Role::Host)).await;
    // Pipelined right behind the hello, in the same write as far as the
    // daemon can tell: nothing read during the handshake may be lost.
    host.send(Kind::Open, 1, br#"{"op":"frobnicate"}"#).await;
    host.send_json(Kind::Open, 3, &Request::Status).await;
    let (daemon, _) = within("handshake", Link::handshake(daemon_io, Role::Daemon)).await.unwrap();
    host.expect_hello().await;

    let reply = within("reply", host.recv()).await.unwrap();
    assert_eq!((reply.kind(), reply.stream()), (Kind::Reply, 1));
    let Response::Error { message } = serde_json::from_slice(reply.payload()).unwrap() else {
        panic!("not an error reply");
    };
    let prefix = format!("workroomd {} cannot read this request: unknown variant `frobnicate`", workroomd::VERSION);
    assert!(message.starts_with(&prefix), "{message}");

    let (request, _stream) = within("accept", daemon.accept()).await.unwrap();
    assert_eq!(request, Request::Status);
}

#[tokio::test]
async fn a_peer_overrunning_its_window_closes_the_link() {
    let (host_io, daemon_io) = tokio::io::duplex(4 * INITIAL_WINDOW);
    let mut host = RawPeer::greet(host_io, &Hello::new(Role::Host)).await;
    let (daemon, _) = within("handshake", Link::handshake(daemon_io, Role::Daemon)).await.unwrap();
    host.expect_hello().await;
    host.send_json(Kind::Open, 1, &Request::Echo).await;
    let chunk = vec![0; 64 * 1024];
    for _ in 0..INITIAL_WINDOW / chunk.len() + 1 {
        host.send(Kind::Data, 1, &chunk).await;
    }
    let (_, stream) = within("accept", daemon.accept()).await.unwrap();
    assert_eq!(
        within("closed", daemon.closed()).await,
        "protocol violation by the host: 65536 bytes beyond the window on stream 1"
    );
    assert!(matches!(within("recv", stream.recv()).await, Some(Event::Reset(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_stream_full_and_windows_grown_to_the_cap_stay_within_the_links_bound() {
    let (host, daemon) = pair().await;
    let (accepted, mut daemon_streams) = mpsc::unbounded_channel();
    // The daemon answers and then reads nothing unless the test says so.
    tokio::spawn(async move {
        while let Some((_, stream)) = daemon.accept().await {
            stream.reply(Response::Ready).await.unwrap();
            let _ = accepted.send(stream);
        }
    });
    let data = std::sync::Arc::new(vec![7u8; 2 * MAX_WINDOW]);
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..MAX_STREAMS {
        let stream = host.open(Request::Echo).await.unwrap();
        let data = data.clone();
        let sender = stream.clone();
        tokio::spawn(async move { sender.send_data(&data).await });
        receivers.push(within("accept", daemon_streams.recv()).await.unwrap());
        senders.push(stream);
    }
    assert!(matches!(host.open(Request::Echo).await, Err(StreamError::TooManyStreams)));
    let total = |streams: &[StreamHandle], of: fn(&StreamHandle) -> usize| streams.iter().map(of).sum::<usize>();
    eventually("every stream to fill its first window", || receivers.iter().all(|s| s.buffered() == INITIAL_WINDOW))
        .await;

    // Draining streams widens their windows, from the link's pool alone:
    // eight streams at the widest window would need twice the pool.
    for stream in &receivers[..8] {
        let mut taken = 0;
        while taken < MAX_WINDOW {
            match within("a drain", stream.recv()).await {
                Some(Event::Data(bytes)) => taken += bytes.len(),
                other => panic!("unexpected {other:?}"),
            }
            assert!(total(&receivers, StreamHandle::buffered) <= MAX_LINK_BUFFER);
        }
    }
    assert_eq!(total(&receivers, StreamHandle::receive_window), MAX_STREAMS * INITIAL_WINDOW + MAX_LINK_GROWTH);
    assert_eq!(MAX_STREAMS * INITIAL_WINDOW + MAX_LINK_GROWTH, MAX_LINK_BUFFER);
    assert!(receivers.iter().all(|s| s.receive_window() <= MAX_WINDOW));
    // The drained streams fill their wider windows again; nothing more.
    eventually("the drained streams to refill", || {
        receivers[..8].iter().all(|s| s.buffered() + MAX_WINDOW / 4 >= s.receive_window())
    })
    .await;
    assert!(total(&receivers, StreamHandle::buffered) <= MAX_LINK_BUFFER);

    // A stream that is gone gives its loan back to the next one.
    let widest = receivers.iter().position(|s| s.receive_window() == MAX_WINDOW).expect("a widest window");
    let before = total(&receivers, StreamHandle::receive_window);
    drop(receivers.remove(widest));
    drop(senders.remove(widest));
    let grown = &receivers[8];
    let mut taken = 0;
    while taken < MAX_WINDOW {
        match within("a drain", grown.recv()).await {
            Some(Event::Data(bytes)) => taken += bytes.len(),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(grown.receive_window() > INITIAL_WINDOW, "no window grew from the returned loan");
    assert!(total(&receivers, StreamHandle::receive_window) <= before);
}

#[tokio::test]
async fn a_peer_whose_hello_names_no_window_gets_the_fixed_windows_it_expects() {
    let (host_io, daemon_io) = tokio::io::duplex(4 * FIXED_WINDOW);
    let mut host = RawPeer::greet(host_io, &Hello { window: None, ..Hello::new(Role::Host) }).await;
    let (daemon, _) = within("handshake", Link::handshake(daemon_io, Role::Daemon)).await.unwrap();
    host.expect_hello().await;
    host.send_json(Kind::Open, 1, &Request::Echo).await;
    let chunk = vec![0; 64 * 1024];
    for _ in 0..FIXED_WINDOW / chunk.len() {
        host.send(Kind::Data, 1, &chunk).await;
    }
    let (_, stream) = within("accept", daemon.accept()).await.unwrap();
    eventually("the whole fixed window to arrive", || stream.buffered() == FIXED_WINDOW).await;
    assert_eq!(stream.receive_window(), FIXED_WINDOW);
    assert_eq!(daemon.close_reason(), None);
}

#[tokio::test]
async fn a_stream_opened_with_the_peers_parity_closes_the_link() {
    let (host_io, daemon_io) = tokio::io::duplex(PIPE);
    let mut host = RawPeer::greet(host_io, &Hello::new(Role::Host)).await;
    let (daemon, _) = within("handshake", Link::handshake(daemon_io, Role::Daemon)).await.unwrap();
    host.send_json(Kind::Open, 2, &Request::Status).await;
    assert_eq!(
        within("closed", daemon.closed()).await,
        "protocol violation by the host: stream id 2 is not the host's to open"
    );
}

#[tokio::test]
async fn a_reset_frame_reaches_the_peer_with_its_message() {
    let (host, daemon) = pair().await;
    let stream = host.open(Request::Echo).await.unwrap();
    let (_, on_daemon) = within("accept", daemon.accept()).await.unwrap();
    on_daemon.reply(Response::Ready).await.unwrap();
    on_daemon.reset("killed by signal 9").await.unwrap();
    assert_eq!(on_daemon.recv().await, None, "a local reset ends receiving");
    assert_eq!(
        within("reset", stream.recv()).await,
        Some(Event::Reset("the daemon reset the stream: killed by signal 9".into()))
    );
    assert!(matches!(stream.send_data(b"x").await, Err(StreamError::Reset { peer: Role::Daemon, .. })));
}

/// The multiplexer's own cost: 1 GiB one way through one stream, against the
/// same bytes copied raw through the same kind of pipe. A benchmark, not a
/// check; run it optimised:
/// `cargo test -p workroomd --release --test link -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run in release with --ignored --nocapture"]
async fn one_gib_through_one_stream_against_a_raw_pipe() {
    const TOTAL: usize = 1 << 30;
    let chunk = vec![0x5a; 1 << 20];

    let (mut raw_in, mut raw_out) = tokio::io::duplex(PIPE);
    let started = std::time::Instant::now();
    let reader = tokio::spawn(async move {
        let mut buf = vec![0; PIPE];
        let mut got = 0;
        while got < TOTAL {
            got += raw_out.read(&mut buf).await.unwrap();
        }
    });
    for _ in 0..TOTAL / chunk.len() {
        raw_in.write_all(&chunk).await.unwrap();
    }
    reader.await.unwrap();
    let raw = started.elapsed();

    let (host, daemon) = pair().await;
    let started = std::time::Instant::now();
    let sink = tokio::spawn(async move {
        let (_, stream) = daemon.accept().await.unwrap();
        stream.reply(Response::Ready).await.unwrap();
        let mut got = 0;
        while let Some(Event::Data(bytes)) = stream.recv().await {
            got += bytes.len();
        }
        got
    });
    let stream = host.open(Request::Echo).await.unwrap();
    for _ in 0..TOTAL / chunk.len() {
        stream.send_data(&chunk).await.unwrap();
    }
    stream.send_eof().await.unwrap();
    assert_eq!(sink.await.unwrap(), TOTAL);
    let muxed = started.elapsed();

    let rate = |elapsed: Duration| TOTAL as f64 / elapsed.as_secs_f64() / (1 << 20) as f64;
    println!(
        "raw pipe {:.0} MiB/s, one stream {:.0} MiB/s ({:.2}x)",
        rate(raw),
        rate(muxed),
        raw.as_secs_f64() / muxed.as_secs_f64()
    );
}
