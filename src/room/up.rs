//! `workroom up`: make the room exist, run, and be ready, then run what is
//! due of its lifecycle. The decisions (name, create request, what is due)
//! are in `plan`; this file is the sequence of engine and daemon calls.
//!
//! A refused `up` leaves nothing behind: a container it created is removed,
//! with the named volumes the engine made for it.

use super::{daemon, hooks, image};
use crate::config::{Hook, Loaded};
use crate::engine::{Engine, EngineError};
use crate::link::RoomLink;
use crate::plan::{create, identity, labels};
use anyhow::{bail, Context as _};
use bollard::models::{ContainerInspectResponse, ContainerStateStatusEnum};
use std::time::{Duration, Instant};

/// How long `up` waits for a room another `up` is creating to start. A
/// create, upload and start take well under a second on a healthy engine;
/// past this the other `up` has most likely died and the room is half-made.
const PEER_CREATE_WAIT: Duration = Duration::from_secs(60);

/// How long a freshly started daemon may take to answer.
const DAEMON_READY_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Default)]
pub struct UpOptions {
    pub recreate: bool,
    /// Run postAttachCommand (skipped by `--skip-post-attach`).
    pub post_attach: bool,
}

#[derive(Debug, Clone)]
pub struct UpResult {
    pub name: String,
    pub container_id: String,
    pub remote_user: String,
    pub remote_workspace_folder: String,
    pub created: bool,
}

pub async fn up(engine: &Engine, loaded: &Loaded, options: &UpOptions) -> anyhow::Result<UpResult> {
    let name = identity::room_name(&loaded.workspace.local_folder, &loaded.config_path);
    if let Some(cmd) = loaded.model.lifecycle.get(Hook::Initialize) {
        hooks::run_on_host(cmd, &loaded.workspace.local_folder).await?;
    }
    let mut existing = engine.inspect_container(&name).await?;
    if let (Some(c), true) = (&existing, options.recreate) {
        eprintln!("removing {name} to recreate it");
        engine.remove(c.id.as_deref().unwrap_or(&name), false).await?;
        existing = None;
    }
    let (container, created) = match existing {
        Some(c) => (c, false),
        None => match create_room(engine, loaded, &name).await? {
            Created::Ours(c) => (c, true),
            Created::Theirs(c) => (c, false),
        },
    };
    check_compatible(&container, loaded, &name)?;
    let id = container.id.clone().unwrap_or_else(|| name.clone());
    ensure_running(engine, &container, &name).await?;

    let link = wait_for_daemon(engine, &id).await?;
    let remote_user = label(&container, labels::REMOTE_USER).unwrap_or("root").to_string();
    let container_env = container_env(&container);
    let ctx = hooks::HookContext::new(loaded, &remote_user, &container_env);
    hooks::run_due(&link, &ctx, options.post_attach).await?;
    super::handoff::advise(&link).await;
    Ok(UpResult {
        name,
        container_id: id,
        remote_user,
        remote_workspace_folder: loaded.workspace.folder.clone(),
        created,
    })
}

enum Created {
    /// We made it: our create won.
    Ours(ContainerInspectResponse),
    /// A concurrent `up` made it first.
    Theirs(ContainerInspectResponse),
}

/// Gets the image, creates the container, uploads the daemon and starts it.
/// On any failure after the create, the container and the volumes the engine
/// made for it are removed again.
async fn create_room(engine: &Engine, loaded: &Loaded, name: &str) -> anyhow::Result<Created> {
    let build_tag = format!("workroom-build/{}", name.trim_start_matches(identity::NAME_PREFIX));
    let (image, facts) = image::ensure(engine, loaded, &build_tag).await?;
    let plan = create::plan(name, &image, loaded, &facts)?;
    let binary = daemon::binary()?;
    let tar = daemon::upload_tar(&binary).context("pack the daemon for upload")?;

    let mut volumes_before = Vec::new();
    for v in &plan.named_volumes {
        if engine.volume_exists(v).await? {
            volumes_before.push(v.clone());
        }
    }
    let id = match engine.create_container(name, plan.body.clone()).await {
        Ok(id) => id,
        Err(EngineError::Refused { status: 409, .. }) => {
            // Another `up` of this workspace created it first: use theirs.
            let c = engine
                .inspect_container(name)
                .await?
                .with_context(|| format!("{name} was being created by another workroom and vanished"))?;
            return Ok(Created::Theirs(c));
        }
        Err(e) => return Err(e.into()),
    };
    let prepared = async {
        engine.upload(&id, "/", tar).await.context("upload the daemon into the room")?;
        engine.start(&id).await?;
        engine.inspect_container(&id).await?.with_context(|| format!("{name} vanished after its start"))
    }
    .await;
    match prepared {
        Ok(c) => Ok(Created::Ours(c)),
        Err(e) => {
            let _ = engine.remove(&id, true).await;
            for v in plan.named_volumes.iter().filter(|v| !volumes_before.contains(v)) {
                let _ = engine.remove_volume(v).await;
            }
            Err(e.context(format!("{name} was not made (removed again)")))
        }
    }
}

