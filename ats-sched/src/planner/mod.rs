//! The planner: turns a graph, the devices, the cost model and a policy into
//! a memory layout (which weights and KV caches are resident on the GPU) and
//! one plan per token tier, each the best of three shapes:
//!
//! - **GPU-only**: every item runs on the GPU; non-resident weights stream
//!   through temp slots (double buffered per weight role).
//! - **Static**: non-resident items run on the CPU; only activations cross.
//! - **Dynamic**: the dynamic-transfer DP promotes the CPU items whose weight
//!   copies hide under GPU work.
//!
//! The resident set comes from the static knapsack DP ([`crate::placement`])
//! weighted by a reference workload (a 512-token prompt and 128 generated
//! tokens); a few memory layouts (largest tier planned for, with or without
//! temp slots) are compared on that workload and the best is kept. Per round
//! the tier minimising `ceil(n / tier) * est(tier)` is used, and prefill runs
//! in chunks of it. At the first decode rounds the distinct decode plans
//! are auditioned (each runs a few real rounds, the fastest is kept; see
//! [`audition`]). Observed times feed the cost model; the load-aware
//! re-scheduler re-runs the per-tier plans when they drift.

pub mod audition;
mod build;
mod items;
mod report;

pub use build::{PlanError, PlannerConfig};
pub use items::{Item, ItemCost, build_items, item_costs};
pub use report::{PlanReport, TensorRow};

use std::sync::Arc;
use std::time::Instant;

use ats_core::device::Device;
use ats_core::graph::Graph;
use ats_core::graph::cost::RoundShape;
use serde::Serialize;

use crate::exec::{ExecPlan, RoundStats};
use crate::profile::CostModel;
use crate::rescheduler::{CostSnapshot, Decision, Rescheduler};
use crate::tiers::{TIERS, TierTable};
use audition::{Audition, AuditionReport, Step};

/// The shape of a tier's plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlanKind {
    /// No GPU: everything on the CPU.
    CpuOnly,
    /// Every weight item on the GPU, non-resident weights streamed.
    GpuOnly,
    /// Non-resident items on the CPU.
    Static,
    /// Static plus promotions chosen by the dynamic-transfer DP.
    Dynamic,
}

/// The plan of one token tier.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TierEntry {
    /// Tokens per round.
    pub tier: usize,
    /// Index of its plan in [`PlanSet::plans`].
    pub plan: usize,
    /// The shape chosen.
    pub kind: PlanKind,
    /// Estimated seconds of one round of `tier` tokens.
    pub est_secs: f64,
    /// Every shape's estimate (`None`: not allowed by the policy or the layout).
    pub estimates: Vec<(PlanKind, Option<f64>)>,
    /// Device switches per round.
    pub switches: usize,
    /// Items promoted (streamed) per round.
    pub streamed_items: usize,
}

/// Plans for every tier, sharing one memory layout.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanSet {
    /// Distinct execution plans.
    #[serde(skip)]
    pub plans: Vec<ExecPlan>,
    /// One entry per usable tier, ascending.
    pub tiers: Vec<TierEntry>,
    /// What is where and why, with the memory per region.
    pub report: PlanReport,
}

impl PlanSet {
    /// The plan and chunk size for `n` new tokens: the tier minimising
    /// `ceil(n / tier) * est(tier)` ([`TierTable::choose`]). One token runs
    /// the decode plan, which was planned for exactly that round (the larger
    /// tiers' estimates are of a fresh prompt, not comparable with a decode
    /// round deep into the context).
    pub fn choose(&self, n: usize) -> (usize, usize) {
        let n = n.max(1);
        let first = self
            .tiers
            .first()
            .expect("a plan set has at least one tier");
        if n == 1 && first.tier == 1 {
            return (first.plan, 1);
        }
        let mut est = [None; TIERS.len()];
        for t in &self.tiers {
            if let Some(i) = TIERS.iter().position(|&x| x == t.tier) {
                est[i] = Some(t.est_secs);
            }
        }
        // an estimate that is not a time (never made by the planner) leaves the smallest tier
        let chosen = TierTable::new(est)
            .and_then(|table| table.choose(n))
            .ok()
            .and_then(|c| self.tiers.iter().find(|t| t.tier == c.tier))
            .unwrap_or(first);
        (chosen.plan, chosen.tier.min(n))
    }
}

