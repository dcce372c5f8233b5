//! Lifecycle hooks as the daemon's own jobs (ADR 0004). A host asks for a
//! hook ([`Request::RunHook`](workroomd::proto::Request::RunHook)); the
//! daemon, in one step that nothing outside it can cut, finds the hook's
//! marker done, or its own job of it running, or claims the marker and
//! starts the job. The job runs to its end whatever happens to the link
//! that asked, records the end in the marker (`done`, or released on
//! failure so the next `up` runs it again), and keeps its output, bounded,
//! for every host that follows it, the asker or a later `up`.
//!
//! The claim is `running:workroomd@BOOT:JOB`. Read by a host of before
//! hook jobs it is a claim of another machine, which such a host waits
//! for; read by this daemon after a restart (another boot) it is a job the
//! room's stop cut off, which is due again.
//!
//! At each start of the container (not a hand-off) the daemon runs the
//! start plan an `up` handed it as postStartCommand, so a room the engine
//! restarted (`docker restart`, the restart policy after a reboot) runs
//! it with nobody typing a command.

use crate::spawn;
use crate::state::State;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt};
use workroomd::proto::{
    ExitStatus, HookCommands, HookRun, HookState, HookStep, Response, StartPlan, StreamError, StreamHandle,
};
use workroomd::room::{MARKER_DONE as DONE, POST_START_MARKER as START_MARKER, START_PLAN_MARKER as PLAN_MARKER};
use workroomd::users::ResolvedUser;

/// The output a job keeps for hosts that follow it: the last 1 MiB. A host
/// that asked at the start sees every byte as it comes (unless it reads
/// slower than the hook writes, by more than this); one that comes later
/// (the next `up`, after the first was killed) sees the tail, which holds
/// what a failure says, after a line saying how much went before it.
pub const OUTPUT_KEPT: usize = 1024 * 1024;

/// A follower gets the kept output in pieces of at most this: each is one
/// frame on its link, under the frame cap.
const FOLLOW_CHUNK: usize = 64 * 1024;

/// An output line longer than this is cut into pieces, each labelled: a
/// hook that writes without newlines must not grow the daemon's memory.
const LINE_MAX: usize = 16 * 1024;

/// The prefix of the daemon's own claims; beyond it `BOOT:JOB`.
const OWN_CLAIM: &str = "running:workroomd@";
/// Any claim: the daemon's, or a host's (`running:HOST:PID:NONCE`).
const CLAIM: &str = "running:";

/// The jobs running now, by marker, and where the start plan is kept.
pub struct Hooks {
    jobs: Mutex<BTreeMap<String, Arc<Job>>>,
    next_job: AtomicU64,
    plan_file: PathBuf,
}

impl Hooks {
    pub fn new(state_dir: &Path) -> Hooks {
        Hooks { jobs: Mutex::default(), next_job: AtomicU64::new(1), plan_file: state_dir.join("start-plan.json") }
    }

    /// The hooks running now (their properties), for a hand-off to refuse:
    /// a job's pipes would not cross the exec.
    pub fn running(&self) -> Vec<String> {
        self.jobs.lock().expect("jobs lock").values().map(|j| j.hook.clone()).collect()
    }
}

/// How a hook ended, kept for every follower.
#[derive(Debug, Clone, PartialEq, Eq)]
struct End {
    status: ExitStatus,
    /// The one-line reason of a failure (`postCreateCommand failed with exit code 3`).
    reason: Option<String>,
}

impl End {
    fn ok() -> End {
        End { status: ExitStatus { code: Some(0), signal: None }, reason: None }
    }

    fn failed(&self) -> bool {
        self.reason.is_some()
    }
}

/// The output of a job: the last [`OUTPUT_KEPT`] bytes, and how many went
/// before them.
#[derive(Default)]
struct Log {
    kept: VecDeque<u8>,
    dropped: u64,
    end: Option<End>,
}

