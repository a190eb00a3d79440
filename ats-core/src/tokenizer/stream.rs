//! Streaming detokenization: text comes out as soon as it is complete UTF-8,
//! so a character split across tokens (byte tokens, byte-level pieces of an
//! emoji) is never printed in halves.

use super::Tokenizer;
use super::error::TokenizerError;

/// Turns generated token ids into text, one token at a time. Special tokens
/// come out as their text: stop on [`Tokenizer::is_eog`] before pushing an
/// end-of-generation token if it should not be shown.
#[derive(Debug)]
pub struct TokenStream<'a> {
    tokenizer: &'a Tokenizer,
    /// Bytes of an incomplete UTF-8 character (at most 3).
    pending: Vec<u8>,
}

impl<'a> TokenStream<'a> {
    /// A stream with nothing pending.
    pub fn new(tokenizer: &'a Tokenizer) -> Self {
        TokenStream {
            tokenizer,
            pending: Vec::new(),
        }
    }

    /// A stream holding `pending`, the bytes [`TokenStream::into_pending`]
    /// gave back: a stream kept between calls without borrowing its tokenizer.
    pub fn resume(tokenizer: &'a Tokenizer, pending: Vec<u8>) -> Self {
        TokenStream { tokenizer, pending }
    }

    /// The bytes of an unfinished character, to [`TokenStream::resume`] with.
    pub fn into_pending(self) -> Vec<u8> {
        self.pending
    }

    /// Adds a token; returns the text completed by it (possibly empty).
    /// Bytes that can never become valid UTF-8 come out as U+FFFD.
    pub fn push(&mut self, id: u32) -> Result<String, TokenizerError> {
        self.pending
            .extend_from_slice(self.tokenizer.token_to_piece(id)?);
        let mut out = String::new();
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(s) => {
                    out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = start + e.valid_up_to();
                    // Valid by construction: `from_utf8` checked it.
                    out.push_str(std::str::from_utf8(&self.pending[start..valid]).unwrap_or(""));
                    match e.error_len() {
                        // Invalid bytes: replace them and go on.
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            start = valid + n;
                        }
                        // An incomplete character at the end: wait for more.
                        None => {
                            start = valid;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        Ok(out)
    }

    /// Whether bytes of an unfinished character are held back.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Ends the stream. What is held back is the start of a character the
    /// tokens never finished (a token limit cut it): it is dropped rather
    /// than shown as U+FFFD, and its length in bytes is returned so the
    /// caller can say so.
    pub fn finish(self) -> usize {
        self.pending.len()
    }
}
