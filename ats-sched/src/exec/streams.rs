//! Weight streaming: which temp slot each streamed weight takes (the
//! [`SlotPlan`] rule), and the copies into those slots, ordered against the
//! kernels that read them (a copy waits for the slot's last reader; routed
//! experts wait for their router and copy only the experts it chose).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use ats_core::device::{Buffer, Device, Event, HostBytes, Stream, WeightData};
use ats_core::graph::{NodeId, Op, WeightId};
use ats_core::ledger::Region;
use ats_core::machine::DeviceId;

use super::{ExecError, ExecPlan, Executor, RoundStats, SlotKey, SlotPlan, WeightHome};

/// How one plan streams weights to the GPU.
#[derive(Clone, Debug, Default)]
pub(super) struct StreamPlan {
    /// The executor's temp buffer of each streamed weight.
    pub(super) buffer_of: HashMap<WeightId, usize>,
    /// Per temp buffer: the streamed weights in order of use.
    pub(super) queue: Vec<Vec<WeightId>>,
    /// Per streamed weight: the last GPU node reading it.
    pub(super) last_reader: HashMap<WeightId, NodeId>,
    /// Streamed expert weights, copied only once their layer's routing is
    /// known: `router node -> [(weight, top_k)]`.
    pub(super) after_router: HashMap<NodeId, Vec<(WeightId, usize)>>,
}

impl StreamPlan {
    fn is_routed(&self, w: WeightId) -> bool {
        self.after_router.values().flatten().any(|&(x, _)| x == w)
    }
}

/// The weights `plan` streams to the GPU, in order of use, and each one's
/// last reader there.
fn streamed_weights(
    g: &ats_core::graph::Graph,
    plan: &ExecPlan,
) -> (Vec<WeightId>, HashMap<WeightId, NodeId>) {
    let mut order = Vec::new();
    let mut last_reader = HashMap::new();
    for (ni, n) in g.nodes.iter().enumerate() {
        if plan.node_device[ni] != DeviceId::Gpu {
            continue;
        }
        for &w in &n.weights {
            if plan.weight_home[w] == WeightHome::Host && last_reader.insert(w, ni).is_none() {
                order.push(w);
            }
        }
    }
    (order, last_reader)
}

/// Routed expert weights of GPU nodes that stream, keyed by their router.
fn routed_after(
    g: &ats_core::graph::Graph,
    plan: &ExecPlan,
    streamed: &HashMap<WeightId, NodeId>,
) -> HashMap<NodeId, Vec<(WeightId, usize)>> {
    let producers = g.producers();
    let mut out: HashMap<NodeId, Vec<(WeightId, usize)>> = HashMap::new();
    for (ni, n) in g.nodes.iter().enumerate() {
        let Op::MoeExperts { top_k, .. } = n.op else {
            continue;
        };
        if plan.node_device[ni] != DeviceId::Gpu {
            continue;
        }
        let Some(router) = n.inputs.get(1).and_then(|&v| producers[v]) else {
            continue;
        };
        // stacked expert matrices copy only the routed experts; per-expert
        // biases (`[n_expert, out]`, one matrix) are small and copy whole
        for &w in n
            .weights
            .iter()
            .filter(|&&w| streamed.contains_key(&w) && g.weights[w].n_mats() > 1)
        {
            out.entry(router).or_default().push((w, top_k));
        }
    }
    out
}

/// What one round's streaming has done so far.
pub(super) struct RoundStreams {
    plan: Arc<StreamPlan>,
    /// Per temp buffer: the weights still to copy into it.
    next: Vec<VecDeque<WeightId>>,
    /// Copied weights, with the event their readers wait for.
    ready: HashMap<WeightId, Option<Event>>,
    /// Expert weights whose slot is free but whose routing is not known yet.
    deferred: HashMap<WeightId, (usize, Option<Event>)>,
}

