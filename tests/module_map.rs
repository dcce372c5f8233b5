//! docs/architecture.md's module map is the tree: a file added, moved or
//! removed without its line in the map fails here (a claim in a doc is a
//! test nobody runs, unless it is one). No engine needed.

use std::collections::BTreeSet;
use std::path::Path;

/// Every `.rs` file under `dir` (relative to the repository), but the
/// table tests' own `tests.rs` files, which belong to the module beside them.
fn sources(root: &Path, dir: &str, found: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(root.join(dir)).unwrap() {
        let entry = entry.unwrap();
        let path = format!("{dir}/{}", entry.file_name().to_string_lossy());
        if entry.file_type().unwrap().is_dir() {
            sources(root, &path, found);
        } else if path.ends_with(".rs") && !path.ends_with("/tests.rs") {
            found.insert(path);
        }
    }
}

#[test]
fn the_architecture_docs_module_map_names_every_source_file_and_no_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut tree = BTreeSet::new();
    sources(root, "src", &mut tree);
    sources(root, "workroomd/src", &mut tree);
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let map = doc.split("## Module map").nth(1).expect("docs/architecture.md has a `## Module map` section");
    let map = map.split("\n## ").next().unwrap_or_default();
    let listed: BTreeSet<String> =
        map.lines().filter_map(|l| l.strip_prefix("- `")?.split('`').next().map(str::to_string)).collect();
    let unlisted: Vec<_> = tree.difference(&listed).collect();
    let gone: Vec<_> = listed.difference(&tree).collect();
    assert!(
        unlisted.is_empty() && gone.is_empty(),
        "docs/architecture.md's module map differs from the tree: not listed {unlisted:?}; listed but not there {gone:?}"
    );
}
