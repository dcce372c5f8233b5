//! Who may use a socket the daemon serves: only processes of this room,
//! that is of the daemon's own mount namespace.
//!
//! Rooms of one peer group share a PID namespace, so a process of another
//! room can name a path through `/proc/<pid>/root` of a process here and
//! connect to the daemon's socket, the ssh-agent socket or the git
//! credential socket; the folders' modes do not stop it when it runs as the
//! same uid. The socket tells us the connecting process ([`SO_PEERCRED`]'s
//! pid, which the kernel records at `connect`), and that process's mount
//! namespace tells us its room.
//!
//! Reading another process's `/proc/PID/ns/mnt` is a ptrace-mode read: the
//! kernel allows it to a caller of the same uid as the target when the
//! target is dumpable, or to one holding `CAP_SYS_PTRACE`, which Docker does
//! not give a room. So the daemon takes the peer's uid as its filesystem uid
//! for the one read (`setfsuid`, per thread; the runtime has one). A peer
//! that made itself non-dumpable (this daemon's own `relay` and `attach`,
//! so that no other room reaches their pipes through `/proc`) cannot be read
//! that way by anyone; for those the peer's root mount decides: the first
//! line of `/proc/PID/mountinfo` (readable by any process that sees the
//! pid) names the mount at the root of the peer's namespace, and a mount
//! belongs to exactly one namespace, so the same mount id means the same
//! room. A peer whose namespace cannot be read is refused.
//!
//! Known shortcut: the pid is the one at `connect`. A client that exits at
//! once and whose pid is taken by a process of this room before the check
//! would be judged by that process; `SO_PEERPIDFD` (Linux 6.5) closes the
//! gap and is the upgrade once older kernels need not be served.
//!
//! [`SO_PEERCRED`]: https://man7.org/linux/man-pages/man7/unix.7.html

use nix::unistd::{Gid, Uid};
use std::io;

/// Why a connection was refused; each names the pid when it is known.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("the connection has no peer credentials")]
    NoCredentials(#[source] io::Error),
    #[error("the connecting process is not visible here (another PID namespace)")]
    NoPid,
    #[error("pid {pid} is in another room ({theirs}; this room is {ours})")]
    OtherRoom { pid: i32, theirs: String, ours: String },
    #[error("pid {pid}: its mount namespace cannot be read")]
    Unreadable {
        pid: i32,
        #[source]
        source: io::Error,
    },
    #[error("this daemon cannot read its own mount namespace")]
    OwnUnknown,
}

/// This room, as the daemon knows it at start.
#[derive(Debug, Clone)]
pub struct Namespace {
    /// `readlink /proc/self/ns/mnt`, e.g. `mnt:[4026532404]`.
    ns: Option<String>,
    /// The id of the mount at the root of this namespace.
    root_mount: Option<u64>,
}

impl Namespace {
    /// The namespace of this process.
    pub fn own() -> Namespace {
        Namespace {
            ns: std::fs::read_link("/proc/self/ns/mnt").ok().map(|l| l.to_string_lossy().into_owned()),
            root_mount: first_bytes("/proc/self/mountinfo").ok().as_deref().and_then(root_mount_id),
        }
    }

    /// Admits the process at the other end of `stream` if it is of this room.
    pub fn admit(&self, stream: &tokio::net::UnixStream) -> Result<i32, Refused> {
        let cred = stream.peer_cred().map_err(Refused::NoCredentials)?;
        let pid = cred.pid().filter(|p| *p > 0).ok_or(Refused::NoPid)?;
        self.holds(pid, cred.uid(), cred.gid())?;
        Ok(pid)
    }

    /// Whether process `pid` (running as `uid`:`gid`) is of this room.
    pub fn holds(&self, pid: i32, uid: u32, gid: u32) -> Result<(), Refused> {
        let ours = self.ns.as_deref().ok_or(Refused::OwnUnknown)?;
        let theirs = {
            let _ids = FsIds::take(uid, gid);
            std::fs::read_link(format!("/proc/{pid}/ns/mnt"))
        };
        match theirs {
            Ok(link) => {
                let theirs = link.to_string_lossy().into_owned();
                if theirs == ours {
                    return Ok(());
                }
                Err(Refused::OtherRoom { pid, theirs, ours: ours.to_string() })
            }
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => self.holds_by_root_mount(pid),
            Err(source) => Err(Refused::Unreadable { pid, source }),
        }
    }

