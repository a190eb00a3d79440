//! The vocabulary as llguidance sees it: each token's bytes in a trie.
//! Control tokens (`<|im_end|>`) are marked with a leading 0xFF byte, so a
//! grammar's text never matches them (only a grammar naming them can);
//! user-defined tokens are text; unused slots have no bytes and can never
//! be chosen.

use toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};

use super::GrammarError;
use crate::tokenizer::{TokenType, Tokenizer};

/// The token environment of `tok`, ending with its end-of-generation tokens.
pub(super) fn token_env(tok: &Tokenizer) -> Result<TokEnv, GrammarError> {
    let eog = tok.eog_ids();
    let first_eog = *eog.first().ok_or(GrammarError::NoEndToken)?;
    let words: Vec<Vec<u8>> = (0..tok.vocab_size() as u32)
        .map(|id| token_bytes(tok, id))
        .collect();
    let info = TokRxInfo {
        tok_bos: tok.bos_id(),
        tok_pad: tok.pad_id(),
        tok_unk: tok.unk_id(),
        tok_end_of_turn: tok.eot_id(),
        ..TokRxInfo::new(words.len() as u32, first_eog)
    };
    let trie = TokTrie::from(&info, &words).with_eos_tokens(eog);
    // Greedy tokenization by the trie: llguidance only tokenizes to force
    // tokens, which ATS does not ask of it.
    Ok(std::sync::Arc::new(ApproximateTokEnv::new(trie)))
}

/// The bytes a token stands for, in llguidance's convention.
fn token_bytes(tok: &Tokenizer, id: u32) -> Vec<u8> {
    let piece = tok.token_to_piece(id).unwrap_or_default();
    match tok.token_type(id) {
        Some(TokenType::Unused) => Vec::new(),
        Some(TokenType::Control | TokenType::Unknown) => {
            let mut b = Vec::with_capacity(piece.len() + 1);
            b.push(TokTrie::SPECIAL_TOKEN_MARKER);
            b.extend_from_slice(piece);
            b
        }
        _ => piece.to_vec(),
    }
}
