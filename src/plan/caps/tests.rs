//! Table tests: the caps as written (settings files, devcontainer.json,
//! flags), which one holds when the settings and `runArgs` both give one,
//! the create request they shape, and what `up` says of a room made with
//! other caps.

use super::*;
use crate::config::loaded_for_test;
use crate::plan::create;
use crate::settings::{self, Flags, SettingsFile};
use std::path::{Path, PathBuf};

const MIB: i64 = 1 << 20;
const GIB: i64 = 1 << 30;

fn toml(text: &str) -> Result<SettingsFile, settings::SettingsError> {
    settings::parse(text, Path::new("/w/.workroom.toml"))
}

fn project(text: &str) -> SettingsFile {
    toml(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

/// The settings' caps from a user file, a project file and flags.
fn asked_of(user: &str, project_file: &str, flags: CapsFile) -> Asked {
    let flags = Flags { caps: flags, ..Default::default() };
    settings::merge(&project(user), &project(project_file), flags, PathBuf::from("/r")).caps
}

/// A room's plan with the caps applied: the plan, and what `up` says.
fn planned(config: &str, asked: &Asked) -> Result<(CreatePlan, Vec<String>), CapsError> {
    let (_dir, loaded) = loaded_for_test(config);
    let mut plan = create::plan("r", "img", &loaded, &create::ImageFacts::default()).unwrap();
    let said = apply(&mut plan, asked)?;
    Ok((plan, said))
}

fn host(plan: &CreatePlan) -> &HostConfig {
    plan.body.host_config.as_ref().unwrap()
}

#[test]
fn the_caps_table_takes_sizes_numbers_and_text_as_docker_run_does() {
    let f = project("[caps]\ncpus = 1.5\nmemory = \"256m\"\nmemory_swap = \"1g\"\npids = 200\ntmp = \"64m\"\n").caps;
    assert_eq!(
        f,
        CapsFile {
            cpus: Some(1_500_000_000),
            memory: Some(256 * MIB),
            memory_swap: Some(GIB),
            pids: Some(200),
            tmp: Some(64 * MIB)
        }
    );
    let f = project("[caps]\ncpus = 2\nmemory = 268435456\nmemory_swap = -1\npids = \"64\"\ntmp = \"1G\"\n").caps;
    assert_eq!(
        (f.cpus, f.memory, f.memory_swap, f.pids, f.tmp),
        (Some(2 * 1_000_000_000), Some(256 * MIB), Some(-1), Some(64), Some(GIB))
    );
    assert_eq!(project("[caps]\ncpus = \"0.5\"\n").caps.cpus, Some(500_000_000));
}

#[test]
fn a_cap_that_cannot_be_read_is_one_line_naming_the_file_the_property_and_the_line() {
    let table = [
        ("[caps]\nmemory = \"lots\"\n", "/w/.workroom.toml: caps.memory: \"lots\" is not a size such as 512m or 4g (line 2)"),
        ("\n[caps]\ncpus = 0\n", "/w/.workroom.toml: caps.cpus: 0 CPUs: give more than 0 and at most 4096 (line 3)"),
        ("[caps]\npids = 5\n", "/w/.workroom.toml: caps.pids: 5 processes is below the least a room runs with, 32 (line 2)"),
        (
            "[caps]\nmemory = \"10m\"\n",
            "/w/.workroom.toml: caps.memory: 10m is below the least a room runs in, 64m (its daemon, a shell and a hook) (line 2)",
        ),
        ("[caps]\ntmp = true\n", "/w/.workroom.toml: caps.tmp must be a size such as 512m or 4g (line 2)"),
        (
            "[caps]\nmemory_swap = -2\n",
            "/w/.workroom.toml: caps.memory_swap: -2 is not a size such as 512m or 4g, or -1 for swap without a cap (line 2)",
        ),
    ];
    for (text, expected) in table {
        let e = toml(text).unwrap_err().to_string();
        assert_eq!(e, expected, "{text:?}");
        assert!(!e.contains('\n'), "{e}");
    }
    let e = toml("[caps]\nmemroy = \"1g\"\n").unwrap_err().to_string();
    assert!(e.starts_with("/w/.workroom.toml: unknown field `memroy`") && e.contains("line 2"), "{e}");
}

#[test]
fn caps_in_devcontainer_json_are_read_under_the_project_file_and_refused_naming_the_property() {
    let custom = |v: serde_json::Value| v.as_object().cloned().unwrap();
    let config = Path::new("/w/.devcontainer/devcontainer.json");
    let c = custom(serde_json::json!({ "workroom": { "caps": { "memory": "512m", "pids": 300 } } }));
    let p = settings::under_customizations(project("[caps]\npids = 100\n"), Some(&c), config).unwrap();
    let s = settings::merge(&SettingsFile::default(), &p, Flags::default(), "/r".into());
    assert_eq!(s.caps.memory, Some((512 * MIB, Source::Customizations)));
    assert_eq!(s.caps.pids, Some((100, Source::Project)), ".workroom.toml wins key by key");
    let bad = custom(serde_json::json!({ "workroom": { "caps": { "memory": "lots" } } }));
    let e = settings::under_customizations(SettingsFile::default(), Some(&bad), config).unwrap_err().to_string();
    assert_eq!(
        e,
        "/w/.devcontainer/devcontainer.json: customizations.workroom.caps.memory: \"lots\" is not a size such as 512m or 4g"
    );
    let unknown = custom(serde_json::json!({ "workroom": { "caps": { "cpu": 2 } } }));
    let e = settings::under_customizations(SettingsFile::default(), Some(&unknown), config).unwrap_err().to_string();
    assert!(
        e.starts_with("/w/.devcontainer/devcontainer.json: customizations.workroom.caps: unknown field `cpu`"),
        "{e}"
    );
}

#[test]
fn each_cap_is_the_flags_then_the_project_files_then_the_users_with_where_it_came_from() {
    let user = "[caps]\ncpus = 4\nmemory = \"8g\"\npids = 1000\n";
    let project_file = "[caps]\nmemory = \"2g\"\n";
    let flags = CapsFile { pids: Some(64), ..Default::default() };
    let a = asked_of(user, project_file, flags);
    assert_eq!(a.nano_cpus, Some((4_000_000_000, Source::User)));
    assert_eq!(a.memory, Some((2 * GIB, Source::Project)));
    assert_eq!(a.pids, Some((64, Source::Flag)));
    assert_eq!((a.memory_swap, a.tmp), (None, None));
    assert_eq!(asked_of("", "", CapsFile::default()), Asked::default());
}

#[test]
fn settings_alone_cap_the_room_with_no_swap_beyond_its_memory_and_an_executable_tmp() {
    let a = asked_of("", "[caps]\ncpus = 1.5\nmemory = \"256m\"\npids = 200\ntmp = \"64m\"\n", CapsFile::default());
    let (plan, said) = planned(r#"{ "image": "x" }"#, &a).unwrap();
    assert!(said.is_empty(), "{said:?}");
    let h = host(&plan);
    assert_eq!(
        (h.nano_cpus, h.memory, h.memory_swap, h.pids_limit),
        (Some(1_500_000_000), Some(256 * MIB), Some(256 * MIB), Some(200))
    );
    let tmp = &h.tmpfs.as_ref().unwrap()[TMP];
    assert_eq!(tmp, &format!("rw,exec,nosuid,nodev,mode=1777,size={}", 64 * MIB));
    assert_eq!(h.oom_score_adj, Some(i64::from(workroomd::room::OOM_SCORE_GAP)));
    let label: serde_json::Value = serde_json::from_str(&plan.body.labels.as_ref().unwrap()[CAPS_LABEL]).unwrap();
    assert_eq!(
        label,
        serde_json::json!({ "cpus": 1.5, "memory": 268435456, "memory_swap": 268435456, "pids": 200, "tmp": 67108864 })
    );
}

#[test]
fn an_uncapped_room_is_left_as_planned() {
    let (plan, said) = planned(r#"{ "image": "x" }"#, &Asked::default()).unwrap();
    assert!(said.is_empty());
    let h = host(&plan);
    assert_eq!((h.nano_cpus, h.memory, h.memory_swap, h.pids_limit, h.oom_score_adj), (None, None, None, None, None));
    assert_eq!(h.tmpfs, None);
    // Recorded as none: what the engine adds of its own (Podman's default
    // pids limit) is then not taken for a cap of ours.
    assert_eq!(plan.body.labels.as_ref().unwrap().get(CAPS_LABEL).map(String::as_str), Some("{}"));
}

#[test]
fn a_room_is_known_by_its_caps_label_not_by_what_its_engine_added() {
    use bollard::models::{ContainerConfig, ContainerInspectResponse};
    let with = |label: Option<&str>| ContainerInspectResponse {
        config: Some(ContainerConfig {
            labels: Some(label.map(|l| (CAPS_LABEL.to_string(), l.to_string())).into_iter().collect()),
            ..Default::default()
        }),
        host_config: Some(HostConfig { pids_limit: Some(2048), ..Default::default() }),
        ..Default::default()
    };
    assert_eq!(Caps::of_container(&with(Some("{}"))), Caps::default(), "Podman's own pids limit is not ours");
    assert_eq!(Caps::of_container(&with(Some(r#"{"pids":200}"#))).pids, Some(200));
    assert_eq!(Caps::of_container(&with(None)).pids, Some(2048), "a room made before the label: its host config");
}

#[test]
fn run_args_caps_hold_alone_and_a_memory_cap_there_gets_no_swap_beyond_it_either() {
    let config = r#"{ "image": "x", "runArgs": ["--cpus", "2", "-m", "1g", "--pids-limit", "300"] }"#;
    let (plan, said) = planned(config, &Asked::default()).unwrap();
    assert!(said.is_empty(), "{said:?}");
    let h = host(&plan);
    assert_eq!(
        (h.nano_cpus, h.memory, h.memory_swap, h.pids_limit),
        (Some(2_000_000_000), Some(GIB), Some(GIB), Some(300))
    );
    let (plan, _) =
        planned(r#"{ "image": "x", "runArgs": ["-m", "1g", "--memory-swap", "3g"] }"#, &Asked::default()).unwrap();
    assert_eq!(host(&plan).memory_swap, Some(3 * GIB), "runArgs' own swap stays");
}

#[test]
fn when_settings_and_run_args_both_cap_the_lower_holds_and_a_warning_names_both() {
    let config = r#"{ "image": "x", "runArgs": ["--memory", "1g", "--cpus", "1", "--pids-limit", "100"] }"#;
    let a = asked_of("", "[caps]\nmemory = \"256m\"\ncpus = 4\npids = 100\n", CapsFile::default());
    let (plan, said) = planned(config, &a).unwrap();
    let h = host(&plan);
    assert_eq!(
        (h.memory, h.memory_swap, h.nano_cpus, h.pids_limit),
        (Some(256 * MIB), Some(256 * MIB), Some(1_000_000_000), Some(100))
    );
    assert_eq!(
        said,
        [
            "caps: runArgs `--cpus 1` and [caps] cpus = 4 in .workroom.toml both cap cpus; the lower, 1, holds",
            "caps: runArgs `--memory 1g` and [caps] memory = 256m in .workroom.toml both cap memory; the lower, 256m, holds",
        ],
        "equal caps (pids) say nothing"
    );
    // A flag is named as the flag.
    let flag = asked_of("", "", CapsFile { memory: Some(2 * GIB), ..Default::default() });
    let (_, said) = planned(config, &flag).unwrap();
    assert_eq!(
        said,
        ["caps: runArgs `--memory 1g` and `workroom up --memory 2g` both cap memory; the lower, 1g, holds"]
    );
}

#[test]
fn swap_is_each_sides_own_ceiling_or_its_memory_and_the_lower_holds() {
    // runArgs would let the room swap 3g; the settings' 512m of memory
    // means no swap past it.
    let config = r#"{ "image": "x", "runArgs": ["--memory", "1g", "--memory-swap", "4g"] }"#;
    let a = asked_of("", "[caps]\nmemory = \"512m\"\n", CapsFile::default());
    let (plan, _) = planned(config, &a).unwrap();
    assert_eq!((host(&plan).memory, host(&plan).memory_swap), (Some(512 * MIB), Some(512 * MIB)));
    // The settings' own swap, over runArgs' memory alone.
    let a = asked_of("", "[caps]\nmemory_swap = \"2g\"\n", CapsFile::default());
    let (plan, _) = planned(r#"{ "image": "x", "runArgs": ["--memory", "1g"] }"#, &a).unwrap();
    assert_eq!((host(&plan).memory, host(&plan).memory_swap), (Some(GIB), Some(GIB)), "runArgs' memory means no swap");
    let a = asked_of("", "[caps]\nmemory = \"1g\"\nmemory_swap = -1\n", CapsFile::default());
    let (plan, _) = planned(r#"{ "image": "x" }"#, &a).unwrap();
    assert_eq!(host(&plan).memory_swap, Some(-1));
    let (plan, said) =
        planned(r#"{ "image": "x", "runArgs": ["--memory", "1g", "--memory-swap", "2g"] }"#, &a).unwrap();
    assert_eq!(host(&plan).memory_swap, Some(2 * GIB));
    assert_eq!(
        said,
        ["caps: runArgs `--memory-swap 2g` and [caps] memory_swap = -1 in .workroom.toml both cap memory_swap; the lower, 2g, holds"]
    );
}

#[test]
fn swap_below_memory_or_without_memory_is_refused_naming_where_each_was_said() {
    let a = asked_of("", "[caps]\nmemory = \"1g\"\nmemory_swap = \"512m\"\n", CapsFile::default());
    let e = planned(r#"{ "image": "x" }"#, &a).unwrap_err().to_string();
    assert_eq!(
        e,
        "caps: [caps] memory_swap = 512m in .workroom.toml is less than [caps] memory = 1g in .workroom.toml: \
         memory_swap counts memory and swap together, as `docker run --memory-swap` does"
    );
    let a = asked_of("[caps]\nmemory_swap = \"1g\"\n", "", CapsFile::default());
    let e = planned(r#"{ "image": "x" }"#, &a).unwrap_err().to_string();
    assert_eq!(
        e,
        "caps: [caps] memory_swap = 1g in the user's config.toml needs a memory cap too (memory_swap counts memory and swap together)"
    );
}

#[test]
fn settings_cpus_beside_a_run_args_cpu_quota_are_refused_since_the_engine_takes_one() {
    let a = asked_of("", "[caps]\ncpus = 2\n", CapsFile::default());
    let e = planned(r#"{ "image": "x", "runArgs": ["--cpu-quota", "50000"] }"#, &a).unwrap_err().to_string();
    assert!(e.starts_with("caps: [caps] cpus = 2 in .workroom.toml and runArgs `--cpu-quota`/`--cpu-period`"), "{e}");
    // A quota alone is runArgs' own business.
    let (plan, _) = planned(r#"{ "image": "x", "runArgs": ["--cpu-quota", "50000"] }"#, &Asked::default()).unwrap();
    assert_eq!((host(&plan).cpu_quota, host(&plan).nano_cpus), (Some(50000), None));
}

#[test]
fn tmp_takes_run_args_own_tmpfs_options_with_the_lower_size_and_yields_to_another_mount_with_a_warning() {
    let a = asked_of("", "[caps]\ntmp = \"256m\"\n", CapsFile::default());
    let (plan, said) = planned(r#"{ "image": "x", "runArgs": ["--tmpfs", "/tmp:rw,noexec,size=1g"] }"#, &a).unwrap();
    assert_eq!(host(&plan).tmpfs.as_ref().unwrap()[TMP], format!("rw,noexec,size={}", 256 * MIB));
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("--tmpfs /tmp:size=1g") && said[0].contains("the lower, 256m, holds"), "{said:?}");
    let (plan, said) = planned(r#"{ "image": "x", "runArgs": ["--tmpfs", "/tmp"] }"#, &a).unwrap();
    assert_eq!(host(&plan).tmpfs.as_ref().unwrap()[TMP], format!("size={}", 256 * MIB));
    assert!(said.is_empty(), "an unsized tmpfs has no cap to weigh: {said:?}");
    let mounted = r#"{ "image": "x", "mounts": ["type=volume,source=scratch,target=/tmp"] }"#;
    let (plan, said) = planned(mounted, &a).unwrap();
    assert_eq!(host(&plan).tmpfs, None);
    assert_eq!(
        said,
        ["caps: [caps] tmp = 256m in .workroom.toml is not applied: /tmp is a volume mount (mounts or runArgs)"]
    );
    assert_eq!(
        Caps::of_labels(
            plan.body.labels.as_ref().map(|l| l.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).as_ref()
        ),
        Caps::default()
    );
}

#[test]
fn a_tmp_that_can_hold_the_whole_memory_is_warned_of() {
    let a = asked_of("", "[caps]\nmemory = \"256m\"\ntmp = \"256m\"\n", CapsFile::default());
    let (_, said) = planned(r#"{ "image": "x" }"#, &a).unwrap();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].starts_with("caps: /tmp (256m) can hold the room's whole memory (256m)"), "{said:?}");
    let a = asked_of("", "[caps]\nmemory = \"256m\"\ntmp = \"64m\"\n", CapsFile::default());
    assert!(planned(r#"{ "image": "x" }"#, &a).unwrap().1.is_empty());
}

#[test]
fn run_args_own_oom_score_stays() {
    let a = asked_of("", "[caps]\nmemory = \"1g\"\n", CapsFile::default());
    let (plan, _) = planned(r#"{ "image": "x", "runArgs": ["--oom-score-adj", "100"] }"#, &a).unwrap();
    assert_eq!(host(&plan).oom_score_adj, Some(100));
    let (plan, _) = planned(r#"{ "image": "x" }"#, &asked_of("", "[caps]\npids = 64\n", CapsFile::default())).unwrap();
    assert_eq!(host(&plan).oom_score_adj, None, "only a memory cap sets the room's OOM order");
}

#[test]
fn the_caps_read_back_from_the_host_config_and_the_label_are_the_caps_decided() {
    let a = asked_of(
        "",
        "[caps]\ncpus = 0.25\nmemory = \"3g\"\nmemory_swap = \"4g\"\npids = 64\ntmp = \"100m\"\n",
        CapsFile::default(),
    );
    let (plan, _) = planned(r#"{ "image": "x" }"#, &a).unwrap();
    let decided = Caps {
        nano_cpus: Some(250_000_000),
        memory: Some(3 * GIB),
        memory_swap: Some(4 * GIB),
        pids: Some(64),
        tmp: Some(100 * MIB),
    };
    assert_eq!(Caps::of_host_config(host(&plan)), decided);
    let labels: std::collections::HashMap<String, String> = plan.body.labels.clone().unwrap().into_iter().collect();
    assert_eq!(Caps::of_labels(Some(&labels)), decided);
    assert_eq!(decided.summary(), "cpus 0.25, memory 3g (+1g swap), pids 64, /tmp 100m");
    assert_eq!(Caps::default().summary(), "-");
    assert_eq!(Caps::of_labels(None), Caps::default());
}

#[test]
fn a_room_made_with_other_caps_than_asked_now_is_told_to_be_recreated() {
    let made = Caps { memory: Some(512 * MIB), memory_swap: Some(512 * MIB), ..Default::default() };
    let wanted = Caps { memory: Some(256 * MIB), memory_swap: Some(256 * MIB), pids: Some(200), ..Default::default() };
    assert_eq!(
        drift("wr-room", &made, &wanted).unwrap(),
        "wr-room was made with memory 512m (now 256m), memory_swap 512m (now 256m), pids none (now 200); \
         caps apply only when a room is made: `workroom up --recreate` applies them"
    );
    assert_eq!(drift("wr-room", &made, &made), None);
}

#[test]
fn the_caps_wanted_now_weigh_run_args_read_again_so_an_unchanged_room_says_nothing() {
    let config = r#"{ "image": "x", "runArgs": ["--memory", "1g"] }"#;
    let a = asked_of("", "[caps]\nmemory = \"512m\"\n", CapsFile::default());
    let (plan, _) = planned(config, &a).unwrap();
    let made = host(&plan).clone();
    let (_dir, loaded) = loaded_for_test(config);
    let run =
        super::super::run_args::parse(&loaded.model.run_args, Path::new("/ws"), &super::super::run_args::ThisHost)
            .unwrap()
            .host;
    assert_eq!(drift("r", &Caps::of_host_config(&made), &wanted(&a, &run, &made).unwrap()), None);
    // The settings now ask more than runArgs allows: runArgs' 1g holds.
    let more = asked_of("", "[caps]\nmemory = \"4g\"\n", CapsFile::default());
    let line = drift("r", &Caps::of_host_config(&made), &wanted(&more, &run, &made).unwrap()).unwrap();
    assert!(line.starts_with("r was made with memory 512m (now 1g), memory_swap 512m (now 1g)"), "{line}");
}

#[test]
fn cpus_and_sizes_are_written_as_a_person_writes_them() {
    assert_eq!(
        (cpus_text(1_500_000_000), cpus_text(2_000_000_000), cpus_text(10_000_000)),
        ("1.5".into(), "2".into(), "0.01".into())
    );
    assert_eq!(
        (size_text(256 * MIB), size_text(3 * GIB), size_text(1000)),
        ("256m".into(), "3g".into(), "1000".into())
    );
    assert_eq!(parse_cpus("0.001").unwrap_err(), CapsError::CpusTooFew { cpus: 0.001 });
    assert_eq!(parse_cpus("0.001").unwrap_err().to_string(), "0.001 CPUs: the engine takes at least 0.01");
    assert_eq!(parse_memory("10m").unwrap_err(), CapsError::MemoryBelowLeast { bytes: 10 * MIB });
    assert_eq!(
        parse_memory_swap("lots").unwrap_err().to_string(),
        "\"lots\" is not a size such as 512m or 4g, or -1 for swap without a cap"
    );
}