/// What a follower at `pos` gets next.
#[derive(Debug, PartialEq, Eq)]
struct Read {
    /// Bytes no longer kept between `pos` and the oldest kept one.
    skipped: u64,
    bytes: Vec<u8>,
    /// Set once every byte was read and the job has ended.
    end: Option<End>,
}

impl Log {
    fn append(&mut self, bytes: &[u8]) {
        self.kept.extend(bytes);
        let over = self.kept.len().saturating_sub(OUTPUT_KEPT);
        if over > 0 {
            self.kept.drain(..over);
            self.dropped += over as u64;
        }
    }

    fn read_from(&self, pos: u64, max: usize) -> Read {
        let skipped = self.dropped.saturating_sub(pos);
        let start = usize::try_from(pos.max(self.dropped) - self.dropped).unwrap_or(usize::MAX);
        let bytes: Vec<u8> = self.kept.iter().skip(start).take(max).copied().collect();
        let at_end = start.saturating_add(bytes.len()) >= self.kept.len();
        Read { skipped, end: if at_end { self.end.clone() } else { None }, bytes }
    }
}

pub struct Job {
    hook: String,
    claim: String,
    log: Mutex<Log>,
    /// Bumped on every change of the log; followers wait on it.
    changed: tokio::sync::watch::Sender<u64>,
}

impl Job {
    fn new(hook: &str, claim: String) -> Job {
        Job { hook: hook.to_string(), claim, log: Mutex::default(), changed: tokio::sync::watch::channel(0).0 }
    }

    fn say(&self, bytes: &[u8]) {
        self.log.lock().expect("log lock").append(bytes);
        self.changed.send_modify(|n| *n += 1);
    }

    fn finish(&self, end: End) {
        self.log.lock().expect("log lock").end = Some(end);
        self.changed.send_modify(|n| *n += 1);
    }
}

/// What a marker's value makes of a hook.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    Done,
    /// A host's claim: not ours to judge.
    Busy,
    /// To run. `cut_off`: our own claim of an earlier start, whose job the
    /// room's stop ended; the reference CLI's marker file it wrote then
    /// says nothing of a run that finished.
    Due {
        cut_off: bool,
    },
}

/// The decision, pure: `current` is the marker's value, with no job of
/// this daemon running the hook.
fn judge(current: Option<&str>, done: &str) -> Found {
    match current {
        Some(v) if v == done => Found::Done,
        Some(v) if v.starts_with(OWN_CLAIM) => Found::Due { cut_off: true },
        Some(v) if v.starts_with(CLAIM) => Found::Busy,
        // Absent, or postStart's marker of an earlier start.
        _ => Found::Due { cut_off: false },
    }
}

/// How a request found its hook; a started or followed job comes with it.
pub enum Claimed {
    Started(Arc<Job>),
    Following(Arc<Job>),
    Done,
    Busy(String),
}

/// The one step: the hook's job, or its marker's word, or a claim and a
/// started job. The jobs lock is held from the look to the job's entry, so
/// two requests never both claim; the claim is persisted before the job's
/// task exists, and the task is spawned before this returns, so no host can
/// come between the two.
pub fn claim(state: &Arc<State>, run: HookRun) -> std::io::Result<Claimed> {
    let mut jobs = state.hooks.jobs.lock().expect("jobs lock");
    if let Some(job) = jobs.get(&run.key) {
        return Ok(Claimed::Following(job.clone()));
    }
    loop {
        let current = state.markers().get(&run.key).cloned();
        let cut_off = match judge(current.as_deref(), &run.done) {
            Found::Done => return Ok(Claimed::Done),
            Found::Busy => return Ok(Claimed::Busy(current.unwrap_or_default())),
            Found::Due { cut_off } => cut_off,
        };
        let id = state.hooks.next_job.fetch_add(1, Ordering::Relaxed);
        let claim = format!("{OWN_CLAIM}{}:{id}", state.boot_id);
        // A host of before sets markers too: a compare-and-set, and on a
        // lost race, a new look.
        let (applied, _) = state.set_marker(&run.key, Some(claim.clone()), Some(current))?;
        if !applied {
            continue;
        }
        if cut_off {
            tracing::warn!(hook = %run.hook, "was cut off when the room stopped during it; running it again");
        }
        let job = Arc::new(Job::new(&run.hook, claim));
        jobs.insert(run.key.clone(), job.clone());
        tokio::spawn(execute(state.clone(), job.clone(), run, cut_off));
        return Ok(Claimed::Started(job));
    }
}

