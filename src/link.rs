//! The host's link to a room's daemon: `docker exec -i -u 0 <room>
//! workroomd relay` through the Engine API (non-tty, so bytes pass
//! untouched), then the protocol of the `workroomd` library over the exec's
//! stdin and stdout.

use crate::engine::{Engine, EngineError, ExecSpec};
use crate::notices::Notices;
use workroomd::proto::{
    DaemonStatus, Event, ExitStatus, Expected, Hello, Link, LinkError, Request, Response, Role, RunRequest,
    StreamError, StreamHandle,
};
use workroomd::room;

#[derive(Debug, thiserror::Error)]
pub enum RoomLinkError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The relay ran but found no daemon listening (yet).
    #[error("the daemon in {room} is not listening: {detail}")]
    NotListening { room: String, detail: String },
    #[error("{room} has no workroom daemon at {path}; it was not made by this workroom (recreate it with `workroom up --recreate`)")]
    NoDaemon { room: String, path: &'static str },
    #[error("the daemon in {room}")]
    Link { room: String, source: LinkError },
    #[error("the daemon in {room} answered {answer:?} to {asked}")]
    Unexpected { room: String, asked: &'static str, answer: String },
    #[error("the daemon in {room}")]
    Stream { room: String, source: StreamError },
    #[error("the daemon in {room} refused: {message}")]
    Refused { room: String, message: String },
    /// The daemon's hello did not come because the engine carrying it
    /// stopped answering (a small call took [`crate::engine::STALLED_AFTER`]
    /// or more): the engine's fault, not the daemon's.
    #[error("the engine at {host} stopped answering while the link to {room} opened (a call took {seconds} s)")]
    EngineStalled { room: String, host: String, seconds: u64 },
}

impl RoomLinkError {
    /// Worth another try while a room is starting: the daemon has not bound
    /// its socket yet, or the container is between start and running.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            RoomLinkError::NotListening { .. }
                | RoomLinkError::Engine(EngineError::Refused { status: 409, .. })
                // It answers again by the time this is known.
                | RoomLinkError::EngineStalled { .. }
        )
    }

    /// The engine stopped answering: a room being made is kept, not
    /// removed, and the next `up` carries on.
    pub fn is_engine_stall(&self) -> bool {
        matches!(self, RoomLinkError::EngineStalled { .. } | RoomLinkError::Engine(EngineError::NoAnswer { .. }))
    }
}

pub struct RoomLink {
    room: String,
    link: Link,
}

