//! Lifecycle commands. `initializeCommand` runs on the host; the others run
//! in the room through the daemon, as the remote user with `remoteEnv`, in
//! the workspace folder, each hook's commands in the merged metadata's order
//! (the image's and features' before devcontainer.json's, each labelled with
//! its origin when there is more than one):
//! - onCreate, updateContent, postCreate: once per container;
//! - postStart: once per container start (the daemon's boot id);
//! - postAttach: on every attach.
//!
//! "Once" is kept by markers in the daemon, one per hook. The once-only
//! hooks and postStart are the daemon's own jobs (ADR 0004): `up` asks, and
//! the daemon claims the marker and starts the hook in one step, runs it to
//! its end whatever becomes of that `up`, and records the end; an `up` that
//! finds it running follows it (its output from the oldest kept byte) and
//! reports its status. So a hook is never lost to a killed `up` and never
//! run twice. A hook that fails releases its claim, so the next `up` runs
//! it again, and later hooks do not run. `up` also hands the daemon the
//! room's start plan, which the daemon runs as postStart at each later
//! start of the container, `docker restart` included.
//!
//! A daemon from before hook jobs (its hello names none) gets the old way:
//! `up` claims each marker with a compare-and-set and runs the commands
//! itself, and a claim whose `up` died is the record that the hook began.
//! Beside ours, the reference CLI's marker files are written and read (by
//! the daemon's job, or by `up` in the old way), so `devcontainer up` on a
//! room of ours does not run what we ran, nor we what it ran.

use super::reference_markers as reference;
use crate::config::{substitute, Command, Hook, Loaded};
use crate::link::RoomLink;
use crate::notices::Notices;
use crate::plan::metadata::{Merged, Origin};
use anyhow::{bail, Context as _};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;
use workroomd::proto::{
    Event, HookCommands, HookRun, HookState, HookStep, Request, Response, RunRequest, StartPlan, StreamHandle,
};
use workroomd::room::{MARKER_DONE as DONE, POST_START_MARKER as START_MARKER, START_PLAN_MARKER as PLAN_MARKER};

/// The once-per-container hooks, in this order; each has its own marker,
/// named after its property.
const CREATE_HOOKS: [Hook; 3] = [Hook::OnCreate, Hook::UpdateContent, Hook::PostCreate];
/// The one marker of rooms made before each hook had its own: `done` means
/// all three ran.
const LEGACY_CREATE_MARKER: &str = "create-hooks";
/// `updateRemoteUserUID`, once per container. It is idempotent, so a claim
/// its `up` abandoned is taken over and it runs again.
const UID_MARKER: &str = "update-remote-user-uid";

/// Test-only: `WORKROOM_TEST_KILL_AT=<event>:<key>` makes `up` SIGKILL
/// itself at that named point, so the integration tests
/// (tests/hook_jobs.rs) can aim a kill at each marker write of `up`
/// without racing a timer. The points ([`KILL_POINTS`]) are `asking:KEY`
/// (before a hook's request or the plan's), `claimed:KEY` (the hook's
/// claim is made: by the daemon with the hook started, or by `up` itself
/// for updateRemoteUserUID and with a daemon of before), `ended:KEY` (it
/// ended, or its end was written), `handed:start-plan`, and `ended:hooks`
/// (all done, before `up` writes its ready record). Nothing sets it outside
/// tests; unset, a point costs one environment lookup.
pub const KILL_AT_ENV: &str = "WORKROOM_TEST_KILL_AT";

/// Every point `up` passes in a room with all three create hooks and a
/// daemon of now, in order. The test loops over this list: a new point
/// goes here, or no kill is aimed at it.
pub const KILL_POINTS: &[&str] = &[
    "claimed:update-remote-user-uid",
    "ended:update-remote-user-uid",
    "asking:onCreateCommand",
    "claimed:onCreateCommand",
    "ended:onCreateCommand",
    "asking:updateContentCommand",
    "claimed:updateContentCommand",
    "ended:updateContentCommand",
    "asking:postCreateCommand",
    "claimed:postCreateCommand",
    "ended:postCreateCommand",
    "asking:start-plan",
    "handed:start-plan",
    "asking:post-start",
    "claimed:post-start",
    "ended:post-start",
    "ended:hooks",
];

fn kill_point(event: &str, key: &str) {
    let Some(at) = std::env::var_os(KILL_AT_ENV) else { return };
    if at.to_str() == Some(&format!("{event}:{key}")) {
        // Nothing to flush first: stderr, where everything said went, is
        // written unbuffered.
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
}

/// How long an `up` waits for another `up`'s hooks. Hooks install
/// dependencies and may take long; a claim older than this is taken over.
const CLAIM_WAIT: Duration = Duration::from_secs(30 * 60);

/// What a claim whose `up` died means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnAbandoned {
    /// The work is safe to repeat: run it again.
    RunAgain,
    /// The work began and may have half-happened: never run it twice.
    Interrupted,
}

