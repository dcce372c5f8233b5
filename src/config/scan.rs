//! One pass over a devcontainer.json's text before json5 reads it, for what
//! json5 cannot tell us: how deep the nesting goes (json5 recurses, so
//! 100,000 nested `[` overflow the stack), what is still open where the file
//! ends, keys given twice, and the JSON5-only syntax that the reference CLI
//! (jsonc-parser) reads differently or drops.
//!
//! It is a lexer with a stack of open objects and arrays, iterative so that
//! no input can exhaust the stack. It never fails on malformed text: it reads
//! what it can and leaves the verdict on syntax to json5.

use std::collections::HashMap;

/// The deepest nesting of objects and arrays we read. A real
/// devcontainer.json nests a handful of levels (`customizations.vscode.
/// settings.…`); every stage after the parser (json5, the legacy-property
/// pass, substitution, the typed model, dropping the value) recurses once per
/// level, so this bounds their stack use. serde_json stops at the same depth.
pub const MAX_DEPTH: usize = 128;

/// A place in the text, counted from 1 as editors do; columns in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pos {
    pub line: usize,
    pub column: usize,
}

impl std::fmt::Display for Pos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// What is still open where the text ends, and where it opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Open {
    Object(Pos),
    Array(Pos),
    String(Pos),
    Comment(Pos),
}

impl Open {
    pub fn describe(self) -> String {
        match self {
            Open::Object(p) => format!("the object opened at {p} is not closed (a missing `}}`?)"),
            Open::Array(p) => format!("the array opened at {p} is not closed (a missing `]`?)"),
            Open::String(p) => format!("the string opened at {p} is not closed (a missing quote?)"),
            Open::Comment(p) => format!("the block comment opened at {p} is not closed (a missing `*/`?)"),
        }
    }
}

/// Something json5 accepts that deserves a word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub at: Pos,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// Keys given twice and JSON5-only syntax, in the order found.
    pub findings: Vec<Finding>,
    /// Where the last non-blank character ends.
    pub end: Pos,
    /// The innermost thing still open at the end, if any.
    pub open_at_end: Option<Open>,
}

/// The nesting passed [`MAX_DEPTH`] at `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooDeep {
    pub at: Pos,
}

/// JSON5-only syntax, one kind per variant, so that a file full of unquoted
/// keys says so once rather than once a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Json5Only {
    UnquotedKey,
    SingleQuotes,
    Hex,
    LeadingPlus,
    LeadingDot,
    TrailingDot,
    InfinityNaN,
    Escape,
}

impl Json5Only {
    fn what(self) -> &'static str {
        match self {
            Json5Only::UnquotedKey => "an unquoted key",
            Json5Only::SingleQuotes => "a single-quoted string",
            Json5Only::Hex => "a hexadecimal number",
            Json5Only::LeadingPlus => "a number with a leading `+`",
            Json5Only::LeadingDot => "a number with a leading `.`",
            Json5Only::TrailingDot => "a number with a `.` before its exponent",
            Json5Only::InfinityNaN => "`Infinity` or `NaN`",
            Json5Only::Escape => "an escape that JSON does not have (`\\x`, `\\v`, `\\0`, `\\'`, …)",
        }
    }
}

enum Frame {
    Object {
        open: Pos,
        /// Each key seen in this object and the line it was on.
        keys: HashMap<String, usize>,
        /// The next string or word is a key (after `{` or `,`).
        expect_key: bool,
        /// The key whose value is being read, for the path in a message.
        key: Option<String>,
    },
    Array {
        open: Pos,
        index: usize,
    },
}

struct Cursor<'a> {
    text: &'a str,
    i: usize,
    pos: Pos,
    /// The last character was a `\r`, so a `\n` now ends no new line (CRLF
    /// is one line end, as json5 counts it).
    after_cr: bool,
}

fn is_line_end(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}')
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<char> {
        self.text[self.i..].chars().next()
    }

    fn peek2(&self) -> Option<char> {
        let mut chars = self.text[self.i..].chars();
        chars.next();
        chars.next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.i += c.len_utf8();
        if c == '\n' && self.after_cr {
            self.after_cr = false;
        } else if is_line_end(c) {
            self.pos = Pos { line: self.pos.line + 1, column: 1 };
            self.after_cr = c == '\r';
        } else {
            self.pos.column += 1;
            self.after_cr = false;
        }
        Some(c)
    }
}

