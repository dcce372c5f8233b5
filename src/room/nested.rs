//! Nested containers at `up`: what the room's image brings, the inner tool
//! configuration for the remote user, the `docker` wrapper that says what
//! cannot work in a nested room, and a probe of whether the engine lets an
//! unprivileged room run containers at all. Never blocks `up`: each finding
//! is a warning, the room starts regardless.

use crate::link::RoomLink;
use crate::plan::nested::INNER_STORAGE;
use workroomd::proto::{Event, RunRequest};

/// Said when the image has no podman.
pub const MISSING_TOOLS: &str = "the image has no podman: install podman, fuse-overlayfs and uidmap \
     (apt-get install podman fuse-overlayfs uidmap) in the image to use nested containers";

/// The wrapper's place: `/.workroom/bin` is workroom's own folder; it is
/// linked as `/usr/local/bin/docker` when the image has no docker there.
pub const WRAPPER_PATH: &str = "/.workroom/bin/docker";

/// First line of every file workroom writes here: a file without it is the
/// user's and is left alone.
const MARK: &str = "# written by workroom (nested = true); delete this line to keep your own edits";

/// `docker` in a nested room: podman, with the limits that would be silent
/// said on stderr first.
const WRAPPER: &str = r#"#!/bin/sh
# written by workroom (nested = true): docker -> podman, with what cannot work in a nested room said loudly
say() { echo "workroom: $*" >&2; }
sub=
for a in "$@"; do case $a in -*) ;; *) sub=$a; break ;; esac; done
case $sub in
run | create)
	prev=
	for a in "$@"; do
		spec=
		case $prev in -p | --publish) spec=$a ;; esac
		case $a in --publish=*) spec=${a#--publish=} ;; -p?*) spec=${a#-p} ;; -P | --publish-all) spec=all ;; esac
		if [ -n "$spec" ]; then
			say "-p/--publish has no effect in a nested container: inner containers share the room's network; reach the service on localhost"
			case $spec in *:*) host=${spec%:*}; host=${host##*:}; host=${host%%-*} ;; *) host= ;; esac
			case $host in '' | *[!0-9]*) ;; *) [ "$host" -lt 1024 ] && say "port $host is below 1024: an inner container cannot bind it (unprivileged); use a port of 1024 or more" ;; esac
		fi
		prev=$a
	done
	;;
network)
	for a in "$@"; do
		case $a in create) say "user-defined networks are not available in a nested container: inner containers share the room's network (compose needs network_mode: host)"; break ;; esac
	done
	;;
esac
command -v podman >/dev/null 2>&1 || { say "docker here runs podman, and the image has no podman: install podman, fuse-overlayfs and uidmap"; exit 127; }
exec podman "$@"
"#;

/// Installs the wrapper (as root) and reports whether podman is there.
const ROOT_SCRIPT: &str = r#"
set -e
# The engine applies the tmpfs mode at the first start only; a restarted
# room's storage tmpfs is root's 0755 again.
chmod 1777 @STORAGE@
mkdir -p /.workroom/bin
cat > /.workroom/bin/docker.new <<'WORKROOM_EOF'
@WRAPPER@WORKROOM_EOF
chmod 0755 /.workroom/bin/docker.new
mv -f /.workroom/bin/docker.new /.workroom/bin/docker
if [ -d /usr/local/bin ] && [ ! -e /usr/local/bin/docker ] && [ ! -L /usr/local/bin/docker ]; then
	ln -s /.workroom/bin/docker /usr/local/bin/docker
fi
if command -v podman >/dev/null 2>&1 || [ -x /usr/bin/podman ]; then echo podman=yes; else echo podman=no; fi
"#;

/// The inner tools' configuration for the user it runs as: storage on
/// fuse-overlayfs in the room's tmpfs, the room's namespaces and network
/// shared (the room has no privilege to make new ones), cgroups off (the
/// room cannot delegate any). `$1` is the storage folder.
const USER_SCRIPT: &str = r#"
set -e
mark='@MARK@'
write() { # file, content: unless the file is the user's own
	if [ -e "$1" ] && [ "$(head -n1 "$1")" != "$mark" ]; then echo "kept=$1"; return; fi
	mkdir -p "$(dirname "$1")"
	printf '%s\n%s' "$mark" "$2" > "$1.new" && mv -f "$1.new" "$1"
}
mkdir -p "$1/storage" "$1/run"
chmod 0700 "$1"
if [ "$(id -u)" = 0 ]; then dir=/etc/containers; conf=$dir/containers.conf.d/workroom.conf; else dir=${XDG_CONFIG_HOME:-$HOME/.config}/containers; conf=$dir/containers.conf; fi
write "$dir/storage.conf" "[storage]
driver = \"overlay\"
graphroot = \"$1/storage\"
runroot = \"$1/run\"

