//! The planner: turns a graph, the machine, the cost model and a policy into
//! a memory [`Layout`] (which weights and KV caches are resident on the GPU,
//! the temp slots, the bytes per ledger region) and one plan per token
//! tier, each the best of three shapes:
//!
//! - **GPU-only**: every item runs on the GPU; non-resident weights stream
//!   through temp slots (double buffered per weight role).
//! - **Static**: non-resident items run on the CPU; only activations cross.
//! - **Dynamic**: the dynamic-transfer DP promotes the CPU items whose weight
//!   copies hide under GPU work.
//!
//! The resident set comes from the policy's rule ([`policy`]): the static
//! knapsack DP ([`crate::placement`]) weighted by a reference workload (a
//! 512-token prompt and 128 generated tokens), or llama.cpp's layer fill
//! for its baselines ([`baseline`]); a few memory layouts (largest tier
//! planned for, with or without temp slots) are compared and one is kept.
//! Per round the tier minimising `ceil(n / tier) * est(tier)` is used, and
//! prefill runs in chunks of it. What happens as rounds run (the decode
//! audition, load-aware re-plans, layout moves) is in [`adapt`]: the
//! planner proposes a [`PlanChange`], the session applies it to the
//! executor and commits or rejects it.

mod adapt;
pub mod audition;
pub mod baseline;
mod context;
mod error;
mod items;
mod layout;
pub mod policy;
mod report;
mod residency;
mod search;
mod spread;
mod tier_plan;

pub use adapt::{ChangeReason, PAYBACK_ROUNDS, PlanChange, ReplanStats};
pub use error::PlanError;
pub use items::{Item, ItemCost, build_items, item_costs};
pub use layout::Layout;
pub use report::{ItemRow, Placement, PlanReport, TensorRow};
pub use tier_plan::Estimates;

use std::sync::Arc;

use ats_core::device::Device;
use ats_core::graph::Graph;
use ats_core::machine::Machine;
use serde::Serialize;

use crate::config::RunConfig;
use crate::exec::ExecPlan;
use crate::profile::CostModel;
use crate::tiers::{TIERS, TierTable};
use adapt::Adaptation;
use audition::AuditionReport;
use context::{Ctx, Learned};

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

impl PlanKind {
    /// The name in reports (`gpu-only`, ...).
    pub fn name(self) -> &'static str {
        match self {
            PlanKind::CpuOnly => "cpu-only",
            PlanKind::GpuOnly => "gpu-only",
            PlanKind::Static => "static",
            PlanKind::Dynamic => "dynamic",
        }
    }
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
    pub estimates: Estimates,
    /// Device switches per round.
    pub switches: usize,
    /// Items promoted (streamed) per round.
    pub streamed_items: usize,
    /// Per placement item: runs on the GPU in this tier's plan.
    #[serde(skip)]
    pub on_gpu: Vec<bool>,
}

/// One placement item's decode estimate in the tier-1 plan: what the
/// load-aware re-scheduler compares observed times with.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ItemEstimate {
    /// Runs on the GPU in the decode plan.
    pub on_gpu: bool,
    /// Estimated seconds of a decode round where it runs.
    pub decode_secs: f64,
    /// Estimated seconds to copy its weights to the GPU for a decode round.
    pub copy_secs: f64,
    /// On the CPU: how much slower than alone it runs beside the plan's
    /// weight copies, by the estimate (1: no copy overlaps it).
    pub slowdown: f64,
}

/// Plans for every tier, sharing one memory layout.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanSet {
    /// Distinct execution plans.
    pub plans: Vec<ExecPlan>,
    /// One entry per usable tier, ascending.
    pub tiers: Vec<TierEntry>,
    /// The layout every plan runs in.
    pub layout: Arc<Layout>,
    /// Per placement item, its decode estimate.
    pub decode: Vec<ItemEstimate>,
    /// The policy that made it.
    pub policy: crate::config::Policy,
    /// Seconds per GB of weight copies the plans assumed.
    pub copy_secs_per_gb: f64,
    /// Remarks for the user (no profile, budget notes).
    pub notes: Vec<String>,
}

