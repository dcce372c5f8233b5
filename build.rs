//! Builds the static in-room daemon and hands its path to the host CLI, which
//! embeds it (`include_bytes!`), so one `cargo build` yields a `workroom` that
//! carries its daemon and nothing is downloaded at run time (docs/adr/0002).
//!
//! The daemon must be a static binary (it runs on busybox-only and musl images)
//! and only `x86_64-unknown-linux-gnu` is installed, so it is linked with
//! `+crt-static`. Cargo has no stable per-package rustflags, so the daemon is
//! built by a nested cargo with its own target folder; the host CLI stays a
//! normal dynamic binary (static glibc would break NSS lookups on the host).
//!
//! `WORKROOM_DAEMON_PREBUILT=/path` skips the nested build (packagers, or a
//! daemon built elsewhere).

use std::env;
use std::path::PathBuf;
use std::process::Command;

const TARGET: &str = "x86_64-unknown-linux-gnu";

fn main() {
    println!("cargo:rerun-if-env-changed=WORKROOM_DAEMON_PREBUILT");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let daemon = match env::var_os("WORKROOM_DAEMON_PREBUILT") {
        Some(path) => PathBuf::from(path),
        None => build_static_daemon(),
    };
    // Copy into OUT_DIR so the embedded bytes are a stable input of this crate.
    let embedded = out.join("workroomd");
    std::fs::copy(&daemon, &embedded).unwrap_or_else(|e| panic!("copy daemon {} to OUT_DIR: {e}", daemon.display()));
    println!("cargo:rustc-env=WORKROOM_EMBEDDED_DAEMON={}", embedded.display());
}

fn build_static_daemon() -> PathBuf {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
    for watched in ["workroomd/src", "workroomd/Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", manifest_dir.join(watched).display());
    }
    // A folder of its own: sharing the outer target folder would deadlock on
    // its lock, and a folder under OUT_DIR would rebuild from scratch for every
    // profile of the outer build.
    let target_root = env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| manifest_dir.join("target"));
    let target_dir = target_root.join("daemon");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&manifest_dir)
        .args(["build", "--package", "workroomd", "--bin", "workroomd", "--profile", "daemon"])
        .args(["--target", TARGET])
        .arg("--target-dir")
        .arg(&target_dir)
        // Only the daemon gets crt-static; build scripts and proc macros of the
        // nested build are host artifacts and stay dynamic because --target is given.
        .env("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=+crt-static")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTC_WORKSPACE_WRAPPER");
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
    let status = cmd.status().expect("run cargo to build the static daemon");
    assert!(status.success(), "building the static workroomd failed ({status})");
    target_dir.join(TARGET).join("daemon").join("workroomd")
}
