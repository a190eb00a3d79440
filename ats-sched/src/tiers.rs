//! Token tiers (NVIDIA's client-inference paper): one plan per tier of new
//! tokens per iteration, and the choice of tier for a round.
//!
//! A plan built for tier `T` runs up to `T` new tokens (batch-wide) per
//! iteration in `est_time(T)` seconds, so `N` new tokens take
//! `ceil(N / T) * est_time(T)` with that plan. [`TierTable::choose`] picks the
//! tier minimising it; for a prefill the chosen tier is the chunk size
//! ([`chunks`]). The engine's plans choose through it
//! ([`crate::planner::PlanSet::choose`]).

use std::ops::Range;

use serde::{Deserialize, Serialize};

/// The token tiers: new tokens per iteration a plan is built for.
pub const TIERS: [usize; 13] = [1, 2, 4, 8, 16, 32, 64, 512, 1024, 2048, 4096, 8192, 16384];

/// Tiers planned only when several sequences run at once (a round of 8
/// decode tokens gets a plan for 8; one sequence's prompt chunks are served
/// as well by the tiers around them).
pub const BATCH_TIERS: [usize; 2] = [2, 8];

/// The tiers a run plans: those up to `max`, the batch tiers only up to
/// `parallel` sequences.
pub fn planned(max: usize, parallel: usize) -> Vec<usize> {
    TIERS
        .iter()
        .copied()
        .filter(|&t| t <= max.max(1) && (!BATCH_TIERS.contains(&t) || t <= parallel))
        .collect()
}

/// Estimated seconds per iteration for each tier of [`TIERS`]; `None` where no
/// plan exists (e.g. its compute buffers do not fit the budget).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TierTable {
    est_time: [Option<f64>; TIERS.len()],
}

/// The tier chosen for a round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TierChoice {
    /// Index into [`TIERS`].
    pub index: usize,
    /// The tier: new tokens per iteration.
    pub tier: usize,
    /// Iterations needed: `ceil(new_tokens / tier)`.
    pub iterations: usize,
    /// Estimated seconds for all iterations.
    pub est_total: f64,
}

/// Why a tier cannot be chosen.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TierError {
    /// A tier's estimate is negative, NaN or infinite.
    #[error("tier {tier}: estimated time {value} is not a finite non-negative time")]
    InvalidEstimate { tier: usize, value: f64 },
    /// No tier has a plan.
    #[error("no token tier has a plan")]
    NoPlan,
    /// A round with no new tokens.
    #[error("a round needs at least one new token")]
    NoTokens,
    /// A chunk size of zero.
    #[error("chunk size must be positive")]
    ZeroChunk,
}

impl TierTable {
    /// A table from per-tier estimates, in the order of [`TIERS`].
    pub fn new(est_time: [Option<f64>; TIERS.len()]) -> Result<Self, TierError> {
        for (tier, t) in TIERS.iter().zip(&est_time) {
            if let Some(value) = *t
                && !(value.is_finite() && value >= 0.0)
            {
                return Err(TierError::InvalidEstimate { tier: *tier, value });
            }
        }
        if est_time.iter().all(Option::is_none) {
            return Err(TierError::NoPlan);
        }
        Ok(Self { est_time })
    }

    /// The estimate for the tier at `index` in [`TIERS`].
    pub fn est_time(&self, index: usize) -> Option<f64> {
        self.est_time.get(index).copied().flatten()
    }

    /// The tier minimising `ceil(new_tokens / tier) * est_time(tier)`.
    ///
    /// Ties go to the smaller tier: same time, smaller compute buffers.
    pub fn choose(&self, new_tokens: usize) -> Result<TierChoice, TierError> {
        if new_tokens == 0 {
            return Err(TierError::NoTokens);
        }
        let mut best: Option<TierChoice> = None;
        for (index, (&tier, est)) in TIERS.iter().zip(&self.est_time).enumerate() {
            let Some(est) = *est else { continue };
            let iterations = new_tokens.div_ceil(tier);
            let est_total = iterations as f64 * est;
            if best.as_ref().is_none_or(|b| est_total < b.est_total) {
                best = Some(TierChoice {
                    index,
                    tier,
                    iterations,
                    est_total,
                });
            }
        }
        best.ok_or(TierError::NoPlan)
    }

    /// The chosen tier for a prefill of `n_tokens` and its chunks, in order.
    pub fn plan_prefill(
        &self,
        n_tokens: usize,
    ) -> Result<(TierChoice, Vec<Range<usize>>), TierError> {
        let choice = self.choose(n_tokens)?;
        let chunks = chunks(n_tokens, choice.tier)?;
        Ok((choice, chunks))
    }
}

