//! The image's own program (`overrideCommand: false`), which the daemon
//! runs and restarts: its state as `up` and `list` show it, so a program
//! that died is not hidden behind a room that says "running".

use crate::engine::Engine;
use crate::link::RoomLink;
use workroomd::proto::{DaemonStatus, ProgramStatus};

/// Whether a room's entrypoint (the daemon's `serve` arguments) carries a
/// program: one follows `--`.
pub fn has_program<S: AsRef<str>>(entrypoint: &[S]) -> bool {
    entrypoint.iter().any(|a| a.as_ref() == "--")
}

/// One line on the program, or `None` when there is none.
pub fn describe(status: &DaemonStatus) -> Option<String> {
    let restarts = match status.program_restarts {
        0 => String::new(),
        1 => ", restarted once".to_string(),
        n => format!(", restarted {n} times"),
    };
    Some(match &status.program {
        ProgramStatus::NotConfigured => return None,
        ProgramStatus::Running { pid } => format!("running (pid {pid}{restarts})"),
        ProgramStatus::Exited(exit) => {
            let how = match (exit.code, exit.signal) {
                (Some(code), _) => format!("exited with code {code}"),
                (None, Some(signal)) => format!("killed by signal {signal}"),
                (None, None) => "exited".to_string(),
            };
            format!("{how}{restarts}; restarting with backoff (`workroom logs` has its output)")
        }
        ProgramStatus::FailedToStart { message } => format!("failed to start: {message}"),
    })
}

/// The program's line for a running room, over a link of its own.
pub async fn state(engine: &Engine, id: &str) -> Option<String> {
    let link = RoomLink::connect(engine, id).await.ok()?;
    describe(&link.status().await.ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use workroomd::proto::ExitStatus;

    fn status(program: ProgramStatus, restarts: u32) -> DaemonStatus {
        DaemonStatus {
            version: "0".into(),
            protocol: 1,
            boot_id: "b".into(),
            started_at_unix_ms: 0,
            pid: 1,
            program,
            program_restarts: restarts,
        }
    }

    #[test]
    fn a_program_that_died_is_said_with_its_code_and_restarts() {
        let exited = status(ProgramStatus::Exited(ExitStatus { code: Some(3), signal: None }), 2);
        assert_eq!(
            describe(&exited).unwrap(),
            "exited with code 3, restarted 2 times; restarting with backoff (`workroom logs` has its output)"
        );
        assert_eq!(describe(&status(ProgramStatus::Running { pid: 7 }, 0)).unwrap(), "running (pid 7)");
        assert_eq!(describe(&status(ProgramStatus::NotConfigured, 0)), None);
        assert!(has_program(&["/.workroom/bin/workroomd", "serve", "--", "httpd"]));
        assert!(!has_program(&["/.workroom/bin/workroomd", "serve"]));
    }
}
