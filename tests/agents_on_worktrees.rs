//! The workflow workroom is built for, end to end with the real programs:
//! one repository, three worktrees, a room each brought up at once, the
//! real Claude Code started in each without a terminal (`shell -d`), the
//! three sessions finding each other, git in one room changing the host's
//! branch and `git gc` in another harming nobody. DESIGN.md, "Several
//! agents on one repository"; ADR 0013.

mod common;
mod peer_support;

use common::*;
use peer_support::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// How long Claude Code may take to reach its prompt offline: 10-20 s on a
/// quiet two-core machine (its remote settings time out first), several
/// times that with three starting at once beside a test suite.
const CLAUDE_WAIT: &str = "180";
/// The rooms' user, whose uid keys the peer group.
const DEV: u32 = 1000;
/// What the real Claude Code shows under its prompt, ready for input: the
/// footer names the shortcuts, or (in auto mode) how to cycle modes.
const CLAUDE_PROMPT: &str = "for shortcuts|for agents|shift\\+tab to cycle";
const BRANCHES: [&str; 3] = ["feature-a", "feature-b", "feature-c"];
/// Until every session is registered and idle: their registry entries are
/// written once each reaches its prompt.
const SESSIONS_WAIT: Duration = Duration::from_secs(60);

/// The host's git; the tree is uid 1000's (as the room's user), so git run
/// here as root is told the folders are safe.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "safe.directory=*", "-c", "user.email=test@example.invalid", "-c", "user.name=test"])
        .args(args)
        .output()
        .expect("run git");
    assert!(out.status.success(), "git {args:?} in {}: {}", dir.display(), stderr(&out));
    stdout(&out)
}

fn workroom_in(scope: &PeerScope, folder: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(workroom_bin());
    let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
    cmd.args(&args[..split]).arg("--workspace-folder").arg(folder).args(&args[split..]).envs(scope.env());
    output_within(cmd, None)
}

fn ok(out: std::process::Output, what: &str) -> String {
    assert!(out.status.success(), "{what}: {}{}", stdout(&out), stderr(&out));
    stdout(&out)
}

