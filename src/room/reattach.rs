//! What `up` says of a room made before it: whether this workroom can
//! drive it, and what still holds against it as made (peer drift, the
//! registry's owner, what was learnt of its users, nested containers, a
//! changed configuration). Said on every `up`, the fast path included, so
//! it costs no engine call but to move agent state once.

use super::make::{label, UpOptions};
use super::peers;
use crate::config::Loaded;
use crate::engine::Engine;
use crate::notices::Notices;
use crate::plan::metadata::{self, RoomMetadata};
use crate::plan::peers::{self as peer_plan, RoomPeerFacts};
use crate::plan::{caps, labels, run_args};
use anyhow::bail;
use bollard::models::ContainerInspectResponse;

/// What still holds against a room made before, said on every `up`, the
/// fast path included: from the inspect, a stat of the registry and a host
/// file, with no engine call unless agent state is to be moved.
pub(super) async fn say(
    engine: &Engine,
    loaded: &Loaded,
    options: &UpOptions,
    c: &ContainerInspectResponse,
    name: &str,
    recorded: Option<&RoomMetadata>,
    say: &Notices,
) {
    let scope = peers::scope_from_env();
    for w in warnings(c, name, options, scope.as_deref()) {
        say.warn(w);
    }
    if let Some(w) = caps_drift(loaded, options, c, name) {
        say.warn(w);
    }
    // A room from before the group kept agent state: decided from the
    // inspect; the room is read only when its state is to be copied.
    let own_config =
        recorded.is_some_and(|m| m.merged.remote_env.iter().any(|(k, _)| k == peer_plan::CLAUDE_CONFIG_ENV));
    if let Some(line) = peers::move_agent_state(engine, c, name, own_config).await {
        say.note(line);
    }
}

/// The warnings of a room made before, from its inspect and host files:
/// what still holds against it as made, and nested containers made
/// otherwise than the settings now say.
fn warnings(c: &ContainerInspectResponse, name: &str, options: &UpOptions, scope: Option<&str>) -> Vec<String> {
    let mut warnings = standing_warnings(c, name, options.peer.then_some(options.peer_group.as_str()), scope);
    let made_nested = label(c, crate::plan::nested::NESTED_LABEL);
    // A room the engine could not give nested containers was said so when
    // made; recreating it would not change that.
    let refused = made_nested == Some(crate::plan::nested::NESTED_REFUSED);
    let nested = made_nested == Some("1");
    if !refused && nested != options.shape.nested {
        let made = if nested { "on" } else { "off" };
        warnings.push(format!(
            "{name} was made with nested containers {made}; `workroom up --recreate` applies [containers] nested = {}",
            options.shape.nested
        ));
    }
    warnings
}

/// The room's caps as made against what the settings and `runArgs` ask
/// now: a changed cap is said, since only a new room can have it. Nothing
/// is said when `runArgs` cannot be read (the config-changed warning
/// already stands) or the caps cannot be decided (the next `--recreate`
/// says why).
fn caps_drift(loaded: &Loaded, options: &UpOptions, c: &ContainerInspectResponse, name: &str) -> Option<String> {
    let made = c.host_config.as_ref()?;
    let wanted_and_had = match loaded.model.source {
        // A compose room takes no runArgs, and its compose file may limit
        // the service (and mount /tmp) itself, which is not for a cap of
        // ours to weigh: the settings' caps it was made with are its label's.
        crate::config::Source::Compose(_) => {
            let had = caps::Caps::of_labels(c.config.as_ref().and_then(|c| c.labels.as_ref()));
            (caps::wanted(&options.caps, &Default::default(), &Default::default()), had)
        }
        _ => {
            let folder = &loaded.workspace.local_folder;
            let run = run_args::parse(&loaded.model.run_args, folder, &super::HostFiles).ok()?.host;
            (caps::wanted(&options.caps, &run, made), caps::Caps::of_container(c))
        }
    };
    let (wanted, had) = wanted_and_had;
    caps::drift(name, &had, &wanted.ok()?)
}

/// A room from an incompatible workroom cannot be driven; a config changed
/// since creation is said, not silently ignored.
pub(super) fn check_compatible(
    c: &ContainerInspectResponse,
    loaded: &Loaded,
    name: &str,
    say: &Notices,
) -> anyhow::Result<()> {
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
        say.warn(format!(
            "{} changed since {name} was made; `workroom up --recreate` applies the change",
            loaded.config_path.display()
        ));
    }
    Ok(())
}

/// Reattach: what still holds against the room as made. Peer drift both
/// ways (pure, from the inspect), the registry folder's owner (one stat),
/// and what `up` learnt at create about the room's users (a host file).
/// Warns, never refuses: the room still works, only its peer messaging
/// differs.
fn standing_warnings(
    c: &ContainerInspectResponse,
    name: &str,
    wants: Option<&str>,
    scope: Option<&str>,
) -> Vec<String> {
    let facts = RoomPeerFacts::of(c);
    let mut warnings: Vec<String> = peer_plan::drift(name, &facts, wants, scope).into_iter().collect();
    if let (Some((registry, _)), Some(uid)) = (&facts.registry, facts.uid) {
        warnings.extend(peers::registry_owner_warning(std::path::Path::new(registry), uid));
    }
    warnings.extend(c.id.as_deref().map(super::notes::read).unwrap_or_default());
    warnings
}

