//! Building the layout and the per-tier plans.

use std::collections::HashMap;

use ats_core::device::KvType;
use ats_core::graph::Graph;
use ats_core::graph::cost::RoundShape;
use serde::Serialize;

use super::items::{Item, ItemCost, build_items, item_costs};
use super::report::{ItemRow, PlanReport, TensorRow};
use super::{PlanKind, PlanSet, TierEntry, tiers_up_to};
use crate::dynamic::{TransferItem, TransferParams, plan_transfers, round_time};
use crate::engine::Policy;
use crate::exec::{ExecPlan, Schedule, WeightHome, weight_role};
use crate::profile::CostModel;
use crate::rescheduler::ReschedConfig;
use crate::size::fmt_bytes;

mod residency;
use residency::resident_for;

/// Planner settings.
#[derive(Clone, Debug, Serialize)]
pub struct PlannerConfig {
    /// Placement policy.
    pub policy: Policy,
    /// Context length the KV caches hold.
    pub n_ctx: usize,
    /// KV element type.
    pub kv_type: KvType,
    /// Temp slots per weight role (2 = double buffer).
    pub slots_per_role: usize,
    /// Rounds return every row's logits (eval, perplexity), so compute buffers hold them.
    pub all_logits: bool,
    /// Largest tier to plan for (`None`: chosen by the planner).
    pub max_tier: Option<usize>,
    /// Use only this plan shape where the layout allows it (experiments
    /// that measure each shape against the planner's choice).
    #[serde(skip)]
    pub force_kind: Option<PlanKind>,
    /// Re-scheduling thresholds.
    #[serde(skip)]
    pub resched: ReschedConfig,
}

/// Why no plan could be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The GPU budget cannot hold even the smallest plan.
    #[error(
        "a VRAM budget of {} is too small to run this model on the GPU: the smallest plan needs {} ({detail}); give at least --vram {}",
        fmt_bytes(*budget), fmt_bytes(*minimum), fmt_bytes(*minimum)
    )]
    BudgetTooSmall {
        /// The budget.
        budget: u64,
        /// The least that works.
        minimum: u64,
        /// What the minimum is made of.
        detail: String,
    },
    /// A context length no plan can hold: 0, or beyond [`MAX_CONTEXT`].
    ///
    /// [`MAX_CONTEXT`]: ats_core::round::MAX_CONTEXT
    #[error("a context of {0} tokens is out of range: it must be 1 to {max}", max = ats_core::round::MAX_CONTEXT)]
    Context(usize),
    /// A planning algorithm refused its input.
    #[error("planning failed: {0}")]
    Algorithm(String),
}

/// What the planner learned beyond the cost model.
pub(super) struct Learned<'a> {
    /// Per plan shape, a correction of its decode estimate (the audition).
    pub bias: &'a [(PlanKind, f64)],
    /// Per tier, the most kernel scratch one GPU node of such a round takes.
    pub scratch: &'a [(usize, u64)],
}

/// The reference workload the layout is chosen for.
const WORKLOAD_PROMPT: usize = 512;
const WORKLOAD_DECODE: f64 = 128.0;

struct Ctx<'a> {
    g: &'a Graph,
    cost: &'a CostModel,
    cfg: &'a PlannerConfig,
    items: Vec<Item>,
    host_nodes: Vec<usize>,
    gpu: usize,
    n_devices: usize,
    kv_f16: bool,
    /// Per plan shape, a correction of its decode estimate learned by measuring it.
    bias: &'a [(PlanKind, f64)],
    /// Per tier, the most kernel scratch one GPU node of such a round takes
    /// (attention over the full context), ascending by tier.
    scratch: &'a [(usize, u64)],
    /// Per item: its weights may stream through temp slots.
    streamable: Vec<bool>,
}

