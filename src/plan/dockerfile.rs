//! The base image of a Dockerfile, found as the reference CLI finds it
//! (`dockerfileUtils.ts`, `findBaseImage`) so `workroom config
//! --include-merged-configuration` reads the same image's metadata before
//! anything is built: the target stage (else the last), followed through
//! `FROM <stage>` to the first `FROM` that names an image, its `ARG`s
//! (declared before the first `FROM`) replaced by the build args or their
//! defaults.

/// The stages' `FROM` images and names, and the `ARG`s before the first.
struct Parsed {
    /// (name, default) of each `ARG` of the preamble, in order.
    args: Vec<(String, Option<String>)>,
    /// (image as written, stage name) of each `FROM`.
    stages: Vec<(String, Option<String>)>,
}

fn parse(text: &str) -> Parsed {
    let mut parsed = Parsed { args: Vec::new(), stages: Vec::new() };
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.first().map(|w| w.to_ascii_uppercase()).as_deref() {
            Some("FROM") => {
                let mut rest = &words[1..];
                if rest.first().is_some_and(|w| w.starts_with("--platform=")) {
                    rest = &rest[1..];
                }
                let Some(image) = rest.first() else { continue };
                let name = match rest.get(1..3) {
                    Some([as_, name]) if as_.eq_ignore_ascii_case("as") => Some(name.to_string()),
                    _ => None,
                };
                parsed.stages.push((image.trim_matches(|c| c == '"' || c == '\'').to_string(), name));
            }
            Some("ARG") if parsed.stages.is_empty() => {
                let Some(spec) = words.get(1) else { continue };
                let (name, default) = match spec.split_once('=') {
                    Some((n, d)) => (n, Some(d.trim_matches('"').to_string())),
                    None => (*spec, None),
                };
                parsed.args.push((name.to_string(), default));
            }
            _ => {}
        }
    }
    parsed
}

/// The image the `target` stage (else the last) is built from, or `None`
/// when the Dockerfile has no such stage, or its stages form a loop.
pub fn base_image(text: &str, build_args: &[(String, String)], target: Option<&str>) -> Option<String> {
    let parsed = parse(text);
    let by_name = |name: &str| parsed.stages.iter().position(|(_, n)| n.as_deref() == Some(name));
    let mut stage = match target {
        Some(t) => by_name(t)?,
        None => parsed.stages.len().checked_sub(1)?,
    };
    let mut seen = Vec::new();
    loop {
        if seen.contains(&stage) {
            return None;
        }
        seen.push(stage);
        let image = replace(&parsed.stages[stage].0, &|var| value(&parsed, build_args, var));
        match by_name(&image) {
            Some(next) => stage = next,
            None => return Some(image),
        }
    }
}

/// A variable's value in a `FROM` line: the last preamble `ARG` of that
/// name with a build arg or a default, else the platform's own.
fn value(parsed: &Parsed, build_args: &[(String, String)], var: &str) -> Option<String> {
    let given = |name: &str| build_args.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let declared = parsed
        .args
        .iter()
        .rev()
        .find_map(|(name, default)| (name == var).then(|| given(name).or_else(|| default.clone())).flatten());
    declared.or_else(|| platform(var))
}

/// BuildKit's automatic platform args, for the host's platform.
fn platform(var: &str) -> Option<String> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    match var {
        "BUILDPLATFORM" | "TARGETPLATFORM" => Some(format!("linux/{arch}")),
        "BUILDOS" | "TARGETOS" => Some("linux".into()),
        "BUILDARCH" | "TARGETARCH" => Some(arch.into()),
        "BUILDVARIANT" | "TARGETVARIANT" => Some(String::new()),
        _ => None,
    }
}

/// `$VAR`, `${VAR}`, `${VAR:-word}` and `${VAR:+word}`; an unset variable
/// is empty.
fn replace(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let braced = after.starts_with('{');
        let body = if braced { &after[1..] } else { after };
        let name_len = body.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(body.len());
        if name_len == 0 {
            out.push('$');
            rest = after;
            continue;
        }
        let name = &body[..name_len];
        let mut tail = &body[name_len..];
        let current = lookup(name).unwrap_or_default();
        let mut value = current.clone();
        if braced {
            if let Some(expr) = tail.strip_prefix(":-").or_else(|| tail.strip_prefix(":+")) {
                let plus = tail.starts_with(":+");
                let end = expr.find('}').unwrap_or(expr.len());
                let word = expr[..end].trim_matches(|c| c == '"' || c == '\'').to_string();
                value = match (plus, current.is_empty()) {
                    (false, true) | (true, false) => word,
                    (false, false) => current,
                    (true, true) => String::new(),
                };
                tail = &expr[end..];
            }
            tail = tail.strip_prefix('}').unwrap_or(tail);
        }
        out.push_str(&value);
        rest = tail;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_base_image_is_the_target_stage_followed_to_an_image() {
        let text = "ARG VARIANT=bookworm\nARG REG\nFROM --platform=linux/amd64 debian:${VARIANT} AS base\n\
                    RUN make\nfrom base as dev\nFROM ${REG:-docker.io}/alpine:3 AS other\nFROM dev\n";
        // (build args, target, base image)
        type Case<'a> = (Vec<(String, String)>, Option<&'a str>, Option<&'a str>);
        let table: Vec<Case> = vec![
            (vec![], None, Some("debian:bookworm")),
            (args(&[("VARIANT", "trixie")]), Some("dev"), Some("debian:trixie")),
            (vec![], Some("other"), Some("docker.io/alpine:3")),
            (args(&[("REG", "localhost:5000")]), Some("other"), Some("localhost:5000/alpine:3")),
            (vec![], Some("missing"), None),
        ];
        for (build_args, target, expected) in table {
            assert_eq!(base_image(text, &build_args, target).as_deref(), expected, "{build_args:?} {target:?}");
        }
    }

    #[test]
    fn variables_follow_the_reference_forms_and_loops_find_nothing() {
        let lookup = |v: &str| (v == "SET").then(|| "x".to_string());
        assert_eq!(replace("a$SET-${SET}-${UNSET:-d}-${SET:+p}-${UNSET:+p}-$", &lookup), "ax-x-d-p--$");
        assert_eq!(base_image("FROM b AS a\nFROM a AS b\n", &[], None), None);
        assert_eq!(base_image("# no stages\n", &[], None), None);
        assert_eq!(base_image("FROM \"quoted:1\"\n", &[], None).as_deref(), Some("quoted:1"));
    }
}