/// Builds and keeps the plans of an engine, and re-plans under load.
pub struct Planner {
    graph: Arc<Graph>,
    cfg: PlannerConfig,
    cost: CostModel,
    set: PlanSet,
    prev: Option<PlanSet>,
    resched: Option<Rescheduler>,
    clock: Instant,
    /// Re-plans done so far (those that changed a plan).
    pub replans: usize,
    /// Re-plans the re-scheduler asked for that kept every plan.
    pub refreshes: usize,
    /// Re-plans that changed the memory layout (weights or KV caches moved).
    pub relayouts: usize,
    /// Decode rounds since the layout last changed (or since the start).
    rounds_since_move: usize,
    gpu: Option<usize>,
    budget: Option<u64>,
    n_devices: usize,
    /// The GPU's kernel scratch per tier (it lives in the compute region).
    scratch: Vec<(usize, u64)>,
    peak_planned: u64,
    /// Whether the decode audition has started (it runs once).
    auditioned: bool,
    audition: Option<Audition>,
    last_audition: Option<AuditionReport>,
    /// Plans the engine should install next (an audition step).
    pending: Option<PlanSet>,
    /// Per-shape corrections of decode estimates, learned by the audition.
    bias: Vec<(PlanKind, f64)>,
}

impl std::fmt::Debug for Planner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Planner({:?}, {} tiers)",
            self.cfg.policy,
            self.set.tiers.len()
        )
    }
}

impl Planner {
    /// Plans `graph` on `devices` (0: the host CPU; 1, if present: the GPU,
    /// whose ledger budget, less what the device already holds, is the VRAM
    /// budget of the plan).
    pub fn new(
        graph: Arc<Graph>,
        devices: &[Arc<dyn Device>],
        cost: CostModel,
        cfg: PlannerConfig,
    ) -> Result<Planner, PlanError> {
        if !(1..=ats_core::round::MAX_CONTEXT).contains(&cfg.n_ctx) {
            return Err(PlanError::Context(cfg.n_ctx));
        }
        let gpu = (devices.len() > 1).then_some(1);
        // what the device already holds (a real GPU's cuBLAS workspace,
        // scratch and argument ring, reserved when it opened) is not ours
        let budget = gpu.map(|d| {
            let l = devices[d].ledger();
            l.budget()
                .or(devices[d].info().memory_bytes)
                .unwrap_or(0)
                .saturating_sub(l.used())
        });
        let scratch = gpu.map_or_else(Vec::new, |d| {
            scratch_per_tier(&graph, &*devices[d], cfg.n_ctx)
        });
        let set = build::plan_set(
            &graph,
            &cost,
            &cfg,
            gpu,
            budget,
            devices.len(),
            &build::Learned {
                bias: &[],
                scratch: &scratch,
            },
        )?;
        let resched = gpu.map(|_| {
            let snap = snapshot(&set);
            Rescheduler::new(cfg.resched.clone(), snap, 0.0)
        });
        let resched = match resched {
            Some(Ok(r)) => Some(r),
            Some(Err(e)) => return Err(PlanError::Algorithm(format!("re-scheduler: {e}"))),
            None => None,
        };
        let peak_planned = set.report.peak_bytes;
        Ok(Planner {
            graph,
            cfg,
            cost,
            set,
            prev: None,
            resched,
            clock: Instant::now(),
            replans: 0,
            refreshes: 0,
            relayouts: 0,
            rounds_since_move: 0,
            peak_planned,
            gpu,
            budget,
            n_devices: devices.len(),
            scratch,
            auditioned: false,
            audition: None,
            last_audition: None,
            pending: None,
            bias: Vec::new(),
        })
    }