/// `RunHook`: claim, answer, then follow the job to its end (or until the
/// host goes away: the job goes on).
pub async fn handle(state: &Arc<State>, handle: &StreamHandle, run: HookRun) -> Result<(), StreamError> {
    let key = run.key.clone();
    let (state_now, job) = match claim(state, run) {
        Ok(Claimed::Started(job)) => (HookState::Started, Some(job)),
        Ok(Claimed::Following(job)) => (HookState::Following, Some(job)),
        Ok(Claimed::Done) => (HookState::Done, None),
        Ok(Claimed::Busy(current)) => (HookState::Busy { current }, None),
        Err(e) => return handle.reply(Response::error(format!("cannot claim {key}: {e}"))).await,
    };
    handle.reply(Response::Hook(state_now)).await?;
    match job {
        Some(job) => follow(handle, &job).await,
        None => handle.send_eof().await,
    }
}

/// Sends the job's kept output and then its live output, then its end.
async fn follow(handle: &StreamHandle, job: &Job) -> Result<(), StreamError> {
    let mut changed = job.changed.subscribe();
    let mut pos = 0u64;
    loop {
        let read = job.log.lock().expect("log lock").read_from(pos, FOLLOW_CHUNK);
        if read.skipped > 0 {
            let line = format!("[{}] ... {} bytes of its output before this were not kept\n", job.hook, read.skipped);
            handle.send_data(line.as_bytes()).await?;
            pos += read.skipped;
        }
        if !read.bytes.is_empty() {
            pos += read.bytes.len() as u64;
            handle.send_data(&read.bytes).await?;
            continue;
        }
        if let Some(end) = read.end {
            if let Some(reason) = &end.reason {
                handle.send_stderr(reason.as_bytes()).await?;
            }
            handle.send_exit(end.status).await?;
            return handle.send_eof().await;
        }
        // The job holds the sender until it is dropped with the job, after
        // its end was set: the next read finds it.
        let _ = changed.changed().await;
    }
}

/// The job: the reference CLI's marker file, the commands, the end in the
/// marker. Runs to its end whoever follows it.
async fn execute(state: Arc<State>, job: Arc<Job>, run: HookRun, cut_off: bool) {
    let user = match run.run.user.as_deref().map(spawn::resolve).transpose() {
        Ok(u) => u,
        Err(e) => {
            let reason = format!("{}: {}", run.hook, crate::report::chain(&e));
            return conclude(&state, &job, &run, false, End { status: ExitStatus::default(), reason: Some(reason) });
        }
    };
    let mut wrote_reference = false;
    if let Some(time) = &run.reference_time {
        match reference(user.as_ref(), if cut_off { "write" } else { "claim" }, &run.hook, Some(time)).await {
            Ok(said) if said.trim() == "ran" => {
                job.say(format!("[{}] already run by the reference CLI (devcontainer up)\n", run.hook).as_bytes());
                return conclude(&state, &job, &run, false, End::ok());
            }
            Ok(_) => wrote_reference = true,
            Err(why) => job.say(
                format!(
                    "[{}] warning: could not record it for the reference CLI in the user's ~/.devcontainer: {why}\n",
                    run.hook
                )
                .as_bytes(),
            ),
        }
    }
    let end = commands(&job, &run.run, user.as_ref()).await;
    conclude(&state, &job, &run, wrote_reference, end)
}