fn label<'a>(c: &'a ContainerInspectResponse, key: &str) -> Option<&'a str> {
    c.config.as_ref()?.labels.as_ref()?.get(key).map(String::as_str)
}

/// A room from an incompatible workroom cannot be driven; a config changed
/// since creation is said, not silently ignored.
fn check_compatible(c: &ContainerInspectResponse, loaded: &Loaded, name: &str) -> anyhow::Result<()> {
    match label(c, labels::SCHEMA) {
        Some(labels::SCHEMA_VERSION) => {}
        Some(other) => bail!(
            "{name} was made by workroom {} (room schema {other}, this workroom needs {}); recreate it with `workroom up --recreate`",
            label(c, labels::VERSION).unwrap_or("(unknown)"),
            labels::SCHEMA_VERSION
        ),
        None => bail!("a container named {name} exists but was not made by workroom; remove or rename it"),
    }
    if label(c, labels::CONFIG_HASH) != Some(&labels::config_hash(loaded)) {
        eprintln!(
            "warning: {} changed since {name} was made; `workroom up --recreate` applies the change",
            loaded.config_path.display()
        );
    }
    Ok(())
}

async fn ensure_running(engine: &Engine, c: &ContainerInspectResponse, name: &str) -> anyhow::Result<()> {
    let status = c.state.as_ref().and_then(|s| s.status);
    match status {
        Some(ContainerStateStatusEnum::RUNNING) => Ok(()),
        Some(ContainerStateStatusEnum::CREATED) => wait_started_by_peer(engine, name).await,
        Some(ContainerStateStatusEnum::PAUSED) => {
            bail!("{name} is paused; `docker unpause {name}` first")
        }
        _ => {
            engine.start(c.id.as_deref().unwrap_or(name)).await?;
            Ok(())
        }
    }
}

/// A container in `created` state is one another `up` is preparing (the
/// daemon is uploaded before the first start); starting it ourselves could
/// start it without its daemon. Wait for it instead.
async fn wait_started_by_peer(engine: &Engine, name: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + PEER_CREATE_WAIT;
    let mut pause = Duration::from_millis(20);
    loop {
        let c = engine.inspect_container(name).await?.with_context(|| format!("{name} vanished while starting"))?;
        match c.state.as_ref().and_then(|s| s.status) {
            Some(ContainerStateStatusEnum::CREATED) if Instant::now() < deadline => {}
            Some(ContainerStateStatusEnum::CREATED) => bail!(
                "{name} was created but never started (an interrupted `up`?); `workroom down` it and run `up` again"
            ),
            _ => return Ok(()),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

/// Connects to the daemon, retrying while it is still starting (the relay
/// fails until the daemon has bound its socket).
async fn wait_for_daemon(engine: &Engine, id: &str) -> anyhow::Result<RoomLink> {
    let deadline = Instant::now() + DAEMON_READY_WAIT;
    let mut pause = Duration::from_millis(5);
    loop {
        match RoomLink::connect(engine, id).await {
            Ok(link) => return Ok(link),
            Err(e) if e.is_retryable() && Instant::now() < deadline => {}
            Err(e) => return Err(anyhow::Error::new(e).context(format!("the daemon in {id} did not answer"))),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

fn container_env(c: &ContainerInspectResponse) -> std::collections::HashMap<String, String> {
    c.config
        .as_ref()
        .and_then(|c| c.env.as_ref())
        .map(|env| env.iter().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect())
        .unwrap_or_default()
}