impl PlanSet {
    /// The plan and chunk size for `n` new tokens: the tier minimising
    /// `ceil(n / tier) * est(tier)` ([`TierTable::choose`]). One token runs
    /// the decode plan, which was planned for exactly that round (the larger
    /// tiers' estimates are of a fresh prompt, not comparable with a decode
    /// round deep into the context).
    pub fn choose(&self, n: usize) -> (usize, usize) {
        let n = n.max(1);
        let Some(first) = self.tiers.first() else {
            return (0, 1);
        };
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

    /// The plan of a round of `n` new tokens that runs whole (the tokens of
    /// several sequences): the smallest tier that holds them, or the largest.
    pub fn plan_for_round(&self, n: usize) -> usize {
        self.tier_for_round(n).map_or(0, |t| t.plan)
    }

    /// The tier entry whose plan a whole round of `n` new tokens runs
    /// ([`PlanSet::plan_for_round`]).
    pub fn tier_for_round(&self, n: usize) -> Option<&TierEntry> {
        self.tiers
            .iter()
            .find(|t| t.tier >= n)
            .or(self.tiers.last())
    }

    /// The decode (tier-1) entry, if the set has one.
    pub fn decode_tier(&self) -> Option<&TierEntry> {
        self.tiers.first().filter(|t| t.tier == 1)
    }
}

/// What the planner knows of the GPU it plans for.
struct GpuSide {
    /// Bytes the plans may use: the budget less what the device already holds.
    budget: u64,
    /// Per tier, the most kernel scratch one GPU node of such a round takes.
    scratch: Vec<(usize, u64)>,
}

/// Builds and keeps the plans of a session, and adapts them as rounds run.
pub struct Planner {
    graph: Arc<Graph>,
    run: RunConfig,
    cost: CostModel,
    gpu: Option<GpuSide>,
    set: PlanSet,
    adapt: Adaptation,
    peak_planned: u64,
}

impl std::fmt::Debug for Planner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Planner({:?}, {} tiers)",
            self.run.policy,
            self.set.tiers.len()
        )
    }
}

impl Planner {
    /// Plans `graph` on `machine` under `run`: for its GPU, if it has one,
    /// within the budget (`run.vram`, else what the GPU's ledger allows)
    /// less what the device already holds.
    pub fn new(
        graph: Arc<Graph>,
        machine: &Machine,
        cost: CostModel,
        run: &RunConfig,
    ) -> Result<Planner, PlanError> {
        run.validate()?;
        let gpu = machine.gpu().map(|g| GpuSide {
            budget: gpu_budget(g.as_ref(), run.vram),
            scratch: scratch_per_tier(&graph, g.as_ref(), run),
        });
        let mut p = Planner {
            adapt: Adaptation::new(gpu.is_some(), run.resched.clone()),
            set: placeholder_set(),
            peak_planned: 0,
            graph,
            run: run.clone(),
            cost,
            gpu,
        };
        p.set = p.plan_fresh(search::Search::First)?;
        p.adapt.start(&p.set)?;
        p.peak_planned = p.set.layout.peak_bytes();
        Ok(p)
    }

    /// The current plans.
    pub fn plans(&self) -> &PlanSet {
        &self.set
    }

    /// What the current plans put where, and why.
    pub fn report(&self) -> PlanReport {
        PlanReport::of(&self.graph, &self.set)
    }

    /// The cost model (with live measurements).
    pub fn cost(&self) -> &CostModel {
        &self.cost
    }

    /// The run settings the planner plans by.
    pub fn run_config(&self) -> &RunConfig {
        &self.run
    }

    /// The plan index and chunk size for `n` new tokens.
    pub fn choose(&self, n: usize) -> (usize, usize) {
        self.set.choose(n)
    }

    /// The largest GPU peak of any plans this planner made current: the
    /// bound the device's ledger peak stays within across re-plans.
    pub fn peak_planned(&self) -> u64 {
        self.peak_planned
    }

