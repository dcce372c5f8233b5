//! Forwarded-port throughput: BYTES pushed over one TCP connection to a sink
//! that answers with the count it received; prints the seconds it took.
//! Run by bench/run against a forwarded port on 127.0.0.1 and against the
//! room's bridge address, in turn.
//!
//! usage: push-bench HOST PORT BYTES

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Instant;

/// Large writes, so the client is not what is measured.
const CHUNK: usize = 1 << 20;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (host, port): (&str, u16) = (&args[1], args[2].parse().expect("PORT"));
    let bytes: u64 = args[3].parse().expect("BYTES");
    let mut s = TcpStream::connect((host, port)).expect("connect");
    let buf = vec![0x5au8; CHUNK];
    let started = Instant::now();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        s.write_all(&buf[..n]).expect("send");
        left -= n as u64;
    }
    s.shutdown(Shutdown::Write).expect("half-close");
    let mut count = String::new();
    s.read_to_string(&mut count).expect("count");
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(count.trim(), bytes.to_string(), "the sink counted another number of bytes");
    println!("{seconds:.6}");
}
