//! `outdated`, `upgrade`, `features info` and `features resolve-dependencies`.

use super::args::Parsed;
use super::log::Log;
use super::EXIT_FAILED;

fn not_yet(name: &str, log: Log) -> i32 {
    log.error(&format!("devcontainer {name}: not yet provided by workroom's devcontainer face"));
    EXIT_FAILED
}

pub(super) fn outdated(_p: &Parsed, log: Log) -> i32 {
    not_yet("outdated", log)
}

pub(super) fn upgrade(_p: &Parsed, log: Log) -> i32 {
    not_yet("upgrade", log)
}

pub(super) fn info(_p: &Parsed, log: Log) -> i32 {
    not_yet("features info", log)
}

pub(super) fn resolve_dependencies(_p: &Parsed, log: Log) -> i32 {
    not_yet("features resolve-dependencies", log)
}
