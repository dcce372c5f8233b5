//! The workroomd binary: a static executable, so it runs on any image
//! (busybox-only, alpine, distroless) with no libc, no NSS and no shell.
//!
//! Subcommands:
//! - `serve [--entrypoint CMD]... [--program-user U] [--program-cwd DIR] [-- ARGV]`: the room's main
//!   process (under Docker's init); runs and restarts the image's program when given one.
//! - `relay`: stdio ⇄ the daemon socket, for `docker exec -i`.
//! - `anchor`: PID 1 of the peer anchor; reaps zombies.
//! - `own UID:GID MODE PATH`: a job for throwaway containers.
//! - `update-uid USER UID GID`: give the remote user the host's ids.
//! - `reference-marker claim|write|forget HOOK [TIME]`: the reference CLI's marker file of a hook,
//!   run as the remote user by a hook job.
//! - `git-credential get|store|erase`: git's credential helper, asking the host.
//! - `files ROOT [--skip PATH]...` / `files ROOT --remove PATH...`: a folder's files for `workroom sync`.
//! - `agents REGISTRY`: the live agent sessions of this room, as JSON (for `workroom agents`).
//! - `attach PANE [--create] [--detach-keys KEYS] [--size ROWSxCOLS]`: a terminal on a pane.
//! - `check-handoff`: reads a hand-off table on stdin; says whether this binary can take it over.
//! - `version`.

mod admit;
mod anchor;
mod attach;
mod bootid;
mod credentials;
mod dist;
mod egress;
mod entrypoints;
mod filelist;
mod forward;
mod handoff;
mod hooks;
mod jobs;
mod locale;
mod log;
mod oom;
mod pane;
mod panes;
mod relay;
mod report;
mod serve;
mod sessions;
mod spawn;
mod state;
mod typists;
mod uid;
mod worktrees;

use std::path::Path;
use workroomd::room;

/// dlmalloc rather than musl's own allocator. musl's (mallocng) hands a
/// freed block of the link's payload sizes (up to 127 KiB) back to the
/// kernel at once, so every data frame the daemon built or decoded was a
/// fresh `mmap`, 32 page faults and an `munmap` with its TLB flush: 90,000
/// to 230,000 page faults and a third of the daemon's CPU per GiB through a
/// forwarded port. dlmalloc keeps up to 2 MiB of free memory for reuse
/// (docs/adr/0002-daemon-embedded.md has the figures). It takes one lock per
/// call; the daemon's runtime is one thread, and nothing allocates between
/// `fork` and `exec` (spawn.rs), so a lock held across a fork cannot bite.
#[global_allocator]
static ALLOC: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

fn main() {
    // Every workroomd process is non-dumpable: rooms of a peer group share a
    // PID namespace, and a process of another room could otherwise open our
    // `/proc/PID/root` (this room's files, as root), `fd/` (a relay's pipes
    // to the host, the daemon's pty masters) or `environ`. Set at every
    // start, so it holds again after a hand-off's `execve`, which resets it.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("workroomd: cannot make itself non-dumpable: {e}");
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some("serve") => serve::run(&args[1..]),
        Some("relay") => relay::run(Path::new(room::SOCKET_PATH)),
        Some("anchor") => anchor::run(),
        Some("attach") => attach::run(&args[1..]),
        Some("check-handoff") => handoff::check_main(),
        Some("own") => jobs::own(&args[1..]),
        Some("update-uid") => jobs::update_uid(&args[1..]),
        Some("reference-marker") => hooks::reference_marker_job(&args[1..]),
        Some("git-credential") => credentials::helper(&args[1..]),
        Some("agents") => sessions::run(&args[1..]),
        Some("files") => filelist::run(&args[1..]),
        Some("locale") => locale::job(&args[1..]),
        Some("version" | "--version") => {
            println!("workroomd {}", workroomd::VERSION);
            0
        }
        Some("boot-id") => {
            println!("{}", bootid::boot_id());
            0
        }
        _ => {
            eprintln!("usage: workroomd serve|relay|anchor|own|version (workroomd {})", workroomd::VERSION);
            2
        }
    };
    std::process::exit(code);
}
