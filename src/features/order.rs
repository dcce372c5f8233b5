//! The install order, computed as the reference's `containerFeaturesOrder.ts`
//! does: the worklist of every feature `features` and their `dependsOn`
//! reach (each once: equal source, digest and options), rounds in which
//! every hard (`dependsOn`) and soft (`installsAfter`) dependency is already
//! installed, the highest `overrideFeatureInstallOrder` priority first in
//! each round, and each round sorted by the reference's `compareTo`. A round
//! that finds nothing to install is a cycle, refused naming its members.
//! Pure: the graph is built by `resolve`, which does the fetching.
//!
//! One difference, on purpose: the reference fetches the manifest of every
//! `installsAfter` target only to learn its `legacyIds`; we match a soft
//! dependency against the installed features' own ids and `legacyIds`
//! instead, which decides the same for renamed features and needs no
//! network (a cached config comes up offline).

use super::collate::locale_compare;
use serde_json::Value;
use std::cmp::Ordering;

/// What identifies an installed feature's source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    Oci { registry: String, namespace: String, id: String, tag: Option<String>, digest: String },
    Local(String),
    Tarball(String),
}

/// A soft dependency or an `overrideFeatureInstallOrder` entry: a source
/// without its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Soft {
    Oci { registry: String, namespace: String, id: String },
    Local(String),
    Tarball(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// As written (in `features` or a `dependsOn`).
    pub user_id: String,
    pub options: Value,
    pub key: Key,
    /// `[currentId or id, ...legacyIds]` from its devcontainer-feature.json.
    pub aliases: Option<Vec<String>>,
    /// Indices of the nodes its `dependsOn` named.
    pub depends_on: Vec<usize>,
    pub installs_after: Vec<Soft>,
    pub priority: usize,
}

/// Features that wait on each other, in dependency order, the first repeated last.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the features depend on each other in a cycle: {}", .members.join(" → "))]
pub struct Cycle {
    pub members: Vec<String>,
}

/// Raises the priority of the worklist's nodes an override entry names:
/// the first entry gets the highest. Exact matches only, as the reference
/// (an override entry carries no aliases).
pub fn apply_overrides(nodes: &mut [Node], worklist: &[usize], overrides: &[Soft]) {
    let n = overrides.len();
    for (i, entry) in overrides.iter().enumerate() {
        let priority = n - i;
        for &w in worklist {
            if satisfies(&nodes[w], entry, false) {
                nodes[w].priority = nodes[w].priority.max(priority);
            }
        }
    }
}

/// The install order of the worklist's nodes.
pub fn rounds(nodes: &[Node], worklist: &[usize]) -> Result<Vec<usize>, Cycle> {
    // Soft dependencies on features nobody installs do not hold anything back.
    let soft: Vec<Vec<Soft>> = nodes
        .iter()
        .map(|node| {
            node.installs_after
                .iter()
                .filter(|s| worklist.iter().any(|&w| satisfies(&nodes[w], s, true)))
                .cloned()
                .collect()
        })
        .collect();
    let mut remaining: Vec<usize> = worklist.to_vec();
    let mut installed: Vec<usize> = Vec::new();
    while !remaining.is_empty() {
        let ready = |&&n: &&usize| {
            nodes[n].depends_on.iter().all(|&d| installed.iter().any(|&i| equals(&nodes[i], &nodes[d])))
                && soft[n].iter().all(|s| installed.iter().any(|&i| satisfies(&nodes[i], s, true)))
        };
        let mut round: Vec<usize> = remaining.iter().filter(ready).copied().collect();
        if round.is_empty() {
            return Err(cycle(nodes, &remaining, &soft));
        }
        let max = round.iter().map(|&n| nodes[n].priority).max().unwrap_or(0);
        round.retain(|&n| nodes[n].priority == max);
        remaining.retain(|&n| !round.iter().any(|&r| equals(&nodes[r], &nodes[n])));
        round.sort_by(|&a, &b| compare_to(&nodes[a], &nodes[b]));
        installed.extend(round);
    }
    Ok(installed)
}

/// Finds a cycle among the nodes that could not be installed.
fn cycle(nodes: &[Node], remaining: &[usize], soft: &[Vec<Soft>]) -> Cycle {
    let waits_on = |n: usize| -> Vec<usize> {
        remaining
            .iter()
            .copied()
            .filter(|&m| {
                nodes[n].depends_on.iter().any(|&d| equals(&nodes[m], &nodes[d]))
                    || soft[n].iter().any(|s| satisfies(&nodes[m], s, true))
            })
            .collect()
    };
    // Every remaining node waits on another remaining one, so walking the
    // first edge from any of them must come back to a node already seen.
    let mut path: Vec<usize> = vec![remaining[0]];
    loop {
        let last = *path.last().unwrap_or(&remaining[0]);
        let Some(&next) = waits_on(last).first() else { break };
        if let Some(at) = path.iter().position(|&p| p == next) {
            let mut members: Vec<String> = path[at..].iter().map(|&p| nodes[p].user_id.clone()).collect();
            members.push(nodes[next].user_id.clone());
            return Cycle { members };
        }
        path.push(next);
    }
    Cycle { members: remaining.iter().map(|&n| nodes[n].user_id.clone()).collect() }
}

