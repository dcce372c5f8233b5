//! What `workroom sync pull|push` does, from three listings of the
//! workspace: as it was at the last sync (the base, kept on this host per
//! room), as it is here, and as it is in the room. A side changed a path
//! when its content (sha256, or being there at all) differs from the base.
//! A path changed on one side only is carried to the other; changed on both
//! to the same content, it is only recorded; changed on both differently, it
//! is a conflict, and neither side is touched (no silent overwrite). Pure.

use std::collections::{BTreeMap, BTreeSet};

/// What a listing knows of one path: enough to tell a change.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    pub size: u64,
    /// Seconds since the epoch (what a tar header carries both ways).
    pub mtime: i64,
    pub sha256: String,
}

/// Path (relative, `/`-separated) to entry.
pub type Listing = BTreeMap<String, Entry>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Room to here.
    Pull,
    /// Here to room.
    Push,
}

/// The plan of one sync.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Paths to copy from the source side to the other.
    pub copy: Vec<String>,
    /// Paths the source side deleted since the base, to delete on the other.
    pub delete: Vec<String>,
    /// Changed on both sides, differently: left alone.
    pub conflicts: Vec<String>,
    /// Changed on the other side only (what the opposite direction carries).
    pub other_way: Vec<String>,
    /// The base after the copies and deletions are done.
    pub base: Listing,
}

/// Whether `side` changed `path` since `base`.
fn changed(base: Option<&Entry>, side: Option<&Entry>) -> bool {
    match (base, side) {
        (None, None) => false,
        (Some(b), Some(s)) => b.sha256 != s.sha256,
        _ => true,
    }
}

fn same(a: Option<&Entry>, b: Option<&Entry>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.sha256 == b.sha256,
        _ => false,
    }
}

/// The plan for `direction`, limited to paths under `only` (a file or a
/// folder, relative) when given; other paths keep their base.
pub fn plan(base: &Listing, here: &Listing, room: &Listing, direction: Direction, only: Option<&str>) -> Plan {
    let (source, target) = match direction {
        Direction::Pull => (room, here),
        Direction::Push => (here, room),
    };
    let within = |path: &str| match only.map(|o| o.trim_end_matches('/')).filter(|o| !o.is_empty() && *o != ".") {
        None => true,
        Some(o) => path == o || path.strip_prefix(o).is_some_and(|rest| rest.starts_with('/')),
    };
    let paths: BTreeSet<&String> = base.keys().chain(here.keys()).chain(room.keys()).collect();
    let mut out = Plan { base: base.clone(), ..Default::default() };
    for path in paths {
        if !within(path) {
            continue;
        }
        let (b, s, t) = (base.get(path), source.get(path), target.get(path));
        let (source_changed, target_changed) = (changed(b, s), changed(b, t));
        let record = |base: &mut Listing, entry: Option<&Entry>| match entry {
            Some(e) => {
                base.insert(path.clone(), e.clone());
            }
            None => {
                base.remove(path);
            }
        };
        match (source_changed, target_changed) {
            (false, false) => {}
            (false, true) => out.other_way.push(path.clone()),
            (true, false) => {
                match s {
                    Some(_) => out.copy.push(path.clone()),
                    None => out.delete.push(path.clone()),
                }
                record(&mut out.base, s);
            }
            (true, true) if same(s, t) => record(&mut out.base, s),
            (true, true) => out.conflicts.push(path.clone()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(sha: &str) -> Entry {
        Entry { size: sha.len() as u64, mtime: 1, sha256: sha.into() }
    }

    fn listing(items: &[(&str, &str)]) -> Listing {
        items.iter().map(|(p, s)| (p.to_string(), e(s))).collect()
    }

    #[test]
    fn each_path_is_carried_recorded_or_refused_by_who_changed_it() {
        use Direction::*;
        // (base, here, room, direction, copy, delete, conflict, other way)
        type Row =
            (Option<&'static str>, Option<&'static str>, Option<&'static str>, Direction, bool, bool, bool, bool);
        let table: [Row; 14] = [
            // Nobody changed it.
            (Some("a"), Some("a"), Some("a"), Pull, false, false, false, false),
            // Made or edited in the room: a pull copies it; a push leaves it.
            (None, None, Some("r"), Pull, true, false, false, false),
            (Some("a"), Some("a"), Some("r"), Pull, true, false, false, false),
            (Some("a"), Some("a"), Some("r"), Push, false, false, false, true),
            // Edited here: a push copies it; a pull leaves it.
            (Some("a"), Some("h"), Some("a"), Push, true, false, false, false),
            (Some("a"), Some("h"), Some("a"), Pull, false, false, false, true),
            (None, Some("h"), None, Push, true, false, false, false),
            // Deleted on one side: the deletion is carried.
            (Some("a"), Some("a"), None, Pull, false, true, false, false),
            (Some("a"), None, Some("a"), Push, false, true, false, false),
            // Changed on both sides to the same content: nothing to carry.
            (Some("a"), Some("b"), Some("b"), Pull, false, false, false, false),
            (None, Some("b"), Some("b"), Push, false, false, false, false),
            // Changed on both sides differently: a conflict either way.
            (Some("a"), Some("h"), Some("r"), Pull, false, false, true, false),
            (Some("a"), Some("h"), Some("r"), Push, false, false, true, false),
            (Some("a"), None, Some("r"), Pull, false, false, true, false),
        ];
        for (i, (b, h, r, dir, copy, delete, conflict, other)) in table.into_iter().enumerate() {
            let one = |x: Option<&str>| x.map(|s| listing(&[("f", s)])).unwrap_or_default();
            let p = plan(&one(b), &one(h), &one(r), dir, None);
            let has = |v: &Vec<String>| v.iter().any(|p| p == "f");
            assert_eq!(
                (has(&p.copy), has(&p.delete), has(&p.conflicts), has(&p.other_way)),
                (copy, delete, conflict, other),
                "row {i}: base {b:?} here {h:?} room {r:?} {dir:?}"
            );
        }
    }

    #[test]
    fn the_new_base_is_what_both_sides_hold_after_the_sync_and_a_conflict_keeps_the_old() {
        let base = listing(&[("same", "s"), ("edited", "a"), ("gone", "g"), ("both", "a")]);
        let here = listing(&[("same", "s"), ("edited", "a"), ("gone", "g"), ("both", "h")]);
        let room = listing(&[("same", "s"), ("edited", "r"), ("both", "r"), ("new", "n")]);
        let p = plan(&base, &here, &room, Direction::Pull, None);
        assert_eq!(p.copy, ["edited", "new"]);
        assert_eq!(p.delete, ["gone"]);
        assert_eq!(p.conflicts, ["both"]);
        assert_eq!(p.base, listing(&[("same", "s"), ("edited", "r"), ("both", "a"), ("new", "n")]));
    }

    #[test]
    fn a_path_limits_the_sync_to_that_file_or_folder() {
        let room = listing(&[("src/a", "1"), ("src/b/c", "2"), ("srcx", "3"), ("top", "4")]);
        let p = plan(&Listing::new(), &Listing::new(), &room, Direction::Pull, Some("src/"));
        assert_eq!(p.copy, ["src/a", "src/b/c"]);
        assert!(!p.base.contains_key("top"), "outside the path, the base is untouched");
        let p = plan(&Listing::new(), &Listing::new(), &room, Direction::Pull, Some("top"));
        assert_eq!(p.copy, ["top"]);
        let p = plan(&Listing::new(), &Listing::new(), &room, Direction::Pull, Some("."));
        assert_eq!(p.copy.len(), 4);
    }
}