/// Reads `text` once. Fails only when the nesting passes [`MAX_DEPTH`].
pub fn scan(text: &str) -> Result<Scan, TooDeep> {
    let mut cur = Cursor { text, i: 0, pos: Pos { line: 1, column: 1 }, after_cr: false };
    let mut stack: Vec<Frame> = Vec::new();
    let mut findings = Vec::new();
    let mut json5_only: Vec<(Json5Only, Pos, usize)> = Vec::new();
    let mut note = |kind: Json5Only, at: Pos| match json5_only.iter_mut().find(|(k, _, _)| *k == kind) {
        Some((_, _, more)) => *more += 1,
        None => json5_only.push((kind, at, 0)),
    };
    let mut end = cur.pos;
    let mut open_at_end = None;

    while let Some(c) = cur.peek() {
        let start = cur.pos;
        if c.is_whitespace() || c == '\u{feff}' {
            cur.bump();
            continue;
        }
        if c == '/' && cur.peek2() == Some('/') {
            while cur.peek().is_some_and(|c| !is_line_end(c)) {
                cur.bump();
                end = cur.pos;
            }
            continue;
        }
        if c == '/' && cur.peek2() == Some('*') {
            cur.bump();
            cur.bump();
            let mut closed = false;
            while let Some(c) = cur.bump() {
                if !c.is_whitespace() {
                    end = cur.pos;
                }
                if c == '*' && cur.peek() == Some('/') {
                    cur.bump();
                    closed = true;
                    break;
                }
            }
            end = if closed { cur.pos } else { end };
            if !closed {
                open_at_end = Some(Open::Comment(start));
                break;
            }
            continue;
        }
        match c {
            '{' | '[' => {
                cur.bump();
                if stack.len() >= MAX_DEPTH {
                    return Err(TooDeep { at: start });
                }
                stack.push(if c == '{' {
                    Frame::Object { open: start, keys: HashMap::new(), expect_key: true, key: None }
                } else {
                    Frame::Array { open: start, index: 0 }
                });
            }
            '}' | ']' => {
                cur.bump();
                stack.pop();
            }
            ',' => {
                cur.bump();
                match stack.last_mut() {
                    Some(Frame::Object { expect_key, .. }) => *expect_key = true,
                    Some(Frame::Array { index, .. }) => *index += 1,
                    None => {}
                }
            }
            ':' => {
                cur.bump();
                if let Some(Frame::Object { expect_key, .. }) = stack.last_mut() {
                    *expect_key = false;
                }
            }
            '"' | '\'' => {
                cur.bump();
                if c == '\'' {
                    note(Json5Only::SingleQuotes, start);
                }
                // Only a key's text is kept (to compare with the others):
                // a large file is mostly values.
                let is_key = matches!(stack.last(), Some(Frame::Object { expect_key: true, .. }));
                let mut value = String::new();
                let mut closed = false;
                while let Some(ch) = cur.bump() {
                    match ch {
                        _ if ch == c => {
                            closed = true;
                            break;
                        }
                        _ if ch != '\\' && !is_key => {}
                        '\\' => match cur.bump() {
                            Some(e @ ('"' | '\\' | '/')) => value.push(e),
                            Some('b') => value.push('\u{8}'),
                            Some('f') => value.push('\u{c}'),
                            Some('n') => value.push('\n'),
                            Some('r') => value.push('\r'),
                            Some('t') => value.push('\t'),
                            Some('u') => value.push(unicode_escape(&mut cur)),
                            // A line continuation: both read it as nothing.
                            Some(e) if is_line_end(e) => {}
                            Some(e) => {
                                note(Json5Only::Escape, start);
                                value.push(e);
                            }
                            None => {}
                        },
                        _ => value.push(ch),
                    }
                }
                end = cur.pos;
                if !closed {
                    open_at_end = Some(Open::String(start));
                    break;
                }
                key_or_value(&mut stack, &mut findings, value, start);
                continue;
            }
            _ => {
                let from = cur.i;
                while cur.peek().is_some_and(|c| !ends_word(c)) {
                    cur.bump();
                }
                if cur.i == from {
                    // A character that starts nothing (json5 will say so).
                    cur.bump();
                }
                let word = &text[from..cur.i];
                let is_key = matches!(stack.last(), Some(Frame::Object { expect_key: true, .. }));
                if is_key {
                    note(Json5Only::UnquotedKey, start);
                    key_or_value(&mut stack, &mut findings, word.to_string(), start);
                } else if let Some(kind) = json5_only_value(word) {
                    note(kind, start);
                }
            }
        }
        end = cur.pos;
    }
    if open_at_end.is_none() {
        open_at_end = stack.last().map(|f| match f {
            Frame::Object { open, .. } => Open::Object(*open),
            Frame::Array { open, .. } => Open::Array(*open),
        });
    }
    json5_only.sort_by_key(|(_, at, _)| (at.line, at.column));
    findings.extend(json5_only.into_iter().map(|(kind, at, more)| {
        let more = if more > 0 { format!(" (and {more} more)") } else { String::new() };
        Finding {
            at,
            message: format!(
                "{}{more} is JSON5, not JSON: the reference devcontainer CLI reads this file differently (it drops or misreads such values)",
                kind.what()
            ),
        }
    }));
    Ok(Scan { findings, end, open_at_end })
}

