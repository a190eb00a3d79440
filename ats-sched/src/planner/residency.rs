//! Which placement items stay resident on the GPU: the static placement DP
//! over each item's weighted decode and prompt benefit, or the policy's own
//! rule (llama.cpp's layer fill for the baselines).

use super::baseline;
use super::context::Ctx;
use super::policy::Residency;
use super::{PlanError, items::ItemCost};
use crate::placement::{ItemGroup, PlacementItem, PlacementParams, place};
use crate::size::fmt_bytes;
use ats_core::machine::DeviceId;

/// The DP's budget unit: the budget in about [`TARGET_UNITS`] units, at
/// most a MB (the design's granularity) and at least [`MIN_UNIT`], coarser
/// where the table (units x items) would pass [`MAX_DP_CELLS`].
fn dp_unit(avail: u64, n_items: usize) -> u64 {
    let mut unit = (avail / TARGET_UNITS)
        .clamp(MIN_UNIT, 1 << 20)
        .next_power_of_two();
    while (avail / unit) * n_items as u64 > MAX_DP_CELLS {
        unit *= 2;
    }
    unit
}

/// Units a budget is cut into for the DP: fine enough that rounding each
/// item up to a unit wastes little of a small budget.
const TARGET_UNITS: u64 = 8192;

/// The finest budget unit of the DP: 4 KiB, a page.
const MIN_UNIT: u64 = 4096;

/// The most cells (budget units x items) the DP's table may have: it keeps
/// two decision bits per cell (100 MB at this bound) and its time grows
/// with it.
const MAX_DP_CELLS: u64 = 400_000_000;

/// Weighted (decode, prompt) benefit and switch cost of each item for the static DP.
fn dp_items(
    ctx: &Ctx<'_>,
    dec: &[ItemCost],
    pre: &[ItemCost],
    prompt_rounds: f64,
) -> Vec<PlacementItem> {
    let decode = ctx.reference_decode();
    ctx.items
        .iter()
        .zip(dec.iter().zip(pre))
        .map(|(it, (d, p))| PlacementItem {
            size_bytes: it.bytes(),
            benefit: decode * (d.cpu - d.gpu) + prompt_rounds * (p.cpu - p.gpu),
            switch_cost: decode * d.switch + prompt_rounds * p.switch,
            group: if it.experts.is_some() {
                ItemGroup::Expert
            } else {
                ItemGroup::Dense
            },
        })
        .collect()
}

/// Residency by the static DP.
fn resident_dp(
    ctx: &Ctx<'_>,
    avail: u64,
    dec: &[ItemCost],
    pre: &[ItemCost],
    prompt_rounds: f64,
) -> Result<(Vec<bool>, Vec<String>), PlanError> {
    let items = dp_items(ctx, dec, pre, prompt_rounds);
    let out_bytes = ctx.g.value_bytes(ctx.g.output, 1, 1) as f64;
    let mut params = PlacementParams::new(avail);
    params.output_switch_cost = ctx.reference_decode()
        * (ctx.cost.d2h_secs(DeviceId::Gpu, out_bytes) + ctx.cost.switch_secs(DeviceId::Gpu));
    params.unit_bytes = dp_unit(avail, ctx.items.len());
    let p = place(&items, &params).map_err(|e| PlanError::Algorithm(e.to_string()))?;
    let why = items
        .iter()
        .zip(&p.on_gpu)
        .map(|(it, &g)| {
            let ms = it.benefit * 1e3;
            if g {
                format!(
                    "static DP: saves {ms:.2} ms per workload for {}",
                    fmt_bytes(it.size_bytes)
                )
            } else if it.benefit <= 0.0 {
                format!("static DP: no gain on the GPU ({ms:.2} ms)")
            } else {
                format!(
                    "static DP: {ms:.2} ms for {} did not make the cut",
                    fmt_bytes(it.size_bytes)
                )
            }
        })
        .collect();
    Ok((p.on_gpu, why))
}

/// Residency under the configured policy, with a reason per item.
pub(super) fn resident_for(
    ctx: &Ctx<'_>,
    avail: u64,
    dec: &[ItemCost],
    pre: &[ItemCost],
    prompt_rounds: f64,
) -> Result<(Vec<bool>, Vec<String>), PlanError> {
    match ctx.rules.residency {
        Residency::LayerFill { experts_on_cpu } => {
            Ok(baseline::resident_layers(ctx, avail, experts_on_cpu))
        }
        Residency::StaticDp => resident_dp(ctx, avail, dec, pre, prompt_rounds),
    }
}
