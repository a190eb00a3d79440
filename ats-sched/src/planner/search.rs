//! Choosing a layout and its per-tier plans: each candidate layout (the
//! largest tier its compute buffers hold, with or without temp slots) gets
//! its residency from the policy's rule and a plan per tier; the policy
//! picks among those that fit the budget. A re-plan keeps the layout and
//! re-plans the tiers only.

use std::sync::Arc;

use ats_core::ledger::{Region, RegionBytes};
use ats_core::machine::DeviceId;

use super::context::Ctx;
use super::items::{ItemCost, build_items};
use super::layout::Layout;
use super::policy::LayoutChoice;
use super::residency::{Rule, resident_for};
use super::tier_plan::{TierPlan, item_secs_at, secs_at, tier_plan};
use super::{ItemEstimate, PlanError, PlanKind, PlanSet, TierEntry};
use crate::exec::{ExecPlan, SlotPlan};
use crate::size::fmt_bytes;

/// Prompt chunks of a CPU-only run when the run sets no limit.
const HOST_CHUNK: usize = 512;

/// The largest tiers a layout's compute buffers may be sized for: decode
/// only, short prompt chunks, llama.cpp's micro-batch, long chunks. Each
/// bigger buffer takes budget from residency, so the search weighs them.
const LAYOUT_MAX_TIERS: [usize; 4] = [1, 64, 512, 2048];

/// The all-GPU schedule's compute buffers, scaled by this, start the layout
/// search: plans that split the graph hold a few more activation copies on
/// the GPU (each layout is then checked with its exact schedules).
const SPLIT_PADDING: (u64, u64) = (9, 8);
/// ... plus this much for small activations a split adds.
const SPLIT_PADDING_BYTES: u64 = 64 * 1024;

/// A layout being evaluated, with its tier plans.
struct Candidate {
    layout: Layout,
    tiers: Vec<(usize, TierPlan)>,
    /// The reference prompt's share of the layout's workload estimate.
    prompt_secs: f64,
}

/// Layouts whose reference workloads are estimated within this fraction of
/// the fastest tie: the estimates err by more (decode by about 20% before
/// the audition corrects it). Of them the one with the fastest prompt is
/// kept, since decode plans are auditioned and re-planned within a layout
/// later but its tiers and compute buffers are not.
const LAYOUT_TIE: f64 = 0.02;

/// What a layout search is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Search {
    /// A run's first layout: residencies weighed for the reference workload
    /// and for its prompt alone ([`Weigh`](super::residency::Weigh)).
    First,
    /// A move while decoding, made for decode and judged by it: residencies
    /// weighed for the workload only. With the prompt-first ones too, the
    /// load experiment's move after the load (laptop model, 2 GB) took one
    /// estimated 0.2% faster over the workload and decoding 1.5% slower,
    /// and ran 3% slower than the static policy from then on.
    Move,
}

/// The compute reserve a layout search starts from (see [`SPLIT_PADDING`]).
fn padded_reserve(ctx: &Ctx<'_>, tier: usize) -> u64 {
    ctx.compute_reserve(tier) * SPLIT_PADDING.0 / SPLIT_PADDING.1 + SPLIT_PADDING_BYTES
}

/// The layout with compute buffers for `max_tier` (temp slots if
/// `streaming`), if it fits `budget`: of the residencies its rules make
/// for `search` ([`Rule::for_layout`]), the one with the fastest reference
/// workload.
fn evaluate(
    ctx: &Ctx<'_>,
    budget: u64,
    max_tier: usize,
    streaming: bool,
    search: Search,
) -> Result<Option<Candidate>, PlanError> {
    let costs = DpCosts::new(ctx, max_tier);
    let mut best: Option<Candidate> = None;
    for rule in Rule::for_layout(ctx, streaming, search == Search::First) {
        let Some(c) = evaluate_with(ctx, budget, max_tier, streaming, (&costs, rule))? else {
            continue;
        };
        if best
            .as_ref()
            .is_none_or(|b| c.layout.workload_secs < b.layout.workload_secs)
        {
            best = Some(c);
        }
    }
    Ok(best)
}

/// The item costs a layout's residency is priced with (the same for every
/// [`Rule`]): decode, the reference prompt's chunk, and its rounds.
struct DpCosts {
    dec: Vec<ItemCost>,
    pre: Vec<ItemCost>,
    prompt_rounds: f64,
}