impl<'a> Ctx<'a> {
    fn new(
        g: &'a Graph,
        cost: &'a CostModel,
        cfg: &'a PlannerConfig,
        gpu: usize,
        n_devices: usize,
        learned: &Learned<'a>,
    ) -> Ctx<'a> {
        let (items, host_nodes) = build_items(g, cfg.n_ctx, cfg.kv_type.size());
        // A role with no more weights than slots would hold each of them in a
        // slot of its own: as much memory as keeping them resident, plus a
        // copy every round (the output projection is one such role). Such
        // weights are resident or stay on the host, never streamed.
        let mut uses: HashMap<std::borrow::Cow<'_, str>, usize> = HashMap::new();
        for it in items.iter().filter(|it| it.streamable()) {
            for &w in &it.weights {
                *uses.entry(weight_role(&g.weights[w].name)).or_default() += 1;
            }
        }
        let slots = cfg.slots_per_role.max(1);
        let streamable = items
            .iter()
            .map(|it| {
                it.streamable()
                    && it
                        .weights
                        .iter()
                        .all(|&w| uses[&weight_role(&g.weights[w].name)] > slots)
            })
            .collect();
        Ctx {
            g,
            cost,
            cfg,
            items,
            host_nodes,
            gpu,
            n_devices,
            kv_f16: cfg.kv_type == KvType::F16,
            bias: learned.bias,
            scratch: learned.scratch,
            streamable,
        }
    }

    fn decode_shape(&self) -> RoundShape {
        RoundShape {
            n_tokens: 1,
            past: (self.cfg.n_ctx / 2).min(2048),
            n_outputs: 1,
        }
    }

    fn shape(&self, tier: usize) -> RoundShape {
        if tier == 1 {
            return self.decode_shape();
        }
        RoundShape {
            n_tokens: tier,
            past: 0,
            n_outputs: if self.cfg.all_logits { tier } else { 1 },
        }
    }

    fn costs(&self, shape: RoundShape) -> Vec<ItemCost> {
        item_costs(
            self.g,
            &self.items,
            self.cost,
            shape,
            self.kv_f16,
            Some(self.gpu),
        )
    }

    /// The GPU kernel scratch of a round of up to `tier` tokens.
    fn scratch(&self, tier: usize) -> u64 {
        self.scratch
            .iter()
            .filter(|s| s.0 <= tier)
            .map(|s| s.1)
            .max()
            .unwrap_or(0)
    }

    /// GPU activation bytes for a round of `tier` tokens with every item on the GPU (an upper bound).
    fn compute_reserve(&self, tier: usize) -> u64 {
        let mut node_device = vec![self.gpu; self.g.nodes.len()];
        for &n in &self.host_nodes {
            node_device[n] = 0;
        }
        let plan = ExecPlan {
            node_device,
            weight_home: vec![WeightHome::Host; self.g.weights.len()],
            kv_device: vec![self.gpu; self.g.kv_caches.len()],
        };
        let outs = if self.cfg.all_logits { tier } else { 1 };
        Schedule::build(self.g, &plan, self.n_devices, tier, outs).compute_bytes(self.gpu) as u64
            + self.scratch(tier)
    }

    /// The compute reserve the layout search starts from: the all-GPU
    /// schedule's buffers, padded because plans that split the graph hold a
    /// few more activation copies on the GPU (each layout is then checked
    /// with its exact schedules).
    fn padded_reserve(&self, tier: usize) -> u64 {
        self.compute_reserve(tier) * 9 / 8 + 64 * 1024
    }

    /// Temp slot bytes for streaming the non-resident items, as the
    /// executor allocates them: per role, its largest weight times the
    /// slots it uses (the slots per role, or fewer weights).
    fn temp_reserve(&self, resident: &[bool]) -> u64 {
        let mut by_role: HashMap<std::borrow::Cow<'_, str>, (u64, u64)> = HashMap::new();
        for (i, (it, &r)) in self.items.iter().zip(resident).enumerate() {
            if r || !self.streamable[i] {
                continue;
            }
            for &w in &it.weights {
                let info = &self.g.weights[w];
                let e = by_role.entry(weight_role(&info.name)).or_default();
                e.0 = e.0.max(info.bytes);
                e.1 += 1;
            }
        }
        let slots = self.cfg.slots_per_role.max(1) as u64;
        by_role.values().map(|&(b, n)| b * n.min(slots)).sum()
    }

    fn streamed_roles(&self, resident: &[bool]) -> usize {
        let mut roles = std::collections::HashSet::new();
        for (i, (it, &r)) in self.items.iter().zip(resident).enumerate() {
            if !r && self.streamable[i] {
                for &w in &it.weights {
                    roles.insert(weight_role(&self.g.weights[w].name));
                }
            }
        }
        roles.len()
    }
}

