//! Pre-tokenizers of byte-level BPE vocabularies, chosen by
//! `tokenizer.ggml.pre`: how text is cut into words before BPE merges.
//!
//! Each kind is a chain of regex splits (every match and every gap between
//! matches becomes a piece, and the next regex cuts each piece again),
//! followed by the GPT-2 byte-to-character mapping. The patterns are those of
//! the models' own Hugging Face `tokenizer.json` files.

use std::sync::{Arc, OnceLock};

use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::tokenizer::SplitDelimiterBehavior;

use super::error::TokenizerError;

/// GPT-2's word pattern: contractions, letters, numbers, other symbols, each
/// with an optional leading space; runs of spaces not before a word.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Qwen2's pattern: case-insensitive contractions, a letter run with one
/// optional leading non-letter, single digits, symbols with trailing
/// newlines, newline runs, spaces.
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Llama 3's pattern: Qwen2's with numbers in groups of up to three digits.
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// o200k's pattern (GPT-4o, gpt-oss; llama.cpp's `gpt-4o`): words split
/// before an upper-case run that follows lower case, contractions attached,
/// numbers in groups of up to three digits, symbols with trailing newlines
/// or slashes.
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Every digit on its own (SmolLM / StarCoder split digits before GPT-2's pattern).
const DIGIT: &str = r"\p{N}";

/// llama.cpp's fallback chain for `default`: punctuation runs, then GPT-2's
/// words, then number runs, then groups of three ASCII digits.
const DEFAULT_PUNCT: &str = r"[\p{P}\$\+<=>\^~\|]+";
const DEFAULT_NUMBERS: &str = r"\p{N}+";
const DEFAULT_DIGITS3: &str = r"[0-9][0-9][0-9]";

/// Names accepted in `tokenizer.ggml.pre`, for error messages.
pub(crate) const KNOWN_NAMES: &[&str] = &[
    "default",
    "gpt-2",
    "phi-2",
    "mpt",
    "olmo",
    "smollm",
    "starcoder",
    "refact",
    "codeshell",
    "qwen2",
    "deepseek-r1-qwen",
    "megrez",
    "stablelm2",
    "llama-bpe",
    "llama3",
    "llama-v3",
    "dbrx",
    "smaug-bpe",
    "gpt-4o",
    "glm4",
    "glm5",
    "chatglm-bpe",
];

/// A pre-tokenizer family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizerKind {
    /// llama.cpp's `default` chain (also used when the key is absent).
    Default,
    /// GPT-2's pattern (`gpt-2`, `phi-2`, `mpt`, `olmo`).
    Gpt2,
    /// Single digits, then GPT-2's pattern (`smollm`, `starcoder`, ...).
    SmolLm,
    /// Qwen2's pattern (`qwen2`, `stablelm2`, ...).
    Qwen2,
    /// Llama 3's pattern (`llama-bpe`, `dbrx`, `smaug-bpe`).
    Llama3,
    /// o200k's pattern (`gpt-4o`: GPT-4o, gpt-oss).
    Gpt4o,
}

/// A resolved `tokenizer.ggml.pre` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PreSpec {
    pub kind: PreTokenizerKind,
    /// A word that is itself a token is emitted whole, skipping the merges
    /// (the Llama 3 tokenizers are trained that way).
    pub ignore_merges: bool,
    /// BOS is prepended unless `tokenizer.ggml.add_bos_token` says otherwise.
    pub default_add_bos: bool,
}

/// The pre-tokenizer for a `tokenizer.ggml.pre` name.
pub(crate) fn resolve(name: &str) -> Result<PreSpec, TokenizerError> {
    let plain = |kind| PreSpec {
        kind,
        ignore_merges: false,
        default_add_bos: false,
    };
    Ok(match name {
        "default" => plain(PreTokenizerKind::Default),
        "gpt-2" | "phi-2" | "mpt" | "olmo" => plain(PreTokenizerKind::Gpt2),
        "smollm" | "starcoder" | "refact" | "codeshell" => plain(PreTokenizerKind::SmolLm),
        "qwen2" | "deepseek-r1-qwen" | "megrez" | "stablelm2" => plain(PreTokenizerKind::Qwen2),
        "dbrx" | "smaug-bpe" => plain(PreTokenizerKind::Llama3),
        "gpt-4o" => plain(PreTokenizerKind::Gpt4o),
        // GLM-4's pattern is Llama 3's with the case classes spelled out
        "chatglm-bpe" => plain(PreTokenizerKind::Llama3),
        "glm4" | "glm5" => PreSpec {
            kind: PreTokenizerKind::Llama3,
            ignore_merges: true,
            default_add_bos: false,
        },
        "llama-bpe" | "llama3" | "llama-v3" => PreSpec {
            kind: PreTokenizerKind::Llama3,
            ignore_merges: true,
            default_add_bos: true,
        },
        other => return Err(TokenizerError::UnknownPreTokenizer(other.to_string())),
    })
}

impl PreTokenizerKind {
    fn patterns(self) -> &'static [&'static str] {
        match self {
            PreTokenizerKind::Default => &[DEFAULT_PUNCT, GPT2, DEFAULT_NUMBERS, DEFAULT_DIGITS3],
            PreTokenizerKind::Gpt2 => &[GPT2],
            PreTokenizerKind::SmolLm => &[DIGIT, GPT2],
            PreTokenizerKind::Qwen2 => &[QWEN2],
            PreTokenizerKind::Llama3 => &[LLAMA3],
            PreTokenizerKind::Gpt4o => &[GPT4O],
        }
    }

    /// [`PreTokenizerKind::build`], once per process: compiling the regexes
    /// costs more than loading the rest of a vocabulary (40% of a GGUF
    /// fuzzing run's time), and cloning a `Split` compiles its regex again.
    pub(crate) fn shared(self) -> Result<Arc<PreTokenizerWrapper>, TokenizerError> {
        type Built = Result<Arc<PreTokenizerWrapper>, String>;
        static BUILT: [OnceLock<Built>; 6] = [const { OnceLock::new() }; 6];
        let slot = match self {
            PreTokenizerKind::Default => 0,
            PreTokenizerKind::Gpt2 => 1,
            PreTokenizerKind::SmolLm => 2,
            PreTokenizerKind::Qwen2 => 3,
            PreTokenizerKind::Llama3 => 4,
            PreTokenizerKind::Gpt4o => 5,
        };
        BUILT[slot]
            .get_or_init(|| {
                self.build().map(Arc::new).map_err(|e| match e {
                    TokenizerError::Backend(m) => m,
                    other => other.to_string(),
                })
            })
            .clone()
            .map_err(TokenizerError::Backend)
    }

    /// The `tokenizers` pre-tokenizer: the regex splits, then the byte mapping.
    pub(crate) fn build(self) -> Result<PreTokenizerWrapper, TokenizerError> {
        let mut steps = Vec::new();
        for p in self.patterns() {
            let split = Split::new(
                SplitPattern::Regex((*p).to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| TokenizerError::Backend(format!("pre-tokenizer regex {p:?}: {e}")))?;
            steps.push(PreTokenizerWrapper::Split(split));
        }
        // The regexes above already cut the words; ByteLevel only maps bytes.
        steps.push(PreTokenizerWrapper::ByteLevel(ByteLevel::new(
            false, false, false,
        )));
        Ok(PreTokenizerWrapper::Sequence(Sequence::new(steps)))
    }
}
