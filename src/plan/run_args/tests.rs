//! Table tests: every `docker run` flag that has a field in the create
//! request, in each spelling, and every refusal with its reason.

use super::*;
use std::collections::HashMap;
use std::path::PathBuf;

/// A host with a few variables and files, for `-e NAME` and the file flags.
struct FakeHost {
    vars: HashMap<&'static str, &'static str>,
    files: HashMap<PathBuf, &'static str>,
}

impl Host for FakeHost {
    fn var(&self, name: &str) -> Option<String> {
        self.vars.get(name).map(|v| v.to_string())
    }
    fn read(&self, path: &Path) -> std::io::Result<String> {
        self.files.get(path).map(|t| t.to_string()).ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
    }
}

fn host() -> FakeHost {
    FakeHost {
        vars: HashMap::from([("FROM_HOST", "hv")]),
        files: HashMap::from([
            (PathBuf::from("/ws/.devcontainer/dev.env"), "# comment\n\nA=1\n  B=two words\nFROM_HOST\nUNSET_HERE\n"),
            (PathBuf::from("/abs/labels"), "team=infra\n# x\nsolo\n"),
        ]),
    }
}

fn run(args: &[&str]) -> Result<RunArgs, RunArgsError> {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    parse(&args, Path::new("/ws"), &host())
}

