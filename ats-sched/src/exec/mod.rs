//! The executor: runs a plan as ordered steps across devices.
//!
//! Weights live in host memory, in a device's resident region, or are
//! streamed each round into temp slots shared by weights of the same role
//! across layers. On devices with a transfer stream, weight copies run there
//! and events order them against the compute stream: a copy into a slot
//! waits for the kernel that last read the slot, and a kernel waits for the
//! copy of its weight. The host waits on a device only when an activation
//! moves from it to another device.

mod error;
pub mod plan;
pub mod schedule;
mod streams;

pub use error::ExecError;
pub use plan::{ExecPlan, WeightHome, weight_role};
pub use schedule::{Schedule, Step};

use streams::StreamPlan;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use ats_core::device::{
    Buffer, Device, Event, HostMemory, KvArg, KvType, NodeArgs, Stream, WeightArg,
};
use ats_core::graph::{Graph, GraphInput, Op};
use ats_core::ledger::Region;
use ats_core::round::Round;

/// Settings of an executor.
#[derive(Clone, Debug)]
pub struct ExecConfig {
    /// Tokens each KV cache holds.
    pub kv_capacity: usize,
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
    /// devices (and all devices under `profile_nodes`), by the device's own
    /// timing events around each node for asynchronous ones (in-stream time,
    /// which includes any wait for the host to launch the kernel).
    pub node_secs: Vec<(usize, usize, f64)>,
    /// `(device, bytes, seconds)` of weight copies an asynchronous device timed.
    pub async_copies: Vec<(usize, u64, f64)>,
    /// `(weight, bytes, seconds)` of weight copies done synchronously.
    pub copy_secs: Vec<(usize, u64, f64)>,
    /// Activation bytes moved between devices.
    pub activation_bytes: u64,
    /// Device switches in the round.
    pub switches: usize,
    /// Wall time of the round.
    pub total_secs: f64,
}

struct KvPair {
    k: Buffer,
    v: Buffer,
}

/// Runs rounds of one graph on a set of devices under a plan.
pub struct Executor {
    graph: Arc<Graph>,
    host: Arc<dyn HostMemory>,
    devices: Vec<Arc<dyn Device>>,
    cfg: ExecConfig,
    /// The plans rounds can choose from (one per token tier); they share
    /// weight homes and KV devices.
    plans: Vec<ExecPlan>,
    resident: Vec<Option<Buffer>>,
    /// Temp slot buffers per device, shared by every plan.
    temp: Vec<Vec<Buffer>>,
    /// Per plan: which temp slot each streamed weight uses.
    streams: Vec<StreamPlan>,
    kv: Vec<KvPair>,
    act: Vec<Vec<Buffer>>,
    schedules: HashMap<(usize, usize, usize), Arc<Schedule>>,
    last_stats: RoundStats,
    /// Synchronise after every node and time it on the host (profiling:
    /// costs a wait per node, so only micro-benchmarks turn it on).
    pub profile_nodes: bool,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Executor({} nodes, {} devices)",
            self.graph.nodes.len(),
            self.devices.len()
        )
    }
}

impl Executor {
    /// An executor for `graph` whose weights are read from `host` (the model
    /// mapping; weight offsets are absolute in it), on `devices` (0 is the host CPU).
    pub fn new(
        graph: Arc<Graph>,
        host: Arc<dyn HostMemory>,
        devices: Vec<Arc<dyn Device>>,
        cfg: ExecConfig,
        plan: ExecPlan,
    ) -> Result<Executor, ExecError> {
        let mut ex = Executor {
            resident: vec![None; graph.weights.len()],
            temp: vec![Vec::new(); devices.len()],
            streams: Vec::new(),
            kv: Vec::new(),
            act: vec![Vec::new(); devices.len()],
            schedules: HashMap::new(),
            last_stats: RoundStats::default(),
            profile_nodes: false,
            plans: vec![ExecPlan::all_cpu(&graph)],
            graph,
            host,
            devices,
            cfg,
        };
        if plan.kv_device.len() == ex.graph.kv_caches.len()
            && plan.kv_device.iter().all(|&d| d < ex.devices.len())
        {
            // allocate the caches where the plan wants them, not on the CPU first
            ex.plans[0].kv_device = plan.kv_device.clone();
        }
        ex.alloc_kv()?;
        ex.set_plans(vec![plan])?;
        Ok(ex)
    }

