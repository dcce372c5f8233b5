//! Nested containers at `up`: what the engine lets a room be (asked once,
//! when the room is made), then at each start what the image brings, the
//! inner podman set up for the remote user, the `docker`/`podman` wrapper
//! that says what cannot work in a nested room, and one `podman info` to see
//! that it does. Never blocks `up`: each finding is a line, the room starts
//! regardless.
//!
//! How inner podman runs in a room without privilege (ADR 0006):
//! - one id mapped: the remote user is root in its user namespace and
//!   nothing else. Subordinate ids cannot be used without CAP_SYS_ADMIN in
//!   the room: newuidmap writes the map as root, and the kernel asks the
//!   writer of a map for CAP_SYS_ADMIN over the new namespace. The user's
//!   ranges in /etc/subuid and /etc/subgid are commented out so podman
//!   maps one id instead of failing; `ignore_chown_errors` lets images with
//!   several owners unpack;
//! - storage on fuse-overlayfs where a FUSE mount works, else vfs;
//! - the room's network, PID, IPC, UTS and cgroup namespaces shared: the
//!   seccomp profile opens only user and mount namespaces. Sharing the
//!   room's PID namespace also lets crun mount /proc, which Docker's masked
//!   paths forbid for a new PID namespace; cgroups stay podman's default,
//!   since podman refuses `cgroups = "disabled"` without a PID namespace of
//!   the container's own;
//! - no session keyring (`keyctl` stays refused).

use crate::engine::Engine;
use crate::link::RoomLink;
use crate::plan::nested::{Confinement, EngineFacts, INNER_STORAGE};
use bollard::models::{SystemInfo, SystemVersion};
use workroomd::proto::{Event, RunRequest};

/// Said when the image has no podman.
pub const MISSING_TOOLS: &str = "the image has no podman: install podman, fuse-overlayfs and uidmap \
     (apt-get install podman fuse-overlayfs uidmap) in the image to use nested containers";

/// The wrapper: `/.workroom/bin` is workroom's own folder; `docker` and
/// `podman` there link to it, and `/usr/local/bin/docker` and
/// `/usr/local/bin/podman` link to those where the image has neither.
pub const WRAPPER_PATH: &str = "/.workroom/bin/nested-limits";

/// First line of every file workroom writes here: a file without it is the
/// user's and is left alone.
const MARK: &str = "# written by workroom (nested = true); delete this line to keep your own edits";

