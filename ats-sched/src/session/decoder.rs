//! One sequence's generation, token by token: biases and a grammar's mask
//! on the logits, sampling (with its own sampler state and seed), log-probabilities
//! when asked, detokenizing with whole characters only, stop strings held
//! back until they cannot match, and the limits. The
//! one-sequence loop ([`super::Session::generate`]) and the scheduler of
//! many sequences ([`crate::scheduler`]) both drive it.

use ats_core::grammar::Constraint;
use ats_core::sampling::{Sampler, TokenLogprob};
use ats_core::tokenizer::{TokenStream, Tokenizer};

use super::{GenParams, SessionError, StopReason};

/// What a sequence does after a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Feed this token (it is part of the answer).
    Feed(u32),
    /// The answer is over.
    Stop(StopReason),
}

/// A sequence's answer so far.
#[derive(Debug)]
pub struct Decoder {
    params: GenParams,
    sampler: Sampler,
    /// Bytes of a character begun but not finished.
    pending: Vec<u8>,
    tokens: Vec<u32>,
    text: String,
    emitted: usize,
    /// Bytes of text held back while they could still start a stop string.
    hold: usize,
    /// The grammar's state, when the answer is constrained.
    constraint: Option<Constraint>,
    /// Log-probabilities of `tokens` (when asked), each with the length of
    /// `text` once its token was pushed, and how many were passed on.
    logprobs: Vec<(TokenLogprob, usize)>,
    logprobs_emitted: usize,
}

/// What the receiver of an answer's text is given: final text, and the
/// log-probabilities of the tokens that made it (empty unless asked).
pub type OnText<'a> = dyn FnMut(&str, &[TokenLogprob]) -> bool + 'a;

impl Decoder {
    /// A decoder for `params`.
    pub fn new(params: &GenParams) -> Decoder {
        let hold = params
            .stop
            .iter()
            .map(|s| s.len())
            .max()
            .unwrap_or(1)
            .saturating_sub(1);
        Decoder {
            sampler: Sampler::new(params.sampler),
            params: params.clone(),
            pending: Vec::new(),
            tokens: Vec::new(),
            text: String::new(),
            emitted: 0,
            hold,
            constraint: params.constraint.clone(),
            logprobs: Vec::new(),
            logprobs_emitted: 0,
        }
    }

    /// Tokens of the answer so far.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Samples the next token from `logits` (the sequence's last row;
    /// `history`: its tokens so far, for penalties), passes text that is
    /// final to `on_text` (false cancels), and says what comes next.
    /// `room` is whether the context can take another token; `position`
    /// names the context length in errors.
    pub fn step(
        &mut self,
        step: Step<'_>,
        tok: &Tokenizer,
        on_text: &mut OnText<'_>,
    ) -> Result<Next, SessionError> {
        // The sampler reads NaN as -inf and would quietly pick token 0.
        if step.logits.iter().any(|l| l.is_nan()) {
            return Err(SessionError::NonFiniteLogits {
                position: step.position,
            });
        }
        let adjusted;
        let logits = if self.constraint.is_some() || !self.params.logit_bias.is_empty() {
            let mut m = step.logits.to_vec();
            for &(id, bias) in &self.params.logit_bias {
                if let Some(l) = m.get_mut(id as usize) {
                    *l += bias;
                }
            }
            if let Some(c) = &mut self.constraint {
                c.mask(&mut m)?;
            }
            adjusted = m;
            &adjusted[..]
        } else {
            step.logits
        };
        let id = self.sampler.sample(logits, step.history);
        if let Some(c) = &mut self.constraint {
            // a token the mask forbade (nothing was allowed) fails here: never
            // an answer outside the grammar
            c.accept(id)?;
        }
        // a grammar's end is the answer's end, ignore_eos or not
        if tok.is_eog(id) && (!self.params.ignore_eos || self.constraint.is_some()) {
            return Ok(Next::Stop(StopReason::Eog));
        }
        self.tokens.push(id);
        let mut stream = TokenStream::resume(tok, std::mem::take(&mut self.pending));
        self.text.push_str(&stream.push(id)?);
        self.pending = stream.into_pending();
        if let Some(top) = self.params.logprobs {
            let lp = TokenLogprob::of(logits, id, top);
            self.logprobs.push((lp, self.text.len()));
        }
        if let Some(s) = self.stop_string() {
            return Ok(Next::Stop(StopReason::StopString(s)));
        }
        if !self.emit_safe(on_text) {
            return Ok(Next::Stop(StopReason::Cancelled));
        }
        if self
            .constraint
            .as_ref()
            .is_some_and(Constraint::is_finished)
        {
            return Ok(Next::Stop(StopReason::Eog));
        }
        if self.tokens.len() >= self.params.max_tokens {
            return Ok(Next::Stop(StopReason::MaxTokens));
        }
        if !step.room {
            return Ok(Next::Stop(StopReason::ContextFull));
        }
        Ok(Next::Feed(id))
    }

