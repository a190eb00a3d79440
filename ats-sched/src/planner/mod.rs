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
//! in chunks of it. Observed times feed the cost model; the load-aware
//! re-scheduler re-runs the per-tier plans when they drift.

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

use crate::exec::{ExecPlan, Executor, RoundStats};
use crate::profile::CostModel;
use crate::rescheduler::{CostSnapshot, Decision, Rescheduler};
use crate::tiers::TIERS;

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
    /// `ceil(n / tier) * est(tier)` (ties to the larger tier).
    pub fn choose(&self, n: usize) -> (usize, usize) {
        let n = n.max(1);
        let best = self
            .tiers
            .iter()
            .min_by(|a, b| {
                let ca = n.div_ceil(a.tier) as f64 * a.est_secs;
                let cb = n.div_ceil(b.tier) as f64 * b.est_secs;
                // ties go to the larger tier: fewer rounds, less fixed cost
                ca.total_cmp(&cb).then(b.tier.cmp(&a.tier))
            })
            .expect("a plan set has at least one tier");
        (best.plan, best.tier.min(n))
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
    /// Re-plans done so far.
    pub replans: usize,
    gpu: Option<usize>,
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
    /// whose ledger budget is the VRAM budget).
    pub fn new(
        graph: Arc<Graph>,
        devices: &[Arc<dyn Device>],
        cost: CostModel,
        cfg: PlannerConfig,
    ) -> Result<Planner, PlanError> {
        let gpu = (devices.len() > 1).then_some(1);
        let budget = gpu.map(|d| {
            devices[d]
                .ledger()
                .budget()
                .or(devices[d].info().memory_bytes)
                .unwrap_or(0)
        });
        let set = build::plan_set(&graph, &cost, &cfg, gpu, budget, devices)?;
        let resched = gpu.map(|_| {
            let snap = snapshot(&set);
            Rescheduler::new(cfg.resched.clone(), snap, 0.0)
        });
        let resched = match resched {
            Some(Ok(r)) => Some(r),
            Some(Err(e)) => return Err(PlanError::Algorithm(format!("re-scheduler: {e}"))),
            None => None,
        };
        Ok(Planner {
            graph,
            cfg,
            cost,
            set,
            prev: None,
            resched,
            clock: Instant::now(),
            replans: 0,
            gpu,
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
    pub fn observe(&mut self, ex: &Executor, stats: &RoundStats, shape: RoundShape) {
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
            let t = ex.devices()[gpu].drain_timings();
            for (node, secs) in t.nodes {
                self.cost.observe(&g, gpu, node, shape, kv_f16, secs);
                *this_round.entry(node).or_default() += secs;
            }
            for (b, s) in t.copies {
                copy_bytes += b;
                copy_secs += s;
            }
            if copy_bytes > 0 {
                self.cost.observe_copy(gpu, copy_bytes as f64, copy_secs);
            }
        }
        let Some(rs) = &mut self.resched else { return };
        if n_tokens != 1 {
            return;
        }
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

    /// Re-plans when the re-scheduler says the measurements drifted; returns
    /// the new plans (same memory layout, new per-tier plans).
    pub fn maybe_replan(&mut self) -> Option<&PlanSet> {
        let now = self.clock.elapsed().as_secs_f64();
        let rs = self.resched.as_mut()?;
        match rs.check(now) {
            Ok(Decision::Replan { .. }) => {}
            _ => return None,
        }
        self.replan_now()
    }

    /// Re-runs the per-tier plans with the live costs, keeping the layout.
    pub fn replan_now(&mut self) -> Option<&PlanSet> {
        let gpu = self.gpu?;
        let new = build::replan(&self.graph, &self.cost, &self.cfg, gpu, &self.set).ok()?;
        self.replans += 1;
        if let Some(rs) = &mut self.resched {
            let now = self.clock.elapsed().as_secs_f64();
            let _ = rs.replanned(snapshot(&new), now);
        }
        self.prev = Some(std::mem::replace(&mut self.set, new));
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
        build::replan(&self.graph, &self.cost, &cfg, gpu, &self.set).ok()
    }

    /// Makes `set` the current plans (the executor must run them).
    pub fn install(&mut self, set: PlanSet) {
        self.prev = Some(std::mem::replace(&mut self.set, set));
    }

    /// Goes back to the plans before the last re-plan (the executor refused the new ones).
    pub fn revert(&mut self) {
        if let Some(p) = self.prev.take() {
            self.set = p;
        }
    }

    /// The settings.
    pub fn config(&self) -> &PlannerConfig {
        &self.cfg
    }
}

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

/// The tiers at or below `max`.
pub fn tiers_up_to(max: usize) -> Vec<usize> {
    TIERS.iter().copied().filter(|&t| t <= max.max(1)).collect()
}
