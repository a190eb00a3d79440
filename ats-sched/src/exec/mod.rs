//! The executor: runs a plan as ordered steps across the machine's devices.
//!
//! Weights live in host memory, in the GPU's resident region, or are
//! streamed each round into temp slots shared by weights of the same role
//! across layers ([`SlotPlan`]). On devices with a transfer stream, weight
//! copies run there and events order them against the compute stream: a
//! copy into a slot waits for the kernel that last read the slot, and a
//! kernel waits for the copy of its weight. The host waits on a device only
//! when an activation moves from it to another device.

mod error;
mod layout_moves;
pub mod plan;
mod round;
pub mod schedule;
pub mod slots;
mod streams;

pub use error::ExecError;
pub use plan::{ExecPlan, WeightHome};
pub use schedule::{Schedule, Step};
pub use slots::{SlotKey, SlotPlan};

use streams::StreamPlan;

use std::collections::HashMap;
use std::sync::Arc;

use ats_core::device::{Buffer, HostMemory, KvType};
use ats_core::graph::{Graph, GraphInput, Op};
use ats_core::ledger::Region;
use ats_core::machine::{DeviceId, Machine, PerDevice};
use ats_core::round::Round;

/// Settings of an executor.
#[derive(Clone, Debug)]
pub struct ExecConfig {
    /// Rows each KV cache holds.
    pub kv_capacity: usize,
    /// Rows per KV block, for sequences whose tokens live in blocks.
    pub kv_block_tokens: usize,
    /// KV cache element type.
    pub kv_type: KvType,
    /// Temp slots per weight role on a device (2 = double buffering).
    pub slots_per_role: usize,
    /// Accounts every allocation of the executor (activations, temp slots,
    /// resident weights, KV caches) to this region instead of each one's own,
    /// so a phase such as the vision encoder shows its own peak.
    pub region: Option<Region>,
}

impl Default for ExecConfig {
    fn default() -> Self {
        ExecConfig {
            kv_capacity: 4096,
            kv_block_tokens: crate::session::KV_BLOCK_TOKENS,
            kv_type: KvType::F16,
            slots_per_role: 2,
            region: None,
        }
    }
}

impl ExecConfig {
    /// The region an allocation of kind `own` is accounted to.
    pub fn region_for(&self, own: Region) -> Region {
        self.region.unwrap_or(own)
    }
}

/// Wall time spent per node in the last round, for the cost model and the
/// re-scheduler. Only nodes on synchronous devices are timed individually.
#[derive(Clone, Debug, Default)]
pub struct RoundStats {
    /// `(node, device, seconds)` of nodes: timed on the host for synchronous
    /// devices, by the device's own timing events around each node for
    /// asynchronous ones (in-stream time, which includes any wait for the
    /// host to launch the kernel).
    pub node_secs: Vec<(usize, DeviceId, f64)>,
    /// `(device, bytes, seconds)` of weight copies an asynchronous device timed.
    pub async_copies: Vec<(DeviceId, u64, f64)>,
    /// `(weight, bytes, seconds)` of weight copies done synchronously.
    pub copy_secs: Vec<(usize, u64, f64)>,
    /// Activation bytes moved between devices.
    pub activation_bytes: u64,
    /// Device switches in the round.
    pub switches: usize,
    /// Wall time of the round.
    pub total_secs: f64,
}

/// One layer's KV cache and the device it lies on (which the plans say
/// only once a switch to them has succeeded).
struct KvPair {
    k: Buffer,
    v: Buffer,
    dev: DeviceId,
}

/// Runs rounds of one graph on a machine under a plan.
pub struct Executor {
    graph: Arc<Graph>,
    host_mem: Arc<dyn HostMemory>,
    machine: Machine,
    cfg: ExecConfig,
    /// The plans rounds can choose from (one per token tier); they share
    /// weight homes and KV devices.
    plans: Vec<ExecPlan>,
    /// GPU copies of resident weights.
    resident: Vec<Option<Buffer>>,
    /// The GPU's temp slots, shared by every plan.
    temp: Vec<Buffer>,
    /// Per plan: which temp slot each streamed weight uses.
    streams: Vec<Arc<StreamPlan>>,
    kv: Vec<KvPair>,
    act: PerDevice<Vec<Buffer>>,
    schedules: HashMap<(usize, usize, usize, bool), Arc<Schedule>>,
    last_stats: RoundStats,
    /// The last round's output, kept so that the next round reads into it
    /// (its allocation only grows): a fresh zeroed buffer a round (8 rows of SmolLM2's
    /// logits are 1.5 MiB) was a memset and an allocation the calling
    /// thread did while the others waited.
    output: Vec<f32>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Executor({} nodes on {:?})",
            self.graph.nodes.len(),
            self.machine
        )
    }
}