[storage.options.overlay]
mount_program = \"/usr/bin/fuse-overlayfs\"
"
write "$conf" '[containers]
netns = "host"
ipcns = "host"
utsns = "host"
cgroupns = "host"
cgroups = "disabled"
log_driver = "k8s-file"

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
'
"#;

/// What `up` says when the engine refuses: podman's words, and what it needs.
pub fn engine_refusal(podman_error: &str) -> String {
    let words: Vec<&str> =
        podman_error.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with("time=")).collect();
    let reason = if words.is_empty() { "podman info failed".to_string() } else { words.join(": ") };
    format!(
        "nested containers are not possible on this engine: {reason}; they need unprivileged user \
         namespaces (unshare/clone with CLONE_NEWUSER), which the engine's seccomp profile refuses to a room \
         without added capabilities (workroom adds none: an engine or profile that allows them is needed)"
    )
}

pub(super) struct Output {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs a command in the room and collects its output and exit code.
pub(super) async fn capture(link: &RoomLink, request: RunRequest) -> anyhow::Result<Output> {
    let handle = link.run(RunRequest { stdin: false, ..request }).await?;
    let _ = handle.send_eof().await;
    let (mut out, mut err, mut code) = (Vec::new(), Vec::new(), None);
    while let Some(event) = handle.recv().await {
        match event {
            Event::Data(b) => out.extend_from_slice(&b),
            Event::Stderr(b) => err.extend_from_slice(&b),
            Event::Exit(s) => code = s.code,
            Event::Eof => break,
            Event::Reset(m) => anyhow::bail!("{m}"),
        }
    }
    Ok(Output {
        code,
        stdout: String::from_utf8_lossy(&out).into_owned(),
        stderr: String::from_utf8_lossy(&err).into_owned(),
    })
}

fn sh(script: &str, args: &[&str]) -> Vec<String> {
    ["/bin/sh", "-c", script, "sh"].iter().chain(args).map(|s| s.to_string()).collect()
}

/// The per-user folder in the storage tmpfs.
pub fn user_storage(user: &str) -> String {
    format!("{INNER_STORAGE}/{user}")
}

/// Prepares the room for nested containers; returns the warnings for `up`.
pub async fn prepare(link: &RoomLink, remote_user: &str) -> Vec<String> {
    match prepare_inner(link, remote_user).await {
        Ok(w) => w,
        Err(e) => vec![format!("nested containers were not set up: {e:#}")],
    }
}

async fn prepare_inner(link: &RoomLink, remote_user: &str) -> anyhow::Result<Vec<String>> {
    let root = ROOT_SCRIPT.replace("@WRAPPER@", WRAPPER).replace("@STORAGE@", INNER_STORAGE);
    let out = capture(link, RunRequest { argv: sh(&root, &[]), ..Default::default() }).await?;
    if out.code != Some(0) {
        anyhow::bail!("installing {WRAPPER_PATH} failed: {}", out.stderr.trim());
    }
    if out.stdout.contains("podman=no") {
        return Ok(vec![MISSING_TOOLS.into()]);
    }
    let user = Some(remote_user.to_string());
    let script = USER_SCRIPT.replace("@MARK@", MARK);
    let storage = user_storage(remote_user);
    let out =
        capture(link, RunRequest { argv: sh(&script, &[&storage]), user: user.clone(), ..Default::default() }).await?;
    if out.code != Some(0) {
        anyhow::bail!("writing the podman configuration for {remote_user} failed: {}", out.stderr.trim());
    }
    let mut warnings: Vec<String> = out
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("kept="))
        .map(|kept| format!("{kept} is not workroom's: kept as it is (inner storage may not be in the tmpfs)"))
        .collect();
    // `podman info` sets up its user namespace and storage: where the engine
    // refuses them, this is where it shows, once, in podman's own words.
    let argv = ["podman", "info", "--format", "{{.Store.GraphRoot}}"].map(String::from).to_vec();
    let out = capture(link, RunRequest { argv, user, ..Default::default() }).await?;
    if out.code != Some(0) {
        warnings.push(engine_refusal(&out.stderr));
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_refusal_gives_podmans_words_and_what_is_needed() {
        let m = engine_refusal(
            "time=\"x\" level=warning msg=\"y\"\ncannot clone: Operation not permitted\nError: cannot re-exec process\n",
        );
        assert!(
            m.starts_with(
                "nested containers are not possible on this engine: cannot clone: Operation not permitted: \
                 Error: cannot re-exec process; they need unprivileged user namespaces"
            ),
            "{m}"
        );
    }

    #[test]
    fn the_wrapper_and_scripts_are_filled_in() {
        let root = ROOT_SCRIPT.replace("@WRAPPER@", WRAPPER).replace("@STORAGE@", INNER_STORAGE);
        assert!(!root.contains("@STORAGE@") && !root.contains("@WRAPPER@"));
        assert!(root.contains("exec podman \"$@\"\nWORKROOM_EOF"), "the heredoc must end on its own line");
        assert!(!USER_SCRIPT.replace("@MARK@", MARK).contains('@'));
    }
}
