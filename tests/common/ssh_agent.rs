//! An ssh-agent of the test's own on the host, with one fresh key.

use super::stderr;
use super::stdout;
use std::path::PathBuf;
use std::process::Command;

/// A running `ssh-agent -a <temp>/agent.sock`, killed on drop.
pub struct Agent {
    dir: tempfile::TempDir,
    pid: u32,
}

impl Agent {
    /// Starts an agent with one fresh ed25519 key; returns it and the key's
    /// fingerprint as `ssh-keygen -l` prints it.
    pub fn with_key() -> (Agent, String) {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("agent.sock");
        let out = Command::new("ssh-agent").arg("-a").arg(&sock).output().expect("ssh-agent (package openssh-client)");
        assert!(out.status.success(), "ssh-agent: {}", stderr(&out));
        let text = stdout(&out);
        let pid = text
            .split("SSH_AGENT_PID=")
            .nth(1)
            .and_then(|rest| rest.split(';').next())
            .and_then(|p| p.parse().ok())
            .expect("ssh-agent prints its pid");
        let agent = Agent { dir, pid };
        let key = agent.dir.path().join("id_test");
        let made = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "workroom-test-key", "-f"])
            .arg(&key)
            .output()
            .unwrap();
        assert!(made.status.success(), "ssh-keygen: {}", stderr(&made));
        let added = Command::new("ssh-add").arg(&key).env("SSH_AUTH_SOCK", &sock).output().unwrap();
        assert!(added.status.success(), "ssh-add: {}", stderr(&added));
        let fingerprint = Command::new("ssh-keygen").arg("-lf").arg(key.with_extension("pub")).output().unwrap();
        let fingerprint = stdout(&fingerprint).split_whitespace().nth(1).expect("a fingerprint").to_string();
        (agent, fingerprint)
    }

    pub fn sock(&self) -> PathBuf {
        self.dir.path().join("agent.sock")
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid as i32), nix::sys::signal::Signal::SIGTERM);
    }
}
