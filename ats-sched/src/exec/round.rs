//! Running one round: input rows in, the schedule's steps in order (weight
//! copies streaming beside them), the output read back, timings collected.

use ats_core::device::{Buffer, KvArg, NodeArgs, WeightArg};
use ats_core::graph::Op;
use ats_core::machine::DeviceId;
use ats_core::round::Round;
use std::sync::Arc;

use super::schedule::Instance;
use super::streams::RoundStreams;
use super::{ExecError, Executor, RoundStats, Schedule, Step};

impl Executor {
    /// Runs `round` with plan `p` (inside the host's context).
    pub(super) fn run_round(&mut self, round: &Arc<Round>, p: usize) -> Result<(), ExecError> {
        let t0 = self.machine.now();
        self.check_round(round)?;
        if p >= self.plans.len() {
            return Err(ExecError::Plan(format!("plan {p} of {}", self.plans.len())));
        }
        let s = self.schedule_reading(p, round.n_rows, round.output_rows.len(), round.hidden);
        self.ensure_activations(&s)?;
        self.write_input(&s, round)?;
        let mut stats = RoundStats::default();
        let mut rs = self.start_streams(p, &mut stats)?;
        let mut prev: Option<DeviceId> = None;
        for step in &s.steps {
            match step {
                Step::Copy { from, to } => self.copy_activation(&s, *from, *to, &mut stats)?,
                Step::Run {
                    node,
                    device,
                    inputs,
                    output,
                } => {
                    if prev.is_some_and(|d| d != *device) {
                        stats.switches += 1;
                    }
                    prev = Some(*device);
                    let io = NodeIo {
                        node: *node,
                        device: *device,
                        inputs,
                        output: *output,
                    };
                    self.run_node(&s, &io, round, &mut rs, &mut stats)?;
                }
            }
        }
        let mut out = std::mem::take(&mut self.output);
        let read = self.read_output(&s, &mut out);
        self.output = out;
        read?;
        stats.total_secs = self.machine.now() - t0;
        self.collect_device_timings(&mut stats);
        self.last_stats = stats;
        Ok(())
    }

    /// The activation buffer of instance `i`.
    fn buffer(&self, s: &Schedule, i: usize) -> Buffer {
        let inst: Instance = s.instances[i];
        self.act[inst.device][inst.slot].clone()
    }

    /// Writes the round's input rows (graphs whose input is f32 rows).
    fn write_input(&self, s: &Schedule, round: &Round) -> Result<(), ExecError> {
        let (Some(i), Some(rows)) = (s.input, &round.input_rows) else {
            return Ok(());
        };
        let inst = s.instances[i];
        let bytes: &[u8] = bytemuck::cast_slice(rows.as_slice());
        if bytes.len() < inst.bytes {
            return Err(ExecError::Round(format!(
                "{} input bytes, the graph needs {}",
                bytes.len(),
                inst.bytes
            )));
        }
        self.device(inst.device)?
            .write(&self.buffer(s, i), 0, &bytes[..inst.bytes])?;
        Ok(())
    }

    /// Moves an activation between devices through the host.
    fn copy_activation(
        &self,
        s: &Schedule,
        from: usize,
        to: usize,
        stats: &mut RoundStats,
    ) -> Result<(), ExecError> {
        let (a, b) = (s.instances[from], s.instances[to]);
        let mut host_tmp = vec![0u8; a.bytes];
        self.device(a.device)?
            .read(&self.buffer(s, from), 0, &mut host_tmp)?;
        self.device(b.device)?
            .write(&self.buffer(s, to), 0, &host_tmp)?;
        stats.activation_bytes += a.bytes as u64;
        Ok(())
    }

    /// Runs one node on its device, then lets streaming move on.
    fn run_node(
        &self,
        s: &Schedule,
        io: &NodeIo<'_>,
        round: &Arc<Round>,
        rs: &mut RoundStreams,
        stats: &mut RoundStats,
    ) -> Result<(), ExecError> {
        let g = &self.graph;
        let n = &g.nodes[io.node];
        let dev = self.device(io.device)?.clone();
        if io.device == DeviceId::Gpu {
            self.wait_for_weights(dev.as_ref(), io.node, rs)?;
        }
        let in_bufs: Vec<Buffer> = io.inputs.iter().map(|&i| self.buffer(s, i)).collect();
        let out_buf = self.buffer(s, io.output);
        let weights: Vec<WeightArg<'_>> = n
            .weights
            .iter()
            .map(|&w| WeightArg {
                info: &g.weights[w],
                data: self.weight_data(rs, io.device, w),
            })
            .collect();
        let args = NodeArgs {
            graph: g,
            node_id: io.node,
            node: n,
            round,
            inputs: &in_bufs,
            output: &out_buf,
            weights: &weights,
            kv: self.kv_arg(&n.op),
        };
        let t = self.machine.now();
        dev.run(&args)?;
        if !dev.supports_async() {
            stats
                .node_secs
                .push((io.node, io.device, self.machine.now() - t));
        }
        match io.device {
            DeviceId::Gpu => self.after_gpu_node(io.node, &out_buf, round.n_rows, rs, stats),
            DeviceId::Host => {
                self.copy_routed_after(io.node, DeviceId::Host, &out_buf, round.n_rows, rs, stats)
            }
        }
    }

    /// The KV cache argument of an attention node with a cache.
    fn kv_arg(&self, op: &Op) -> Option<KvArg<'_>> {
        match op {
            Op::Attention(a) => a.cache.map(|c| KvArg {
                k: &self.kv[c].k,
                v: &self.kv[c].v,
                capacity: self.cfg.kv_capacity,
                block_tokens: self.cfg.kv_block_tokens,
                dtype: self.cfg.kv_type,
            }),
            _ => None,
        }
    }

    /// Reads the graph output into `values` (resized to it, so its
    /// allocation only grows) and waits for every device to finish the round.
    fn read_output(&self, s: &Schedule, values: &mut Vec<f32>) -> Result<(), ExecError> {
        let out = s.instances[s.output];
        values.resize(out.bytes / 4, 0.0);
        // read straight into the floats (the activations are native f32,
        // as the input rows are written)
        self.device(out.device)?.read(
            &self.buffer(s, s.output),
            0,
            bytemuck::cast_slice_mut(values.as_mut_slice()),
        )?;
        for (_, d) in self.machine.iter() {
            d.synchronize()?;
        }
        Ok(())
    }

    /// Adds the device-timed spans of the finished round to `stats`.
    fn collect_device_timings(&self, stats: &mut RoundStats) {
        for (d, dev) in self.machine.iter() {
            if !dev.supports_async() {
                continue;
            }
            let t = dev.drain_timings();
            stats
                .node_secs
                .extend(t.nodes.into_iter().map(|(n, s)| (n, d, s)));
            stats
                .async_copies
                .extend(t.copies.into_iter().map(|(b, s)| (d, b, s)));
        }
    }
}

/// A node step of a schedule.
struct NodeIo<'a> {
    node: usize,
    device: DeviceId,
    inputs: &'a [usize],
    output: usize,
}
