//! `list`, `stop`, `down`, `logs`: rooms as the engine knows them, found by
//! our labels only.

use crate::engine::Engine;
use crate::output;
use crate::plan::caps::Caps;
use crate::plan::platform;
use crate::plan::worktree::{self, Checkout};
use crate::plan::{labels, peers};
use crate::room;
use anyhow::bail;
use bollard::models::ContainerSummary;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

/// Grace before `stop` kills: the daemon ends its panes' shells with SIGHUP
/// first, which a shell honours at once.
const STOP_GRACE: Duration = Duration::from_secs(10);

fn label<'a>(c: &'a ContainerSummary, key: &str) -> &'a str {
    c.labels.as_ref().and_then(|l| l.get(key)).map(String::as_str).unwrap_or("")
}

fn name(c: &ContainerSummary) -> String {
    c.names.as_ref().and_then(|n| n.first()).map(|n| n.trim_start_matches('/').to_string()).unwrap_or_default()
}

/// The platform of the room's daemon, from its label.
fn platform(c: &ContainerSummary) -> &str {
    platform::room_platform(c.labels.as_ref().and_then(|l| l.get(platform::PLATFORM_LABEL)).map(String::as_str))
}

fn age(created: Option<i64>) -> String {
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let secs = (now - created.unwrap_or(now)).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// `all`: the peer groups' anchors too, and every row's group.
pub async fn list(as_json: bool, all: bool) -> anyhow::Result<i32> {
    let engine = Engine::connect().await?;
    let mut rooms = room::all_rooms(&engine).await?;
    // The peer anchors are infrastructure, not rooms: hidden unless `--all`,
    // swept by `stop --all`.
    rooms.retain(|c| all || !peers::is_anchor(c.labels.as_ref()));
    rooms.sort_by_key(name);
    // Each room's repository and branch, read from its folder on this host;
    // a repository's rooms (its worktrees' too) then stand together.
    let rooms: Vec<(ContainerSummary, Option<Checkout>)> = rooms
        .into_iter()
        .map(|c| {
            let folder = label(&c, labels::LOCAL_FOLDER);
            let checkout = (!folder.is_empty()).then(|| room::worktree::checkout_of(Path::new(folder))).flatten();
            (c, checkout)
        })
        .collect();
    let groups =
        worktree::grouped(rooms.into_iter().map(|(c, k)| (k.as_ref().map(|k| k.repository.clone()), (c, k))).collect());
    // The image's program (overrideCommand: false) of each running room that
    // has one: a link each, paid only by such rooms.
    let mut programs = std::collections::HashMap::new();
    for (c, _) in groups.iter().flat_map(|(_, members)| members) {
        let running = c.state == Some(bollard::models::ContainerSummaryStateEnum::RUNNING);
        if !running {
            continue;
        }
        let command = c.command.as_deref().unwrap_or("");
        let words: Vec<String> = if command.split(' ').next().is_some_and(workroomd::room::is_daemon_path) {
            command.split(' ').map(str::to_string).collect()
        } else {
            // Podman lists a container's command without its entrypoint,
            // which holds the daemon and the program: read it.
            let id = c.id.as_deref().unwrap_or_default();
            let inspected = engine.inspect_container(id).await.ok().flatten();
            inspected.and_then(|i| i.config?.entrypoint).unwrap_or_default()
        };
        if room::program::has_program(&words) {
            if let Some(line) = room::program::state(&engine, c.id.as_deref().unwrap_or_default()).await {
                programs.insert(name(c), line);
            }
        }
    }
    if as_json {
        let items: Vec<_> = groups
            .iter()
            .flat_map(|(_, members)| members)
            .map(|(c, checkout)| {
                let mut item = json!({
                    "name": name(c),
                    "id": c.id,
                    "state": c.state.map(|s| s.to_string()),
                    "image": c.image,
                    "workspace": label(c, labels::LOCAL_FOLDER),
                    "repository": checkout.as_ref().map(|k| &k.repository),
                    "branch": checkout.as_ref().and_then(|k| k.head.branch()),
                    "compose_project": room::compose::project_of(c),
                    "platform": platform(c),
                    "created": c.created,
                    "program": programs.get(&name(c)),
                    // As the room was made (its label): `{}` when uncapped.
                    "caps": Caps::of_labels(c.labels.as_ref()).json(),
                });
                if all {
                    let facts = peers::RoomPeerFacts::of_labels(c.labels.as_ref());
                    let role = if peers::is_anchor(c.labels.as_ref()) { "peer-anchor" } else { "room" };
                    item["role"] = json!(role);
                    item["peer_group"] = json!(facts.group);
                    item["peer_uid"] = json!(facts.uid);
                }
                item
            })
            .collect();
        output::print_json(&json!(items))?;
        return Ok(0);
    }
    if all {
        let rows: Vec<Vec<String>> = groups
            .iter()
            .flat_map(|(_, members)| members)
            .map(|(c, _)| {
                vec![
                    name(c),
                    c.state.map(|s| s.to_string()).unwrap_or_default(),
                    peers::group_column(c.labels.as_ref()),
                    age(c.created),
                    label(c, labels::LOCAL_FOLDER).to_string(),
                ]
            })
            .collect();
        output::print(&output::table(&["NAME", "STATE", "PEER GROUP", "AGE", "WORKSPACE"], &rows))?;
        return Ok(0);
    }
    // The compose project and the caps are columns only when a listed
    // room has one.
    let members = || groups.iter().flat_map(|(_, members)| members);
    let compose = members().any(|(c, _)| room::compose::project_of(c).is_some());
    let capped = members().any(|(c, _)| Caps::of_labels(c.labels.as_ref()) != Caps::default());
    let rows: Vec<Vec<String>> = members()
        .map(|(c, checkout)| {
            let mut row = vec![
                name(c),
                c.state.map(|s| s.to_string()).unwrap_or_default(),
                c.image.clone().unwrap_or_default(),
                platform(c).to_string(),
                age(c.created),
                checkout.as_ref().map_or_else(|| "-".to_string(), |k| k.head.shown()),
                label(c, labels::LOCAL_FOLDER).to_string(),
            ];
            if compose {
                row.push(room::compose::project_of(c).unwrap_or("-").to_string());
            }
            if capped {
                row.push(Caps::of_labels(c.labels.as_ref()).summary());
            }
            row
        })
        .collect();
    // Above each repository's rooms its main checkout, when any room is in
    // one; the image's program (overrideCommand: false) under its room.
    let headed = groups.iter().any(|(repository, _)| repository.is_some());
    let mut above = Vec::new();
    for (repository, members) in &groups {
        for (i, (c, _)) in members.iter().enumerate() {
            let heading = match repository {
                _ if i > 0 || !headed => None,
                Some(r) => Some(format!("repository {}", r.display())),
                None => Some("not in a repository".to_string()),
            };
            above.push((heading, programs.get(&name(c))));
        }
    }
    let mut out = String::new();
    let table = format_list(&rows, compose, capped);
    let mut lines = table.lines();
    if let Some(header) = lines.next() {
        out.push_str(header);
        out.push('\n');
    }
    for (line, (heading, program)) in lines.zip(above) {
        if let Some(heading) = heading {
            out.push_str(&heading);
            out.push('\n');
        }
        out.push_str(line);
        out.push('\n');
        if let Some(program) = program {
            out.push_str(&format!("  the image's program {program}\n"));
        }
    }
    output::print(&out)?;
    Ok(0)
}

/// The table `workroom list` prints: name, state, image, platform, age,
/// branch, workspace, then the compose project and the caps when the rows
/// carry those cells.
fn format_list(rows: &[Vec<String>], compose: bool, capped: bool) -> String {
    let mut headers = vec!["NAME", "STATE", "IMAGE", "PLATFORM", "AGE", "BRANCH", "WORKSPACE"];
    if compose {
        headers.push("PROJECT");
    }
    if capped {
        headers.push("CAPS");
    }
    output::table(&headers, rows)
}

/// The rooms a command acts on: a name, `--all`, or the workspace's room.
async fn targets(
    engine: &Engine,
    name_arg: Option<&str>,
    all: bool,
    folder: &std::path::Path,
) -> anyhow::Result<Vec<ContainerSummary>> {
    let rooms = room::all_rooms(engine).await?;
    if all {
        return Ok(peers::sweep_order(rooms, |c| c.labels.as_ref()));
    }
    let rooms: Vec<_> = rooms.into_iter().filter(|c| !peers::is_anchor(c.labels.as_ref())).collect();
    if let Some(n) = name_arg {
        let found: Vec<_> = rooms.into_iter().filter(|c| room::resolve::names(n, &name(c), c.id.as_deref())).collect();
        if found.is_empty() {
            bail!("no room named {n} (`workroom list` shows the rooms; only containers made by workroom are touched)");
        }
        return Ok(found);
    }
    let folder = std::path::absolute(folder)?;
    let mut found = room::find_by_folder(engine, &folder).await?;
    found.retain(|c| !peers::is_anchor(c.labels.as_ref()));
    if found.is_empty() {
        bail!("no room for {}; `workroom up` makes one", folder.display());
    }
    Ok(found)
}

pub async fn stop(name_arg: Option<&str>, all: bool, folder: &std::path::Path) -> anyhow::Result<i32> {
    let engine = Engine::connect().await?;
    for c in targets(&engine, name_arg, all, folder).await? {
        let n = name(&c);
        crate::forward::state::stop_background(&n);
        // A compose room with `shutdownAction: stopCompose` stops its project.
        if room::compose::stop(&engine, &c, &super::on_stderr()).await? {
            eprintln!("stopped {n} and compose project {}", room::compose::project_of(&c).unwrap_or_default());
            continue;
        }
        engine.stop(c.id.as_deref().unwrap_or(&n), STOP_GRACE).await?;
        eprintln!("stopped {n}");
    }
    Ok(0)
}

pub async fn down(name_arg: Option<&str>, all: bool, folder: &std::path::Path, volumes: bool) -> anyhow::Result<i32> {
    let engine = Engine::connect().await?;
    for c in targets(&engine, name_arg, all, folder).await? {
        remove_room(&engine, &c, volumes).await?;
    }
    Ok(0)
}

/// `down --worktree NAME`: the room of the worktree NAME, then the worktree.
/// Everything that would refuse is checked before anything is removed, so
/// a refusal leaves both as they were. The branch is kept.
pub async fn down_worktree(folder: &std::path::Path, name: &str, force: bool, volumes: bool) -> anyhow::Result<i32> {
    use room::worktree::{self, Repository, WorktreeError};
    let repo = Repository::of(folder)?;
    let settings = crate::settings::load(&repo.current, crate::settings::Flags::default())?;
    let place = repo.place(settings.worktrees.as_deref(), name);
    let listed = repo
        .listed(&place)
        .cloned()
        .ok_or_else(|| WorktreeError::NoWorktree { name: name.to_string(), path: place.display().to_string() })?;
    if !force {
        let facts = worktree::removal_facts(&listed)?;
        if let Some(why) = crate::plan::worktree::refusal(&place, name, &facts) {
            return Err(WorktreeError::Refused(why).into());
        }
    }
    let engine = Engine::connect().await?;
    let mut rooms = room::find_by_folder(&engine, &place).await?;
    rooms.retain(|c| !peers::is_anchor(c.labels.as_ref()));
    for c in &rooms {
        remove_room(&engine, c, volumes).await?;
    }
    worktree::remove(&repo, &place, force)?;
    match &listed.branch {
        Some(branch) => eprintln!(
            "removed the worktree {}; the branch {branch} is kept (`git branch -D {branch}` deletes it)",
            place.display()
        ),
        None => eprintln!("removed the worktree {}", place.display()),
    }
    Ok(0)
}

/// Removes one room: its forwarder, its container (or compose project, by
/// its `shutdownAction`), its workspace volume when asked, its notes.
async fn remove_room(engine: &Engine, c: &ContainerSummary, volumes: bool) -> anyhow::Result<()> {
    let n = name(c);
    crate::forward::state::stop_background(&n);
    // A compose room with `shutdownAction: stopCompose` removes its project.
    let project = room::compose::down(engine, c, volumes, &super::on_stderr()).await?;
    if !project {
        engine.remove(c.id.as_deref().unwrap_or(&n), volumes).await?;
    }
    // The workspace volume is the room's truth on an engine that cannot
    // see the folder: kept unless asked, so `up` finds it again.
    if let Some(volume) = crate::plan::workspace::Decision::of_labels(c.labels.as_ref()).volume {
        if volumes {
            engine.remove_volume(&volume).await?;
            room::sync::forget(&n);
            eprintln!("removed the workspace volume {volume}");
        } else {
            eprintln!("kept the workspace volume {volume} (`workroom down --volumes` removes it)");
        }
    }
    if let Some(id) = &c.id {
        room::ready::forget(id);
        room::notes::forget(id);
    }
    crate::egress::store::remove(&n);
    match room::compose::project_of(c).filter(|_| project) {
        Some(p) => eprintln!("removed {n} and compose project {p}"),
        None => eprintln!("removed {n}"),
    }
    Ok(())
}

pub async fn logs(name_arg: Option<&str>, folder: &std::path::Path, follow: bool) -> anyhow::Result<i32> {
    use futures_util::StreamExt;
    use std::io::Write;
    let engine = Engine::connect().await?;
    let c = targets(&engine, name_arg, false, folder).await?.remove(0);
    let stream = engine.logs(c.id.as_deref().unwrap_or_default(), follow);
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        match item? {
            crate::engine::LogChunk::Stderr(message) => {
                let _ = std::io::stderr().write_all(&message);
            }
            crate::engine::LogChunk::Stdout(message) => output::print(&String::from_utf8_lossy(&message))?,
        }
    }
    // The daemon's log says each memory kill; the processes it did not
    // start (an exec's) only the engine can name, from the events it
    // still keeps of this start. A log that ends has them after it.
    let id = c.id.as_deref().unwrap_or_default();
    let started_at = match engine.inspect_container(id).await? {
        Some(i) => i.state.and_then(|s| s.started_at).unwrap_or_default(),
        None => return Ok(0),
    };
    // Naming is a courtesy: an engine that cannot replay these events
    // (Podman's API filters differently) leaves the daemon's lines alone.
    let events = engine.memory_events(id, &started_at).await.unwrap_or_default();
    for line in crate::plan::memory_kills::kills(&events).iter().filter_map(crate::plan::memory_kills::line) {
        let _ = writeln!(std::io::stderr(), "{line}");
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_columns_stay_aligned_when_a_room_name_is_longer_than_the_column() {
        let long = format!("workroom-{}-1a2b3c4d", "a-very-long-workspace-folder-name-indeed");
        let row = |n: &str, image: &str| {
            let cells = [n, "running", image, "linux/amd64", "5m", "feat-a", "/src/x"];
            cells.map(str::to_string).to_vec()
        };
        let rows = vec![
            row(&long, "workroom-fixture/busybox:1"),
            row("workroom-x-00000000", "workroom-build/a-rather-long-built-image-name:latest"),
        ];
        let text = format_list(&rows, false, false);
        let lines: Vec<&str> = text.lines().collect();
        // Where each header word starts: every row has a cell starting there.
        let header = lines[0].as_bytes();
        let starts: Vec<usize> = (1..header.len()).filter(|&i| header[i - 1] == b' ' && header[i] != b' ').collect();
        assert_eq!(starts.len(), 6, "{text}");
        for at in starts {
            for line in &lines[1..] {
                let line = line.as_bytes();
                assert!(line[at - 1] == b' ' && line[at] != b' ', "a cell does not start at {at} in:\n{text}");
            }
        }
    }
}
