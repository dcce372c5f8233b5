//! Which daemon a room gets. workroom carries a static daemon for x86_64 and
//! one for aarch64; the room's image decides, not the host: an x86_64 engine
//! runs arm64 images through binfmt (qemu-user), and Docker Desktop on Apple
//! Silicon runs amd64 images through Rosetta, so either engine can hold rooms
//! of both platforms. An image that reports no platform gets the engine's.
//! `WORKROOM_DAEMON_ARCH` overrides the choice.

use std::fmt;

/// The environment variable that overrides the choice (`x86_64`, `aarch64`,
/// or Docker's `amd64`, `arm64`).
pub const ARCH_ENV: &str = "WORKROOM_DAEMON_ARCH";

/// The label on a room naming the platform of the daemon it was given
/// (`linux/amd64`, `linux/arm64`), so `list`, `up --json` and `hand-off`
/// know it without inspecting the image.
pub const PLATFORM_LABEL: &str = "workroom.platform";

/// A daemon workroom can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    /// The kernel's name for it (`uname -m`), as Rust's targets spell it.
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// The platform of images it runs, as Docker spells it.
    pub fn platform(self) -> &'static str {
        match self {
            Arch::X86_64 => "linux/amd64",
            Arch::Aarch64 => "linux/arm64",
        }
    }

    /// The Rust target its daemon is built for (build.rs).
    pub fn target(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-musl",
            Arch::Aarch64 => "aarch64-unknown-linux-musl",
        }
    }

    /// Either spelling: the kernel's (`x86_64`, `aarch64`) or Docker's
    /// (`amd64`, `arm64`).
    pub fn from_name(name: &str) -> Option<Arch> {
        match name {
            "x86_64" | "amd64" => Some(Arch::X86_64),
            "aarch64" | "arm64" => Some(Arch::Aarch64),
            _ => None,
        }
    }

    /// The architecture an executable is built for, from its ELF header: a
    /// 64-bit little-endian ELF whose `e_machine` is x86-64 (62) or AArch64
    /// (183). Anything else is none of ours.
    pub fn of_elf(bytes: &[u8]) -> Option<Arch> {
        const EM_X86_64: u16 = 62;
        const EM_AARCH64: u16 = 183;
        let header = bytes.get(..20)?;
        if header[..4] != *b"\x7fELF" || header[4] != 2 || header[5] != 1 {
            return None;
        }
        match u16::from_le_bytes([header[18], header[19]]) {
            EM_X86_64 => Some(Arch::X86_64),
            EM_AARCH64 => Some(Arch::Aarch64),
            _ => None,
        }
    }

    /// The arch of a room's daemon from its [`PLATFORM_LABEL`]; `None` for
    /// a platform this workroom does not know.
    pub fn of_room(label: Option<&str>) -> Option<Arch> {
        let platform = room_platform(label);
        Arch::ALL.into_iter().find(|a| a.platform() == platform)
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A platform as the engine reports it: an image's `Os`, `Architecture` and
/// `Variant`, or the engine's own (`Os`, `Arch` of its version).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    pub variant: String,
}

impl Platform {
    pub fn new(os: &str, architecture: &str, variant: &str) -> Platform {
        Platform { os: os.into(), architecture: architecture.into(), variant: variant.into() }
    }
}

impl Platform {
    /// `os/arch[/variant]` as `--platform` takes it (`linux/arm64`,
    /// `linux/arm/v7`); `None` for anything else.
    pub fn parse(text: &str) -> Option<Platform> {
        let mut parts = text.split('/');
        let (os, arch) = (parts.next()?, parts.next()?);
        let variant = parts.next().unwrap_or_default();
        if os.is_empty() || arch.is_empty() || parts.next().is_some() {
            return None;
        }
        Some(Platform::new(os, arch, variant))
    }

    /// Whether an image of this platform is one of the `asked`: the same os
    /// and architecture (by the engine's names or the kernel's), and the
    /// same variant when one is asked.
    pub fn satisfies(&self, asked: &Platform) -> bool {
        let arch = |a: &str| match a {
            "x86_64" => "amd64".to_string(),
            "aarch64" => "arm64".to_string(),
            other => other.to_string(),
        };
        let os = |o: &str| if o.is_empty() { "linux".to_string() } else { o.to_string() };
        os(&self.os) == os(&asked.os)
            && arch(&self.architecture) == arch(&asked.architecture)
            && (asked.variant.is_empty() || self.variant == asked.variant)
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let os = if self.os.is_empty() { "linux" } else { &self.os };
        write!(f, "{os}/{}", self.architecture)?;
        if !self.variant.is_empty() {
            write!(f, "/{}", self.variant)?;
        }
        Ok(())
    }
}

