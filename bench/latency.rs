//! Terminal latency through a real pty, for bench/run: the program runs on
//! the slave of a pty made here (as a terminal emulator runs a shell), and
//! times are taken on the master.
//!
//! usage:
//!   pane-latency prompt RUNS PATTERN -- A... -- B...   time from start to PATTERN (`{i}` in a command is the run)
//!   pane-latency echo RUNS PATTERN -- A... -- B...     once PATTERN shows, time each typed key to its echo
//!
//! Commands A and B are measured in turns (A, B, A, B, ...), so a change of
//! load on a shared machine weighs on both alike. Prints the two medians in
//! seconds. `prompt` ends each run by killing the program; `echo` types a
//! letter and erases it RUNS times in one session of each.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Longest a prompt or an echo may take before the run counts as failed.
const GUARD: Duration = Duration::from_secs(60);

struct Session {
    master: std::fs::File,
    child: std::process::Child,
    out: mpsc::Receiver<Vec<u8>>,
    seen: Vec<u8>,
}

impl Session {
    fn start(argv: &[String]) -> Session {
        let ws = nix::pty::Winsize { ws_row: 24, ws_col: 80, ws_xpixel: 0, ws_ypixel: 0 };
        let pty = nix::pty::openpty(Some(&ws), None).expect("openpty");
        let slave = pty.slave;
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        // SAFETY: setsid and ioctl only, both async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("spawn on the pty");
        let master = std::fs::File::from(pty.master);
        let mut reader = master.try_clone().unwrap();
        let (tx, out) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 64 * 1024];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Session { master, child, out, seen: Vec::new() }
    }

    /// Waits until `needle` shows after byte `from`; returns where it ends.
    fn wait_for(&mut self, needle: &[u8], from: usize) -> usize {
        let deadline = Instant::now() + GUARD;
        loop {
            if let Some(at) = self.seen[from.min(self.seen.len())..].windows(needle.len()).position(|w| w == needle) {
                return from + at + needle.len();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.out.recv_timeout(left) {
                Ok(bytes) => self.seen.extend_from_slice(&bytes),
                Err(_) => panic!(
                    "{:?} did not show within {GUARD:?}; the terminal shows:\n{}",
                    String::from_utf8_lossy(needle),
                    String::from_utf8_lossy(&self.seen)
                ),
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(|a, b| a.total_cmp(b));
    times[times.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (mode, runs, pattern) = (&args[1], args[2].parse::<usize>().expect("RUNS"), args[3].as_bytes());
    let mut commands = args[4..].split(|a| a == "--").filter(|c| !c.is_empty());
    let (a, b) = (commands.next().expect("-- A..."), commands.next().expect("-- B..."));
    let mut times = [Vec::new(), Vec::new()];
    match mode.as_str() {
        "prompt" => {
            for i in 0..runs {
                for (n, command) in [a, b].iter().enumerate() {
                    let argv: Vec<String> = command.iter().map(|a| a.replace("{i}", &i.to_string())).collect();
                    let started = Instant::now();
                    let mut session = Session::start(&argv);
                    session.wait_for(pattern, 0);
                    times[n].push(started.elapsed().as_secs_f64());
                }
            }
        }
        "echo" => {
            let mut sessions = [Session::start(a), Session::start(b)];
            let mut at = [0, 0];
            for (n, session) in sessions.iter_mut().enumerate() {
                at[n] = session.wait_for(pattern, 0);
            }
            for _ in 0..runs {
                for (n, session) in sessions.iter_mut().enumerate() {
                    let started = Instant::now();
                    session.master.write_all(b"x").unwrap();
                    at[n] = session.wait_for(b"x", at[n]);
                    times[n].push(started.elapsed().as_secs_f64());
                    // Erased again, so the line never grows (and never wraps).
                    session.master.write_all(b"\x7f").unwrap();
                    at[n] = session.wait_for(b"\x08", at[n]);
                }
            }
        }
        other => panic!("mode {other}: prompt or echo"),
    }
    let [ta, tb] = times;
    println!("{} {}", median(ta), median(tb));
}
