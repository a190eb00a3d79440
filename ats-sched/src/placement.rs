//! Static placement (ATSInfer): which weight items stay resident on the GPU.
//!
//! Items are the placement units in execution order (a tensor, or tensors that
//! are always consumed together). Item `i` has a size `s_i`, a benefit
//! `r_i = t_cpu - t_gpu` (seconds saved by running it on the GPU; may be
//! negative) and a switch cost `c_i` (seconds charged when item `i` runs on a
//! different device from item `i - 1`: activation bytes over PCIe plus the fixed
//! per-switch overhead). With `g_i = 1` when item `i` is resident, [`place`]
//! maximises
//!
//! ```text
//! sum_i r_i g_i  -  sum_i c_i [g_i != g_{i-1}]  -  c_out g_{n-1}
//! subject to  sum_i units(s_i) g_i <= floor(budget / unit)
//! ```
//!
//! where `g_{-1} = 0` (the round's inputs start on the host) and `c_out` is
//! [`PlacementParams::output_switch_cost`], charged once when the last item is
//! on the GPU because the output must return to the host (set it to 0 when the
//! output may stay on the device).
//!
//! Sizes are counted in units of [`PlacementParams::unit_bytes`] (default
//! 1 MiB), each size rounded up and the budget rounded down, so the chosen set
//! never exceeds the budget in bytes.
//!
//! The solver is a knapsack DP over states (units used, device of the previous
//! item): O(n M) time for n items and M budget units. Backtracking needs one
//! bit per (item, units, device) saying which device the previous item used,
//! so the table is `2 n (M + 1)` bits (6 MB for 1,000 items and 24,000 units).
//!
//! MoE rule (DESIGN.md): when some items are [`ItemGroup::Expert`], and the
//! budget holds every dense item, all dense items are resident and the DP
//! chooses experts with what is left; otherwise every expert stays on the CPU
//! and the DP chooses among the dense items. Either way the DP runs over the
//! whole sequence with the fixed items pinned, so switch costs next to them
//! are counted exactly.

use serde::{Deserialize, Serialize};

/// Default DP granularity: one MiB.
pub const DEFAULT_UNIT_BYTES: u64 = 1 << 20;

/// Largest backtracking table [`place`] builds, in bits (1 GiB).
pub const MAX_TABLE_BITS: u64 = 1 << 33;

/// Which group an item belongs to for the MoE partition rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ItemGroup {
    /// Any item that is not an MoE expert (attention, dense FFN, norms, output).
    #[default]
    Dense,
    /// An MoE expert item (e.g. one layer's gate/up/down expert tensors).
    Expert,
}

/// One placement unit, in execution order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlacementItem {
    /// Bytes of weights the item keeps resident on the GPU.
    pub size_bytes: u64,
    /// Seconds saved per round by running it on the GPU (`t_cpu - t_gpu`).
    pub benefit: f64,
    /// Seconds charged when this item and the previous one run on different devices.
    pub switch_cost: f64,
    /// Group for the MoE partition rule.
    pub group: ItemGroup,
}

/// Budget and cost parameters of a placement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlacementParams {
    /// GPU bytes available for resident weights.
    pub budget_bytes: u64,
    /// DP granularity in bytes; sizes round up and the budget down to it.
    pub unit_bytes: u64,
    /// Seconds charged once if the last item is resident (output back to the host).
    pub output_switch_cost: f64,
}

impl PlacementParams {
    /// A budget with the default 1 MiB granularity and no output switch cost.
    pub fn new(budget_bytes: u64) -> Self {
        Self {
            budget_bytes,
            unit_bytes: DEFAULT_UNIT_BYTES,
            output_switch_cost: 0.0,
        }
    }
}

/// Which branch of the MoE partition rule a placement took.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MoeRule {
    /// No expert items: the DP chose among all items.
    NoExperts,
    /// Every dense item is resident; the DP chose among the experts.
    DenseResident,
    /// The dense items do not fit: experts stay on the CPU; the DP chose among dense items.
    ExpertsOnCpu,
}

