//! The host's answers to the streams the daemon opens toward a forwarder
//! that offered credentials: a connection to the host's ssh-agent, and
//! `git credential` runs.
//!
//! Offering credentials trusts the room: anything running there as the
//! remote user may ask the agent to sign and git for any host's
//! credentials, as with `ssh -A`. That is why both can be turned off
//! (`[forward]` settings) and why nothing is offered without a host process.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use workroomd::pipe::{self, SpliceError};
use workroomd::proto::{Request, Response, StreamError, StreamHandle, MAX_CREDENTIAL_INPUT};

/// How long the host's `git credential` may run. Shorter than the daemon's
/// deadline for the whole request, so the room hears our reason rather than
/// a timeout. A helper that prompts has no terminal here (the forwarder is
/// detached), so a long wait means it is stuck.
const GIT_CREDENTIAL_TIMEOUT: Duration = Duration::from_secs(20);

/// The only `git credential` subcommands the room may run on the host.
const OPERATIONS: &[&str] = &["fill", "approve", "reject"];

/// Why a credential request went unanswered (said in the forwarder's log),
/// or why `git credential` gave no answer (said to the room).
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("cannot answer the room: {error}")]
    Reply { error: StreamError },
    #[error("the host's ssh-agent at {path}: {error}", path = path.display())]
    Agent { path: PathBuf, error: SpliceError },
    #[error("`git credential {operation}` is not forwarded (only {})", OPERATIONS.join(", "))]
    NotForwarded { operation: String },
    #[error("the credential request is larger than {MAX_CREDENTIAL_INPUT} bytes ({bytes})")]
    TooLarge { bytes: usize },
    #[error("cannot run git on the host: {error}")]
    Spawn { error: std::io::Error },
    #[error("`git credential {operation}` on the host gave no answer within {} s", GIT_CREDENTIAL_TIMEOUT.as_secs())]
    Timeout { operation: String },
    #[error("git on the host: {error}")]
    Wait { error: std::io::Error },
    #[error("`git credential {operation}` on the host failed ({status}): {said}")]
    Failed { operation: String, status: std::process::ExitStatus, said: String },
    #[error("`git credential {operation}`'s answer is not UTF-8")]
    NotUtf8 { operation: String },
}

fn reply_failed(error: StreamError) -> CredentialError {
    CredentialError::Reply { error }
}

/// What this forwarder offers, decided at its start.
#[derive(Debug, Clone, Default)]
pub struct Offer {
    pub ssh_agent: Option<PathBuf>,
    pub git_credentials: bool,
}

pub async fn handle(offer: &Offer, request: Request, stream: StreamHandle) -> Result<(), CredentialError> {
    match request {
        Request::SshAgent => match &offer.ssh_agent {
            Some(path) => agent(path, &stream).await,
            None => {
                stream.reply(Response::error("this host does not forward its ssh-agent")).await.map_err(reply_failed)
            }
        },
        Request::GitCredential { operation, input } => {
            let reply = if offer.git_credentials {
                match git_credential(&operation, &input).await {
                    Ok(output) => Response::Credential { output },
                    Err(e) => Response::error(e.to_string()),
                }
            } else {
                Response::error("this host does not forward git credentials")
            };
            stream.reply(reply).await.map_err(reply_failed)
        }
        other => {
            stream.reply(Response::error(format!("the host does not serve {other:?}"))).await.map_err(reply_failed)
        }
    }
}

async fn agent(path: &std::path::Path, stream: &StreamHandle) -> Result<(), CredentialError> {
    let conn = match tokio::net::UnixStream::connect(path).await {
        Ok(c) => c,
        Err(e) => {
            let message = format!("cannot reach the host's ssh-agent at {}: {e}", path.display());
            return stream.reply(Response::error(message)).await.map_err(reply_failed);
        }
    };
    stream.reply(Response::Ready).await.map_err(reply_failed)?;
    let (reader, writer) = conn.into_split();
    pipe::splice(stream, reader, writer).await.map_err(|error| CredentialError::Agent { path: path.into(), error })
}

async fn git_credential(operation: &str, input: &str) -> Result<String, CredentialError> {
    if !OPERATIONS.contains(&operation) {
        return Err(CredentialError::NotForwarded { operation: operation.into() });
    }
    if input.len() > MAX_CREDENTIAL_INPUT {
        return Err(CredentialError::TooLarge { bytes: input.len() });
    }
    let mut child = tokio::process::Command::new("git")
        .args(["credential", operation])
        // No terminal to prompt on: a helper that cannot answer says so.
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| CredentialError::Spawn { error })?;
    let mut stdin = child.stdin.take().expect("piped");
    let input = input.to_owned();
    let feed = tokio::spawn(async move {
        let _ = stdin.write_all(input.as_bytes()).await;
    });
    let output = tokio::time::timeout(GIT_CREDENTIAL_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| CredentialError::Timeout { operation: operation.into() })?
        .map_err(|error| CredentialError::Wait { error })?;
    let _ = feed.await;
    if !output.status.success() {
        let said = String::from_utf8_lossy(&output.stderr).trim().to_string();
        return Err(CredentialError::Failed { operation: operation.into(), status: output.status, said });
    }
    String::from_utf8(output.stdout).map_err(|_| CredentialError::NotUtf8 { operation: operation.into() })
}

