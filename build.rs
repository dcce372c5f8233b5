//! Builds the static in-room daemons and hands their paths to the host CLI,
//! which embeds them (`include_bytes!`), so one `cargo build` yields a
//! `workroom` that carries its daemons and nothing is downloaded at run time
//! (docs/adr/0002).
//!
//! Two daemons, x86_64 and aarch64, both for musl: static by construction
//! (they run on busybox-only and musl images), no NSS, one code path for
//! both. They are linked with the toolchain's own `rust-lld`, so no cross C
//! toolchain is needed. The daemon of the host's own architecture is
//! required; the other is built when its Rust target is installed, else the
//! build says in one line how to add it and the host refuses rooms of that
//! platform.
//!
//! Cargo has no stable per-package rustflags or targets, so the daemons are
//! built by a nested cargo with its own target folder (one invocation, both
//! `--target`s); the host CLI stays a normal dynamic binary. A release build
//! of the host gets the `daemon` profile (LTO, smallest); any other build the
//! `daemon-dev` profile (no LTO, incremental), because two LTO links made
//! every daemon edit cost minutes in `cargo test` (figures in the ADR).
//!
//! `WORKROOM_DAEMON_PREBUILT_X86_64=/path` and `WORKROOM_DAEMON_PREBUILT_AARCH64=/path`
//! skip that daemon's build (packagers, or a daemon built elsewhere).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Daemon {
    /// As `CARGO_CFG_TARGET_ARCH` and `uname -m` spell it.
    arch: &'static str,
    target: &'static str,
    /// ELF `e_machine`, to check a prebuilt daemon is the arch it claims.
    machine: u16,
    /// Names the variables: `WORKROOM_DAEMON_PREBUILT_<X>`, `WORKROOM_EMBEDDED_DAEMON_<X>`.
    suffix: &'static str,
}

const DAEMONS: [Daemon; 2] = [
    Daemon { arch: "x86_64", target: "x86_64-unknown-linux-musl", machine: 62, suffix: "X86_64" },
    Daemon { arch: "aarch64", target: "aarch64-unknown-linux-musl", machine: 183, suffix: "AARCH64" },
];

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let host_arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let sysroot = sysroot();
    // Adding a target rewrites rustup's component list: build again then, so
    // a daemon that was missing gets built without touching any source.
    if let Some(components) = sysroot.as_ref().map(|s| s.join("lib/rustlib/components")).filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", components.display());
    }

    let mut found: Vec<Option<PathBuf>> = Vec::new();
    let mut to_build = Vec::new();
    for daemon in &DAEMONS {
        let prebuilt = format!("WORKROOM_DAEMON_PREBUILT_{}", daemon.suffix);
        println!("cargo:rerun-if-env-changed={prebuilt}");
        println!("cargo:rerun-if-env-changed={}", linker_env(daemon.target));
        if let Some(path) = env::var_os(&prebuilt) {
            found.push(Some(PathBuf::from(path)));
        } else if sysroot.as_deref().is_none_or(|s| installed(s, daemon.target)) {
            to_build.push(daemon.target);
            found.push(None);
        } else if daemon.arch == host_arch {
            fail(&format!(
                "the Rust target {} is not installed, and the daemon for this machine's own rooms needs it: \
                 `rustup target add {}`",
                daemon.target, daemon.target
            ));
        } else {
            println!(
                "cargo:warning=no {} daemon: this workroom will refuse linux/{} rooms; `rustup target add {}` adds it",
                daemon.arch,
                if daemon.arch == "aarch64" { "arm64" } else { "amd64" },
                daemon.target
            );
            found.push(None);
        }
    }
    let built = if to_build.is_empty() { None } else { Some(build_static_daemons(&to_build)) };

    for (daemon, prebuilt) in DAEMONS.iter().zip(found) {
        let path = prebuilt.or_else(|| {
            let (dir, profile) = built.as_ref()?;
            to_build.contains(&daemon.target).then(|| dir.join(daemon.target).join(profile).join("workroomd"))
        });
        // Copied into OUT_DIR so the embedded bytes are a stable input of this
        // crate; an empty file stands for a daemon this build does not carry.
        let embedded = out.join(format!("workroomd-{}", daemon.arch));
        let bytes = match &path {
            Some(path) => std::fs::read(path).unwrap_or_else(|e| fail(&format!("read daemon {}: {e}", path.display()))),
            None => Vec::new(),
        };
        if let Some(path) = &path {
            if elf_machine(&bytes) != Some(daemon.machine) {
                fail(&format!("{} is not an {} Linux executable", path.display(), daemon.arch));
            }
        }
        std::fs::write(&embedded, &bytes)
            .unwrap_or_else(|e| fail(&format!("write the daemon to {}: {e}", embedded.display())));
        println!("cargo:rustc-env=WORKROOM_EMBEDDED_DAEMON_{}={}", daemon.suffix, embedded.display());
    }
}

