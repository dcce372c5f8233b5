//! `.env` files as the compose program reads them (python-dotenv in
//! docker-compose 1.x, compose-go's dotenv in 2.x; they agree on what is
//! here): `KEY=VALUE` lines, `#` comments, an optional `export `, values
//! single-quoted (taken as written), double-quoted (backslash escapes, may
//! span lines) or bare (trimmed, a ` #` starts a comment).
//!
//! Not done: `${VAR}` interpolation inside values. The compose program
//! itself reads the file for the project; workroom reads only
//! `COMPOSE_PROJECT_NAME` and `COMPOSE_FILE` here, which hold no variables
//! in practice.

/// Every `KEY=VALUE` of `text`, in order (a later key wins when looked up
/// with [`value`]). Lines that are not assignments are skipped, as both
/// compose programs skip them.
pub fn parse(text: &str) -> Vec<(String, String)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let lines: Vec<&str> = text.split('\n').map(|l| l.trim_end_matches('\r')).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        i += 1;
        let t = line.trim_start();
        let t = t.strip_prefix("export ").unwrap_or(t);
        let Some((key, raw)) = t.split_once('=') else { continue };
        let key = key.trim();
        if key.is_empty() || key.starts_with('#') || key.contains(char::is_whitespace) {
            continue;
        }
        let raw = raw.trim_start_matches([' ', '\t']);
        let value = if let Some(quoted) = raw.strip_prefix('\'') {
            quoted.find('\'').map_or_else(|| bare(raw), |end| quoted[..end].to_string())
        } else if let Some(quoted) = raw.strip_prefix('"') {
            // A double-quoted value may run on over the next lines.
            let mut text = quoted.to_string();
            let mut taken = 0;
            loop {
                if let Some(v) = double_quoted(&text) {
                    i += taken;
                    break v;
                }
                match lines.get(i + taken) {
                    Some(next) => {
                        text.push('\n');
                        text.push_str(next);
                        taken += 1;
                    }
                    None => break bare(raw),
                }
            }
        } else {
            bare(raw)
        };
        out.push((key.to_string(), value));
    }
    out
}

/// The last value of `key` in `text`, if set and not empty.
pub fn value(text: &str, key: &str) -> Option<String> {
    parse(text).into_iter().rev().find(|(k, _)| k == key).map(|(_, v)| v).filter(|v| !v.is_empty())
}

/// A bare value: up to a ` #` comment, trimmed.
fn bare(text: &str) -> String {
    let value = match text.find(" #").or_else(|| text.find("\t#")) {
        Some(i) => &text[..i],
        None => text,
    };
    let value = if value.starts_with('#') { "" } else { value };
    value.trim().to_string()
}

/// A double-quoted value after its opening quote, with its escapes
/// applied; `None` when it does not close.
fn double_quoted(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                'r' => out.push('\r'),
                't' => out.push('\t'),
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_read_as_compose_reads_them() {
        let text = "# a comment\n\
                    A=plain\n\
                    export B=exported\n\
                    C = spaced \n\
                    D=with # comment\n\
                    E='single # kept $X'\n\
                    F=\"double\\nline\"\n\
                    G=\"two\nlines\"\n\
                    not an assignment\n\
                    H=a#b\n\
                    I=\n\
                    J=last";
        let got = parse(text);
        let expect = [
            ("A", "plain"),
            ("B", "exported"),
            ("C", "spaced"),
            ("D", "with"),
            ("E", "single # kept $X"),
            ("F", "double\nline"),
            ("G", "two\nlines"),
            ("H", "a#b"),
            ("I", ""),
            ("J", "last"),
        ];
        let got: Vec<(&str, &str)> = got.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(got, expect);
    }

    #[test]
    fn the_last_assignment_wins_and_an_empty_value_is_unset() {
        assert_eq!(value("X=a\nX=b\n", "X").as_deref(), Some("b"));
        assert_eq!(value("X=\n", "X"), None);
        assert_eq!(value("\u{feff}X=bom\r\n", "X").as_deref(), Some("bom"));
        assert_eq!(value("Y=1", "X"), None);
    }

    #[test]
    fn an_unclosed_quote_is_read_as_a_bare_value_of_its_line() {
        assert_eq!(parse("A=\"open\nB=2\n"), vec![("A".into(), "\"open".into()), ("B".into(), "2".into())]);
    }
}
