//! CPU seconds spent by the processes on a transfer's path, for the
//! throughput benches: the room's `workroomd serve` and `workroomd relay`
//! (found with `docker top`, as the engine sees the room's processes), the
//! host side the caller names, and Docker's exec plumbing (dockerd and the
//! room's containerd-shim) for comparison. Read from `/proc/PID/stat` before
//! and after, so a process must live through the whole transfer to count.

use std::collections::BTreeMap;
use std::process::Command;

/// `/proc/PID/stat` counts in clock ticks; Linux reports 100 a second to
/// user space on every architecture it runs on here.
const TICKS_PER_SECOND: f64 = 100.0;

pub struct Sample {
    /// name → (pid, utime + stime in ticks)
    ticks: BTreeMap<String, Vec<(u32, u64)>>,
}

/// The processes to follow: `host` (name, pid) pairs named by the caller,
/// and the room's own.
pub fn sample(room: &str, host: &[(&str, u32)]) -> Sample {
    let mut ticks: BTreeMap<String, Vec<(u32, u64)>> = BTreeMap::new();
    for (name, pid) in host {
        ticks.entry((*name).to_owned()).or_default().extend(stat(*pid).map(|t| (*pid, t)));
    }
    let top = Command::new("docker").args(["top", room, "-o", "pid,args"]).output().expect("docker top");
    for line in String::from_utf8_lossy(&top.stdout).lines().skip(1) {
        let mut fields = line.split_whitespace();
        let Some(pid) = fields.next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        let args: Vec<&str> = fields.collect();
        let name = match args.get(1).copied() {
            Some("relay") if args[0].ends_with("workroomd") => "relay",
            Some("serve") if args[0].ends_with("workroomd") => "daemon",
            _ => continue,
        };
        if let Some(t) = stat(pid) {
            ticks.entry(name.to_owned()).or_default().push((pid, t));
            if name == "relay" {
                if let Some(shim) = parent(pid) {
                    ticks.entry("containerd-shim".to_owned()).or_default().extend(stat(shim).map(|t| (shim, t)));
                }
            }
        }
    }
    let dockerd = Command::new("pidof").arg("dockerd").output().expect("pidof");
    for pid in String::from_utf8_lossy(&dockerd.stdout).split_whitespace().filter_map(|p| p.parse().ok()) {
        ticks.entry("dockerd".to_owned()).or_default().extend(stat(pid).map(|t| (pid, t)));
    }
    for list in ticks.values_mut() {
        list.sort();
        list.dedup();
    }
    Sample { ticks }
}

impl Sample {
    /// CPU seconds each process spent since `before`, per GiB of `bytes`,
    /// as `name=seconds` words. Processes that were not there both times
    /// are left out.
    pub fn per_gib_since(&self, before: &Sample, bytes: u64) -> String {
        let gib = bytes as f64 / (1u64 << 30) as f64;
        let mut words = Vec::new();
        for (name, after) in &self.ticks {
            let Some(earlier) = before.ticks.get(name) else { continue };
            let spent: u64 = after
                .iter()
                .filter_map(|(pid, t)| earlier.iter().find(|(p, _)| p == pid).map(|(_, t0)| t.saturating_sub(*t0)))
                .sum();
            words.push(format!("{name}={:.2}", spent as f64 / TICKS_PER_SECOND / gib));
        }
        words.join(" ")
    }
}

/// utime + stime of a process, in ticks.
fn stat(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: count fields
    // from the last `)`. utime and stime are fields 14 and 15.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

fn parent(pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    rest.split(' ').nth(1)?.parse().ok()
}