    /// The current plans.
    pub fn plans(&self) -> &PlanSet {
        &self.set
    }

    /// The cost model (with live measurements).
    pub fn cost(&self) -> &CostModel {
        &self.cost
    }

    /// The plan index and chunk size for `n` new tokens.
    pub fn choose(&self, n: usize) -> (usize, usize) {
        self.set.choose(n)
    }

    /// Takes a round's measurements into the cost model and the re-scheduler.
    pub fn observe(&mut self, stats: &RoundStats, shape: RoundShape) {
        let n_tokens = shape.n_tokens;
        let kv_f16 = self.cfg.kv_type == ats_core::device::KvType::F16;
        let g = self.graph.clone();
        let mut this_round: std::collections::HashMap<usize, f64> =
            std::collections::HashMap::new();
        for &(node, d, secs) in &stats.node_secs {
            self.cost.observe(&g, d, node, shape, kv_f16, secs);
            *this_round.entry(node).or_default() += secs;
        }
        let (mut copy_bytes, mut copy_secs) = (0u64, 0.0f64);
        if let Some(gpu) = self.gpu {
            for &(_, b, s) in stats.async_copies.iter().filter(|c| c.0 == gpu) {
                copy_bytes += b;
                copy_secs += s;
            }
            if copy_bytes > 0 {
                self.cost.observe_copy(gpu, copy_bytes as f64, copy_secs);
            }
        }
        if n_tokens != 1 || self.gpu.is_none() {
            return;
        }
        self.rounds_since_move += 1;
        if self.audition_step(stats.total_secs) {
            return;
        }
        let Some(rs) = &mut self.resched else { return };
        // decode rounds: each item's time against its snapshot
        let _ = rs.observe_tpot(stats.total_secs);
        for (i, it) in self.set.report.items.iter().enumerate() {
            let times: Option<f64> = it.nodes.iter().map(|n| this_round.get(n).copied()).sum();
            if let Some(s) = times {
                let _ = rs.observe_op(i, s);
            }
        }
        if copy_bytes > 0 {
            // copies are logged in bulk: scale each streamed item's estimate
            // by the observed over assumed seconds per byte
            let factor =
                (copy_secs / copy_bytes as f64 * 1e9) / self.set.report.copy_secs_per_gb.max(1e-12);
            for (i, it) in self.set.report.items.iter().enumerate() {
                if it.on_gpu_tier1 && !it.resident && it.est_copy_secs.is_finite() {
                    let _ = rs.observe_copy(i, it.est_copy_secs * factor);
                }
            }
        }
    }

    /// Feeds a decode round to the audition (starting it at the first
    /// decode); returns whether an audition is running, so the round says
    /// nothing about the current plan's drift.
    fn audition_step(&mut self, secs: f64) -> bool {
        if !self.auditioned {
            self.auditioned = true;
            let rounds = self.cfg.resched.audition_rounds;
            let candidates = self.audition_candidates();
            if rounds == 0 || candidates.len() < 2 {
                return false;
            }
            // this round ran the planner's choice: it is that candidate's warm-up
            self.audition = Some(Audition::new(candidates, rounds));
        }
        let Some(a) = &mut self.audition else {
            return false;
        };
        match a.record(secs) {
            Step::Continue => {}
            Step::Switch(i) => self.pending = Some(a.candidate(i).clone()),
            Step::Done(report) => {
                let winner = a.candidate(report.winner).clone();
                // shapes this audition measured take their new correction;
                // the others keep what an earlier audition learned
                let fresh = report.bias();
                self.bias.retain(|b| fresh.iter().all(|f| f.0 != b.0));
                self.bias.extend(fresh);
                self.last_audition = Some(report);
                self.audition = None;
                self.pending = Some(winner);
            }
        }
        true
    }

