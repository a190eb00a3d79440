//! Timings of a generation, as llama.cpp prints them.

use serde::Serialize;

/// What a generation took.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Timings {
    /// Prompt tokens processed.
    pub prompt_tokens: usize,
    /// Prompt tokens taken from the KV cache (a prefix computed before).
    pub cached_tokens: usize,
    /// Milliseconds of prompt processing.
    pub prompt_ms: f64,
    /// Tokens generated (sampled, not counting an end-of-generation token).
    pub gen_tokens: usize,
    /// Decode rounds run (one per generated token after the first).
    pub decode_rounds: usize,
    /// Milliseconds spent in decode rounds.
    pub decode_ms: f64,
    /// Milliseconds from the start to the first sampled token.
    pub ttft_ms: f64,
}

impl Timings {
    /// Prompt tokens computed (not taken from the cache).
    pub fn computed_prompt_tokens(&self) -> usize {
        self.prompt_tokens.saturating_sub(self.cached_tokens)
    }

    /// Prompt tokens computed per second.
    pub fn prompt_tps(&self) -> f64 {
        per_sec(self.computed_prompt_tokens(), self.prompt_ms)
    }

    /// Generation tokens per second (decode rounds per second).
    pub fn gen_tps(&self) -> f64 {
        per_sec(self.decode_rounds, self.decode_ms)
    }
}

fn per_sec(n: usize, ms: f64) -> f64 {
    if ms > 0.0 {
        n as f64 * 1000.0 / ms
    } else {
        0.0
    }
}