/// The platform of a room's daemon from its [`PLATFORM_LABEL`]. A room
/// without the label was made before workroom carried a second daemon, when
/// every room got the x86_64 one.
pub fn room_platform(label: Option<&str>) -> &str {
    label.unwrap_or(Arch::X86_64.platform())
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PickError {
    #[error("{whose} platform is {platform}; workroom carries daemons for linux/amd64 and linux/arm64 only")]
    Unsupported { whose: &'static str, platform: String },
    #[error("{ARCH_ENV}={value} names no daemon workroom carries (x86_64 or aarch64)")]
    BadOverride { value: String },
    #[error("neither the image nor the engine reports a platform; set {ARCH_ENV}=x86_64 or aarch64")]
    Unknown,
    #[error(
        "this workroom was built without its {arch} daemon (for {platform} rooms): \
         `rustup target add {target}` and rebuild workroom"
    )]
    NotCarried { arch: Arch, platform: &'static str, target: &'static str },
}

/// The daemon a room gets: `overridden` (the value of [`ARCH_ENV`]) if set,
/// else the image's platform, else the engine's (`engine` is asked for only
/// when the image reports no architecture). `carried` is what this build of
/// workroom holds.
pub fn pick(
    overridden: Option<&str>,
    image: &Platform,
    engine: Option<&Platform>,
    carried: &[Arch],
) -> Result<Arch, PickError> {
    let arch = match overridden.filter(|v| !v.is_empty()) {
        Some(value) => Arch::from_name(value).ok_or_else(|| PickError::BadOverride { value: value.into() })?,
        None if !image.architecture.is_empty() => of_platform(image, "the image's")?,
        None => match engine.filter(|e| !e.architecture.is_empty()) {
            Some(engine) => of_platform(engine, "the engine's")?,
            None => return Err(PickError::Unknown),
        },
    };
    if !carried.contains(&arch) {
        return Err(PickError::NotCarried { arch, platform: arch.platform(), target: arch.target() });
    }
    Ok(arch)
}