    /// The distinct decode plans of the allowed shapes, each with the
    /// shapes it stands for; the current choice first.
    fn audition_candidates(&self) -> Vec<(PlanSet, Vec<PlanKind>)> {
        let cur = &self.set;
        let Some(t1) = cur.tiers.first().filter(|t| t.tier == 1) else {
            return Vec::new();
        };
        let mut out: Vec<(PlanSet, Vec<PlanKind>)> = vec![(cur.clone(), vec![t1.kind])];
        for &(kind, est) in &t1.estimates {
            if est.is_none() || kind == t1.kind {
                continue;
            }
            let Some(forced) = self.plans_forced(kind) else {
                continue;
            };
            let Some(f1) = forced.tiers.first() else {
                continue;
            };
            let plan = &forced.plans[f1.plan];
            if let Some(same) = out
                .iter_mut()
                .find(|c| &c.0.plans[c.0.tiers[0].plan] == plan)
            {
                same.1.push(kind);
                continue;
            }
            // the current plans with only the decode tier replaced
            let mut c = with_decode_plan(
                cur,
                plan,
                TierEntry {
                    kind,
                    est_secs: f1.est_secs,
                    switches: f1.switches,
                    streamed_items: f1.streamed_items,
                    ..t1.clone()
                },
            );
            c.report.items = forced.report.items.clone();
            out.push((c, vec![kind]));
        }
        out
    }

    /// The last audition's candidates and measurements.
    pub fn last_audition(&self) -> Option<&AuditionReport> {
        self.last_audition.as_ref()
    }

    /// Whether an audition is running.
    pub fn auditioning(&self) -> bool {
        self.audition.is_some()
    }

    /// The plans the engine should run next, if they change: an audition
    /// step, or a re-plan when the re-scheduler says the measurements
    /// drifted (new per-tier plans, and a new memory layout when moving
    /// weights pays for itself within [`PAYBACK_ROUNDS`] decode rounds).
    pub fn maybe_replan(&mut self) -> Option<&PlanSet> {
        if let Some(next) = self.pending.take() {
            if let Some(rs) = &mut self.resched {
                let now = self.clock.elapsed().as_secs_f64();
                let _ = rs.replanned(snapshot(&next), now);
            }
            self.switch_to(next);
            return Some(&self.set);
        }
        if self.audition.is_some() {
            return None;
        }
        let now = self.clock.elapsed().as_secs_f64();
        let rs = self.resched.as_mut()?;
        match rs.check(now) {
            Ok(Decision::Replan { .. }) => {}
            _ => return None,
        }
        self.rebuild(true)
    }

    /// A new memory layout from the live costs, when its decode round beats
    /// `same`'s (the re-plan that keeps the layout) by more than the
    /// hysteresis and the copies the move needs pay for themselves within
    /// [`PAYBACK_ROUNDS`] decode rounds.
    fn relayout(&self, same: &PlanSet) -> Option<PlanSet> {
        let gpu = self.gpu?;
        let set = build::plan_set(
            &self.graph,
            &self.cost,
            &self.cfg,
            Some(gpu),
            self.budget,
            self.n_devices,
            &self.learned(),
        )
        .ok()?;
        let (keep, moved) = (same.tiers.first()?.est_secs, set.tiers.first()?.est_secs);
        // NaN estimates compare false and keep the layout
        let better = moved < keep * (1.0 - self.cfg.resched.hysteresis);
        if !better {
            return None;
        }
        let pairs = || set.report.items.iter().zip(&same.report.items);
        let moved_in: u64 = pairs()
            .filter(|(n, o)| n.resident && !o.resident)
            .map(|(n, _)| n.bytes)
            .sum();
        // an upper bound: only KV caches are copied back, weights are just freed
        let moved_out: u64 = pairs()
            .filter(|(n, o)| !n.resident && o.resident)
            .map(|(_, o)| o.bytes)
            .sum();
        let copy =
            self.cost.h2d_secs(gpu, moved_in as f64) + self.cost.d2h_secs(gpu, moved_out as f64);
        (copy <= (keep - moved) * PAYBACK_ROUNDS).then_some(set)
    }

    /// Re-runs the per-tier plans with the live costs, keeping the layout
    /// (`None` without a GPU).
    pub fn replan_now(&mut self) -> Option<&PlanSet> {
        self.rebuild(false)
    }

