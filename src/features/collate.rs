//! `String.prototype.localeCompare` as the reference CLI (Node, ICU root
//! collation) orders the ASCII strings features are named with: the
//! lockfile's keys and each install round are sorted with it, so a byte
//! order would write a lockfile the reference reads as changed.
//!
//! ICU compares the whole string by primary weight first (punctuation, then
//! digits, then letters, case ignored), and only then by case, lower before
//! upper. Outside ASCII we fall back to code points: feature ids are
//! registry paths, which are ASCII.

use std::cmp::Ordering;

/// ASCII punctuation and symbols in the root collation's order; all sort
/// before digits, which sort before letters.
const PUNCTUATION: &str = " _-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$";

fn primary(c: char) -> (u8, u32) {
    if let Some(i) = PUNCTUATION.find(c) {
        (0, i as u32)
    } else if c.is_ascii_digit() {
        (1, c as u32)
    } else if c.is_ascii_alphabetic() {
        (2, c.to_ascii_lowercase() as u32)
    } else {
        (3, c as u32)
    }
}

/// The reference's `a.localeCompare(b)` for ASCII strings.
pub fn locale_compare(a: &str, b: &str) -> Ordering {
    let by_primary = a.chars().map(primary).cmp(b.chars().map(primary));
    if by_primary != Ordering::Equal {
        return by_primary;
    }
    // Same letters: lower case first, at the first position that differs.
    let tertiary = |c: char| c.is_ascii_uppercase();
    a.chars().map(tertiary).cmp(b.chars().map(tertiary))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_ascii_sorts_as_node_sorts_it() {
        // From node 20: the printable ASCII characters sorted with localeCompare.
        let node = " _-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$0123456789aAbBcCdDeEfFgGhHiIjJkKlLmMnNoOpPqQrRsStTuUvVwWxXyYzZ";
        let mut chars: Vec<String> = (32u8..127).map(|c| (c as char).to_string()).collect();
        chars.sort_by(|a, b| locale_compare(a, b));
        assert_eq!(chars.concat(), node);
    }

    #[test]
    fn case_decides_only_after_every_letter_is_compared() {
        // node: ["a_b","a-b","a:b","a.b","a/b","a1","ab","aB","Ab"]
        let mut words = vec!["Ab", "aB", "ab", "a1", "a/b", "a.b", "a:b", "a-b", "a_b"];
        words.sort_by(|a, b| locale_compare(a, b));
        assert_eq!(words, ["a_b", "a-b", "a:b", "a.b", "a/b", "a1", "ab", "aB", "Ab"]);
        assert_eq!(locale_compare("node:1", "node-x:1"), Ordering::Greater);
    }
}
