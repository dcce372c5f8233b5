//! A real terminal for tests: the program runs on the slave of a pty, as
//! the session leader with the pty as its controlling terminal, the way a
//! terminal emulator starts a shell; the test reads and types on the master.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub struct Term {
    master: Option<std::fs::File>,
    /// Dropped to stop the reader, whose copy of the master must close too
    /// before the terminal is really closed.
    stop: Option<OwnedFd>,
    reader: Option<std::thread::JoinHandle<()>>,
    child: Child,
    seen: Arc<(Mutex<Vec<u8>>, Condvar)>,
    /// While set, nothing is read from the terminal: a slow client.
    paused: Arc<(Mutex<bool>, Condvar)>,
    /// Output before this offset was consumed by an earlier `expect`.
    mark: usize,
}

impl Term {
    pub fn spawn(program: &str, args: &[&str], rows: u16, cols: u16) -> Term {
        Term::spawn_with_env(program, args, rows, cols, &[])
    }

    /// [`Term::spawn`] with variables set for the program (`TERM`, `LANG`).
    pub fn spawn_with_env(program: &str, args: &[&str], rows: u16, cols: u16, env: &[(&str, &str)]) -> Term {
        let ws = nix::pty::Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        let pty = nix::pty::openpty(Some(&ws), None).expect("openpty");
        // Not inherited by this program (nor by what other tests spawn
        // meanwhile): a master open anywhere else keeps the terminal open
        // after `hang_up`.
        nix::fcntl::fcntl(&pty.master, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))
            .expect("FD_CLOEXEC on the master");
        let slave: OwnedFd = pty.slave;
        let mut cmd = Command::new(program);
        cmd.envs(env.iter().copied());
        cmd.args(args)
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
        let seen = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let mut reader = master.try_clone().unwrap();
        let sink = seen.clone();
        let paused = Arc::new((Mutex::new(false), Condvar::new()));
        let gate = paused.clone();
        let (stopped, stop) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 16 * 1024];
            loop {
                drop(gate.1.wait_while(gate.0.lock().unwrap(), |p| *p).unwrap());
                // The master, or the stop pipe's end (hang_up): whichever first.
                let mut fds = [
                    libc::pollfd { fd: reader.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                    libc::pollfd { fd: stopped.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                ];
                // SAFETY: poll reads and writes the two pollfds of `fds`.
                if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
                    if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    break;
                }
                if fds[1].revents != 0 {
                    break;
                }
                let Ok(n) = reader.read(&mut buf) else { break };
                if n == 0 {
                    break;
                }
                sink.0.lock().unwrap().extend_from_slice(&buf[..n]);
                sink.1.notify_all();
            }
        });
        Term { master: Some(master), stop: Some(stop), reader: Some(reader), child, seen, paused, mark: 0 }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.master.as_ref().expect("the terminal is open").write_all(bytes).unwrap();
    }

    /// Stops reading what the program writes, as a terminal that cannot
    /// keep up: the program's writes block once the pty's buffer is full.
    pub fn pause(&self) {
        *self.paused.0.lock().unwrap() = true;
    }

    pub fn resume(&self) {
        *self.paused.0.lock().unwrap() = false;
        self.paused.1.notify_all();
    }

    /// Closes the terminal, as closing its window does: every copy of the
    /// master is closed (the reader's first), and the kernel hangs up the
    /// session: its leader (the program) gets SIGHUP, its reads end.
    pub fn hang_up(&mut self) {
        self.stop = None;
        self.resume();
        if let Some(reader) = self.reader.take() {
            reader.join().expect("the reader thread");
        }
        self.master = None;
    }

    /// Everything the terminal received so far, as bytes.
    pub fn bytes(&self) -> Vec<u8> {
        self.seen.0.lock().unwrap().clone()
    }

    /// Output from the mark on (what the next `expect` searches).
    pub fn since_mark(&self) -> Vec<u8> {
        self.seen.0.lock().unwrap()[self.mark..].to_vec()
    }

    /// Waits until `needle` appears after the mark; moves the mark past it.
    pub fn expect(&mut self, needle: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        let (lock, cond) = &*self.seen;
        let mut seen = lock.lock().unwrap();
        loop {
            let text = String::from_utf8_lossy(&seen[self.mark..]).into_owned();
            if let Some(at) = text.find(needle) {
                let upto = self.mark + text[..at + needle.len()].len();
                self.mark = upto.min(seen.len());
                return text;
            }
            let now = Instant::now();
            if now >= deadline {
                panic!("{needle:?} did not appear within {within:?}; the terminal shows:\n{text}");
            }
            seen = cond.wait_timeout(seen, deadline - now).unwrap().0;
        }
    }

    /// Waits until `found` finds what it looks for in the output after the
    /// mark (it returns where that ends in the text it was given), moves
    /// the mark there and returns the text; fails the test naming `what`.
    pub fn expect_found(&mut self, what: &str, within: Duration, found: impl Fn(&str) -> Option<usize>) -> String {
        let deadline = Instant::now() + within;
        let (lock, cond) = &*self.seen;
        let mut seen = lock.lock().unwrap();
        loop {
            let text = String::from_utf8_lossy(&seen[self.mark..]).into_owned();
            if let Some(end) = found(&text) {
                self.mark = (self.mark + text[..end].len()).min(seen.len());
                return text;
            }
            let now = Instant::now();
            if now >= deadline {
                panic!("{what} did not appear within {within:?}; the terminal shows:\n{text}");
            }
            seen = cond.wait_timeout(seen, deadline - now).unwrap().0;
        }
    }

    /// Everything the terminal has shown so far.
    pub fn all(&self) -> String {
        String::from_utf8_lossy(&self.seen.0.lock().unwrap()).into_owned()
    }

    /// What a window manager does: new size on the pty, and the kernel sends
    /// SIGWINCH to the foreground process group.
    pub fn resize(&mut self, rows: u16, cols: u16) {
        let ws = libc::winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        let fd = self.master.as_ref().expect("the terminal is open").as_raw_fd();
        // SAFETY: TIOCSWINSZ reads a winsize from the pointer.
        assert_eq!(unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, &ws) }, 0);
    }

    /// Waits for the program's end; its status code.
    pub fn wait(&mut self, within: Duration) -> i32 {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                panic!("the program did not end within {within:?}; the terminal shows:\n{}", self.all());
            }
            // Polling a child's end: std offers no way to wait with a deadline.
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
