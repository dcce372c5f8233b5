//! The daemon binary a room gets: the one for the room's platform that this
//! workroom carries (the pick is `plan::platform`), or `WORKROOM_DAEMON=/path`
//! for development (a freshly built daemon without rebuilding the host CLI;
//! it stands in for the daemon of its own architecture, read from its ELF
//! header, and rooms of the other keep the carried one).

use crate::engine::{Engine, EngineError};
use crate::plan::platform::{self, Arch, PickError, Platform};
use bollard::models::ContainerInspectResponse;
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use workroomd::room;

pub const OVERRIDE_ENV: &str = "WORKROOM_DAEMON";

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot read the daemon named by {OVERRIDE_ENV} ({path})")]
    Read { path: String, source: std::io::Error },
    #[error("{OVERRIDE_ENV} ({path}) is not an x86_64 or aarch64 Linux executable")]
    NotOurs { path: String },
    #[error("no daemon for image {image}")]
    ForImage { image: String, source: PickError },
    #[error("no daemon for the peer anchor, which takes the engine's platform")]
    ForEngine { source: PickError },
    #[error("{room} runs a daemon for {platform}, which this workroom does not carry")]
    ForRoom { room: String, platform: String },
    #[error("no daemon for {room}")]
    NotCarried { room: String, source: PickError },
    #[error("{path} is an {got} daemon but {room} runs on {platform}")]
    WrongArch { path: String, got: Arch, room: String, platform: &'static str },
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// A daemon binary and the architecture it is for.
pub struct Daemon {
    pub arch: Arch,
    pub bytes: Cow<'static, [u8]>,
}

impl Daemon {
    pub fn digest(&self) -> String {
        digest(&self.bytes)
    }
}

/// The daemon for a room of `image` (present on the engine): its platform
/// decides, else the engine's; `WORKROOM_DAEMON_ARCH` overrides.
pub async fn for_image(engine: &Engine, image: &str) -> Result<Daemon, DaemonError> {
    let found =
        engine.inspect_image(image).await?.ok_or_else(|| EngineError::NotFound { what: format!("image {image}") })?;
    let platform = Platform::new(
        found.os.as_deref().unwrap_or(""),
        found.architecture.as_deref().unwrap_or(""),
        found.variant.as_deref().unwrap_or(""),
    );
    pick(engine, &platform, |source| DaemonError::ForImage { image: image.into(), source }).await
}

/// The daemon for a container of no image of its own (the peer anchor, shared
/// by rooms of both platforms): the engine's, so it never needs emulation.
pub async fn for_engine(engine: &Engine) -> Result<Daemon, DaemonError> {
    pick(engine, &Platform::default(), |source| DaemonError::ForEngine { source }).await
}

/// The daemon of a room as made: the platform its label names (no engine
/// call), for a hand-off or the advice after `up`.
pub fn for_room(c: &ContainerInspectResponse) -> Result<Daemon, DaemonError> {
    let room = c.name.as_deref().unwrap_or_default().trim_start_matches('/').to_string();
    let label = c.config.as_ref().and_then(|c| c.labels.as_ref()).and_then(|l| l.get(platform::PLATFORM_LABEL));
    let arch = Arch::of_room(label.map(String::as_str))
        .ok_or_else(|| DaemonError::ForRoom { room: room.clone(), platform: label.cloned().unwrap_or_default() })?;
    let over = overridden()?;
    if !carried(over.as_ref()).contains(&arch) {
        let source = PickError::NotCarried { arch, platform: arch.platform(), target: arch.target() };
        return Err(DaemonError::NotCarried { room, source });
    }
    Ok(daemon_of(arch, over))
}

/// A daemon given for a hand-off (`--binary`) must be for the room's
/// architecture; one that is no ELF of ours is left to the daemon's own
/// check, which names what is wrong with it.
pub fn check_fits(bytes: &[u8], path: &str, room: &ContainerInspectResponse) -> Result<(), DaemonError> {
    let want = for_room(room)?.arch;
    match Arch::of_elf(bytes) {
        Some(got) if got != want => Err(DaemonError::WrongArch {
            path: path.into(),
            got,
            room: room.name.as_deref().unwrap_or_default().trim_start_matches('/').into(),
            platform: want.platform(),
        }),
        _ => Ok(()),
    }
}

/// [`platform::pick`] with what it needs gathered; `refused` names whose
/// daemon it was.
async fn pick(
    engine: &Engine,
    image: &Platform,
    refused: impl FnOnce(PickError) -> DaemonError,
) -> Result<Daemon, DaemonError> {
    let over = overridden()?;
    let overridden_arch = std::env::var_os(platform::ARCH_ENV).map(|v| v.to_string_lossy().into_owned());
    // The engine is asked only when the image says nothing (rare: even an
    // imported rootfs gets the engine's platform).
    let engine_platform = match image.architecture.is_empty() {
        true => Some(engine.platform().await?),
        false => None,
    };
    let engine_platform = engine_platform.map(|(os, arch)| Platform::new(&os, &arch, ""));
    let arch = platform::pick(overridden_arch.as_deref(), image, engine_platform.as_ref(), &carried(over.as_ref()))
        .map_err(refused)?;
    Ok(daemon_of(arch, over))
}

/// What this build carries: the embedded daemons (one may be missing when its
/// Rust target was), and the override's architecture.
fn carried(over: Option<&(Arch, Vec<u8>)>) -> Vec<Arch> {
    Arch::ALL.into_iter().filter(|&a| !embedded(a).is_empty() || over.is_some_and(|(o, _)| *o == a)).collect()
}

fn daemon_of(arch: Arch, over: Option<(Arch, Vec<u8>)>) -> Daemon {
    match over {
        Some((o, bytes)) if o == arch => Daemon { arch, bytes: Cow::Owned(bytes) },
        _ => Daemon { arch, bytes: Cow::Borrowed(embedded(arch)) },
    }
}

fn embedded(arch: Arch) -> &'static [u8] {
    match arch {
        Arch::X86_64 => crate::EMBEDDED_DAEMON_X86_64,
        Arch::Aarch64 => crate::EMBEDDED_DAEMON_AARCH64,
    }
}

