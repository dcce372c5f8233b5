//! Small jobs the host runs in throwaway containers, where there may be no
//! shell and no coreutils: give a folder to a user (the peer socket volume).

use nix::unistd::{chown, Gid, Uid};
use std::path::Path;

/// `workroomd own UID:GID MODE PATH`: chown and chmod one folder.
pub fn own(args: &[String]) -> i32 {
    let [owner, mode, path] = args else {
        eprintln!("usage: workroomd own UID:GID MODE PATH (MODE in octal, e.g. 700)");
        return 2;
    };
    let parsed = owner
        .split_once(':')
        .and_then(|(u, g)| Some((u.parse::<u32>().ok()?, g.parse::<u32>().ok()?)))
        .zip(u32::from_str_radix(mode, 8).ok());
    let Some(((uid, gid), mode)) = parsed else {
        eprintln!("workroomd own: expected numeric UID:GID and an octal MODE, got {owner} {mode}");
        return 2;
    };
    let path = Path::new(path);
    if let Err(e) = std::fs::create_dir_all(path) {
        eprintln!("workroomd own: create {}: {e}", path.display());
        return 1;
    }
    if let Err(e) = chown(path, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid))) {
        eprintln!("workroomd own: chown {}: {e}", path.display());
        return 1;
    }
    use std::os::unix::fs::PermissionsExt;
    if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)) {
        eprintln!("workroomd own: chmod {}: {e}", path.display());
        return 1;
    }
    0
}

/// `workroomd update-uid USER UID GID`: run by the host (as root, through the
/// daemon) before the first hooks of a room; prints what it did.
pub fn update_uid(args: &[String]) -> i32 {
    let [user, uid, gid] = args else {
        eprintln!("usage: workroomd update-uid USER UID GID");
        return 2;
    };
    let (Ok(uid), Ok(gid)) = (uid.parse::<u32>(), gid.parse::<u32>()) else {
        eprintln!("workroomd update-uid: UID and GID must be numbers, got {uid} {gid}");
        return 2;
    };
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let group = std::fs::read_to_string("/etc/group").unwrap_or_default();
    let plan = crate::uid::plan(&passwd, &group, user, uid, gid);
    println!("{}", plan.describe(user, uid, gid));
    match crate::uid::apply(&plan, uid) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("workroomd update-uid: {e}");
            1
        }
    }
}
