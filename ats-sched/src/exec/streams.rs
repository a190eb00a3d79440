//! Weight streaming: which temp slot each streamed weight takes, and the
//! copies into those slots, ordered against the kernels that read them (a
//! copy waits for the slot's last reader; routed experts wait for their
//! router and copy only the experts it chose).

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use ats_core::device::{Buffer, Event, HostBytes, Stream, WeightData};
use ats_core::graph::Op;
use ats_core::ledger::Region;

use super::{ExecError, Executor, RoundStats, WeightHome, weight_role};

/// Where a streamed weight goes and which weight used its slot before.
#[derive(Clone, Debug)]
pub(super) struct StreamPlan {
    /// For each (device, weight) streamed: its slot buffer index in `temp[device]`.
    pub(super) slot_of: HashMap<(usize, usize), usize>,
    /// Per device, per slot: the streamed weights in order of use.
    pub(super) queue: Vec<Vec<Vec<usize>>>,
    /// Per device, per weight: the last node on that device reading it.
    pub(super) last_reader: HashMap<(usize, usize), usize>,
    /// Streamed expert weights `(device, weight)`, copied only once their
    /// layer's routing is known: `router node -> [(device, weight, top_k)]`.
    pub(super) after_router: HashMap<usize, Vec<(usize, usize, usize)>>,
}

impl Executor {
    /// Assigns streamed weights to temp slots by role (for every plan) and
    /// allocates the slots, shared across plans.
    pub(super) fn plan_streams(&mut self) -> Result<(), ExecError> {
        let g = self.graph.clone();
        let depth = self.cfg.slots_per_role.max(1);
        // (device, role, k) -> slot index on the device, and the slot sizes
        let mut slot_ids: HashMap<(usize, String, usize), usize> = HashMap::new();
        let mut sizes: Vec<Vec<usize>> = vec![Vec::new(); self.devices.len()];
        let mut all = Vec::with_capacity(self.plans.len());
        for plan in &self.plans {
            let mut slot_of = HashMap::new();
            let mut last_reader = HashMap::new();
            let mut order: Vec<Vec<usize>> = vec![Vec::new(); self.devices.len()];
            for (ni, n) in g.nodes.iter().enumerate() {
                let d = plan.node_device[ni];
                for &w in &n.weights {
                    if d != 0 && plan.weight_home[w] == WeightHome::Host {
                        if !last_reader.contains_key(&(d, w)) {
                            order[d].push(w);
                        }
                        last_reader.insert((d, w), ni);
                    }
                }
            }
            let mut queue: Vec<Vec<Vec<usize>>> =
                sizes.iter().map(|s| vec![Vec::new(); s.len()]).collect();
            for d in 0..self.devices.len() {
                let mut uses: HashMap<String, usize> = HashMap::new();
                for &w in &order[d] {
                    let info = &g.weights[w];
                    let role = weight_role(&info.name).to_string();
                    let k = {
                        let u = uses.entry(role.clone()).or_insert(0);
                        *u += 1;
                        (*u - 1) % depth
                    };
                    let s = *slot_ids.entry((d, role, k)).or_insert_with(|| {
                        sizes[d].push(0);
                        sizes[d].len() - 1
                    });
                    sizes[d][s] = sizes[d][s].max(info.bytes as usize);
                    if queue[d].len() <= s {
                        queue[d].resize(s + 1, Vec::new());
                    }
                    queue[d][s].push(w);
                    slot_of.insert((d, w), s);
                }
            }
            let producers = g.producers();
            let mut after_router: HashMap<usize, Vec<(usize, usize, usize)>> = HashMap::new();
            for (ni, n) in g.nodes.iter().enumerate() {
                if let Op::MoeExperts { top_k, .. } = n.op {
                    let d = plan.node_device[ni];
                    let Some(router) = n.inputs.get(1).and_then(|&v| producers[v]) else {
                        continue;
                    };
                    for &w in &n.weights {
                        if slot_of.contains_key(&(d, w)) {
                            after_router.entry(router).or_default().push((d, w, top_k));
                        }
                    }
                }
            }
            all.push(StreamPlan {
                slot_of,
                queue,
                last_reader,
                after_router,
            });
        }
        for (d, sz) in sizes.iter().enumerate() {
            let dev = &self.devices[d];
            self.temp[d] = sz
                .iter()
                .enumerate()
                .map(|(i, &b)| {
                    dev.alloc(
                        self.cfg.region_for(Region::Temp),
                        b,
                        &format!("temp slot {i}"),
                    )
                })
                .collect::<Result<_, _>>()?;
        }
        self.streams = all;
        Ok(())
    }

