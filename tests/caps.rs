//! Resource caps against the real engine (ADR 0014): a room capped at
//! 256 MiB loses the process that asks a GiB and keeps its daemon; a room
//! capped at 200 processes stops a fork bomb and still serves `exec`; the
//! CPUs and `/tmp` are what the room's cgroup and `df` show and what `list`
//! and `up --json` say; a changed cap is said on the next `up`. Works on
//! cgroup v1 (this project's machines) and v2.

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::Duration;

/// How long the daemon may take to log a kill: it reads the count once a
/// second (`workroomd/src/oom.rs`), on a loaded machine a few seconds.
const KILL_LOGGED_WITHIN: Duration = Duration::from_secs(20);

/// How long a fork bomb may take to run into 200 processes: well under a
/// second alone, seconds beside other tests' builds.
const BOMB_HITS_THE_CAP_WITHIN: Duration = Duration::from_secs(60);

/// How long the bomb's processes may take to go once their pane is killed.
const BOMB_GONE_WITHIN: Duration = Duration::from_secs(30);

fn settings(caps: &str) -> String {
    format!("peer_messaging = false\n[caps]\n{caps}")
}

/// A file of the room's cgroup for `controller`, on v2 or v1: the text of
/// the first of the names that exists (v2's unified file, then v1's).
fn cgroup(ws: &Workspace, v2: &str, v1: &str) -> String {
    let script = format!("cat /sys/fs/cgroup/{v2} 2>/dev/null || cat /sys/fs/cgroup/{v1}");
    ws.exec_ok(&["sh", "-c", &script]).trim().to_string()
}

/// Every process of the room as `(pid, oom_score_adj, command line)`.
fn processes(ws: &Workspace) -> Vec<(u32, i32, String)> {
    let script = r#"for p in /proc/[0-9]*; do
        s=$(cat $p/oom_score_adj 2>/dev/null) || continue
        c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null)
        echo "${p#/proc/} $s $c"
    done"#;
    ws.exec_ok(&["sh", "-c", script])
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ' ');
            Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?, parts.next().unwrap_or("").to_string()))
        })
        .collect()
}

/// The daemon's pid and score.
fn daemon(ws: &Workspace) -> (u32, i32) {
    let serving =
        |cmd: &str| cmd.split(' ').next().is_some_and(workroomd::room::is_daemon_path) && cmd.contains(" serve");
    let found = processes(ws).into_iter().find(|(_, _, cmd)| serving(cmd));
    let (pid, score, _) = found.expect("the daemon runs in the room");
    (pid, score)
}

/// `State.StartedAt` and `RestartCount`: the same start of the room.
fn start_of(ws: &Workspace) -> String {
    docker_ok(&["inspect", "--format", "{{.State.StartedAt}} {{.RestartCount}}", &ws.room_name()])
}

fn up_json(ws: &Workspace) -> (Value, String) {
    let out = ws.workroom(&["up", "--json"]);
    assert!(out.status.success(), "up --json: {}", stderr(&out));
    let line = stdout(&out).lines().last().unwrap_or_default().to_string();
    (serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}")), stderr(&out))
}

fn listed(ws: &Workspace) -> Value {
    let out = run_workroom(&["list", "--json"]);
    assert!(out.status.success(), "list --json: {}", stderr(&out));
    let rooms: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    rooms.into_iter().find(|r| r["name"] == json!(ws.room_name())).expect("the room is listed")
}

fn logs(ws: &Workspace) -> String {
    let out = ws.workroom(&["logs"]);
    assert!(out.status.success(), "logs: {}", stderr(&out));
    stdout(&out) + &stderr(&out)
}