impl DpCosts {
    fn new(ctx: &Ctx<'_>, max_tier: usize) -> DpCosts {
        let (pre_shape, prompt_rounds) = ctx.reference_chunk(max_tier);
        DpCosts {
            dec: ctx.costs(ctx.decode_shape()),
            pre: ctx.costs(pre_shape),
            prompt_rounds: prompt_rounds as f64,
        }
    }
}

/// [`evaluate`] with residency made by `how`'s rule from its costs.
fn evaluate_with(
    ctx: &Ctx<'_>,
    budget: u64,
    max_tier: usize,
    streaming: bool,
    how: (&DpCosts, Rule),
) -> Result<Option<Candidate>, PlanError> {
    let compute = padded_reserve(ctx, max_tier);
    let none = vec![false; ctx.items.len()];
    let temp_all = if streaming {
        ctx.slots(&none).total_bytes()
    } else {
        0
    };
    if compute + temp_all > budget {
        return Ok(None);
    }
    let (resident, why) = residency(ctx, budget - compute, temp_all, streaming, how)?;
    let slots = if streaming {
        ctx.slots(&resident)
    } else {
        Default::default()
    };
    let mut tiers = Vec::new();
    for t in crate::tiers::planned(max_tier.min(ctx.run.n_ctx), ctx.run.parallel) {
        tiers.push((t, tier_plan(ctx, t, &resident, streaming, None)?));
    }
    let exact = exact_compute(ctx, &resident, streaming, &tiers);
    let held = ctx.held_bytes(&resident);
    if held + slots.total_bytes() + exact > budget {
        return Ok(None);
    }
    let (workload_secs, prompt_secs) = workload_secs(ctx, &resident, streaming, &tiers)?;
    let layout = Layout {
        items: ctx.items.clone(),
        regions: regions(ctx, &resident, &slots, exact),
        resident,
        why,
        max_tier,
        streaming,
        slots,
        budget: Some(budget),
        workload_secs,
    };
    Ok(Some(Candidate {
        layout,
        tiers,
        prompt_secs,
    }))
}

/// Residency under the policy for what the compute buffers leave, then
/// again with the temp slots the first residency actually streams (fewer
/// roles than assumed leave more to residency).
fn residency(
    ctx: &Ctx<'_>,
    avail: u64,
    temp_all: u64,
    streaming: bool,
    (c, rule): (&DpCosts, Rule),
) -> Result<(Vec<bool>, Vec<String>), PlanError> {
    let (dec, pre, prompt_rounds) = (&c.dec, &c.pre, c.prompt_rounds);
    let first = resident_for(ctx, avail - temp_all, dec, pre, prompt_rounds, rule)?;
    if !streaming {
        return Ok(first);
    }
    let temp = ctx.slots(&first.0).total_bytes();
    if temp >= temp_all {
        return Ok(first);
    }
    let second = resident_for(ctx, avail - temp, dec, pre, prompt_rounds, rule)?;
    let fits = ctx.held_bytes(&second.0) + ctx.slots(&second.0).total_bytes() <= avail;
    Ok(if fits { second } else { first })
}

/// The exact compute buffers: the largest schedule of the tier plans and of
/// the static and GPU-only shapes, which re-plans and the decode audition
/// may switch to within this layout.
fn exact_compute(
    ctx: &Ctx<'_>,
    resident: &[bool],
    streaming: bool,
    tiers: &[(usize, TierPlan)],
) -> u64 {
    let gpu_only: Vec<bool> = resident
        .iter()
        .zip(&ctx.streamable)
        .map(|(&r, &s)| r || (streaming && s))
        .collect();
    let mut most = 0u64;
    for (t, tp) in tiers {
        for shape in [&tp.on_gpu, resident, &gpu_only] {
            most = most.max(ctx.compute_bytes(&ctx.exec_plan(resident, shape), *t));
        }
    }
    most
}

/// The reference workload's estimate: its decode rounds, plus the
/// reference prompt in chunks of its best tier, each tier's plan priced at
/// the chunks' size and mean depth; `(workload, prompt)` seconds.
fn workload_secs(
    ctx: &Ctx<'_>,
    resident: &[bool],
    streaming: bool,
    tiers: &[(usize, TierPlan)],
) -> Result<(f64, f64), PlanError> {
    let decode = tiers.first().map_or(f64::INFINITY, |t| t.1.secs);
    let mut prompt = f64::INFINITY;
    for (t, tp) in tiers {
        let (shape, rounds) = ctx.reference_chunk(*t);
        prompt = prompt.min(rounds as f64 * secs_at(ctx, &tp.on_gpu, resident, streaming, shape)?);
    }
    Ok((ctx.reference_decode() * decode + prompt, prompt))
}

