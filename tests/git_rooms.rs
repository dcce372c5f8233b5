//! Git in the room of a linked checkout (a worktree, a submodule), through
//! the real `workroom` binary, the real engine and the host's real git.
//! ADR 0013.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A repository in a temporary folder with its worktrees beside it; every
/// room made for a folder under it is removed on drop.
struct Repo {
    dir: tempfile::TempDir,
}

impl Repo {
    /// `repo/` with one commit holding `.devcontainer.json` (the fixture
    /// image, the test label) and `.workroom.toml` (peers off).
    fn new() -> Repo {
        let dir = tempfile::Builder::new().prefix("wr-test-git-").tempdir().unwrap();
        let repo = Repo { dir };
        let main = repo.main();
        std::fs::create_dir(&main).unwrap();
        git(&main, &["init", "-q", "-b", "main"]);
        std::fs::write(main.join(".devcontainer.json"), labelled(serde_json::json!({ "image": DEBIAN }))).unwrap();
        std::fs::write(main.join(".workroom.toml"), "peer_messaging = false\n").unwrap();
        std::fs::write(main.join("README"), "hello\n").unwrap();
        git(&main, &["add", "-A"]);
        git(&main, &["commit", "-q", "-m", "init"]);
        repo
    }

    fn main(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `git worktree add ../NAME -b NAME` from the main checkout.
    fn worktree(&self, name: &str) -> PathBuf {
        git(&self.main(), &["worktree", "add", "-q", &format!("../{name}"), "-b", name]);
        self.path(name)
    }

    fn workroom(&self, folder: &Path, args: &[&str]) -> std::process::Output {
        let mut cmd = Command::new(workroom_bin());
        let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
        cmd.args(&args[..split]).arg("--workspace-folder").arg(folder).args(&args[split..]);
        output_within(cmd, None)
    }

    fn up(&self, folder: &Path) -> std::process::Output {
        let out = self.workroom(folder, &["up"]);
        assert!(out.status.success(), "up in {}: {}", folder.display(), stderr(&out));
        out
    }

    /// `sh -c SCRIPT` in the room of `folder`, as its remote user (root).
    fn sh(&self, folder: &Path, script: &str) -> String {
        let out = self.workroom(folder, &["exec", "--", "sh", "-c", script]);
        assert!(
            out.status.success(),
            "in the room of {}: {script}: {}{}",
            folder.display(),
            stdout(&out),
            stderr(&out)
        );
        stdout(&out)
    }
}

impl Drop for Repo {
    fn drop(&mut self) {
        let prefix = self.dir.path().display().to_string();
        let all = docker_ok(&[
            "ps",
            "-a",
            "--filter",
            &format!("label={TEST_LABEL}"),
            "--format",
            "{{.ID}} {{.Label \"devcontainer.local_folder\"}}",
        ]);
        for line in all.lines() {
            if let Some((id, folder)) = line.split_once(' ') {
                if folder.starts_with(&prefix) {
                    remove_container(id);
                }
            }
        }
    }
}

/// The host's git, failing the test when it fails.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.email=test@example.invalid", "-c", "user.name=test", "-c", "protocol.file.allow=always"])
        .args(args)
        .output()
        .expect("run git");
    assert!(out.status.success(), "git {args:?} in {}: {}", dir.display(), stderr(&out));
    stdout(&out)
}

/// What every room's git needs first: the workspace is the host's (root in
/// the tests, as the room's user) and commits need a name.
const GIT_SETUP: &str = "git config --global --add safe.directory '*' && git config --global user.email room@example.invalid && git config --global user.name room";

