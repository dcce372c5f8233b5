//! `updateRemoteUserUID`: `workroom up` run by a non-root host user (in the
//! docker socket's group) gives the room's remote user that user's uid and
//! gid before any hook runs, so files the room writes in the workspace are
//! the host user's.

mod common;

use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// A host uid/gid no fixture image uses.
const HOST_UID: u32 = 4242;
const HOST_GID: u32 = 4343;

/// Runs the built workroom as HOST_UID:HOST_GID with the docker socket's
/// group, as a developer in the `docker` group would.
fn workroom_as_host_user(ws: &Workspace, args: &[&str]) -> std::process::Output {
    let socket_gid = std::fs::metadata("/var/run/docker.sock").expect("a local docker socket").gid();
    let home = ws.path().join(".home");
    std::fs::create_dir_all(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(HOST_UID), Some(HOST_GID)).unwrap();
    let mut cmd = Command::new(workroom_bin());
    let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
    cmd.args(&args[..split]).args(["--workspace-folder", &ws.folder()]).args(&args[split..]).env("HOME", &home);
    // SAFETY: only setgroups/setgid/setuid between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let groups = [socket_gid];
            if libc::setgroups(1, groups.as_ptr()) != 0 || libc::setgid(HOST_GID) != 0 || libc::setuid(HOST_UID) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.output().expect("run workroom as the host user")
}

#[test]
fn the_remote_user_takes_the_host_users_ids_before_the_first_hook() {
    assert_eq!(nix::unistd::getuid().as_raw(), 0, "this test switches to another uid and must start as root");
    let ws = Workspace::new(serde_json::json!({
        "image": DEBIAN,
        "remoteUser": "dev",
        "onCreateCommand": "id -u > .ids-at-create; id -g >> .ids-at-create; touch made-in-room",
    }));
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = workroom_as_host_user(&ws, &["up"]);
    assert!(out.status.success(), "up as uid {HOST_UID}: {}", stderr(&out));
    assert!(stderr(&out).contains("dev: 1000:1000 -> 4242:4343"), "{}", stderr(&out));
    let ids = std::fs::read_to_string(ws.path().join(".ids-at-create")).unwrap();
    assert_eq!(ids, format!("{HOST_UID}\n{HOST_GID}\n"), "hooks run with the new ids");
    let made = std::fs::metadata(ws.path().join("made-in-room")).unwrap();
    assert_eq!((made.uid(), made.gid()), (HOST_UID, HOST_GID), "files made in the room are the host user's");
    let id = workroom_as_host_user(&ws, &["exec", "--", "id"]);
    assert!(id.status.success(), "exec as the host user: {}", stderr(&id));
    assert_eq!(stdout(&id).trim(), "uid=4242(dev) gid=4343(dev) groups=4343(dev)");
    let home_owner = docker_ok(&["exec", &ws.room_name(), "stat", "-c", "%u:%g", "/home/dev"]);
    assert_eq!(home_owner, "4242:4343", "the home folder follows the user");
}

#[test]
fn root_on_the_host_leaves_the_remote_user_as_it_is() {
    let ws = Workspace::new(serde_json::json!({ "image": DEBIAN, "remoteUser": "dev" }));
    ws.up();
    assert_eq!(ws.exec_ok(&["id", "-u"]).trim(), "1000");
}

#[test]
fn update_remote_user_uid_false_leaves_the_ids_alone() {
    let ws = Workspace::new(serde_json::json!({ "image": DEBIAN, "remoteUser": "dev", "updateRemoteUserUID": false }));
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = workroom_as_host_user(&ws, &["up"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let id = workroom_as_host_user(&ws, &["exec", "--", "id", "-u"]);
    assert_eq!(stdout(&id).trim(), "1000");
}

#[test]
fn a_uid_with_no_passwd_entry_as_remote_user_says_why_it_cannot_take_the_host_uid() {
    // What an image with `USER 1001` and no such user gives: a numeric
    // remote user with no entry in /etc/passwd.
    let ws = Workspace::new(serde_json::json!({ "image": DEBIAN, "containerUser": "1001" }));
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = workroom_as_host_user(&ws, &["up"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("uid 1001 has no entry in the image's /etc/passwd"), "{said}");
    assert!(said.contains(&format!("host user's uid {HOST_UID}")) && said.contains("useradd -u 1001"), "{said}");
}

/// Removes the image a Dockerfile config built, when the test ends: its
/// room first, which still uses it (removed while in use, the image was
/// only untagged and stayed behind, labelled `workroom.build`).
struct BuiltImage {
    room: String,
    tag: String,
}

impl BuiltImage {
    fn of(ws: &Workspace) -> BuiltImage {
        BuiltImage { room: ws.room_name(), tag: ws.build_tag() }
    }
}

impl Drop for BuiltImage {
    fn drop(&mut self) {
        remove_container(&self.room);
        let _ = docker(&["rmi", "-f", &self.tag]);
    }
}

#[test]
fn an_image_built_with_user_1001_and_no_passwd_entry_says_why_no_uid_is_remapped_and_what_to_do() {
    let ws = Workspace::with_devcontainer_folder(
        serde_json::json!({ "build": { "dockerfile": "Dockerfile" } }),
        &[("Dockerfile", &format!("FROM {DEBIAN}\nUSER 1001\n"))],
    );
    let _image = BuiltImage::of(&ws);
    // The host user's own workspace, as on a laptop.
    std::os::unix::fs::chown(ws.path(), Some(HOST_UID), Some(HOST_GID)).unwrap();
    let out = workroom_as_host_user(&ws, &["up"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("uid 1001 has no entry in the image's /etc/passwd"), "{said}");
    assert!(said.contains(&format!("host user's uid {HOST_UID}")) && said.contains("useradd -u 1001"), "{said}");
    // What that means in the room: the image's user, unmapped.
    let id = workroom_as_host_user(&ws, &["exec", "--", "id", "-u"]);
    assert_eq!(stdout(&id).trim(), "1001");
}