    /// For a non-dumpable peer: compares the mounts at the two roots.
    fn holds_by_root_mount(&self, pid: i32) -> Result<(), Refused> {
        let ours = self.root_mount.ok_or(Refused::OwnUnknown)?;
        let info =
            first_bytes(&format!("/proc/{pid}/mountinfo")).map_err(|source| Refused::Unreadable { pid, source })?;
        match root_mount_id(&info) {
            Some(theirs) if theirs == ours => Ok(()),
            theirs => Err(Refused::OtherRoom {
                pid,
                theirs: theirs.map_or("no root mount in view".into(), |m| format!("root mount {m}")),
                ours: format!("root mount {ours}"),
            }),
        }
    }
}

/// Enough of a mountinfo for its first line: the kernel renders the file
/// as it is read, so a room with many mounts costs only what is read.
const MOUNTINFO_HEAD: u64 = 4096;

fn first_bytes(path: &str) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(path)?.take(MOUNTINFO_HEAD).read_to_end(&mut head)?;
    Ok(head)
}

/// The mount id on the first line of a mountinfo: the mount at the root
/// of the reader's view. A process that changed its root elsewhere shows
/// another mount there, or none, and is refused: fail closed.
fn root_mount_id(mountinfo: &[u8]) -> Option<u64> {
    // Only the first fields matter, and the head read may end mid-line (an
    // overlay root lists every layer): no need for the line to be whole.
    let first = mountinfo.split(|b| *b == b'\n').next()?;
    let first = String::from_utf8_lossy(first);
    let mut fields = first.split(' ');
    let id = fields.next()?.parse().ok()?;
    // mount id, parent id, major:minor, root, mount point
    (fields.nth(3)? == "/").then_some(id)
}

/// The calling thread's filesystem ids for a scope: the kernel's same-uid
/// rule for reading `/proc/PID/ns/*` looks at them. Restored on drop.
struct FsIds {
    uid: Uid,
    gid: Gid,
}

impl FsIds {
    fn take(uid: u32, gid: u32) -> FsIds {
        // The group first: setfsgid needs CAP_SETGID, which stays with us
        // whatever the fsuid; only the file capabilities go with fsuid 0.
        let gid = nix::unistd::setfsgid(Gid::from_raw(gid));
        let uid = nix::unistd::setfsuid(Uid::from_raw(uid));
        FsIds { uid, gid }
    }
}

impl Drop for FsIds {
    fn drop(&mut self) {
        nix::unistd::setfsuid(self.uid);
        nix::unistd::setfsgid(self.gid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_mount_is_the_first_mountinfo_line_when_it_is_the_root() {
        let info = b"107 50 0:41 / / rw,nodev - overlay overlay rw\n108 107 0:45 / /proc rw - proc proc rw\n";
        assert_eq!(root_mount_id(info), Some(107));
        assert_eq!(root_mount_id(b"200 107 0:50 /x /srv rw - ext4 /dev/sda rw\n"), None, "a chroot's view");
        assert_eq!(root_mount_id(b""), None);
        let mut long = b"107 50 0:41 / / rw - overlay overlay rw,lowerdir=".to_vec();
        long.extend(std::iter::repeat_n(b'x', 2 * MOUNTINFO_HEAD as usize));
        long.truncate(MOUNTINFO_HEAD as usize);
        assert_eq!(root_mount_id(&long), Some(107), "a head cut mid-line still names the root");
        assert_eq!(root_mount_id(b"garbage"), None);
    }

    #[test]
    fn a_process_of_this_namespace_is_admitted_through_a_real_socket() {
        let ns = Namespace::own();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let (a, _b) = tokio::net::UnixStream::pair().unwrap();
            assert_eq!(ns.admit(&a).unwrap(), std::process::id() as i32);
        });
    }

    #[test]
    fn a_process_that_cannot_be_seen_is_refused_naming_it() {
        let ns = Namespace::own();
        // Pid numbers stop far below this (pid_max is at most 2^22).
        let e = ns.holds(i32::MAX, 0, 0).unwrap_err();
        assert!(matches!(e, Refused::Unreadable { pid: i32::MAX, .. }), "{e:?}");
        assert!(e.to_string().contains(&i32::MAX.to_string()), "{e}");
        let blind = Namespace { ns: None, root_mount: None };
        assert!(matches!(blind.holds(std::process::id() as i32, 0, 0), Err(Refused::OwnUnknown)));
    }
}
