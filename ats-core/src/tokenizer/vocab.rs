//! The vocabulary as GGUF stores it: token texts, types and scores, read
//! and validated from metadata.

use std::collections::HashMap;

use super::error::TokenizerError;
use super::keys;
use crate::gguf::{Metadata, Value};

/// The kind of a token (llama.cpp's `LLAMA_TOKEN_TYPE_*`, stored in
/// `tokenizer.ggml.token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenType {
    /// Type 0: not specified; treated as normal text.
    Undefined,
    /// Type 1: ordinary text.
    Normal,
    /// Type 2: the unknown token.
    Unknown,
    /// Type 3: a control token (`<|im_start|>`); matched in text only on request.
    Control,
    /// Type 4: a user-defined token, always matched as a whole in text.
    UserDefined,
    /// Type 5: an unused slot.
    Unused,
    /// Type 6: a byte-fallback token `<0xNN>`.
    Byte,
}

impl TokenType {
    /// The type for its GGUF code.
    pub fn from_code(code: i64) -> Option<TokenType> {
        Some(match code {
            0 => TokenType::Undefined,
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => return None,
        })
    }

    /// Whether the token's text is shown as-is rather than decoded as text
    /// (control, unknown and user-defined tokens).
    pub fn is_special(self) -> bool {
        matches!(
            self,
            TokenType::Control | TokenType::Unknown | TokenType::UserDefined
        )
    }
}

/// Token texts, types and scores with a reverse index.
#[derive(Clone, Debug)]
pub(crate) struct Vocab {
    pub tokens: Vec<String>,
    pub types: Vec<TokenType>,
    pub scores: Option<Vec<f32>>,
    /// Text to id; for duplicated texts the first id wins.
    pub by_text: HashMap<String, u32>,
}

impl Vocab {
    pub fn from_metadata(md: &Metadata) -> Result<Vocab, TokenizerError> {
        let tokens = string_array(md, keys::TOKENS)?
            .ok_or(TokenizerError::MissingKey { key: keys::TOKENS })?;
        if tokens.is_empty() {
            return Err(TokenizerError::bad(keys::TOKENS, "the vocabulary is empty"));
        }
        // Ids are u32 everywhere downstream.
        if u32::try_from(tokens.len()).is_err() {
            return Err(TokenizerError::bad(
                keys::TOKENS,
                format!("{} tokens do not fit u32 ids", tokens.len()),
            ));
        }
        let n = tokens.len();

        let types = match md.get(keys::TOKEN_TYPE) {
            None => vec![TokenType::Normal; n],
            Some(v) => {
                let arr = array(v, keys::TOKEN_TYPE)?;
                if arr.len() != n {
                    return Err(TokenizerError::bad(
                        keys::TOKEN_TYPE,
                        format!("{} entries for {n} tokens", arr.len()),
                    ));
                }
                arr.iter()
                    .enumerate()
                    .map(|(i, v)| {
                        v.as_i64().and_then(TokenType::from_code).ok_or_else(|| {
                            TokenizerError::bad(
                                keys::TOKEN_TYPE,
                                format!("entry {i} is {v}, expected a type code 0..=6"),
                            )
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
        };

        let scores = match md.get(keys::SCORES) {
            None => None,
            Some(v) => {
                let arr = array(v, keys::SCORES)?;
                if arr.len() != n {
                    return Err(TokenizerError::bad(
                        keys::SCORES,
                        format!("{} entries for {n} tokens", arr.len()),
                    ));
                }
                Some(
                    arr.iter()
                        .enumerate()
                        .map(|(i, v)| {
                            v.as_f64().map(|x| x as f32).ok_or_else(|| {
                                TokenizerError::bad(
                                    keys::SCORES,
                                    format!("entry {i} is {v}, expected a number"),
                                )
                            })
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                )
            }
        };

        let mut by_text = HashMap::with_capacity(n);
        for (i, t) in tokens.iter().enumerate() {
            by_text.entry(t.clone()).or_insert(i as u32);
        }
        Ok(Vocab {
            tokens,
            types,
            scores,
            by_text,
        })
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }
}

/// The elements of an array value, or an error naming the key.
pub(crate) fn array<'a>(v: &'a Value, key: &'static str) -> Result<&'a [Value], TokenizerError> {
    v.as_array()
        .ok_or_else(|| TokenizerError::bad(key, format!("expected an array, found {v}")))
}

/// An optional array of strings.
pub(crate) fn string_array(
    md: &Metadata,
    key: &'static str,
) -> Result<Option<Vec<String>>, TokenizerError> {
    let Some(v) = md.get(key) else {
        return Ok(None);
    };
    array(v, key)?
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_str().map(str::to_owned).ok_or_else(|| {
                TokenizerError::bad(key, format!("entry {i} is {v}, expected a string"))
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// An optional string.
pub(crate) fn opt_str<'a>(
    md: &'a Metadata,
    key: &'static str,
) -> Result<Option<&'a str>, TokenizerError> {
    match md.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_str()
            .map(Some)
            .ok_or_else(|| TokenizerError::bad(key, format!("expected a string, found {v}"))),
    }
}

/// An optional bool.
pub(crate) fn opt_bool(md: &Metadata, key: &'static str) -> Result<Option<bool>, TokenizerError> {
    match md.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_bool()
            .map(Some)
            .ok_or_else(|| TokenizerError::bad(key, format!("expected a bool, found {v}"))),
    }
}

/// An optional token id, checked against the vocabulary size.
pub(crate) fn opt_id(
    md: &Metadata,
    key: &'static str,
    n_tokens: usize,
) -> Result<Option<u32>, TokenizerError> {
    match md.get(key) {
        None => Ok(None),
        Some(v) => {
            let id = v.as_u64().ok_or_else(|| {
                TokenizerError::bad(key, format!("expected a token id, found {v}"))
            })?;
            if id >= n_tokens as u64 {
                return Err(TokenizerError::bad(
                    key,
                    format!("token id {id} is outside the vocabulary of {n_tokens} tokens"),
                ));
            }
            Ok(Some(id as u32))
        }
    }
}