/// Splits `n_tokens` into consecutive chunks of `chunk` tokens, the last one shorter.
pub fn chunks(n_tokens: usize, chunk: usize) -> Result<Vec<Range<usize>>, TierError> {
    if chunk == 0 {
        return Err(TierError::ZeroChunk);
    }
    Ok((0..n_tokens)
        .step_by(chunk)
        .map(|start| start..(start + chunk).min(n_tokens))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::brute;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn table(pairs: &[(usize, f64)]) -> TierTable {
        let mut est = [None; TIERS.len()];
        for &(tier, t) in pairs {
            est[TIERS.iter().position(|&x| x == tier).unwrap()] = Some(t);
        }
        TierTable::new(est).unwrap()
    }

    #[test]
    fn hand_made_tables() {
        // Decode-like costs: a tier-1 plan at 10 ms, tier 64 at 40 ms, tier 512 at 200 ms.
        let t = table(&[(1, 0.010), (64, 0.040), (512, 0.200)]);
        let c = t.choose(1).unwrap();
        assert_eq!((c.tier, c.iterations), (1, 1));
        // 4 tokens: 4 x 10 ms = 40 ms ties one 40 ms iteration of tier 64: smaller wins.
        assert_eq!(t.choose(4).unwrap().tier, 1);
        assert_eq!(t.choose(5).unwrap().tier, 64);
        // 130 tokens: tier 64 needs 3 x 40 = 120 ms, tier 512 200 ms.
        let c = t.choose(130).unwrap();
        assert_eq!((c.tier, c.iterations), (64, 3));
        assert!((c.est_total - 0.120).abs() < 1e-12);
        // 400 tokens: 7 x 40 = 280 ms against 200 ms.
        assert_eq!(t.choose(400).unwrap().tier, 512);
        // 1000 tokens: tier 512 twice = 400 ms, tier 64 16 times = 640 ms.
        let (c, ch) = t.plan_prefill(1000).unwrap();
        assert_eq!(c.tier, 512);
        assert_eq!(ch, vec![0..512, 512..1000]);
    }

    #[test]
    fn missing_tiers_are_skipped() {
        let t = table(&[(16384, 3.0)]);
        let last = TIERS.len() - 1;
        let c = t.choose(1).unwrap();
        assert_eq!((c.index, c.tier, c.iterations), (last, 16384, 1));
        assert_eq!(t.choose(16385).unwrap().iterations, 2);
        assert_eq!(t.est_time(0), None);
        assert_eq!(t.est_time(last), Some(3.0));
        assert_eq!(t.est_time(99), None);
    }

    #[test]
    fn batch_tiers_only_for_batches() {
        assert_eq!(planned(64, 1), vec![1, 4, 16, 32, 64]);
        assert_eq!(planned(64, 4), vec![1, 2, 4, 16, 32, 64]);
        assert_eq!(planned(20, 8), vec![1, 2, 4, 8, 16]);
        assert_eq!(planned(0, 8), vec![1]);
    }

    #[test]
    fn chunking() {
        assert_eq!(chunks(0, 4).unwrap(), Vec::<Range<usize>>::new());
        assert_eq!(chunks(8, 4).unwrap(), vec![0..4, 4..8]);
        assert_eq!(chunks(9, 4).unwrap(), vec![0..4, 4..8, 8..9]);
        assert_eq!(chunks(3, 512).unwrap(), vec![0..3]);
        assert_eq!(chunks(3, 0), Err(TierError::ZeroChunk));
    }

    #[test]
    fn rejects_bad_input() {
        let mut est = [None; TIERS.len()];
        assert_eq!(TierTable::new(est), Err(TierError::NoPlan));
        let at32 = TIERS.iter().position(|&t| t == 32).unwrap();
        est[at32] = Some(-1.0);
        assert_eq!(
            TierTable::new(est),
            Err(TierError::InvalidEstimate {
                tier: 32,
                value: -1.0
            })
        );
        est[at32] = Some(f64::NAN);
        assert!(matches!(
            TierTable::new(est),
            Err(TierError::InvalidEstimate { tier: 32, .. })
        ));
        assert_eq!(table(&[(1, 1.0)]).choose(0), Err(TierError::NoTokens));
    }

    #[test]
    fn matches_brute_force() {
        let mut rng = StdRng::seed_from_u64(0x71e5_0001);
        for case in 0..500 {
            let mut est = [None; TIERS.len()];
            for (k, e) in est.iter_mut().enumerate() {
                if rng.random_bool(0.7) {
                    // Roughly sub-linear in the tier, with noise, like real plans.
                    let base = (TIERS[k] as f64).powf(rng.random_range(0.3..1.1)) * 1e-3;
                    *e = Some(base * rng.random_range(0.5..2.0));
                }
            }
            if est.iter().all(Option::is_none) {
                est[0] = Some(0.01);
            }
            let t = TierTable::new(est).unwrap();
            let n = if case % 2 == 0 {
                rng.random_range(1..=100)
            } else {
                rng.random_range(1..=40_000)
            };
            let c = t.choose(n).unwrap();
            let (bi, bt) = brute::tier(&est, n).unwrap();
            assert_eq!(c.index, bi, "case {case}: n {n}");
            assert!((c.est_total - bt).abs() <= 1e-12 * bt.max(1.0));
            let ch = chunks(n, c.tier).unwrap();
            assert_eq!(ch.len(), c.iterations);
            assert_eq!(ch.iter().map(|r| r.len()).sum::<usize>(), n);
            assert!(ch.windows(2).all(|w| w[0].end == w[1].start));
        }
    }
}
