//! devcontainer.json is JSON with comments and trailing commas. We read it
//! with json5 (a superset) into a `serde_json::Value`, keeping key order so
//! `workroom config --json` prints keys as written, and turn parser errors
//! into `path:line:column: what was expected`.

use super::ConfigError;
use serde_json::Value;
use std::path::Path;

/// Parses the text of `path`; the top level must be an object.
pub fn parse_document(path: &Path, text: &str) -> Result<serde_json::Map<String, Value>, ConfigError> {
    // A BOM is legal at the start of the file and json5 would reject it.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() {
        return Err(ConfigError::Invalid {
            path: path.to_path_buf(),
            message: "the file is empty; expected an object such as {\"image\": \"debian\"}".into(),
        });
    }
    let mut value: Value = json5::from_str(text).map_err(|e| syntax_error(path, text, &e))?;
    as_javascript_reads_it(&mut value);
    match value {
        Value::Object(map) => Ok(map),
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

fn syntax_error(path: &Path, text: &str, e: &json5::Error) -> ConfigError {
    let (line, column) = match e.position() {
        // json5 counts from 0; editors and compilers count from 1.
        Some(p) => (p.line + 1, p.column + 1),
        None => end_position(text),
    };
    let message = match e.code() {
        Some(code) => {
            let what = code.to_string();
            if what.starts_with("EOF") {
                format!("the file ends too early ({})", what.replace("EOF", "end of file"))
            } else {
                what
            }
        }
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

fn end_position(text: &str) -> (usize, usize) {
    let line = text.lines().count().max(1);
    let column = text.lines().last().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn parse(text: &str) -> Result<serde_json::Map<String, Value>, ConfigError> {
        parse_document(&PathBuf::from("/w/.devcontainer/devcontainer.json"), text)
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
}
