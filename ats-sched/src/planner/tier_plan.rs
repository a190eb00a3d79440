//! One tier's plan in a layout: the three shapes estimated (static,
//! GPU-only, dynamic promotion by the transfer search), the best the policy
//! allows kept.

use ats_core::graph::cost::RoundShape;
use ats_core::machine::DeviceId;

use super::context::Ctx;
use super::items::{Item, ItemCost};
use super::{PlanError, PlanKind};
use crate::dynamic::{TransferItem, TransferParams, item_secs, plan_transfers, round_time};

/// Every plan shape's estimate for a tier (`None`: not allowed or not possible).
pub type Estimates = Vec<(PlanKind, Option<f64>)>;

/// A tier's chosen plan.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct TierPlan {
    /// Its shape.
    pub kind: PlanKind,
    /// Estimated seconds of one round.
    pub secs: f64,
    /// Per item: runs on the GPU.
    pub on_gpu: Vec<bool>,
    /// Every shape's estimate.
    pub estimates: Estimates,
}

fn transfer_items(
    costs: &[ItemCost],
    items: &[Item],
    streamable: &[bool],
    resident: &[bool],
    streaming: bool,
) -> Vec<TransferItem> {
    // a router the GPU may run is taken to route there, so its experts are
    // priced at the GPU's routed-copy kernel (a plan that keeps the router
    // on the CPU copies them one by one at the link's rate instead)
    let gpu_routes = |i: usize| {
        super::items::router_of(items, i)
            .is_some_and(|j| resident[j] || (streaming && streamable[j]))
    };
    costs
        .iter()
        .zip(items)
        .zip(resident)
        .zip(streamable)
        .enumerate()
        .map(|(i, (((c, it), &r), &can))| {
            // routed experts are copied once their router has run, so the
            // copy cannot hide under earlier work: it adds to their GPU time
            let routed_copy = it.experts.is_some() && !r;
            let routed_secs = if routed_copy && gpu_routes(i) {
                c.gpu_routed_copy
            } else {
                c.copy
            };
            TransferItem {
                on_gpu: r,
                promotable: streaming && !r && can,
                cpu_time: c.cpu,
                cpu_time_beside: c.cpu_streaming,
                gpu_time: if routed_copy {
                    c.gpu + routed_secs
                } else {
                    c.gpu
                },
                copy_time: if routed_copy { 0.0 } else { c.copy },
                switch_cost: c.switch,
                // items of one sub-layer stream weights of the same roles
                slot_group: it.sublayer as usize,
            }
        })
        .collect()
}

/// The transfer DP's settings for a round of `shape`.
fn transfer_params(ctx: &Ctx<'_>, shape: RoundShape) -> TransferParams {
    let out_bytes = ctx
        .g
        .value_bytes(ctx.g.output, shape.n_tokens, shape.n_outputs) as f64;
    TransferParams {
        slots: ctx.run.slots_per_role.max(1),
        output_switch_cost: ctx.cost.d2h_secs(DeviceId::Gpu, out_bytes)
            + ctx.cost.switch_secs(DeviceId::Gpu),
    }
}

/// Estimated seconds of a round of `shape` with items `on_gpu` there (the
/// items it streams stay streamed): a tier's plan priced at another round
/// than the one it was chosen at.
pub(super) fn secs_at(
    ctx: &Ctx<'_>,
    on_gpu: &[bool],
    resident: &[bool],
    streaming: bool,
    shape: RoundShape,
) -> Result<f64, PlanError> {
    let (items, promote, params) = round_at(ctx, on_gpu, resident, streaming, shape);
    round_time(&items, &promote, &params)
        .map(|t| t.total)
        .map_err(|e| PlanError::Algorithm(e.to_string()))
}

/// Seconds each item computes in a round of `shape` with items `on_gpu`
/// there: a CPU item slowed by the copies that overlap it.
pub(super) fn item_secs_at(
    ctx: &Ctx<'_>,
    on_gpu: &[bool],
    resident: &[bool],
    streaming: bool,
    shape: RoundShape,
) -> Result<Vec<f64>, PlanError> {
    let (items, promote, params) = round_at(ctx, on_gpu, resident, streaming, shape);
    item_secs(&items, &promote, &params).map_err(|e| PlanError::Algorithm(e.to_string()))
}

