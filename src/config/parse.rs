//! devcontainer.json is JSON with comments and trailing commas. We read it
//! with json5 (a superset) into a `serde_json::Value`, keeping key order so
//! `workroom config --json` prints keys as written, and turn parser errors
//! into `path:line:column: what was expected`.
//!
//! A pass of our own ([`super::scan`]) goes first: it refuses nesting deep
//! enough to exhaust json5's stack, says where an unfinished file's open
//! object, string or comment began, and finds what json5 takes silently but
//! the reference CLI reads otherwise (a key given twice, JSON5-only syntax).

use super::scan::{self, Pos};
use super::ConfigError;
use serde_json::Value;
use std::path::Path;

/// A parsed document and what deserves a warning in it.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub map: serde_json::Map<String, Value>,
    /// Each a whole line but for the `warning: ` prefix:
    /// `path:line:column: what`.
    pub warnings: Vec<String>,
}

/// The file's bytes as text; a byte that is not UTF-8 is refused where it is.
pub fn decode<'a>(path: &Path, bytes: &'a [u8]) -> Result<&'a str, ConfigError> {
    std::str::from_utf8(bytes).map_err(|e| {
        let valid = &bytes[..e.valid_up_to()];
        // `valid_up_to` is the length of the valid prefix, so this is text.
        let Pos { line, column } = end_of(std::str::from_utf8(valid).unwrap_or_default());
        let utf16 = bytes.starts_with(&[0xff, 0xfe]) || bytes.starts_with(&[0xfe, 0xff]);
        let hint = if utf16 { " (it looks like UTF-16; save it as UTF-8)" } else { "" };
        ConfigError::Syntax { path: path.to_path_buf(), line, column, message: format!("not UTF-8{hint}") }
    })
}

/// Parses the text of `path`; the top level must be an object.
pub fn parse_document(path: &Path, text: &str) -> Result<Parsed, ConfigError> {
    // A BOM is legal at the start of the file and json5 would reject it.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() {
        return Err(ConfigError::Invalid {
            path: path.to_path_buf(),
            message: "the file is empty; expected an object such as {\"image\": \"debian\"}".into(),
        });
    }
    let scanned = scan::scan(text).map_err(|deep| ConfigError::Syntax {
        path: path.to_path_buf(),
        line: deep.at.line,
        column: deep.at.column,
        message: format!(
            "nested deeper than {} levels; a devcontainer.json needs a handful (an unclosed `[` or `{{` repeated?)",
            scan::MAX_DEPTH
        ),
    })?;
    let mut value: Value = json5::from_str(text).map_err(|e| syntax_error(path, &scanned, &e))?;
    as_javascript_reads_it(&mut value);
    let warnings = scanned.findings.iter().map(|f| format!("{}:{}: {}", path.display(), f.at, f.message)).collect();
    match value {
        Value::Object(map) => Ok(Parsed { map, warnings }),
        other => Err(ConfigError::Type {
            path: path.to_path_buf(),
            property: "(top level)".into(),
            expected: "an object",
            found: super::model::describe(&other),
        }),
    }
}