impl Executor {
    /// An executor for `graph` whose weights are read from `host_mem` (the
    /// model mapping; weight offsets are absolute in it), on `machine`.
    pub fn new(
        graph: Arc<Graph>,
        host_mem: Arc<dyn HostMemory>,
        machine: Machine,
        cfg: ExecConfig,
        plan: ExecPlan,
    ) -> Result<Executor, ExecError> {
        let mut ex = Executor {
            resident: vec![None; graph.weights.len()],
            temp: Vec::new(),
            streams: Vec::new(),
            kv: Vec::new(),
            act: PerDevice::default(),
            schedules: HashMap::new(),
            last_stats: RoundStats::default(),
            output: Vec::new(),
            plans: vec![ExecPlan::all_cpu(&graph)],
            graph,
            host_mem,
            machine,
            cfg,
        };
        ex.check_plan(&plan)?;
        // allocate the caches where the plan wants them, not on the CPU first
        ex.plans[0].kv_device = plan.kv_device.clone();
        ex.alloc_kv()?;
        ex.set_plans(vec![plan])?;
        Ok(ex)
    }

    /// The graph.
    pub fn graph(&self) -> &Arc<Graph> {
        &self.graph
    }

    /// The machine.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// The first (or only) plan.
    pub fn plan(&self) -> &ExecPlan {
        &self.plans[0]
    }

    /// Every plan rounds can choose from.
    pub fn plans(&self) -> &[ExecPlan] {
        &self.plans
    }

    /// Configuration.
    pub fn config(&self) -> &ExecConfig {
        &self.cfg
    }

    /// Statistics of the last round.
    pub fn last_stats(&self) -> &RoundStats {
        &self.last_stats
    }

    /// The device of role `d` (a plan that names a missing GPU is refused
    /// by [`Executor::check_plan`] before it gets here).
    fn device(&self, d: DeviceId) -> Result<&Arc<dyn ats_core::device::Device>, ExecError> {
        self.machine
            .get(d)
            .ok_or_else(|| ExecError::Plan(format!("the plan uses the {d}, the machine has none")))
    }

    fn alloc_kv(&mut self) -> Result<(), ExecError> {
        let et = self.cfg.kv_type.size();
        for (c, info) in self.graph.kv_caches.iter().enumerate() {
            let at = self.plans[0].kv_device[c];
            let dev = self.device(at)?;
            let bytes = self.cfg.kv_capacity * info.row_width() * et;
            let region = self.cfg.region_for(Region::Kv);
            let k = dev.alloc(region, bytes, &format!("kv.{}.k", info.layer))?;
            let v = dev.alloc(region, bytes, &format!("kv.{}.v", info.layer))?;
            self.kv.push(KvPair { k, v, dev: at });
        }
        Ok(())
    }

    /// Switches to a single new plan (see [`Executor::set_plans`]).
    pub fn set_plan(&mut self, plan: ExecPlan) -> Result<(), ExecError> {
        self.set_plans(vec![plan])
    }

    /// Switches to new plans (all with the same weight homes and KV devices):
    /// moves resident weights and KV caches (keeping their contents),
    /// re-assigns temp slots, and forgets cached schedules. The moves start
    /// from where weights and caches lie, not from what the current plans
    /// say, so after a switch that failed half-way (a refused allocation),
    /// switching to the current plans again puts everything back.
    pub fn set_plans(&mut self, plans: Vec<ExecPlan>) -> Result<(), ExecError> {
        let Some(first) = plans.first() else {
            return Err(ExecError::Plan("no plan given".into()));
        };
        for plan in &plans {
            self.check_plan(plan)?;
            if plan.weight_home != first.weight_home || plan.kv_device != first.kv_device {
                return Err(ExecError::Plan(
                    "plans of one executor must share weight homes and KV devices".into(),
                ));
            }
        }
        let (home, kv) = (first.weight_home.clone(), first.kv_device.clone());
        // free what moves away first, so the budget sees the new layout only
        self.schedules.clear();
        self.release_activations();
        self.temp.clear();
        self.drop_moved_weights(&home);
        self.move_kv(&kv)?;
        self.upload_resident(&home)?;
        self.plans = plans;
        self.plan_streams()?;
        Ok(())
    }

    fn check_plan(&self, plan: &ExecPlan) -> Result<(), ExecError> {
        let g = &self.graph;
        if plan.node_device.len() != g.nodes.len()
            || plan.weight_home.len() != g.weights.len()
            || plan.kv_device.len() != g.kv_caches.len()
        {
            return Err(ExecError::Plan("plan does not match the graph".into()));
        }
        if plan.uses_gpu() && !self.machine.has_gpu() {
            return Err(ExecError::Plan(
                "the plan uses a GPU and the machine has none".into(),
            ));
        }
        for (i, n) in g.nodes.iter().enumerate() {
            if let Op::Attention(a) = &n.op
                && let Some(c) = a.cache
                && plan.kv_device[c] != plan.node_device[i]
            {
                return Err(ExecError::Plan(format!(
                    "{} runs on the {} but its KV cache is on the {}",
                    n.name, plan.node_device[i], plan.kv_device[c]
                )));
            }
        }
        Ok(())
    }