#[test]
fn a_room_capped_at_256m_loses_the_process_that_takes_a_gibibyte_and_keeps_its_daemon() {
    // runArgs asks 1g, the settings 256m: the lower holds, and `up` says both.
    let ws = Workspace::new(json!({ "image": DEBIAN, "runArgs": ["--memory", "1g"] }))
        .with_settings(&settings("memory = \"256m\"\n"), false);
    let (result, said) = up_json(&ws);
    assert!(
        said.contains(
            "runArgs `--memory 1g` and [caps] memory = 256m in .workroom.toml both cap memory; the lower, 256m, holds"
        ),
        "{said}"
    );
    assert_eq!(result["caps"], json!({ "memory": 268435456, "memory_swap": 268435456 }));
    assert_eq!(cgroup(&ws, "memory.max", "memory/memory.limit_in_bytes"), "268435456");
    // No swap past the memory: v2 counts swap alone, v1 memory and swap.
    let swap = cgroup(&ws, "memory.swap.max", "memory/memory.memsw.limit_in_bytes");
    assert!(swap == "0" || swap == "268435456", "swap cap: {swap}");

    // The order the kernel kills in: the daemon (and init) at 0, what the
    // daemon starts and what `docker exec` starts above it.
    let (daemon_pid, daemon_score) = daemon(&ws);
    assert_eq!(daemon_score, 0, "the daemon lowered itself: {:?}", processes(&ws));
    let out = ws.workroom(&["shell", "-d", "hog", "--", "sleep", "600"]);
    assert!(out.status.success(), "shell -d: {}", stderr(&out));
    let procs = processes(&ws);
    let pane = procs.iter().find(|(_, _, cmd)| cmd.starts_with("sleep 600")).expect("the pane's sleep runs");
    assert_eq!(pane.1, workroomd::room::OOM_SCORE_GAP, "a pane starts above the daemon: {procs:?}");
    assert_eq!(ws.exec_ok(&["cat", "/proc/self/oom_score_adj"]).trim(), "500", "so does an exec");
    let before = start_of(&ws);

    let hog = "b = bytearray(1 << 30)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('not killed')";
    let out = ws.exec(&["python3", "-c", hog]);
    assert_eq!(out.status.code(), Some(137), "killed by SIGKILL: {} {}", stdout(&out), stderr(&out));
    assert!(!stdout(&out).contains("not killed"));

    // The room and its daemon are the same as before; exec still works.
    assert_eq!(start_of(&ws), before, "the room did not restart");
    assert_eq!(daemon(&ws), (daemon_pid, 0), "the same daemon, still at 0");
    assert!(ws.exec(&["true"]).status.success());
    let killed = cgroup(&ws, "memory.events", "memory/memory.oom_control");
    assert!(killed.lines().any(|l| l == "oom_kill 1"), "{killed}");

    // `logs` says the kill (the daemon's line) and names the exec (the engine's events).
    let mut text = String::new();
    let said = wait_until(KILL_LOGGED_WITHIN, || {
        text = logs(&ws);
        text.contains("the kernel killed a process in this room for memory").then_some(())
    });
    assert!(said.is_some(), "no kill in the log: {text}");
    assert!(text.contains("the room's memory cap is 256 MiB; 1 killed since the room's start"), "{text}");
    assert!(text.contains("workroom: the kernel killed the exec `python3 -c b = bytearray(1 << 30)"), "{text}");
    assert!(
        text.contains("OOM order: the daemon lowered its score from 500 to 0; its children start at 500"),
        "{text}"
    );
}

#[test]
fn pids_200_stops_a_fork_bomb_and_the_room_still_serves_exec() {
    let ws = Workspace::image(BUSYBOX).with_settings(&settings("pids = 200\n"), false);
    let (result, _) = up_json(&ws);
    assert_eq!(result["caps"], json!({ "pids": 200 }));
    assert_eq!(cgroup(&ws, "pids.max", "pids/pids.max"), "200");
    let (daemon_pid, _) = daemon(&ws);
    let before = start_of(&ws);

    // Each shell starts two more in the background and holds its place for
    // a while; a shell whose fork is refused ends.
    let bomb = "f() { f | f & sleep 120; }; f";
    let out = ws.workroom(&["shell", "-d", "bomb", "--", "sh", "-c", bomb]);
    assert!(out.status.success(), "shell -d: {}", stderr(&out));
    let refused = wait_until(BOMB_HITS_THE_CAP_WITHIN, || {
        let events = cgroup(&ws, "pids.events", "pids/pids.events");
        let n: u64 = events.strip_prefix("max ")?.trim().parse().ok()?;
        (n > 0).then_some(n)
    });
    assert!(refused.is_some(), "the bomb never ran into the cap");
    let current: u64 = cgroup(&ws, "pids.current", "pids/pids.current").parse().unwrap();
    assert!(current <= 200, "{current} processes under a cap of 200");

    // With the room full, exec still starts (it forks nothing in the room)
    // and the daemon still answers.
    assert!(ws.exec(&["true"]).status.success(), "exec while the bomb holds the room");
    assert_eq!(start_of(&ws), before, "the room did not restart");
    let out = ws.workroom(&["kill-pane", "bomb"]);
    assert!(out.status.success(), "kill-pane: {}", stderr(&out));
    let gone = wait_until(BOMB_GONE_WITHIN, || {
        let current: u64 = cgroup(&ws, "pids.current", "pids/pids.current").parse().ok()?;
        (current < 20).then_some(())
    });
    assert!(gone.is_some(), "the bomb's processes outlived their pane: {:?}", processes(&ws));
    assert_eq!(daemon(&ws).0, daemon_pid, "the same daemon");
    assert!(ws.exec(&["true"]).status.success());
}