/// Whether the host's git has a credential helper to ask; without one,
/// `git credential fill` could only prompt, and there is no terminal.
/// A guess at [`host_git_has_helper`] from git's global and system config
/// files alone, for `up`'s fast path, which spawns no process: whether one
/// of them sets `helper` in a `[credential]` section. `include`s are not
/// followed, so a helper set only through one is missed here (and seen at
/// the room's next full `up`); a forwarder started on a wrong guess asks
/// git itself before offering anything.
pub fn host_git_config_names_a_helper() -> bool {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(std::path::PathBuf::from);
    let home = env("HOME");
    let mut files = Vec::new();
    match env("GIT_CONFIG_GLOBAL") {
        Some(global) => files.push(global),
        None => {
            files.extend(home.as_ref().map(|h| h.join(".gitconfig")));
            let xdg = env("XDG_CONFIG_HOME").or_else(|| home.as_ref().map(|h| h.join(".config")));
            files.extend(xdg.map(|x| x.join("git/config")));
        }
    }
    if std::env::var_os("GIT_CONFIG_NOSYSTEM").is_none() {
        files.push(env("GIT_CONFIG_SYSTEM").unwrap_or_else(|| "/etc/gitconfig".into()));
    }
    files.iter().filter_map(|f| std::fs::read_to_string(f).ok()).any(|text| names_a_credential_helper(&text))
}

/// Whether git config text sets a non-empty `helper` in its `[credential]`
/// section (an empty value resets the list, as in git).
fn names_a_credential_helper(text: &str) -> bool {
    let mut in_credential = false;
    let mut found = false;
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix('[') {
            // `[credential]` alone: a URL's own section (`[credential
            // "https://…"]`) is not what `git config --get-all
            // credential.helper` reads, and a wrong yes would start a
            // forwarder on every `up` that then finds nothing to carry.
            let section = rest.split(']').next().unwrap_or("").trim();
            in_credential = section.eq_ignore_ascii_case("credential");
            continue;
        }
        if !in_credential {
            continue;
        }
        let (key, value) = line.split_once('=').unwrap_or((line, ""));
        if key.trim().eq_ignore_ascii_case("helper") {
            let value = value.split(['#', ';']).next().unwrap_or("").trim().trim_matches('"');
            found = !value.is_empty();
        }
    }
    found
}

pub fn host_git_has_helper() -> bool {
    std::process::Command::new("git")
        .args(["config", "--get-all", "credential.helper"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success() && !o.stdout.trim_ascii().is_empty())
}

#[cfg(test)]
mod helper_guess_tests {
    use super::{git_credential, names_a_credential_helper, CredentialError, MAX_CREDENTIAL_INPUT};

    #[tokio::test]
    async fn the_room_may_only_ask_fill_approve_or_reject_of_a_bounded_size_and_hears_why_not() {
        let refused = git_credential("store", "host=x\n").await.unwrap_err();
        assert!(matches!(&refused, CredentialError::NotForwarded { operation } if operation == "store"));
        assert_eq!(refused.to_string(), "`git credential store` is not forwarded (only fill, approve, reject)");
        let big = "a".repeat(MAX_CREDENTIAL_INPUT + 1);
        let refused = git_credential("fill", &big).await.unwrap_err();
        assert!(matches!(refused, CredentialError::TooLarge { bytes } if bytes == MAX_CREDENTIAL_INPUT + 1));
    }

    #[test]
    fn a_helper_in_a_credential_section_is_seen_and_an_empty_one_resets_it() {
        for (text, expected) in [
            ("[credential]\n\thelper = store\n", true),
            ("[Credential]\n  helper=cache --timeout 60\n", true),
            ("[credential \"https://example.com\"]\n\thelper = gcloud.sh\n", false),
            ("[user]\n\tname = ann\n[core]\n\thelper = store\n", false),
            ("[credential]\n\thelper = store\n\thelper =\n", false),
            ("[credential]\n\tusername = ann\n", false),
            ("# [credential]\n# helper = store\n", false),
            ("", false),
        ] {
            assert_eq!(names_a_credential_helper(text), expected, "{text:?}");
        }
    }
}