/// `\uXXXX`, after the `u`; a broken one reads as U+FFFD (json5 refuses it).
fn unicode_escape(cur: &mut Cursor) -> char {
    let mut code = 0u32;
    for _ in 0..4 {
        match cur.peek().and_then(|c| c.to_digit(16)) {
            Some(d) => {
                cur.bump();
                code = code * 16 + d;
            }
            None => return char::REPLACEMENT_CHARACTER,
        }
    }
    char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER)
}

fn ends_word(c: char) -> bool {
    c.is_whitespace() || matches!(c, '{' | '}' | '[' | ']' | ',' | ':' | '"' | '\'' | '/' | '\u{feff}')
}

/// A string or word just read: a key (checked against the object's other
/// keys) when the object expects one, else a value.
fn key_or_value(stack: &mut [Frame], findings: &mut Vec<Finding>, text: String, at: Pos) {
    let path = path_of(stack);
    let Some(Frame::Object { keys, expect_key, key, .. }) = stack.last_mut() else { return };
    if !*expect_key {
        return;
    }
    *expect_key = false;
    let property = if path.is_empty() { text.clone() } else { format!("{path}.{text}") };
    match keys.get(&text) {
        Some(first) => findings
            .push(Finding { at, message: format!("`{property}` is also set at line {first}; the last one is used") }),
        None => {
            keys.insert(text.clone(), at.line);
        }
    }
    *key = Some(text);
}

/// The property path of the innermost open object, such as
/// `customizations.vscode` or `mounts[2]`: each open frame but the last names
/// the one inside it by its current key or index.
fn path_of(stack: &[Frame]) -> String {
    let mut path = String::new();
    for frame in stack.iter().take(stack.len().saturating_sub(1)) {
        match frame {
            Frame::Object { key: Some(k), .. } => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
            }
            Frame::Array { index, .. } => path.push_str(&format!("[{index}]")),
            Frame::Object { key: None, .. } => {}
        }
    }
    path
}

/// A value word that is not JSON, and how jsonc-parser differs on it.
fn json5_only_value(word: &str) -> Option<Json5Only> {
    if matches!(word, "true" | "false" | "null") || is_json_number(word) {
        return None;
    }
    // `5.` is not JSON, but the reference reads it as 5 all the same.
    if let Some(whole) = word.strip_suffix('.') {
        if is_json_number(whole) {
            return None;
        }
    }
    let unsigned = word.strip_prefix(['+', '-']).unwrap_or(word);
    if unsigned.starts_with("0x") || unsigned.starts_with("0X") {
        Some(Json5Only::Hex)
    } else if unsigned == "Infinity" || unsigned == "NaN" {
        Some(Json5Only::InfinityNaN)
    } else if word.starts_with('+') {
        Some(Json5Only::LeadingPlus)
    } else if unsigned.starts_with('.') {
        Some(Json5Only::LeadingDot)
    } else if unsigned.contains(".e") || unsigned.contains(".E") {
        Some(Json5Only::TrailingDot)
    } else {
        // Not a value json5 takes either: it will say so.
        None
    }
}

