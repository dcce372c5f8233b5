//! `userEnvProbe`: what the remote user's login shell sets up (here a file in
//! /etc/profile.d) reaches hooks and `exec`, under remoteEnv, as with the
//! reference CLI; `none` leaves it out.

mod common;

use common::*;

fn workspace(probe: Option<&str>) -> Workspace {
    let ws = Workspace::image(DEBIAN);
    let profile = ws.path().join("profile.sh");
    std::fs::write(&profile, "export FROM_PROFILE=yes\nexport OVERRIDDEN=profile\n").unwrap();
    let mut config = serde_json::json!({
        "image": DEBIAN,
        "mounts": [format!("type=bind,source={},target=/etc/profile.d/workroom-test.sh", profile.display())],
        "remoteEnv": { "OVERRIDDEN": "remoteEnv" },
        "postCreateCommand": "echo \"${FROM_PROFILE:-unset} $OVERRIDDEN\" > .seen-by-hook",
    });
    if let Some(p) = probe {
        config["userEnvProbe"] = serde_json::json!(p);
    }
    std::fs::write(ws.path().join(".devcontainer.json"), labelled(config)).unwrap();
    ws
}

#[test]
fn the_login_shells_environment_reaches_hooks_and_exec_under_remote_env() {
    let ws = workspace(None);
    ws.up();
    assert_eq!(read(&ws, ".seen-by-hook"), "yes remoteEnv\n");
    assert_eq!(ws.exec_ok(&["sh", "-c", "echo $FROM_PROFILE $OVERRIDDEN"]), "yes remoteEnv\n");
}

#[test]
fn user_env_probe_none_leaves_the_login_shells_environment_out() {
    let ws = workspace(Some("none"));
    ws.up();
    assert_eq!(read(&ws, ".seen-by-hook"), "unset remoteEnv\n");
    assert_eq!(ws.exec_ok(&["sh", "-c", "echo ${FROM_PROFILE:-unset}"]), "unset\n");
}

fn read(ws: &Workspace, file: &str) -> String {
    std::fs::read_to_string(ws.path().join(file)).unwrap()
}