/// The daemon for a platform, if we carry one. Docker names architectures as
/// Go does (`amd64`, `arm64`); the kernel's names are taken too, as Docker
/// normalises them. 32-bit arm (`arm`, any variant, v8 included: that is
/// aarch32) is not aarch64. Any amd64 or arm64 variant runs the baseline
/// binary.
fn of_platform(p: &Platform, whose: &'static str) -> Result<Arch, PickError> {
    let unsupported = || PickError::Unsupported { whose, platform: p.to_string() };
    if !(p.os.is_empty() || p.os == "linux") {
        return Err(unsupported());
    }
    Arch::from_name(&p.architecture).ok_or_else(unsupported)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: &[Arch] = &[Arch::X86_64, Arch::Aarch64];

    /// What the case is, the override, the image's and the engine's
    /// platforms, and the pick.
    type Case<'a> = (&'a str, Option<&'a str>, &'a Platform, Option<&'a Platform>, Result<Arch, PickError>);

    fn platform(spec: &str) -> Platform {
        let mut parts = spec.split('/');
        let os = parts.next().unwrap_or("");
        let arch = parts.next().unwrap_or("");
        Platform::new(os, arch, parts.next().unwrap_or(""))
    }

    #[test]
    fn the_image_platform_picks_the_daemon_and_the_engine_only_fills_in() {
        let amd64 = platform("linux/amd64");
        let arm64 = platform("linux/arm64");
        let none = Platform::default();
        let cases: &[Case] = &[
            ("image arm64", None, &platform("linux/arm64/v8"), Some(&amd64), Ok(Arch::Aarch64)),
            ("image arm64, no variant", None, &arm64, Some(&amd64), Ok(Arch::Aarch64)),
            ("image amd64 on an arm64 engine", None, &amd64, Some(&arm64), Ok(Arch::X86_64)),
            ("image amd64 v3", None, &platform("linux/amd64/v3"), None, Ok(Arch::X86_64)),
            ("image spelled as the kernel does", None, &platform("linux/aarch64"), None, Ok(Arch::Aarch64)),
            ("image with no os said", None, &platform("/arm64"), None, Ok(Arch::Aarch64)),
            ("no platform: the engine's", None, &none, Some(&arm64), Ok(Arch::Aarch64)),
            ("no platform: the engine's amd64", None, &none, Some(&amd64), Ok(Arch::X86_64)),
            ("the override wins over the image", Some("aarch64"), &amd64, Some(&amd64), Ok(Arch::Aarch64)),
            ("the override in Docker's spelling", Some("amd64"), &arm64, None, Ok(Arch::X86_64)),
            ("an empty override is no override", Some(""), &arm64, None, Ok(Arch::Aarch64)),
            (
                "s390x refused, named",
                None,
                &platform("linux/s390x"),
                Some(&amd64),
                Err(PickError::Unsupported { whose: "the image's", platform: "linux/s390x".into() }),
            ),
            (
                "ppc64le refused",
                None,
                &platform("linux/ppc64le"),
                None,
                Err(PickError::Unsupported { whose: "the image's", platform: "linux/ppc64le".into() }),
            ),
            (
                "32-bit arm refused with its variant",
                None,
                &platform("linux/arm/v7"),
                None,
                Err(PickError::Unsupported { whose: "the image's", platform: "linux/arm/v7".into() }),
            ),
            (
                "aarch32 (arm/v8) is not aarch64",
                None,
                &platform("linux/arm/v8"),
                None,
                Err(PickError::Unsupported { whose: "the image's", platform: "linux/arm/v8".into() }),
            ),
            (
                "386 refused",
                None,
                &platform("linux/386"),
                None,
                Err(PickError::Unsupported { whose: "the image's", platform: "linux/386".into() }),
            ),
            (
                "a windows image refused",
                None,
                &platform("windows/amd64"),
                None,
                Err(PickError::Unsupported { whose: "the image's", platform: "windows/amd64".into() }),
            ),
            (
                "no platform on an s390x engine: the engine's refused",
                None,
                &none,
                Some(&platform("linux/s390x")),
                Err(PickError::Unsupported { whose: "the engine's", platform: "linux/s390x".into() }),
            ),
            ("no platform anywhere", None, &none, None, Err(PickError::Unknown)),
            (
                "an override naming no daemon",
                Some("riscv64"),
                &amd64,
                None,
                Err(PickError::BadOverride { value: "riscv64".into() }),
            ),
        ];
        for (what, overridden, image, engine, want) in cases {
            assert_eq!(&pick(*overridden, image, *engine, BOTH), want, "{what}");
        }
    }

    #[test]
    fn an_arm64_image_on_a_workroom_built_without_the_aarch64_daemon_is_refused_with_how_to_add_it() {
        let err = pick(None, &platform("linux/arm64"), None, &[Arch::X86_64]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "this workroom was built without its aarch64 daemon (for linux/arm64 rooms): \
             `rustup target add aarch64-unknown-linux-musl` and rebuild workroom"
        );
        assert_eq!(pick(None, &platform("linux/amd64"), None, &[Arch::X86_64]), Ok(Arch::X86_64));
    }

    #[test]
    fn the_refusal_names_the_platform_and_what_is_carried() {
        let err = pick(None, &platform("linux/s390x"), None, BOTH).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the image's platform is linux/s390x; workroom carries daemons for linux/amd64 and linux/arm64 only"
        );
    }

    #[test]
    fn the_elf_header_names_the_daemons_arch() {
        let elf = |class: u8, machine: u16| {
            let mut h = vec![0x7f, b'E', b'L', b'F', class, 1];
            h.resize(18, 0);
            h.extend_from_slice(&machine.to_le_bytes());
            h
        };
        assert_eq!(Arch::of_elf(&elf(2, 62)), Some(Arch::X86_64));
        assert_eq!(Arch::of_elf(&elf(2, 183)), Some(Arch::Aarch64));
        assert_eq!(Arch::of_elf(&elf(1, 40)), None, "32-bit arm");
        assert_eq!(Arch::of_elf(&elf(2, 22)), None, "s390x");
        assert_eq!(Arch::of_elf(b"#!/bin/sh\n"), None);
        assert_eq!(Arch::of_elf(&elf(2, 62)[..19]), None, "cut short");
    }

    #[test]
    fn a_room_without_the_platform_label_has_the_x86_64_daemon_older_workrooms_gave_every_room() {
        assert_eq!(room_platform(None), "linux/amd64");
        assert_eq!(room_platform(Some("linux/arm64")), "linux/arm64");
        assert_eq!(Arch::of_room(None), Some(Arch::X86_64));
        assert_eq!(Arch::of_room(Some("linux/arm64")), Some(Arch::Aarch64));
        assert_eq!(Arch::of_room(Some("linux/amd64")), Some(Arch::X86_64));
        assert_eq!(Arch::of_room(Some("linux/riscv64")), None);
    }

    #[test]
    fn an_asked_platform_is_os_and_architecture_by_either_name_and_a_variant_only_when_asked() {
        let arm = Platform::parse("linux/arm64").unwrap();
        assert!(Platform::new("linux", "arm64", "v8").satisfies(&arm));
        assert!(Platform::new("linux", "aarch64", "").satisfies(&arm));
        assert!(!Platform::new("linux", "amd64", "").satisfies(&arm));
        assert!(Platform::new("", "x86_64", "").satisfies(&Platform::parse("linux/amd64").unwrap()));
        let v7 = Platform::parse("linux/arm/v7").unwrap();
        assert!(!Platform::new("linux", "arm", "v6").satisfies(&v7));
        for bad in ["linux", "linux/", "/amd64", "linux/arm/v7/x", ""] {
            assert_eq!(Platform::parse(bad), None, "{bad}");
        }
    }
}