/// `WORKROOM_DAEMON`: the binary and the architecture its ELF header names.
fn overridden() -> Result<Option<(Arch, Vec<u8>)>, DaemonError> {
    let Some(path) = std::env::var_os(OVERRIDE_ENV) else { return Ok(None) };
    let shown = path.to_string_lossy().into_owned();
    let bytes = std::fs::read(&path).map_err(|source| DaemonError::Read { path: shown.clone(), source })?;
    let arch = Arch::of_elf(&bytes).ok_or(DaemonError::NotOurs { path: shown })?;
    Ok(Some((arch, bytes)))
}

/// A short digest naming a daemon build (for labels and hand-off checks).
pub fn digest(bytes: &[u8]) -> String {
    hex::encode(&Sha256::digest(bytes)[..8])
}

/// A tar to unpack at `/` that holds the daemon at [`room::DAEMON_PATH`],
/// with its folders, owned by root; the binary 0755, the folders 0755 (the
/// socket folder is made 0700 by the daemon itself).
pub fn upload_tar(binary: &[u8]) -> std::io::Result<Vec<u8>> {
    upload_tar_at(binary, room::DAEMON_PATH)
}

/// [`upload_tar`] for another absolute path (a hand-off's new binary).
pub fn upload_tar_at(binary: &[u8], at: &str) -> std::io::Result<Vec<u8>> {
    upload_tar_into(binary, at, "/")
}

/// A tar to unpack at the folder `into` (which holds `at`) that puts the
/// daemon at the absolute path `at`. A read-only room takes an upload only
/// into its volumes: there `into` is the daemon's own folder, not `/`.
pub fn upload_tar_into(binary: &[u8], at: &str, into: &str) -> std::io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    let path = std::path::Path::new(at)
        .strip_prefix(into)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{at} is not under {into}")))?;
    let mut dirs = Vec::new();
    let mut dir = std::path::Path::new(path).parent();
    while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
        dirs.push(d.to_path_buf());
        dir = d.parent();
    }
    for d in dirs.iter().rev() {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(0o755);
        header.set_size(0);
        header.set_uid(0);
        header.set_gid(0);
        tar.append_data(&mut header, d, std::io::empty())?;
    }
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(0o755);
    header.set_size(binary.len() as u64);
    header.set_uid(0);
    header.set_gid(0);
    tar.append_data(&mut header, path, binary)?;
    tar.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_daemon_override_says_the_os_error_once() {
        let source = std::fs::read("/nonexistent/workroomd").unwrap_err();
        let err = DaemonError::Read { path: "/nonexistent/workroomd".into(), source };
        let chain = format!("{:#}", anyhow::Error::new(err));
        assert_eq!(chain.matches("No such file or directory").count(), 1, "{chain}");
    }

    #[test]
    fn the_upload_tar_holds_the_daemon_executable_under_its_folders() {
        let tar_bytes = upload_tar(b"\x7fELF-test").unwrap();
        let mut archive = tar::Archive::new(&tar_bytes[..]);
        let entries: Vec<(String, u32, u64)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.path().unwrap().display().to_string(), e.header().mode().unwrap(), e.header().size().unwrap())
            })
            .collect();
        assert_eq!(
            entries,
            [
                (".workroom".to_string(), 0o755, 0),
                (".workroom/bin".to_string(), 0o755, 0),
                (".workroom/bin/workroomd".to_string(), 0o755, 9)
            ]
        );
    }

    /// Whether an ELF asks for a program interpreter (`PT_INTERP`): a
    /// dynamic executable does, a static one does not.
    fn has_interpreter(elf: &[u8]) -> bool {
        const PT_INTERP: u32 = 3;
        let u16_at = |at: usize| u16::from_le_bytes([elf[at], elf[at + 1]]) as usize;
        let phoff = u64::from_le_bytes(elf[32..40].try_into().unwrap()) as usize;
        let (size, count) = (u16_at(54), u16_at(56));
        (0..count).any(|i| {
            let at = phoff + i * size;
            u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) == PT_INTERP
        })
    }

    #[test]
    fn each_embedded_daemon_is_a_static_elf_of_its_arch_within_the_size_budget() {
        /// The budget of the design brief, per daemon.
        const BUDGET: usize = 4 << 20;
        for arch in Arch::ALL {
            let bytes = embedded(arch);
            if bytes.is_empty() {
                // A build without the target (its build script warned);
                // CI installs both.
                continue;
            }
            assert_eq!(Arch::of_elf(bytes), Some(arch), "the {arch} daemon's ELF header");
            assert!(!has_interpreter(bytes), "the {arch} daemon is static");
            assert!(bytes.len() <= BUDGET, "the {arch} daemon is {} bytes", bytes.len());
        }
        assert_eq!(
            Arch::of_elf(crate::EMBEDDED_DAEMON),
            Some(if cfg!(target_arch = "aarch64") { Arch::Aarch64 } else { Arch::X86_64 })
        );
    }
}