/// The transfer items, promotion set and settings of a round of `shape`
/// with items `on_gpu` there.
fn round_at(
    ctx: &Ctx<'_>,
    on_gpu: &[bool],
    resident: &[bool],
    streaming: bool,
    shape: RoundShape,
) -> (Vec<TransferItem>, Vec<bool>, TransferParams) {
    let costs = ctx.costs(shape);
    let items = transfer_items(&costs, &ctx.items, &ctx.streamable, resident, streaming);
    let promote: Vec<bool> = on_gpu
        .iter()
        .zip(resident)
        .map(|(&g, &r)| g && !r)
        .collect();
    (items, promote, transfer_params(ctx, shape))
}

/// Estimates the three shapes for one tier and returns the best allowed:
/// (kind, seconds, per-item "on the GPU", every estimate). Decode estimates
/// carry the measured correction of their shape; `prefer` (the shape the
/// tier runs now) is kept unless another is faster by more than the
/// hysteresis.
pub(super) fn tier_plan(
    ctx: &Ctx<'_>,
    tier: usize,
    resident: &[bool],
    streaming: bool,
    prefer: Option<PlanKind>,
) -> Result<TierPlan, PlanError> {
    let shape = ctx.shape(tier);
    let costs = ctx.costs(shape);
    let params = transfer_params(ctx, shape);
    let alg = |e: crate::dynamic::TransferError| PlanError::Algorithm(e.to_string());
    let items = transfer_items(&costs, &ctx.items, &ctx.streamable, resident, streaming);
    let none = vec![false; items.len()];
    let static_t = round_time(&items, &none, &params).map_err(alg)?.total;
    let policy = ctx.rules.kinds(tier, streaming);
    let mut allowed = policy.clone();
    if let Some(k) = ctx.force_kind
        && (streaming || k == PlanKind::Static)
    {
        allowed = vec![k];
    }
    let mut est: Vec<(PlanKind, Option<f64>, Vec<bool>)> =
        vec![(PlanKind::Static, Some(static_t), none.clone())];
    if streaming {
        let all: Vec<bool> = items.iter().map(|t| t.promotable).collect();
        let g = round_time(&items, &all, &params).map_err(alg)?.total;
        est.push((PlanKind::GpuOnly, Some(g), all));
        let d = plan_transfers(&items, &params).map_err(alg)?;
        est.push((PlanKind::Dynamic, Some(d.timing.total), d.promote));
    } else {
        est.push((PlanKind::GpuOnly, None, none.clone()));
        est.push((PlanKind::Dynamic, None, none));
    }
    if tier == 1 {
        for e in &mut est {
            if let (Some(t), Some(&(_, b))) = (&mut e.1, ctx.bias.iter().find(|b| b.0 == e.0)) {
                *t *= b;
            }
        }
    }
    let mut best = est
        .iter()
        .filter(|e| allowed.contains(&e.0) && e.1.is_some())
        .min_by(|a, b| {
            a.1.unwrap_or(f64::INFINITY)
                .total_cmp(&b.1.unwrap_or(f64::INFINITY))
        })
        .expect("the static plan is always allowed");
    if let Some(kept) = prefer
        .and_then(|k| est.iter().find(|e| e.0 == k))
        .filter(|e| allowed.contains(&e.0))
        && let (Some(t_kept), Some(t_best)) = (kept.1, best.1)
        && t_best >= t_kept * (1.0 - ctx.run.resched.hysteresis)
    {
        best = kept;
    }
    let on_gpu: Vec<bool> = resident
        .iter()
        .zip(&best.2)
        .map(|(&r, &p)| r || p)
        .collect();
    // a forced plan still reports every shape the policy allows, so that
    // an audition it wins can measure the others again later
    let estimates = est
        .iter()
        .map(|e| (e.0, if policy.contains(&e.0) { e.1 } else { None }))
        .collect();
    Ok(TierPlan {
        kind: best.0,
        secs: best.1.unwrap_or(f64::INFINITY),
        on_gpu,
        estimates,
    })
}
