//! A room's life on the engine: `up` (image, create, daemon upload, start,
//! hooks), and finding, listing and stopping rooms.

pub mod daemon;
pub mod handoff;
pub mod hooks;
pub mod image;
pub mod up;

use crate::engine::{Engine, EngineError};
use crate::plan::labels;
use bollard::models::ContainerSummary;

/// Every container with our schema label: rooms, and later the peer anchor.
/// Nothing without the label is ever listed, stopped or removed.
pub async fn all_rooms(engine: &Engine) -> Result<Vec<ContainerSummary>, EngineError> {
    engine.list(&[labels::SCHEMA.to_string()]).await
}

/// The room of a workspace folder (by the reference CLI's label), if any.
pub async fn find_by_folder(engine: &Engine, folder: &std::path::Path) -> Result<Vec<ContainerSummary>, EngineError> {
    engine.list(&[labels::SCHEMA.to_string(), format!("{}={}", labels::LOCAL_FOLDER, folder.display())]).await
}