#[test]
fn cpus_and_tmp_show_in_the_room_in_list_and_in_up_json_and_a_changed_cap_is_said_on_the_next_up() {
    let ws = Workspace::image(BUSYBOX).with_settings(&settings("cpus = 1.5\ntmp = \"64m\"\n"), false);
    let (result, _) = up_json(&ws);
    assert_eq!(result["caps"], json!({ "cpus": 1.5, "tmp": 67108864 }));
    let quota = cgroup(&ws, "cpu.max", "cpu/cpu.cfs_quota_us");
    let quota = match quota.split_once(' ') {
        // v2: "150000 100000".
        Some((q, p)) => (q.to_string(), p.to_string()),
        None => (quota.clone(), cgroup(&ws, "cpu.max", "cpu/cpu.cfs_period_us")),
    };
    assert_eq!(quota, ("150000".to_string(), "100000".to_string()));
    let df = ws.exec_ok(&["df", "-k", "/tmp"]);
    let tmp = df.lines().nth(1).unwrap_or_default().split_whitespace().collect::<Vec<_>>();
    assert_eq!((tmp.first().copied(), tmp.get(1).copied()), (Some("tmpfs"), Some("65536")), "{df}");
    // A program built in /tmp runs there (Docker's default tmpfs is noexec).
    ws.exec_ok(&["sh", "-c", "printf '#!/bin/sh\\necho ran\\n' > /tmp/t && chmod +x /tmp/t && /tmp/t"]);
    assert_eq!(ws.exec_ok(&["/tmp/t"]).trim(), "ran");

    assert_eq!(listed(&ws)["caps"], json!({ "cpus": 1.5, "tmp": 67108864 }));
    let out = run_workroom(&["list"]);
    let text = stdout(&out);
    let row = text.lines().find(|l| l.starts_with(&ws.room_name())).unwrap_or_default();
    assert!(text.lines().next().unwrap_or_default().contains("CAPS"), "{text}");
    assert!(row.ends_with("cpus 1.5, /tmp 64m"), "{text}");

    // The settings change: the room keeps its caps and says so, until recreated.
    std::fs::write(ws.path().join(".workroom.toml"), settings("cpus = 1\ntmp = \"64m\"\n")).unwrap();
    let said = stderr(&ws.up());
    assert!(
        said.contains(&format!(
            "{} was made with cpus 1.5 (now 1); caps apply only when a room is made: `workroom up --recreate` applies them",
            ws.room_name()
        )),
        "{said}"
    );
    let out = ws.workroom(&["up", "--recreate"]);
    assert!(out.status.success(), "up --recreate: {}", stderr(&out));
    assert_eq!(cgroup(&ws, "cpu.max", "cpu/cpu.cfs_quota_us").split(' ').next(), Some("100000"));
    assert!(!stderr(&ws.up()).contains("was made with"), "a recreated room has the caps asked");
}

#[test]
fn a_cap_that_cannot_be_read_stops_up_with_one_line_naming_the_file_and_property_before_anything_is_made() {
    let ws = Workspace::image(BUSYBOX).with_settings(&settings("memory = \"lots\"\n"), false);
    let out = ws.workroom(&["up"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let said = stderr(&out);
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    let file = ws.path().join(".workroom.toml");
    assert!(
        said.contains(&format!("{}: caps.memory: \"lots\" is not a size such as 512m or 4g (line 3)", file.display())),
        "{said}"
    );
    assert!(ws.containers().is_empty(), "nothing made");
    let out = ws.workroom(&["up", "--memory", "lots"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("invalid value 'lots' for '--memory <SIZE>'"), "{}", stderr(&out));
}
