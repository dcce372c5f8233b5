//! workroom's own seccomp profile for rooms with nested containers: what
//! Docker's default profile refuses to a container without added
//! capabilities, with one widening: a process may make a user namespace and
//! a mount namespace, and mount inside them. That is all rootless podman and
//! crun need to run a container inside the room; nothing else Docker refuses
//! is allowed. ADR 0006 gives the reasoning for each group below.
//!
//! Written from the kernel's syscall tables (`seccomp/linux-x86-syscalls.txt`
//! keeps the names honest), seccomp(2) and
//! Documentation/userspace-api/seccomp_filter.rst, and Docker's documented
//! list of blocked calls; checked against the profile Docker 20.10 applies to
//! a container without capabilities (ADR 0006 has the comparison).
//!
//! The shape is the one Docker 20.10 reads (`defaultAction`,
//! `architectures`, `syscalls` of `names`/`action`/`errnoRet`/`args`). It
//! allows by default and lists what it denies. Two facts of that format shape
//! the rules:
//! - several `args` conditions in one rule are ANDed only when they name
//!   different arguments; runc turns conditions on the same argument into
//!   separate rules (ORed), so every rule here tests one argument once;
//! - a condition compares one argument: "any namespace flag but these" is
//!   written as one rule per forbidden flag (`flags & F == F`).

use serde::Serialize;

/// `clone`'s and `unshare`'s namespace flags (linux/sched.h).
const CLONE_NEWTIME: u64 = 0x0000_0080;
const CLONE_NEWNS: u64 = 0x0002_0000;
const CLONE_NEWCGROUP: u64 = 0x0200_0000;
const CLONE_NEWUTS: u64 = 0x0400_0000;
const CLONE_NEWIPC: u64 = 0x0800_0000;
const CLONE_NEWUSER: u64 = 0x1000_0000;
const CLONE_NEWPID: u64 = 0x2000_0000;
const CLONE_NEWNET: u64 = 0x4000_0000;

/// What a denied call returns, as under Docker's default.
const EPERM: u32 = 1;
/// What `clone3` returns: its flags sit in a struct seccomp cannot read, so
/// it cannot be filtered by flag; "not implemented" makes glibc (2.34+) fall
/// back to `clone`, whose flags can be. EPERM would be taken as a real
/// refusal and break thread creation. Docker's default does the same.
const ENOSYS: u32 = 38;

/// A group of calls denied outright, and why.
pub struct Denied {
    pub why: &'static str,
    pub names: &'static [&'static str],
}