/// The chosen resident set and what it is worth.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// Per item: resident on the GPU.
    pub on_gpu: Vec<bool>,
    /// The objective of `on_gpu` (see the module docs), in seconds per round.
    pub objective: f64,
    /// Exact bytes of the resident items.
    pub gpu_bytes: u64,
    /// Device switches in the round, including the final one back to the host.
    pub switches: usize,
    /// The MoE rule branch taken.
    pub moe_rule: MoeRule,
}

/// Why a placement cannot be computed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PlacementError {
    /// The granularity is zero bytes.
    #[error("placement unit_bytes must be positive")]
    ZeroUnit,
    /// An item's benefit is NaN or infinite.
    #[error("placement item {index}: benefit {value} is not finite")]
    InvalidBenefit { index: usize, value: f64 },
    /// An item's switch cost is negative, NaN or infinite.
    #[error("placement item {index}: switch cost {value} is not a finite non-negative time")]
    InvalidSwitchCost { index: usize, value: f64 },
    /// The output switch cost is negative, NaN or infinite.
    #[error("output switch cost {0} is not a finite non-negative time")]
    InvalidOutputSwitchCost(f64),
    /// A device assignment does not have one entry per item.
    #[error("placement has {got} entries for {items} items")]
    LengthMismatch { items: usize, got: usize },
    /// The backtracking table would be too large at this granularity.
    #[error(
        "placement DP over {items} items and {units} units of {unit_bytes} bytes needs \
         {bits} table bits (limit {MAX_TABLE_BITS}); use a coarser unit_bytes"
    )]
    TableTooLarge {
        items: usize,
        units: u64,
        unit_bytes: u64,
        bits: u64,
    },
}

/// How the MoE rule constrains one item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pin {
    Free,
    Gpu,
    Cpu,
}

/// Chooses the resident set maximising the objective in the module docs.
pub fn place(
    items: &[PlacementItem],
    params: &PlacementParams,
) -> Result<Placement, PlacementError> {
    validate(items, params)?;
    let unit = params.unit_bytes;
    let units: Vec<u64> = items
        .iter()
        .map(|it| it.size_bytes.div_ceil(unit))
        .collect();
    let budget_units = params.budget_bytes / unit;

    let (pins, moe_rule, left) = moe_pins(items, &units, budget_units);
    // Capacity beyond the total size of the free items is never used.
    let free_units: u64 = units
        .iter()
        .zip(&pins)
        .filter(|(_, p)| **p == Pin::Free)
        .fold(0u64, |acc, (u, _)| acc.saturating_add(*u));
    let cap = left.min(free_units);
    let bits = 2 * (items.len() as u64).max(1) * (cap + 1);
    if bits > MAX_TABLE_BITS {
        return Err(PlacementError::TableTooLarge {
            items: items.len(),
            units: cap,
            unit_bytes: unit,
            bits,
        });
    }

    let on_gpu = solve(
        items,
        &units,
        &pins,
        cap as usize,
        params.output_switch_cost,
    );
    let objective = objective(items, &on_gpu, params.output_switch_cost)?;
    let gpu_bytes = items
        .iter()
        .zip(&on_gpu)
        .filter(|(_, g)| **g)
        .map(|(it, _)| it.size_bytes)
        .sum();
    Ok(Placement {
        switches: switch_count(&on_gpu),
        on_gpu,
        objective,
        gpu_bytes,
        moe_rule,
    })
}

/// The objective (module docs) of a given assignment; `on_gpu[i]` is item `i` resident.
///
/// Does not check the budget: it is the evaluator the DP is tested against.
pub fn objective(
    items: &[PlacementItem],
    on_gpu: &[bool],
    output_switch_cost: f64,
) -> Result<f64, PlacementError> {
    if on_gpu.len() != items.len() {
        return Err(PlacementError::LengthMismatch {
            items: items.len(),
            got: on_gpu.len(),
        });
    }
    let mut value = 0.0;
    let mut prev = false;
    for (it, &g) in items.iter().zip(on_gpu) {
        if g {
            value += it.benefit;
        }
        if g != prev {
            value -= it.switch_cost;
        }
        prev = g;
    }
    if prev {
        value -= output_switch_cost;
    }
    Ok(value)
}

