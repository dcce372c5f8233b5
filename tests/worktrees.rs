//! `up --worktree`, `down --worktree` and `list` on worktree rooms: the
//! host's real git, the real engine, a repository made in a temporary folder.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A git repository at `<tmp>/repo` whose committed devcontainer.json makes
/// a labelled room; worktrees go beside it in `<tmp>/repo.worktrees/`. Every
/// room of a folder under `<tmp>` is removed on drop.
struct Repo {
    dir: tempfile::TempDir,
}

impl Repo {
    fn new(config: Value) -> Repo {
        let dir = tempfile::Builder::new().prefix("wr-test-wt-").tempdir().unwrap();
        let repo = Repo { dir };
        std::fs::create_dir_all(repo.main().join(".devcontainer")).unwrap();
        git_ok(repo.dir.path(), &["init", "-q", "-b", "main", "repo"]);
        std::fs::write(repo.main().join(".devcontainer/devcontainer.json"), labelled(config)).unwrap();
        std::fs::write(repo.main().join(".workroom.toml"), "peer_messaging = false\n").unwrap();
        git_ok(&repo.main(), &["add", "-A"]);
        git_ok(&repo.main(), &["commit", "-q", "-m", "a room"]);
        repo
    }

    fn image() -> Repo {
        Repo::new(serde_json::json!({ "image": DEBIAN }))
    }