#[test]
fn git_works_in_a_worktrees_room_and_a_commit_there_is_on_the_hosts_branch_at_once() {
    let repo = Repo::new();
    let remote = repo.path("remote.git");
    git(repo.dir.path(), &["init", "-q", "--bare", remote.to_str().unwrap()]);
    git(&repo.main(), &["remote", "add", "origin", remote.to_str().unwrap()]);
    git(&repo.main(), &["push", "-q", "origin", "main"]);
    let a = repo.worktree("feature-a");
    // The bare remote at its own path in the room too: `fetch` from a local remote.
    let config = serde_json::json!({
        "image": DEBIAN,
        "mounts": [format!("type=bind,source={0},target={0}", remote.display())],
    });
    std::fs::write(a.join(".devcontainer.json"), labelled(config)).unwrap();
    git(&a, &["commit", "-q", "-am", "mount the remote"]);
    let up = repo.workroom(&a, &["up", "--json"]);
    assert!(up.status.success(), "{}", stderr(&up));
    let result: serde_json::Value = serde_json::from_str(stdout(&up).lines().last().unwrap()).unwrap();
    let common = repo.main().join(".git").canonicalize().unwrap().display().to_string();
    assert_eq!(result["git"]["kind"], "worktree", "{result}");
    assert_eq!(result["git"]["hostFolder"], common.as_str(), "{result}");

    let out = repo.sh(
        &a,
        &format!(
            "{GIT_SETUP} && git status --short --branch && git log --oneline -1 && echo change >> README && git diff --stat \
             && git stash -q && git stash list && git stash pop -q && git commit -qam from-the-room && git branch --list \
             && git fetch -q origin && git rev-parse origin/main"
        ),
    );
    assert!(out.contains("## feature-a"), "status in the room: {out}");
    assert!(out.contains("README | 1 +"), "diff in the room: {out}");
    assert!(out.contains("stash@{0}"), "stash in the room: {out}");
    assert!(out.contains("* feature-a") && out.contains("main"), "branches in the room: {out}");
    let origin_main = git(&repo.main(), &["rev-parse", "main"]);
    assert!(out.contains(origin_main.trim()), "fetched origin/main in the room: {out}");
    // The host's branch has the room's commit, with nothing to sync.
    assert_eq!(git(&repo.main(), &["log", "-1", "--format=%s", "feature-a"]).trim(), "from-the-room");
    assert_eq!(git(&a, &["status", "--porcelain"]).trim(), "", "the host's checkout is clean too");
}

#[test]
fn git_worktree_prune_and_gc_in_one_room_leave_every_other_worktree_registered_and_usable() {
    let repo = Repo::new();
    let a = repo.worktree("feature-a");
    let b = repo.worktree("feature-b");
    // What only feature-b holds: a staged file (a blob only its index
    // names) and a commit on a detached HEAD.
    std::fs::write(b.join("staged"), "only in b's index\n").unwrap();
    git(&b, &["add", "staged"]);
    repo.up(&a);
    // Made while the room runs: the room's daemon must notice it.
    let c = repo.worktree("feature-c");
    git(&c, &["checkout", "-q", "--detach"]);
    git(&c, &["commit", "-q", "--allow-empty", "-m", "detached-in-c"]);
    let detached = git(&c, &["rev-parse", "HEAD"]);

    let out = repo.sh(
        &a,
        &format!(
            "{GIT_SETUP} && git worktree prune -v 2>&1 && git gc --prune=now -q 2>&1 && git worktree list --porcelain"
        ),
    );
    assert!(!out.contains("Removing"), "prune removed a worktree: {out}");
    for name in ["feature-b", "feature-c"] {
        assert!(out.contains(&format!("/{name}\n")), "the room's list still has {name}: {out}");
        assert!(!out.contains("prunable"), "nothing is prunable: {out}");
    }
    let listed = git(&repo.main(), &["worktree", "list", "--porcelain"]);
    for name in ["feature-a", "feature-b", "feature-c"] {
        assert!(listed.contains(&format!("/{name}\n")), "the host still lists {name}: {listed}");
    }
    assert_eq!(git(&b, &["status", "--porcelain"]).trim(), "A  staged", "feature-b works and keeps its index");
    assert_eq!(git(&b, &["cat-file", "-p", ":staged"]), "only in b's index\n", "gc kept the blob b's index names");
    assert_eq!(git(&c, &["rev-parse", "HEAD"]), detached, "gc kept c's detached commit");
    git(&c, &["cat-file", "-e", detached.trim()]);
}

