//! Choosing the next token from logits, in the order of llama.cpp's default
//! chain: penalties (repetition, then OpenAI's frequency and presence),
//! top-k, top-p, min-p, temperature, then a seeded draw. Top-p and min-p see the distribution before temperature, as
//! in llama.cpp.
//!
//! Non-finite logits never panic and never poison the draw:
//! - NaN is treated as `-inf` (the token is never chosen);
//! - if any logit is `+inf`, the choice is among those tokens only, uniformly
//!   when sampling and the first of them when greedy (the limit of softmax);
//! - if no logit is above `-inf` (or `logits` is empty) the result is token 0,
//!   the one fixed answer that needs no distribution.

mod check;
mod logprobs;

pub use check::{SamplerError, SamplerField};
pub use logprobs::TokenLogprob;

/// Sampling settings. `Default` is llama.cpp's defaults with a fixed seed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplerConfig {
    /// Divides the logits; `<= 0` means greedy (argmax after the penalty).
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens; 0 keeps all.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability sums to
    /// at least `top_p`; `>= 1` keeps all.
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely; `<= 0` keeps all.
    pub min_p: f32,
    /// Penalty on tokens seen in the last `repeat_last_n` of the history:
    /// positive logits are divided by it, negative ones multiplied; 1 is off.
    pub repeat_penalty: f32,
    /// OpenAI's frequency penalty: subtracted from a token's logit once per
    /// time it occurs in the last `repeat_last_n` tokens; 0 is off.
    pub frequency_penalty: f32,
    /// OpenAI's presence penalty: subtracted once from the logit of every
    /// token that occurs in the last `repeat_last_n` tokens; 0 is off.
    pub presence_penalty: f32,
    /// How much of the history the penalties look at (llama.cpp's window,
    /// shared by all three); 0 is none.
    pub repeat_last_n: usize,
    /// Seed of the sampler's own random generator.
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            repeat_last_n: 64,
            seed: 0x5EED,
        }
    }
}

impl SamplerConfig {
    /// Always the most likely token.
    pub fn greedy() -> Self {
        SamplerConfig {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            repeat_last_n: 0,
            seed: 0,
        }
    }

    /// Checks every setting against its range ([`SamplerField::check`]),
    /// naming the first that is out of it.
    pub fn validate(&self) -> Result<(), SamplerError> {
        use SamplerField::*;
        for (field, v) in [
            (Temperature, self.temperature),
            (TopP, self.top_p),
            (MinP, self.min_p),
            (RepeatPenalty, self.repeat_penalty),
            (FrequencyPenalty, self.frequency_penalty),
            (PresencePenalty, self.presence_penalty),
        ] {
            field.check(f64::from(v))?;
        }
        Ok(())
    }
}

/// A token sampler with its own deterministic random generator.
#[derive(Clone, Debug)]
pub struct Sampler {
    config: SamplerConfig,
    rng: Xoshiro256,
    /// Reused between calls: (token, logit).
    cands: Vec<(u32, f32)>,
}

impl Sampler {
    /// A sampler seeded from `config.seed`.
    pub fn new(config: SamplerConfig) -> Self {
        Sampler {
            config,
            rng: Xoshiro256::seed_from(config.seed),
            cands: Vec::new(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &SamplerConfig {
        &self.config
    }

    /// Restarts the random sequence from a new seed.
    pub fn reseed(&mut self, seed: u64) {
        self.config.seed = seed;
        self.rng = Xoshiro256::seed_from(seed);
    }

    /// The next token for `logits` (one per vocabulary entry), given the
    /// tokens so far (`history`, oldest first) for the repetition penalty.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let mut cands = std::mem::take(&mut self.cands);
        self.prepare(logits, history, &mut cands);
        let id = if cands.is_empty() {
            0
        } else if self.is_greedy() {
            cands[0].0
        } else {
            self.draw(&cands)
        };
        self.cands = cands;
        id
    }

    /// The tokens that survive the filters with their probabilities at the
    /// configured temperature (greedy: the argmax with probability 1),
    /// most likely first.
    pub fn distribution(&self, logits: &[f32], history: &[u32]) -> Vec<(u32, f64)> {
        let mut cands = Vec::new();
        self.prepare(logits, history, &mut cands);
        if self.is_greedy() {
            cands.truncate(1);
        }
        let probs = softmax(&cands);
        let mut out: Vec<(u32, f64)> = cands.iter().map(|c| c.0).zip(probs).collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out
    }

    /// Greedy unless the temperature is positive (NaN counts as greedy).
    fn is_greedy(&self) -> bool {
        let t = self.config.temperature;
        t.is_nan() || t <= 0.0
    }

    /// Penalties, filters and temperature: `cands` ends holding the
    /// surviving tokens (in no particular order) with tempered logits.
    fn prepare(&self, logits: &[f32], history: &[u32], cands: &mut Vec<(u32, f32)>) {
        let c = &self.config;
        cands.clear();
        cands.extend(
            logits
                .iter()
                .enumerate()
                .map(|(i, &l)| (i as u32, if l.is_nan() { f32::NEG_INFINITY } else { l })),
        );
        self.penalize(cands, history);

        // +inf dominates: softmax's limit is uniform over the infinite logits.
        if cands.iter().any(|x| x.1 == f32::INFINITY) {
            cands.retain(|x| x.1 == f32::INFINITY);
            for x in cands.iter_mut() {
                x.1 = 0.0;
            }
            return;
        }
        cands.retain(|x| x.1 > f32::NEG_INFINITY);
        if cands.is_empty() {
            return;
        }
        let by_logit_desc =
            |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));

        if self.is_greedy() {
            let best = cands
                .iter()
                .copied()
                .min_by(by_logit_desc)
                .unwrap_or((0, 0.0));
            cands.clear();
            cands.push(best);
            return;
        }

        // Top-k: a partial selection, no sort.
        if c.top_k > 0 && c.top_k < cands.len() {
            cands.select_nth_unstable_by(c.top_k - 1, by_logit_desc);
            cands.truncate(c.top_k);
        }

        let best = cands
            .iter()
            .copied()
            .min_by(by_logit_desc)
            .unwrap_or((0, 0.0));
        let max = best.1 as f64;
        let weight = |x: &(u32, f32)| (x.1 as f64 - max).exp();
        // Top-p and min-p both keep a head of the candidates in logit order,
        // so applying min-p first gives the same set, as long as top-p still
        // measures mass against the distribution it would have seen (after
        // top-k, before min-p). Filtering first keeps the sort small.
        let top_p_mass = if c.top_p < 1.0 {
            Some(c.top_p as f64 * cands.iter().map(weight).sum::<f64>())
        } else {
            None
        };

        // Min-p: p_i >= min_p * p_max  <=>  l_i >= l_max + ln(min_p).
        if c.min_p > 0.0 {
            let floor = max + (c.min_p as f64).ln();
            cands.retain(|x| x.1 as f64 >= floor);
            if cands.is_empty() {
                cands.push(best);
            }
        }

        // Top-p, on the untempered distribution: the smallest head holding
        // the mass. Narrow to a head that holds it before sorting.
        if let Some(target) = top_p_mass {
            let mut k = 256;
            while k < cands.len() {
                cands.select_nth_unstable_by(k - 1, by_logit_desc);
                if cands[..k].iter().map(weight).sum::<f64>() >= target {
                    cands.truncate(k);
                    break;
                }
                k *= 4;
            }
            cands.sort_unstable_by(by_logit_desc);
            let mut cum = 0.0;
            let mut keep = cands.len();
            for (i, x) in cands.iter().enumerate() {
                cum += weight(x);
                if cum >= target {
                    keep = i + 1;
                    break;
                }
            }
            cands.truncate(keep.max(1));
        }

        let t = c.temperature;
        for x in cands.iter_mut() {
            x.1 /= t;
        }
    }