/// One evaluated layout.
struct Layout {
    resident: Vec<bool>,
    why: Vec<String>,
    max_tier: usize,
    streaming: bool,
    compute: u64,
    temp: u64,
    tiers: Vec<LayoutTier>,
    workload: f64,
}

/// Every plan kind's estimate for a tier (`None`: does not fit).
type Estimates = Vec<(PlanKind, Option<f64>)>;
/// A tier's chosen plan: kind, estimated seconds, per-item "on the GPU", and
/// every estimate.
type TierChoice = (PlanKind, f64, Vec<bool>, Estimates);
/// A tier and its chosen plan, as a layout keeps them.
type LayoutTier = (usize, PlanKind, f64, Vec<bool>, Estimates);

fn transfer_items(
    costs: &[ItemCost],
    items: &[Item],
    streamable: &[bool],
    resident: &[bool],
    streaming: bool,
    contention: f64,
) -> Vec<TransferItem> {
    costs
        .iter()
        .zip(items)
        .zip(resident)
        .zip(streamable)
        .map(|(((c, it), &r), &can)| {
            // routed experts are copied once their router has run, so the
            // copy cannot hide under earlier work: it adds to their GPU time
            let routed_copy = it.experts.is_some() && !r;
            TransferItem {
                on_gpu: r,
                promotable: streaming && !r && can,
                cpu_time: c.cpu * contention,
                gpu_time: if routed_copy { c.gpu + c.copy } else { c.gpu },
                copy_time: if routed_copy { 0.0 } else { c.copy },
                switch_cost: c.switch,
            }
        })
        .collect()
}

/// The allowed plan shapes of a policy for a tier.
fn kinds(policy: Policy, tier: usize, streaming: bool) -> Vec<PlanKind> {
    match policy {
        Policy::Static => vec![PlanKind::Static],
        // llama.cpp offloads matmuls of batches of 32 or more to the GPU
        Policy::Layers | Policy::CpuMoe => {
            if tier >= 32 && streaming {
                vec![PlanKind::GpuOnly]
            } else {
                vec![PlanKind::Static]
            }
        }
        Policy::Tiers if streaming => vec![PlanKind::Static, PlanKind::GpuOnly],
        Policy::Ats if streaming => vec![PlanKind::Static, PlanKind::GpuOnly, PlanKind::Dynamic],
        _ => vec![PlanKind::Static],
    }
}

