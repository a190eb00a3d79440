//! Brute-force reference solvers for the planning DPs, by enumeration.
//!
//! Exponential in the number of items: for tests and benchmarks only. Each
//! enumerates every candidate assignment and scores it with the public
//! evaluator of the model it checks, so a DP that agrees with them is optimal
//! for that model.

use crate::dynamic::{self, TransferError, TransferItem, TransferParams, TransferPlan};
use crate::placement::{
    self, ItemGroup, MoeRule, Placement, PlacementError, PlacementItem, PlacementParams,
};
use crate::tiers::TIERS;

/// Most items (or candidates) a brute-force solver enumerates.
pub const MAX_BRUTE_ITEMS: usize = 20;

/// Why a brute-force solve failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BruteError {
    /// Too many items to enumerate.
    #[error("brute force over {items} items (limit {MAX_BRUTE_ITEMS})")]
    TooManyItems { items: usize },
    /// The static placement instance is invalid.
    #[error(transparent)]
    Placement(#[from] PlacementError),
    /// The transfer instance is invalid.
    #[error(transparent)]
    Transfer(#[from] TransferError),
}

/// The best static placement over all `2^n` resident sets whose exact byte
/// total fits the budget, under the MoE rule applied in bytes.
///
/// Equals [`placement::place`] when every size is a whole number of units.
pub fn static_placement(
    items: &[PlacementItem],
    params: &PlacementParams,
) -> Result<Placement, BruteError> {
    let n = items.len();
    if n > MAX_BRUTE_ITEMS {
        return Err(BruteError::TooManyItems { items: n });
    }
    // Reject what the DP rejects.
    placement::validate(items, params)?;
    let has_experts = items.iter().any(|it| it.group == ItemGroup::Expert);
    let dense_bytes: u128 = items
        .iter()
        .filter(|it| it.group == ItemGroup::Dense)
        .map(|it| u128::from(it.size_bytes))
        .sum();
    let rule = match (has_experts, dense_bytes <= u128::from(params.budget_bytes)) {
        (false, _) => MoeRule::NoExperts,
        (true, true) => MoeRule::DenseResident,
        (true, false) => MoeRule::ExpertsOnCpu,
    };
    // The rule forbids dense items off the GPU, or experts on it.
    let allowed = |it: &PlacementItem, g: bool| {
        !matches!(
            (rule, it.group, g),
            (MoeRule::DenseResident, ItemGroup::Dense, false)
                | (MoeRule::ExpertsOnCpu, ItemGroup::Expert, true)
        )
    };

    let mut best: Option<(f64, Vec<bool>, u64)> = None;
    for mask in 0u32..(1u32 << n) {
        let on_gpu: Vec<bool> = (0..n).map(|i| (mask >> i) & 1 == 1).collect();
        if !items.iter().zip(&on_gpu).all(|(it, &g)| allowed(it, g)) {
            continue;
        }
        let bytes: u128 = items
            .iter()
            .zip(&on_gpu)
            .filter(|(_, g)| **g)
            .map(|(it, _)| u128::from(it.size_bytes))
            .sum();
        if bytes > u128::from(params.budget_bytes) {
            continue;
        }
        let value = placement::objective(items, &on_gpu, params.output_switch_cost)?;
        if best.as_ref().is_none_or(|b| value > b.0) {
            best = Some((value, on_gpu, bytes as u64));
        }
    }
    // The rule's forced set always fits (DenseResident) or is empty, so some mask qualifies.
    let (objective, on_gpu, gpu_bytes) = best.unwrap_or((0.0, vec![false; n], 0));
    Ok(Placement {
        switches: placement::switch_count(&on_gpu),
        on_gpu,
        objective,
        gpu_bytes,
        moe_rule: rule,
    })
}

/// The best promotion set over all subsets of the promotable CPU items, by
/// [`dynamic::round_time`] (which enforces the slot limit).
pub fn transfer_plan(
    items: &[TransferItem],
    params: &TransferParams,
) -> Result<TransferPlan, BruteError> {
    let candidates: Vec<usize> = (0..items.len())
        .filter(|&i| !items[i].on_gpu && items[i].promotable && params.slots > 0)
        .collect();
    if candidates.len() > MAX_BRUTE_ITEMS {
        return Err(BruteError::TooManyItems {
            items: candidates.len(),
        });
    }
    let mut best: Option<TransferPlan> = None;
    for mask in 0u32..(1u32 << candidates.len()) {
        let mut promote = vec![false; items.len()];
        for (b, &i) in candidates.iter().enumerate() {
            promote[i] = (mask >> b) & 1 == 1;
        }
        let timing = dynamic::round_time(items, &promote, params)?;
        if best.as_ref().is_none_or(|b| timing.total < b.timing.total) {
            best = Some(TransferPlan { promote, timing });
        }
    }
    // The empty set is always a candidate, so `best` is set.
    match best {
        Some(plan) => Ok(plan),
        None => Ok(TransferPlan {
            promote: vec![false; items.len()],
            timing: dynamic::round_time(items, &vec![false; items.len()], params)?,
        }),
    }
}

/// The tier (index into [`TIERS`]) with the least total time for `new_tokens`,
/// counting iterations by walking the chunks; ties go to the smaller tier.
pub fn tier(est: &[Option<f64>; TIERS.len()], new_tokens: usize) -> Option<(usize, f64)> {
    let mut best: Option<(usize, f64)> = None;
    for (index, (&size, e)) in TIERS.iter().zip(est).enumerate() {
        let Some(e) = *e else { continue };
        let (mut left, mut iterations) = (new_tokens, 0usize);
        while left > 0 {
            left -= left.min(size);
            iterations += 1;
        }
        let total = iterations as f64 * e;
        if best.is_none_or(|b| total < b.1) {
            best = Some((index, total));
        }
    }
    best
}