/// The GPU bytes per region of a layout holding `resident`, with `slots`
/// and `compute` bytes of activation buffers.
fn regions(ctx: &Ctx<'_>, resident: &[bool], slots: &SlotPlan, compute: u64) -> RegionBytes {
    let mut regions = RegionBytes::default();
    for (it, _) in ctx.items.iter().zip(resident).filter(|x| *x.1) {
        regions[Region::Resident] += it.weight_bytes;
        regions[Region::Kv] += it.kv_bytes;
    }
    regions[Region::Temp] = slots.total_bytes();
    regions[Region::Compute] = compute;
    regions
}

/// The candidate the policy picks: the fastest reference workload, of a
/// tie ([`LAYOUT_TIE`]) the fastest prompt; or the largest batch, with
/// temp slots if it has them.
fn pick(choice: LayoutChoice, cands: Vec<Candidate>) -> Option<Candidate> {
    match choice {
        LayoutChoice::Fastest => {
            let fastest = cands
                .iter()
                .map(|c| c.layout.workload_secs)
                .fold(f64::INFINITY, f64::min);
            cands
                .into_iter()
                .filter(|c| c.layout.workload_secs <= fastest * (1.0 + LAYOUT_TIE))
                .min_by(|a, b| {
                    a.prompt_secs
                        .total_cmp(&b.prompt_secs)
                        .then(a.layout.workload_secs.total_cmp(&b.layout.workload_secs))
                })
        }
        LayoutChoice::LargestBatch => cands
            .into_iter()
            .max_by_key(|c| (c.layout.max_tier, c.layout.streaming)),
    }
}

/// The layout and plans for a GPU with `budget` bytes, searched for `search`.
pub(super) fn plan_on_gpu(
    ctx: &Ctx<'_>,
    budget: u64,
    search: Search,
) -> Result<PlanSet, PlanError> {
    let cap = ctx
        .run
        .max_chunk
        .unwrap_or(usize::MAX)
        .min(ctx.run.n_ctx)
        .min(ctx.rules.tier_cap.unwrap_or(usize::MAX));
    let mut max_tiers: Vec<usize> = LAYOUT_MAX_TIERS.into_iter().filter(|&t| t <= cap).collect();
    if max_tiers.is_empty() {
        max_tiers.push(1);
    }
    let mut cands = Vec::new();
    for &t in &max_tiers {
        for &s in ctx.rules.streaming {
            cands.extend(evaluate(ctx, budget, t, s, search)?);
        }
    }
    let Some(best) = pick(ctx.rules.choice, cands) else {
        let minimum = padded_reserve(ctx, 1);
        return Err(PlanError::BudgetTooSmall {
            budget,
            minimum,
            detail: format!("compute buffers for one token: {}", fmt_bytes(minimum)),
        });
    };
    let mut notes = Vec::new();
    if !ctx.cost.is_measured(DeviceId::Gpu) || !ctx.cost.is_measured(DeviceId::Host) {
        notes.push(NO_PROFILE.to_string());
    } else if ctx.items.iter().any(|it| it.experts.is_some())
        && !ctx.cost.routed_copy_measured(DeviceId::Gpu)
    {
        notes.push(NO_ROUTED_COPIES.to_string());
    }
    plan_set(ctx, Arc::new(best.layout), &best.tiers, notes)
}

/// The note a plan made without a profile carries.
const NO_PROFILE: &str =
    "no profile of this machine: estimates are a default roofline (run `ats-cli profile`)";

/// The note a MoE plan made with a profile older than its routed-copy
/// samples carries.
const NO_ROUTED_COPIES: &str = "the profile has no routed-copy samples: streamed experts are priced as pinned copies (run `ats-cli profile` again)";