/// Whether the installed `node` is what `soft` names; `by_alias` also
/// accepts the node's own `legacyIds` (see the module's note).
pub fn satisfies(node: &Node, soft: &Soft, by_alias: bool) -> bool {
    match (&node.key, soft) {
        (Key::Oci { registry, namespace, id, .. }, Soft::Oci { registry: r, namespace: ns, id: sid }) => {
            registry == r
                && namespace == ns
                && (id == sid || (by_alias && node.aliases.as_ref().is_some_and(|a| a.contains(sid))))
        }
        (Key::Local(a), Soft::Local(b)) | (Key::Tarball(a), Soft::Tarball(b)) => a == b,
        _ => false,
    }
}

fn kind(key: &Key) -> u8 {
    match key {
        Key::Oci { .. } => 0,
        Key::Local(_) => 1,
        Key::Tarball(_) => 2,
    }
}

pub fn equals(a: &Node, b: &Node) -> bool {
    kind(&a.key) == kind(&b.key) && compare_to(a, b) == Ordering::Equal
}

/// The reference's `compareTo`.
pub fn compare_to(a: &Node, b: &Node) -> Ordering {
    match (&a.key, &b.key) {
        (
            Key::Oci { registry: ar, namespace: an, id: aid, tag: at, digest: ad },
            Key::Oci { registry: br, namespace: bn, id: bid, tag: bt, digest: bd },
        ) => {
            if ad == bd && options_compare(&a.options, &b.options) == Ordering::Equal {
                return Ordering::Equal;
            }
            let (a_prefix, b_prefix) = (format!("{ar}/{an}"), format!("{br}/{bn}"));
            if a_prefix != b_prefix {
                return locale_compare(&a_prefix, &b_prefix);
            }
            let a_ids = a.aliases.clone().unwrap_or_else(|| vec![aid.clone()]);
            let b_ids = b.aliases.clone().unwrap_or_else(|| vec![bid.clone()]);
            if !a_ids.iter().any(|x| b_ids.contains(x)) {
                return locale_compare(aid, bid);
            }
            if let (Some(at), Some(bt)) = (at, bt) {
                if at != bt {
                    return locale_compare(at, bt);
                }
            }
            match options_compare(&a.options, &b.options) {
                Ordering::Equal => locale_compare(ad, bd),
                other => other,
            }
        }
        (Key::Local(ap), Key::Local(bp)) | (Key::Tarball(ap), Key::Tarball(bp)) => match locale_compare(ap, bp) {
            Ordering::Equal => options_compare(&a.options, &b.options),
            other => other,
        },
        _ => locale_compare(&a.user_id, &b.user_id),
    }
}

fn js_type(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "string",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::Null | Value::Array(_) | Value::Object(_) => "object",
    }
}

fn bool_compare(a: bool, b: bool) -> Ordering {
    a.cmp(&b)
}