impl RoomLink {
    pub async fn connect(engine: &Engine, room_id: &str) -> Result<RoomLink, RoomLinkError> {
        let room = room_id.chars().take(12).collect::<String>();
        let spec = ExecSpec {
            argv: vec![room::DAEMON_PATH.into(), "relay".into()],
            // The socket is root's alone.
            user: Some("0".into()),
            stdin: true,
            ..Default::default()
        };
        let began = std::time::Instant::now();
        let mut exec = engine.exec(room_id, &spec).await?;
        let mut stderr = exec.output.take_stderr();
        let ours = Hello { version: env!("CARGO_PKG_VERSION").to_string(), ..Hello::new(Role::Host) };
        // Where the engine's connection is a socket, a forward's bytes are
        // spliced into it rather than copied through us (workroomd's
        // staging.rs); a refusal to register it only costs the copies.
        let splice_out = exec.input_socket.and_then(|socket| workroomd::staging::FdOut::socket(socket).ok());
        let handshake = match splice_out {
            Some(out) => Link::handshake_spliced(exec.output, exec.input, Box::new(out), ours).await,
            None => Link::handshake_with(exec.output, exec.input, ours).await,
        };
        match handshake {
            // The daemon's hello was checked by the handshake; nothing else
            // of it is needed on the host.
            Ok((link, _daemon)) => {
                let link = RoomLink { room, link };
                // A healthy handshake takes milliseconds. One the engine
                // held may have outlasted the daemon's own wait for our
                // hello, and the daemon then closed its end: one request
                // tells, on this rare path only.
                let took = began.elapsed();
                if took >= crate::engine::STALLED_AFTER && link.status().await.is_err() {
                    let (room, host, seconds) = (link.room, engine.host().to_string(), took.as_secs());
                    return Err(RoomLinkError::EngineStalled { room, host, seconds });
                }
                Ok(link)
            }
            Err(e @ LinkError::ProtocolMismatch { .. }) => Err(RoomLinkError::Link { room, source: e }),
            Err(e) => {
                // The relay says why on stderr, or the engine could not run it.
                let mut said = String::new();
                while let Ok(chunk) = stderr.try_recv() {
                    said.push_str(&String::from_utf8_lossy(&chunk));
                }
                let asked = std::time::Instant::now();
                let code = engine.exec_exit_code(&exec.id).await;
                let took = asked.elapsed();
                let code = match code {
                    Err(e @ EngineError::NoAnswer { .. }) => return Err(e.into()),
                    code => code.ok().flatten(),
                };
                if matches!(e, LinkError::Timeout { .. }) && took >= crate::engine::STALLED_AFTER {
                    let (host, seconds) = (engine.host().to_string(), took.as_secs());
                    Err(RoomLinkError::EngineStalled { room, host, seconds })
                } else if said.contains("cannot reach the daemon") {
                    Err(RoomLinkError::NotListening { room, detail: said.trim().to_string() })
                } else if matches!(code, Some(126 | 127)) || said.contains("no such file") {
                    Err(RoomLinkError::NoDaemon { room, path: room::DAEMON_PATH })
                } else {
                    Err(RoomLinkError::Link { room, source: e })
                }
            }
        }
    }

    /// The protocol link itself (tests and benchmarks open streams on it).
    pub fn link(&self) -> &Link {
        &self.link
    }

    fn stream_err(&self, source: StreamError) -> RoomLinkError {
        RoomLinkError::Stream { room: self.room.clone(), source }
    }

    fn unexpected(&self, asked: &'static str, answer: Response) -> RoomLinkError {
        match answer {
            Response::Error { message } => RoomLinkError::Refused { room: self.room.clone(), message },
            other => RoomLinkError::Unexpected { room: self.room.clone(), asked, answer: format!("{other:?}") },
        }
    }

    /// The room's `/etc/passwd` and `/etc/group`, as the daemon reads them.
    pub async fn users(
        &self,
    ) -> Result<(Vec<workroomd::users::PasswdEntry>, Vec<workroomd::users::GroupEntry>), RoomLinkError> {
        match self.link.request(Request::Users).await.map_err(|e| self.stream_err(e))? {
            Response::Users { users, groups } => Ok((users, groups)),
            other => Err(self.unexpected("users", other)),
        }
    }

    pub async fn status(&self) -> Result<DaemonStatus, RoomLinkError> {
        match self.link.request(Request::Status).await.map_err(|e| self.stream_err(e))? {
            Response::Status(s) => Ok(s),
            other => Err(self.unexpected("status", other)),
        }
    }

    pub async fn markers(&self) -> Result<std::collections::BTreeMap<String, String>, RoomLinkError> {
        match self.link.request(Request::GetMarkers).await.map_err(|e| self.stream_err(e))? {
            Response::Markers { markers } => Ok(markers),
            other => Err(self.unexpected("get markers", other)),
        }
    }

    /// Sets `key` to `value` if its value now is `expected` (`None`: absent).
    /// Returns whether it applied and the value after.
    pub async fn set_marker(
        &self,
        key: &str,
        value: Option<String>,
        expected: Option<String>,
    ) -> Result<(bool, Option<String>), RoomLinkError> {
        let request =
            Request::SetMarker { key: key.to_string(), value, expected: Some(Expected { current: expected }) };
        match self.link.request(request).await.map_err(|e| self.stream_err(e))? {
            Response::MarkerSet { applied, current } => Ok((applied, current)),
            other => Err(self.unexpected("set marker", other)),
        }
    }