    /// The main checkout.
    fn main(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    /// Where `up --worktree NAME` puts NAME by default.
    fn worktree(&self, name: &str) -> PathBuf {
        self.dir.path().join("repo.worktrees").join(name)
    }

    /// `workroom ARGS` run in `dir`, with forwarders' state kept in the
    /// test's folder and nothing of the runner's to carry (ports only).
    fn workroom_in(&self, dir: &Path, args: &[&str]) -> Output {
        let mut cmd = Command::new(workroom_bin());
        cmd.args(args)
            .current_dir(dir)
            .env("XDG_STATE_HOME", self.dir.path().join("state"))
            .env_remove("SSH_AUTH_SOCK")
            .env("GIT_CONFIG_GLOBAL", "/dev/null");
        output_within(cmd, None)
    }

    fn workroom(&self, args: &[&str]) -> Output {
        self.workroom_in(&self.main(), args)
    }

    fn up_json(&self, args: &[&str]) -> Value {
        let mut all = vec!["up", "--json"];
        all.extend_from_slice(args);
        let out = self.workroom(&all);
        assert!(out.status.success(), "up {args:?}: {}", stderr(&out));
        let last = stdout(&out).lines().last().unwrap_or_default().to_string();
        serde_json::from_str(&last).unwrap_or_else(|e| panic!("{e}: {last}"))
    }

    /// The worktrees `git worktree list` names.
    fn listed(&self) -> String {
        git_ok(&self.main(), &["worktree", "list", "--porcelain"])
    }
}

impl Drop for Repo {
    fn drop(&mut self) {
        let format = "{{.ID}} {{.Label \"devcontainer.local_folder\"}}";
        let all = docker(&["ps", "-a", "--filter", &format!("label={TEST_LABEL}"), "--format", format]);
        assert!(all.status.success() || std::thread::panicking(), "docker ps: {}", stderr(&all));
        let ours = self.dir.path().display().to_string();
        for line in String::from_utf8_lossy(&all.stdout).lines() {
            if let Some((id, folder)) = line.split_once(' ') {
                if folder.starts_with(&ours) {
                    remove_container(id);
                }
            }
        }
    }
}

/// `git -C dir ARGS` as the test's own author; its stdout.
fn git_ok(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
    stdout(&out)
}

fn running(id: &str) -> bool {
    docker_ok(&["inspect", id, "--format", "{{.State.Running}}"]) == "true"
}

fn room_of(folder: &Path) -> Vec<String> {
    let filter = format!("label=devcontainer.local_folder={}", folder.display());
    docker_ok(&["ps", "-q", "--filter", &filter]).lines().map(str::to_string).collect()
}

#[test]
fn up_worktree_makes_the_worktree_beside_the_repository_brings_its_room_up_and_reuses_both() {
    let repo = Repo::image();
    let up = repo.up_json(&["--worktree", "feat-a"]);
    let place = repo.worktree("feat-a");
    assert_eq!(up["worktree"], serde_json::json!({ "path": place, "branch": "feat-a", "created": true }), "{up}");
    assert!(place.join(".devcontainer/devcontainer.json").is_file());
    assert!(repo.listed().contains(&format!("worktree {}\n", place.display())), "{}", repo.listed());
    let id = up["containerId"].as_str().unwrap().to_string();
    assert!(running(&id));
    assert_eq!(room_of(&place).len(), 1, "the room is the worktree folder's");
    // The room sees the worktree's files.
    let out = repo.workroom_in(&place, &["exec", "--", "ls", ".devcontainer"]);
    assert_eq!(stdout(&out), "devcontainer.json\n", "{}", stderr(&out));

    // Again, from a subfolder of the worktree itself: the same worktree and room.
    let again = repo.workroom_in(&place.join(".devcontainer"), &["up", "--json", "--worktree", "feat-a"]);
    assert!(again.status.success(), "{}", stderr(&again));
    let again: Value = serde_json::from_str(stdout(&again).lines().last().unwrap()).unwrap();
    assert_eq!(
        (&again["containerId"], &again["worktree"]["created"]),
        (&Value::from(id.as_str()), &Value::from(false))
    );

    // `list` says the room's repository and branch.
    let out = run_workroom(&["list", "--json"]);
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let room = listed.as_array().unwrap().iter().find(|r| r["id"] == id.as_str()).unwrap_or_else(|| panic!("{listed}"));
    assert_eq!((&room["repository"], &room["branch"]), (&Value::from(repo.main().to_str()), &Value::from("feat-a")));
    let table = stdout(&run_workroom(&["list"]));
    let heading = format!("repository {}", repo.main().display());
    let at = table.lines().position(|l| l == heading).unwrap_or_else(|| panic!("no {heading:?} in:\n{table}"));
    let row = table.lines().skip(at + 1).find(|l| l.ends_with(&place.display().to_string()));
    assert!(row.is_some_and(|r| r.contains(" feat-a ")), "the room is not under its repository:\n{table}");
}

#[test]
fn up_worktree_checks_out_an_existing_branch_starts_a_new_one_from_a_ref_and_says_gits_refusal_in_one_line() {
    let repo = Repo::image();
    let main = repo.main();
    let first = git_ok(&main, &["rev-parse", "HEAD"]);
    git_ok(&main, &["commit", "-q", "--allow-empty", "-m", "second"]);
    git_ok(&main, &["branch", "existing", first.trim()]);

    // An existing branch is checked out as it is, not made again from HEAD.
    let up = repo.up_json(&["--worktree", "old", "--branch", "existing"]);
    assert_eq!(up["worktree"]["branch"], "existing");
    assert_eq!(git_ok(&repo.worktree("old"), &["rev-parse", "HEAD"]), first);

    // A new branch starts at --from.
    let up = repo.up_json(&["--worktree", "from-first", "--from", first.trim()]);
    assert_eq!(up["worktree"]["branch"], "from-first");
    assert_eq!(git_ok(&repo.worktree("from-first"), &["rev-parse", "HEAD"]), first);
    assert!(git_ok(&main, &["branch", "--list", "from-first"]).contains("from-first"));

    // A branch checked out in another worktree: git's refusal, in one line, and nothing made.
    let out = repo.workroom(&["up", "--worktree", "twice", "--branch", "existing"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let said = stderr(&out);
    let last = said.lines().last().unwrap_or_default();
    assert!(last.starts_with("workroom: git worktree add") && last.contains("'existing'"), "{said}");
    assert!(!repo.worktree("twice").exists());
}

#[test]
fn up_worktree_without_git_on_the_host_says_so_in_one_line() {
    let repo = Repo::image();
    let empty = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(workroom_bin());
    cmd.args(["up", "--worktree", "x"]).current_dir(repo.main()).env("PATH", empty.path());
    let out = output_within(cmd, None);
    assert_eq!(out.status.code(), Some(2));
    let said = stderr(&out);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(said.contains("needs git on this host"), "{said}");
}

#[test]
fn down_worktree_refuses_uncommitted_or_unpushed_work_touching_nothing_and_force_removes_it_keeping_the_branch() {
    let repo = Repo::image();
    let up = repo.up_json(&["--worktree", "feat-a"]);
    let id = up["containerId"].as_str().unwrap().to_string();
    let place = repo.worktree("feat-a");

    std::fs::write(place.join("notes.txt"), "not yet committed\n").unwrap();
    let out = repo.workroom(&["down", "--worktree", "feat-a"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("has uncommitted changes (notes.txt)"), "{}", stderr(&out));
    assert!(running(&id) && place.join("notes.txt").is_file(), "a refusal removes nothing");

    git_ok(&place, &["add", "notes.txt"]);
    git_ok(&place, &["commit", "-q", "-m", "notes"]);
    let out = repo.workroom(&["down", "--worktree", "feat-a"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("has 1 commit on no other branch and no upstream"), "{}", stderr(&out));
    assert!(running(&id) && place.is_dir(), "a refusal removes nothing");

    let out = repo.workroom(&["down", "--worktree", "feat-a", "--force"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("the branch feat-a is kept"), "{}", stderr(&out));
    assert!(!place.exists(), "the worktree folder is gone");
    assert!(!repo.listed().contains(&place.display().to_string()), "{}", repo.listed());
    assert!(room_of(&place).is_empty() && docker(&["inspect", &id]).status.code() != Some(0), "the room is gone");
    assert!(git_ok(&repo.main(), &["branch", "--list", "feat-a"]).contains("feat-a"), "the branch remains");
}

#[test]
fn down_worktree_removes_a_worktree_whose_commits_are_pushed_and_refuses_while_one_is_not() {
    let repo = Repo::image();
    let remote = repo.dir.path().join("remote.git");
    git_ok(repo.dir.path(), &["init", "-q", "--bare", "remote.git"]);
    git_ok(&repo.main(), &["remote", "add", "origin", remote.to_str().unwrap()]);
    repo.up_json(&["--worktree", "feat-b"]);
    let place = repo.worktree("feat-b");
    git_ok(&place, &["push", "-q", "-u", "origin", "feat-b"]);
    git_ok(&place, &["commit", "-q", "--allow-empty", "-m", "ahead"]);

    let out = repo.workroom(&["down", "--worktree", "feat-b"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("has 1 commit not pushed to origin/feat-b"), "{}", stderr(&out));
    assert_eq!(room_of(&place).len(), 1, "a refusal keeps the room");

    git_ok(&place, &["push", "-q"]);
    let out = repo.workroom(&["down", "--worktree", "feat-b"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!place.exists() && room_of(&place).is_empty());
    assert!(!repo.listed().contains(&place.display().to_string()), "{}", repo.listed());
    assert!(git_ok(&repo.main(), &["branch", "--list", "feat-b"]).contains("feat-b"), "the branch remains");
}

#[test]
fn three_worktree_rooms_of_one_repository_come_up_in_parallel_as_three_rooms_with_ports_of_their_own() {
    // One forwarded port for all three: the first room's forwarder gets it,
    // the others move to free ports and `ports` says so.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let repo = Repo::new(serde_json::json!({ "image": DEBIAN, "forwardPorts": [port] }));
    let names = ["agent-1", "agent-2", "agent-3"];
    let ups: Vec<Value> = std::thread::scope(|s| {
        let running: Vec<_> = names.iter().map(|n| s.spawn(|| repo.up_json(&["--worktree", n]))).collect();
        running.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let ids: std::collections::HashSet<&str> = ups.iter().map(|u| u["containerId"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 3, "three rooms: {ups:?}");
    let mut room_names = std::collections::HashSet::new();
    for (name, up) in names.iter().zip(&ups) {
        assert_eq!(up["worktree"]["path"], Value::from(repo.worktree(name).to_str()));
        let id = up["containerId"].as_str().unwrap();
        assert!(running(id), "{name}'s room is not running");
        room_names.insert(docker_ok(&["inspect", id, "--format", "{{.Name}}"]));
    }
    assert_eq!(room_names.len(), 3, "{room_names:?}");

    let out = repo.workroom(&["ports", "--json"]);
    let statuses: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    let forwards: Vec<&Value> =
        statuses.as_array().unwrap().iter().flat_map(|s| s["forwards"].as_array().unwrap()).collect();
    assert_eq!(forwards.len(), 3, "{statuses}");
    let host_ports: std::collections::HashSet<u64> =
        forwards.iter().map(|f| f["host_port"].as_u64().unwrap()).collect();
    assert_eq!(host_ports.len(), 3, "each room's forward has a host port of its own: {statuses}");
    assert!(host_ports.contains(&u64::from(port)), "one room has the port asked for: {statuses}");
    let moved = forwards.iter().filter(|f| f["asked_port"] == port).count();
    assert_eq!(moved, 2, "two forwards moved from {port}: {statuses}");
}