    /// How often the plans changed, and what went wrong along the way.
    pub fn replan_stats(&self) -> &ReplanStats {
        &self.adapt.stats
    }

    /// The last audition's candidates and measurements.
    pub fn last_audition(&self) -> Option<&AuditionReport> {
        self.adapt.last_audition.as_ref()
    }

    /// Whether an audition is running.
    pub fn auditioning(&self) -> bool {
        self.adapt.auditioning()
    }

    /// The current layout's per-tier plans with every tier forced to one
    /// shape (`None` when the layout cannot run it, or without a GPU): for
    /// experiments that measure each shape against the planner's choice.
    pub fn plans_forced(&self, kind: PlanKind) -> Result<Option<PlanSet>, PlanError> {
        if self.gpu.is_none() || (kind != PlanKind::Static && !self.set.layout.streaming) {
            return Ok(None);
        }
        self.plan_in_layout(&self.set, Some(kind)).map(Some)
    }

    /// A planning pass over the current costs and what was learned.
    fn ctx(&self, force_kind: Option<PlanKind>) -> Ctx<'_> {
        let learned = Learned {
            bias: &self.adapt.bias,
            scratch: self.gpu.as_ref().map_or(&[], |g| &g.scratch),
        };
        Ctx::new(&self.graph, &self.cost, &self.run, force_kind, &learned)
    }

    /// A fresh layout and plans from the current costs, searched for `search`.
    fn plan_fresh(&self, search: search::Search) -> Result<PlanSet, PlanError> {
        let ctx = self.ctx(None);
        match &self.gpu {
            Some(g) => search::plan_on_gpu(&ctx, g.budget, search),
            None => Ok(search::plan_host_only(&ctx)),
        }
    }

    /// The tiers of `old` re-planned in its layout from the current costs.
    fn plan_in_layout(
        &self,
        old: &PlanSet,
        force_kind: Option<PlanKind>,
    ) -> Result<PlanSet, PlanError> {
        search::replan(&self.ctx(force_kind), old)
    }
}

/// The bytes a plan may use on `gpu`: `vram` (or the ledger's budget, or
/// the device's memory) less what the device already holds (a real GPU's
/// cuBLAS workspace, scratch and argument ring, reserved when it opened).
fn gpu_budget(gpu: &dyn Device, vram: Option<u64>) -> u64 {
    let l = gpu.ledger();
    let budget = match (vram, l.budget()) {
        (Some(v), Some(b)) => v.min(b),
        (v, b) => v.or(b).or(gpu.info().memory_bytes).unwrap_or(0),
    };
    budget.saturating_sub(l.used())
}

/// A plan set with nothing in it, replaced before [`Planner::new`] returns.
fn placeholder_set() -> PlanSet {
    PlanSet {
        plans: Vec::new(),
        tiers: Vec::new(),
        layout: Arc::new(Layout::host_only(Vec::new(), 1)),
        decode: Vec::new(),
        policy: crate::config::Policy::Ats,
        copy_secs_per_gb: 0.0,
        notes: Vec::new(),
    }
}

/// Per tier the run plans, the most kernel scratch `dev` takes for one
/// node of a round of that many tokens at the end of the context.
fn scratch_per_tier(g: &Graph, dev: &dyn Device, run: &RunConfig) -> Vec<(usize, u64)> {
    let n_ctx = run.n_ctx;
    crate::tiers::planned(n_ctx.max(1), run.parallel)
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

/// The tiers at or below `max` a run of one sequence plans.
pub fn tiers_up_to(max: usize) -> Vec<usize> {
    crate::tiers::planned(max, 1)
}

/// A plan set of the given (tier, estimate) entries, each its own plan
/// index, over an empty layout (tests of tier choice and auditions).
#[cfg(test)]
pub(crate) fn test_set(tiers: &[(usize, f64)]) -> PlanSet {
    PlanSet {
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
                on_gpu: Vec::new(),
            })
            .collect(),
        ..placeholder_set()
    }
}