    /// Starts a command; the handle carries its output and stdin.
    pub async fn run(&self, request: RunRequest) -> Result<StreamHandle, RoomLinkError> {
        let handle = self.link.open(Request::Run(request)).await.map_err(|e| self.stream_err(e))?;
        match handle.recv_reply().await.map_err(|e| self.stream_err(e))? {
            Response::Started { .. } => Ok(handle),
            other => Err(self.unexpected("run", other)),
        }
    }

    /// Runs a command without stdin, its output (stdout and stderr) said
    /// to `say` as output, each line prefixed with `[label]`; returns its
    /// exit status.
    pub async fn run_prefixed(
        &self,
        request: RunRequest,
        label: &str,
        say: &Notices,
    ) -> Result<ExitStatus, RoomLinkError> {
        let handle = self.run(RunRequest { stdin: false, ..request }).await?;
        let _ = handle.send_eof().await;
        let mut out = LinePrefixer::new(label, say);
        let mut err = LinePrefixer::new(label, say);
        let mut exit = ExitStatus { code: None, signal: None };
        while let Some(event) = handle.recv().await {
            match event {
                Event::Data(bytes) => out.write(&bytes),
                Event::Stderr(bytes) => err.write(&bytes),
                Event::Exit(status) => exit = status,
                Event::Eof => break,
                Event::Reset(message) => {
                    return Err(RoomLinkError::Refused { room: self.room.clone(), message });
                }
            }
        }
        out.finish();
        err.finish();
        Ok(exit)
    }
}

/// Says output line by line with a label in front, so the output of
/// parallel hooks stays readable.
struct LinePrefixer<'a> {
    label: String,
    partial: Vec<u8>,
    say: &'a Notices,
}

impl<'a> LinePrefixer<'a> {
    fn new(label: &str, say: &'a Notices) -> Self {
        LinePrefixer { label: format!("[{label}] "), partial: Vec::new(), say }
    }

    fn write(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        while let Some(pos) = self.partial.iter().position(|b| *b == b'\n') {
            // One piece per line, label and all: lines of parallel hooks
            // never interleave within a line.
            let mut line = self.label.as_bytes().to_vec();
            line.extend(self.partial.drain(..=pos));
            self.say.output(&line);
        }
    }

    fn finish(&mut self) {
        if !self.partial.is_empty() {
            self.partial.push(b'\n');
            let rest = std::mem::take(&mut self.partial);
            self.write(&rest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use workroomd::proto::Role;

    #[test]
    fn a_commands_output_is_said_a_whole_labelled_line_at_a_time_and_its_last_line_is_ended() {
        let (said, seen) = crate::notices::recorded();
        let mut out = LinePrefixer::new("postCreateCommand", &said);
        out.write(b"one\ntw");
        out.write(b"o\nthree");
        assert_eq!(*seen.lock().unwrap(), ["output [postCreateCommand] one\n", "output [postCreateCommand] two\n"]);
        out.finish();
        assert_eq!(seen.lock().unwrap().last().map(String::as_str), Some("output [postCreateCommand] three\n"));
        assert!(said.take().is_empty(), "output is drawn, not kept with the notices");
    }

    #[test]
    fn a_link_or_stream_failure_says_its_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the pipe broke");
        let link = RoomLinkError::Link { room: "r".into(), source: LinkError::Read { peer: Role::Daemon, source: io } };
        let chain = format!("{:#}", anyhow::Error::new(link));
        assert_eq!(chain, "the daemon in r: could not read from the daemon: the pipe broke");
        let stream = RoomLinkError::Stream { room: "r".into(), source: StreamError::LinkClosed("gone".into()) };
        assert_eq!(format!("{:#}", anyhow::Error::new(stream)), "the daemon in r: link closed: gone");
    }
}
