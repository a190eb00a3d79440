//! GPT-2's reversible byte-to-character mapping: byte-level BPE vocabularies
//! spell every byte as a printable character (space is `Ġ`, newline `Ċ`).

use std::collections::HashMap;
use std::sync::OnceLock;

/// The character that stands for each byte.
fn byte_to_char() -> &'static [char; 256] {
    static TABLE: OnceLock<[char; 256]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = ['\0'; 256];
        // Printable Latin-1 bytes stand for themselves; the others (controls,
        // space, NBSP, soft hyphen) are moved to U+0100 onwards, in byte order.
        let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let mut next = 256u32;
        for b in 0..=255u8 {
            t[b as usize] = if printable(b) {
                char::from(b)
            } else {
                let c = char::from_u32(next).expect("U+0100..U+0143 are valid chars");
                next += 1;
                c
            };
        }
        t
    })
}

fn char_to_byte() -> &'static HashMap<char, u8> {
    static MAP: OnceLock<HashMap<char, u8>> = OnceLock::new();
    MAP.get_or_init(|| {
        byte_to_char()
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect()
    })
}

/// The text of a byte-level token as raw bytes. A character outside the
/// mapping (possible only in a malformed vocabulary) is kept as its UTF-8.
pub(crate) fn decode_token(text: &str) -> Vec<u8> {
    let map = char_to_byte();
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match map.get(&c) {
            Some(&b) => out.push(b),
            None => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out
}

/// The byte-level spelling of raw bytes (the inverse of [`decode_token`]).
pub(crate) fn encode_bytes(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| byte_to_char()[b as usize]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_is_a_bijection_with_known_points() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(decode_token(&encode_bytes(&all)), all);
        assert_eq!(encode_bytes(b" "), "Ġ");
        assert_eq!(encode_bytes(b"\n"), "Ċ");
        assert_eq!(encode_bytes(b"\t"), "ĉ");
        assert_eq!(encode_bytes(b"a!~"), "a!~");
        assert_eq!(encode_bytes(&[0xAD]), "Ń");
        let distinct: std::collections::HashSet<char> = byte_to_char().iter().copied().collect();
        assert_eq!(distinct.len(), 256);
    }
}
