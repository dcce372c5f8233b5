//! The boot id: changes with each start of the container, stays the same
//! through a daemon hand-off. Derived, not stored: the host kernel's boot id,
//! our pid and our process start time. A container start makes a new daemon
//! process (new start time); `execve` in a hand-off keeps pid and start time.
//! (The container's PID 1 is not used: in a room that joins the peer anchor's
//! PID namespace, PID 1 is the anchor.)

pub fn boot_id() -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let seed = format!("{}|{}|{}", kernel.trim(), std::process::id(), start_time(&stat).unwrap_or(0));
    format!("{:016x}", fnv1a(seed.as_bytes()))
}

/// Field 22 of `/proc/self/stat`, counted after the `)` that ends the command
/// name (which may itself hold spaces or parentheses).
fn start_time(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// FNV-1a, written out so the id is the same whichever binary computes it
/// (std's hasher may change between Rust releases; a hand-off may cross one).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_is_read_past_a_command_name_with_spaces() {
        let stat = "42 (a b) c) S 1 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 123456 1000 10";
        assert_eq!(start_time(stat), Some(123456));
    }

    #[test]
    fn the_boot_id_is_stable_within_a_process() {
        assert_eq!(boot_id(), boot_id());
        assert_eq!(boot_id().len(), 16);
    }
}