/// Runs `run`'s commands in order, each entry's steps at once; the first
/// failure ends it.
async fn commands(job: &Arc<Job>, run: &HookCommands, user: Option<&ResolvedUser>) -> End {
    for entry in &run.commands {
        let steps: Vec<_> = entry
            .iter()
            .map(|s| tokio::spawn(step(job.clone(), s.clone(), user.cloned(), run.env.clone(), run.cwd.clone())))
            .collect();
        let mut failed = None;
        for s in steps {
            let end = s.await.unwrap_or_else(|e| End {
                status: ExitStatus::default(),
                reason: Some(format!("{}: its runner failed: {e}", job.hook)),
            });
            if end.failed() && failed.is_none() {
                failed = Some(end);
            }
        }
        if let Some(end) = failed {
            return end;
        }
    }
    End::ok()
}

/// The end in the marker (done, or released so the next `up` runs it
/// again, its reference marker file taken back), the job out of the table,
/// then its followers told: in that order, under the jobs lock, so a
/// request either follows the job to its end or finds the marker's word.
fn conclude(state: &Arc<State>, job: &Arc<Job>, run: &HookRun, wrote_reference: bool, end: End) {
    if end.failed() && wrote_reference {
        let (user, hook) = (run.run.user.clone(), run.hook.clone());
        // Best effort and after the fact: the marker is released either way.
        tokio::spawn(async move {
            let user = user.as_deref().map(spawn::resolve).transpose().ok().flatten();
            let _ = reference(user.as_ref(), "forget", &hook, None).await;
        });
    }
    let mut jobs = state.hooks.jobs.lock().expect("jobs lock");
    let value = if end.failed() { None } else { Some(run.done.clone()) };
    if let Err(e) = state.set_marker(&run.key, value, Some(Some(job.claim.clone()))) {
        // The claim stays: after the next start it reads as cut off, due.
        tracing::error!(hook = %run.hook, "cannot record its end: {e}");
    }
    jobs.remove(&run.key);
    drop(jobs);
    match &end.reason {
        Some(reason) => tracing::warn!(hook = %run.hook, "{reason}"),
        None => tracing::info!(hook = %run.hook, "ran"),
    }
    job.finish(end);
}

/// One command: its line, its output labelled, its status.
async fn step(
    job: Arc<Job>,
    step: HookStep,
    user: Option<ResolvedUser>,
    env: BTreeMap<String, String>,
    cwd: Option<String>,
) -> End {
    job.say(format!("[{}] {}\n", step.label, step.argv.join(" ")).as_bytes());
    let unknown = ExitStatus::default();
    let mut cmd = match spawn::command(&step.argv, user.as_ref(), &env, cwd.as_deref(), false) {
        Ok(c) => c,
        Err(e) => {
            return End { status: unknown, reason: Some(format!("{}: {}", step.label, crate::report::chain(&e))) }
        }
    };
    cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let program = step.argv.first().map(String::as_str).unwrap_or_default();
            return End { status: unknown, reason: Some(format!("{}: cannot run {program}: {e}", step.label)) };
        }
    };
    let label = format!("[{}] ", step.label);
    let out = child.stdout.take();
    let err = child.stderr.take();
    tokio::join!(pump(&job, &label, out), pump(&job, &label, err));
    let status = match child.wait().await {
        Ok(s) => {
            use std::os::unix::process::ExitStatusExt;
            ExitStatus { code: s.code(), signal: s.signal() }
        }
        Err(_) => unknown,
    };
    let reason = match (status.code, status.signal) {
        (Some(0), _) => None,
        (Some(code), _) => Some(format!("{} failed with exit code {code}", step.label)),
        (None, Some(signal)) => Some(format!("{} was killed by signal {signal}", step.label)),
        (None, None) => Some(format!("{} ended with its status unknown", step.label)),
    };
    End { status, reason }
}

/// Copies a child's output into the job's log line by line, each line
/// labelled, so the lines of parallel commands stay whole.
async fn pump(job: &Job, label: &str, from: Option<impl AsyncRead + Unpin>) {
    let Some(mut from) = from else { return };
    let mut lines = Labeller::new(label);
    let mut buf = vec![0u8; FOLLOW_CHUNK];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let out = lines.feed(&buf[..n]);
        if !out.is_empty() {
            job.say(&out);
        }
    }
    let out = lines.finish();
    if !out.is_empty() {
        job.say(&out);
    }
}