impl Executor {
    /// Assigns streamed weights to temp slots (for every plan) and allocates
    /// the slots on the GPU, shared across plans: a slot of a role and turn
    /// is one buffer, as large as the largest any plan needs.
    pub(super) fn plan_streams(&mut self) -> Result<(), ExecError> {
        let g = self.graph.clone();
        let mut buffers: Vec<(SlotKey, u64)> = Vec::new();
        let mut all = Vec::with_capacity(self.plans.len());
        for plan in &self.plans {
            let (order, last_reader) = streamed_weights(&g, plan);
            let slots = SlotPlan::new(&g, &order, self.cfg.slots_per_role);
            let mut buffer_of = HashMap::new();
            let mut queue = vec![Vec::new(); buffers.len()];
            for (s, &(key, bytes)) in slots.slots.iter().enumerate() {
                let b = match buffers.iter().position(|x| x.0 == key) {
                    Some(b) => b,
                    None => {
                        buffers.push((key, 0));
                        queue.push(Vec::new());
                        buffers.len() - 1
                    }
                };
                buffers[b].1 = buffers[b].1.max(bytes);
                queue.resize(buffers.len(), Vec::new());
                queue[b] = slots.queue[s].clone();
                for &w in &slots.queue[s] {
                    buffer_of.insert(w, b);
                }
            }
            let after_router = routed_after(&g, plan, &last_reader);
            all.push(Arc::new(StreamPlan {
                buffer_of,
                queue,
                last_reader,
                after_router,
            }));
        }
        self.temp = match self.machine.gpu() {
            Some(gpu) => buffers
                .iter()
                .enumerate()
                .map(|(i, &(_, b))| {
                    gpu.alloc(
                        self.cfg.region_for(Region::Temp),
                        b as usize,
                        &format!("temp slot {i}"),
                    )
                })
                .collect::<Result<_, _>>()?,
            None => Vec::new(),
        };
        self.streams = all;
        Ok(())
    }

    /// The streaming state of a round of plan `p`, with the first copy of
    /// every slot issued.
    pub(super) fn start_streams(
        &self,
        p: usize,
        stats: &mut RoundStats,
    ) -> Result<RoundStreams, ExecError> {
        let plan = self.streams[p].clone();
        let mut rs = RoundStreams {
            next: plan
                .queue
                .iter()
                .map(|q| q.iter().copied().collect())
                .collect(),
            plan,
            ready: HashMap::new(),
            deferred: HashMap::new(),
        };
        for slot in 0..rs.next.len() {
            self.issue_copy(slot, &mut rs, None, stats)?;
        }
        Ok(rs)
    }

    /// Makes the GPU's compute stream wait for the copies of `node`'s weights.
    pub(super) fn wait_for_weights(
        &self,
        dev: &dyn Device,
        node: NodeId,
        rs: &RoundStreams,
    ) -> Result<(), ExecError> {
        for w in &self.graph.nodes[node].weights {
            if let Some(Some(ev)) = rs.ready.get(w) {
                dev.wait_event(Stream::Compute, ev)?;
            }
        }
        Ok(())
    }

    /// After a GPU node ran: its slots whose last reader it was take their
    /// next weight, and the experts a router just chose are copied.
    pub(super) fn after_gpu_node(
        &self,
        node: NodeId,
        output: &Buffer,
        rows: usize,
        rs: &mut RoundStreams,
        stats: &mut RoundStats,
    ) -> Result<(), ExecError> {
        let gpu = self.device(DeviceId::Gpu)?;
        for w in &self.graph.nodes[node].weights {
            if rs.plan.last_reader.get(w) == Some(&node) {
                let slot = rs.plan.buffer_of[w];
                let freed = if gpu.supports_async() {
                    Some(gpu.record_event(Stream::Compute)?)
                } else {
                    None
                };
                self.issue_copy(slot, rs, freed, stats)?;
            }
        }
        self.copy_routed_after(node, DeviceId::Gpu, output, rows, rs, stats)
    }

    /// Copies the experts router `node` (which ran on `router_dev`) selected.
    pub(super) fn copy_routed_after(
        &self,
        node: NodeId,
        router_dev: DeviceId,
        routing: &Buffer,
        rows: usize,
        rs: &mut RoundStreams,
        stats: &mut RoundStats,
    ) -> Result<(), ExecError> {
        let Some(list) = rs.plan.after_router.get(&node).cloned() else {
            return Ok(());
        };
        for (w, top_k) in list {
            let (slot, freed) = rs.deferred.remove(&w).ok_or_else(|| {
                ExecError::Plan(format!(
                    "expert weight {} has no free slot when its routing is ready",
                    self.graph.weights[w].name
                ))
            })?;
            let routed = Routed {
                router_dev,
                slot,
                w,
                routing,
                rows,
                top_k,
            };
            let ev = self.copy_routed(&routed, freed, stats)?;
            rs.ready.insert(w, ev);
        }
        Ok(())
    }

    /// Starts the copy of the next weight queued for `slot`, after `freed`
    /// (the event of the kernel that last read the slot).
    fn issue_copy(
        &self,
        slot: usize,
        rs: &mut RoundStreams,
        freed: Option<Event>,
        stats: &mut RoundStats,
    ) -> Result<(), ExecError> {
        let Some(w) = rs.next[slot].pop_front() else {
            return Ok(());
        };
        if rs.plan.is_routed(w) {
            rs.deferred.insert(w, (slot, freed));
            return Ok(());
        }
        let dev = self.device(DeviceId::Gpu)?;
        let info = &self.graph.weights[w];
        let dst = &self.temp[slot];
        if dev.supports_async() {
            if let Some(ev) = &freed {
                dev.wait_event(Stream::Transfer, ev)?;
            }
            dev.copy_async(dst, 0, &self.host_range(w))?;
            rs.ready
                .insert(w, Some(dev.record_event(Stream::Transfer)?));
        } else {
            let t = self.machine.now();
            dev.write(dst, 0, self.weight_bytes(w))?;
            stats
                .copy_secs
                .push((w, info.bytes, self.machine.now() - t));
            rs.ready.insert(w, None);
        }
        Ok(())
    }

