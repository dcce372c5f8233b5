//! `workroom sync pull [PATH]` / `workroom sync push [PATH]`: carry changes
//! between the workspace here and a room whose workspace is a volume (an
//! engine that cannot see this folder). A conflict is reported, never
//! resolved by overwriting; the exit status is then 1.

use super::WorkspaceArgs;
use crate::engine::Engine;
use crate::plan::sync::Direction;
use std::path::Path;

pub async fn run(ws: &WorkspaceArgs, direction: Direction, path: Option<&Path>) -> anyhow::Result<i32> {
    let resolved = ws.resolve(Default::default())?;
    let engine = Engine::connect().await?;
    let room = resolved.running(&engine).await?;
    let folder = &resolved.loaded.workspace.local_folder;
    let only = path.map(|p| relative_to(folder, p)).transpose()?;
    let said = super::on_stderr();
    let target = crate::room::sync::Target { id: &room.id, name: &room.name, container: &room.container };
    let report = crate::room::sync::sync(&engine, target, folder, direction, only.as_deref(), &said).await?;
    let p = &report.plan;
    let (verb, other) = match direction {
        Direction::Pull => ("pulled", "`workroom sync push` sends"),
        Direction::Push => ("pushed", "`workroom sync pull` brings"),
    };
    for path in &p.copy {
        eprintln!("{verb} {path}");
    }
    for path in &p.delete {
        eprintln!("deleted {path} (deleted on the other side)");
    }
    eprintln!(
        "{}: {verb} {} files, deleted {}, {} conflicts",
        room.name,
        p.copy.len(),
        p.delete.len(),
        p.conflicts.len()
    );
    if !p.other_way.is_empty() {
        eprintln!("{} files changed the other way; {other} them", p.other_way.len());
    }
    for path in &p.conflicts {
        eprintln!("conflict: {path} changed here and in {} since the last sync; neither side was touched", room.name);
    }
    if !p.conflicts.is_empty() {
        eprintln!(
            "resolve a conflict by making both sides the same (edit one, or copy it over: \
             `workroom exec -- cat PATH > PATH` takes the room's), then sync again"
        );
        return Ok(1);
    }
    Ok(0)
}

/// `PATH` relative to the workspace folder: as given when relative (to the
/// folder, as `git` paths are), or an absolute path inside it.
fn relative_to(folder: &Path, path: &Path) -> anyhow::Result<String> {
    let relative = match path.strip_prefix(folder) {
        Ok(r) => r.to_path_buf(),
        Err(_) if path.is_relative() => path.to_path_buf(),
        Err(_) => anyhow::bail!("{} is not inside the workspace {}", path.display(), folder.display()),
    };
    Ok(relative.to_string_lossy().into_owned())
}