/// Estimates the three shapes for one tier and returns the best allowed:
/// (kind, seconds, per-item "on the GPU", every estimate). Decode estimates
/// carry the measured correction of their shape; `prefer` (the shape the
/// tier runs now) is kept unless another is faster by more than the
/// hysteresis.
fn tier_plan(
    ctx: &Ctx<'_>,
    tier: usize,
    resident: &[bool],
    streaming: bool,
    prefer: Option<PlanKind>,
) -> Result<TierChoice, PlanError> {
    let shape = ctx.shape(tier);
    let costs = ctx.costs(shape);
    let out_bytes = ctx
        .g
        .value_bytes(ctx.g.output, shape.n_tokens, shape.n_outputs) as f64;
    let params = TransferParams {
        slots: (ctx.cfg.slots_per_role.max(1) * ctx.streamed_roles(resident).max(1)).max(1),
        output_switch_cost: ctx.cost.d2h_secs(ctx.gpu, out_bytes) + ctx.cost.switch_secs(ctx.gpu),
    };
    let alg = |e: crate::dynamic::TransferError| PlanError::Algorithm(e.to_string());
    let plain = transfer_items(
        &costs,
        &ctx.items,
        &ctx.streamable,
        resident,
        streaming,
        1.0,
    );
    let contended = transfer_items(
        &costs,
        &ctx.items,
        &ctx.streamable,
        resident,
        streaming,
        ctx.cost.contention(0),
    );
    let none = vec![false; plain.len()];
    let static_t = round_time(&plain, &none, &params).map_err(alg)?.total;
    let mut allowed = kinds(ctx.cfg.policy, tier, streaming);
    if let Some(k) = ctx.cfg.force_kind
        && (streaming || k == PlanKind::Static)
    {
        allowed = vec![k];
    }
    let mut est: Vec<(PlanKind, Option<f64>, Vec<bool>)> =
        vec![(PlanKind::Static, Some(static_t), none.clone())];
    if streaming {
        let all: Vec<bool> = contended.iter().map(|t| t.promotable).collect();
        let g = round_time(&contended, &all, &params).map_err(alg)?.total;
        est.push((PlanKind::GpuOnly, Some(g), all));
        let d = plan_transfers(&contended, &params).map_err(alg)?;
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
        && t_best >= t_kept * (1.0 - ctx.cfg.resched.hysteresis)
    {
        best = kept;
    }
    let on_gpu: Vec<bool> = resident
        .iter()
        .zip(&best.2)
        .map(|(&r, &p)| r || p)
        .collect();
    let estimates = est
        .iter()
        .map(|e| (e.0, if allowed.contains(&e.0) { e.1 } else { None }))
        .collect();
    Ok((best.0, best.1.unwrap_or(f64::INFINITY), on_gpu, estimates))
}

fn evaluate(
    ctx: &Ctx<'_>,
    budget: u64,
    max_tier: usize,
    streaming: bool,
) -> Result<Option<Layout>, PlanError> {
    let compute = ctx.padded_reserve(max_tier);
    let all_streamable = vec![false; ctx.items.len()];
    let temp_all = if streaming {
        ctx.temp_reserve(&all_streamable)
    } else {
        0
    };
    if compute + temp_all > budget {
        return Ok(None);
    }
    let dec = ctx.costs(ctx.decode_shape());
    let pre_tier = WORKLOAD_PROMPT.min(max_tier).min(ctx.cfg.n_ctx);
    let pre = ctx.costs(ctx.shape(pre_tier));
    let prompt_rounds = WORKLOAD_PROMPT.min(ctx.cfg.n_ctx).div_ceil(pre_tier) as f64;
    let (mut resident, mut why) =
        resident_for(ctx, budget - compute - temp_all, &dec, &pre, prompt_rounds)?;
    let mut temp = if streaming {
        ctx.temp_reserve(&resident)
    } else {
        0
    };
    if streaming && temp < temp_all {
        // fewer streamed roles than assumed: give the difference to residency
        let (r2, w2) = resident_for(ctx, budget - compute - temp, &dec, &pre, prompt_rounds)?;
        let t2 = ctx.temp_reserve(&r2);
        let used2: u64 = ctx
            .items
            .iter()
            .zip(&r2)
            .filter(|x| *x.1)
            .map(|x| x.0.bytes())
            .sum();
        if used2 + t2 + compute <= budget {
            resident = r2;
            why = w2;
            temp = t2;
        }
    }
    let mut tiers = Vec::new();
    for t in tiers_up_to(max_tier.min(ctx.cfg.n_ctx)) {
        let (kind, secs, on_gpu, est) = tier_plan(ctx, t, &resident, streaming, None)?;
        tiers.push((t, kind, secs, on_gpu, est));
    }
    // the exact compute buffers: the largest schedule of the tier plans and
    // of the static and GPU-only shapes, which re-plans and the decode
    // audition may switch to within this layout
    let gpu_only: Vec<bool> = resident
        .iter()
        .zip(&ctx.streamable)
        .map(|(&r, &s)| r || (streaming && s))
        .collect();
    let mut exact = 0u64;
    for (t, _, _, on_gpu, _) in &tiers {
        let outs = if ctx.cfg.all_logits { *t } else { 1 };
        for shape in [on_gpu, &resident, &gpu_only] {
            let p = exec_plan(ctx, &resident, shape);
            exact = exact.max(
                Schedule::build(ctx.g, &p, ctx.n_devices, *t, outs).compute_bytes(ctx.gpu) as u64
                    + ctx.scratch(*t),
            );
        }
    }
    let held: u64 = ctx
        .items
        .iter()
        .zip(&resident)
        .filter(|x| *x.1)
        .map(|x| x.0.bytes())
        .sum();
    if held + temp + exact > budget {
        return Ok(None);
    }
    let compute = exact;
    // the workload: 128 decode rounds, plus the prompt in chunks of its best tier
    let decode = tiers.first().map_or(f64::INFINITY, |t| t.2);
    let prompt = tiers
        .iter()
        .map(|t| WORKLOAD_PROMPT.min(ctx.cfg.n_ctx).div_ceil(t.0) as f64 * t.2)
        .fold(f64::INFINITY, f64::min);
    Ok(Some(Layout {
        resident,
        why,
        max_tier,
        streaming,
        compute,
        temp,
        workload: WORKLOAD_DECODE * decode + prompt,
        tiers,
    }))
}

fn exec_plan(ctx: &Ctx<'_>, resident: &[bool], on_gpu: &[bool]) -> ExecPlan {
    let mut p = ExecPlan::all_cpu(ctx.g);
    for (i, it) in ctx.items.iter().enumerate() {
        if on_gpu[i] {
            for &n in &it.nodes {
                p.node_device[n] = ctx.gpu;
            }
        }
        if resident[i] {
            for &w in &it.weights {
                p.weight_home[w] = WeightHome::Resident(ctx.gpu);
            }
            if let Some(c) = it.kv {
                p.kv_device[c] = ctx.gpu;
            }
        }
    }
    p
}

fn item_name(it: &Item) -> String {
    let sub = serde_json::to_value(it.sublayer)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    match it.layer {
        Some(l) => format!("blk.{l} {sub}"),
        None => sub,
    }
}

fn finish(ctx: &Ctx<'_>, layout: Layout, budget: u64, notes: Vec<String>) -> PlanSet {
    let mut plans: Vec<ExecPlan> = Vec::new();
    let mut tiers = Vec::new();
    for (t, kind, secs, on_gpu, est) in &layout.tiers {
        let p = exec_plan(ctx, &layout.resident, on_gpu);
        let switches = p.switches();
        let idx = match plans.iter().position(|q| *q == p) {
            Some(i) => i,
            None => {
                plans.push(p);
                plans.len() - 1
            }
        };
        let streamed = on_gpu
            .iter()
            .zip(&layout.resident)
            .filter(|(g, r)| **g && !**r)
            .count();
        tiers.push(TierEntry {
            tier: *t,
            plan: idx,
            kind: *kind,
            est_secs: *secs,
            estimates: est.clone(),
            switches,
            streamed_items: streamed,
        });
    }
    let resident_bytes: u64 = ctx
        .items
        .iter()
        .zip(&layout.resident)
        .filter(|x| *x.1)
        .map(|x| x.0.weight_bytes)
        .sum();
    let kv_bytes: u64 = ctx
        .items
        .iter()
        .zip(&layout.resident)
        .filter(|x| *x.1)
        .map(|x| x.0.kv_bytes)
        .sum();
    let dec = ctx.costs(ctx.decode_shape());
    let tier1_gpu = &layout.tiers[0].3;
    let mut tensors: Vec<TensorRow> = ctx
        .g
        .weights
        .iter()
        .map(|w| TensorRow {
            name: w.name.clone(),
            bytes: w.bytes,
            placement: "cpu".into(),
            region: "none".into(),
            why: "embedding lookups run on the host".into(),
        })
        .collect();
    let mut streamed_in: HashMap<usize, Vec<usize>> = HashMap::new();
    for (t, _, _, on_gpu, _) in &layout.tiers {
        for (i, &g) in on_gpu.iter().enumerate() {
            if g && !layout.resident[i] {
                streamed_in.entry(i).or_default().push(*t);
            }
        }
    }
    for (i, it) in ctx.items.iter().enumerate() {
        for &w in &it.weights {
            let row = &mut tensors[w];
            if layout.resident[i] {
                row.placement = "gpu".into();
                row.region = "resident".into();
            } else if let Some(ts) = streamed_in.get(&i) {
                row.region = "temp".into();
                row.placement = "cpu".into();
                row.why = format!("{}; streamed to the GPU for tiers {ts:?}", layout.why[i]);
                continue;
            }
            row.why = layout.why[i].clone();
        }
    }
    let items = ctx
        .items
        .iter()
        .enumerate()
        .map(|(i, it)| ItemRow {
            name: item_name(it),
            nodes: it.nodes.clone(),
            bytes: it.bytes(),
            resident: layout.resident[i],
            on_gpu_tier1: tier1_gpu[i],
            est_decode_secs: if tier1_gpu[i] { dec[i].gpu } else { dec[i].cpu },
            est_copy_secs: dec[i].copy,
        })
        .collect();
    let report = PlanReport {
        policy: Some(ctx.cfg.policy),
        budget_bytes: Some(budget),
        peak_bytes: resident_bytes + kv_bytes + layout.temp + layout.compute,
        regions: vec![
            ("resident".into(), resident_bytes),
            ("kv".into(), kv_bytes),
            ("temp".into(), layout.temp),
            ("compute".into(), layout.compute),
        ],
        max_tier: layout.max_tier,
        streaming: layout.streaming,
        workload_secs: layout.workload,
        copy_secs_per_gb: ctx.cost.h2d_secs(ctx.gpu, 1e9),
        tensors,
        items,
        notes,
    };
    PlanSet {
        plans,
        tiers,
        report,
    }
}

/// Plans every tier on the CPU alone.
fn cpu_only(g: &Graph, cost: &CostModel, cfg: &PlannerConfig) -> PlanSet {
    let kv_f16 = cfg.kv_type == KvType::F16;
    let (items, _) = build_items(g, cfg.n_ctx, cfg.kv_type.size());
    let max = cfg.max_tier.unwrap_or(512).min(cfg.n_ctx);
    let mut tiers = Vec::new();
    for t in tiers_up_to(max) {
        let shape = RoundShape {
            n_tokens: t,
            past: if t == 1 { (cfg.n_ctx / 2).min(2048) } else { 0 },
            n_outputs: if cfg.all_logits { t } else { 1 },
        };
        let secs: f64 = item_costs(g, &items, cost, shape, kv_f16, None)
            .iter()
            .map(|c| c.cpu)
            .sum();
        tiers.push(TierEntry {
            tier: t,
            plan: 0,
            kind: PlanKind::CpuOnly,
            est_secs: secs,
            estimates: vec![(PlanKind::CpuOnly, Some(secs))],
            switches: 0,
            streamed_items: 0,
        });
    }
    let mut notes = Vec::new();
    if !cost.is_measured(0) {
        notes.push(
            "no profile of this machine: estimates are a default roofline (run `ats-cli profile`)"
                .into(),
        );
    }
    let tensors = g
        .weights
        .iter()
        .map(|w| TensorRow {
            name: w.name.clone(),
            bytes: w.bytes,
            placement: "cpu".into(),
            region: "none".into(),
            why: "no GPU".into(),
        })
        .collect();
    PlanSet {
        plans: vec![ExecPlan::all_cpu(g)],
        tiers,
        report: PlanReport {
            policy: Some(cfg.policy),
            max_tier: max,
            tensors,
            notes,
            ..PlanReport::default()
        },
    }
}

/// Builds the plan set (see the module docs) for `n_devices` devices.
pub(super) fn plan_set(
    g: &Graph,
    cost: &CostModel,
    cfg: &PlannerConfig,
    gpu: Option<usize>,
    budget: Option<u64>,
    n_devices: usize,
    learned: &Learned<'_>,
) -> Result<PlanSet, PlanError> {
    let (Some(gpu), Some(budget)) = (gpu, budget) else {
        return Ok(cpu_only(g, cost, cfg));
    };
    let ctx = Ctx::new(g, cost, cfg, gpu, n_devices, learned);
    let mut cap = cfg.max_tier.unwrap_or(usize::MAX).min(cfg.n_ctx);
    if matches!(cfg.policy, Policy::Layers | Policy::CpuMoe) {
        // the baselines process prompts as llama.cpp does by default: in
        // micro-batches of 512 tokens (its n_ubatch)
        cap = cap.min(512);
    }
    let mut tmax: Vec<usize> = [1usize, 64, 512, 2048]
        .into_iter()
        .filter(|&t| t <= cap)
        .collect();
    if tmax.is_empty() {
        tmax.push(1);
    }
    let streaming_opts: &[bool] = match cfg.policy {
        Policy::Static => &[false],
        Policy::Layers | Policy::CpuMoe => &[true, false],
        Policy::Tiers | Policy::Ats => &[false, true],
    };
    let mut best: Option<Layout> = None;
    for &t in &tmax {
        for &s in streaming_opts {
            if let Some(l) = evaluate(&ctx, budget, t, s)? {
                // baselines take the first layout that fits (llama.cpp does not search)
                let baseline = matches!(cfg.policy, Policy::Layers | Policy::CpuMoe);
                let better = best.as_ref().is_none_or(|b| {
                    if baseline {
                        b.max_tier < l.max_tier
                            || (b.max_tier == l.max_tier && !b.streaming && l.streaming)
                    } else {
                        l.workload < b.workload
                    }
                });
                if better {
                    best = Some(l);
                }
            }
        }
    }
    let Some(layout) = best else {
        let minimum = ctx.padded_reserve(1);
        return Err(PlanError::BudgetTooSmall {
            budget,
            minimum,
            detail: format!("compute buffers for one token: {}", fmt_bytes(minimum)),
        });
    };
    let mut notes = Vec::new();
    if !cost.is_measured(gpu) || !cost.is_measured(0) {
        notes.push(
            "no profile of this machine: estimates are a default roofline (run `ats-cli profile`)"
                .into(),
        );
    }
    Ok(finish(&ctx, layout, budget, notes))
}

/// Re-plans the tiers with the current (live) costs and what was learned,
/// keeping the layout of `old`.
pub(super) fn replan(
    g: &Graph,
    cost: &CostModel,
    cfg: &PlannerConfig,
    gpu: usize,
    old: &PlanSet,
    learned: &Learned<'_>,
) -> Result<PlanSet, PlanError> {
    let n_devices = old.plans[0]
        .node_device
        .iter()
        .chain(&old.plans[0].kv_device)
        .max()
        .copied()
        .unwrap_or(0)
        .max(gpu)
        + 1;
    let ctx = Ctx::new(g, cost, cfg, gpu, n_devices, learned);
    let resident: Vec<bool> = old.report.items.iter().map(|i| i.resident).collect();
    let streaming = old.report.streaming;
    let mut tiers = Vec::new();
    for e in &old.tiers {
        let (kind, secs, on_gpu, est) =
            tier_plan(&ctx, e.tier, &resident, streaming, Some(e.kind))?;
        tiers.push((e.tier, kind, secs, on_gpu, est));
    }
    let regions: HashMap<String, u64> = old.report.regions.iter().cloned().collect();
    // the new plans must fit the layout's compute buffers
    let mut exact = 0u64;
    for (t, _, _, on_gpu, _) in &tiers {
        let p = exec_plan(&ctx, &resident, on_gpu);
        let outs = if cfg.all_logits { *t } else { 1 };
        exact = exact.max(
            Schedule::build(g, &p, n_devices, *t, outs).compute_bytes(gpu) as u64 + ctx.scratch(*t),
        );
    }
    let planned = regions.get("compute").copied().unwrap_or(0);
    if exact > planned {
        return Err(PlanError::Algorithm(format!(
            "the re-plan needs {} of compute buffers, the layout has {}",
            fmt_bytes(exact),
            fmt_bytes(planned)
        )));
    }
    let layout = Layout {
        why: old
            .report
            .items
            .iter()
            .map(|_| "kept from the current layout (re-plan)".to_string())
            .collect(),
        resident,
        max_tier: old.report.max_tier,
        streaming,
        compute: regions.get("compute").copied().unwrap_or(0),
        temp: regions.get("temp").copied().unwrap_or(0),
        workload: 0.0,
        tiers,
    };
    let mut set = finish(
        &ctx,
        layout,
        old.report.budget_bytes.unwrap_or(0),
        old.report.notes.clone(),
    );
    // keep the original reasons for each tensor
    for (row, prev) in set.report.tensors.iter_mut().zip(&old.report.tensors) {
        if row.region == prev.region {
            row.why = prev.why.clone();
        }
    }
    Ok(set)
}