/// Everything Docker's default profile refuses to a container without added
/// capabilities that the widening does not need, by reason. `clone`,
/// `clone3`, `unshare`, `setns` and `personality` are refused by argument in
/// [`profile`]; `mount`, `umount`, `umount2` and `pivot_root` are allowed.
pub const DENIED: &[Denied] = &[
    Denied {
        why: "load, replace or remove kernel code",
        names: &[
            "create_module",
            "init_module",
            "finit_module",
            "delete_module",
            "get_kernel_syms",
            "query_module",
            "kexec_load",
            "kexec_file_load",
        ],
    },
    Denied { why: "change the host's clock", names: &["clock_settime", "clock_settime64", "settimeofday", "stime"] },
    Denied {
        why: "act on the whole host: reboot, swap, accounting, names, the kernel log, quotas, terminals",
        names: &[
            "reboot",
            "swapon",
            "swapoff",
            "acct",
            "sethostname",
            "setdomainname",
            "syslog",
            "vhangup",
            "quotactl",
            "quotactl_fd",
            "lookup_dcookie",
            "fanotify_init",
            "nfsservctl",
            "bdflush",
            "_sysctl",
            "sysfs",
            "ustat",
            "uselib",
        ],
    },
    Denied {
        why: "the new mount API: not needed by crun, and each call a fresh way into mount code",
        names: &[
            "open_tree",
            "open_tree_attr",
            "move_mount",
            "fsopen",
            "fsconfig",
            "fsmount",
            "fspick",
            "mount_setattr",
        ],
    },
    Denied {
        why: "kernel keyrings: not namespaced, shared with the host",
        names: &["add_key", "request_key", "keyctl"],
    },
    Denied {
        why: "load programs into the kernel, trace it, or reach other processes' memory and files",
        names: &[
            "bpf",
            "perf_event_open",
            "userfaultfd",
            "process_vm_readv",
            "process_vm_writev",
            "process_madvise",
            "pidfd_getfd",
            "kcmp",
            "name_to_handle_at",
            "open_by_handle_at",
        ],
    },
    Denied {
        why: "NUMA memory placement: the host's memory, not the room's",
        names: &["mbind", "set_mempolicy", "set_mempolicy_home_node", "get_mempolicy", "migrate_pages", "move_pages"],
    },
    Denied {
        why: "memory protection keys (refused by Docker 20.10)",
        names: &["pkey_alloc", "pkey_free", "pkey_mprotect"],
    },
    Denied { why: "raw hardware I/O ports", names: &["iopl", "ioperm", "vm86", "vm86old"] },
    Denied {
        why: "obsolete or never implemented calls, kept out as Docker does",
        names: &[
            "afs_syscall",
            "getpmsg",
            "putpmsg",
            "security",
            "tuxcall",
            "vserver",
            "break",
            "ftime",
            "gtty",
            "stty",
            "idle",
            "lock",
            "mpx",
            "prof",
            "profil",
            "ulimit",
            "oldfstat",
            "oldlstat",
            "oldstat",
            "oldolduname",
            "olduname",
            "readdir",
            "sgetmask",
            "ssetmask",
            "sigaction",
            "signal",
            "sigpending",
            "sigsuspend",
            "nice",
        ],
    },
];

/// The calls the widening allows that Docker's default refuses: making user
/// and mount namespaces (by flag), joining them, and mounting inside them.
/// Each still needs CAP_SYS_ADMIN over the namespace it acts on, which a
/// process has only in namespaces it made: in the room's own they fail as
/// before.
pub const WIDENED: &[&str] = &["clone", "unshare", "setns", "mount", "umount", "umount2", "pivot_root"];

/// Namespaces that stay closed: a network namespace above all (the kernel's
/// network code, netfilter first, is where user-namespace exploits have
/// mostly been), and every other kind the inner containers do without by
/// sharing the room's (podman is set up for that in `room::nested`).
const CLOSED_NAMESPACES: &[u64] = &[CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWCGROUP];

/// `personality` values Docker's default allows: Linux, 32-bit Linux,
/// UNAME26, both, and the query `0xffffffff` (its argument is an unsigned
/// int, so only the low 32 bits count).
pub const PERSONALITY_ALLOWED: &[u64] = &[0x0, 0x8, 0x2_0000, 0x2_0008, 0xffff_ffff];

/// Said by `up` when it makes a room with the profile.
pub const WIDENING: &str = "nested containers: the room's seccomp profile is Docker's default plus \
     user and mount namespaces (unshare/clone with CLONE_NEWUSER/CLONE_NEWNS, setns, mount, pivot_root), \
     which rootless podman needs; no privilege, no capability, no other namespace";

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Profile {
    pub default_action: &'static str,
    pub architectures: Vec<&'static str>,
    pub syscalls: Vec<Rule>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    pub names: Vec<&'static str>,
    pub action: &'static str,
    pub errno_ret: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<Arg>,
}

/// One comparison: `op` of argument `index`; for `SCMP_CMP_MASKED_EQ`,
/// `args[index] & value == value_two`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Arg {
    pub index: u32,
    pub value: u64,
    pub value_two: u64,
    pub op: &'static str,
}

const MASKED_EQ: &str = "SCMP_CMP_MASKED_EQ";

