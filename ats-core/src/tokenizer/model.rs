//! Building the `tokenizers` BPE model from a GGUF vocabulary: byte-level
//! BPE from the stored merges (`gpt2`), and SentencePiece BPE with merges
//! derived from the token scores (`llama`).

use std::collections::HashSet;

use tokenizers::models::bpe::{BPE, Vocab as BpeVocab};

use super::error::TokenizerError;
use super::keys;
use super::vocab::{TokenType, Vocab};

/// The texts the BPE model may produce: every token except control tokens,
/// which enter the output only as whole matches (see `special.rs`).
fn model_vocab(vocab: &Vocab) -> BpeVocab {
    let mut v = BpeVocab::default();
    for (i, t) in vocab.tokens.iter().enumerate() {
        if vocab.types[i] != TokenType::Control {
            v.entry(t.clone()).or_insert(i as u32);
        }
    }
    v
}

fn build(
    vocab: &Vocab,
    model_vocab: BpeVocab,
    merges: Vec<(String, String)>,
    unk: Option<u32>,
    byte_fallback: bool,
    ignore_merges: bool,
) -> Result<BPE, TokenizerError> {
    let mut b = BPE::builder()
        .vocab_and_merges(model_vocab, merges)
        .byte_fallback(byte_fallback)
        .ignore_merges(ignore_merges);
    // A control token is never emitted for unspellable text (SmolLM2 names
    // `<|endoftext|>` as its unknown token): such text is an error instead.
    if let Some(u) = unk.filter(|&u| vocab.types[u as usize] != TokenType::Control) {
        b = b.unk_token(vocab.tokens[u as usize].clone());
    }
    b.build()
        .map_err(|e| TokenizerError::Backend(format!("building the BPE model: {e}")))
}

/// Byte-level BPE from `tokenizer.ggml.merges` (`"left right"`, best first).
pub(crate) fn gpt2(
    vocab: &Vocab,
    merges: &[String],
    unk: Option<u32>,
    ignore_merges: bool,
) -> Result<BPE, TokenizerError> {
    let mv = model_vocab(vocab);
    let mut seen = HashSet::with_capacity(merges.len());
    let mut pairs = Vec::with_capacity(merges.len());
    let mut merged = String::new();
    for (i, m) in merges.iter().enumerate() {
        let bad =
            |why: String| TokenizerError::bad(keys::MERGES, format!("entry {i} {m:?}: {why}"));
        // The separator is the first space after the first character: byte-level
        // tokens never contain a raw space, but a first character might be one.
        let first_len = m.chars().next().map_or(0, char::len_utf8);
        let Some(sp) = m[first_len..].find(' ').map(|p| p + first_len) else {
            return Err(bad("no space between the two tokens".into()));
        };
        let (l, r) = (&m[..sp], &m[sp + 1..]);
        if r.is_empty() {
            return Err(bad("the right token is empty".into()));
        }
        let id = |side: &str| mv.get(side).copied();
        let (Some(li), Some(ri)) = (id(l), id(r)) else {
            let side = if id(l).is_none() { l } else { r };
            return Err(bad(format!("{side:?} is not a token")));
        };
        merged.clear();
        merged.push_str(l);
        merged.push_str(r);
        if !mv.contains_key(merged.as_str()) {
            return Err(bad(format!("the merged text {merged:?} is not a token")));
        }
        // A repeated merge keeps its first (best) rank.
        if seen.insert((li, ri)) {
            pairs.push((l.to_string(), r.to_string()));
        }
    }
    build(vocab, mv, pairs, unk, false, ignore_merges)
}

/// SentencePiece BPE: two adjacent pieces merge when their concatenation is
/// a token, the highest-scoring such token first. Expressed as ranked BPE
/// merges: every split of every text token into two text tokens, ranked by
/// the whole token's score (best first). Characters with no token fall back
/// to `<0xNN>` byte tokens.
pub(crate) fn spm(vocab: &Vocab, scores: &[f32], unk: Option<u32>) -> Result<BPE, TokenizerError> {
    let mv = model_vocab(vocab);
    let is_piece = |t: TokenType| {
        matches!(
            t,
            TokenType::Normal | TokenType::Undefined | TokenType::UserDefined
        )
    };
    let piece_id = |s: &str| {
        mv.get(s)
            .copied()
            .filter(|&id| is_piece(vocab.types[id as usize]))
    };
    // (score, token id, split byte offset)
    let mut cands: Vec<(f32, u32, usize)> = Vec::new();
    for (i, text) in vocab.tokens.iter().enumerate() {
        let id = i as u32;
        // Duplicated texts: only the id the model vocabulary resolves to.
        if piece_id(text) != Some(id) {
            continue;
        }
        // A NaN score ranks last rather than poisoning the order.
        let score = match scores[i] {
            s if s.is_nan() => f32::NEG_INFINITY,
            s => s,
        };
        for (k, _) in text.char_indices().skip(1) {
            if piece_id(&text[..k]).is_some() && piece_id(&text[k..]).is_some() {
                cands.push((score, id, k));
            }
        }
    }
    cands.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let merges = cands
        .into_iter()
        .map(|(_, id, k)| {
            let t = &vocab.tokens[id as usize];
            (t[..k].to_string(), t[k..].to_string())
        })
        .collect();
    build(vocab, mv, merges, unk, true, false)
}