/// Puts a label before each line.
struct Labeller {
    label: Vec<u8>,
    partial: Vec<u8>,
}

impl Labeller {
    fn new(label: &str) -> Labeller {
        Labeller { label: label.as_bytes().to_vec(), partial: Vec::new() }
    }

    /// The whole lines `bytes` completes, labelled.
    fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for b in bytes {
            self.partial.push(*b);
            if *b == b'\n' || self.partial.len() >= LINE_MAX {
                if *b != b'\n' {
                    self.partial.push(b'\n');
                }
                out.extend_from_slice(&self.label);
                out.append(&mut self.partial);
            }
        }
        out
    }

    /// A last line without its newline, given one.
    fn finish(&mut self) -> Vec<u8> {
        if self.partial.is_empty() {
            return Vec::new();
        }
        self.feed(b"\n")
    }
}

/// The reference CLI's marker file of `hook`, handled as `user` by this
/// binary's `reference-marker` job (no shell needed, and the user's own
/// permissions, not root's, in the user's home): `claim` (says `ran` when
/// the file holds `time`, else writes it), `write`, `forget`.
async fn reference(
    user: Option<&ResolvedUser>,
    action: &str,
    hook: &str,
    time: Option<&str>,
) -> Result<String, String> {
    let mut argv: Vec<String> = vec![workroomd::room::DAEMON_PATH.into(), "reference-marker".into(), action.into()];
    argv.push(hook.into());
    argv.extend(time.map(str::to_string));
    let mut cmd =
        spawn::command(&argv, user, &BTreeMap::new(), Some("/"), false).map_err(|e| crate::report::chain(&e))?;
    cmd.stdin(std::process::Stdio::null());
    let out = cmd.output().await.map_err(|e| format!("cannot run the reference-marker job: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// `workroomd reference-marker claim|write|forget HOOK [TIME]`, run as the
/// remote user (its `HOME`): the file `~/.devcontainer/.HOOKMarker` as the
/// reference CLI keeps it (`TIME` and a newline).
pub fn reference_marker_job(args: &[String]) -> i32 {
    let usage = "usage: workroomd reference-marker claim|write|forget HOOK [TIME]";
    let (Some(action), Some(hook)) = (args.first(), args.get(1)) else {
        eprintln!("{usage}");
        return 2;
    };
    // A property name: it names a file, so nothing else is taken.
    if hook.is_empty() || !hook.chars().all(|c| c.is_ascii_alphabetic()) {
        eprintln!("workroomd reference-marker: {hook:?} is not a hook property");
        return 2;
    }
    let Some(home) = std::env::var_os("HOME") else {
        eprintln!("workroomd reference-marker: no HOME");
        return 1;
    };
    let folder = Path::new(&home).join(".devcontainer");
    let file = folder.join(format!(".{hook}Marker"));
    let write = |time: &str| -> std::io::Result<()> {
        std::fs::create_dir_all(&folder)?;
        std::fs::write(&file, format!("{time}\n"))
    };
    let result = match (action.as_str(), args.get(2)) {
        ("claim", Some(time)) => {
            if std::fs::read_to_string(&file).is_ok_and(|held| held.trim() == time.as_str()) {
                println!("ran");
                return 0;
            }
            write(time).map(|()| println!("written"))
        }
        ("write", Some(time)) => write(time).map(|()| println!("written")),
        ("forget", None) => match std::fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
        _ => {
            eprintln!("{usage}");
            return 2;
        }
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{}: {e}", file.display());
            1
        }
    }
}

/// `SetStartPlan`: kept in the room (the container's filesystem outlives
/// its restarts), then its digest as a marker.
pub fn set_plan(state: &State, plan: &StartPlan) -> std::io::Result<()> {
    if let Some(dir) = state.hooks.plan_file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    workroomd::atomic::write(&state.hooks.plan_file, &serde_json::to_vec(plan)?)?;
    state.set_marker(PLAN_MARKER, Some(plan.digest.clone()), None)?;
    tracing::info!(digest = %plan.digest, "keeps the start plan: postStartCommand at each start");
    Ok(())
}

/// At a start of the container (not a hand-off): postStartCommand from the
/// start plan, once the create hooks it waits for are done. A start with
/// no plan (a new room, or one an `up` of before made) leaves postStart to
/// the next `up`.
pub fn at_start(state: &Arc<State>) {
    let Some(plan) =
        std::fs::read(&state.hooks.plan_file).ok().and_then(|b| serde_json::from_slice::<StartPlan>(&b).ok())
    else {
        return;
    };
    let markers = state.markers();
    if let Some(waiting) = plan.after.iter().find(|k| markers.get(*k).map(String::as_str) != Some(DONE)) {
        tracing::info!("postStartCommand waits for the next `up`: {waiting} has not run");
        return;
    }
    let run = HookRun {
        key: START_MARKER.into(),
        done: state.boot_id.clone(),
        hook: "postStartCommand".into(),
        run: plan.run,
        // The reference's postStart file holds the engine's StartedAt,
        // which nothing in the room knows.
        reference_time: None,
    };
    match claim(state, run) {
        Ok(Claimed::Started(_)) => tracing::info!("running postStartCommand for this start"),
        Ok(_) => {}
        Err(e) => tracing::error!("cannot claim postStartCommand: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_is_done_busy_under_a_hosts_claim_or_due() {
        assert_eq!(judge(Some("done"), "done"), Found::Done);
        assert_eq!(judge(Some("b00t"), "b00t"), Found::Done, "postStart for this start");
        assert_eq!(judge(None, "done"), Found::Due { cut_off: false });
        assert_eq!(judge(Some("an-earlier-boot"), "b00t"), Found::Due { cut_off: false });
        assert_eq!(judge(Some("running:host:12:34"), "done"), Found::Busy, "an `up` of before runs it");
        assert_eq!(
            judge(Some("running:workroomd@b0:7"), "done"),
            Found::Due { cut_off: true },
            "our own claim with no job: an earlier start's, cut off by the stop"
        );
    }

    #[test]
    fn a_follower_gets_every_kept_byte_then_the_end_and_a_late_one_hears_what_was_dropped() {
        let mut log = Log::default();
        log.append(b"abc");
        assert_eq!(log.read_from(0, 2), Read { skipped: 0, bytes: b"ab".to_vec(), end: None });
        assert_eq!(log.read_from(3, 2), Read { skipped: 0, bytes: vec![], end: None }, "nothing yet, not ended");
        log.end = Some(End::ok());
        assert_eq!(log.read_from(1, 8), Read { skipped: 0, bytes: b"bc".to_vec(), end: Some(End::ok()) });
        log.append(&vec![b'x'; OUTPUT_KEPT]);
        let late = log.read_from(0, 1);
        assert_eq!((late.skipped, late.bytes.as_slice(), late.end), (3, &b"x"[..], None));
        assert_eq!(log.kept.len(), OUTPUT_KEPT, "the log stays within its bound");
    }

    #[test]
    fn output_lines_are_labelled_whole_and_a_long_one_is_cut() {
        let mut l = Labeller::new("[h] ");
        assert_eq!(l.feed(b"one\ntw"), b"[h] one\n");
        assert_eq!(l.feed(b"o\nthree"), b"[h] two\n");
        assert_eq!(l.finish(), b"[h] three\n");
        assert_eq!(l.finish(), b"");
        let long = l.feed(&vec![b'y'; LINE_MAX + 1]);
        assert_eq!(long.len(), 4 + LINE_MAX + 1, "cut at LINE_MAX with a newline");
        assert_eq!(l.finish(), b"[h] y\n");
    }
}