#[test]
fn three_agents_on_three_worktrees_of_one_repository_find_each_other_and_git_in_one_room_harms_no_other() {
    let claude = common::claude::binary();
    let scope = PeerScope::new("wt");
    let dir = tempfile::Builder::new().prefix("wr-test-agents-").tempdir().unwrap();
    let main = dir.path().join("repo");
    std::fs::create_dir(&main).unwrap();
    git(&main, &["init", "-q", "-b", "main"]);
    let config = serde_json::json!({
        "image": DEBIAN,
        "remoteUser": "dev",
        "mounts": [format!("type=bind,source={},target=/usr/local/bin/claude,readonly", claude.display())],
        "containerEnv": { "ANTHROPIC_API_KEY": "sk-ant-workroom-test-0000", "DISABLE_AUTOUPDATER": "1" },
    });
    std::fs::write(main.join(".devcontainer.json"), labelled(config)).unwrap();
    let settings = format!(
        "peer_messaging = true\npeer_group = \"w\"\npeer_registry = {:?}\n",
        scope.registry.path().display().to_string()
    );
    std::fs::write(main.join(".workroom.toml"), settings).unwrap();
    git(&main, &["add", "-A"]);
    git(&main, &["commit", "-q", "-m", "init"]);
    let trees: Vec<PathBuf> = BRANCHES
        .iter()
        .map(|b| {
            git(&main, &["worktree", "add", "-q", &format!("../{b}"), "-b", b]);
            dir.path().join(b)
        })
        .collect();
    // The host user's tree, as the room's user is (a real host's user gets
    // there through updateRemoteUserUID; the tests run as root).
    let chown = Command::new("chown").args(["-R", "1000:1000"]).arg(dir.path()).output().unwrap();
    assert!(chown.status.success(), "{}", stderr(&chown));

    // Three rooms at once.
    let ups: Vec<_> = trees
        .iter()
        .map(|t| {
            let (t, env) = (t.clone(), scope.env());
            std::thread::spawn(move || {
                let mut cmd = Command::new(workroom_bin());
                cmd.args(["up", "--json", "--workspace-folder"]).arg(&t).envs(env);
                output_within(cmd, None)
            })
        })
        .collect();
    let mut ids = Vec::new();
    for (up, branch) in ups.into_iter().zip(BRANCHES) {
        let out = up.join().unwrap();
        let line = ok(out, &format!("up of {branch}"));
        let result: serde_json::Value = serde_json::from_str(line.lines().last().unwrap()).unwrap();
        assert_eq!(result["git"]["kind"], "worktree", "{result}");
        ids.push(result["containerId"].as_str().unwrap().to_string());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "three rooms, one per worktree");

    // Logged in once for the group (as a login made elsewhere would leave
    // it: offline, the first-run screens cannot be driven); no room is
    // asked anything. In a git checkout Claude Code asks its trust
    // question per repository top (here each room's workspace folder), not
    // for a parent folder: each is trusted.
    let key = "sk-ant-workroom-test-0000";
    let projects: serde_json::Map<String, serde_json::Value> = BRANCHES
        .iter()
        .map(|b| (format!("/workspaces/{b}"), serde_json::json!({ "hasTrustDialogAccepted": true })))
        .collect();
    let state = serde_json::json!({
        "hasCompletedOnboarding": true,
        "customApiKeyResponses": { "approved": [&key[key.len() - 20..], key], "rejected": [] },
        "projects": projects,
    });
    let state_file = scope.registry_of("w", DEV).join(".claude.json");
    std::fs::write(&state_file, state.to_string()).unwrap();
    std::os::unix::fs::chown(&state_file, Some(DEV), Some(DEV)).unwrap();

    // Started without a terminal: stdin is /dev/null here.
    for t in &trees {
        let name = ok(workroom_in(&scope, t, &["shell", "-d", "agent", "--", "claude"]), "shell -d");
        assert_eq!(name.trim(), "agent");
    }
    for t in &trees {
        let out = workroom_in(&scope, t, &["wait", "agent", "--for", CLAUDE_PROMPT, "--timeout", CLAUDE_WAIT]);
        let screen = stdout(&workroom_in(&scope, t, &["capture", "agent"]));
        assert!(out.status.success(), "no prompt in {} ({}):\n{screen}", t.display(), stderr(&out));
    }

    // Each room's Claude Code lists all three sessions.
    let want: Vec<String> = BRANCHES.iter().map(|b| format!("/workspaces/{b}")).collect();
    for t in &trees {
        eventually(&format!("claude agents in {} listing all three", t.display()), SESSIONS_WAIT, || {
            let out = workroom_in(&scope, t, &["exec", "--", "claude", "agents", "--json"]);
            let listed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
            let mut cwds: Vec<String> = listed.iter().filter_map(|s| s["cwd"].as_str().map(str::to_string)).collect();
            cwds.sort();
            cwds == want
        });
    }
    // And the agents' own view from the host: room, branch, pane, status.
    let listed: Vec<serde_json::Value> =
        serde_json::from_str(&ok(workroom_in(&scope, &trees[0], &["agents", "--json"]), "agents")).unwrap();
    let mut branches: Vec<&str> = listed.iter().filter_map(|s| s["branch"].as_str()).collect();
    branches.sort();
    assert_eq!(branches, BRANCHES, "{listed:?}");
    assert!(listed.iter().all(|s| s["pane"] == "agent" && s["status"] == "idle"), "{listed:?}");
    // A slash command typed into one agent, its answer read off the pane.
    ok(workroom_in(&scope, &trees[1], &["send", "agent", "--keys", "--", "/list-agents", "Enter"]), "send");
    let answer =
        workroom_in(&scope, &trees[1], &["wait", "agent", "--for", "Other Claude sessions \\(2\\)", "--timeout", "60"]);
    let screen = stdout(&workroom_in(&scope, &trees[1], &["capture", "agent"]));
    assert!(answer.status.success(), "/list-agents did not list the two others:\n{screen}");
    assert!(screen.contains("feature-a") && screen.contains("feature-c"), "{screen}");

    // A commit in room A is on the host's branch at once.
    ok(
        workroom_in(
            &scope,
            &trees[0],
            &[
                "exec",
                "--",
                "git",
                "-c",
                "user.email=a@example.invalid",
                "-c",
                "user.name=a",
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                "from-room-a",
            ],
        ),
        "commit in room A",
    );
    assert_eq!(git(&main, &["log", "-1", "--format=%s", "feature-a"]).trim(), "from-room-a");
    // `git gc --prune=now` (which prunes worktrees) in room B harms no other.
    ok(workroom_in(&scope, &trees[1], &["exec", "--", "git", "gc", "--prune=now", "-q"]), "gc in room B");
    let listed = git(&main, &["worktree", "list", "--porcelain"]);
    for b in BRANCHES {
        assert!(listed.contains(&format!("/{b}\n")), "the host still lists {b}: {listed}");
    }
    for t in [&trees[0], &trees[2]] {
        let status = ok(workroom_in(&scope, t, &["exec", "--", "git", "status", "--short", "--branch"]), "status");
        assert!(status.starts_with("## feature-"), "git in {} after gc elsewhere: {status}", t.display());
    }
    drop(scope);
}