    /// Re-plans; with `only_if_changed`, plans equal to the current ones are
    /// not a re-plan (`None`; the re-scheduler still takes the fresher
    /// estimates as its reference).
    fn rebuild(&mut self, only_if_changed: bool) -> Option<&PlanSet> {
        let gpu = self.gpu?;
        let mut new = build::replan(
            &self.graph,
            &self.cost,
            &self.cfg,
            gpu,
            &self.set,
            &self.learned(),
        )
        .ok()?;
        // a move is a bet on PAYBACK_ROUNDS rounds: the re-scheduler does
        // not take another before they have run (no thrashing on noise)
        let settled = self.rounds_since_move >= PAYBACK_ROUNDS as usize;
        let mut moved_layout = false;
        if (settled || !only_if_changed)
            && let Some(moved) = self.relayout(&new)
        {
            self.relayouts += 1;
            self.rounds_since_move = 0;
            new = moved;
            moved_layout = true;
        }
        // Re-plans at decode rounds, in the same layout, switch the executor
        // only for a different decode plan, and measure it first: estimates
        // from live costs taken under one plan (a CPU slowed by another
        // plan's copies, routed experts that vary by token) can flip the
        // ranking the last audition measured. A same-shape plan within the
        // hysteresis, or new prompt tiers alone, are not worth a switch
        // (each re-makes the executor's temp slots and schedules; on the
        // H200, 22 such switches in 134 rounds cost more than they saved):
        // the prompt tiers are re-planned with the next switch.
        if only_if_changed && !moved_layout {
            let hysteresis = self.cfg.resched.hysteresis;
            let rounds = self.cfg.resched.audition_rounds;
            match with_decode_of(&new, &self.set) {
                Some(keep) if worth_switching(&new, &self.set, hysteresis) => {
                    if rounds > 0 {
                        let kinds = |set: &PlanSet| vec![set.tiers[0].kind];
                        self.audition = Some(Audition::new(
                            vec![(keep.clone(), kinds(&self.set)), (new.clone(), kinds(&new))],
                            rounds,
                        ));
                        self.note_replanned(&keep);
                        self.replans += 1;
                        self.switch_to(keep);
                        return Some(&self.set);
                    }
                    // no auditions: the new plans are taken as they are, below
                }
                kept => {
                    // the current decode plan stays; fresher estimates are the reference
                    let fresh = kept.unwrap_or(new);
                    self.note_replanned(&fresh);
                    self.refreshes += 1;
                    if same_plans(&fresh, &self.set) {
                        self.set = fresh;
                    }
                    return None;
                }
            }
        }
        self.note_replanned(&new);
        if same_plans(&new, &self.set) && only_if_changed {
            // fresher estimates, same plans: nothing for the executor to do
            self.refreshes += 1;
            self.set = new;
            return None;
        }
        self.replans += 1;
        self.switch_to(new);
        Some(&self.set)
    }

    /// The current layout's per-tier plans with every tier forced to one
    /// shape (`None` when the layout cannot run it, or without a GPU): for
    /// experiments that measure each shape against the planner's choice.
    pub fn plans_forced(&self, kind: PlanKind) -> Option<PlanSet> {
        let gpu = self.gpu?;
        if kind != PlanKind::Static && !self.set.report.streaming {
            return None;
        }
        let mut cfg = self.cfg.clone();
        cfg.force_kind = Some(kind);
        build::replan(
            &self.graph,
            &self.cost,
            &cfg,
            gpu,
            &self.set,
            &self.learned(),
        )
        .ok()
    }

    /// Makes `set` the current plans (the executor must run them); ends any
    /// audition, which would otherwise replace them.
    pub fn install(&mut self, set: PlanSet) {
        self.end_audition();
        self.switch_to(set);
    }

    /// Goes back to the plans before the last change (the executor refused
    /// the new ones); an audition in progress ends with the plans it had.
    pub fn revert(&mut self) {
        self.end_audition();
        if let Some(p) = self.prev.take() {
            self.set = p;
        }
    }

