//! Errors of the tokenizer.

/// Why a tokenizer cannot be built from GGUF metadata, or cannot encode or
/// decode. Metadata problems name the key.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A required metadata key is absent.
    #[error("tokenizer metadata: missing key {key:?}")]
    MissingKey {
        /// The GGUF key.
        key: &'static str,
    },
    /// A key holds a value of the wrong type or an invalid value.
    #[error("tokenizer metadata: key {key:?}: {problem}")]
    BadKey {
        /// The GGUF key.
        key: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// `tokenizer.ggml.model` names a tokenizer ATS does not implement.
    #[error(
        "tokenizer metadata: tokenizer.ggml.model {0:?} is not supported (supported: \"gpt2\", \"llama\")"
    )]
    UnsupportedModel(String),
    /// `tokenizer.ggml.pre` names a pre-tokenizer ATS does not know.
    #[error(
        "tokenizer metadata: tokenizer.ggml.pre {0:?} is not a known pre-tokenizer (known: {known})",
        known = super::pretok::KNOWN_NAMES.join(", ")
    )]
    UnknownPreTokenizer(String),
    /// The `tokenizers` crate rejected the model or the input.
    #[error("tokenizer: {0}")]
    Backend(String),
    /// Part of the input has no token (no byte tokens, no unknown token).
    #[error(
        "tokenizer: text {snippet:?} has a character this vocabulary cannot spell \
         (no token for one of its bytes, and no unknown token)"
    )]
    Unrepresentable {
        /// The piece of text that could not be encoded.
        snippet: String,
    },
    /// A token id outside the vocabulary was given.
    #[error("token id {id} is outside the vocabulary of {vocab_size} tokens")]
    BadTokenId {
        /// The id.
        id: u32,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// The text needs more tokens than the caller allows; tokenizing
    /// stopped as soon as that was certain.
    #[error("the text has more than {limit} tokens (at least {at_least})")]
    TooManyTokens {
        /// The most tokens allowed.
        limit: usize,
        /// A lower bound on the tokens the text takes.
        at_least: usize,
    },
    /// The text holds every character guards could be made of, so its
    /// plain-text parts cannot be marked (see [`super::Guards`]).
    #[error(
        "the text uses every private-use character, so none is left to mark its plain-text parts"
    )]
    NoGuards,
    /// Guarded text whose guards do not pair up: something between
    /// [`super::Tokenizer::guard`] and the encoder cut a guarded span.
    #[error("guarded text is malformed at byte {at}: {problem}")]
    BadGuards {
        /// Byte offset of the stray guard.
        at: usize,
        /// What is wrong.
        problem: &'static str,
    },
}

impl TokenizerError {
    pub(crate) fn bad(key: &'static str, problem: impl Into<String>) -> Self {
        TokenizerError::BadKey {
            key,
            problem: problem.into(),
        }
    }
}