    /// The graph.
    pub fn graph(&self) -> &Arc<Graph> {
        &self.graph
    }

    /// The devices.
    pub fn devices(&self) -> &[Arc<dyn Device>] {
        &self.devices
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

    fn alloc_kv(&mut self) -> Result<(), ExecError> {
        let et = self.cfg.kv_type.size();
        for (c, info) in self.graph.kv_caches.iter().enumerate() {
            let d = self.plans[0].kv_device[c];
            let bytes = self.cfg.kv_capacity * info.row_width() * et;
            let dev = &self.devices[d];
            let k = dev.alloc(
                self.cfg.region_for(Region::Kv),
                bytes,
                &format!("kv.{}.k", info.layer),
            )?;
            let v = dev.alloc(
                self.cfg.region_for(Region::Kv),
                bytes,
                &format!("kv.{}.v", info.layer),
            )?;
            self.kv.push(KvPair { k, v });
        }
        Ok(())
    }

    /// Switches to a single new plan (see [`Executor::set_plans`]).
    pub fn set_plan(&mut self, plan: ExecPlan) -> Result<(), ExecError> {
        self.set_plans(vec![plan])
    }

    /// Switches to new plans (all with the same weight homes and KV devices):
    /// moves resident weights and KV caches (keeping their contents),
    /// re-assigns temp slots, and forgets cached schedules.
    pub fn set_plans(&mut self, plans: Vec<ExecPlan>) -> Result<(), ExecError> {
        let g = self.graph.clone();
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
        let (old_home, old_kv) = (
            self.plans[0].weight_home.clone(),
            self.plans[0].kv_device.clone(),
        );
        // free what moves away first, so the budget sees the new layout only
        self.schedules.clear();
        for b in &mut self.act {
            b.clear();
        }
        for t in &mut self.temp {
            t.clear();
        }
        for (w, home) in first.weight_home.iter().enumerate() {
            if *home != old_home[w] {
                self.resident[w] = None;
            }
        }
        // KV caches that move: copy through the host
        for (c, &from) in old_kv.iter().enumerate().take(g.kv_caches.len()) {
            let to = first.kv_device[c];
            if from == to {
                continue;
            }
            let layer = g.kv_caches[c].layer;
            let (src, dst) = (&self.devices[from], &self.devices[to]);
            let mut host_k = vec![0u8; self.kv[c].k.len()];
            let mut host_v = vec![0u8; self.kv[c].v.len()];
            src.read(&self.kv[c].k, 0, &mut host_k)?;
            src.read(&self.kv[c].v, 0, &mut host_v)?;
            // release the old copies before reserving the new ones
            let placeholder = KvPair {
                k: self.devices[0].alloc(self.cfg.region_for(Region::Kv), 0, "kv placeholder")?,
                v: self.devices[0].alloc(self.cfg.region_for(Region::Kv), 0, "kv placeholder")?,
            };
            self.kv[c] = placeholder;
            let nk = dst.alloc(
                self.cfg.region_for(Region::Kv),
                host_k.len(),
                &format!("kv.{layer}.k"),
            )?;
            dst.write(&nk, 0, &host_k)?;
            let nv = dst.alloc(
                self.cfg.region_for(Region::Kv),
                host_v.len(),
                &format!("kv.{layer}.v"),
            )?;
            dst.write(&nv, 0, &host_v)?;
            self.kv[c] = KvPair { k: nk, v: nv };
        }
        for (w, home) in first.weight_home.iter().enumerate() {
            if let WeightHome::Resident(d) = *home
                && self.resident[w].is_none()
            {
                let info = &g.weights[w];
                let dev = &self.devices[d];
                let buf = dev.alloc(
                    self.cfg.region_for(Region::Resident),
                    info.bytes as usize,
                    &info.name,
                )?;
                dev.write(&buf, 0, self.weight_bytes(w))?;
                self.resident[w] = Some(buf);
            }
        }
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
        let bad_home = plan
            .weight_home
            .iter()
            .any(|h| matches!(h, WeightHome::Resident(d) if *d >= self.devices.len()));
        if bad_home
            || plan
                .node_device
                .iter()
                .chain(&plan.kv_device)
                .any(|&d| d >= self.devices.len())
        {
            return Err(ExecError::Plan(format!(
                "plan names a device beyond the {} given",
                self.devices.len()
            )));
        }
        for (i, n) in g.nodes.iter().enumerate() {
            if let Op::Attention(a) = &n.op
                && let Some(c) = a.cache
                && plan.kv_device[c] != plan.node_device[i]
            {
                return Err(ExecError::Plan(format!(
                    "{} runs on device {} but its KV cache is on device {}",
                    n.name, plan.node_device[i], plan.kv_device[c]
                )));
            }
        }
        Ok(())
    }

    fn weight_bytes(&self, w: usize) -> &[u8] {
        let info = &self.graph.weights[w];
        &self.host.bytes()[info.file_offset as usize..(info.file_offset + info.bytes) as usize]
    }

    /// The schedule of plan `p` for a round shape (cached).
    pub fn schedule(&mut self, p: usize, n_tokens: usize, n_outputs: usize) -> Arc<Schedule> {
        let key = (p, n_tokens, n_outputs);
        if let Some(s) = self.schedules.get(&key) {
            return s.clone();
        }
        let s = Arc::new(Schedule::build(
            &self.graph,
            &self.plans[p],
            self.devices.len(),
            n_tokens,
            n_outputs,
        ));
        self.schedules.insert(key, s.clone());
        s
    }

    /// Makes sure every device's activation slots can hold this schedule.
    fn ensure_activations(&mut self, s: &Schedule) -> Result<(), ExecError> {
        for (d, sizes) in s.slot_bytes.iter().enumerate() {
            let bufs = &mut self.act[d];
            let fits = sizes.len() <= bufs.len()
                && sizes.iter().zip(bufs.iter()).all(|(&n, b)| b.len() >= n);
            if fits {
                continue;
            }
            // release everything, then take exactly what this schedule needs:
            // the device's compute peak is then the largest schedule's, never
            // a mix of several schedules' largest slots
            bufs.clear();
            for (i, &need) in sizes.iter().enumerate() {
                bufs.push(self.devices[d].alloc(
                    self.cfg.region_for(Region::Compute),
                    need,
                    &format!("activation slot {i}"),
                )?);
            }
        }
        Ok(())
    }

    /// Drops cached activation buffers (they are re-made on the next round).
    pub fn release_activations(&mut self) {
        for b in &mut self.act {
            b.clear();
        }
    }

    /// Runs one round with the first plan (see [`Executor::run_with`]).
    pub fn run(&mut self, round: &Arc<Round>) -> Result<Vec<f32>, ExecError> {
        self.run_with(round, 0)
    }

    /// Runs one round with plan `p` and returns the graph output (`output rows x cols`, f32).
    /// The round runs inside the host device's context (its thread pool).
    pub fn run_with(&mut self, round: &Arc<Round>, p: usize) -> Result<Vec<f32>, ExecError> {
        let host = self.devices[0].clone();
        let mut result = None;
        host.enter(&mut || result = Some(self.run_inner(round, p)));
        result.unwrap_or_else(|| {
            Err(ExecError::Round(
                "the host device did not run the round".into(),
            ))
        })
    }

    fn run_inner(&mut self, round: &Arc<Round>, p: usize) -> Result<Vec<f32>, ExecError> {
        let t0 = Instant::now();
        let g = self.graph.clone();
        self.check_round(round)?;
        if p >= self.plans.len() {
            return Err(ExecError::Plan(format!("plan {p} of {}", self.plans.len())));
        }
        let s = self.schedule(p, round.n_rows, round.output_rows.len());
        self.ensure_activations(&s)?;
        let buf = |ex: &Executor, inst: usize| -> Buffer {
            let i = &s.instances[inst];
            ex.act[i.device][i.slot].clone()
        };
        let mut stats = RoundStats {
            switches: 0,
            ..RoundStats::default()
        };
        if let (Some(i), Some(rows)) = (s.input, &round.input_rows) {
            let inst = s.instances[i];
            let bytes: &[u8] = bytemuck_f32(rows);
            if bytes.len() < inst.bytes {
                return Err(ExecError::Round(format!(
                    "{} input bytes, the graph needs {}",
                    bytes.len(),
                    inst.bytes
                )));
            }
            self.devices[inst.device].write(&buf(self, i), 0, &bytes[..inst.bytes])?;
        }

        // weight streaming state for this round
        let mut ready: HashMap<(usize, usize), Option<Event>> = HashMap::new();
        // expert weights whose slot is free but whose routing is not known yet
        let mut deferred: HashMap<(usize, usize), (usize, Option<Event>)> = HashMap::new();
        let streams = self.streams[p].clone();
        let mut next_in_slot: Vec<Vec<VecDeque<usize>>> = streams
            .queue
            .iter()
            .map(|slots| slots.iter().map(|q| q.iter().copied().collect()).collect())
            .collect();
        for d in 0..self.devices.len() {
            for slot in 0..next_in_slot[d].len() {
                self.issue_copy(
                    d,
                    slot,
                    &streams,
                    &mut next_in_slot,
                    &mut ready,
                    &mut deferred,
                    None,
                    &mut stats,
                )?;
            }
        }

        let mut host_tmp: Vec<u8> = Vec::new();
        let mut prev_dev = usize::MAX;
        for step in &s.steps {
            match step {
                Step::Copy { from, to } => {
                    let (a, b) = (s.instances[*from], s.instances[*to]);
                    host_tmp.resize(a.bytes, 0);
                    self.devices[a.device].read(&buf(self, *from), 0, &mut host_tmp)?;
                    self.devices[b.device].write(&buf(self, *to), 0, &host_tmp)?;
                    stats.activation_bytes += a.bytes as u64;
                }
                Step::Run {
                    node,
                    device,
                    inputs,
                    output,
                } => {
                    let d = *device;
                    if prev_dev != usize::MAX && prev_dev != d {
                        stats.switches += 1;
                    }
                    prev_dev = d;
                    let n = &g.nodes[*node];
                    let dev = self.devices[d].clone();
                    // streamed weights: the compute stream waits for their copies
                    for &w in &n.weights {
                        if let Some(Some(ev)) = ready.get(&(d, w)) {
                            dev.wait_event(Stream::Compute, ev)?;
                        }
                    }
                    let in_bufs: Vec<Buffer> = inputs.iter().map(|&i| buf(self, i)).collect();
                    let out_buf = buf(self, *output);
                    let weights: Vec<WeightArg<'_>> = n
                        .weights
                        .iter()
                        .map(|&w| WeightArg {
                            info: &g.weights[w],
                            data: self.weight_data(&streams, d, w),
                        })
                        .collect();
                    let kv = match &n.op {
                        Op::Attention(a) => a.cache.map(|c| KvArg {
                            k: &self.kv[c].k,
                            v: &self.kv[c].v,
                            capacity: self.cfg.kv_capacity,
                            dtype: self.cfg.kv_type,
                        }),
                        _ => None,
                    };
                    let args = NodeArgs {
                        graph: &g,
                        node_id: *node,
                        node: n,
                        round,
                        inputs: &in_bufs,
                        output: &out_buf,
                        weights: &weights,
                        kv,
                    };
                    let t = Instant::now();
                    dev.run(&args)?;
                    if self.profile_nodes {
                        dev.synchronize()?;
                    }
                    if self.profile_nodes || !dev.supports_async() {
                        stats.node_secs.push((*node, d, t.elapsed().as_secs_f64()));
                    }
                    // slots whose last reader just ran can take their next weight
                    for &w in &n.weights {
                        if streams.last_reader.get(&(d, w)) == Some(node) {
                            let slot = streams.slot_of[&(d, w)];
                            let freed = if dev.supports_async() {
                                Some(dev.record_event(Stream::Compute)?)
                            } else {
                                None
                            };
                            self.issue_copy(
                                d,
                                slot,
                                &streams,
                                &mut next_in_slot,
                                &mut ready,
                                &mut deferred,
                                freed,
                                &mut stats,
                            )?;
                        }
                    }
                    // routing known: copy the experts it selects
                    if let Some(list) = streams.after_router.get(node) {
                        for &(gd, w, top_k) in list {
                            let (slot, freed) = deferred.remove(&(gd, w)).ok_or_else(|| {
                                ExecError::Plan(format!(
                                    "expert weight {} has no free slot when its routing is ready",
                                    g.weights[w].name
                                ))
                            })?;
                            let ev = self.copy_routed(
                                d,
                                gd,
                                slot,
                                w,
                                &out_buf,
                                round.n_rows,
                                top_k,
                                freed,
                                &mut stats,
                            )?;
                            ready.insert((gd, w), ev);
                        }
                    }
                }
            }
        }
        let out = s.instances[s.output];
        let mut bytes = vec![0u8; out.bytes];
        self.devices[out.device].read(&buf(self, s.output), 0, &mut bytes)?;
        for d in &self.devices {
            d.synchronize()?;
        }
        stats.total_secs = t0.elapsed().as_secs_f64();
        // the round is complete: its device-timed spans can be read
        for (d, dev) in self.devices.iter().enumerate() {
            if !dev.supports_async() {
                continue;
            }
            let t = dev.drain_timings();
            if self.profile_nodes {
                continue; // the host timed these nodes already
            }
            stats
                .node_secs
                .extend(t.nodes.into_iter().map(|(n, s)| (n, d, s)));
            stats
                .async_copies
                .extend(t.copies.into_iter().map(|(b, s)| (d, b, s)));
        }
        self.last_stats = stats;
        Ok(bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
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
        if !self.graph.kv_caches.is_empty() && round.past + round.n_rows > self.cfg.kv_capacity {
            return Err(ExecError::ContextFull {
                needed: round.past + round.n_rows,
                capacity: self.cfg.kv_capacity,
            });
        }
        Ok(())
    }

    /// Copies the first `rows` rows of every KV cache to the host (tests of
    /// re-planning, and KV moves).
    pub fn read_kv(&self, rows: usize) -> Result<Vec<Vec<u8>>, ExecError> {
        let et = self.cfg.kv_type.size();
        let mut out = Vec::new();
        for (c, info) in self.graph.kv_caches.iter().enumerate() {
            let n = rows * info.row_width() * et;
            let d = &self.devices[self.plans[0].kv_device[c]];
            for b in [&self.kv[c].k, &self.kv[c].v] {
                let mut v = vec![0u8; n];
                d.read(b, 0, &mut v)?;
                out.push(v);
            }
        }
        Ok(out)
    }
}

fn bytemuck_f32(v: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and any byte pattern is a valid u8; the
    // slice covers exactly the f32s' memory.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}