/// The values the reference CLI (JavaScript) ends up with, so `config --json`
/// prints the same: numbers are doubles (`1.0` is `1`, an integer past 2^53
/// loses precision) and `__proto__` keys vanish (assigning one sets the
/// object's prototype instead of a property).
fn as_javascript_reads_it(value: &mut Value) {
    /// 2^53: past it a double cannot hold every integer.
    const MAX_SAFE: f64 = 9_007_199_254_740_992.0;
    match value {
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(0.0);
            let integral = f.fract() == 0.0 && f.abs() < MAX_SAFE;
            if integral && n.is_f64() {
                *n = serde_json::Number::from(f as i64);
            } else if !integral && !n.is_f64() {
                if let Some(d) = serde_json::Number::from_f64(f) {
                    *n = d;
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(as_javascript_reads_it),
        Value::Object(map) => {
            map.shift_remove("__proto__");
            map.values_mut().for_each(as_javascript_reads_it);
        }
        _ => {}
    }
}

fn syntax_error(path: &Path, scanned: &scan::Scan, e: &json5::Error) -> ConfigError {
    let ends_early = e.code().is_some_and(|code| code.to_string().starts_with("EOF"));
    if ends_early {
        // json5 points at the start of the value it was reading, 1:1 for the
        // top-level object: we point where the text ends and name what is
        // still open there.
        let what = match scanned.open_at_end {
            Some(open) => open.describe(),
            None => e.code().map(|c| c.to_string().replace("EOF", "end of file")).unwrap_or_default(),
        };
        let Pos { line, column } = scanned.end;
        return ConfigError::Syntax {
            path: path.to_path_buf(),
            line,
            column,
            message: format!("the file ends too early: {what}"),
        };
    }
    let (line, column) = match e.position() {
        // json5 counts from 0; editors and compilers count from 1.
        Some(p) => (p.line + 1, p.column + 1),
        None => (scanned.end.line, scanned.end.column),
    };
    let message = match e.code() {
        Some(code) => code.to_string(),
        None => strip_position(&e.to_string()),
    };
    ConfigError::Syntax { path: path.to_path_buf(), line, column, message }
}

/// json5 appends " at line:column" to custom messages; we print our own.
fn strip_position(message: &str) -> String {
    match message.rfind(" at ") {
        Some(i) if message[i + 4..].chars().all(|c| c.is_ascii_digit() || c == ':') => message[..i].to_string(),
        _ => message.to_string(),
    }
}

/// The position just past the end of `text`.
fn end_of(text: &str) -> Pos {
    let mut pos = Pos { line: 1, column: 1 };
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}') {
            if c == '\r' && chars.peek() == Some(&'\n') {
                chars.next();
            }
            pos = Pos { line: pos.line + 1, column: 1 };
        } else {
            pos.column += 1;
        }
    }
    pos
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn parse(text: &str) -> Result<serde_json::Map<String, Value>, ConfigError> {
        parse_document(&PathBuf::from("/w/.devcontainer/devcontainer.json"), text).map(|p| p.map)
    }

    #[test]
    fn comments_and_trailing_commas_are_accepted() {
        let map =
            parse("// top\n{\n  /* block */ \"image\": \"debian\", // line\n  \"runArgs\": [\"-e\", \"A=1\",],\n}\n")
                .unwrap();
        assert_eq!(map["image"], "debian");
        assert_eq!(map["runArgs"][1], "A=1");
    }

    #[test]
    fn key_order_is_kept() {
        let map = parse(r#"{"z": 1, "a": 2, "m": 3}"#).unwrap();
        assert_eq!(map.keys().collect::<Vec<_>>(), ["z", "a", "m"]);
    }

    #[test]
    fn a_missing_comma_names_file_line_and_column() {
        let err = parse("{\n  \"image\": \"debian\"\n  \"remoteUser\": \"dev\"\n}").unwrap_err().to_string();
        assert!(err.starts_with("/w/.devcontainer/devcontainer.json:3:3: "), "{err}");
        assert!(err.contains("expected"), "{err}");
    }

    #[test]
    fn an_unclosed_object_says_the_file_ends_too_early() {
        let err = parse("{\n  \"image\": \"debian\",\n").unwrap_err().to_string();
        assert!(err.starts_with("/w/.devcontainer/devcontainer.json:"), "{err}");
        assert!(err.contains("ends too early"), "{err}");
    }

    #[test]
    fn an_unclosed_top_level_object_points_where_the_file_ends_not_at_1_1() {
        let err = parse("{\n  \"image\": \"x\",\n  \"name\": \"a\"\n").unwrap_err().to_string();
        assert_eq!(
            err,
            "/w/.devcontainer/devcontainer.json:3:14: the file ends too early: \
             the object opened at 1:1 is not closed (a missing `}`?)"
        );
    }

    #[test]
    fn an_unclosed_block_comment_names_where_it_opened_not_1_1() {
        let err = parse("{\n  \"image\": \"x\", /* here\n  \"name\": \"a\"\n}\n").unwrap_err().to_string();
        assert_eq!(
            err,
            "/w/.devcontainer/devcontainer.json:4:2: the file ends too early: \
             the block comment opened at 2:17 is not closed (a missing `*/`?)"
        );
    }

    #[test]
    fn an_unclosed_string_names_where_it_opened() {
        let err = parse("{\"image\": \"x}").unwrap_err().to_string();
        assert!(err.contains("the string opened at 1:11 is not closed"), "{err}");
    }

    #[test]
    fn a_ten_megabyte_file_broken_at_its_end_points_at_its_end() {
        let mut text = String::from("{\n  \"image\": \"x\",\n  \"customizations\": {\"big\": [\n");
        while text.len() < 10 << 20 {
            text.push_str("    \"0123456789012345678901234567890123456789012345678901234567890123456789\",\n");
        }
        let lines = text.lines().count();
        text.push_str("    \"last\"\n  ]\n");
        let err = parse(&text).unwrap_err().to_string();
        let end = format!("devcontainer.json:{}:4: the file ends too early: ", lines + 2);
        assert!(err.contains(&end), "{}", &err[..err.len().min(300)]);
        assert!(err.contains("the object opened at 3:21 is not closed"), "{err}");
    }

    #[test]
    fn a_byte_that_is_not_utf8_is_refused_with_its_line_and_column_once() {
        let path = PathBuf::from("/w/devcontainer.json");
        let err = decode(&path, b"{\n  \"image\": \"x\xff\"\n}").unwrap_err().to_string();
        assert_eq!(err, "/w/devcontainer.json:2:14: not UTF-8");
        let err = decode(&path, b"\xff\xfe{\0").unwrap_err().to_string();
        assert_eq!(err, "/w/devcontainer.json:1:1: not UTF-8 (it looks like UTF-16; save it as UTF-8)");
    }

    #[test]
    fn arrays_nested_100000_deep_are_refused_in_one_line_without_overflowing_the_stack() {
        let text = format!("{{\"image\": \"x\", \"a\": {}{}}}", "[".repeat(100_000), "]".repeat(100_000));
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.starts_with("/w/.devcontainer/devcontainer.json:1:148: nested deeper than 128 levels"), "{err}");
        assert_eq!(err.lines().count(), 1);
    }

    #[test]
    fn a_duplicate_key_is_a_warning_naming_both_lines() {
        let parsed =
            parse_document(&PathBuf::from("/w/d.json"), "{\n  \"image\": \"a\",\n  \"image\": \"b\"\n}").unwrap();
        assert_eq!(parsed.map["image"], "b");
        assert_eq!(parsed.warnings, ["/w/d.json:3:3: `image` is also set at line 2; the last one is used"]);
    }

    #[test]
    fn json5_only_syntax_is_a_warning_that_the_reference_reads_the_file_differently() {
        let parsed = parse_document(&PathBuf::from("/w/d.json"), "{\"image\": \"a\",\n \"x\": 0x10}").unwrap();
        assert_eq!(parsed.map["x"], 16);
        assert_eq!(parsed.warnings.len(), 1, "{:?}", parsed.warnings);
        assert!(
            parsed.warnings[0].starts_with("/w/d.json:2:7: a hexadecimal number is JSON5"),
            "{:?}",
            parsed.warnings
        );
        assert!(parsed.warnings[0].contains("the reference devcontainer CLI reads this file differently"));
    }

    #[test]
    fn a_top_level_array_is_a_type_error() {
        let err = parse("[1]").unwrap_err().to_string();
        assert!(err.contains("`(top level)` must be an object, found an array"), "{err}");
    }

    #[test]
    fn an_empty_file_is_refused_with_an_example() {
        assert!(parse("  \n").unwrap_err().to_string().contains("the file is empty"));
    }

    #[test]
    fn a_byte_order_mark_is_skipped() {
        assert_eq!(parse("\u{feff}{\"image\": \"x\"}").unwrap()["image"], "x");
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;
    use std::path::PathBuf;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn arbitrary_text_never_panics_the_parser(text in any::<String>()) {
            let _ = parse_document(&PathBuf::from("/f.json"), &text);
        }

        #[test]
        fn json_like_text_never_panics_and_errors_point_inside_the_file(
            text in r#"[\{\}\[\]":,/\*\n a-z0-9\\]{0,80}"#
        ) {
            if let Err(ConfigError::Syntax { line, column, .. }) = parse_document(&PathBuf::from("/f.json"), &text) {
                prop_assert!(line >= 1 && line <= text.lines().count().max(1) + 1);
                prop_assert!(column >= 1);
            }
        }
    }

    proptest! {
        // Each case parses ~128 levels; fewer cases keep the suite quick.
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Deep and random nesting, with strings and comments among the
        /// brackets: parsing never panics nor overflows the stack, and the
        /// loader's later recursive passes get no more than the limit.
        #[test]
        fn deep_and_random_nesting_never_panics_or_aborts(
            opens in proptest::collection::vec(prop_oneof!["\\[", "\\{\"k\":", "\"\\[\"", "/\\*\\{\\*/", "1,"], 0..400),
            depth_extra in 0usize..3,
            closes in 0usize..400,
        ) {
            let mut text = String::from("{\"image\": \"x\", \"a\": ");
            text.push_str(&"[".repeat(scan::MAX_DEPTH - 2 + depth_extra));
            text.push_str(&opens.concat());
            text.push_str(&"]".repeat(closes));
            let parsed = parse_document(&PathBuf::from("/f.json"), &text);
            if let Ok(p) = &parsed {
                prop_assert!(depth(&Value::Object(p.map.clone())) <= scan::MAX_DEPTH);
            }
        }
    }

    fn depth(v: &Value) -> usize {
        match v {
            Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
            Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
            _ => 0,
        }
    }

    #[test]
    fn nesting_at_the_limit_loads_on_a_test_threads_small_stack() {
        let n = scan::MAX_DEPTH - 1;
        let text = format!("{{\"image\": \"x\", \"a\": {}\"${{localEnv:HOME}}\"{}}}", "[".repeat(n), "]".repeat(n));
        let map = parse_document(&PathBuf::from("/f.json"), &text).unwrap().map;
        assert_eq!(depth(&Value::Object(map.clone())), scan::MAX_DEPTH);
        let ctx = crate::config::substitute::Context::default();
        let out = crate::config::substitute::substitute_value(&ctx, &Value::Object(map)).unwrap();
        crate::config::model::read(&PathBuf::from("/f.json"), out.as_object().unwrap()).unwrap();
    }
}
