//! Which placement items stay resident on the GPU: the static placement DP
//! over each item's weighted decode and prompt benefit, or the policy's own
//! rule (llama.cpp's layer fill for the baselines).

use super::baseline;
use super::context::Ctx;
use super::policy::Residency;
use super::spread::spread;
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

/// What the static DP takes a non-resident item to cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Away {
    /// Its time on the CPU.
    OnCpu,
    /// Where it can stream, the CPU and the link sharing it: `c*l/(c+l)`
    /// for CPU time `c` and copy (or GPU) time `l`, as two resources
    /// working in parallel on the non-resident items between them; else
    /// its CPU time. Priced on the CPU alone, a product the link streams
    /// cheaply stayed resident and the output head, which no copy pays
    /// for, went to the CPU.
    Shared,
}

impl Away {
    /// Seconds of item cost `c` when not resident (`streamable`: it has slots).
    fn secs(self, c: &ItemCost, streamable: bool) -> f64 {
        match self {
            Away::Shared if streamable => {
                // routed experts as the GPU's router would copy them
                let link = c.gpu.max(c.gpu_routed_copy);
                c.cpu * link / (c.cpu + link)
            }
            _ => c.cpu,
        }
    }
}

/// What the static DP weighs an item's benefit over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Weigh {
    /// The reference workload: its decode rounds and its prompt.
    Workload,
    /// Its prompt alone. The DP adds up each item's benefit alone, but
    /// where items run (and so the switches between devices, and what the
    /// copies hide under) depends on them together: on the laptop model at
    /// 4 GB the prompt-first residency was estimated faster at decode too
    /// (44.66 against 44.79 ms) and ran the 512-token prompt 1.94x faster.
    /// The layout's whole workload estimate judges both.
    Prompt,
}

/// How a residency is made: the DP's pricing of non-resident items, what it
/// weighs, and whether alike items are then spread over the layers
/// ([`spread`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Rule {
    /// What a non-resident item costs the DP.
    pub away: Away,
    /// Spread alike items' residency evenly over the layers.
    pub spread: bool,
    /// The benefit's parts the DP weighs.
    pub weigh: Weigh,
}

impl Rule {
    /// The DP as ATSInfer states it.
    pub const PLAIN: Rule = Rule {
        away: Away::OnCpu,
        spread: false,
        weigh: Weigh::Workload,
    };

    /// The rules a layout tries under the static DP: the plain DP, weighing
    /// the workload and (if `prompt_first`) the prompt alone, and where the
    /// layout streams also the shared pricing and spread residencies (which
    /// is fastest depends on the machine; the workload estimate of each
    /// layout decides).
    pub fn for_layout(ctx: &Ctx<'_>, streaming: bool, prompt_first: bool) -> Vec<Rule> {
        if ctx.rules.residency != Residency::StaticDp {
            return vec![Rule::PLAIN];
        }
        let aways: &[Away] = if streaming {
            &[Away::OnCpu, Away::Shared]
        } else {
            &[Away::OnCpu]
        };
        let spreads: &[bool] = if streaming { &[false, true] } else { &[false] };
        let mut rules = Vec::new();
        let weighs: &[Weigh] = if prompt_first {
            &[Weigh::Workload, Weigh::Prompt]
        } else {
            &[Weigh::Workload]
        };
        for &weigh in weighs {
            for &away in aways {
                for &spread in spreads {
                    rules.push(Rule {
                        away,
                        spread,
                        weigh,
                    });
                }
            }
        }
        rules
    }
}

/// Each item's benefit and switch cost for the static DP, over `decode`
/// decode rounds and `prompt_rounds` of the reference prompt.
fn dp_items(
    ctx: &Ctx<'_>,
    dec: &[ItemCost],
    pre: &[ItemCost],
    prompt_rounds: f64,
    away: Away,
    decode: f64,
) -> Vec<PlacementItem> {
    ctx.items
        .iter()
        .zip(dec.iter().zip(pre))
        .zip(&ctx.streamable)
        .map(|((it, (d, p)), &s)| PlacementItem {
            size_bytes: it.bytes(),
            benefit: decode * (away.secs(d, s) - d.gpu) + prompt_rounds * (away.secs(p, s) - p.gpu),
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
    rule: Rule,
) -> Result<(Vec<bool>, Vec<String>), PlanError> {
    let decode = match rule.weigh {
        Weigh::Workload => ctx.reference_decode(),
        Weigh::Prompt => 0.0,
    };
    let items = dp_items(ctx, dec, pre, prompt_rounds, rule.away, decode);
    let out_bytes = ctx.g.value_bytes(ctx.g.output, 1, 1) as f64;
    let mut params = PlacementParams::new(avail);
    params.output_switch_cost = decode
        * (ctx.cost.d2h_secs(DeviceId::Gpu, out_bytes) + ctx.cost.switch_secs(DeviceId::Gpu));
    params.unit_bytes = dp_unit(avail, ctx.items.len());
    let p = place(&items, &params).map_err(|e| PlanError::Algorithm(e.to_string()))?;
    let name = match (rule.away, rule.weigh) {
        (Away::OnCpu, Weigh::Workload) => "static DP",
        (Away::Shared, Weigh::Workload) => "static DP, the rest streamed",
        (Away::OnCpu, Weigh::Prompt) => "static DP for the prompt",
        (Away::Shared, Weigh::Prompt) => "static DP for the prompt, the rest streamed",
    };
    let why: Vec<String> = items
        .iter()
        .zip(&p.on_gpu)
        .map(|(it, &g)| {
            let ms = it.benefit * 1e3;
            if g {
                format!(
                    "{name}: saves {ms:.2} ms per workload for {}",
                    fmt_bytes(it.size_bytes)
                )
            } else if it.benefit <= 0.0 {
                format!("{name}: no gain on the GPU ({ms:.2} ms)")
            } else {
                format!(
                    "{name}: {ms:.2} ms for {} did not make the cut",
                    fmt_bytes(it.size_bytes)
                )
            }
        })
        .collect();
    Ok(if rule.spread {
        spread(ctx, &p.on_gpu, why)
    } else {
        (p.on_gpu, why)
    })
}

/// Residency under the configured policy, with a reason per item.
pub(super) fn resident_for(
    ctx: &Ctx<'_>,
    avail: u64,
    dec: &[ItemCost],
    pre: &[ItemCost],
    prompt_rounds: f64,
    rule: Rule,
) -> Result<(Vec<bool>, Vec<String>), PlanError> {
    match ctx.rules.residency {
        Residency::LayerFill { experts_on_cpu } => {
            Ok(baseline::resident_layers(ctx, avail, experts_on_cpu))
        }
        Residency::StaticDp => resident_dp(ctx, avail, dec, pre, prompt_rounds, rule),
    }
}
