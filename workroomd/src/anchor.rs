//! `workroomd anchor`: PID 1 of the peer anchor container, whose PID
//! namespace rooms join. Orphans of every room are re-parented to it, so it
//! must reap them (a bare `sleep` as PID 1 would let zombies pile up), and as
//! PID 1 it has no default signal actions: it waits for them explicitly.

use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

pub fn run() -> i32 {
    let mut signals = SigSet::empty();
    for s in [Signal::SIGCHLD, Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        signals.add(s);
    }
    if let Err(e) = signals.thread_block() {
        eprintln!("workroomd anchor: cannot block signals: {e}");
        return 1;
    }
    loop {
        reap_all();
        match signals.wait() {
            Ok(Signal::SIGCHLD) => continue,
            Ok(_) => {
                reap_all();
                return 0;
            }
            Err(e) => {
                eprintln!("workroomd anchor: sigwait: {e}");
                return 1;
            }
        }
    }
}

/// Collects every child that has ended; SIGCHLD coalesces, so one signal may
/// stand for many.
pub fn reap_all() {
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => continue,
        }
    }
}