    /// Cuts the text at the first stop string, if one appeared.
    fn stop_string(&mut self) -> Option<String> {
        let (at, s) = self
            .params
            .stop
            .iter()
            .filter_map(|s| self.text.find(s.as_str()).map(|at| (at, s.clone())))
            .min_by_key(|x| x.0)?;
        self.text.truncate(at);
        Some(s)
    }

    /// Emits what can no longer become part of a stop string; false when
    /// the receiver cancels.
    fn emit_safe(&mut self, on_text: &mut OnText<'_>) -> bool {
        let mut safe = self.text.len().saturating_sub(self.hold);
        while !self.text.is_char_boundary(safe) {
            safe -= 1;
        }
        if safe > self.emitted {
            return self.emit_to(safe, on_text);
        }
        true
    }

    /// Passes on the text up to byte `end` with the log-probabilities of
    /// the tokens that end within it.
    fn emit_to(&mut self, end: usize, on_text: &mut OnText<'_>) -> bool {
        let done = self.logprobs[self.logprobs_emitted..]
            .iter()
            .take_while(|(_, at)| *at <= end)
            .count();
        let lps: Vec<TokenLogprob> = self.logprobs
            [self.logprobs_emitted..self.logprobs_emitted + done]
            .iter()
            .map(|(lp, _)| lp.clone())
            .collect();
        self.logprobs_emitted += done;
        let go = on_text(&self.text[self.emitted..end], &lps);
        self.emitted = end;
        go
    }

    /// Ends the answer (stopped for `stop`): emits the rest of its text
    /// (none after a cancel) and returns the tokens, the text, the bytes
    /// of an unfinished character held back, and the log-probabilities of
    /// the tokens whose text is in the answer (a stop string cuts the rest).
    pub fn finish(
        mut self,
        stop: &StopReason,
        on_text: &mut OnText<'_>,
    ) -> (Vec<u32>, String, usize, Vec<TokenLogprob>) {
        // text after a stop string or a cancel is dropped anyway
        let held_back = match stop {
            StopReason::Cancelled | StopReason::StopString(_) => 0,
            _ => self.pending.len(),
        };
        // the last tokens may have made no text (half a character a limit
        // cut): their log-probabilities still go out
        let unsent = self.logprobs.len() > self.logprobs_emitted;
        if (self.text.len() > self.emitted || unsent) && *stop != StopReason::Cancelled {
            self.emit_to(self.text.len(), on_text);
        }
        let end = self.text.len();
        let logprobs = self
            .logprobs
            .into_iter()
            .take_while(|(_, at)| *at <= end)
            .map(|(lp, _)| lp)
            .collect();
        (self.tokens, self.text, held_back, logprobs)
    }
}

/// What one step samples from.
#[derive(Clone, Copy, Debug)]
pub struct Step<'a> {
    /// The sequence's last logits.
    pub logits: &'a [f32],
    /// Its tokens so far.
    pub history: &'a [u32],
    /// Whether its context can take another token.
    pub room: bool,
    /// Tokens in its context (for errors).
    pub position: usize,
}