    /// Tells the re-scheduler that `set`'s estimates are the reference now.
    fn note_replanned(&mut self, set: &PlanSet) {
        if let Some(rs) = &mut self.resched {
            let now = self.clock.elapsed().as_secs_f64();
            let _ = rs.replanned(snapshot(set), now);
        }
    }

    fn learned(&self) -> build::Learned<'_> {
        build::Learned {
            bias: &self.bias,
            scratch: &self.scratch,
        }
    }

    /// Makes `set` current, keeping the old one for [`Planner::revert`].
    fn switch_to(&mut self, set: PlanSet) {
        self.peak_planned = self.peak_planned.max(set.report.peak_bytes);
        self.prev = Some(std::mem::replace(&mut self.set, set));
    }

    /// The largest GPU peak of any plans this planner made current: the
    /// bound the device's ledger peak stays within across re-plans.
    pub fn peak_planned(&self) -> u64 {
        self.peak_planned
    }

    fn end_audition(&mut self) {
        self.auditioned = true;
        self.audition = None;
        self.pending = None;
    }

    /// The settings.
    pub fn config(&self) -> &PlannerConfig {
        &self.cfg
    }
}

/// Whether `new`'s decode plan is worth switching to from `cur`'s: another
/// shape, or an estimate better by more than the hysteresis.
fn worth_switching(new: &PlanSet, cur: &PlanSet, hysteresis: f64) -> bool {
    match (new.tiers.first(), cur.tiers.first()) {
        (Some(n), Some(c)) => n.kind != c.kind || n.est_secs < c.est_secs * (1.0 - hysteresis),
        _ => false,
    }
}

/// Whether the executor would run `a` and `b` alike: the same plan list and
/// the same plan per tier.
fn same_plans(a: &PlanSet, b: &PlanSet) -> bool {
    a.plans == b.plans
        && a.tiers.len() == b.tiers.len()
        && a.tiers.iter().zip(&b.tiers).all(|(x, y)| x.plan == y.plan)
}

/// `new` with its decode tier replaced by `cur`'s decode plan, when the two
/// decode plans differ (`None`: same decode plan, or no decode tier).
fn with_decode_of(new: &PlanSet, cur: &PlanSet) -> Option<PlanSet> {
    let (n1, c1) = (new.tiers.first()?, cur.tiers.first()?);
    if n1.tier != 1 || c1.tier != 1 || new.plans[n1.plan] == cur.plans[c1.plan] {
        return None;
    }
    let mut out = with_decode_plan(new, &cur.plans[c1.plan], c1.clone());
    // same layout: the items differ only in where the decode plan runs them
    out.report.items = cur.report.items.clone();
    Some(out)
}

/// `set` with its decode tier running `plan`, described by `entry` (whose
/// plan index is set here); plans no tier runs any more are dropped (the
/// executor makes slots for every plan it holds).
fn with_decode_plan(set: &PlanSet, plan: &ExecPlan, entry: TierEntry) -> PlanSet {
    let mut out = set.clone();
    let idx = out.plans.iter().position(|p| p == plan).unwrap_or_else(|| {
        out.plans.push(plan.clone());
        out.plans.len() - 1
    });
    out.tiers[0] = TierEntry { plan: idx, ..entry };
    let mut kept: Vec<ExecPlan> = Vec::new();
    for t in &mut out.tiers {
        let p = &out.plans[t.plan];
        t.plan = kept.iter().position(|k| k == p).unwrap_or_else(|| {
            kept.push(p.clone());
            kept.len() - 1
        });
    }
    out.plans = kept;
    out
}

/// Decode rounds within which a re-plan that moves weights must win back
/// the time of the copies (a move is a bet that the load lasts).
pub const PAYBACK_ROUNDS: f64 = 64.0;

