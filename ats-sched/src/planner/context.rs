//! What one planning pass works from: the graph's placement items, the cost
//! model, the run settings, what was learned by measurement, and the round
//! shapes and memory rules every layout and tier plan is judged by.

use ats_core::graph::Graph;
use ats_core::graph::cost::RoundShape;
use ats_core::machine::DeviceId;

use super::PlanKind;
use super::items::{Item, ItemCost, build_items, item_costs};
use super::policy::PolicyRules;
use crate::config::RunConfig;
use crate::exec::{ExecPlan, Schedule, SlotPlan, WeightHome};
use crate::profile::CostModel;

/// Decode rounds are estimated this deep into a sequence's context (its
/// share of the caches when several run): halfway, at most
/// this many tokens (a typical chat turn's depth; attention at the very end
/// of a long context would make every decode plan look attention-bound).
const DECODE_DEPTH_CAP: usize = 2048;

/// The shortest reference prompt a layout is judged by (or the whole
/// context, if shorter).
const MIN_REFERENCE_PROMPT: usize = 512;

/// Generated tokens of the reference workload a layout is chosen by, after
/// its prompt ([`Ctx::reference_prompt`]), unless the run states its own.
const REFERENCE_DECODE: usize = 128;

/// What the planner learned beyond the cost model.
pub(super) struct Learned<'a> {
    /// Per plan shape, a correction of its decode estimate (the audition).
    pub bias: &'a [(PlanKind, f64)],
    /// Per tier, the most kernel scratch one GPU node of such a round takes.
    pub scratch: &'a [(usize, u64)],
}

/// A planning pass's inputs.
pub(super) struct Ctx<'a> {
    pub g: &'a Graph,
    pub cost: &'a CostModel,
    pub run: &'a RunConfig,
    pub rules: PolicyRules,
    /// Use only this plan shape where the layout allows it (experiments).
    pub force_kind: Option<PlanKind>,
    pub items: Vec<Item>,
    pub host_nodes: Vec<usize>,
    pub kv_f16: bool,
    /// Per plan shape, a correction of its decode estimate learned by measuring it.
    pub bias: &'a [(PlanKind, f64)],
    /// Per tier, the most kernel scratch one GPU node of such a round takes
    /// (attention over the full context), ascending by tier.
    scratch: &'a [(usize, u64)],
    /// Per item: its weights may stream through temp slots.
    pub streamable: Vec<bool>,
}

