//! The generation loop: prefill, then sample and decode until an
//! end-of-generation token, a stop string, the token limit or a full context.

use std::time::Instant;

use ats_core::round::{EmbedOverride, Positions};
use ats_core::sampling::{Sampler, SamplerConfig};
use ats_core::tokenizer::TokenStream;
use serde::Serialize;

use super::{Session, SessionError, Timings};

/// What to generate.
#[derive(Clone, Debug)]
pub struct GenParams {
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Sampling settings.
    pub sampler: SamplerConfig,
    /// Stop when any of these appears in the text (it is not emitted).
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
}

impl Default for GenParams {
    fn default() -> Self {
        GenParams {
            max_tokens: 128,
            sampler: SamplerConfig::default(),
            stop: Vec::new(),
            ignore_eos: false,
        }
    }
}

/// Why generation stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model produced an end-of-generation token.
    Eog,
    /// The token limit.
    MaxTokens,
    /// A stop string.
    StopString(String),
    /// The context is full (ATS stops rather than shifting the cache).
    ContextFull,
    /// The caller asked to stop.
    Cancelled,
}

/// What the callback sees as generation proceeds.
#[derive(Clone, Debug)]
pub enum GenEvent<'a> {
    /// Text that is final (complete UTF-8, not part of a possible stop string).
    Text(&'a str),
}

/// A finished generation.
#[derive(Clone, Debug, Serialize)]
pub struct Generation {
    /// Generated token ids (without the end-of-generation token).
    pub tokens: Vec<u32>,
    /// Generated text.
    pub text: String,
    /// Why it stopped.
    pub stop: StopReason,
    /// Bytes of a character the last tokens began but never finished (a
    /// limit cut it): not in `text`, which holds whole characters only.
    pub held_back_bytes: usize,
    /// Timings.
    pub timings: Timings,
}

impl Session {
    /// Generates after `prompt` (appended to the current session), calling
    /// `on_event` with text as it becomes final; `on_event` returning false
    /// cancels.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        params: &GenParams,
        on_event: &mut dyn FnMut(GenEvent<'_>) -> bool,
    ) -> Result<Generation, SessionError> {
        self.generate_with(prompt, None, params, on_event)
    }

    /// [`Session::generate`] whose prompt has embedding rows replaced (image
    /// embeddings) and explicit positions (M-RoPE), as [`Session::prefill_with`] takes them.
    pub fn generate_with(
        &mut self,
        prompt: &[u32],
        embeds: Option<(&EmbedOverride, &Positions, i64)>,
        params: &GenParams,
        on_event: &mut dyn FnMut(GenEvent<'_>) -> bool,
    ) -> Result<Generation, SessionError> {
        let tok = self.tokenizer()?.clone();
        let t0 = Instant::now();
        let mut logits = self.prefill_with(prompt, false, embeds)?;
        let prompt_ms = Session::ms_since(t0);
        let mut sampler = Sampler::new(params.sampler);
        let mut stream = TokenStream::new(&tok);
        let mut tokens = Vec::new();
        let mut text = String::new();
        let mut emitted = 0usize;
        let hold = params
            .stop
            .iter()
            .map(|s| s.len())
            .max()
            .unwrap_or(1)
            .saturating_sub(1);
        let mut ttft_ms = 0.0;
        let (mut decode_rounds, mut decode_ms) = (0usize, 0.0f64);
        let mut stop = StopReason::MaxTokens;
        while tokens.len() < params.max_tokens {
            // The sampler reads NaN as -inf and would quietly pick token 0.
            if logits.iter().any(|l| l.is_nan()) {
                return Err(SessionError::NonFiniteLogits {
                    position: self.past(),
                });
            }
            let id = sampler.sample(&logits, self.history());
            if tokens.is_empty() {
                ttft_ms = Session::ms_since(t0);
            }
            if !params.ignore_eos && tok.is_eog(id) {
                stop = StopReason::Eog;
                break;
            }
            tokens.push(id);
            text.push_str(&stream.push(id)?);
            if let Some((at, s)) = params
                .stop
                .iter()
                .filter_map(|s| text.find(s.as_str()).map(|at| (at, s)))
                .min_by_key(|x| x.0)
            {
                text.truncate(at);
                stop = StopReason::StopString(s.clone());
                break;
            }
            // emit what can no longer become part of a stop string
            let mut safe = text.len().saturating_sub(hold);
            while !text.is_char_boundary(safe) {
                safe -= 1;
            }
            if safe > emitted {
                if !on_event(GenEvent::Text(&text[emitted..safe])) {
                    stop = StopReason::Cancelled;
                    emitted = safe;
                    break;
                }
                emitted = safe;
            }
            if tokens.len() >= params.max_tokens {
                break;
            }
            if self.past() >= self.n_ctx() {
                stop = StopReason::ContextFull;
                break;
            }
            let td = Instant::now();
            logits = self.decode(id)?;
            decode_ms += Session::ms_since(td);
            decode_rounds += 1;
        }
        // text after a stop string or a cancel is dropped anyway
        let held_back_bytes = match stop {
            StopReason::Cancelled | StopReason::StopString(_) => 0,
            _ => stream.finish(),
        };
        if text.len() > emitted && stop != StopReason::Cancelled {
            on_event(GenEvent::Text(&text[emitted..]));
        }
        let timings = Timings {
            prompt_tokens: prompt.len(),
            prompt_ms,
            gen_tokens: tokens.len(),
            decode_rounds,
            decode_ms,
            ttft_ms,
        };
        Ok(Generation {
            tokens,
            text,
            stop,
            held_back_bytes,
            timings,
        })
    }
}
