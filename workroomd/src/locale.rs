//! Which locale a pane gets. The client's `LANG` and `LC_*` when the image
//! has that locale; else `C.UTF-8` where the image's C library provides it
//! (so bash shows `é`, not `\u00e9`); else nothing, because a name the
//! image lacks makes every program warn (`setlocale: cannot change
//! locale`). A name set by the image or the configuration wins over all.
//!
//! What the image has is read from its files: glibc's compiled locales in
//! `/usr/lib/locale` (folders, or names in `locale-archive`); musl accepts
//! every name and is UTF-8 throughout; an image with no C library at all
//! (busybox) only looks for "UTF-8" in the name, so `C.UTF-8` suits it.

use std::collections::BTreeMap;
use std::path::Path;

const LOCALE_DIR: &str = "/usr/lib/locale";
/// glibc's archive is read to find a name only up to this size: a few
/// locales take ~3 MiB, Debian's locales-all ~220 MiB, too much to read on
/// a pane's open (the name then counts as absent, and C.UTF-8 is used).
const MAX_ARCHIVE: u64 = 64 << 20;

/// What the image's C library offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Libc {
    /// glibc: only compiled locales exist.
    Glibc,
    /// musl: every name works, always UTF-8.
    Musl,
    /// Static programs only (busybox).
    None,
}

/// The image's C library, from the dynamic loaders it ships.
pub fn image_libc() -> Libc {
    let found = |dir: &str, prefix: &str| {
        std::fs::read_dir(dir)
            .is_ok_and(|entries| entries.flatten().any(|e| e.file_name().to_string_lossy().starts_with(prefix)))
    };
    if found("/lib", "ld-musl-") {
        Libc::Musl
    } else if found("/lib64", "ld-linux") || found("/lib", "ld-linux") {
        Libc::Glibc
    } else {
        Libc::None
    }
}

/// glibc's spelling of a locale's codeset in file names (`en_US.UTF-8` is
/// found as `en_US.utf8`).
fn normalized(name: &str) -> String {
    match name.split_once('.') {
        Some((lang, rest)) => {
            let (codeset, modifier) = rest.split_once('@').map_or((rest, None), |(c, m)| (c, Some(m)));
            let codeset: String =
                codeset.chars().filter(|c| c.is_ascii_alphanumeric()).map(|c| c.to_ascii_lowercase()).collect();
            match modifier {
                Some(m) => format!("{lang}.{codeset}@{m}"),
                None => format!("{lang}.{codeset}"),
            }
        }
        None => name.to_string(),
    }
}

/// Whether glibc in this image can load `name`.
fn glibc_has(name: &str) -> bool {
    let norm = normalized(name);
    if [name, norm.as_str()].iter().any(|n| Path::new(LOCALE_DIR).join(n).join("LC_CTYPE").exists()) {
        return true;
    }
    let archive = Path::new(LOCALE_DIR).join("locale-archive");
    let small = std::fs::metadata(&archive).is_ok_and(|m| m.len() <= MAX_ARCHIVE);
    small
        && std::fs::read(&archive).is_ok_and(|bytes| {
            let needle = format!("{norm}\0");
            bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
        })
}

/// The image's answer to "can this locale be used here?".
pub fn available(libc: Libc, name: &str) -> bool {
    match libc {
        Libc::Musl => true,
        Libc::Glibc => glibc_has(name),
        // Nothing loads locales; busybox only checks for UTF-8 in the name.
        Libc::None => is_utf8(name),
    }
}

fn is_utf8(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.contains("utf-8") || lower.contains("utf8")
}

/// The locale variables to set: for each of the client's, its value if
/// `has` it, else `C.UTF-8` if `has` that, else none; `LANG=C.UTF-8` when
/// the client sent no `LANG`, `LC_ALL` or `LC_CTYPE`. Names in `keep` (set
/// by the image or the configuration) are left alone.
pub fn choose(
    client: &BTreeMap<String, String>,
    keep: impl Fn(&str) -> bool,
    has: impl Fn(&str) -> bool,
) -> BTreeMap<String, String> {
    let utf8 = has("C.UTF-8");
    let mut chosen = BTreeMap::new();
    for (name, value) in client {
        if !(name == "LANG" || name.starts_with("LC_")) || keep(name) {
            continue;
        }
        if value.is_empty() || value == "C" || value == "POSIX" || has(value) {
            chosen.insert(name.clone(), value.clone());
        } else if utf8 {
            chosen.insert(name.clone(), "C.UTF-8".into());
        }
    }
    let any_ctype = ["LANG", "LC_ALL", "LC_CTYPE"].iter().any(|n| chosen.contains_key(*n) || keep(n));
    if !any_ctype && utf8 {
        chosen.insert("LANG".into(), "C.UTF-8".into());
    }
    chosen
}

/// `workroomd locale [--keep NAME]… [NAME=VALUE]…`: the locale variables
/// for `exec -t`, chosen here as for a pane, since only the room can see
/// its locales; one `NAME=VALUE` a line. `NAME=VALUE` are the client's;
/// `--keep` names what the configuration sets itself; what the image sets
/// is this process's own env (an exec inherits the container's).
pub fn job(args: &[String]) -> i32 {
    let mut client = BTreeMap::new();
    let mut keep = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--keep" {
            let Some(name) = it.next() else {
                eprintln!("workroomd locale: --keep needs a name");
                return 2;
            };
            keep.push(name.clone());
        } else if let Some((name, value)) = arg.split_once('=') {
            client.insert(name.to_string(), value.to_string());
        } else {
            eprintln!("workroomd locale: {arg:?} is neither NAME=VALUE nor --keep NAME");
            return 2;
        }
    }
    let libc = image_libc();
    let kept = |name: &str| keep.iter().any(|k| k == name) || std::env::var_os(name).is_some();
    for (name, value) in choose(&client, kept, |n| available(libc, n)) {
        println!("{name}={value}");
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_clients_locale_is_used_where_the_image_has_it_else_c_utf8() {
        let has = |n: &str| n == "C.UTF-8" || n == "de_DE.UTF-8";
        let client = map(&[("LANG", "en_US.UTF-8"), ("LC_TIME", "de_DE.UTF-8"), ("LC_COLLATE", "C"), ("PATH", "/x")]);
        let chosen = choose(&client, |_| false, has);
        assert_eq!(chosen, map(&[("LANG", "C.UTF-8"), ("LC_TIME", "de_DE.UTF-8"), ("LC_COLLATE", "C")]));
    }

    #[test]
    fn with_no_client_locale_a_pane_gets_c_utf8_only_where_the_image_provides_it() {
        assert_eq!(choose(&BTreeMap::new(), |_| false, |n| n == "C.UTF-8"), map(&[("LANG", "C.UTF-8")]));
        assert_eq!(choose(&map(&[("LANG", "en_US.UTF-8")]), |_| false, |_| false), BTreeMap::new());
    }

    #[test]
    fn a_locale_the_image_or_the_configuration_sets_wins() {
        let chosen = choose(&map(&[("LANG", "en_US.UTF-8")]), |n| n == "LANG", |_| true);
        assert_eq!(chosen, BTreeMap::new());
    }

    #[test]
    fn glibc_finds_utf8_locales_under_its_own_spelling() {
        assert_eq!(normalized("en_US.UTF-8"), "en_US.utf8");
        assert_eq!(normalized("sr_RS.UTF-8@latin"), "sr_RS.utf8@latin");
        assert_eq!(normalized("C"), "C");
        assert!(available(Libc::None, "C.UTF-8") && !available(Libc::None, "en_US.ISO-8859-1"));
    }
}
