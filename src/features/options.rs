//! A feature's options: the user's value (an object, the `version`
//! shorthand string, or `true`) over the defaults declared in its
//! devcontainer-feature.json, checked against the declared types and enums,
//! and written to `devcontainer-features.env` as the reference does
//! (`getFeatureValueObject`, `getFeatureEnvVariables`, `getSafeId`). Pure.
//!
//! The reference checks nothing; we refuse a value `install.sh` was never
//! meant to get (a boolean that is not one, a string outside its enum) and
//! name where it came from. `proposals` are only suggestions.

use serde_json::{Map, Value};

/// A value the feature's options refuse, with where it was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{place}.{option} {problem}")]
pub struct OptionError {
    /// `features["…"]`, or `features["…"] dependsOn["…"]`.
    pub place: String,
    pub option: String,
    pub problem: String,
}

/// The options `install.sh` gets: the declared defaults, overlaid with the
/// user's value; with warnings for options the feature does not declare.
pub fn resolve(
    place: &str,
    declared: &Map<String, Value>,
    user: &Value,
) -> Result<(Map<String, Value>, Vec<String>), OptionError> {
    let mut values: Map<String, Value> =
        declared.iter().filter_map(|(name, spec)| spec.get("default").map(|d| (name.clone(), d.clone()))).collect();
    let mut warnings = Vec::new();
    let given: Vec<(String, Value)> = match user {
        Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        // The shorthand names the `version` option when there is one; the
        // reference passes even `true` there, as the string "true".
        other if declared.contains_key("version") => vec![("version".into(), other.clone())],
        Value::String(s) => {
            warnings.push(format!("{place} is the version {s:?}, but the feature has no `version` option; ignored"));
            Vec::new()
        }
        _ => Vec::new(),
    };
    for (name, value) in given {
        match declared.get(&name) {
            Some(spec) => check(place, &name, spec, &value)?,
            None => warnings.push(format!(
                "{place}.{name} is not an option of this feature{}; it is passed as {} anyway",
                declared_names(declared),
                safe_id(&name)
            )),
        }
        values.insert(name, value);
    }
    Ok((values, warnings))
}

fn declared_names(declared: &Map<String, Value>) -> String {
    if declared.is_empty() {
        " (it declares none)".into()
    } else {
        format!(" (it has {})", declared.keys().map(|k| format!("{k:?}")).collect::<Vec<_>>().join(", "))
    }
}

fn check(place: &str, name: &str, spec: &Value, value: &Value) -> Result<(), OptionError> {
    let fail = |problem: String| Err(OptionError { place: place.into(), option: name.into(), problem });
    match spec.get("type").and_then(Value::as_str) {
        Some("boolean") => match value {
            Value::Bool(_) => Ok(()),
            // The env file carries text: "true" and "false" reach install.sh the same.
            Value::String(s) if s == "true" || s == "false" => Ok(()),
            other => fail(format!("must be true or false; found {}", shown(other))),
        },
        Some("string") => {
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Number(_) | Value::Bool(_) => js_string(value),
                other => return fail(format!("must be a string; found {}", shown(other))),
            };
            let allowed: Option<Vec<&str>> =
                spec.get("enum").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).collect());
            match allowed {
                Some(allowed) if !allowed.contains(&text.as_str()) => fail(format!(
                    "must be one of {}; found {}",
                    allowed.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(", "),
                    shown(value)
                )),
                _ => Ok(()),
            }
        }
        // A type we do not know: passed as written, as the reference does.
        _ => Ok(()),
    }
}

fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// The lines of `devcontainer-features.env`: `NAME="value"`, joined by
/// newlines with none at the end, values not escaped (as the reference).
pub fn env_file(values: &Map<String, Value>) -> String {
    values.iter().map(|(name, v)| format!("{}=\"{}\"", safe_id(name), js_string(v))).collect::<Vec<_>>().join("\n")
}

