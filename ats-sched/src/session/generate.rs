//! The generation loop: prefill, then sample and decode until an
//! end-of-generation token, a stop string, the token limit or a full context.

use ats_core::grammar::Constraint;
use ats_core::round::{EmbedOverride, Positions};
use ats_core::sampling::{SamplerConfig, TokenLogprob};
use serde::Serialize;

use super::decoder::{Decoder, Next, Step};
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
    /// Keep going past end-of-generation tokens (not past a grammar's end).
    pub ignore_eos: bool,
    /// A grammar the answer must match, in its start state: it masks the
    /// logits before each sample, and the answer ends where it ends.
    pub constraint: Option<Constraint>,
    /// Report each generated token's log-probability with this many most
    /// likely alternatives (`None`: none reported).
    pub logprobs: Option<usize>,
    /// Added to these tokens' logits before the grammar's mask and sampling
    /// (OpenAI's `logit_bias`; -100 all but bans a token, 100 all but forces it).
    pub logit_bias: Vec<(u32, f32)>,
}

impl Default for GenParams {
    fn default() -> Self {
        GenParams {
            max_tokens: 128,
            sampler: SamplerConfig::default(),
            stop: Vec::new(),
            ignore_eos: false,
            constraint: None,
            logprobs: None,
            logit_bias: Vec::new(),
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
    /// Log-probabilities of the tokens whose text the next `Text` carries
    /// (only when [`GenParams::logprobs`] asks for them).
    Logprobs(&'a [TokenLogprob]),
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
    /// Log-probabilities of `tokens` (empty unless [`GenParams::logprobs`]).
    pub logprobs: Vec<TokenLogprob>,
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
        let tok = self.shared_tokenizer()?;
        let t0 = self.now();
        let mut logits = self.prefill_with(prompt, false, embeds)?;
        let prompt_ms = self.ms_since(t0);
        let mut decoder = Decoder::new(params);
        let mut ttft_ms = 0.0;
        let (mut decode_rounds, mut decode_ms) = (0usize, 0.0f64);
        let mut emit = |t: &str, lps: &[TokenLogprob]| {
            (lps.is_empty() || on_event(GenEvent::Logprobs(lps))) && on_event(GenEvent::Text(t))
        };
        let mut stop = StopReason::MaxTokens;
        // no answer at all for a limit of 0
        let mut more = params.max_tokens > 0;
        while more {
            let step = Step {
                logits: &logits,
                history: self.history(),
                room: self.past() < self.n_ctx(),
                position: self.past(),
            };
            let next = decoder.step(step, &tok, &mut emit)?;
            if decode_rounds == 0 && ttft_ms == 0.0 {
                ttft_ms = self.ms_since(t0);
            }
            match next {
                Next::Feed(id) => {
                    let td = self.now();
                    logits = self.decode(id)?;
                    decode_ms += self.ms_since(td);
                    decode_rounds += 1;
                }
                Next::Stop(reason) => {
                    stop = reason;
                    more = false;
                }
            }
        }
        let (tokens, text, held_back_bytes, logprobs) = decoder.finish(&stop, &mut emit);
        let timings = Timings {
            prompt_tokens: prompt.len(),
            cached_tokens: 0,
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
            logprobs,
            timings,
        })
    }
}
