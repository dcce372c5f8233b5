//! `workroom up`: the room of a workspace, made or found, started and ready.
//! `--json` prints the reference CLI's result shape, errors included.
//! `--worktree NAME` first makes (or finds) the git worktree NAME and then
//! brings up the room of that folder, as `up` run there would.

use super::{print_warnings, UpExtraArgs, WorkspaceArgs, WorktreeArgs};
use crate::engine::Engine;
use crate::output;
use crate::room::resolve::UpFlags;
use crate::room::up;
use crate::room::worktree::{self, Made, Repository, Wanted};
use crate::settings;
use serde_json::json;

pub async fn run(
    ws: &WorkspaceArgs,
    wt: WorktreeArgs,
    flags: UpFlags,
    peer: settings::Flags,
    extra: UpExtraArgs,
    as_json: bool,
) -> anyhow::Result<i32> {
    let result = async {
        let (ws, made) = match &wt.worktree {
            Some(name) => {
                let made = worktree_for(ws, name, &wt)?;
                let ws = WorkspaceArgs { workspace_folder: made.path.clone(), config: ws.config.clone() };
                (ws, Some(made))
            }
            None => (ws.clone(), None),
        };
        let mut resolved = ws.resolve(peer)?;
        print_warnings(&resolved);
        let options = with_extra(&mut resolved, flags, extra);
        let engine = Engine::connect().await?;
        up::up(&engine, &resolved.loaded, &options, &super::on_stderr()).await.map(|r| (r, made))
    }
    .await;
    match (result, as_json) {
        (Ok((r, made)), true) => {
            let mut out = success_json(&r);
            if let Some(made) = made {
                out["worktree"] = json!({ "path": made.path, "branch": made.branch, "created": made.created });
            }
            output::print_json_line(&out)?;
            Ok(0)
        }
        (Ok((r, _)), false) => {
            eprintln!(
                "{} {} ({}); `workroom shell` opens a pane, `workroom exec -- CMD` runs a command",
                r.name,
                if r.created { "created" } else { "is up" },
                &r.container_id[..r.container_id.len().min(12)]
            );
            Ok(0)
        }
        (Err(e), true) => {
            let message: Vec<String> = e.chain().map(ToString::to_string).collect();
            output::print_json_line(
                &json!({ "outcome": "error", "message": message.join(": "), "description": e.to_string() }),
            )?;
            Ok(1)
        }
        (Err(e), false) => Err(e),
    }
}

/// The worktree NAME of the workspace folder's repository, made or found,
/// said on stderr before its room comes up (so it is known should `up` fail).
fn worktree_for(ws: &WorkspaceArgs, name: &str, wt: &WorktreeArgs) -> anyhow::Result<Made> {
    let repo = Repository::of(&ws.workspace_folder)?;
    // The checkout this runs in says where worktrees go: its .workroom.toml
    // (committed, so the same in every worktree) over the user's file.
    let settings = settings::load(&repo.current, settings::Flags::default())?;
    let place = repo.place(settings.worktrees.as_deref(), name);
    let wanted = Wanted { name, branch: wt.branch.as_deref(), from: wt.from.as_deref() };
    let made = worktree::make(&repo, &place, &wanted)?;
    for note in &made.notes {
        eprintln!("warning: {note}");
    }
    let branch = made.branch.as_deref().unwrap_or("a detached HEAD");
    let how = if made.created { "made" } else { "found" };
    eprintln!("worktree {name} {how} at {} on {branch}", made.path.display());
    Ok(made)
}

/// The reference CLI's `up` result, key for key, so a script can swap one
/// tool for the other (`| tail -n1 | jq .containerId`).
fn success_json(r: &up::UpResult) -> serde_json::Value {
    let mut out = json!({
        "outcome": "success",
        "containerId": r.container_id,
        "remoteUser": r.remote_user,
        "remoteWorkspaceFolder": r.remote_workspace_folder,
        // The reference's report on its own registry client's credential
        // lookups. workroom pulls through the engine and looks up no
        // credentials itself, so none of these can happen.
        "ociAuthDiagnostics": {
            "authLookupWouldBeBlocked": false,
            "registryRedirectWouldPreventCredentialForwarding": false,
            "authServerRedirect": false,
        },
        // Not the reference's, so after its keys: the platform of the room's daemon.
        "platform": r.platform,
        // And how the room got its workspace: bound, or uploaded into a volume.
        "workspace": r.workspace.json(),
        // Its resource caps (`{}` when uncapped): CPUs, sizes in bytes.
        "caps": r.caps.json(),
    });
    // A worktree's or submodule's git folder, as mounted; absent for any
    // other room, so the reference's keys stay the whole result there.
    if let Some(git) = &r.git {
        out["git"] = json!(git);
    }
    // A guardrail, when there is one: absent for an open room.
    match r.egress {
        crate::settings::EgressMode::Open => {}
        crate::settings::EgressMode::Allowlist => {
            out["egress"] = json!({ "mode": "allowlist", "proxy": crate::plan::egress::proxy_url() })
        }
        crate::settings::EgressMode::None => out["egress"] = json!({ "mode": "none" }),
    }
    out
}

/// The reference's flags on this face: mounts and labels go on a room made
/// now through `runArgs`, as the `devcontainer` face puts them (the room's
/// recorded configuration stays the file's); the environment and the hooks'
/// scope are this `up`'s alone.
fn with_extra(resolved: &mut crate::room::resolve::Resolved, flags: UpFlags, extra: UpExtraArgs) -> up::UpOptions {
    let run_args = &mut resolved.loaded.model.run_args;
    for mount in extra.mounts {
        run_args.extend(["--mount".to_string(), mount]);
    }
    for (name, value) in extra.id_labels {
        run_args.extend(["--label".to_string(), format!("{name}={value}")]);
    }
    let mut options = resolved.up_options(flags);
    options.remote_env = extra.remote_env.into_iter().collect();
    options.hooks = match (extra.skip_post_create, extra.skip_non_blocking_commands) {
        (true, _) => crate::room::hooks::Scope::None,
        (_, true) => crate::room::hooks::Scope::UntilWaitFor,
        _ => crate::room::hooks::Scope::All,
    };
    options
}