    /// Starts the copy of the next weight queued for `slot` on device `d`,
    /// after `freed` (the event of the kernel that last read the slot).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn issue_copy(
        &self,
        d: usize,
        slot: usize,
        streams: &StreamPlan,
        queue: &mut [Vec<VecDeque<usize>>],
        ready: &mut HashMap<(usize, usize), Option<Event>>,
        deferred: &mut HashMap<(usize, usize), (usize, Option<Event>)>,
        freed: Option<Event>,
        stats: &mut RoundStats,
    ) -> Result<(), ExecError> {
        let Some(w) = queue[d][slot].pop_front() else {
            return Ok(());
        };
        if streams
            .after_router
            .values()
            .flatten()
            .any(|&(gd, gw, _)| gd == d && gw == w)
        {
            deferred.insert((d, w), (slot, freed));
            return Ok(());
        }
        let dev = &self.devices[d];
        let info = &self.graph.weights[w];
        let dst = &self.temp[d][slot];
        if dev.supports_async() {
            if let Some(ev) = &freed {
                dev.wait_event(Stream::Transfer, ev)?;
            }
            let src = HostBytes {
                owner: self.host.clone(),
                offset: info.file_offset as usize,
                len: info.bytes as usize,
            };
            dev.copy_async(dst, 0, &src)?;
            ready.insert((d, w), Some(dev.record_event(Stream::Transfer)?));
        } else {
            let t = Instant::now();
            dev.write(dst, 0, self.weight_bytes(w))?;
            stats
                .copy_secs
                .push((w, info.bytes, t.elapsed().as_secs_f64()));
            ready.insert((d, w), None);
        }
        Ok(())
    }

    /// Copies the experts a router selected into the weight's slot on device
    /// `gd`: from the host's copy of the routing when the router ran on the
    /// CPU, with a device-side routed copy when it ran on `gd` itself (no
    /// host readback), else the whole tensor. Returns the copy's event.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn copy_routed(
        &self,
        router_dev: usize,
        gd: usize,
        slot: usize,
        w: usize,
        routing: &Buffer,
        rows: usize,
        top_k: usize,
        freed: Option<Event>,
        stats: &mut RoundStats,
    ) -> Result<Option<Event>, ExecError> {
        let dev = &self.devices[gd];
        let info = &self.graph.weights[w];
        let dst = &self.temp[gd][slot];
        let n_expert = info.n_mats().max(1);
        let per = info.bytes as usize / n_expert;
        let full = HostBytes {
            owner: self.host.clone(),
            offset: info.file_offset as usize,
            len: info.bytes as usize,
        };
        let t = Instant::now();
        if router_dev == 0 {
            let mut raw = vec![0u8; rows * 2 * top_k * 4];
            self.devices[0].read(routing, 0, &mut raw)?;
            let hit = ats_core::graph::experts_chosen(&raw, rows, top_k, n_expert);
            if dev.supports_async()
                && let Some(ev) = &freed
            {
                dev.wait_event(Stream::Transfer, ev)?;
            }
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
            if !dev.supports_async() {
                stats.copy_secs.push((w, bytes, t.elapsed().as_secs_f64()));
                return Ok(None);
            }
            return Ok(Some(dev.record_event(Stream::Transfer)?));
        }
        if !dev.supports_async() {
            dev.write(dst, 0, full.bytes())?;
            stats
                .copy_secs
                .push((w, info.bytes, t.elapsed().as_secs_f64()));
            return Ok(None);
        }
        if let Some(ev) = &freed {
            dev.wait_event(Stream::Transfer, ev)?;
        }
        if router_dev == gd {
            let routed = dev.record_event(Stream::Compute)?;
            dev.wait_event(Stream::Transfer, &routed)?;
            match dev.copy_routed_async(dst, &full, per, routing, rows, top_k) {
                Ok(()) => return Ok(Some(dev.record_event(Stream::Transfer)?)),
                Err(ats_core::device::DeviceError::Unsupported { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        dev.copy_async(dst, 0, &full)?;
        Ok(Some(dev.record_event(Stream::Transfer)?))
    }

    pub(super) fn weight_data<'a>(
        &'a self,
        streams: &StreamPlan,
        d: usize,
        w: usize,
    ) -> WeightData<'a> {
        match self.plans[0].weight_home[w] {
            WeightHome::Resident(rd) if rd == d => {
                WeightData::Device(self.resident[w].as_ref().expect("uploaded in set_plans"))
            }
            _ if d == 0 => WeightData::Host(self.weight_bytes(w)),
            _ => WeightData::Device(&self.temp[d][streams.slot_of[&(d, w)]]),
        }
    }
}
