//! A tokenizer for a synthetic model, taken from a real one (the donor):
//! every `tokenizer.*` key of the donor's metadata, and its vocabulary size
//! for the embedding and output tensors. With it, a synthetic file runs
//! from text, and llama.cpp (whose loader requires a tokenizer) loads it
//! too, so both engines can be measured on the same file.

use crate::gguf::{GgufFile, Value};
use crate::tokenizer::keys;

/// The prefix of every tokenizer key (`tokenizer.ggml.*`, `tokenizer.chat_template`).
const TOKENIZER_PREFIX: &str = "tokenizer.";

/// Why a donor's tokenizer cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VocabError {
    /// The donor has no token list.
    #[error("{file}: no {key} in its metadata: it carries no tokenizer to copy")]
    NoTokens {
        /// The donor's path.
        file: String,
        /// The key looked for.
        key: &'static str,
    },
}

/// A donor model's tokenizer metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct DonorVocab {
    entries: Vec<(String, Value)>,
    n_vocab: usize,
}

impl DonorVocab {
    /// The tokenizer of `donor`.
    pub fn from_gguf(donor: &GgufFile) -> Result<DonorVocab, VocabError> {
        let n_vocab = donor
            .metadata
            .get_array(keys::TOKENS)
            .map(<[Value]>::len)
            .filter(|&n| n > 0)
            .ok_or_else(|| VocabError::NoTokens {
                file: donor.path().display().to_string(),
                key: keys::TOKENS,
            })?;
        let entries = donor
            .metadata
            .iter()
            .filter(|(k, _)| k.starts_with(TOKENIZER_PREFIX))
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        Ok(DonorVocab { entries, n_vocab })
    }

    /// Tokens in the vocabulary.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// The metadata entries to copy.
    pub fn entries(&self) -> &[(String, Value)] {
        &self.entries
    }
}
