//! Relay throughput: N bytes echoed through the daemon link (host → relay →
//! daemon → relay → host) over `docker exec -i`, in MB/s of payload each way.
//! Run by bench/run against the same room as `docker exec -i <room> cat`.
//!
//! usage: relay-bench ROOM BYTES
//!
//! Prints the seconds, then the CPU seconds per GiB echoed of this process
//! (`host`, what the CLI does), the room's relay and daemon, and Docker's
//! exec plumbing, as `name=seconds` words.

#[path = "cpu.rs"]
mod cpu;

use std::time::Instant;
use workroom::engine::Engine;
use workroom::link::RoomLink;
use workroomd::proto::{Event, Request, Response};

fn main() {
    // As the CLI does, so `host` measures what the CLI would cost.
    workroom::heap::tune();
    let args: Vec<String> = std::env::args().collect();
    let room = &args[1];
    let bytes: usize = args[2].parse().expect("BYTES");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (seconds, cpu) = runtime.block_on(async {
        let engine = Engine::connect().await.expect("engine");
        let link = RoomLink::connect(&engine, room).await.expect("link");
        let me = [("host", std::process::id())];
        let before = cpu::sample(room, &me);
        let started = Instant::now();
        let handle = link.link().open(Request::Echo).await.expect("echo");
        assert_eq!(handle.recv_reply().await.expect("reply"), Response::Ready);
        let sender = handle.clone();
        let send = async move {
            let chunk = vec![0x5au8; 64 * 1024];
            let mut left = bytes;
            while left > 0 {
                let n = left.min(chunk.len());
                sender.send_data(&chunk[..n]).await.expect("send");
                left -= n;
            }
            sender.send_eof().await.expect("eof");
        };
        let receive = async {
            let mut got = 0;
            while let Some(event) = handle.recv().await {
                match event {
                    Event::Data(b) => got += b.len(),
                    Event::Eof => break,
                    other => panic!("unexpected {other:?}"),
                }
            }
            got
        };
        let ((), got) = tokio::join!(send, receive);
        assert_eq!(got, bytes);
        let seconds = started.elapsed().as_secs_f64();
        // Before the link drops: the relay lives as long as the link.
        (seconds, cpu::sample(room, &me).per_gib_since(&before, bytes as u64))
    });
    println!("{seconds:.6} {cpu}");
}
