//! Cutting text at special tokens before BPE, as llama.cpp does: the text of
//! a control or user-defined token found in the input becomes that token,
//! whole, and the text around it is tokenized normally.

use super::vocab::{TokenType, Vocab};

/// A piece of input: plain text to tokenize, or a special token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

/// The ids matched as whole tokens in text (control, unknown, user-defined,
/// with non-empty text), longest text first so that a token containing
/// another wins.
pub(crate) fn special_ids(vocab: &Vocab) -> Vec<u32> {
    let mut ids: Vec<u32> = (0..vocab.len() as u32)
        .filter(|&i| vocab.types[i as usize].is_special() && !vocab.tokens[i as usize].is_empty())
        .collect();
    // Stable: equal lengths keep id order.
    ids.sort_by_key(|&i| std::cmp::Reverse(vocab.tokens[i as usize].len()));
    ids
}

/// Splits `text` at every occurrence of a special token. Control and unknown
/// tokens are matched only when `parse_special` is set; user-defined tokens
/// always are (as the Hugging Face tokenizers treat added tokens).
pub(crate) fn partition<'a>(
    text: &'a str,
    specials: &[u32],
    vocab: &Vocab,
    parse_special: bool,
) -> Vec<Fragment<'a>> {
    let mut frags = vec![Fragment::Text(text)];
    for &id in specials {
        let ty = vocab.types[id as usize];
        if !parse_special && ty != TokenType::UserDefined {
            continue;
        }
        let pat = vocab.tokens[id as usize].as_str();
        if !frags
            .iter()
            .any(|f| matches!(f, Fragment::Text(s) if s.contains(pat)))
        {
            continue;
        }
        let mut next = Vec::with_capacity(frags.len() + 2);
        for f in frags {
            let Fragment::Text(s) = f else {
                next.push(f);
                continue;
            };
            let mut rest = 0;
            for (at, _) in s.match_indices(pat) {
                if at > rest {
                    next.push(Fragment::Text(&s[rest..at]));
                }
                next.push(Fragment::Token(id));
                rest = at + pat.len();
            }
            if rest < s.len() {
                next.push(Fragment::Text(&s[rest..]));
            }
        }
        frags = next;
    }
    frags.retain(|f| !matches!(f, Fragment::Text("")));
    frags
}
