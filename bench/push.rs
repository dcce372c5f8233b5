//! Forwarded-port throughput: BYTES over one TCP connection to the sink in
//! bench/sink.py, either pushed to it (it answers with the count it
//! received) or pulled from it (it sends that many zero bytes and closes);
//! prints the seconds it took. Run by bench/link against a forwarded port on
//! 127.0.0.1.
//!
//! usage: push-bench push|pull HOST PORT BYTES [ROOM FORWARDER-PID]
//!
//! With ROOM and the forwarder's pid, also prints the CPU seconds per GiB of
//! the forwarder, the room's relay and daemon, and Docker's exec plumbing,
//! as `name=seconds` words after the seconds.

#[path = "cpu.rs"]
mod cpu;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Instant;

/// Large writes and reads, so the client is not what is measured.
const CHUNK: usize = 1 << 20;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let pull = match args[1].as_str() {
        "push" => false,
        "pull" => true,
        other => panic!("push or pull, not {other}"),
    };
    let (host, port): (&str, u16) = (&args[2], args[3].parse().expect("PORT"));
    let bytes: u64 = args[4].parse().expect("BYTES");
    let watched = args.get(5).map(|room| (room.as_str(), [("forwarder", args[6].parse::<u32>().expect("PID"))]));
    let mut s = TcpStream::connect((host, port)).expect("connect");
    let mut buf = vec![0x5au8; CHUNK];
    let before = watched.as_ref().map(|(room, host)| cpu::sample(room, host));
    let started = Instant::now();
    if pull {
        s.write_all(format!("G{bytes}\n").as_bytes()).expect("ask");
        let mut got = 0u64;
        loop {
            let n = s.read(&mut buf).expect("read");
            if n == 0 {
                break;
            }
            got += n as u64;
        }
        assert_eq!(got, bytes, "the sink sent another number of bytes");
    } else {
        s.write_all(b"P").expect("say push");
        let mut left = bytes;
        while left > 0 {
            let n = left.min(CHUNK as u64) as usize;
            s.write_all(&buf[..n]).expect("send");
            left -= n as u64;
        }
        s.shutdown(Shutdown::Write).expect("half-close");
        let mut count = String::new();
        s.read_to_string(&mut count).expect("count");
        assert_eq!(count.trim(), bytes.to_string(), "the sink counted another number of bytes");
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu = match (&watched, &before) {
        (Some((room, host)), Some(before)) => cpu::sample(room, host).per_gib_since(before, bytes),
        _ => String::new(),
    };
    println!("{seconds:.6} {cpu}");
}