/// The reference's `optionsCompareTo`: values of other types than string
/// and boolean compare equal, as there.
pub fn options_compare(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::String(x), Value::String(y)) => locale_compare(x, y),
        (Value::Bool(x), Value::Bool(y)) => bool_compare(*x, *y),
        (Value::Object(x), Value::Object(y)) => {
            if x.len() != y.len() {
                return x.len().cmp(&y.len());
            }
            let mut xk: Vec<&String> = x.keys().collect();
            let mut yk: Vec<&String> = y.keys().collect();
            // JavaScript's default sort: by UTF-16 code units.
            xk.sort_by(|p, q| p.encode_utf16().cmp(q.encode_utf16()));
            yk.sort_by(|p, q| p.encode_utf16().cmp(q.encode_utf16()));
            for (kx, ky) in xk.iter().zip(&yk) {
                if kx != ky {
                    return locale_compare(kx, ky);
                }
                let v = match (&x[*kx], &y[*ky]) {
                    (Value::String(p), Value::String(q)) => locale_compare(p, q),
                    (Value::Bool(p), Value::Bool(q)) => bool_compare(*p, *q),
                    _ => Ordering::Equal,
                };
                if v != Ordering::Equal {
                    return v;
                }
            }
            Ordering::Equal
        }
        _ => js_type(a).cmp(js_type(b)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn oci(user_id: &str, id: &str, digest: &str) -> Node {
        Node {
            user_id: user_id.into(),
            options: json!({}),
            key: Key::Oci {
                registry: "localhost:5000".into(),
                namespace: "wr".into(),
                id: id.into(),
                tag: Some("1".into()),
                digest: digest.into(),
            },
            aliases: Some(vec![id.into()]),
            depends_on: vec![],
            installs_after: vec![],
            priority: 0,
        }
    }

    fn soft(id: &str) -> Soft {
        Soft::Oci { registry: "localhost:5000".into(), namespace: "wr".into(), id: id.into() }
    }

    fn ids(nodes: &[Node], order: &[usize]) -> Vec<String> {
        order.iter().map(|&i| nodes[i].user_id.clone()).collect()
    }

    #[test]
    fn independent_features_install_in_one_round_sorted_by_id() {
        let nodes = vec![oci("c", "c", "d3"), oci("a", "a", "d1"), oci("b", "b", "d2")];
        assert_eq!(ids(&nodes, &rounds(&nodes, &[0, 1, 2]).unwrap()), ["a", "b", "c"]);
    }

    #[test]
    fn a_hard_dependency_installs_in_an_earlier_round() {
        // "a" dependsOn "z": z must come first although it sorts last.
        let mut nodes = vec![oci("a", "a", "d1"), oci("z", "z", "d2"), oci("m", "m", "d3")];
        nodes[0].depends_on = vec![1];
        assert_eq!(ids(&nodes, &rounds(&nodes, &[0, 1, 2]).unwrap()), ["m", "z", "a"]);
    }

    #[test]
    fn a_dependency_with_other_options_is_another_feature() {
        let mut nodes = vec![oci("a", "a", "d1"), oci("z", "z", "d2"), oci("z-dep", "z", "d2")];
        nodes[2].options = json!({ "flavour": "sweet" });
        nodes[0].depends_on = vec![2];
        // The plain z does not satisfy a's dependency on z with options.
        let order = rounds(&nodes, &[0, 1, 2]).unwrap();
        assert_eq!(ids(&nodes, &order), ["z", "z-dep", "a"]);
        assert!(!equals(&nodes[1], &nodes[2]));
    }

    #[test]
    fn a_soft_dependency_orders_only_when_its_target_is_installed() {
        let mut nodes = vec![oci("a", "a", "d1"), oci("b", "b", "d2")];
        nodes[0].installs_after = vec![soft("b"), soft("not-installed")];
        assert_eq!(ids(&nodes, &rounds(&nodes, &[0, 1]).unwrap()), ["b", "a"]);
    }

    #[test]
    fn a_soft_dependency_on_a_renamed_feature_matches_its_legacy_id() {
        let mut nodes = vec![oci("a", "a", "d1"), oci("node", "node", "d2")];
        nodes[1].aliases = Some(vec!["node".into(), "nodejs".into()]);
        nodes[0].installs_after = vec![soft("nodejs")];
        assert_eq!(ids(&nodes, &rounds(&nodes, &[0, 1]).unwrap()), ["node", "a"]);
    }

    #[test]
    fn the_override_order_goes_first_within_what_dependencies_allow() {
        let mut nodes = vec![oci("a", "a", "d1"), oci("b", "b", "d2"), oci("c", "c", "d3"), oci("d", "d", "d4")];
        // c first, then b; a and d after, sorted. d depends on c.
        nodes[3].depends_on = vec![2];
        apply_overrides(&mut nodes, &[0, 1, 2, 3], &[soft("c"), soft("b")]);
        assert_eq!((nodes[2].priority, nodes[1].priority), (2, 1));
        assert_eq!(ids(&nodes, &rounds(&nodes, &[0, 1, 2, 3]).unwrap()), ["c", "b", "a", "d"]);
    }

    #[test]
    fn an_override_cannot_lift_a_feature_over_its_dependency() {
        let mut nodes = vec![oci("a", "a", "d1"), oci("b", "b", "d2")];
        nodes[0].depends_on = vec![1];
        apply_overrides(&mut nodes, &[0, 1], &[soft("a")]);
        assert_eq!(ids(&nodes, &rounds(&nodes, &[0, 1]).unwrap()), ["b", "a"]);
    }

    #[test]
    fn a_cycle_is_refused_naming_its_members_in_order() {
        let mut nodes = vec![oci("x", "x", "d0"), oci("a", "a", "d1"), oci("b", "b", "d2"), oci("c", "c", "d3")];
        nodes[1].depends_on = vec![2];
        nodes[2].depends_on = vec![3];
        nodes[3].installs_after = vec![soft("a")];
        let err = rounds(&nodes, &[0, 1, 2, 3]).unwrap_err();
        assert_eq!(err.members, ["a", "b", "c", "a"]);
        assert_eq!(err.to_string(), "the features depend on each other in a cycle: a → b → c → a");
    }

    #[test]
    fn options_compare_as_the_reference_compares_them() {
        assert_eq!(options_compare(&json!({"a": "x"}), &json!({"a": "y"})), Ordering::Less);
        assert_eq!(options_compare(&json!({"a": "x", "b": true}), &json!({"a": "x"})), Ordering::Greater);
        assert_eq!(options_compare(&json!(true), &json!(false)), Ordering::Greater);
        assert_eq!(options_compare(&json!("1"), &json!(true)), Ordering::Greater); // "string" > "boolean"
        assert_eq!(options_compare(&json!({"n": 1}), &json!({"n": 2})), Ordering::Equal);
    }
}
