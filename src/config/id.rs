//! `${devcontainerId}`: the reference CLI's stable id of a dev container,
//! derived from its id labels so it survives rebuilds (devcontainers/cli
//! `devcontainerIdForLabels`): the labels serialised as JSON with sorted keys,
//! hashed with SHA-256, the 256-bit number written in base 32 and left-padded
//! with `0` to 52 digits.

use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Base-32 digits as JavaScript's `BigInt.prototype.toString(32)` writes them.
const DIGITS: &[u8; 32] = b"0123456789abcdefghijklmnopqrstuv";

/// 52 base-32 digits hold 260 bits, enough for any SHA-256.
const ID_LEN: usize = 52;

/// The id of a container with these id labels (for workroom and the reference:
/// `devcontainer.local_folder` and `devcontainer.config_file`).
pub fn devcontainer_id(id_labels: &BTreeMap<String, String>) -> String {
    // A BTreeMap serialises with sorted keys, and serde_json escapes strings as
    // JSON.stringify does (`"`, `\`, control characters; other text raw).
    let json = serde_json::to_string(id_labels).expect("a map of strings serialises");
    let digest = Sha256::digest(json.as_bytes());
    base32_padded(&digest)
}

fn base32_padded(bytes: &[u8]) -> String {
    // Read the number 5 bits at a time from the top, after 4 leading zero bits
    // that make 256 bits a whole 260 = 52 × 5.
    let total_bits = ID_LEN * 5;
    let lead = total_bits - bytes.len() * 8;
    let bit = |i: usize| -> u8 {
        if i < lead {
            return 0;
        }
        let i = i - lead;
        (bytes[i / 8] >> (7 - i % 8)) & 1
    };
    (0..ID_LEN)
        .map(|d| {
            let v = (0..5).fold(0u8, |acc, b| (acc << 1) | bit(d * 5 + b));
            DIGITS[v as usize] as char
        })
        .collect()
}

/// The two labels the id is computed from, as the reference CLI sets them.
pub fn id_labels(local_folder: &str, config_file: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("devcontainer.local_folder".to_string(), local_folder.to_string()),
        ("devcontainer.config_file".to_string(), config_file.to_string()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base32_matches_bigint_to_string_32_with_padding() {
        // BigInt(0x01).toString(32).padStart(52, "0")
        let mut one = [0u8; 32];
        one[31] = 1;
        assert_eq!(base32_padded(&one), format!("{}1", "0".repeat(51)));
        // BigInt(2n**256n - 1n).toString(32) is "1" followed by 51 "v".
        assert_eq!(base32_padded(&[0xff; 32]), format!("1{}", "v".repeat(51)));
    }
}