    /// Weight `w`'s bytes in the host mapping.
    fn host_range(&self, w: WeightId) -> HostBytes {
        let info = &self.graph.weights[w];
        HostBytes {
            owner: self.host_mem.clone(),
            offset: info.file_offset as usize,
            len: info.bytes as usize,
        }
    }

    /// Copies the experts a router selected into the weight's GPU slot: from
    /// the host's copy of the routing when the router ran on the CPU, with a
    /// device-side routed copy when it ran on the GPU (no host readback).
    /// Returns the copy's event.
    fn copy_routed(
        &self,
        r: &Routed<'_>,
        freed: Option<Event>,
        stats: &mut RoundStats,
    ) -> Result<Option<Event>, ExecError> {
        let dev = self.device(DeviceId::Gpu)?;
        let t = self.machine.now();
        if r.router_dev == DeviceId::Host {
            let bytes = self.copy_experts_chosen_on_host(dev.as_ref(), r, freed.as_ref())?;
            if !dev.supports_async() {
                stats.copy_secs.push((r.w, bytes, self.machine.now() - t));
                return Ok(None);
            }
            return Ok(Some(dev.record_event(Stream::Transfer)?));
        }
        let full = self.host_range(r.w);
        if !dev.supports_async() {
            dev.write(&self.temp[r.slot], 0, full.bytes())?;
            stats
                .copy_secs
                .push((r.w, full.len as u64, self.machine.now() - t));
            return Ok(None);
        }
        if let Some(ev) = &freed {
            dev.wait_event(Stream::Transfer, ev)?;
        }
        let routed = dev.record_event(Stream::Compute)?;
        dev.wait_event(Stream::Transfer, &routed)?;
        let per = full.len / self.graph.weights[r.w].n_mats().max(1);
        dev.copy_routed_async(&self.temp[r.slot], &full, per, r.routing, r.rows, r.top_k)?;
        Ok(Some(dev.record_event(Stream::Transfer)?))
    }

    /// Reads the routing on the host and copies the chosen experts; returns
    /// the bytes copied.
    fn copy_experts_chosen_on_host(
        &self,
        dev: &dyn Device,
        r: &Routed<'_>,
        freed: Option<&Event>,
    ) -> Result<u64, ExecError> {
        let full = self.host_range(r.w);
        let n_expert = self.graph.weights[r.w].n_mats().max(1);
        let per = full.len / n_expert;
        let mut raw = vec![0u8; r.rows * 2 * r.top_k * 4];
        self.machine.host().read(r.routing, 0, &mut raw)?;
        let hit = ats_core::graph::experts_chosen(&raw, r.rows, r.top_k, n_expert);
        if dev.supports_async()
            && let Some(ev) = freed
        {
            dev.wait_event(Stream::Transfer, ev)?;
        }
        let dst = &self.temp[r.slot];
        let mut bytes = 0u64;
        for e in (0..n_expert).filter(|&e| hit[e]) {
            let src = HostBytes {
                offset: full.offset + e * per,
                len: per,
                owner: full.owner.clone(),
            };
            if dev.supports_async() {
                dev.copy_async(dst, e * per, &src)?;
            } else {
                dev.write(dst, e * per, src.bytes())?;
            }
            bytes += per as u64;
        }
        Ok(bytes)
    }

    /// Where weight `w` is for a node on device `d`.
    pub(super) fn weight_data(
        &self,
        rs: &RoundStreams,
        d: DeviceId,
        w: WeightId,
    ) -> WeightData<'_> {
        match (d, self.plans[0].weight_home[w]) {
            (DeviceId::Host, _) => WeightData::Host(self.weight_bytes(w)),
            (DeviceId::Gpu, WeightHome::Resident) => {
                WeightData::Device(self.resident[w].as_ref().expect("uploaded in set_plans"))
            }
            (DeviceId::Gpu, WeightHome::Host) => {
                WeightData::Device(&self.temp[rs.plan.buffer_of[&w]])
            }
        }
    }
}

/// A routed expert copy: weight `w` into temp buffer `slot`, chosen by the
/// routing in `routing` (on `router_dev`).
struct Routed<'a> {
    router_dev: DeviceId,
    slot: usize,
    w: WeightId,
    routing: &'a Buffer,
    rows: usize,
    top_k: usize,
}