/// Device switches of an assignment, starting and ending on the host.
pub fn switch_count(on_gpu: &[bool]) -> usize {
    let mut prev = false;
    let mut n = 0;
    for &g in on_gpu.iter().chain(std::iter::once(&false)) {
        n += usize::from(g != prev);
        prev = g;
    }
    n
}

/// Checks the parameters and every item's times.
pub(crate) fn validate(
    items: &[PlacementItem],
    params: &PlacementParams,
) -> Result<(), PlacementError> {
    if params.unit_bytes == 0 {
        return Err(PlacementError::ZeroUnit);
    }
    let out = params.output_switch_cost;
    if !(out.is_finite() && out >= 0.0) {
        return Err(PlacementError::InvalidOutputSwitchCost(out));
    }
    for (index, it) in items.iter().enumerate() {
        if !it.benefit.is_finite() {
            return Err(PlacementError::InvalidBenefit {
                index,
                value: it.benefit,
            });
        }
        if !(it.switch_cost.is_finite() && it.switch_cost >= 0.0) {
            return Err(PlacementError::InvalidSwitchCost {
                index,
                value: it.switch_cost,
            });
        }
    }
    Ok(())
}

/// Applies the MoE partition rule: the pins, the branch, and the units left for free items.
fn moe_pins(items: &[PlacementItem], units: &[u64], budget_units: u64) -> (Vec<Pin>, MoeRule, u64) {
    let has_experts = items.iter().any(|it| it.group == ItemGroup::Expert);
    if !has_experts {
        return (
            vec![Pin::Free; items.len()],
            MoeRule::NoExperts,
            budget_units,
        );
    }
    let dense_units = items
        .iter()
        .zip(units)
        .filter(|(it, _)| it.group == ItemGroup::Dense)
        .fold(0u64, |acc, (_, u)| acc.saturating_add(*u));
    if dense_units <= budget_units {
        let pins = items
            .iter()
            .map(|it| match it.group {
                ItemGroup::Dense => Pin::Gpu,
                ItemGroup::Expert => Pin::Free,
            })
            .collect();
        (pins, MoeRule::DenseResident, budget_units - dense_units)
    } else {
        let pins = items
            .iter()
            .map(|it| match it.group {
                ItemGroup::Dense => Pin::Free,
                ItemGroup::Expert => Pin::Cpu,
            })
            .collect();
        (pins, MoeRule::ExpertsOnCpu, budget_units)
    }
}

/// Backtracking bits: for each item, two bitsets over capacities `0..=cap`:
/// `from_gpu[CPU]` and `from_gpu[GPU]`, set when the best way to reach that
/// state had the previous item on the GPU.
struct Choices {
    words: usize,
    bits: Vec<u64>,
}

impl Choices {
    fn new(items: usize, cap: usize) -> Self {
        let words = (cap + 1).div_ceil(64);
        Self {
            words,
            bits: vec![0; items * 2 * words],
        }
    }

    /// The bitset words of item `i` for the state ending on `gpu`.
    fn row_mut(&mut self, i: usize, gpu: bool) -> &mut [u64] {
        let start = (2 * i + usize::from(gpu)) * self.words;
        &mut self.bits[start..start + self.words]
    }

    fn get(&self, i: usize, gpu: bool, c: usize) -> bool {
        let w = self.bits[(2 * i + usize::from(gpu)) * self.words + c / 64];
        (w >> (c % 64)) & 1 == 1
    }
}