/// The re-scheduler's snapshot: per item, its estimated decode time where it runs.
fn snapshot(set: &PlanSet) -> CostSnapshot {
    let finite = |x: f64| if x.is_finite() { x.max(0.0) } else { 0.0 };
    CostSnapshot {
        op_times: set
            .report
            .items
            .iter()
            .map(|i| finite(i.est_decode_secs))
            .collect(),
        copy_times: set
            .report
            .items
            .iter()
            .map(|i| finite(i.est_copy_secs))
            .collect(),
    }
}

/// Per tier, the most kernel scratch `dev` takes for one node of a round
/// of that many tokens at the end of an `n_ctx` context.
fn scratch_per_tier(g: &Graph, dev: &dyn Device, n_ctx: usize) -> Vec<(usize, u64)> {
    tiers_up_to(n_ctx.max(1))
        .into_iter()
        .map(|t| {
            let round = ats_core::round::Round::text(vec![0; t], n_ctx.saturating_sub(t), false);
            let most = (0..g.nodes.len())
                .filter(|&n| matches!(g.nodes[n].op, ats_core::graph::Op::Attention(_)))
                .map(|n| dev.node_scratch_bytes(g, n, &round))
                .max()
                .unwrap_or(0);
            (t, most)
        })
        .collect()
}

/// The tiers at or below `max`.
pub fn tiers_up_to(max: usize) -> Vec<usize> {
    TIERS.iter().copied().filter(|&t| t <= max.max(1)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(tiers: &[(usize, f64)]) -> PlanSet {
        PlanSet {
            plans: Vec::new(),
            tiers: tiers
                .iter()
                .enumerate()
                .map(|(i, &(tier, est))| TierEntry {
                    tier,
                    plan: i,
                    kind: PlanKind::Static,
                    est_secs: est,
                    estimates: Vec::new(),
                    switches: 0,
                    streamed_items: 0,
                })
                .collect(),
            report: PlanReport::default(),
        }
    }

    fn exec(devs: &[usize]) -> ExecPlan {
        ExecPlan {
            node_device: devs.to_vec(),
            weight_home: Vec::new(),
            kv_device: Vec::new(),
        }
    }

    #[test]
    fn a_changed_decode_plan_is_auditioned_against_the_current_one() {
        // current: decode on plan A; new: decode on plan B, prompt tier on C
        let mut cur = set(&[(1, 0.020), (64, 0.100)]);
        cur.plans = vec![exec(&[0, 1]), exec(&[1, 1])];
        let mut new = set(&[(1, 0.015), (64, 0.090)]);
        new.plans = vec![exec(&[1, 0]), exec(&[0, 0])];
        new.tiers[0].kind = PlanKind::Dynamic;
        let keep = with_decode_of(&new, &cur).unwrap();
        // the decode tier runs the current plan, the prompt tier the new one
        assert_eq!(keep.plans.len(), 2, "no plan that no tier runs");
        assert_eq!(keep.plans[keep.tiers[0].plan], cur.plans[0]);
        assert_eq!(keep.tiers[0].kind, PlanKind::Static);
        assert_eq!(keep.plans[keep.tiers[1].plan], new.plans[1]);
        assert_eq!(keep.tiers[1].est_secs, 0.090);
        // the same decode plan: nothing to audition
        let mut same = new.clone();
        same.plans[0] = cur.plans[0].clone();
        assert!(with_decode_of(&same, &cur).is_none());
    }

    #[test]
    fn one_token_runs_the_decode_plan_even_when_a_prompt_tier_looks_cheaper() {
        // the decode estimate is deep into the context, tier 4's at an empty cache
        let s = set(&[(1, 0.020), (4, 0.012), (64, 0.100)]);
        assert_eq!(s.choose(1), (0, 1));
        assert_eq!(s.choose(0), (0, 1));
        // more tokens: ceil(n / tier) * est
        assert_eq!(s.choose(3), (1, 3));
        assert_eq!(s.choose(20), (1, 4));
        assert_eq!(s.choose(40), (2, 40));
        assert_eq!(s.choose(200), (2, 64));
        // estimates that are not times leave the smallest tier
        let bad = set(&[(1, 0.020), (4, f64::NAN)]);
        assert_eq!(bad.choose(8), (0, 1));
    }
}