/// The seccomp architectures of an engine's `Architecture`, as Docker
/// lists them (a 64-bit kernel also runs its 32-bit programs). `None` for
/// the others: on s390x `clone`'s flags are its second argument, and no
/// other machine has been tried.
pub fn architectures(engine_arch: &str) -> Option<Vec<&'static str>> {
    match engine_arch {
        "x86_64" | "amd64" => Some(vec!["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]),
        "aarch64" | "arm64" => Some(vec!["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"]),
        _ => None,
    }
}

/// The profile for an engine of this architecture; `None` when workroom has
/// none for it (see [`architectures`]).
pub fn profile(engine_arch: &str) -> Option<Profile> {
    let architectures = architectures(engine_arch)?;
    let deny =
        |names: Vec<&'static str>, args: Vec<Arg>| Rule { names, action: "SCMP_ACT_ERRNO", errno_ret: EPERM, args };
    // Flag `f` set in argument `index`.
    let has = |index: u32, f: u64| Arg { index, value: f, value_two: f, op: MASKED_EQ };

    let mut syscalls = vec![deny(DENIED.iter().flat_map(|g| g.names.iter().copied()).collect(), vec![])];
    syscalls.push(Rule { names: vec!["clone3"], action: "SCMP_ACT_ERRNO", errno_ret: ENOSYS, args: vec![] });
    // clone(flags, ...) and unshare(flags) on every architecture listed; a
    // CLONE_NEWTIME bit in clone's flags is part of the exit signal, not a
    // namespace (time namespaces come only through unshare and clone3).
    for &f in CLOSED_NAMESPACES {
        syscalls.push(deny(vec!["clone"], vec![has(0, f)]));
    }
    // unshare(flags) and setns(fd, nstype): a setns with nstype 0 takes
    // the fd's kind, and the only namespaces of a closed kind the process
    // could join are the room's own, which it has no capability over.
    for &f in CLOSED_NAMESPACES.iter().chain(&[CLONE_NEWTIME]) {
        syscalls.push(deny(vec!["unshare"], vec![has(0, f)]));
        syscalls.push(deny(vec!["setns"], vec![has(1, f)]));
    }
    // unshare with neither a user nor a mount namespace (CLONE_FS,
    // CLONE_FILES, ...) stays refused, as Docker refuses every unshare.
    syscalls.push(deny(
        vec!["unshare"],
        vec![Arg { index: 0, value: CLONE_NEWUSER | CLONE_NEWNS, value_two: 0, op: MASKED_EQ }],
    ));
    syscalls.extend(personality_rules().into_iter().map(|a| deny(vec!["personality"], vec![a])));
    Some(Profile { default_action: "SCMP_ACT_ALLOW", architectures, syscalls })
}

/// `personality(p)` is refused unless `p` is in [`PERSONALITY_ALLOWED`].
/// With one comparison per rule and rules ORed, "not one of five values" is
/// written through bit 31, which only the query value has:
/// - bit 31 clear and any bit but 3 (PER_LINUX32) and 17 (UNAME26) set;
/// - bit 31 set and any other bit of the low 32 clear (anything but the
///   query).
///
/// Every low-32-bit value is caught by exactly these, which the tests check.
fn personality_rules() -> Vec<Arg> {
    const BIT31: u64 = 1 << 31;
    let allowed_bits = 0x2_0008;
    let mut args = Vec::new();
    for bit in (0..31).map(|b| 1u64 << b) {
        if bit & allowed_bits == 0 {
            args.push(Arg { index: 0, value: bit | BIT31, value_two: bit, op: MASKED_EQ });
        }
    }
    for bit in (0..31).map(|b| 1u64 << b) {
        args.push(Arg { index: 0, value: bit | BIT31, value_two: BIT31, op: MASKED_EQ });
    }
    args
}

/// The create request's `SecurityOpt` entry: the profile inline, as the
/// docker CLI sends a `--security-opt seccomp=FILE` it has read.
pub fn security_opt(profile: &Profile) -> String {
    format!("seccomp={}", serde_json::to_string(profile).expect("a profile is plain data"))
}

/// Whether a `SecurityOpt` entry sets a seccomp profile (the user's own in
/// devcontainer.json or runArgs, which workroom then leaves in charge).
pub fn is_seccomp_opt(opt: &str) -> bool {
    opt.split_once(['=', ':']).is_some_and(|(k, _)| k == "seccomp")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// What the profile answers for `name(args)`, by the semantics
    /// libseccomp gives the rules: a rule applies when every condition
    /// holds; the first denial that applies decides (all deny actions here
    /// are errno returns); otherwise the default, allow.
    fn errno(p: &Profile, name: &str, args: [u64; 6]) -> Option<u32> {
        p.syscalls
            .iter()
            .filter(|r| r.names.contains(&name))
            .find(|r| {
                r.args.iter().all(|a| {
                    assert_eq!(a.op, MASKED_EQ, "the model knows only MASKED_EQ");
                    args[a.index as usize] & a.value == a.value_two
                })
            })
            .map(|r| r.errno_ret)
    }

    fn x86() -> Profile {
        profile("x86_64").unwrap()
    }

    fn kernel_names() -> BTreeSet<&'static str> {
        include_str!("seccomp/linux-x86-syscalls.txt")
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .collect()
    }

    #[test]
    fn every_name_in_the_profile_is_a_real_syscall_so_no_typo_silently_allows_one() {
        let kernel = kernel_names();
        let p = x86();
        for name in p.syscalls.iter().flat_map(|r| r.names.iter()).chain(WIDENED) {
            assert!(kernel.contains(name), "{name} is not a Linux syscall");
        }
    }

    #[test]
    fn no_call_is_both_denied_outright_and_widened_or_listed_twice() {
        let mut seen = BTreeSet::new();
        for name in DENIED.iter().flat_map(|g| g.names) {
            assert!(seen.insert(*name), "{name} is in two groups");
            assert!(!WIDENED.contains(name), "{name} is widened and denied");
            assert!(!["clone", "clone3", "unshare", "setns", "personality"].contains(name), "{name} is by argument");
        }
    }

    #[test]
    fn keyctl_bpf_and_the_new_mount_api_are_refused_with_eperm() {
        let p = x86();
        for name in ["keyctl", "bpf", "perf_event_open", "fsopen", "open_tree", "kexec_load", "reboot", "add_key"] {
            assert_eq!(errno(&p, name, [0; 6]), Some(EPERM), "{name}");
        }
    }

    #[test]
    fn mount_pivot_root_and_plain_calls_are_allowed() {
        let p = x86();
        for name in ["mount", "umount2", "umount", "pivot_root", "read", "openat", "ptrace", "io_uring_setup"] {
            assert_eq!(errno(&p, name, [0; 6]), None, "{name}");
        }
    }

    #[test]
    fn clone_may_make_user_and_mount_namespaces_and_no_other() {
        let p = x86();
        let sigchld = 17;
        assert_eq!(errno(&p, "clone", [sigchld, 0, 0, 0, 0, 0]), None, "fork");
        assert_eq!(errno(&p, "clone", [0x3d0f00, 0, 0, 0, 0, 0]), None, "a thread");
        assert_eq!(errno(&p, "clone", [CLONE_NEWUSER | CLONE_NEWNS | sigchld, 0, 0, 0, 0, 0]), None);
        for f in CLOSED_NAMESPACES {
            assert_eq!(errno(&p, "clone", [CLONE_NEWUSER | f | sigchld, 0, 0, 0, 0, 0]), Some(EPERM), "{f:#x}");
        }
        // The exit signal may be any number, bit 7 included.
        assert_eq!(errno(&p, "clone", [CLONE_NEWTIME | 1, 0, 0, 0, 0, 0]), None);
        assert_eq!(errno(&p, "clone3", [0; 6]), Some(ENOSYS));
    }

    #[test]
    fn unshare_needs_a_user_or_mount_namespace_and_no_closed_one() {
        let p = x86();
        assert_eq!(errno(&p, "unshare", [CLONE_NEWUSER, 0, 0, 0, 0, 0]), None);
        assert_eq!(errno(&p, "unshare", [CLONE_NEWNS, 0, 0, 0, 0, 0]), None);
        assert_eq!(errno(&p, "unshare", [CLONE_NEWUSER | CLONE_NEWNS, 0, 0, 0, 0, 0]), None);
        assert_eq!(errno(&p, "unshare", [0x200, 0, 0, 0, 0, 0]), Some(EPERM), "CLONE_FS alone, as Docker");
        for f in CLOSED_NAMESPACES.iter().chain(&[CLONE_NEWTIME]) {
            assert_eq!(errno(&p, "unshare", [CLONE_NEWUSER | f, 0, 0, 0, 0, 0]), Some(EPERM), "{f:#x}");
        }
    }

    #[test]
    fn setns_joins_user_and_mount_namespaces_but_no_closed_kind() {
        let p = x86();
        for nstype in [0, CLONE_NEWUSER, CLONE_NEWNS] {
            assert_eq!(errno(&p, "setns", [3, nstype, 0, 0, 0, 0]), None, "{nstype:#x}");
        }
        for f in CLOSED_NAMESPACES.iter().chain(&[CLONE_NEWTIME]) {
            assert_eq!(errno(&p, "setns", [3, *f, 0, 0, 0, 0]), Some(EPERM), "{f:#x}");
        }
    }

    /// Every value of one or two bits, each allowed value, and each allowed
    /// value with one bit more or less: the personality rules must refuse
    /// exactly what Docker's default refuses.
    #[test]
    fn personality_is_allowed_for_exactly_dockers_five_values() {
        let p = x86();
        let mut values: BTreeSet<u64> = PERSONALITY_ALLOWED.iter().copied().collect();
        for i in 0..32 {
            for j in 0..32 {
                values.insert((1 << i) | (1 << j));
            }
            for &a in PERSONALITY_ALLOWED {
                values.insert(a ^ (1 << i));
            }
        }
        values.insert(0x0040_0000 | 0x8); // READ_IMPLIES_EXEC with PER_LINUX32
        for v in values {
            let allowed = PERSONALITY_ALLOWED.contains(&v);
            assert_eq!(errno(&p, "personality", [v, 0, 0, 0, 0, 0]).is_none(), allowed, "{v:#x}");
        }
    }

    #[test]
    fn no_rule_compares_one_argument_twice() {
        for r in x86().syscalls {
            let indexes: BTreeSet<u32> = r.args.iter().map(|a| a.index).collect();
            assert_eq!(indexes.len(), r.args.len(), "{r:?}: runc would OR these");
        }
    }

    #[test]
    fn the_json_has_the_fields_docker_20_10_reads() {
        let opt = security_opt(&x86());
        let json: serde_json::Value = serde_json::from_str(opt.strip_prefix("seccomp=").unwrap()).unwrap();
        assert_eq!(json["defaultAction"], "SCMP_ACT_ALLOW");
        assert_eq!(json["architectures"], serde_json::json!(["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]));
        let clone3 = json["syscalls"].as_array().unwrap().iter().find(|r| r["names"] == serde_json::json!(["clone3"]));
        assert_eq!(clone3.unwrap()["errnoRet"], 38);
        let arg = &json["syscalls"].as_array().unwrap().iter().find(|r| r["args"].is_array()).unwrap()["args"][0];
        assert!(arg["valueTwo"].is_u64() && arg["op"] == MASKED_EQ, "{arg}");
    }

    #[test]
    fn arm64_engines_get_their_architectures_and_others_none() {
        assert_eq!(profile("aarch64").unwrap().architectures, ["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"]);
        assert_eq!(profile("s390x"), None);
        assert_eq!(profile("ppc64le"), None);
    }

    #[test]
    fn seccomp_security_opts_are_recognised_in_both_spellings() {
        assert!(is_seccomp_opt("seccomp=unconfined"));
        assert!(is_seccomp_opt("seccomp:/p.json"));
        assert!(!is_seccomp_opt("apparmor=unconfined"));
        assert!(!is_seccomp_opt("no-new-privileges"));
    }
}