    /// llama.cpp's penalties over the last `repeat_last_n` tokens: the
    /// repetition penalty once per distinct token, then OpenAI's
    /// `logit -= count * frequency_penalty + presence_penalty` for every
    /// token that occurs `count > 0` times. Values out of range (see
    /// [`SamplerConfig::validate`]) do nothing rather than poison logits.
    fn penalize(&self, cands: &mut [(u32, f32)], history: &[u32]) {
        let c = &self.config;
        let usable = |v: f32| v.is_finite() && v != 0.0;
        let repeat = c.repeat_penalty != 1.0 && usable(c.repeat_penalty) && c.repeat_penalty > 0.0;
        let frequency = if usable(c.frequency_penalty) {
            c.frequency_penalty
        } else {
            0.0
        };
        let presence = if usable(c.presence_penalty) {
            c.presence_penalty
        } else {
            0.0
        };
        if c.repeat_last_n == 0 || !(repeat || frequency != 0.0 || presence != 0.0) {
            return;
        }
        let recent = &history[history.len().saturating_sub(c.repeat_last_n)..];
        let mut counts = std::collections::HashMap::with_capacity(recent.len());
        for &id in recent {
            *counts.entry(id).or_insert(0u32) += 1;
        }
        for (id, n) in counts {
            let Some(x) = cands.get_mut(id as usize) else {
                continue;
            };
            if repeat {
                x.1 = if x.1 <= 0.0 {
                    x.1 * c.repeat_penalty
                } else {
                    x.1 / c.repeat_penalty
                };
            }
            x.1 -= n as f32 * frequency + presence;
        }
    }

    fn draw(&mut self, cands: &[(u32, f32)]) -> u32 {
        let max = cands
            .iter()
            .map(|x| x.1 as f64)
            .fold(f64::NEG_INFINITY, f64::max);
        let total: f64 = cands.iter().map(|x| (x.1 as f64 - max).exp()).sum();
        let target = self.rng.next_f64() * total;
        let mut cum = 0.0;
        for c in cands {
            cum += (c.1 as f64 - max).exp();
            if target < cum {
                return c.0;
            }
        }
        // Rounding left the sum a hair under the total: the last candidate.
        cands[cands.len() - 1].0
    }
}

/// Probabilities of finite logits, computed in f64 from the maximum.
fn softmax(cands: &[(u32, f32)]) -> Vec<f64> {
    let max = cands
        .iter()
        .map(|x| x.1 as f64)
        .fold(f64::NEG_INFINITY, f64::max);
    let exps: Vec<f64> = cands.iter().map(|x| (x.1 as f64 - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.into_iter().map(|e| e / sum).collect()
}

/// xoshiro256** (Blackman and Vigna): small, fast, and good enough for
/// sampling; seeded through SplitMix64 so that any u64 seed works.
#[derive(Clone, Debug)]
struct Xoshiro256 {
    s: [u64; 4],
}

impl Xoshiro256 {
    fn seed_from(seed: u64) -> Self {
        let mut x = seed;
        let mut split = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Xoshiro256 {
            s: [split(), split(), split(), split()],
        }
    }

    fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1), 53 random bits.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests;