impl<'a> Ctx<'a> {
    pub fn new(
        g: &'a Graph,
        cost: &'a CostModel,
        run: &'a RunConfig,
        force_kind: Option<PlanKind>,
        learned: &Learned<'a>,
    ) -> Ctx<'a> {
        let (items, host_nodes) = build_items(g, run.kv_rows(), run.kv_type.size());
        let streamable = streamable_items(g, &items, run.slots_per_role);
        Ctx {
            g,
            cost,
            run,
            rules: PolicyRules::of(run.policy),
            force_kind,
            items,
            host_nodes,
            kv_f16: run.kv_type == ats_core::device::KvType::F16,
            bias: learned.bias,
            scratch: learned.scratch,
            streamable,
        }
    }

    /// The round a decode plan is estimated at: halfway through the stated
    /// workload's generation, or through a sequence's context.
    pub fn decode_shape(&self) -> RoundShape {
        let past = match self.run.workload {
            Some(w) => w
                .depth
                .saturating_add(w.prompt)
                .saturating_add(w.generate / 2)
                .min(self.seq_ctx() - 1),
            None => (self.seq_ctx() / 2).min(DECODE_DEPTH_CAP),
        };
        RoundShape {
            n_tokens: 1,
            past,
            n_outputs: 1,
        }
    }

    /// Decode rounds of the reference workload.
    pub fn reference_decode(&self) -> f64 {
        self.run.workload.map_or(REFERENCE_DECODE, |w| w.generate) as f64
    }

    /// The round a tier's plan is estimated at: decode for tier 1, a round
    /// of one decode token per sequence for tiers up to the sequences that
    /// run at once, else a fresh prompt of `tier` tokens.
    pub fn shape(&self, tier: usize) -> RoundShape {
        if tier == 1 {
            return self.decode_shape();
        }
        if tier <= self.run.parallel {
            return RoundShape {
                n_tokens: tier,
                n_outputs: tier,
                ..self.decode_shape()
            };
        }
        RoundShape {
            n_tokens: tier,
            past: 0,
            n_outputs: self.outputs(tier),
        }
    }

    /// The reference workload's prompt: it fills the context to the depth
    /// decode is estimated at (half, at most [`DECODE_DEPTH_CAP`]), at least
    /// [`MIN_REFERENCE_PROMPT`] tokens. A fixed short prompt could not tell
    /// layouts apart by what long prompts cost them (KV caches on the host).
    pub fn reference_prompt(&self) -> usize {
        match self.run.workload {
            // at least a token: a prompt's plans are still made
            Some(w) => w.prompt.clamp(1, self.seq_ctx()),
            None => self
                .decode_shape()
                .past
                .max(MIN_REFERENCE_PROMPT)
                .min(self.seq_ctx()),
        }
    }

    /// The context one sequence is expected to use: its share when
    /// `parallel` sequences share the caches.
    fn seq_ctx(&self) -> usize {
        (self.run.n_ctx / self.run.parallel.max(1)).max(1)
    }

    /// One round of the reference prompt cut into chunks of up to `tier`
    /// tokens, at the chunks' mean depth: `(round, rounds)`.
    pub fn reference_chunk(&self, tier: usize) -> (RoundShape, usize) {
        let prompt = self.reference_prompt();
        let chunk = tier.clamp(1, prompt);
        let rounds = prompt.div_ceil(chunk);
        let depth = self.run.workload.map_or(0, |w| w.depth);
        let shape = RoundShape {
            n_tokens: chunk,
            past: depth
                .saturating_add((rounds - 1) * chunk / 2)
                .min(self.seq_ctx() - 1),
            n_outputs: self.outputs(chunk),
        };
        (shape, rounds)
    }

    /// Output rows of a round of `tier` tokens.
    pub fn outputs(&self, tier: usize) -> usize {
        if self.run.all_logits { tier } else { 1 }
    }

    pub fn costs(&self, shape: RoundShape) -> Vec<ItemCost> {
        item_costs(self.g, &self.items, self.cost, shape, self.kv_f16, true)
    }

    /// The GPU kernel scratch of a round of up to `tier` tokens.
    pub fn scratch(&self, tier: usize) -> u64 {
        self.scratch
            .iter()
            .filter(|s| s.0 <= tier)
            .map(|s| s.1)
            .max()
            .unwrap_or(0)
    }

    /// GPU bytes of activations and kernel scratch for a round of `tier`
    /// tokens under `plan`.
    pub fn compute_bytes(&self, plan: &ExecPlan, tier: usize) -> u64 {
        Schedule::build(self.g, plan, tier, self.outputs(tier)).compute_bytes(DeviceId::Gpu) as u64
            + self.scratch(tier)
    }

    /// GPU activation bytes for a round of `tier` tokens with every item on
    /// the GPU (an upper bound).
    pub fn compute_reserve(&self, tier: usize) -> u64 {
        let mut node_device = vec![DeviceId::Gpu; self.g.nodes.len()];
        for &n in &self.host_nodes {
            node_device[n] = DeviceId::Host;
        }
        let plan = ExecPlan {
            node_device,
            weight_home: vec![WeightHome::Host; self.g.weights.len()],
            kv_device: vec![DeviceId::Gpu; self.g.kv_caches.len()],
        };
        self.compute_bytes(&plan, tier)
    }

    /// The temp slots for streaming the non-resident streamable items.
    pub fn slots(&self, resident: &[bool]) -> SlotPlan {
        let streamed: Vec<usize> = self
            .items
            .iter()
            .zip(resident)
            .enumerate()
            .filter(|(i, (_, r))| !**r && self.streamable[*i])
            .flat_map(|(_, (it, _))| it.weights.iter().copied())
            .collect();
        SlotPlan::new(self.g, &streamed, self.run.slots_per_role)
    }

    /// The plan with `on_gpu` items on the GPU, `resident` ones there to stay.
    pub fn exec_plan(&self, resident: &[bool], on_gpu: &[bool]) -> ExecPlan {
        let mut p = ExecPlan::all_cpu(self.g);
        for (i, it) in self.items.iter().enumerate() {
            if on_gpu[i] {
                for &n in &it.nodes {
                    p.node_device[n] = DeviceId::Gpu;
                }
            }
            if resident[i] {
                for &w in &it.weights {
                    p.weight_home[w] = WeightHome::Resident;
                }
                if let Some(c) = it.kv {
                    p.kv_device[c] = DeviceId::Gpu;
                }
            }
        }
        p
    }

    /// Bytes of the resident items.
    pub fn held_bytes(&self, resident: &[bool]) -> u64 {
        self.items
            .iter()
            .zip(resident)
            .filter(|x| *x.1)
            .map(|x| x.0.bytes())
            .sum()
    }
}

/// Which items may stream. A role with no more weights than slots would
/// hold each of them in a slot of its own: as much memory as keeping them
/// resident, plus a copy every round (the output projection is one such
/// role). Such weights are resident or stay on the host, never streamed.
fn streamable_items(g: &Graph, items: &[Item], slots_per_role: usize) -> Vec<bool> {
    let roles = g.weight_roles();
    let mut uses: std::collections::HashMap<ats_core::graph::WeightRole, usize> =
        std::collections::HashMap::new();
    for it in items.iter().filter(|it| it.streamable()) {
        for &w in &it.weights {
            *uses.entry(roles[w]).or_default() += 1;
        }
    }
    let slots = slots_per_role.max(1);
    items
        .iter()
        .map(|it| it.streamable() && it.weights.iter().all(|&w| uses[&roles[w]] > slots))
        .collect()
}