/// The knapsack DP. `best_cpu[c]` / `best_gpu[c]`: best objective of the
/// prefix using at most `c` free units with the last item on the CPU / GPU.
fn solve(items: &[PlacementItem], units: &[u64], pins: &[Pin], cap: usize, out: f64) -> Vec<bool> {
    let n = items.len();
    let len = cap + 1;
    let neg = f64::NEG_INFINITY;
    // Before the first item the activation is on the host, with nothing used.
    let mut cpu = vec![0.0f64; len];
    let mut gpu = vec![neg; len];
    let mut next_cpu = vec![neg; len];
    let mut next_gpu = vec![neg; len];
    let mut choices = Choices::new(n, cap);

    for (i, it) in items.iter().enumerate() {
        let (r, s) = (it.benefit, it.switch_cost);
        // Pinned-resident items were paid for up front: they take no free units.
        let w = match pins[i] {
            Pin::Free => units[i].min(len as u64) as usize,
            _ => 0,
        };
        let allow_cpu = pins[i] != Pin::Gpu;
        let allow_gpu = pins[i] != Pin::Cpu && w <= cap;

        if allow_cpu {
            let row = choices.row_mut(i, false);
            step_cpu(&cpu, &gpu, s, &mut next_cpu, row);
        } else {
            next_cpu.fill(neg);
        }
        if allow_gpu {
            next_gpu[..w].fill(neg);
            let row = choices.row_mut(i, true);
            step_gpu(&cpu, &gpu, w, r, s, &mut next_gpu, row);
        } else {
            next_gpu.fill(neg);
        }
        std::mem::swap(&mut cpu, &mut next_cpu);
        std::mem::swap(&mut gpu, &mut next_gpu);
    }

    // Finish on the host: a resident last item pays the output switch.
    let end_gpu = gpu[cap] - out;
    let mut on_gpu_state = end_gpu > cpu[cap];
    let mut c = cap;
    let mut on_gpu = vec![false; n];
    for i in (0..n).rev() {
        on_gpu[i] = on_gpu_state;
        let prev_gpu = choices.get(i, on_gpu_state, c);
        if on_gpu_state && pins[i] == Pin::Free {
            c -= units[i] as usize;
        }
        on_gpu_state = prev_gpu;
    }
    on_gpu
}

/// Item on the CPU: from the CPU state for free, from the GPU state paying the switch.
fn step_cpu(cpu: &[f64], gpu: &[f64], s: f64, out: &mut [f64], row: &mut [u64]) {
    for (k, word) in row.iter_mut().enumerate() {
        let lo = k * 64;
        let hi = (lo + 64).min(out.len());
        let mut bits = 0u64;
        for (b, c) in (lo..hi).enumerate() {
            let stay = cpu[c];
            let back = gpu[c] - s;
            let from_gpu = back > stay;
            out[c] = if from_gpu { back } else { stay };
            bits |= u64::from(from_gpu) << b;
        }
        *word = bits;
    }
}