/// `docker` and `podman` in a nested room: the image's podman, with what
/// cannot work said first. A limit that would fail later in podman's or
/// crun's words (a network or PID namespace of the container's own, a port
/// the room cannot bind) fails here, loudly, with exit 125 (the docker
/// CLI's own failure); `-p` is said to do nothing and passed on (podman
/// ignores it on the host network). Options are read up to the image: what
/// follows is the inner command's.
const WRAPPER: &str = r#"#!/bin/sh
# written by workroom (nested = true): docker and podman run the image's podman, and what cannot work in a nested room is said loudly
say() { echo "workroom: $*" >&2; }
refuse() { say "$*"; exit 125; }
@FIND@
sub=
for a in "$@"; do case $a in -*) ;; *) sub=$a; break ;; esac; done
case $sub in
run | create)
	# The lowest port an unprivileged process may listen on here.
	low=$(cat /proc/sys/net/ipv4/ip_unprivileged_port_start 2>/dev/null) || low=1024
	seen= prev=
	for a in "$@"; do
		if [ -z "$seen" ]; then [ "$a" = "$sub" ] && seen=1; prev=; continue; fi
		spec= net= pid=
		case $prev in
		-p | --publish) spec=$a ;;
		--network | --net) net=$a ;;
		--pid) pid=$a ;;
		esac
		if [ -z "$prev" ]; then
			case $a in
			--publish=*) spec=${a#--publish=} ;;
			-p?*) spec=${a#-p} ;;
			-P | --publish-all) spec=all ;;
			--network=* | --net=*) net=${a#*=} ;;
			--pid=*) pid=${a#--pid=} ;;
			-a | -c | -e | -h | -l | -m | -p | -u | -v | -w | --add-host | --annotation | --attach | --blkio-weight | \
				--cap-add | --cap-drop | --cgroup-parent | --cgroupns | --cidfile | --cpu-period | --cpu-quota | \
				--cpu-shares | --cpus | --cpuset-cpus | --device | --dns | --dns-option | --dns-search | \
				--entrypoint | --env | --env-file | --expose | --group-add | --health-cmd | --hostname | --ipc | \
				--label | --label-file | --log-driver | --log-opt | --memory | --memory-swap | --mount | --name | \
				--net | --network | --pid | --platform | --publish | --pull | --restart | --security-opt | \
				--shm-size | --stop-signal | --stop-timeout | --sysctl | --tmpfs | --ulimit | --user | \
				--userns | --uts | --volume | --volumes-from | --workdir)
				prev=$a
				continue
				;;
			-*) ;;
			*) break ;;
			esac
		fi
		prev=
		if [ -n "$spec" ]; then
			port=${spec##*:}
			port=${port%%/*}
			port=${port%%-*}
			case $port in '' | *[!0-9]*) port= ;; esac
			if [ -n "$port" ] && [ "$port" -lt "$low" ]; then
				refuse "port $port is below $low (net.ipv4.ip_unprivileged_port_start in this room): an inner container cannot listen on it; make the service listen on $low or above"
			fi
			say "-p/--publish has no effect in a nested container: inner containers share the room's network${port:+; the service is on localhost:$port}"
		fi
		case $net in '' | host) ;; *) refuse "--network $net: inner containers can only share the room's network (--network host); a network of their own needs a privilege the room does not have" ;; esac
		case $pid in '' | host) ;; *) refuse "--pid $pid: inner containers share the room's PID namespace; one of their own is refused by the room's seccomp profile" ;; esac
	done
	;;
network)
	for a in "$@"; do
		case $a in create) refuse "user-defined networks are not available in a nested container: inner containers share the room's network (compose needs network_mode: host)" ;; esac
	done
	;;
esac
real=$(real_tool podman) || { say "the image has no podman: install podman, fuse-overlayfs and uidmap to run containers in this room"; exit 127; }
exec "$real" "$@"
"#;

/// The image's own program `$1`: the first on `PATH` that is not the
/// wrapper.
const FIND_TOOL: &str = r#"real_tool() {
	oldifs=$IFS
	IFS=:
	for d in $PATH; do
		if [ -n "$d" ] && [ -x "$d/$1" ] && ! [ "$d/$1" -ef @SELF@ ]; then
			IFS=$oldifs
			echo "$d/$1"
			return 0
		fi
	done
	IFS=$oldifs
	return 1
}"#;

/// As root: the storage tmpfs and /dev/fuse open to the user, the wrapper,
/// the user's subordinate ids set aside when the room cannot use them, and
/// the facts a refusal is explained by. `$1` is the remote user.
const ROOT_SCRIPT: &str = r##"
set -e
user=$1
# The tmpfs comes up root's 0755 whatever mode the request asks; each user
# makes its own folder in it.
chmod 1777 @STORAGE@
# The room's /dev/fuse copies the host's node and its mode, often root's
# alone; podman runs as the user. Mounting still needs a mount namespace of
# one's own, as on any host where /dev/fuse is 0666.
if [ -c /dev/fuse ]; then chmod 0666 /dev/fuse; fi
mkdir -p /.workroom/bin
cat > @SELF@.new <<'WORKROOM_EOF'
@WRAPPER@WORKROOM_EOF
chmod 0755 @SELF@.new
mv -f @SELF@.new @SELF@
@FIND@
# podman always goes through the wrapper; docker only where the image has
# no docker of its own (a docker CLI talking to some engine stays itself).
for tool in docker podman; do
	ln -sfn nested-limits /.workroom/bin/$tool
	if [ "$tool" = docker ] && real_tool docker >/dev/null; then continue; fi
	if [ -d /usr/local/bin ] && [ ! -e /usr/local/bin/$tool ] && [ ! -L /usr/local/bin/$tool ]; then
		ln -s /.workroom/bin/$tool /usr/local/bin/$tool
	fi
done
echo "podman=$(real_tool podman || :)"
# Subordinate ids need CAP_SYS_ADMIN (bit 21) in the room; without it the
# user's ranges would make podman fail instead of mapping one id.
mapping=ranges
capeff=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status)
if [ $((0x$capeff >> 21 & 1)) = 0 ]; then
	mapping=single
	uid=$(id -u "$user" 2>/dev/null || :)
	for f in /etc/subuid /etc/subgid; do
		[ -f "$f" ] || continue
		if awk -v u="$user:" -v n="${uid:+$uid:}" '
			index($0, u) == 1 || (n != "" && index($0, n) == 1) { print "#workroom: unusable without CAP_SYS_ADMIN in the room, podman maps one id (nested = true): " $0; hit = 1; next }
			{ print }
			END { exit !hit }' "$f" > "$f.workroom"; then
			cat "$f.workroom" > "$f"
		fi
		rm -f "$f.workroom"
	done
fi
echo "mapping=$mapping"
echo "userns_clone=$(cat /proc/sys/kernel/unprivileged_userns_clone 2>/dev/null || :)"
echo "max_user_namespaces=$(cat /proc/sys/user/max_user_namespaces 2>/dev/null || :)"
echo "apparmor_restrict=$(cat /proc/sys/kernel/apparmor_restrict_unprivileged_userns 2>/dev/null || :)"
echo "uid_map=$(head -n1 /proc/self/uid_map | tr -s ' \t' ' ' | sed 's/^ //')"
echo "lsm=$(tr -d '\0' < /proc/self/attr/current 2>/dev/null || :)"
"##;

/// As the remote user: podman's storage in the room's tmpfs, and its
/// defaults for a room (see the module doc). `$1` is the storage folder,
/// `$2` `single` or `ranges`.
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
# fuse-overlayfs where a FUSE mount works (tried in a namespace of our own),
# else vfs: a full copy per layer, but it needs nothing.
driver=vfs
fuse=$(command -v fuse-overlayfs || :)
if [ -n "$fuse" ] && [ -c /dev/fuse ] && (exec 3<>/dev/fuse) 2>/dev/null; then
	if command -v unshare >/dev/null 2>&1; then
		p="$1/fuse-probe"
		rm -rf "$p" && mkdir -p "$p/l" "$p/u" "$p/w" "$p/m"
		if unshare -rm sh -c '"$1" -o "lowerdir=$2/l,upperdir=$2/u,workdir=$2/w" "$2/m" && umount "$2/m"' sh "$fuse" "$p" >/dev/null 2>&1; then
			driver=overlay
		fi
		rm -rf "$p"
	else
		driver=overlay
	fi
fi
opts=
if [ "$2" = single ]; then opts='ignore_chown_errors = "true"'; fi
if [ "$driver" = overlay ]; then opts="[storage.options.overlay]
mount_program = \"$fuse\"
$opts"; else opts="[storage.options.vfs]
$opts"; fi
echo "storage=$driver"
if [ "$(id -u)" = 0 ]; then dir=/etc/containers; conf=$dir/containers.conf.d/workroom.conf; else dir=${XDG_CONFIG_HOME:-$HOME/.config}/containers; conf=$dir/containers.conf; fi
write "$dir/storage.conf" "[storage]
driver = \"$driver\"
graphroot = \"$1/storage\"
runroot = \"$1/run\"

$opts
"
write "$conf" '[containers]
netns = "host"
pidns = "host"
ipcns = "host"
utsns = "host"
cgroupns = "host"
keyring = false
log_driver = "k8s-file"

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
'
"#;

/// What the engine is, from `docker info` and `docker version`.
pub fn engine_facts(info: &SystemInfo, version: &SystemVersion) -> EngineFacts {
    let component = version.components.as_ref().and_then(|c| c.first());
    let name = component.map(|c| c.name.clone()).unwrap_or_else(|| "Docker Engine".into());
    let number = component.map(|c| c.version.clone()).or_else(|| version.version.clone()).unwrap_or_default();
    EngineFacts {
        podman: name.to_lowercase().contains("podman"),
        product: format!("{name} {number}").trim().to_string(),
        api_version: version.api_version.clone().unwrap_or_default(),
        arch: info.architecture.clone().unwrap_or_default(),
        security_options: info.security_options.clone().unwrap_or_default(),
    }
}

/// What this engine lets a nested room be; an engine that will not say is
/// a refusal, named.
pub async fn confinement(engine: &Engine) -> Confinement {
    match engine.describe().await {
        Ok((info, version)) => crate::plan::nested::confinement(&engine_facts(&info, &version)),
        Err(e) => Confinement::Refused(format!("the engine did not say what it enforces ({e})")),
    }
}

/// What the room showed about user namespaces (the root script's lines).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoomFacts {
    /// The image's podman, if any.
    pub podman: Option<String>,
    /// `single` or `ranges`.
    pub mapping: String,
    pub userns_clone: String,
    pub max_user_namespaces: String,
    pub apparmor_restrict: String,
    /// The room's own `/proc/self/uid_map` first line, spaces squeezed.
    pub uid_map: String,
    /// The room's LSM label (`/proc/self/attr/current`).
    pub lsm: String,
}

impl RoomFacts {
    pub fn parse(lines: &str) -> RoomFacts {
        let mut f = RoomFacts::default();
        for (key, value) in lines.lines().filter_map(|l| l.split_once('=')) {
            let value = value.trim().to_string();
            match key {
                "podman" => f.podman = Some(value).filter(|v| !v.is_empty()),
                "mapping" => f.mapping = value,
                "userns_clone" => f.userns_clone = value,
                "max_user_namespaces" => f.max_user_namespaces = value,
                "apparmor_restrict" => f.apparmor_restrict = value,
                "uid_map" => f.uid_map = value,
                "lsm" => f.lsm = value,
                _ => {}
            }
        }
        f
    }
}

/// The uid map of a container the engine runs in the host's own user
/// namespace.
const HOST_UID_MAP: &str = "0 0 4294967295";

/// What `up` says when podman cannot start in the room: the cause the room
/// shows, if it shows one, then podman's own words.
pub fn refusal(facts: &RoomFacts, podman_error: &str) -> String {
    let words: Vec<&str> =
        podman_error.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with("time=")).collect();
    let words = if words.is_empty() { "podman info failed".to_string() } else { words.join(": ") };
    let cause = if facts.userns_clone == "0" {
        Some("the host forbids unprivileged user namespaces (kernel.unprivileged_userns_clone = 0)".to_string())
    } else if facts.max_user_namespaces == "0" {
        Some("the host allows no user namespaces (user.max_user_namespaces = 0)".to_string())
    } else if facts.apparmor_restrict == "1" {
        Some(
            "the host lets only AppArmor-approved programs make user namespaces \
             (kernel.apparmor_restrict_unprivileged_userns = 1)"
                .to_string(),
        )
    } else if !facts.uid_map.is_empty() && facts.uid_map != HOST_UID_MAP {
        Some(format!(
            "the engine runs the room in a user namespace of its own (a rootless engine or userns-remap; \
             uid map {})",
            facts.uid_map
        ))
    } else if facts.lsm.contains("docker-default") {
        Some(format!("AppArmor confines the room ({}) and refuses mount", facts.lsm))
    } else {
        None
    };
    match cause {
        Some(cause) => format!("nested containers cannot start in this room: {cause}; podman said: {words}"),
        None => format!("nested containers cannot start in this room: podman said: {words}"),
    }
}

struct Output {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

async fn capture(link: &RoomLink, request: RunRequest) -> anyhow::Result<Output> {
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

fn root_script() -> String {
    ROOT_SCRIPT
        .replace("@WRAPPER@", &WRAPPER.replace("@FIND@", FIND_TOOL))
        .replace("@FIND@", FIND_TOOL)
        .replace("@SELF@", WRAPPER_PATH)
        .replace("@STORAGE@", INNER_STORAGE)
}

/// Prepares the room for nested containers; returns the lines for `up`.
pub async fn prepare(link: &RoomLink, remote_user: &str) -> Vec<String> {
    match prepare_inner(link, remote_user).await {
        Ok(w) => w,
        Err(e) => vec![format!("nested containers were not set up: {e:#}")],
    }
}

async fn prepare_inner(link: &RoomLink, remote_user: &str) -> anyhow::Result<Vec<String>> {
    let out = capture(link, RunRequest { argv: sh(&root_script(), &[remote_user]), ..Default::default() }).await?;
    if out.code != Some(0) {
        anyhow::bail!("installing {WRAPPER_PATH} failed: {}", out.stderr.trim());
    }
    let facts = RoomFacts::parse(&out.stdout);
    if facts.podman.is_none() {
        return Ok(vec![MISSING_TOOLS.into()]);
    }
    let user = Some(remote_user.to_string());
    let script = USER_SCRIPT.replace("@MARK@", MARK);
    let storage = user_storage(remote_user);
    let args = [storage.as_str(), facts.mapping.as_str()];
    let out = capture(link, RunRequest { argv: sh(&script, &args), user: user.clone(), ..Default::default() }).await?;
    if out.code != Some(0) {
        anyhow::bail!("writing the podman configuration for {remote_user} failed: {}", out.stderr.trim());
    }
    let mut warnings: Vec<String> = out
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("kept="))
        .map(|kept| format!("{kept} is not workroom's: kept as it is (inner storage may not be in the tmpfs)"))
        .collect();
    // `podman info` makes podman's user namespace and storage: where the
    // room cannot, this is where it shows, once.
    let argv = ["podman", "info", "--format", "{{.Store.GraphRoot}}"].map(String::from).to_vec();
    let out = capture(link, RunRequest { argv, user, ..Default::default() }).await?;
    if out.code != Some(0) {
        warnings.push(refusal(&facts, &out.stderr));
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn room(lines: &str) -> RoomFacts {
        RoomFacts::parse(&format!("podman=/usr/bin/podman\nmapping=single\nuid_map=0 0 4294967295\n{lines}"))
    }

    const CLONE_FAILED: &str =
        "time=\"x\" level=warning msg=\"y\"\ncannot clone: Operation not permitted\nError: cannot re-exec process\n";

    #[test]
    fn a_refusal_names_the_hosts_user_namespace_switch_that_is_off() {
        for (lines, cause) in [
            ("userns_clone=0", "the host forbids unprivileged user namespaces (kernel.unprivileged_userns_clone = 0)"),
            ("max_user_namespaces=0", "the host allows no user namespaces (user.max_user_namespaces = 0)"),
            ("apparmor_restrict=1", "(kernel.apparmor_restrict_unprivileged_userns = 1)"),
            ("uid_map=0 1000 1", "a rootless engine or userns-remap; uid map 0 1000 1"),
            ("lsm=docker-default (enforce)", "AppArmor confines the room (docker-default (enforce)) and refuses mount"),
        ] {
            let m = refusal(&room(lines), CLONE_FAILED);
            assert!(m.starts_with("nested containers cannot start in this room: "), "{m}");
            assert!(m.contains(cause), "{lines}: {m}");
            assert!(
                m.ends_with("podman said: cannot clone: Operation not permitted: Error: cannot re-exec process"),
                "{m}"
            );
        }
    }

    #[test]
    fn a_refusal_with_no_cause_in_sight_gives_podmans_words_alone() {
        let m = refusal(&room("userns_clone=\nmax_user_namespaces=15000\nlsm="), CLONE_FAILED);
        assert_eq!(
            m,
            "nested containers cannot start in this room: podman said: cannot clone: Operation not permitted: \
             Error: cannot re-exec process"
        );
        assert!(refusal(&room(""), "").ends_with("podman said: podman info failed"));
    }

    #[test]
    fn room_facts_read_the_root_scripts_lines_and_an_empty_podman_is_none() {
        let f = RoomFacts::parse("podman=\nmapping=ranges\nuid_map=0 0 4294967295\nnoise\n");
        assert_eq!((f.podman, f.mapping.as_str(), f.uid_map.as_str()), (None, "ranges", HOST_UID_MAP));
    }

    #[test]
    fn engine_facts_tell_podman_from_docker_by_the_component() {
        let version = |name: &str| SystemVersion {
            components: Some(vec![bollard::models::SystemVersionComponents {
                name: name.into(),
                version: "4.9.3".into(),
                details: None,
            }]),
            api_version: Some("1.41".into()),
            ..Default::default()
        };
        let info = SystemInfo { architecture: Some("x86_64".into()), ..Default::default() };
        let f = engine_facts(&info, &version("Podman Engine"));
        assert!(f.podman);
        assert_eq!(f.product, "Podman Engine 4.9.3");
        assert!(!engine_facts(&info, &version("Engine")).podman);
    }

    #[test]
    fn the_scripts_are_filled_in() {
        let root = root_script();
        for placeholder in ["@WRAPPER@", "@FIND@", "@SELF@", "@STORAGE@"] {
            assert!(!root.contains(placeholder), "{placeholder} left unfilled");
        }
        assert!(root.contains("exec \"$real\" \"$@\"\nWORKROOM_EOF"), "the heredoc must end on its own line");
        assert!(root.contains(&format!("-ef {WRAPPER_PATH} ]")));
        assert!(!USER_SCRIPT.replace("@MARK@", MARK).contains("@MARK@"));
    }
}