/// How a `once` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Once {
    /// Done, by us or by another `up`.
    Done,
    /// Begun by an `up` that died; marked done without running it again.
    Interrupted,
}

pub struct HookContext<'a> {
    pub loaded: &'a Loaded,
    /// The room's merged metadata: the hooks, `remoteEnv`, `updateRemoteUserUID`.
    pub metadata: &'a Merged,
    pub user: String,
    pub env: BTreeMap<String, String>,
    pub cwd: String,
    /// The container's `Created` and `State.StartedAt`, as the reference
    /// CLI writes them into its marker files.
    pub created_at: String,
    pub started_at: String,
    /// Where the hooks' own lines go (what runs, what is skipped and why).
    pub say: &'a Notices,
    /// The environment of the start plan the daemon keeps for later starts,
    /// when it is not `env`: what only this `up` was given (`--remote-env`)
    /// is not kept, as the reference keeps it nowhere.
    pub plan_env: Option<BTreeMap<String, String>>,
    /// What `updateRemoteUserUID` is when no metadata sets it.
    pub uid_default: UidDefault,
    /// The user's dotfiles, installed once after postCreateCommand.
    pub dotfiles: Option<Dotfiles>,
}

/// A dotfiles repository to clone into the room and install (the
/// reference's `--dotfiles-repository`, `--dotfiles-install-command`,
/// `--dotfiles-target-path`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dotfiles {
    /// A git URL or a path in the room; `owner/repo` is GitHub's, as the
    /// reference reads it.
    pub repository: String,
    /// Run in the clone; else its first of `install.sh`, `install`,
    /// `bootstrap.sh`, `bootstrap`, `setup.sh`, `setup`; else its dot-files
    /// are linked into the home folder.
    pub install_command: Option<String>,
    /// Where the clone goes (`~/dotfiles` by default).
    pub target: String,
}

impl Dotfiles {
    /// The repository as git is given it: `owner/repo` on GitHub, anything
    /// with a `:` (a URL) or a path (`/`, `./`, `../`) as written.
    pub fn url(&self) -> String {
        let r = &self.repository;
        let path = r.starts_with('/') || r.starts_with("./") || r.starts_with("../");
        match r.contains(':') || path {
            true => r.clone(),
            false => format!("https://github.com/{r}.git"),
        }
    }
}

/// The dotfiles marker: installed once per container.
const DOTFILES_MARKER: &str = "dotfiles";

