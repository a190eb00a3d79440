//! Keeping message content plain text inside a rendered chat prompt.
//!
//! A chat template wraps each message in its own markup
//! (`<|im_start|>user\n...<|im_end|>`), whose control tokens must be parsed
//! as such. Content that spells a control token's text must not be: a user
//! could close their turn and forge a system one. So before rendering, every
//! control-token text inside content is wrapped in two guard characters that
//! occur nowhere else ([`Tokenizer::guard`]); the encoder
//! ([`Tokenizer::encode_guarded`]) reads guarded spans as plain text, parses
//! control tokens everywhere else, and drops the guards. Guards sit inside
//! the content, so they survive whatever a template does to it (trim, split,
//! concatenate); text without guarded spans tokenizes exactly as the whole
//! rendered prompt would.

use std::collections::HashSet;
use std::ops::RangeInclusive;

use super::error::TokenizerError;

/// Where guard characters come from: Unicode noncharacters, then the private
/// use area; neither appears in ordinary text.
const CANDIDATES: [RangeInclusive<u32>; 2] = [0xFDD0..=0xFDEF, 0xE000..=0xF8FF];

/// The pair of characters that open and close a guarded (plain-text) span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Guards {
    open: char,
    close: char,
}

/// A rendered prompt whose guarded spans are plain text: give it to
/// [`Tokenizer::encode_guarded`](super::Tokenizer::encode_guarded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardedText {
    /// The text, guards included.
    pub text: String,
    /// The guards it uses.
    pub guards: Guards,
}

impl GuardedText {
    /// The text as the model reads it (the guards removed).
    pub fn plain(&self) -> String {
        self.text
            .chars()
            .filter(|&c| c != self.guards.open && c != self.guards.close)
            .collect()
    }
}

fn is_candidate(c: char) -> bool {
    CANDIDATES.iter().any(|r| r.contains(&u32::from(c)))
}

impl Guards {
    /// Two guard characters found in none of `texts` (everything that will
    /// reach the rendered prompt: content, roles, the template source).
    pub fn choose<'a>(texts: impl IntoIterator<Item = &'a str>) -> Result<Guards, TokenizerError> {
        let mut used = HashSet::new();
        for t in texts {
            used.extend(t.chars().filter(|&c| is_candidate(c)));
        }
        let mut free = CANDIDATES
            .iter()
            .flat_map(|r| r.clone())
            .filter_map(char::from_u32)
            .filter(|c| !used.contains(c));
        match (free.next(), free.next()) {
            (Some(open), Some(close)) => Ok(Guards { open, close }),
            _ => Err(TokenizerError::NoGuards),
        }
    }

    /// The opening character.
    pub fn open(&self) -> char {
        self.open
    }

    /// The closing character.
    pub fn close(&self) -> char {
        self.close
    }

    /// `text` cut into (piece, guarded) pairs, guards removed; guards that
    /// do not pair up (an open inside a span, a close outside one, an open
    /// never closed) are an error naming the offset.
    pub(crate) fn split<'a>(&self, text: &'a str) -> Result<Vec<(&'a str, bool)>, TokenizerError> {
        let mut out = Vec::new();
        let mut start = 0;
        let mut inside = false;
        for (at, c) in text.char_indices() {
            let bad = |problem| Err(TokenizerError::BadGuards { at, problem });
            if c == self.open {
                if inside {
                    return bad("a guard opens inside a guarded span");
                }
            } else if c == self.close {
                if !inside {
                    return bad("a guard closes outside a guarded span");
                }
            } else {
                continue;
            }
            if at > start {
                out.push((&text[start..at], inside));
            }
            inside = !inside;
            start = at + c.len_utf8();
        }
        if inside {
            return Err(TokenizerError::BadGuards {
                at: text.len(),
                problem: "a guarded span is never closed",
            });
        }
        if start < text.len() {
            out.push((&text[start..], false));
        }
        Ok(out)
    }
}