/// JSON's number grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
fn is_json_number(word: &str) -> bool {
    let b = word.as_bytes();
    let mut i = 0;
    let digits = |i: &mut usize| {
        let from = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i > from
    };
    if b.first() == Some(&b'-') {
        i += 1;
    }
    if b.get(i) == Some(&b'0') {
        i += 1;
    } else if !digits(&mut i) {
        return false;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        if !digits(&mut i) {
            return false;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digits(&mut i) {
            return false;
        }
    }
    i == b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(line: usize, column: usize) -> Pos {
        Pos { line, column }
    }

    fn findings(text: &str) -> Vec<String> {
        scan(text).unwrap().findings.into_iter().map(|f| format!("{}: {}", f.at, f.message)).collect()
    }

    #[test]
    fn plain_jsonc_has_no_findings() {
        let text = "// c\n{\n  \"image\": \"a\\n\\u0041\", /* b */\n  \"n\": [1, -2.5e3, 0, true, null,],\n  \"o\": {\"image\": 5.},\n}\n";
        assert_eq!(findings(text), Vec::<String>::new());
    }

    #[test]
    fn a_duplicate_key_is_found_naming_both_lines() {
        let f = findings("{\n  \"image\": \"a\",\n  \"name\": \"n\",\n  \"image\": \"b\"\n}");
        assert_eq!(f, ["4:3: `image` is also set at line 2; the last one is used"]);
    }

    #[test]
    fn a_duplicate_key_inside_an_object_names_its_path() {
        let f = findings("{\"containerEnv\": {\"A\": \"1\",\n\"A\": \"2\"}, \"mounts\": [{\"t\": 1, \"t\": 2}]}");
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f[0].starts_with("2:1: `containerEnv.A` is also set at line 1"), "{f:?}");
        assert!(f[1].contains("`mounts[0].t`"), "{f:?}");
    }

    #[test]
    fn the_same_key_in_sibling_objects_is_no_duplicate() {
        assert_eq!(
            findings("{\"a\": {\"x\": 1}, \"b\": {\"x\": 2}, \"c\": [{\"x\": 1}, {\"x\": 2}]}"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_key_spelled_with_an_escape_is_the_same_key() {
        let f = findings("{\"image\": \"a\", \"\\u0069mage\": \"b\"}");
        assert_eq!(f.len(), 1, "{f:?}");
    }

    #[test]
    fn json5_only_syntax_the_reference_reads_differently_is_found_by_line() {
        for (text, what, pos) in [
            ("{\"a\": 0x10}", "a hexadecimal number", "1:7"),
            ("{\"a\": +1}", "a leading `+`", "1:7"),
            ("{\n a: 1}", "an unquoted key", "2:2"),
            ("{\"a\": 'q'}", "a single-quoted string", "1:7"),
            ("{'a': 1}", "a single-quoted string", "1:2"),
            ("{\"a\": Infinity}", "`Infinity` or `NaN`", "1:7"),
            ("{\"a\": -NaN}", "`Infinity` or `NaN`", "1:7"),
            ("{\"a\": .5}", "a leading `.`", "1:7"),
            ("{\"a\": 5.e1}", "before its exponent", "1:7"),
            ("{\"a\": \"\\x41\"}", "an escape that JSON does not have", "1:7"),
        ] {
            let f = findings(text);
            assert_eq!(f.len(), 1, "{text}: {f:?}");
            assert!(f[0].starts_with(&format!("{pos}: ")), "{text}: {f:?}");
            assert!(f[0].contains(what), "{text}: {f:?}");
            assert!(f[0].contains("the reference devcontainer CLI reads this file differently"), "{text}: {f:?}");
        }
    }

    #[test]
    fn many_of_one_kind_are_said_once_with_a_count() {
        let f = findings("{a: 1, b: 2, c: 3}");
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].starts_with("1:2: an unquoted key (and 2 more)"), "{f:?}");
    }

    #[test]
    fn syntax_inside_strings_and_comments_is_not_json5() {
        assert_eq!(findings("{\"a\": \"0x10 +1 'q' {[\", // x: 0x1 'a'\n /* b: +1 */ \"b\": 1}"), Vec::<String>::new());
    }

    #[test]
    fn an_unclosed_object_reports_where_it_opened_and_where_the_text_ends() {
        let s = scan("{\n  \"a\": {\n    \"b\": 1\n").unwrap();
        assert_eq!(s.open_at_end, Some(Open::Object(at(2, 8))));
        assert_eq!(s.end, at(3, 11));
    }

    #[test]
    fn an_unclosed_block_comment_reports_where_it_opened() {
        let s = scan("{\n  \"image\": \"x\", /* here\n  \"name\": \"a\"\n}\n").unwrap();
        assert_eq!(s.open_at_end, Some(Open::Comment(at(2, 17))));
        assert_eq!(s.end, at(4, 2));
    }

    #[test]
    fn an_unclosed_string_reports_where_it_opened() {
        let s = scan("{\"image\": \"x}\n").unwrap();
        assert_eq!(s.open_at_end, Some(Open::String(at(1, 11))));
    }

    #[test]
    fn crlf_is_one_line_end() {
        let s = scan("{\r\n\"a\": 1,\r\n\"a\": 2\r\n").unwrap();
        assert_eq!(s.open_at_end, Some(Open::Object(at(1, 1))));
        assert_eq!(s.findings[0].at, at(3, 1));
        assert_eq!(s.end, at(3, 7));
    }

    #[test]
    fn nesting_past_the_limit_is_refused_where_it_passes() {
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(scan(&ok).is_ok());
        let deep = "[".repeat(100_000);
        assert_eq!(scan(&deep), Err(TooDeep { at: at(1, MAX_DEPTH + 1) }));
    }

    #[test]
    fn brackets_in_strings_and_comments_do_not_nest() {
        let text = format!("{{\"a\": \"{}\" /* {} */}}", "[".repeat(1000), "{".repeat(1000));
        assert!(scan(&text).is_ok());
    }

    #[test]
    fn json_numbers_are_recognised() {
        for n in ["0", "-0", "12", "1.5", "1e3", "1E+3", "-0.5e-2"] {
            assert!(is_json_number(n), "{n}");
        }
        for n in ["", "-", "01", "1.", ".5", "+1", "0x1", "1e", "1.5.5"] {
            assert!(!is_json_number(n), "{n}");
        }
    }
}
