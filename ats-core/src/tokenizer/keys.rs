//! The GGUF metadata keys the tokenizer reads (llama.cpp's names).

/// Tokenizer family: `gpt2` (byte-level BPE) or `llama` (SentencePiece).
pub const MODEL: &str = "tokenizer.ggml.model";
/// Pre-tokenizer name for `gpt2` vocabularies (`qwen2`, `llama-bpe`, ...).
pub const PRE: &str = "tokenizer.ggml.pre";
/// Token texts, indexed by id.
pub const TOKENS: &str = "tokenizer.ggml.tokens";
/// Token types (llama.cpp's `LLAMA_TOKEN_TYPE_*`), indexed by id.
pub const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
/// SentencePiece scores, indexed by id.
pub const SCORES: &str = "tokenizer.ggml.scores";
/// BPE merges, `"left right"`, in priority order.
pub const MERGES: &str = "tokenizer.ggml.merges";
/// Beginning-of-sequence token id.
pub const BOS_ID: &str = "tokenizer.ggml.bos_token_id";
/// End-of-sequence token id.
pub const EOS_ID: &str = "tokenizer.ggml.eos_token_id";
/// End-of-turn token id.
pub const EOT_ID: &str = "tokenizer.ggml.eot_token_id";
/// End-of-message token id.
pub const EOM_ID: &str = "tokenizer.ggml.eom_token_id";
/// Unknown token id.
pub const UNK_ID: &str = "tokenizer.ggml.unknown_token_id";
/// Separator token id.
pub const SEP_ID: &str = "tokenizer.ggml.seperator_token_id";
/// Padding token id.
pub const PAD_ID: &str = "tokenizer.ggml.padding_token_id";
/// Fill-in-the-middle pad token id (ends generation).
pub const FIM_PAD_ID: &str = "tokenizer.ggml.fim_pad_token_id";
/// Fill-in-the-middle repository token id (ends generation).
pub const FIM_REP_ID: &str = "tokenizer.ggml.fim_rep_token_id";
/// Fill-in-the-middle separator token id (ends generation).
pub const FIM_SEP_ID: &str = "tokenizer.ggml.fim_sep_token_id";
/// Whether encoding with special tokens prepends BOS.
pub const ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
/// Whether encoding with special tokens appends EOS.
pub const ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
/// Whether SentencePiece text gets a leading space.
pub const ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
/// The Jinja chat template.
pub const CHAT_TEMPLATE: &str = "tokenizer.chat_template";