fn ok(args: &[&str]) -> RunArgs {
    run(args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// The same flag in its spellings must give the same result.
fn same(spellings: &[&[&str]]) -> RunArgs {
    let first = ok(spellings[0]);
    for s in &spellings[1..] {
        assert_eq!(ok(s), first, "{s:?} differs from {:?}", spellings[0]);
    }
    first
}

#[test]
fn read_only_and_tmpfs_are_mapped_not_refused_as_the_reference_accepts_them() {
    let r = same(&[&["--read-only", "--tmpfs", "/tmp:size=64m"], &["--read-only=true", "--tmpfs=/tmp:size=64m"]]);
    assert_eq!(r.host.readonly_rootfs, Some(true));
    assert_eq!(r.host.tmpfs, Some(HashMap::from([("/tmp".to_string(), "size=64m".to_string())])));
    assert_eq!(ok(&["--tmpfs", "/run"]).host.tmpfs, Some(HashMap::from([("/run".into(), "".into())])));
    assert_eq!(ok(&["--read-only=false"]).host.readonly_rootfs, Some(false));
}

#[test]
fn resource_flags_map_onto_the_host_config() {
    let r = ok(&[
        "--shm-size=1g",
        "-m",
        "4g",
        "--memory-swap",
        "-1",
        "--memory-reservation=512m",
        "--memory-swappiness=10",
        "--cpus",
        "1.5",
        "-c",
        "512",
        "--cpuset-cpus=0-1",
        "--cpuset-mems",
        "0",
        "--cpu-period=100000",
        "--cpu-quota=50000",
        "--cpu-rt-period=1000",
        "--cpu-rt-runtime=950",
        "--cpu-count=2",
        "--cpu-percent=50",
        "--pids-limit",
        "200",
        "--oom-score-adj=-500",
        "--oom-kill-disable",
        "--blkio-weight=300",
        "--blkio-weight-device=/dev/sda:200",
        "--device-read-bps=/dev/sda:1mb",
        "--device-write-bps",
        "/dev/sda:2m",
        "--device-read-iops=/dev/sda:100",
        "--device-write-iops=/dev/sda:50",
        "--io-maxbandwidth=10m",
        "--io-maxiops=1000",
    ]);
    let h = &r.host;
    assert_eq!(h.shm_size, Some(1 << 30));
    assert_eq!(h.memory, Some(4 << 30));
    assert_eq!(h.memory_swap, Some(-1));
    assert_eq!(h.memory_reservation, Some(512 << 20));
    assert_eq!(h.memory_swappiness, Some(10));
    assert_eq!(h.nano_cpus, Some(1_500_000_000));
    assert_eq!(h.cpu_shares, Some(512));
    assert_eq!(h.cpuset_cpus.as_deref(), Some("0-1"));
    assert_eq!(h.cpuset_mems.as_deref(), Some("0"));
    assert_eq!((h.cpu_period, h.cpu_quota), (Some(100_000), Some(50_000)));
    assert_eq!((h.cpu_realtime_period, h.cpu_realtime_runtime), (Some(1000), Some(950)));
    assert_eq!((h.cpu_count, h.cpu_percent), (Some(2), Some(50)));
    assert_eq!(h.pids_limit, Some(200));
    assert_eq!(h.oom_score_adj, Some(-500));
    assert_eq!(h.oom_kill_disable, Some(true));
    assert_eq!(h.blkio_weight, Some(300));
    assert_eq!(h.blkio_weight_device.as_ref().unwrap()[0].weight, Some(200));
    assert_eq!(h.blkio_device_read_bps.as_ref().unwrap()[0].rate, Some(1 << 20));
    assert_eq!(h.blkio_device_write_bps.as_ref().unwrap()[0].rate, Some(2 << 20));
    assert_eq!(h.blkio_device_read_iops.as_ref().unwrap()[0].rate, Some(100));
    assert_eq!(h.blkio_device_write_iops.as_ref().unwrap()[0].path.as_deref(), Some("/dev/sda"));
    assert_eq!((h.io_maximum_bandwidth, h.io_maximum_iops), (Some(10 << 20), Some(1000)));
}

#[test]
fn ulimits_take_a_soft_and_an_optional_hard_limit() {
    let r = same(&[
        &["--ulimit", "nofile=1024:2048", "--ulimit=core=0"],
        &["--ulimit=nofile=1024:2048", "--ulimit", "core=0"],
    ]);
    let limits = r.host.ulimits.unwrap();
    assert_eq!((limits[0].name.as_deref(), limits[0].soft, limits[0].hard), (Some("nofile"), Some(1024), Some(2048)));
    assert_eq!((limits[1].name.as_deref(), limits[1].soft, limits[1].hard), (Some("core"), Some(0), Some(0)));
    assert!(matches!(run(&["--ulimit", "nofile"]), Err(RunArgsError::Invalid { .. })));
}

#[test]
fn name_resolution_flags_map_onto_the_host_config_and_the_container() {
    let r = ok(&[
        "--add-host=db:10.0.0.2",
        "--dns",
        "1.1.1.1",
        "--dns-search=corp",
        "--dns-option",
        "ndots:2",
        "--dns-opt=timeout:1",
        "-h",
        "box",
        "--domainname=example.org",
    ]);
    assert_eq!(r.host.extra_hosts.unwrap(), ["db:10.0.0.2"]);
    assert_eq!(r.host.dns.unwrap(), ["1.1.1.1"]);
    assert_eq!(r.host.dns_search.unwrap(), ["corp"]);
    assert_eq!(r.host.dns_options.unwrap(), ["ndots:2", "timeout:1"]);
    assert_eq!(r.body.hostname.as_deref(), Some("box"));
    assert_eq!(r.body.domainname.as_deref(), Some("example.org"));
    assert_eq!(
        same(&[&["--hostname", "x"], &["--hostname=x"], &["-h", "x"], &["-hx"], &["-h=x"]]).body.hostname.as_deref(),
        Some("x")
    );
}

#[test]
fn labels_come_from_flags_and_label_files() {
    let r = ok(&["-l", "a=1", "--label=b", "--label-file", "/abs/labels", "-lc=3"]);
    let pairs: Vec<(&str, &str)> = r.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(pairs, [("a", "1"), ("b", ""), ("team", "infra"), ("solo", ""), ("c", "3")]);
}

#[test]
fn env_comes_from_flags_the_host_and_env_files_as_the_docker_cli_reads_them() {
    let r = ok(&[
        "-e",
        "A=1",
        "--env=B=2",
        "-eC=3",
        "-e",
        "FROM_HOST",
        "-e",
        "UNSET_HERE",
        "--env-file",
        ".devcontainer/dev.env",
    ]);
    assert_eq!(r.env, ["A=1", "B=2", "C=3", "FROM_HOST=hv", "A=1", "B=two words", "FROM_HOST=hv"]);
    let err = run(&["--env-file", "missing.env"]).unwrap_err().to_string();
    assert!(err.starts_with("runArgs: `--env-file` /ws/missing.env: cannot read it ("), "{err}");
}

#[test]
fn namespaces_and_isolation_map_onto_the_host_config() {
    let r = ok(&[
        "--ipc=host",
        "--uts",
        "host",
        "--pid=host",
        "--userns=host",
        "--cgroupns=private",
        "--cgroup-parent=/mine",
        "--isolation=default",
        "--runtime",
        "runc",
    ]);
    let h = &r.host;
    assert_eq!(
        (h.ipc_mode.as_deref(), h.uts_mode.as_deref(), h.pid_mode.as_deref()),
        (Some("host"), Some("host"), Some("host"))
    );
    assert_eq!(h.userns_mode.as_deref(), Some("host"));
    assert_eq!(h.cgroupns_mode, Some(bollard::models::HostConfigCgroupnsModeEnum::PRIVATE));
    assert_eq!(h.cgroup_parent.as_deref(), Some("/mine"));
    assert_eq!(h.isolation, Some(bollard::models::HostConfigIsolationEnum::DEFAULT));
    assert_eq!(h.runtime.as_deref(), Some("runc"));
    assert!(matches!(run(&["--cgroupns", "sideways"]), Err(RunArgsError::Invalid { .. })));
}

#[test]
fn security_and_device_flags_map_onto_the_host_config() {
    let r = ok(&[
        "--cap-add=SYS_PTRACE",
        "--cap-drop",
        "NET_RAW",
        "--security-opt",
        "seccomp=unconfined",
        "--privileged",
        "--device=/dev/fuse",
        "--device",
        "/dev/a:/dev/b:r",
        "--device-cgroup-rule=c 10:* rwm",
        "--group-add",
        "video",
        "--sysctl",
        "net.ipv4.ip_forward=1",
        "--storage-opt=size=10G",
        "--annotation",
        "a=b",
    ]);
    assert_eq!(r.cap_add, ["SYS_PTRACE"]);
    assert_eq!(r.cap_drop, ["NET_RAW"]);
    assert_eq!(r.security_opt, ["seccomp=unconfined"]);
    assert!(r.privileged);
    let devices = r.host.devices.unwrap();
    assert_eq!(devices[0].path_in_container.as_deref(), Some("/dev/fuse"));
    assert_eq!(
        (devices[1].path_in_container.as_deref(), devices[1].cgroup_permissions.as_deref()),
        (Some("/dev/b"), Some("r"))
    );
    assert_eq!(r.host.device_cgroup_rules.unwrap(), ["c 10:* rwm"]);
    assert_eq!(r.host.group_add.unwrap(), ["video"]);
    assert_eq!(r.host.sysctls.unwrap()["net.ipv4.ip_forward"], "1");
    assert_eq!(r.host.storage_opt.unwrap()["size"], "10G");
    assert_eq!(r.host.annotations.unwrap()["a"], "b");
}

#[test]
fn gpus_become_device_requests_as_the_docker_cli_reads_them() {
    let all = ok(&["--gpus", "all"]).host.device_requests.unwrap();
    assert_eq!(all[0].count, Some(-1));
    assert_eq!(all[0].capabilities, Some(vec![vec!["gpu".to_string()]]));
    let two = ok(&["--gpus=2"]).host.device_requests.unwrap();
    assert_eq!(two[0].count, Some(2));
    let picked = ok(&["--gpus", "\"device=0,2\",capabilities=compute,driver=nvidia"]).host.device_requests.unwrap();
    assert_eq!(picked[0].device_ids, Some(vec!["0".to_string(), "2".to_string()]));
    assert_eq!(picked[0].driver.as_deref(), Some("nvidia"));
    assert_eq!(picked[0].capabilities, Some(vec![vec!["compute".to_string()]]));
    let refused = |args: &[&str]| run(args).unwrap_err();
    let (flag, gpus) = (String::from("--gpus"), |v: &str| v.to_string());
    assert_eq!(
        refused(&["--gpus", "many"]),
        RunArgsError::GpusCount { flag: flag.clone(), value: gpus("many"), field: gpus("many") }
    );
    assert_eq!(
        refused(&["--gpus", "count=x"]),
        RunArgsError::GpusCount { flag: flag.clone(), value: gpus("count=x"), field: gpus("x") }
    );
    assert_eq!(
        refused(&["--gpus", "colour=red"]),
        RunArgsError::GpusField { flag: flag.clone(), value: gpus("colour=red"), field: gpus("colour") }
    );
    assert_eq!(
        refused(&["--gpus", "options=a"]),
        RunArgsError::GpusOptions { flag: flag.clone(), value: gpus("options=a") }
    );
    assert_eq!(
        refused(&["--gpus=count=1,device=0"]).to_string(),
        "runArgs: `--gpus` value \"count=1,device=0\" is invalid: count and device cannot be given together"
    );
}

#[test]
fn network_flags_map_onto_the_network_mode_and_its_endpoint() {
    let r = ok(&[
        "--net=mynet",
        "--ip",
        "10.1.0.5",
        "--ip6=fd00::5",
        "--link-local-ip=169.254.1.1",
        "--network-alias",
        "api",
        "--net-alias=web",
        "--mac-address=02:42:ac:11:00:02",
        "--link",
        "db:db",
        "-p",
        "8080:80",
        "--publish=127.0.0.1:9000:9000/udp",
        "-P",
        "--expose=8000-8002/udp",
        "--expose",
        "9",
    ]);
    assert_eq!(r.network.as_deref(), Some("mynet"));
    let endpoint = r.endpoint.unwrap();
    let ipam = endpoint.ipam_config.unwrap();
    assert_eq!((ipam.ipv4_address.as_deref(), ipam.ipv6_address.as_deref()), (Some("10.1.0.5"), Some("fd00::5")));
    assert_eq!(ipam.link_local_ips.unwrap(), ["169.254.1.1"]);
    assert_eq!(endpoint.aliases.unwrap(), ["api", "web"]);
    assert_eq!(endpoint.mac_address.as_deref(), Some("02:42:ac:11:00:02"));
    assert_eq!(r.host.links.unwrap(), ["db:db"]);
    assert_eq!(r.publish, ["8080:80", "127.0.0.1:9000:9000/udp"]);
    assert_eq!(r.host.publish_all_ports, Some(true));
    assert_eq!(r.body.exposed_ports.unwrap(), ["8000/udp", "8001/udp", "8002/udp", "9/tcp"]);
    assert_eq!(
        same(&[&["--network", "host"], &["--network=host"], &["--net", "host"]]).network.as_deref(),
        Some("host")
    );
}

#[test]
fn storage_flags_map_onto_mounts_binds_and_volume_settings() {
    let r = ok(&[
        "-v",
        "/a:/b:ro",
        "--volume=cache:/cache",
        "--mount",
        "type=tmpfs,target=/scratch,tmpfs-size=64m",
        "--volume-driver=local",
        "--volumes-from",
        "other:ro",
    ]);
    assert_eq!(r.binds, ["/a:/b:ro", "cache:/cache"]);
    assert_eq!(r.mounts[0].kind, "tmpfs");
    assert_eq!(r.mounts[0].tmpfs_size, Some(64 << 20));
    assert_eq!(r.host.volume_driver.as_deref(), Some("local"));
    assert_eq!(r.host.volumes_from.unwrap(), ["other:ro"]);
}

#[test]
fn process_flags_map_onto_the_container() {
    let r = ok(&[
        "-u",
        "1000:1000",
        "-w",
        "/src",
        "--entrypoint=/bin/app",
        "--stop-signal",
        "SIGINT",
        "--stop-timeout=30",
        "--restart",
        "on-failure:3",
        "--init",
        "--platform=linux/arm64",
        "--log-driver",
        "json-file",
        "--log-opt",
        "max-size=10m",
        "--log-opt=max-file=3",
    ]);
    assert_eq!(r.user.as_deref(), Some("1000:1000"));
    assert_eq!(r.body.working_dir.as_deref(), Some("/src"));
    assert_eq!(r.entrypoint.as_deref(), Some("/bin/app"));
    assert_eq!(r.body.stop_signal.as_deref(), Some("SIGINT"));
    assert_eq!(r.body.stop_timeout, Some(30));
    let restart = r.host.restart_policy.unwrap();
    assert_eq!(
        (restart.name, restart.maximum_retry_count),
        (Some(bollard::models::RestartPolicyNameEnum::ON_FAILURE), Some(3))
    );
    assert_eq!(r.init, Some(true));
    assert_eq!(r.platform.as_deref(), Some("linux/arm64"));
    let log = r.host.log_config.unwrap();
    assert_eq!(log.typ.as_deref(), Some("json-file"));
    assert_eq!(
        log.config.unwrap(),
        HashMap::from([("max-size".into(), "10m".into()), ("max-file".into(), "3".into())])
    );
    assert!(matches!(run(&["-w", "src"]), Err(RunArgsError::Invalid { .. })));
    assert!(matches!(run(&["--restart", "sometimes"]), Err(RunArgsError::Invalid { .. })));
}

#[test]
fn health_checks_map_with_go_durations() {
    let r = ok(&[
        "--health-cmd",
        "curl -f localhost",
        "--health-interval=1m30s",
        "--health-timeout",
        "500ms",
        "--health-start-period=1.5s",
        "--health-start-interval=2s",
        "--health-retries=3",
    ]);
    let hc = r.body.healthcheck.unwrap();
    assert_eq!(hc.test.unwrap(), ["CMD-SHELL", "curl -f localhost"]);
    assert_eq!(hc.interval, Some(90_000_000_000));
    assert_eq!(hc.timeout, Some(500_000_000));
    assert_eq!(hc.start_period, Some(1_500_000_000));
    assert_eq!(hc.start_interval, Some(2_000_000_000));
    assert_eq!(hc.retries, Some(3));
    assert_eq!(ok(&["--no-healthcheck"]).body.healthcheck.unwrap().test.unwrap(), ["NONE"]);
    assert!(matches!(run(&["--health-interval", "soon"]), Err(RunArgsError::Invalid { .. })));
}

#[test]
fn flags_of_the_docker_clis_own_terminal_are_accepted_and_do_nothing() {
    let r = ok(&[
        "-it",
        "-d",
        "-ti",
        "--interactive",
        "--tty=true",
        "-a",
        "STDOUT",
        "--attach=STDERR",
        "--detach-keys=ctrl-x",
        "--sig-proxy=false",
        "--disable-content-trust",
        "-q",
        "--pull",
        "missing",
    ]);
    assert_eq!(r, RunArgs::default());
}

#[test]
fn booleans_run_together_with_a_valued_short_flag_last() {
    let r = ok(&["-itd", "-ite", "A=1", "-itP"]);
    assert_eq!(r.env, ["A=1"]);
    assert_eq!(r.host.publish_all_ports, Some(true));
}

#[test]
fn rm_is_not_refused_as_the_reference_accepts_it_and_is_left_out_with_a_note() {
    let r = same(&[&["--rm"], &["--rm=true"]]);
    assert_eq!(r.ignored.len(), 1, "{r:?}");
    assert!(r.ignored[0].starts_with("runArgs: `--rm` is ignored: a room outlives its stops"), "{:?}", r.ignored);
    assert_eq!(RunArgs { ignored: Vec::new(), ..r }, RunArgs::default(), "--rm changes nothing else");
    assert_eq!(ok(&["--rm=false"]), RunArgs::default(), "--rm=false asks for nothing");
}

#[test]
fn name_is_not_refused_as_the_reference_accepts_it_and_is_kept_for_the_plan_to_say_the_room_keeps_its_own() {
    let r = same(&[&["--name", "x"], &["--name=x"]]);
    assert_eq!(r.name.as_deref(), Some("x"));
    assert_eq!(RunArgs { name: None, ..r }, RunArgs::default(), "--name changes nothing else");
    assert_eq!(ok(&["--name", "a", "--name", "b"]).name.as_deref(), Some("b"), "the last one, as docker run");
}

#[test]
fn what_cannot_apply_to_a_room_is_refused_by_name_with_the_reason() {
    for (args, flag, why) in [
        (&["--cidfile=/tmp/id"][..], "--cidfile", "up --json"),
        (&["--kernel-memory", "1g"][..], "--kernel-memory", "removed from the Engine API"),
        (&["--pull=always"][..], "--pull", "only when it is missing"),
        (&["--use-api-socket"][..], "--use-api-socket", "mount the socket"),
    ] {
        let err = run(args).unwrap_err().to_string();
        assert!(err.starts_with(&format!("runArgs: `{flag}` cannot apply to a room: ")), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
}

#[test]
fn a_flag_docker_run_does_not_have_is_named() {
    assert_eq!(run(&["--frobnicate"]).unwrap_err(), RunArgsError::Unknown("--frobnicate".into()));
    assert_eq!(run(&["-Z"]).unwrap_err(), RunArgsError::Unknown("-Z".into()));
}

#[test]
fn a_flag_without_its_value_is_named() {
    assert_eq!(run(&["--cap-add"]).unwrap_err(), RunArgsError::MissingValue("--cap-add".into()));
    assert_eq!(run(&["-e"]).unwrap_err(), RunArgsError::MissingValue("-e".into()));
}

#[test]
fn a_bad_size_names_flag_and_value() {
    let err = run(&["--memory", "lots"]).unwrap_err().to_string();
    assert!(err.contains("`--memory` value \"lots\" is invalid"), "{err}");
    assert!(run(&["--read-only=maybe"]).unwrap_err().to_string().contains("expected true or false"));
}

#[test]
fn a_stray_word_is_not_a_flag() {
    assert_eq!(run(&["debian"]).unwrap_err(), RunArgsError::NotAFlag("debian".into()));
}

#[test]
fn sizes_and_durations_read_as_the_docker_cli_reads_them() {
    for (text, bytes) in [
        ("1g", 1i64 << 30),
        ("1.5g", 3 << 29),
        ("512M", 512 << 20),
        ("2gb", 2 << 30),
        ("1GiB", 1 << 30),
        ("100", 100),
        ("1t", 1 << 40),
    ] {
        assert_eq!(mounts::parse_size(text), Some(bytes), "{text}");
    }
    for bad in ["", "g", "1x", "-1g", "1.2.3q"] {
        assert_eq!(mounts::parse_size(bad), None, "{bad}");
    }
    assert_eq!(parse_duration("1h2m3s"), Some(3_723_000_000_000));
    assert_eq!(parse_duration("0"), Some(0));
    assert_eq!(parse_duration("10"), None);
}