/// Item on the GPU taking `w` units: from capacity `c - w` of either state.
fn step_gpu(cpu: &[f64], gpu: &[f64], w: usize, r: f64, s: f64, out: &mut [f64], row: &mut [u64]) {
    let len = out.len();
    for (k, word) in row.iter_mut().enumerate() {
        let lo = (k * 64).max(w);
        let hi = ((k + 1) * 64).min(len);
        let mut bits = 0u64;
        for c in lo..hi {
            let enter = cpu[c - w] - s;
            let stay = gpu[c - w];
            let from_gpu = stay >= enter;
            out[c] = r + if from_gpu { stay } else { enter };
            bits |= u64::from(from_gpu) << (c - k * 64);
        }
        *word = bits;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::brute;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    const MIB: u64 = DEFAULT_UNIT_BYTES;

    fn item(size_mib: u64, benefit: f64, switch_cost: f64) -> PlacementItem {
        PlacementItem {
            size_bytes: size_mib * MIB,
            benefit,
            switch_cost,
            group: ItemGroup::Dense,
        }
    }

    /// Sizes of 0..=12 units of `unit` bytes: whole units, or any byte count.
    fn random_items(
        rng: &mut StdRng,
        n: usize,
        experts: bool,
        unit: u64,
        whole_units: bool,
    ) -> Vec<PlacementItem> {
        (0..n)
            .map(|_| {
                let size_bytes = if whole_units {
                    rng.random_range(0..=12u64) * unit
                } else {
                    rng.random_range(0..=12 * unit)
                };
                PlacementItem {
                    size_bytes,
                    benefit: rng.random_range(-0.5..2.0),
                    switch_cost: if rng.random_bool(0.2) {
                        0.0
                    } else {
                        rng.random_range(0.0..1.5)
                    },
                    group: if experts && rng.random_bool(0.5) {
                        ItemGroup::Expert
                    } else {
                        ItemGroup::Dense
                    },
                }
            })
            .collect()
    }

    fn random_params(rng: &mut StdRng, unit: u64) -> PlacementParams {
        PlacementParams {
            budget_bytes: if rng.random_bool(0.1) {
                0
            } else {
                rng.random_range(0..=60u64) * unit
            },
            unit_bytes: unit,
            output_switch_cost: if rng.random_bool(0.5) {
                0.0
            } else {
                rng.random_range(0.0..1.0)
            },
        }
    }

    #[test]
    fn hand_made_cases() {
        // A switch cost larger than the benefit keeps a lone item on the CPU.
        let items = [item(1, 1.0, 0.6)];
        let mut params = PlacementParams::new(10 * MIB);
        params.output_switch_cost = 0.6;
        let p = place(&items, &params).unwrap();
        assert_eq!(p.on_gpu, vec![false]);
        assert_eq!(p.objective, 0.0);
        params.output_switch_cost = 0.3;
        let p = place(&items, &params).unwrap();
        assert_eq!(p.on_gpu, vec![true]);
        assert!((p.objective - 0.1).abs() < 1e-12);
        assert_eq!(p.switches, 2);

        // A negative-benefit item between two good ones is kept on the GPU
        // when leaving and re-entering costs more than it loses.
        let items = [item(1, 2.0, 0.5), item(1, -0.2, 1.0), item(1, 2.0, 1.0)];
        let p = place(&items, &PlacementParams::new(3 * MIB)).unwrap();
        assert_eq!(p.on_gpu, vec![true, true, true]);
        assert!((p.objective - (3.8 - 0.5)).abs() < 1e-12);
        // Without room for all three, skipping the middle item pays two more
        // switches (4 - 2.5 = 1.5), which beats a contiguous pair (0.3 or 0.8).
        let p = place(&items, &PlacementParams::new(2 * MIB)).unwrap();
        assert_eq!(p.on_gpu, vec![true, false, true]);
        assert!((p.objective - 1.5).abs() < 1e-12, "{p:?}");
        assert_eq!(p.switches, 4);

        // An item bigger than the budget never goes.
        let items = [item(5, 10.0, 0.0), item(1, 1.0, 0.0)];
        let p = place(&items, &PlacementParams::new(4 * MIB)).unwrap();
        assert_eq!(p.on_gpu, vec![false, true]);

        // Zero budget and no items.
        let p = place(&items, &PlacementParams::new(0)).unwrap();
        assert_eq!(p.on_gpu, vec![false, false]);
        let p = place(&[], &PlacementParams::new(MIB)).unwrap();
        assert!(p.on_gpu.is_empty());
        assert_eq!(p.objective, 0.0);
    }

    #[test]
    fn zero_size_items_are_free() {
        let items = [item(0, 0.5, 0.0), item(0, 0.5, 0.0)];
        let p = place(&items, &PlacementParams::new(0)).unwrap();
        assert_eq!(p.on_gpu, vec![true, true]);
        assert_eq!(p.objective, 1.0);
    }

    #[test]
    fn moe_rule_branches() {
        let mut items = vec![
            item(2, 1.0, 0.1),
            item(4, 3.0, 0.1),
            item(2, 1.0, 0.1),
            item(4, 3.0, 0.1),
        ];
        items[1].group = ItemGroup::Expert;
        items[3].group = ItemGroup::Expert;
        // Dense (4 MiB) fits in 8: both dense resident, one expert fits with the rest.
        let p = place(&items, &PlacementParams::new(8 * MIB)).unwrap();
        assert_eq!(p.moe_rule, MoeRule::DenseResident);
        assert!(p.on_gpu[0] && p.on_gpu[2]);
        assert_eq!(p.on_gpu.iter().filter(|g| **g).count(), 3);
        // Dense does not fit in 3: experts stay on the CPU although they would pay more.
        let p = place(&items, &PlacementParams::new(3 * MIB)).unwrap();
        assert_eq!(p.moe_rule, MoeRule::ExpertsOnCpu);
        assert!(!p.on_gpu[1] && !p.on_gpu[3]);
        assert_eq!(p.on_gpu.iter().filter(|g| **g).count(), 1);
    }

    #[test]
    fn matches_brute_force_on_random_instances() {
        let mut rng = StdRng::seed_from_u64(0x5eed_0001);
        for case in 0..600 {
            let n = rng.random_range(0..=14);
            let experts = case % 3 == 0;
            let items = random_items(&mut rng, n, experts, MIB, true);
            let params = random_params(&mut rng, MIB);
            let dp = place(&items, &params).unwrap();
            let bf = brute::static_placement(&items, &params).unwrap();
            assert!(
                (dp.objective - bf.objective).abs() < 1e-9,
                "case {case}: dp {} brute {}\n{items:?}\n{params:?}",
                dp.objective,
                bf.objective
            );
            assert!(dp.gpu_bytes <= params.budget_bytes, "case {case}");
            assert_eq!(dp.moe_rule, bf.moe_rule, "case {case}");
            let eval = objective(&items, &dp.on_gpu, params.output_switch_cost).unwrap();
            assert_eq!(eval, dp.objective);
        }
    }

    #[test]
    fn rounding_up_never_exceeds_the_budget() {
        let mut rng = StdRng::seed_from_u64(0x5eed_0002);
        for case in 0..400 {
            let n = rng.random_range(1..=40);
            // Sizes of up to 12 x `scale` bytes; the DP unit is one byte, finer or coarser.
            let (scale, unit) = [
                (1024, 1),
                (1024, 7),
                (1024, 4096),
                (MIB, 4096),
                (MIB, MIB / 3),
                (MIB, MIB),
            ][case % 6];
            let items = random_items(&mut rng, n, case % 4 == 0, scale, false);
            let mut params = random_params(&mut rng, scale);
            params.budget_bytes += rng.random_range(0..scale);
            params.unit_bytes = unit;
            let p = place(&items, &params).unwrap();
            assert!(
                p.gpu_bytes <= params.budget_bytes,
                "case {case}: {} > {}",
                p.gpu_bytes,
                params.budget_bytes
            );
            if n <= 12 {
                let bf = brute::static_placement(&items, &params).unwrap();
                if params.unit_bytes == 1 {
                    // Rounding to bytes is exact: the DP meets the brute force.
                    assert!((p.objective - bf.objective).abs() < 1e-9, "case {case}");
                } else if p.moe_rule == bf.moe_rule {
                    // Rounding only shrinks the feasible set.
                    assert!(p.objective <= bf.objective + 1e-9, "case {case}");
                }
            }
        }
    }

    #[test]
    fn rejects_bad_input() {
        let mut params = PlacementParams::new(MIB);
        let items = [item(1, f64::NAN, 0.0)];
        assert!(matches!(
            place(&items, &params),
            Err(PlacementError::InvalidBenefit { index: 0, .. })
        ));
        let items = [item(1, 1.0, -1.0)];
        assert!(matches!(
            place(&items, &params),
            Err(PlacementError::InvalidSwitchCost { index: 0, .. })
        ));
        params.unit_bytes = 0;
        assert_eq!(place(&[], &params), Err(PlacementError::ZeroUnit));
        params.unit_bytes = 1;
        params.budget_bytes = u64::MAX;
        let items = vec![item(1 << 20, 1.0, 0.0); 64];
        assert!(matches!(
            place(&items, &params),
            Err(PlacementError::TableTooLarge { .. })
        ));
        params.output_switch_cost = f64::INFINITY;
        assert!(matches!(
            place(&items, &params),
            Err(PlacementError::InvalidOutputSwitchCost(_))
        ));
        assert_eq!(
            objective(&items, &[true], 0.0),
            Err(PlacementError::LengthMismatch { items: 64, got: 1 })
        );
    }

    #[test]
    fn switch_count_includes_return_to_host() {
        assert_eq!(switch_count(&[]), 0);
        assert_eq!(switch_count(&[false, false]), 0);
        assert_eq!(switch_count(&[true]), 2);
        assert_eq!(switch_count(&[false, true, true, false, true]), 4);
    }
}