/// The reference's `getSafeId`: non-word characters become `_`, a leading
/// run of digits and underscores becomes one `_`, then upper case.
pub fn safe_id(s: &str) -> String {
    let replaced: String = s
        .chars()
        .flat_map(|c| {
            let word = c.is_ascii_alphanumeric() || c == '_';
            // JavaScript replaces per UTF-16 unit.
            let n = if word { 1 } else { c.len_utf16() };
            std::iter::repeat_n(if word { c } else { '_' }, n)
        })
        .collect();
    let lead = replaced.chars().take_while(|c| c.is_ascii_digit() || *c == '_').count();
    let rest: String = replaced.chars().skip(lead).collect();
    let out = if lead > 0 { format!("_{rest}") } else { rest };
    out.to_uppercase()
}

/// A value as JavaScript's template literal prints it.
pub fn js_string(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 1e21 => format!("{}", f as i64),
            _ => n.to_string(),
        },
        Value::Array(items) => {
            items.iter().map(|v| if v.is_null() { String::new() } else { js_string(v) }).collect::<Vec<_>>().join(",")
        }
        Value::Object(_) => "[object Object]".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn declared() -> Map<String, Value> {
        json!({
            "greeting": { "type": "string", "enum": ["hi", "hey"], "default": "hi" },
            "version": { "type": "string", "proposals": ["1", "2"], "default": "latest" },
            "loud": { "type": "boolean", "default": false },
            "name": { "type": "string" }
        })
        .as_object()
        .unwrap()
        .clone()
    }

    const PLACE: &str = r#"features["localhost:5000/wr/hello:1"]"#;

    #[test]
    fn defaults_fill_what_the_user_left_out() {
        let (values, warnings) = resolve(PLACE, &declared(), &json!({ "loud": true })).unwrap();
        assert_eq!(Value::Object(values), json!({ "greeting": "hi", "version": "latest", "loud": true }));
        assert!(warnings.is_empty());
    }

    #[test]
    fn a_string_is_the_version_shorthand_and_proposals_are_only_suggestions() {
        let (values, _) = resolve(PLACE, &declared(), &json!("3.1")).unwrap();
        assert_eq!(values["version"], "3.1");
        // `true` lands in `version` too, as the reference passes it.
        assert_eq!(resolve(PLACE, &declared(), &json!(true)).unwrap().0["version"], true);
    }

    #[test]
    fn a_value_outside_the_enum_names_the_path_and_the_choices() {
        let err = resolve(PLACE, &declared(), &json!({ "greeting": "yo" })).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"features["localhost:5000/wr/hello:1"].greeting must be one of "hi", "hey"; found "yo""#
        );
    }

    #[test]
    fn a_boolean_option_takes_true_false_or_their_strings_only() {
        assert!(resolve(PLACE, &declared(), &json!({ "loud": "true" })).is_ok());
        let err = resolve(PLACE, &declared(), &json!({ "loud": "yes" })).unwrap_err();
        assert_eq!(err.to_string(), format!("{PLACE}.loud must be true or false; found \"yes\""));
        let err = resolve(PLACE, &declared(), &json!({ "name": ["a"] })).unwrap_err();
        assert!(err.to_string().ends_with(".name must be a string; found [\"a\"]"), "{err}");
    }

    #[test]
    fn an_undeclared_option_is_passed_with_a_warning() {
        let (values, warnings) = resolve(PLACE, &declared(), &json!({ "colour": "red" })).unwrap();
        assert_eq!(values["colour"], "red");
        assert!(warnings[0].contains(".colour is not an option of this feature"), "{warnings:?}");
        assert!(warnings[0].contains("passed as COLOUR"), "{warnings:?}");
    }

    #[test]
    fn the_env_file_is_written_as_the_reference_writes_it() {
        let values = json!({ "version": "1.2", "loud": true, "my-opt.x": 3, "2nd": "b" });
        assert_eq!(env_file(values.as_object().unwrap()), "VERSION=\"1.2\"\nLOUD=\"true\"\nMY_OPT_X=\"3\"\n_ND=\"b\"");
    }

    #[test]
    fn safe_ids_are_upper_case_words() {
        assert_eq!(safe_id("installZsh"), "INSTALLZSH");
        assert_eq!(safe_id("__9lives"), "_LIVES");
        assert_eq!(safe_id("a-b c"), "A_B_C");
        assert_eq!(safe_id("é"), "_");
    }
}