#[test]
fn a_worktree_whose_git_file_names_its_folder_relatively_works_in_its_room() {
    let repo = Repo::new();
    let a = repo.worktree("feature-a");
    // As git 2.48's `--relative-paths` writes it, both ways.
    std::fs::write(a.join(".git"), "gitdir: ../repo/.git/worktrees/feature-a\n").unwrap();
    std::fs::write(repo.main().join(".git/worktrees/feature-a/gitdir"), "../../../feature-a/.git\n").unwrap();
    let up = repo.workroom(&a, &["up", "--json"]);
    assert!(up.status.success(), "{}", stderr(&up));
    let result: serde_json::Value = serde_json::from_str(stdout(&up).lines().last().unwrap()).unwrap();
    assert_eq!(result["git"]["roomFolder"], "/workspaces/repo/.git", "beside the workspace in the room: {result}");
    let out = repo.sh(&a, &format!("{GIT_SETUP} && git status --short --branch && git commit -q --allow-empty -m rel"));
    assert!(out.contains("## feature-a"), "{out}");
    assert_eq!(git(&repo.main(), &["log", "-1", "--format=%s", "feature-a"]).trim(), "rel");
}

#[test]
fn a_submodule_checkout_gets_its_module_folder_and_git_works_in_its_room() {
    let repo = Repo::new();
    let origin = repo.path("lib-origin");
    std::fs::create_dir(&origin).unwrap();
    git(&origin, &["init", "-q", "-b", "main"]);
    std::fs::write(origin.join(".devcontainer.json"), labelled(serde_json::json!({ "image": DEBIAN }))).unwrap();
    std::fs::write(origin.join(".workroom.toml"), "peer_messaging = false\n").unwrap();
    git(&origin, &["add", "-A"]);
    git(&origin, &["commit", "-q", "-m", "lib"]);
    git(&repo.main(), &["submodule", "add", "-q", origin.to_str().unwrap(), "lib"]);
    let lib = repo.main().join("lib");
    assert!(std::fs::read_to_string(lib.join(".git")).unwrap().starts_with("gitdir: ../.git/modules/lib"));
    let up = repo.workroom(&lib, &["up", "--json"]);
    assert!(up.status.success(), "{}", stderr(&up));
    let result: serde_json::Value = serde_json::from_str(stdout(&up).lines().last().unwrap()).unwrap();
    assert_eq!(result["git"]["kind"], "submodule", "{result}");
    let out = repo.sh(&lib, &format!("{GIT_SETUP} && git status --short --branch && git log --oneline -1"));
    assert!(out.contains("lib"), "the submodule's history in the room: {out}");
    assert!(!out.contains("fatal"), "{out}");
}

#[test]
fn a_git_file_naming_a_folder_that_does_not_exist_is_said_and_the_room_still_comes_up() {
    let repo = Repo::new();
    let a = repo.worktree("feature-a");
    std::fs::write(a.join(".git"), "gitdir: /nowhere/.git/worktrees/feature-a\n").unwrap();
    let up = repo.up(&a);
    let err = stderr(&up);
    assert!(err.contains("/nowhere/.git/worktrees/feature-a") && err.contains("does not exist"), "{err}");
    assert!(err.contains(&format!("{}", a.join(".git").display())), "names the .git file: {err}");
    let config = repo.workroom(&a, &["config"]);
    assert!(stdout(&config).contains("git folder") && stdout(&config).contains("none:"), "{}", stdout(&config));
}

#[test]
fn config_says_which_git_folder_a_worktrees_room_gets() {
    let repo = Repo::new();
    let a = repo.worktree("feature-a");
    let out = repo.workroom(&a, &["config", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let common = repo.main().join(".git").canonicalize().unwrap().display().to_string();
    assert_eq!(json["workroom"]["git"]["hostFolder"], common.as_str(), "{json}");
    assert_eq!(json["workroom"]["git"]["roomFolder"], common.as_str(), "{json}");
    let text = stdout(&repo.workroom(&a, &["config"]));
    assert!(text.contains(&format!("git folder        {common} (worktree)")), "{text}");
}
