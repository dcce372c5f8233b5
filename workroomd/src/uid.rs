//! `updateRemoteUserUID` without a derived image: the daemon (root in the
//! room) gives the remote user the host user's uid and gid before any hook
//! runs, so files in the bind-mounted workspace have one owner on both sides.
//!
//! The rules are the reference CLI's `updateUID` script: a user missing from
//! passwd is left alone; nothing changes when the ids already match; a uid
//! taken by another user skips the update; a gid taken by another group
//! keeps the old gid (and still moves the uid). Root and numeric users are
//! skipped by the host before asking.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    NoSuchUser,
    AlreadyMatching,
    UidTaken {
        by: String,
    },
    Update {
        passwd: String,
        group: String,
        old_uid: u32,
        old_gid: u32,
        new_gid: u32,
        home: String,
        gid_taken_by: Option<String>,
    },
}

impl Plan {
    /// One line for the hook output.
    pub fn describe(&self, user: &str, uid: u32, gid: u32) -> String {
        match self {
            Plan::NoSuchUser => format!("remote user {user} is not in /etc/passwd; ids left as they are"),
            Plan::AlreadyMatching => format!("{user} already has {uid}:{gid}"),
            Plan::UidTaken { by } => format!("uid {uid} belongs to {by}; {user} keeps its ids"),
            Plan::Update { old_uid, old_gid, new_gid, gid_taken_by, .. } => {
                let kept = gid_taken_by
                    .as_ref()
                    .map(|g| format!(" (gid {gid} belongs to group {g}; gid kept)"))
                    .unwrap_or_default();
                format!("{user}: {old_uid}:{old_gid} -> {uid}:{new_gid}{kept}")
            }
        }
    }
}

/// Decides the update from the texts of /etc/passwd and /etc/group.
pub fn plan(passwd: &str, group: &str, user: &str, uid: u32, gid: u32) -> Plan {
    let fields = |line: &str| line.split(':').map(str::to_string).collect::<Vec<_>>();
    let entry = passwd.lines().map(fields).find(|f| f.len() >= 7 && f[0] == user);
    let Some(entry) = entry else { return Plan::NoSuchUser };
    let (Ok(old_uid), Ok(old_gid)) = (entry[2].parse::<u32>(), entry[3].parse::<u32>()) else {
        return Plan::NoSuchUser;
    };
    if old_uid == uid && old_gid == gid {
        return Plan::AlreadyMatching;
    }
    let uid_owner = passwd.lines().map(fields).find(|f| f.len() >= 3 && f[2] == uid.to_string()).map(|f| f[0].clone());
    if old_uid != uid {
        if let Some(by) = uid_owner {
            return Plan::UidTaken { by };
        }
    }
    let gid_owner = group.lines().map(fields).find(|f| f.len() >= 3 && f[2] == gid.to_string()).map(|f| f[0].clone());
    let gid_taken_by = gid_owner.filter(|_| old_gid != gid);
    let new_gid = if gid_taken_by.is_some() { old_gid } else { gid };
    let new_passwd = rewrite(passwd, |f| {
        if f.len() >= 7 && f[0] == user {
            f[2] = uid.to_string();
            f[3] = new_gid.to_string();
        }
    });
    let new_group = if new_gid != old_gid {
        rewrite(group, |f| {
            if f.len() >= 3 && f[2] == old_gid.to_string() {
                f[2] = new_gid.to_string();
            }
        })
    } else {
        group.to_string()
    };
    Plan::Update {
        passwd: new_passwd,
        group: new_group,
        old_uid,
        old_gid,
        new_gid,
        home: entry[5].clone(),
        gid_taken_by,
    }
}

/// Rewrites the fields of each line, keeping everything else byte for byte.
fn rewrite(text: &str, edit: impl Fn(&mut Vec<String>)) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        if body.starts_with('#') || body.is_empty() {
            out.push_str(line);
            continue;
        }
        let mut fields: Vec<String> = body.split(':').map(str::to_string).collect();
        edit(&mut fields);
        out.push_str(&fields.join(":"));
        out.push_str(end);
    }
    out
}

/// Applies an update: the files are replaced atomically, then the home
/// folder is given to the user (recursively, symlinks themselves, not their
/// targets).
pub fn apply(plan: &Plan, uid: u32) -> std::io::Result<()> {
    let Plan::Update { passwd, group, new_gid, home, .. } = plan else { return Ok(()) };
    replace("/etc/group", group)?;
    replace("/etc/passwd", passwd)?;
    if !home.is_empty() && home != "/" && Path::new(home).is_dir() {
        chown_tree(Path::new(home), uid, *new_gid)?;
    }
    Ok(())
}

fn replace(path: &str, text: &str) -> std::io::Result<()> {
    // Keep the original's mode (passwd 0644; some images make group 0644 too).
    let permissions =
        std::fs::metadata(path).map(|m| m.permissions()).unwrap_or_else(|_| std::fs::Permissions::from_mode(0o644));
    workroomd::atomic::write_with_permissions(Path::new(path), text.as_bytes(), permissions)
}

fn chown_tree(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(dir, Some(uid), Some(gid))?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            chown_tree(&entry.path(), uid, gid)?;
        } else {
            std::os::unix::fs::lchown(entry.path(), Some(uid), Some(gid))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n# comment\ndev:x:1000:1000::/home/dev:/bin/bash\nother:x:1001:1001::/home/other:/bin/sh\n";
    const GROUP: &str = "root:x:0:\ndev:x:1000:\nother:x:1001:\nstaff:x:50:dev\n";

    #[test]
    fn the_user_moves_to_the_host_ids_and_its_group_follows() {
        let Plan::Update { passwd, group, new_gid, home, .. } = plan(PASSWD, GROUP, "dev", 4242, 4343) else {
            panic!("expected an update")
        };
        assert!(passwd.contains("\ndev:x:4242:4343::/home/dev:/bin/bash\n"), "{passwd}");
        assert!(passwd.contains("# comment\n") && passwd.contains("other:x:1001:1001"));
        assert!(group.contains("\ndev:x:4343:\n"), "{group}");
        assert_eq!((new_gid, home.as_str()), (4343, "/home/dev"));
    }

    #[test]
    fn matching_ids_change_nothing() {
        assert_eq!(plan(PASSWD, GROUP, "dev", 1000, 1000), Plan::AlreadyMatching);
    }

    #[test]
    fn a_uid_of_another_user_skips_the_update() {
        assert_eq!(plan(PASSWD, GROUP, "dev", 1001, 1001), Plan::UidTaken { by: "other".into() });
    }

    #[test]
    fn a_gid_of_another_group_keeps_the_old_gid() {
        let p = plan(PASSWD, GROUP, "dev", 4242, 50);
        let Plan::Update { passwd, group, new_gid, ref gid_taken_by, .. } = p else { panic!("expected an update") };
        assert_eq!(new_gid, 1000);
        assert_eq!(gid_taken_by.as_deref(), Some("staff"));
        assert!(passwd.contains("dev:x:4242:1000:"));
        assert_eq!(group, GROUP);
    }

    #[test]
    fn a_user_missing_from_passwd_is_left_alone() {
        assert_eq!(plan(PASSWD, GROUP, "ghost", 4242, 4242), Plan::NoSuchUser);
    }
}