/// Clones and installs the dotfiles as the remote user, with the hooks'
/// environment. A room without git skips them with a line, as the
/// reference does. The names come in as variables, so no quoting of ours
/// can go wrong.
const DOTFILES_SCRIPT: &str = r#"command -v git >/dev/null 2>&1 || { echo "no git in this room: dotfiles not installed"; exit 0; }
target=$WORKROOM_DOTFILES_TARGET
case $target in "~") target=$HOME ;; "~/"*) target=$HOME/${target#"~/"} ;; esac
[ -e "$target" ] || git clone --depth 1 "$WORKROOM_DOTFILES_REPOSITORY" "$target" || exit $?
cd "$target" || exit $?
run() { [ -x "$1" ] || chmod +x "$1"; echo "running $1"; "$1"; }
if [ -n "$WORKROOM_DOTFILES_INSTALL" ]; then
  case $WORKROOM_DOTFILES_INSTALL in /*) run "$WORKROOM_DOTFILES_INSTALL" ;; *) run "./$WORKROOM_DOTFILES_INSTALL" ;; esac
  exit $?
fi
for f in install.sh install bootstrap.sh bootstrap setup.sh setup; do
  if [ -e "$f" ]; then run "./$f"; exit $?; fi
done
for f in .[!.]* ..?*; do
  [ -e "$f" ] && [ "$f" != .git ] && ln -sf "$target/$f" "$HOME/" && echo "linked $f"
done
exit 0
"#;

/// Installs the dotfiles (when the room has none yet).
async fn install_dotfiles(link: &RoomLink, ctx: &HookContext<'_>, dotfiles: &Dotfiles) -> anyhow::Result<()> {
    let mut env = ctx.env.clone();
    env.insert("WORKROOM_DOTFILES_REPOSITORY".into(), dotfiles.url());
    env.insert("WORKROOM_DOTFILES_TARGET".into(), dotfiles.target.clone());
    env.insert("WORKROOM_DOTFILES_INSTALL".into(), dotfiles.install_command.clone().unwrap_or_default());
    let request = RunRequest {
        argv: vec!["/bin/sh".into(), "-c".into(), DOTFILES_SCRIPT.into()],
        user: Some(ctx.user.clone()),
        env,
        cwd: Some(ctx.cwd.clone()),
        ..Default::default()
    };
    ctx.say.say(format!("[dotfiles] {} into {}", dotfiles.url(), dotfiles.target));
    let status = link.run_prefixed(request, "dotfiles", ctx.say).await?;
    if status.code != Some(0) {
        bail!("installing the dotfiles from {} {}", dotfiles.url(), status.describe());
    }
    Ok(())
}

/// The default of `updateRemoteUserUID` (the reference's
/// `--update-remote-user-uid-default`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum UidDefault {
    /// Never, whatever the metadata says.
    Never,
    /// Yes, unless the metadata says no.
    #[default]
    On,
    /// No, unless the metadata says yes.
    Off,
}

/// Whether the remote user's uid is moved to the host user's: the
/// reference's rule over the merged `updateRemoteUserUID` and the default.
pub fn wants_uid_update(setting: Option<bool>, default: UidDefault) -> bool {
    match default {
        UidDefault::Never => false,
        UidDefault::On => setting.unwrap_or(true),
        UidDefault::Off => setting.unwrap_or(false),
    }
}

/// Which of the due hooks an `up` runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Scope {
    #[default]
    All,
    /// Those up to the one `waitFor` names, updateContentCommand unless it
    /// names another (`--skip-non-blocking-commands`).
    UntilWaitFor,
    /// Those up to this one (postCreateCommand for the reference's
    /// `--stop-for-personalization`).
    Until(Hook),
    /// onCreate and updateContent, updateContent again if it ran before
    /// (`--prebuild`: a prebuilt room brought up to date).
    Prebuild,
    /// None (`--skip-post-create`); `updateRemoteUserUID` still applies.
    None,
}

impl Scope {
    /// The last hook to run (`None`: every one), by the merged `waitFor`.
    pub fn until(self, wait_for: Option<Hook>) -> Option<Hook> {
        match self {
            Scope::All => None,
            Scope::UntilWaitFor => Some(wait_for.unwrap_or(Hook::UpdateContent)),
            Scope::Until(hook) => Some(hook),
            Scope::Prebuild => Some(Hook::UpdateContent),
            Scope::None => Some(Hook::Initialize),
        }
    }
}

/// Whether `hook` runs when hooks stop after `until`.
fn runs(hook: Hook, until: Option<Hook>) -> bool {
    let at = |h: Hook| Hook::ALL.iter().position(|x| *x == h);
    until.is_none_or(|u| at(hook) <= at(u))
}

impl<'a> HookContext<'a> {
    /// `remoteEnv` with `${containerEnv:...}` resolved against the room's
    /// environment; a `null` value is left out.
    pub fn new(
        loaded: &'a Loaded,
        metadata: &'a Merged,
        user: &str,
        container_env: &HashMap<String, String>,
        say: &'a Notices,
    ) -> Self {
        let ctx = substitute::Context { container_env: Some(container_env), ..Default::default() };
        let env = metadata
            .remote_env
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), substitute::substitute_str(&ctx, v.as_ref()?).unwrap_or_default())))
            .collect();
        HookContext {
            loaded,
            metadata,
            user: user.to_string(),
            env,
            cwd: loaded.workspace.folder.clone(),
            created_at: String::new(),
            started_at: String::new(),
            say,
            plan_env: None,
            uid_default: UidDefault::default(),
            dotfiles: None,
        }
    }
}

/// Runs the hooks that are due, as far as `scope` says; `true` when that
/// was all of them (so the start needs nothing more).
pub async fn run_due(link: &RoomLink, ctx: &HookContext<'_>, post_attach: bool, scope: Scope) -> anyhow::Result<bool> {
    let status = link.status().await?;
    let mut markers = link.markers().await?;
    let until = scope.until(ctx.metadata.wait_for);
    if scope == Scope::Prebuild {
        // Its record forgotten (ours and the reference's), so it runs again.
        let key = Hook::UpdateContent.property();
        if let Some(done) = markers.remove(key) {
            link.set_marker(key, None, Some(done)).await?;
            reference::forget(link, &ctx.user, Hook::UpdateContent).await;
        }
    }
    // After postCreate, unless hooks stop with it because `waitFor` names
    // it; stopping for personalization stops after them (the reference's order).
    let dotfiles = runs(Hook::PostCreate, until)
        && (scope != Scope::UntilWaitFor || runs(Hook::PostStart, until))
        && !is_done(&markers, DOTFILES_MARKER);
    let dotfiles = ctx.dotfiles.as_ref().filter(|_| dotfiles);
    if link.link().peer().runs_hook_jobs() {
        by_daemon(link, ctx, &markers, &status.boot_id, until, dotfiles).await?;
    } else {
        by_host(link, ctx, &markers, &status.boot_id, until, dotfiles).await?;
    }
    if post_attach && runs(Hook::PostAttach, until) {
        run_hook(link, ctx, Hook::PostAttach).await?;
    }
    kill_point("ended", "hooks");
    Ok(until.is_none())
}

/// The markers as `up` read them.
type Markers = BTreeMap<String, String>;

fn is_done(markers: &Markers, key: &str) -> bool {
    markers.get(key).map(String::as_str) == Some(DONE)
}

/// The once-only hooks and postStart as the daemon's jobs, and the start
/// plan handed over once the create hooks are done.
async fn by_daemon(
    link: &RoomLink,
    ctx: &HookContext<'_>,
    markers: &Markers,
    boot_id: &str,
    until: Option<Hook>,
    dotfiles: Option<&Dotfiles>,
) -> anyhow::Result<()> {
    let has = |hook: Hook| !ctx.metadata.hook(hook).is_empty();
    // What a start waits for before the daemon runs postStart itself.
    let mut after = Vec::new();
    if !is_done(markers, LEGACY_CREATE_MARKER) {
        if !is_done(markers, UID_MARKER) {
            once(link, UID_MARKER, None, DONE, OnAbandoned::RunAgain, || update_remote_user_uid(link, ctx)).await?;
        }
        after.push(UID_MARKER.to_string());
        for hook in CREATE_HOOKS.into_iter().filter(|h| has(*h)) {
            // The rest stays due, for a later `up`: nor is the start plan
            // handed over, whose postStart waits for them.
            if !runs(hook, until) {
                return Ok(());
            }
            after.push(hook.property().to_string());
            if !is_done(markers, hook.property()) {
                let run = hook_run(ctx, hook, hook.property(), DONE, &ctx.created_at);
                daemon_job(link, run, OnAbandoned::Interrupted, ctx.say).await?;
            }
        }
    }
    if let Some(dotfiles) = dotfiles {
        once(link, DOTFILES_MARKER, None, DONE, OnAbandoned::RunAgain, || install_dotfiles(link, ctx, dotfiles))
            .await?;
    }
    if !runs(Hook::PostStart, until) {
        return Ok(());
    }
    let plan = start_plan(ctx, after);
    if markers.get(PLAN_MARKER) != Some(&plan.digest) {
        kill_point("asking", PLAN_MARKER);
        match link.link().request(Request::SetStartPlan(plan)).await? {
            Response::Done => {}
            Response::Error { message } => bail!("the daemon did not take the room's start plan: {message}"),
            other => bail!("the daemon answered {other:?} to the room's start plan"),
        }
        kill_point("handed", PLAN_MARKER);
    }
    if markers.get(START_MARKER).map(String::as_str) != Some(boot_id) {
        // Also with no postStartCommand: the marker then says this start
        // needs nothing, and the next `up` asks nothing.
        let run = hook_run(ctx, Hook::PostStart, START_MARKER, boot_id, &ctx.started_at);
        daemon_job(link, run, OnAbandoned::RunAgain, ctx.say).await?;
    }
    Ok(())
}

/// `hook`'s commands as a job for the daemon, recorded under `key` as
/// `done`, sharing the reference CLI's marker file at `time`.
fn hook_run(ctx: &HookContext<'_>, hook: Hook, key: &str, done: &str, time: &str) -> HookRun {
    HookRun {
        key: key.to_string(),
        done: done.to_string(),
        hook: hook.property().to_string(),
        run: hook_commands(ctx, hook),
        reference_time: (!time.is_empty()).then(|| time.to_string()),
    }
}

fn hook_commands(ctx: &HookContext<'_>, hook: Hook) -> HookCommands {
    let commands = ctx.metadata.hook(hook);
    let name_origins = commands.iter().any(|c| !c.origin.is_config());
    HookCommands {
        commands: commands.iter().map(|c| steps(hook, name_origins.then_some(&c.origin), &c.command)).collect(),
        user: Some(ctx.user.clone()),
        env: ctx.env.clone(),
        cwd: Some(ctx.cwd.clone()),
    }
}

/// What the daemon runs at each later start: postStart as this `up` would
/// run it, after the create hooks `after` names. Its digest covers all of
/// it, so a changed command, user or env is handed over again.
fn start_plan(ctx: &HookContext<'_>, after: Vec<String>) -> StartPlan {
    let mut run = hook_commands(ctx, Hook::PostStart);
    if let Some(env) = &ctx.plan_env {
        run.env = env.clone();
    }
    let mut plan = StartPlan { run, after, digest: String::new() };
    let bytes = serde_json::to_vec(&plan).unwrap_or_default();
    plan.digest = super::daemon::digest(&bytes);
    plan
}

/// Asks the daemon for `run` and follows it to its end. A host's claim
/// (an `up` of a workroom before hook jobs) is waited for while its `up`
/// lives, and one whose `up` died is dealt with as that workroom did.
async fn daemon_job(link: &RoomLink, run: HookRun, on_abandoned: OnAbandoned, say: &Notices) -> anyhow::Result<()> {
    let (key, hook) = (run.key.clone(), run.hook.clone());
    let mut wait = crate::retry::Backoff::new(crate::retry::Pace::HOOK, CLAIM_WAIT);
    loop {
        kill_point("asking", &key);
        let stream = link.link().open(Request::RunHook(run.clone())).await?;
        let _ = stream.send_eof().await;
        match stream.recv_reply().await? {
            Response::Hook(HookState::Done) => return Ok(()),
            Response::Hook(HookState::Started) => kill_point("claimed", &key),
            Response::Hook(HookState::Following) => {
                say.say(format!("[{hook}] runs already (begun by another `up`, or at the room's start); following it"))
            }
            Response::Hook(HookState::Busy { current }) => {
                let abandoned = is_abandoned(&current);
                if abandoned && on_abandoned == OnAbandoned::Interrupted {
                    let (applied, _) = link.set_marker(&key, Some(run.done.clone()), Some(current)).await?;
                    if applied {
                        say_interrupted(say, Once::Interrupted, &hook);
                        return Ok(());
                    }
                } else if abandoned || wait.expired() {
                    // Taken over: released, for the daemon to claim.
                    link.set_marker(&key, None, Some(current)).await?;
                } else {
                    wait.pause().await;
                }
                continue;
            }
            Response::Error { message } => bail!("the daemon could not run {hook}: {message}"),
            other => bail!("the daemon answered {other:?} to {hook}"),
        }
        let ended = follow(&stream, &hook, say).await;
        kill_point("ended", &key);
        return ended;
    }
}

/// Says a hook job's output as it comes (lines the daemon labelled) and
/// returns its end: the daemon's one-line reason when it failed.
async fn follow(stream: &StreamHandle, hook: &str, say: &Notices) -> anyhow::Result<()> {
    let (mut exit, mut reason) = (None, None);
    while let Some(event) = stream.recv().await {
        match event {
            Event::Data(bytes) => say.output(&bytes),
            Event::Stderr(bytes) => reason = Some(String::from_utf8_lossy(&bytes).trim().to_string()),
            Event::Exit(status) => exit = Some(status),
            Event::Eof => break,
            Event::Reset(why) => bail!("the daemon ended {hook}'s output: {why}"),
        }
    }
    match (exit, reason) {
        (_, Some(reason)) => bail!("{reason}"),
        (Some(status), None) if status.code == Some(0) => Ok(()),
        (Some(status), None) => bail!("{hook} {}", status.describe()),
        // The link closed first: the room stopped, or the engine went away.
        (None, None) => {
            bail!("lost the daemon before {hook} ended (did the room stop?); the next `workroom up` finds how it ended")
        }
    }
}

/// The old way, for a daemon without hook jobs: `up` claims each marker and
/// runs the commands itself.
async fn by_host(
    link: &RoomLink,
    ctx: &HookContext<'_>,
    markers: &Markers,
    boot_id: &str,
    until: Option<Hook>,
    dotfiles: Option<&Dotfiles>,
) -> anyhow::Result<()> {
    let has = |hook: Hook| !ctx.metadata.hook(hook).is_empty();
    let done = |key: &str| is_done(markers, key);
    let legacy_done = done(LEGACY_CREATE_MARKER);
    let create_due = !legacy_done && CREATE_HOOKS.iter().any(|h| has(*h) && !done(h.property()));
    let started_for = markers.get(START_MARKER).cloned();
    let start_due = started_for.as_deref() != Some(boot_id);
    let theirs = match create_due || start_due {
        true => reference::read(link, &ctx.user).await,
        false => Default::default(),
    };
    if !legacy_done {
        if !done(UID_MARKER) {
            once(link, UID_MARKER, None, DONE, OnAbandoned::RunAgain, || update_remote_user_uid(link, ctx)).await?;
        }
        for hook in CREATE_HOOKS {
            if !runs(hook, until) {
                return Ok(());
            }
            if !has(hook) || done(hook.property()) {
                continue;
            }
            let ran_by_reference = reference::ran(&theirs, hook, &ctx.created_at);
            let outcome = once(link, hook.property(), None, DONE, OnAbandoned::Interrupted, || async {
                if ran_by_reference {
                    ctx.say.say(format!("[{}] already run by the reference CLI (devcontainer up)", hook.property()));
                    return Ok(());
                }
                run_recorded(link, ctx, hook, &ctx.created_at).await
            })
            .await?;
            say_interrupted(ctx.say, outcome, hook.property());
        }
    }
    if let Some(dotfiles) = dotfiles {
        once(link, DOTFILES_MARKER, None, DONE, OnAbandoned::RunAgain, || install_dotfiles(link, ctx, dotfiles))
            .await?;
    }
    if start_due && runs(Hook::PostStart, until) {
        let ran_by_reference = reference::ran(&theirs, Hook::PostStart, &ctx.started_at);
        // postStart runs at every start, so it is made to be repeated; and an
        // abandoned claim may be of an earlier start, which says nothing
        // about this one.
        once(link, START_MARKER, started_for, boot_id, OnAbandoned::RunAgain, || async {
            if !has(Hook::PostStart) {
                Ok(())
            } else if ran_by_reference {
                ctx.say.say("[postStartCommand] already run by the reference CLI (devcontainer up)");
                Ok(())
            } else {
                run_recorded(link, ctx, Hook::PostStart, &ctx.started_at).await
            }
        })
        .await?;
    }
    Ok(())
}

/// Every command of `hook`, one after the other; the first failure stops
/// the rest. Origins are named when another than devcontainer.json has a say.
async fn run_hook(link: &RoomLink, ctx: &HookContext<'_>, hook: Hook) -> anyhow::Result<()> {
    let commands = ctx.metadata.hook(hook);
    let name_origins = commands.iter().any(|c| !c.origin.is_config());
    for c in commands {
        run_in_room(link, ctx, hook, name_origins.then_some(&c.origin), &c.command).await?;
    }
    Ok(())
}

/// Runs a hook with the reference's marker file written first, as the
/// reference does; a failed hook takes the file back, since it is to run
/// again (our claim is released too).
async fn run_recorded(link: &RoomLink, ctx: &HookContext<'_>, hook: Hook, time: &str) -> anyhow::Result<()> {
    reference::write(link, &ctx.user, hook, time, ctx.say).await;
    let result = run_hook(link, ctx, hook).await;
    if result.is_err() {
        reference::forget(link, &ctx.user, hook).await;
    }
    result
}

fn say_interrupted(say: &Notices, outcome: Once, hook: &str) {
    if outcome == Once::Interrupted {
        say.warn(format!(
            "{hook} began under an `up` that died before it ended; it is not run twice (`workroom up --recreate` makes the room afresh)"
        ));
    }
}

/// `updateRemoteUserUID` (default true on Linux): before the first hook, the
/// remote user gets the host user's uid and gid, so files in the workspace
/// mount have one owner on both sides. Skipped, as the reference does, for
/// root and numeric users, and when the host user is root.
async fn update_remote_user_uid(link: &RoomLink, ctx: &HookContext<'_>) -> anyhow::Result<()> {
    let wanted = wants_uid_update(ctx.metadata.update_remote_user_uid, ctx.uid_default);
    let (uid, gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
    let numeric = ctx.user.chars().all(|c| c.is_ascii_digit());
    if !wanted || !cfg!(target_os = "linux") || ctx.user == "root" || uid == 0 {
        return Ok(());
    }
    if numeric {
        // As the reference: a uid is not remapped. Said, since the workspace
        // then has two owners and a hook writing to it fails.
        let (passwd, _) = link.users().await?;
        if let Some(note) = super::users::numeric_user_note(&ctx.user, uid, &passwd) {
            ctx.say.warn(note);
        }
        return Ok(());
    }
    let request = RunRequest {
        argv: vec![
            workroomd::room::DAEMON_PATH.into(),
            "update-uid".into(),
            ctx.user.clone(),
            uid.to_string(),
            gid.to_string(),
        ],
        user: Some("0".into()),
        cwd: Some("/".into()),
        ..Default::default()
    };
    let status = link.run_prefixed(request, "updateRemoteUserUID", ctx.say).await?;
    if status.code != Some(0) {
        bail!("updateRemoteUserUID failed for {} ({status:?})", ctx.user);
    }
    Ok(())
}

/// Runs `work` unless the marker already says `done`, claiming the marker
/// first (from `expected`) so that only one caller runs it. A claim left by
/// an `up` that died is taken over (`RunAgain`) or marked done unrun
/// (`Interrupted`).
async fn once<F, Fut>(
    link: &RoomLink,
    key: &str,
    expected: Option<String>,
    done: &str,
    on_abandoned: OnAbandoned,
    work: F,
) -> anyhow::Result<Once>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let claim = format!("running:{}:{}:{}", host_name(), std::process::id(), nonce());
    let mut wait = crate::retry::Backoff::new(crate::retry::Pace::HOOK, CLAIM_WAIT);
    // A claim the caller read earlier is another `up` at work, not a value to
    // claim from: compare-and-set against it would take its work over while
    // it runs (postStart ran twice under concurrent `up`s). Start from
    // "absent" instead, so the loop waits for that claim like any other.
    let mut expected = expected.filter(|v| !v.starts_with("running:"));
    loop {
        let (applied, current) = link.set_marker(key, Some(claim.clone()), expected.clone()).await?;
        if applied {
            kill_point("claimed", key);
            break;
        }
        match current.as_deref() {
            Some(v) if v == done => return Ok(Once::Done),
            Some(v) if v.starts_with("running:") && is_abandoned(v) && on_abandoned == OnAbandoned::Interrupted => {
                let (applied, _) = link.set_marker(key, Some(done.to_string()), current.clone()).await?;
                if applied {
                    return Ok(Once::Interrupted);
                }
            }
            Some(v) if v.starts_with("running:") && !is_abandoned(v) && !wait.expired() => wait.pause().await,
            // A stale claim, or another value: claim from what is there now.
            _ => expected = current,
        }
    }
    match work().await {
        Ok(()) => {
            link.set_marker(key, Some(done.to_string()), Some(claim)).await?;
            kill_point("ended", key);
            Ok(Once::Done)
        }
        Err(e) => {
            // Release the claim so the next `up` tries again.
            let _ = link.set_marker(key, expected, Some(claim)).await;
            Err(e)
        }
    }
}

/// A claim is abandoned when it was made on this machine by a process that
/// is gone (an `up` killed mid-hook): it is taken over at once instead of
/// after `CLAIM_WAIT`. A claim from another machine (a shared remote engine)
/// cannot be checked and is waited for.
fn is_abandoned(claim: &str) -> bool {
    let mut parts = claim.splitn(4, ':').skip(1);
    let (Some(host), Some(pid)) = (parts.next(), parts.next()) else { return false };
    host == host_name() && pid.parse::<u32>().is_ok_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().replace(':', "_")).unwrap_or_default()
}

fn nonce() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// A hook's command as the steps that run it: one, or a parallel object's
/// entries at once, each labelled with the hook (and `origin`, when given).
fn steps(hook: Hook, origin: Option<&Origin>, cmd: &Command) -> Vec<HookStep> {
    let from = origin.map(|o| format!(" from {o}")).unwrap_or_default();
    match cmd {
        Command::Parallel(named) => named
            .iter()
            .map(|(n, c)| HookStep { label: format!("{}:{n}{from}", hook.property()), argv: argv(c) })
            .collect(),
        simple => vec![HookStep { label: format!("{}{from}", hook.property()), argv: argv(simple) }],
    }
}

fn argv(cmd: &Command) -> Vec<String> {
    match cmd {
        Command::Shell(s) => vec!["/bin/sh".into(), "-c".into(), s.clone()],
        Command::Exec(argv) => argv.clone(),
        Command::Parallel(_) => unreachable!("parallel commands are split before"),
    }
}

/// Runs a hook's command in the room, its output on ours with the hook's
/// name (and `origin`, when given); a parallel object runs its commands at
/// once and waits for all.
pub async fn run_in_room(
    link: &RoomLink,
    ctx: &HookContext<'_>,
    hook: Hook,
    origin: Option<&Origin>,
    cmd: &Command,
) -> anyhow::Result<()> {
    let jobs = steps(hook, origin, cmd);
    let runs = jobs.iter().map(|HookStep { label, argv }| async move {
        ctx.say.say(format!("[{label}] {}", argv.join(" ")));
        let request = RunRequest {
            argv: argv.clone(),
            user: Some(ctx.user.clone()),
            env: ctx.env.clone(),
            cwd: Some(ctx.cwd.clone()),
            stdin: false,
            login_shell: false,
        };
        let status = link.run_prefixed(request, label, ctx.say).await?;
        match status.code {
            Some(0) => Ok(()),
            Some(code) => bail!("{label} failed with exit code {code}"),
            None => bail!("{label} was killed by signal {}", status.signal.unwrap_or(0)),
        }
    });
    let results = futures_util::future::join_all(runs).await;
    results.into_iter().collect::<anyhow::Result<Vec<()>>>().map(|_| ())
}

/// `initializeCommand`, on the host, in the workspace folder.
pub async fn run_on_host(cmd: &Command, folder: &Path, say: &Notices) -> anyhow::Result<()> {
    let jobs: Vec<(String, Vec<String>)> = match cmd {
        Command::Parallel(named) => named.iter().map(|(n, c)| (format!("initializeCommand:{n}"), argv(c))).collect(),
        simple => vec![("initializeCommand".to_string(), argv(simple))],
    };
    for (label, argv) in jobs {
        say.say(format!("[{label}] {}", argv.join(" ")));
        let status = tokio::process::Command::new(&argv[0])
            .args(&argv[1..])
            .current_dir(folder)
            .status()
            .await
            .with_context(|| format!("{label}: cannot run {}", argv[0]))?;
        if !status.success() {
            bail!("{label} failed ({status}); nothing was created");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_begun_under_an_up_that_died_is_warned_of_once_and_one_done_says_nothing() {
        let said = Notices::kept();
        say_interrupted(&said, Once::Done, "postCreateCommand");
        assert!(said.take().is_empty());
        say_interrupted(&said, Once::Interrupted, "postCreateCommand");
        assert_eq!(
            said.take(),
            [crate::notices::Notice {
                level: crate::notices::Level::Warning,
                text: "postCreateCommand began under an `up` that died before it ended; it is not run twice \
                       (`workroom up --recreate` makes the room afresh)"
                    .into(),
            }]
        );
    }

    #[test]
    fn a_claim_of_a_dead_local_process_is_abandoned_and_a_live_or_foreign_one_is_not() {
        let me = format!("running:{}:{}:1", host_name(), std::process::id());
        assert!(!is_abandoned(&me));
        // Pids are below /proc/sys/kernel/pid_max (at most 2^22).
        let dead = format!("running:{}:{}:1", host_name(), 1u32 << 23);
        assert!(is_abandoned(&dead));
        assert!(!is_abandoned(&format!("running:another-machine:{}:1", 1u32 << 23)));
        assert!(!is_abandoned("running:garbage"));
    }

    #[test]
    fn a_dotfiles_repository_of_owner_and_name_is_githubs_and_a_url_or_a_path_is_as_written() {
        let d = |r: &str| Dotfiles { repository: r.into(), install_command: None, target: "~/dotfiles".into() }.url();
        assert_eq!(d("me/dots"), "https://github.com/me/dots.git");
        assert_eq!(d("https://example.com/me/dots.git"), "https://example.com/me/dots.git");
        assert_eq!(d("git@example.com:me/dots.git"), "git@example.com:me/dots.git");
        assert_eq!(d("/workspaces/app/dots"), "/workspaces/app/dots");
        assert_eq!(d("./dots"), "./dots");
    }

    #[test]
    fn the_uid_default_decides_only_what_the_metadata_leaves_open_and_never_overrides_it() {
        for (setting, default, wanted) in [
            (None, UidDefault::On, true),
            (Some(false), UidDefault::On, false),
            (None, UidDefault::Off, false),
            (Some(true), UidDefault::Off, true),
            (Some(true), UidDefault::Never, false),
            (None, UidDefault::Never, false),
        ] {
            assert_eq!(wants_uid_update(setting, default), wanted, "{setting:?} {default:?}");
        }
    }

    #[test]
    fn skipping_non_blocking_commands_stops_after_wait_for_and_skipping_post_create_runs_none() {
        let ran = |scope: Scope, wait_for| -> Vec<Hook> {
            let until = scope.until(wait_for);
            Hook::ALL[1..].iter().copied().filter(|h| runs(*h, until)).collect()
        };
        use Hook::*;
        assert_eq!(ran(Scope::All, None), [OnCreate, UpdateContent, PostCreate, PostStart, PostAttach]);
        assert_eq!(ran(Scope::UntilWaitFor, None), [OnCreate, UpdateContent]);
        assert_eq!(ran(Scope::UntilWaitFor, Some(PostStart)), [OnCreate, UpdateContent, PostCreate, PostStart]);
        assert_eq!(ran(Scope::UntilWaitFor, Some(Initialize)), Vec::<Hook>::new());
        assert_eq!(ran(Scope::None, Some(PostAttach)), Vec::<Hook>::new());
        assert_eq!(ran(Scope::Prebuild, Some(PostStart)), [OnCreate, UpdateContent]);
    }
}