/// Builds the daemons for `targets` in one nested cargo; returns its target
/// folder and the profile folder the binaries are in.
fn build_static_daemons(targets: &[&str]) -> (PathBuf, &'static str) {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
    // Cargo.toml: the daemon profiles live there.
    for watched in ["workroomd/src", "workroomd/Cargo.toml", "Cargo.lock", "Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", manifest_dir.join(watched).display());
    }
    let profile = if env::var("PROFILE").as_deref() == Ok("release") { "daemon" } else { "daemon-dev" };
    // A folder of its own: sharing the outer target folder would deadlock on
    // its lock, and a folder under OUT_DIR would rebuild from scratch for every
    // profile of the outer build.
    let target_root = env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| manifest_dir.join("target"));
    let target_dir = target_root.join("daemon");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&manifest_dir)
        .args(["build", "--package", "workroomd", "--bin", "workroomd", "--profile", profile])
        .args(targets.iter().flat_map(|t| ["--target", t]))
        .arg("--target-dir")
        .arg(&target_dir)
        // musl links statically by default; said anyway, as it is the point.
        // Build scripts and proc macros of the nested build are host
        // artifacts and do not get it, because --target is given.
        .env("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=+crt-static")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTC_WORKSPACE_WRAPPER");
    for target in targets {
        let linker = linker_env(target);
        if env::var_os(&linker).is_none() {
            cmd.env(linker, "rust-lld");
        }
    }
    // Cargo exports these to build scripts; a nested cargo must not inherit them.
    for (key, _) in env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("CARGO_FEATURE_")
            || key.starts_with("CARGO_CFG_")
            || key.starts_with("DEP_")
            || key == "CARGO_PRIMARY_PACKAGE"
            || key == "CARGO_MANIFEST_LINKS"
        {
            cmd.env_remove(key);
        }
    }
    let status = cmd.status().unwrap_or_else(|e| fail(&format!("run cargo to build the static daemons: {e}")));
    if !status.success() {
        fail(&format!("building the static workroomd for {} failed ({status})", targets.join(" and ")));
    }
    (target_dir, profile)
}

fn linker_env(target: &str) -> String {
    format!("CARGO_TARGET_{}_LINKER", target.to_uppercase().replace('-', "_"))
}

fn sysroot() -> Option<PathBuf> {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc).args(["--print", "sysroot"]).output().ok()?;
    out.status.success().then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Whether the standard library for `target` is installed. Without a sysroot
/// to look in (an unusual rustc), the nested build is tried and says itself.
fn installed(sysroot: &Path, target: &str) -> bool {
    sysroot.join("lib/rustlib").join(target).join("lib").is_dir()
}

/// `e_machine` of a 64-bit little-endian ELF.
fn elf_machine(bytes: &[u8]) -> Option<u16> {
    let h = bytes.get(..20)?;
    (h[..4] == *b"\x7fELF" && h[4] == 2 && h[5] == 1).then(|| u16::from_le_bytes([h[18], h[19]]))
}

/// One line on stderr, which cargo shows, and a failed build: clearer than a
/// panic's message and backtrace note.
fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(1)
}