/// The per-tier plans of `layout` as a plan set.
fn plan_set(
    ctx: &Ctx<'_>,
    layout: Arc<Layout>,
    tiers: &[(usize, TierPlan)],
    notes: Vec<String>,
) -> Result<PlanSet, PlanError> {
    let mut plans: Vec<ExecPlan> = Vec::new();
    let mut entries = Vec::new();
    for (t, tp) in tiers {
        let p = ctx.exec_plan(&layout.resident, &tp.on_gpu);
        let switches = p.switches();
        let idx = plans.iter().position(|q| *q == p).unwrap_or_else(|| {
            plans.push(p);
            plans.len() - 1
        });
        let streamed = tp
            .on_gpu
            .iter()
            .zip(&layout.resident)
            .filter(|(g, r)| **g && !**r)
            .count();
        entries.push(TierEntry {
            tier: *t,
            plan: idx,
            kind: tp.kind,
            est_secs: tp.secs,
            estimates: tp.estimates.clone(),
            switches,
            streamed_items: streamed,
            on_gpu: tp.on_gpu.clone(),
        });
    }
    let shape = ctx.decode_shape();
    let dec = ctx.costs(shape);
    let tier1 = &tiers[0].1;
    // a CPU item's decode time with the copies that overlap it
    let secs = item_secs_at(
        ctx,
        &tier1.on_gpu,
        &layout.resident,
        layout.streaming,
        shape,
    )?;
    let decode = dec
        .iter()
        .zip(&tier1.on_gpu)
        .zip(secs)
        .map(|((c, &g), s)| ItemEstimate {
            on_gpu: g,
            decode_secs: if g { c.gpu } else { s },
            copy_secs: c.copy,
            slowdown: if g || c.cpu <= 0.0 {
                1.0
            } else {
                (s / c.cpu).max(1.0)
            },
        })
        .collect();
    Ok(PlanSet {
        plans,
        tiers: entries,
        layout,
        decode,
        policy: ctx.run.policy,
        copy_secs_per_gb: ctx.cost.h2d_secs(DeviceId::Gpu, 1e9),
        notes,
    })
}

/// Every tier on the CPU alone.
pub(super) fn plan_host_only(ctx: &Ctx<'_>) -> PlanSet {
    let max = ctx.run.max_chunk.unwrap_or(HOST_CHUNK).min(ctx.run.n_ctx);
    let mut tiers = Vec::new();
    for t in crate::tiers::planned(max, ctx.run.parallel) {
        let secs: f64 = ctx.costs(ctx.shape(t)).iter().map(|c| c.cpu).sum();
        tiers.push(TierEntry {
            tier: t,
            plan: 0,
            kind: PlanKind::CpuOnly,
            est_secs: secs,
            estimates: vec![(PlanKind::CpuOnly, Some(secs))],
            switches: 0,
            streamed_items: 0,
            on_gpu: vec![false; ctx.items.len()],
        });
    }
    let mut notes = Vec::new();
    if !ctx.cost.is_measured(DeviceId::Host) {
        notes.push(NO_PROFILE.to_string());
    }
    let (items, _) = build_items(ctx.g, ctx.run.kv_rows(), ctx.run.kv_type.size());
    let n = items.len();
    PlanSet {
        plans: vec![ExecPlan::all_cpu(ctx.g)],
        tiers,
        layout: Arc::new(Layout::host_only(items, max)),
        decode: vec![ItemEstimate::default(); n],
        policy: ctx.run.policy,
        copy_secs_per_gb: 0.0,
        notes,
    }
}

/// Re-plans the tiers of `old` with the current (live) costs and what was
/// learned, keeping its layout.
pub(super) fn replan(ctx: &Ctx<'_>, old: &PlanSet) -> Result<PlanSet, PlanError> {
    let layout = old.layout.clone();
    let mut tiers = Vec::new();
    for e in &old.tiers {
        let tp = tier_plan(
            ctx,
            e.tier,
            &layout.resident,
            layout.streaming,
            Some(e.kind),
        )?;
        tiers.push((e.tier, tp));
    }
    // the new plans must fit the layout's compute buffers
    let exact = tiers
        .iter()
        .map(|(t, tp)| ctx.compute_bytes(&ctx.exec_plan(&layout.resident, &tp.on_gpu), *t))
        .max()
        .unwrap_or(0);
    let planned = layout.regions[Region::Compute];
    if exact > planned {
        return Err(PlanError::Algorithm(format!(
            "the re-plan needs {} of compute buffers, the layout has {}",
            fmt_bytes(exact),
            fmt_bytes(planned)
        )));
    }
    plan_set(ctx, layout, &tiers, old.notes.clone())
}