    fn weight_bytes(&self, w: usize) -> &[u8] {
        let info = &self.graph.weights[w];
        &self.host_mem.bytes()[info.file_offset as usize..(info.file_offset + info.bytes) as usize]
    }

    /// The schedule of plan `p` for a round shape (cached).
    pub fn schedule(&mut self, p: usize, n_tokens: usize, n_outputs: usize) -> Arc<Schedule> {
        self.schedule_reading(p, n_tokens, n_outputs, false)
    }

    /// [`Executor::schedule`], reading back the hidden states when `hidden`
    /// ([`Schedule::build_reading`]).
    pub fn schedule_reading(
        &mut self,
        p: usize,
        n_tokens: usize,
        n_outputs: usize,
        hidden: bool,
    ) -> Arc<Schedule> {
        let key = (p, n_tokens, n_outputs, hidden);
        if let Some(s) = self.schedules.get(&key) {
            return s.clone();
        }
        let s = Arc::new(Schedule::build_reading(
            &self.graph,
            &self.plans[p],
            n_tokens,
            n_outputs,
            hidden,
        ));
        self.schedules.insert(key, s.clone());
        s
    }

    /// Makes sure every device's activation slots can hold this schedule.
    fn ensure_activations(&mut self, s: &Schedule) -> Result<(), ExecError> {
        for (d, sizes) in s.slot_bytes.iter() {
            let fits = sizes.len() <= self.act[d].len()
                && sizes.iter().zip(&self.act[d]).all(|(&n, b)| b.len() >= n);
            if fits {
                continue;
            }
            // release everything, then take exactly what this schedule needs:
            // the device's compute peak is then the largest schedule's, never
            // a mix of several schedules' largest slots
            self.act[d].clear();
            let dev = self.device(d)?.clone();
            let region = self.cfg.region_for(Region::Compute);
            for (i, &need) in sizes.iter().enumerate() {
                let b = dev.alloc(region, need, &format!("activation slot {i}"))?;
                self.act[d].push(b);
            }
        }
        Ok(())
    }

    /// Drops cached activation buffers (they are re-made on the next round).
    pub fn release_activations(&mut self) {
        for (_, b) in self.act.iter_mut() {
            b.clear();
        }
    }

    /// Runs one round with the first plan (see [`Executor::run_with`]).
    pub fn run(&mut self, round: &Arc<Round>) -> Result<&[f32], ExecError> {
        self.run_with(round, 0)
    }

    /// Runs one round with plan `p` and returns the graph output (`output rows x cols`, f32),
    /// which the executor keeps until the next round. The round runs inside
    /// the host device's context (its thread pool).
    pub fn run_with(&mut self, round: &Arc<Round>, p: usize) -> Result<&[f32], ExecError> {
        let host = self.machine.host().clone();
        let mut result = None;
        host.enter(&mut || result = Some(self.run_round(round, p)));
        result.unwrap_or_else(|| {
            Err(ExecError::Round(
                "the host device did not run the round".into(),
            ))
        })?;
        Ok(&self.output)
    }

    fn check_round(&self, round: &Round) -> Result<(), ExecError> {
        if round.n_rows == 0 {
            return Err(ExecError::Round("a round needs at least one row".into()));
        }
        if self.graph.input == GraphInput::Tokens && round.tokens.len() != round.n_rows {
            return Err(ExecError::Round(format!(
                "{} tokens for {} rows",
                round.tokens.len(),
                round.n_rows
            )));
        }
        if self.graph.kv_caches.is_empty() {
            return Ok(());
        }
        if round.seqs.is_empty() && round.past + round.n_rows > self.cfg.kv_capacity {
            return Err(ExecError::ContextFull {
                needed: round.past + round.n_rows,
                capacity: self.cfg.kv_capacity,
            });
        }
        round
            .check_spans(self.cfg.kv_block_tokens, self.cfg.kv_capacity)
            .map_err(ExecError::Round)?;
        Ok(())
    }

    /// Copies the first `rows` rows of every KV cache to the host (tests of
    /// re-planning, and KV moves).
    pub fn read_kv(&self, rows: usize) -> Result<Vec<Vec<u8>>, ExecError> {
        let et = self.cfg.kv_type.size();
        let mut out = Vec::new();
        for (c, info) in self.graph.kv_caches.iter().enumerate() {
            let n = rows * info.row_width() * et;
            let d = self.device(self.kv[c].dev)?;
            for b in [&self.kv[c].k, &self.kv[c].v] {
                let mut v = vec![0u8; n];
                d.read(b, 0, &mut v)?;
                out.push(v);
            }
        }
        Ok(out)
    }
}
