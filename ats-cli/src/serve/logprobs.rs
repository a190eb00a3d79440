//! Log-probabilities on the wire: the engine's token ids and numbers as
//! OpenAI's chat (`content`) and legacy completion shapes, with each
//! token's text from the tokenizer.

use ats_core::Tokenizer;
use ats_core::sampling::TokenLogprob;
use serde_json::Value;

use super::errors::ApiError;
use super::wire::{ChatLogprobs, ChatTokenLogprob, CompletionLogprobs, TopLogprob};

/// Most alternatives a request may ask for per token (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: u64 = 20;

/// How many alternatives a chat request asks for (`None`: no logprobs).
pub fn chat_request(logprobs: Option<bool>, top: Option<u64>) -> Result<Option<usize>, ApiError> {
    match (logprobs.unwrap_or(false), top) {
        (_, Some(n)) if n > MAX_TOP_LOGPROBS => Err(ApiError::bad_param(
            "top_logprobs",
            format!("top_logprobs must be 0 to {MAX_TOP_LOGPROBS}, not {n}"),
        )),
        (false, Some(n)) if n > 0 => Err(ApiError::bad_param(
            "top_logprobs",
            "top_logprobs needs logprobs: true",
        )),
        (false, _) => Ok(None),
        (true, n) => Ok(Some(n.unwrap_or(0) as usize)),
    }
}

/// How many alternatives a completion request asks for (`logprobs: N`).
pub fn completion_request(logprobs: Option<u64>) -> Result<Option<usize>, ApiError> {
    match logprobs {
        Some(n) if n > MAX_TOP_LOGPROBS => Err(ApiError::bad_param(
            "logprobs",
            format!("logprobs must be 0 to {MAX_TOP_LOGPROBS}, not {n}"),
        )),
        Some(n) => Ok(Some(n as usize)),
        None => Ok(None),
    }
}

/// A token's bytes and text.
fn piece(tok: &Tokenizer, id: u32) -> (String, Vec<u8>) {
    let bytes = tok.token_to_piece(id).unwrap_or_default().to_vec();
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// The chat shape of `lps`.
pub fn chat(tok: &Tokenizer, lps: &[TokenLogprob]) -> ChatLogprobs {
    ChatLogprobs {
        content: lps
            .iter()
            .map(|lp| {
                let (token, bytes) = piece(tok, lp.id);
                ChatTokenLogprob {
                    token,
                    logprob: lp.logprob,
                    bytes,
                    top_logprobs: lp
                        .top
                        .iter()
                        .map(|&(id, logprob)| {
                            let (token, bytes) = piece(tok, id);
                            TopLogprob {
                                token,
                                logprob,
                                bytes,
                            }
                        })
                        .collect(),
                }
            })
            .collect(),
    }
}

/// The completion shape of `lps`, whose text starts at byte `offset` of
/// the answer.
pub fn completion(tok: &Tokenizer, lps: &[TokenLogprob], offset: usize) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    let mut at = offset;
    for lp in lps {
        let (text, bytes) = piece(tok, lp.id);
        out.text_offset.push(at);
        at += bytes.len();
        out.tokens.push(text);
        out.token_logprobs.push(lp.logprob);
        out.top_logprobs.push(
            lp.top
                .iter()
                .map(|&(id, l)| (piece(tok, id).0, Value::from(l)))
                .collect(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_checked() {
        assert_eq!(chat_request(None, None).unwrap(), None);
        assert_eq!(chat_request(Some(true), None).unwrap(), Some(0));
        assert_eq!(chat_request(Some(true), Some(5)).unwrap(), Some(5));
        assert_eq!(chat_request(Some(false), Some(0)).unwrap(), None);
        assert_eq!(
            chat_request(Some(false), Some(3))
                .unwrap_err()
                .param
                .unwrap(),
            "top_logprobs"
        );
        assert_eq!(
            chat_request(Some(true), Some(21))
                .unwrap_err()
                .param
                .unwrap(),
            "top_logprobs"
        );
        assert_eq!(completion_request(Some(2)).unwrap(), Some(2));
        assert_eq!(
            completion_request(Some(99)).unwrap_err().param.unwrap(),
            "logprobs"
        );
    }
}
