//! The users a configuration names, against the image's own `/etc/passwd`
//! (read by the daemon, so any image works). Decided once, when the room is
//! made: a user the image lacks would make every `exec`, pane and hook fail
//! with "unable to find user", so `up` refuses it instead of saying
//! "created".

use workroomd::users::{resolve_user, GroupEntry, PasswdEntry, UserError};

/// A user property (`remoteUser`, `containerUser`) naming a user or group
/// the image does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{config}: `{property}` names {problem}; the image's users are {known}")]
pub struct MissingUser {
    pub config: String,
    pub property: &'static str,
    pub problem: String,
    pub known: String,
}

/// The first of `wanted` (property, user spec) the image cannot resolve.
pub fn check(
    config: &str,
    wanted: &[(&'static str, &str)],
    passwd: &[PasswdEntry],
    groups: &[GroupEntry],
) -> Result<(), MissingUser> {
    for (property, spec) in wanted {
        let problem = match resolve_user(spec, passwd, groups) {
            Ok(_) => continue,
            Err(UserError::UnknownUser(u)) => format!("user {u:?}, which the image does not have"),
            Err(UserError::UnknownGroup(g)) => format!("group {g:?}, which the image does not have"),
            Err(e) => format!("{spec:?}: {e}"),
        };
        let known = passwd.iter().map(|e| e.name.as_str()).collect::<Vec<_>>().join(", ");
        return Err(MissingUser {
            config: config.to_string(),
            property,
            problem,
            known: if known.is_empty() { "none (no /etc/passwd)".into() } else { known },
        });
    }
    Ok(())
}

/// Why `updateRemoteUserUID` leaves a numeric remote user (`USER 1001`) as
/// it is, when that matters: its uid differs from the host user's, so files
/// in the workspace mount have two owners. `None` when there is nothing to
/// say. The reference CLI skips numeric users silently; we say so once.
pub fn numeric_user_note(user: &str, host_uid: u32, passwd: &[PasswdEntry]) -> Option<String> {
    let uid: u32 = user.split(':').next()?.parse().ok()?;
    if uid == host_uid || host_uid == 0 || uid == 0 {
        return None;
    }
    Some(match passwd.iter().find(|e| e.uid == uid) {
        Some(entry) => format!(
            "updateRemoteUserUID: the remote user is given as uid {uid}, so it keeps that uid (the host user's is \
             {host_uid}) and the workspace may not be writable in the room; name it instead (`\"remoteUser\": \"{}\"`) \
             to have it take the host's uid",
            entry.name
        ),
        None => format!(
            "updateRemoteUserUID: uid {uid} has no entry in the image's /etc/passwd, so it cannot take the host \
             user's uid {host_uid} and the workspace may not be writable in the room; add a user with that uid in \
             the image (`useradd -u {uid} NAME` in a Dockerfile) and name it in `remoteUser`, or run `up` as uid {uid}"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use workroomd::users::{parse_group, parse_passwd};

    fn passwd() -> Vec<PasswdEntry> {
        parse_passwd("root:x:0:0:root:/root:/bin/sh\ndev:x:1000:1000::/home/dev:/bin/bash\n")
    }

    fn groups() -> Vec<GroupEntry> {
        parse_group("root:x:0:\ndev:x:1000:\n")
    }

    #[test]
    fn a_remote_user_the_image_lacks_is_named_with_the_users_it_has() {
        let err = check("/w/.devcontainer.json", &[("remoteUser", "ghost")], &passwd(), &groups()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "/w/.devcontainer.json: `remoteUser` names user \"ghost\", which the image does not have; the image's users are root, dev"
        );
    }

    #[test]
    fn users_the_image_has_numeric_ones_and_a_known_group_pass() {
        let wanted = [("remoteUser", "dev"), ("containerUser", "1001"), ("containerUser", "dev:root")];
        assert_eq!(check("c", &wanted, &passwd(), &groups()), Ok(()));
        let err = check("c", &[("containerUser", "dev:staff")], &passwd(), &groups()).unwrap_err();
        assert_eq!(err.property, "containerUser");
        assert!(err.problem.contains("group \"staff\""), "{}", err.problem);
    }

    #[test]
    fn a_numeric_user_without_a_passwd_entry_says_why_its_uid_cannot_follow_the_host() {
        let note = numeric_user_note("1001", 4242, &passwd()).unwrap();
        assert!(note.contains("uid 1001 has no entry") && note.contains("4242"), "{note}");
        let named = numeric_user_note("1000", 4242, &passwd()).unwrap();
        assert!(named.contains("\"remoteUser\": \"dev\""), "{named}");
        assert_eq!(numeric_user_note("1001", 1001, &passwd()), None, "already the host's uid");
        assert_eq!(numeric_user_note("1001", 0, &passwd()), None, "root on the host");
        assert_eq!(numeric_user_note("dev", 4242, &passwd()), None, "a name is remapped");
    }
}
