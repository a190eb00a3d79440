//! Which placement items stay resident on the GPU: the static placement DP
//! over each item's weighted decode and prompt benefit, or llama.cpp's fill
//! of whole layers from the last one (the `layers` and `cpu-moe` baselines).

use ats_core::graph::SubLayer;

use super::{Ctx, PlanError, WORKLOAD_DECODE};
use crate::engine::Policy;
use crate::placement::{ItemGroup, PlacementItem, PlacementParams, place};
use crate::planner::items::ItemCost;
use crate::size::fmt_bytes;

/// Weighted (decode, prompt) benefit and switch cost of each item for the static DP.
fn dp_items(
    ctx: &Ctx<'_>,
    dec: &[ItemCost],
    pre: &[ItemCost],
    prompt_rounds: f64,
) -> Vec<PlacementItem> {
    ctx.items
        .iter()
        .zip(dec.iter().zip(pre))
        .map(|(it, (d, p))| PlacementItem {
            size_bytes: it.bytes(),
            benefit: WORKLOAD_DECODE * (d.cpu - d.gpu) + prompt_rounds * (p.cpu - p.gpu),
            switch_cost: WORKLOAD_DECODE * d.switch + prompt_rounds * p.switch,
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
    params.output_switch_cost =
        WORKLOAD_DECODE * (ctx.cost.d2h_secs(ctx.gpu, out_bytes) + ctx.cost.switch_secs(ctx.gpu));
    // MB granularity, finer for budgets small enough that rounding every item
    // up to a MB would waste much of them, coarser for huge ones
    params.unit_bytes = (avail / 8192).clamp(4096, 1 << 20).next_power_of_two();
    while (avail / params.unit_bytes) * ctx.items.len() as u64 > 400_000_000 {
        params.unit_bytes *= 2;
    }
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

/// Residency as llama.cpp fills layers: from the last layer backwards, whole
/// layers while they fit, then the boundary layer's FFN half; the output
/// projection only once every layer is on the GPU. `skip_experts` keeps
/// routed experts on the CPU (`--cpu-moe`).
fn resident_layers(ctx: &Ctx<'_>, avail: u64, skip_experts: bool) -> (Vec<bool>, Vec<String>) {
    let n = ctx.items.len();
    let mut on = vec![false; n];
    let mut why = vec![String::from("layers: did not fit"); n];
    let mut used = 0u64;
    let n_layer = ctx
        .items
        .iter()
        .filter_map(|i| i.layer)
        .max()
        .map_or(0, |l| l + 1);
    let eligible = |i: usize| !(skip_experts && ctx.items[i].experts.is_some());
    // puts `set` on the GPU with `reason` if it fits in what is left
    let mut take = |set: &[usize], reason: String| {
        let bytes: u64 = set.iter().map(|&i| ctx.items[i].bytes()).sum();
        if used + bytes > avail {
            return false;
        }
        used += bytes;
        for &i in set {
            on[i] = true;
            why[i] = reason.clone();
        }
        true
    };
    let mut all_fit = true;
    for l in (0..n_layer).rev() {
        let idx: Vec<usize> = (0..n)
            .filter(|&i| ctx.items[i].layer == Some(l) && eligible(i))
            .collect();
        if take(&idx, format!("layers: layer {l} fits on the GPU")) {
            continue;
        }
        all_fit = false;
        let ffn: Vec<usize> = idx
            .iter()
            .copied()
            .filter(|&i| {
                matches!(
                    ctx.items[i].sublayer,
                    SubLayer::FfnUp
                        | SubLayer::FfnDown
                        | SubLayer::MoeRouter
                        | SubLayer::MoeExperts
                )
            })
            .collect();
        take(
            &ffn,
            format!("layers: boundary layer {l}, FFN half on the GPU"),
        );
        break;
    }
    for i in 0..n {
        if skip_experts && ctx.items[i].experts.is_some() {
            why[i] = "cpu-moe: routed experts stay on the CPU".into();
        }
        if ctx.items[i].layer.is_none() {
            if all_fit && used + ctx.items[i].bytes() <= avail {
                used += ctx.items[i].bytes();
                on[i] = true;
                why[i] = "layers: every layer fits, the output too".into();
            } else {
                why[i] = "layers: the output goes to the GPU only with every layer".into();
            }
        }
    }
    (on, why)
}

/// Residency under the configured policy, with a reason per item.
pub(super) fn resident_for(
    ctx: &Ctx<'_>,
    avail: u64,
    dec: &[ItemCost],
    pre: &[ItemCost],
    prompt_rounds: f64,
) -> Result<(Vec<bool>, Vec<String>), PlanError> {
    match ctx.cfg.policy {
        Policy::Layers => Ok(resident_layers(ctx, avail, false)),
        Policy::CpuMoe => Ok(resident_layers(ctx, avail, true)),
        _ => resident_dp(ctx, avail, dec, pre, prompt_rounds),
    }
}