/// The metadata of a room made before this `up`: its image's label (by the
/// id it was made from, so a retag does not change it) under the current
/// devcontainer.json. When the image is gone, the room's own label stands
/// in for it, as the reference reads a room.
pub(super) async fn metadata(
    engine: &Engine,
    loaded: &Loaded,
    c: &ContainerInspectResponse,
    recorded: Option<&RoomMetadata>,
) -> anyhow::Result<RoomMetadata> {
    let shown = c.config.as_ref().and_then(|c| c.image.clone()).unwrap_or_default();
    let found = match c.image.as_deref() {
        Some(id) => engine.inspect_image(id).await?,
        None => None,
    };
    Ok(match (found, recorded) {
        (Some(image), _) => {
            metadata::for_new_room(loaded, &shown, super::image::facts(&image).metadata.as_deref(), &[])
        }
        (None, Some(recorded)) => recorded.clone(),
        (None, None) => {
            let name = c.name.as_deref().unwrap_or_default().trim_start_matches('/');
            metadata::of_container(loaded, name, label(c, labels::METADATA))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notices::{Level, Notice};
    use bollard::models::ContainerConfig;

    use crate::config::loaded_for_test as loaded;

    fn room(labels: &[(&str, &str)]) -> ContainerInspectResponse {
        let labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        ContainerInspectResponse {
            config: Some(ContainerConfig { labels: Some(labels), ..Default::default() }),
            ..Default::default()
        }
    }

    fn warned(text: &str) -> Notice {
        Notice { level: Level::Warning, text: text.to_string() }
    }

    #[test]
    fn a_room_whose_configuration_changed_since_it_was_made_is_warned_of_once_and_still_driven() {
        let (_dir, l) = loaded(r#"{"image": "debian"}"#);
        let c = room(&[(labels::SCHEMA, labels::SCHEMA_VERSION), (labels::CONFIG_HASH, "an-older-hash")]);
        let said = Notices::kept();
        check_compatible(&c, &l, "wr-room", &said).unwrap();
        let config = l.config_path.display();
        let expected = format!("{config} changed since wr-room was made; `workroom up --recreate` applies the change");
        assert_eq!(said.take(), [warned(&expected)]);
        let same = room(&[(labels::SCHEMA, labels::SCHEMA_VERSION), (labels::CONFIG_HASH, &labels::config_hash(&l))]);
        check_compatible(&same, &l, "wr-room", &said).unwrap();
        assert!(said.take().is_empty(), "an unchanged configuration says nothing");
    }

    #[test]
    fn a_container_of_another_schema_or_not_ours_is_refused_with_the_next_step_and_nothing_said() {
        let (_dir, l) = loaded(r#"{"image": "debian"}"#);
        let said = Notices::kept();
        let old = room(&[(labels::SCHEMA, "0"), (labels::VERSION, "0.0.1")]);
        let refused = check_compatible(&old, &l, "wr-room", &said).unwrap_err().to_string();
        assert!(
            refused.contains("made by workroom 0.0.1 (room schema 0") && refused.contains("up --recreate"),
            "{refused}"
        );
        let foreign = check_compatible(&room(&[]), &l, "wr-room", &said).unwrap_err().to_string();
        assert_eq!(foreign, "a container named wr-room exists but was not made by workroom; remove or rename it");
        assert!(said.take().is_empty());
    }

    #[test]
    fn nested_containers_made_otherwise_than_the_settings_say_are_warned_of_unless_the_engine_refused_them() {
        let on = UpOptions {
            shape: crate::plan::nested::RoomShape { nested: true, ..Default::default() },
            ..Default::default()
        };
        let made_off = room(&[]);
        assert_eq!(
            warnings(&made_off, "wr-room", &on, None),
            ["wr-room was made with nested containers off; `workroom up --recreate` applies [containers] nested = true"]
        );
        let made_on = room(&[(crate::plan::nested::NESTED_LABEL, "1")]);
        assert!(warnings(&made_on, "wr-room", &on, None).is_empty());
        let off = UpOptions::default();
        assert_eq!(
            warnings(&made_on, "wr-room", &off, None),
            ["wr-room was made with nested containers on; `workroom up --recreate` applies [containers] nested = false"]
        );
        let refused = room(&[(crate::plan::nested::NESTED_LABEL, crate::plan::nested::NESTED_REFUSED)]);
        assert!(
            warnings(&refused, "wr-room", &on, None).is_empty(),
            "recreating would not change what the engine refused"
        );
    }
}
