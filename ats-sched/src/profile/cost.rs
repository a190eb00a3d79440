//! The cost model: a node's time on a device from the profile (exact match,
//! else the nearest measured neighbour scaled by a roofline), overridden by
//! recent live measurements (a moving average).

use std::collections::HashMap;

use ats_core::graph::cost::RoundShape;
use ats_core::graph::{Graph, Op};
use ats_core::machine::{DeviceId, PerDevice};

use super::{DeviceProfile, OpKey, RoutedCopySample, Sample};

/// The profile key of a node in a round.
pub fn op_key(g: &Graph, node: usize, shape: RoundShape) -> OpKey {
    let n = &g.nodes[node];
    let rows = g.values[n.output]
        .rows
        .resolve(shape.n_tokens, shape.n_outputs);
    let w = |i: usize| n.weights.get(i).map(|&w| &g.weights[w]);
    let mut key = OpKey {
        op: n.op.kind_name().to_string(),
        dtype: None,
        m: g.values[n.output].cols,
        k: 0,
        tokens: rows,
        ctx: 0,
    };
    match &n.op {
        Op::MatMul | Op::MoeRouter { .. } => {
            let wi = w(0).expect("matmul has a weight");
            key.dtype = Some(wi.dtype.name().to_string());
            key.m = wi.rows();
            key.k = wi.cols();
        }
        Op::MoeExperts {
            n_expert, top_k, ..
        } => {
            let wi = w(0).expect("experts have weights");
            key.dtype = Some(wi.dtype.name().to_string());
            key.m = wi.rows();
            key.k = wi.cols();
            key.ctx = n_expert * 1000 + top_k;
        }
        Op::Attention(a) => {
            key.m = a.n_heads * a.head_dim;
            key.k = a.n_kv_heads * a.head_dim;
            key.ctx = if a.cache.is_some() {
                shape.past + shape.n_tokens
            } else {
                shape.n_tokens
            };
        }
        Op::Embed => {
            key.dtype = w(0).map(|wi| wi.dtype.name().to_string());
        }
        _ => {}
    }
    key
}

/// Peak rates observed on a device, for rooflines.
#[derive(Clone, Copy, Debug)]
struct Peaks {
    flops: f64,
    bytes: f64,
}

/// The fixed cost of a switch to or from a GPU that was not profiled: one
/// synchronisation plus a launch, about 20 us on the PCIe GPUs measured so far.
const DEFAULT_GPU_SWITCH_SECS: f64 = 20e-6;

/// Host-device bandwidth assumed without a profile: PCIe 3.0 x16 in practice.
const DEFAULT_PCIE_GBPS: f64 = 12.0;

/// One CPU thread's rates without a profile: an AVX2 core's f32 FMA rate
/// at a realistic fraction, and a core's share of DDR4 bandwidth.
const CPU_THREAD_PEAKS: Peaks = Peaks {
    flops: 25e9,
    bytes: 10e9,
};
/// Threads past which a CPU's memory bandwidth stops growing (a desktop's
/// two or four channels are saturated by a few cores).
const CPU_BANDWIDTH_THREADS: f64 = 4.0;
/// A discrete GPU's rates without a profile: a mid-range consumer card.
const GPU_PEAKS: Peaks = Peaks {
    flops: 20e12,
    bytes: 400e9,
};
/// The least a node takes without a profile: a thread-pool dispatch on the
/// CPU, a kernel launch on a GPU.
const CPU_FLOOR_SECS: f64 = 2e-6;
const GPU_FLOOR_SECS: f64 = 5e-6;
/// How fast the load scale follows new observations (per observation): slow
/// enough that one noisy node does not rescale a device.
const LOAD_DECAY: f64 = 0.02;

/// Fallback rates when a device has no samples: the estimate is then a
/// plain roofline, and plans say so.
fn default_peaks(kind: &str, threads: usize) -> Peaks {
    match kind {
        // a simulated GPU runs one CPU thread's kernels (speed 1 by default)
        "simulated_gpu" => CPU_THREAD_PEAKS,
        "cpu" => Peaks {
            flops: CPU_THREAD_PEAKS.flops * threads as f64,
            bytes: CPU_THREAD_PEAKS.bytes * (threads as f64).min(CPU_BANDWIDTH_THREADS),
        },
        _ => GPU_PEAKS,
    }
}

struct DeviceCosts {
    profile: DeviceProfile,
    threads: usize,
    peaks: Peaks,
    /// The least any node takes (dispatch or launch overhead): the fastest
    /// sample measured, or a default.
    floor: f64,
    exact: HashMap<(OpKey, usize, bool), f64>,
    contention: f64,
    /// Per (op, tokens): the median slowdown of its samples under copy
    /// traffic (a median: one sample that lost its core to the copying
    /// thread ran 57x slower on a 2-core machine).
    contention_by: HashMap<(String, usize), f64>,
}

impl DeviceCosts {
    fn new(profile: DeviceProfile, threads: usize) -> DeviceCosts {
        let mut peaks = Peaks {
            flops: 0.0,
            bytes: 0.0,
        };
        let mut exact = HashMap::new();
        let (mut c_sum, mut u_sum) = (0.0, 0.0);
        let mut ratios: HashMap<(String, usize), Vec<f64>> = HashMap::new();
        for s in &profile.samples {
            if s.threads == threads && !s.contended && s.secs > 0.0 && device_wide(s) {
                peaks.flops = peaks.flops.max(s.flops / s.secs);
                peaks.bytes = peaks.bytes.max(s.bytes / s.secs);
            }
            exact.insert((s.key.clone(), s.threads, s.contended), s.secs);
        }
        for s in profile.samples.iter().filter(|s| s.contended) {
            if let Some(&u) = exact.get(&(s.key.clone(), s.threads, false)) {
                if device_wide(s) {
                    c_sum += s.secs;
                    u_sum += u;
                }
                if u > 0.0 {
                    let r = ratios.entry((s.key.op.clone(), s.key.tokens)).or_default();
                    r.push(s.secs / u);
                }
            }
        }
        let fallback = default_peaks(&profile.kind, threads);
        if peaks.flops <= 0.0 {
            peaks.flops = fallback.flops;
        }
        if peaks.bytes <= 0.0 {
            peaks.bytes = fallback.bytes;
        }
        let floor = profile
            .samples
            .iter()
            .filter(|s| !s.contended && s.threads == threads && s.secs > 0.0)
            .map(|s| s.secs)
            .fold(f64::INFINITY, f64::min);
        let floor = if floor.is_finite() {
            floor
        } else if profile.kind == "cpu" {
            CPU_FLOOR_SECS
        } else {
            GPU_FLOOR_SECS
        };
        DeviceCosts {
            threads,
            floor,
            peaks,
            exact,
            contention: if u_sum > 0.0 {
                (c_sum / u_sum).max(1.0)
            } else {
                1.0
            },
            contention_by: ratios
                .into_iter()
                .map(|(k, mut v)| {
                    v.sort_by(f64::total_cmp);
                    (k, v[v.len() / 2].max(1.0))
                })
                .collect(),
            profile,
        }
    }
}

/// Whether sample `s` speaks for the whole device (its peak rates, its
/// slowdown beside copies). Routed experts do not: their rate is their
/// tiles' padding and a fixed cost per expert, and one 512-token layer
/// outweighs every other sample of a slowdown summed by seconds.
fn device_wide(s: &Sample) -> bool {
    s.key.op != "moe_experts"
}

/// An exponential moving average, with the device's load scale when it was
/// last updated.
#[derive(Clone, Copy, Debug)]
struct Ema {
    value: f64,
    scale_at: f64,
}

/// One node of a graph in a round: what a cost estimate is asked about,
/// beside the device it would run on.
#[derive(Clone, Copy, Debug)]
pub struct NodeAt<'g> {
    /// The graph.
    pub g: &'g Graph,
    /// The node's index in `g`.
    pub node: usize,
    /// The round's shape.
    pub shape: RoundShape,
    /// Whether the KV caches hold f16 (attention's bytes).
    pub kv_f16: bool,
}

/// Estimates node, copy and switch times per device.
pub struct CostModel {
    devices: PerDevice<Option<DeviceCosts>>,
    live: HashMap<(DeviceId, usize, usize), Ema>,
    /// Per device: moving averages of observed and profiled seconds, whose
    /// ratio scales the nodes not observed lately (a device under load).
    scale: PerDevice<(f64, f64)>,
    /// The same per (device, tokens per round): the profile's error differs
    /// by batch size, so a live time is carried by the ratio of its own
    /// batch size (a prompt round must not rescale decode times).
    shape_scale: HashMap<(DeviceId, usize), (f64, f64)>,
    /// Per device: moving ratio of observed to modelled copy seconds.
    copy_scale: PerDevice<Option<f64>>,
    /// Weight of a new observation in the moving average.
    pub alpha: f64,
}

impl std::fmt::Debug for CostModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CostModel({} devices, {} live)",
            1 + usize::from(self.devices.gpu.is_some()),
            self.live.len()
        )
    }
}

fn roof(flops: f64, bytes: f64, p: Peaks) -> f64 {
    (flops / p.flops).max(bytes / p.bytes)
}

fn log_dist(a: usize, b: usize) -> f64 {
    ((a.max(1) as f64).ln() - (b.max(1) as f64).ln()).abs()
}

impl CostModel {
    /// A model from the host's profile and the GPU's (if the machine has
    /// one), each with the thread count the device runs with. A GPU's
    /// samples are of the whole device (the profile records them at one
    /// "thread"), so its count is taken as 1 whatever is given: a count of
    /// SMs here once scaled every GPU estimate down by it (found by the
    /// machine model of the H200 host: its all-resident decode estimated at
    /// 2.5 ms against 21 ms run).
    pub fn new(host: (DeviceProfile, usize), gpu: Option<(DeviceProfile, usize)>) -> CostModel {
        let gpu_threads = |p: &DeviceProfile, t: usize| {
            if p.samples.iter().all(|s| s.threads == 1) {
                1
            } else {
                t
            }
        };
        CostModel {
            devices: PerDevice {
                host: Some(DeviceCosts::new(host.0, host.1)),
                gpu: gpu.map(|(p, t)| {
                    let t = gpu_threads(&p, t);
                    DeviceCosts::new(p, t)
                }),
            },
            live: HashMap::new(),
            scale: PerDevice::default(),
            shape_scale: HashMap::new(),
            copy_scale: PerDevice::default(),
            alpha: 0.3,
        }
    }

    fn dev(&self, d: DeviceId) -> Option<&DeviceCosts> {
        self.devices[d].as_ref()
    }
    /// How much slower than profiled device `d` runs lately (1 = as profiled).
    pub fn device_scale(&self, d: DeviceId) -> f64 {
        let (obs, prof) = self.scale[d];
        if prof > 0.0 { obs / prof } else { 1.0 }
    }

    /// How much slower than profiled device `d` runs rounds of `tokens`
    /// tokens lately (the device-wide ratio until such rounds were seen).
    fn scale_for(&self, d: DeviceId, tokens: usize) -> f64 {
        match self.shape_scale.get(&(d, tokens)) {
            Some(&(obs, prof)) if prof > 0.0 => obs / prof,
            _ => self.device_scale(d),
        }
    }

    /// How much slower than modelled copies to device `d` run lately.
    pub fn copy_scale(&self, d: DeviceId) -> f64 {
        self.copy_scale[d].unwrap_or(1.0)
    }

    /// Forgets how copies to device `d` ran lately (back to the profile's
    /// rate), for plans about to be measured again: a plan that stopped
    /// copying cannot see the link recover, so its last reading, taken
    /// under another load, would price every streaming plan as it was then.
    pub fn forget_copy_scale(&mut self, d: DeviceId) {
        self.copy_scale[d] = None;
    }

    /// Records an observed copy of `bytes` to device `d`.
    pub fn observe_copy(&mut self, d: DeviceId, bytes: f64, secs: f64) {
        let model = self.h2d_base_secs(d, bytes);
        if model <= 0.0 || !secs.is_finite() {
            return;
        }
        let r = secs / model;
        let a = self.alpha;
        self.copy_scale[d] = Some(self.copy_scale[d].map_or(r, |old| a * r + (1.0 - a) * old));
    }

    /// Whether device `d` has measured samples (otherwise estimates are a default roofline).
    pub fn is_measured(&self, d: DeviceId) -> bool {
        self.dev(d).is_some_and(|c| !c.profile.samples.is_empty())
    }

    /// How much slower CPU kernels run while copies stream (1 = no effect),
    /// over every profiled sample ([`CostModel::contention_of`] is per node).
    pub fn contention(&self, d: DeviceId) -> f64 {
        self.dev(d).map_or(1.0, |c| c.contention)
    }

    /// Seconds to copy `bytes` from the host to device `d` (pinned source),
    /// scaled by how copies ran lately.
    pub fn h2d_secs(&self, d: DeviceId, bytes: f64) -> f64 {
        self.h2d_base_secs(d, bytes) * self.copy_scale(d)
    }

    fn h2d_base_secs(&self, d: DeviceId, bytes: f64) -> f64 {
        let Some(c) = self.dev(d) else {
            return f64::INFINITY;
        };
        let p = &c.profile;
        let gbps = p
            .h2d_pinned_gbps
            .or(p.h2d_pageable_gbps)
            .unwrap_or(DEFAULT_PCIE_GBPS);
        bytes / (gbps * 1e9)
    }

    /// Seconds of device `d`'s routed-expert copy ([`ats_core::device::Device::copy_routed_async`])
    /// of `bytes` over `experts` experts chosen at once: the profile's rate
    /// at that count (log-log between samples, the nearest end beyond
    /// them), never faster than a pinned copy. Without samples, a pinned
    /// copy ([`CostModel::routed_copy_measured`] says which).
    pub fn routed_copy_secs(&self, d: DeviceId, bytes: f64, experts: f64) -> f64 {
        let link = self.h2d_secs(d, bytes);
        let Some(c) = self.dev(d) else {
            return link;
        };
        match routed_rate(&c.profile.routed_copies, experts) {
            Some(rate) => (bytes / rate).max(link),
            None => link,
        }
    }

    /// Whether device `d`'s profile timed its routed-expert copy.
    pub fn routed_copy_measured(&self, d: DeviceId) -> bool {
        self.dev(d)
            .is_some_and(|c| !c.profile.routed_copies.is_empty())
    }

    /// Seconds to copy `bytes` from device `d` to the host.
    pub fn d2h_secs(&self, d: DeviceId, bytes: f64) -> f64 {
        let Some(c) = self.dev(d) else {
            return f64::INFINITY;
        };
        let gbps = c.profile.d2h_gbps.unwrap_or(DEFAULT_PCIE_GBPS);
        bytes / (gbps * 1e9)
    }

    /// The fixed cost of one switch to or from device `d`.
    pub fn switch_secs(&self, d: DeviceId) -> f64 {
        let measured = self.dev(d).and_then(|c| c.profile.switch_secs);
        measured.unwrap_or(match d {
            DeviceId::Host => 0.0,
            DeviceId::Gpu => DEFAULT_GPU_SWITCH_SECS,
        })
    }

    /// Records an observed time of node `at` on device `d`.
    pub fn observe(&mut self, at: NodeAt<'_>, d: DeviceId, secs: f64) {
        let NodeAt { g, node, shape, .. } = at;
        // a time of another graph's node (or a non-time) says nothing about this one
        if !secs.is_finite() || secs < 0.0 || node >= g.nodes.len() || self.dev(d).is_none() {
            return;
        }
        let prof = self.profiled_secs(at, d);
        if prof > 0.0 {
            // a small decay per observation: the ratio follows recent load
            let k = LOAD_DECAY;
            let decay = |(o, p): (f64, f64)| (o * (1.0 - k) + secs * k, p * (1.0 - k) + prof * k);
            self.scale[d] = decay(self.scale[d]);
            let e = self.shape_scale.entry((d, shape.n_tokens)).or_default();
            *e = decay(*e);
        }
        let key = (d, node, shape.n_tokens);
        let (a, scale_at) = (self.alpha, self.scale_for(d, shape.n_tokens));
        self.live
            .entry(key)
            .and_modify(|e| {
                e.value = a * secs + (1.0 - a) * e.value;
                e.scale_at = scale_at;
            })
            .or_insert(Ema {
                value: secs,
                scale_at,
            });
    }

    /// Forgets live observations and load scales.
    pub fn clear_live(&mut self) {
        self.live.clear();
        self.scale = PerDevice::default();
        self.shape_scale.clear();
        self.copy_scale = PerDevice::default();
    }

    /// The live average for a node, if observed, carried to the device's
    /// current load: a node last seen before the device slowed down (or
    /// before it recovered) is scaled by how the device's observed times
    /// moved since, so plans that stopped using a device do not remember it
    /// at its worst.
    pub fn live_secs(&self, d: DeviceId, node: usize, tokens: usize) -> Option<f64> {
        let now = self.scale_for(d, tokens);
        self.live
            .get(&(d, node, tokens))
            .map(|e| e.value * now / e.scale_at.max(1e-12))
    }

    /// The profile-based estimate of node `at` on device `d` (ignores live data).
    pub fn profiled_secs(&self, at: NodeAt<'_>, d: DeviceId) -> f64 {
        let NodeAt {
            g,
            node,
            shape,
            kv_f16,
        } = at;
        let Some(dc) = self.dev(d) else {
            return f64::INFINITY;
        };
        let n = &g.nodes[node];
        if matches!(n.op, Op::SelectRows | Op::MergeRows { .. }) {
            return 0.0;
        }
        let key = op_key(g, node, shape);
        if let Some(&s) = dc.exact.get(&(key.clone(), dc.threads, false)) {
            return s;
        }
        let c = g.node_cost(node, shape, kv_f16);
        let bytes = c.memory_bytes();
        // nearest neighbour of the same op and type, its work scaled by the
        // roofline ratio; the device's fixed cost per node (its floor) is
        // paid once whatever the size, so it is not scaled (scaled, a
        // launch-bound sample priced a product 4x its size 2.2x too slow)
        let est = match nearest(dc, &key) {
            Some(s) => {
                let thread_scale = s.threads as f64 / dc.threads.max(1) as f64;
                let r_s = roof(s.flops, s.bytes, dc.peaks).max(1e-12);
                let work = (s.secs - dc.floor).max(0.0);
                dc.floor + work * thread_scale.max(0.0) * roof(c.flops, bytes, dc.peaks) / r_s
            }
            None => dc.floor + roof(c.flops, bytes, dc.peaks),
        };
        est.max(dc.floor)
    }

    /// How much slower node `node` runs on device `d` while weight copies
    /// stream (1 = unaffected), as profiled: the median over its op's
    /// samples at the nearest token count measured under copy traffic. A
    /// memory-bound decode product loses what the copies take of the
    /// memory bandwidth, a compute-bound prompt product almost nothing, so
    /// one device-wide factor fits neither (the device's, from every
    /// sample together, is the fallback).
    pub fn contention_of(&self, at: NodeAt<'_>, d: DeviceId) -> f64 {
        let Some(dc) = self.dev(d) else {
            return 1.0;
        };
        let key = op_key(at.g, at.node, at.shape);
        dc.contention_by
            .iter()
            .filter(|((op, _), _)| *op == key.op)
            .min_by(|a, b| {
                let da = log_dist(a.0.1, key.tokens);
                let db = log_dist(b.0.1, key.tokens);
                da.total_cmp(&db).then(a.0.1.cmp(&b.0.1))
            })
            .map_or(dc.contention, |(_, &f)| f)
    }

    /// The least node `at` takes on device `d` beside weight copies: the
    /// memory bandwidth they leave bounds it, whatever the device's load.
    fn copies_floor(&self, at: NodeAt<'_>, d: DeviceId) -> f64 {
        self.profiled_secs(at, d) * self.contention_of(at, d)
    }

    /// The estimate for node `at` on device `d` while weight copies
    /// stream beside it: its time alone ([`CostModel::node_secs`]) or the
    /// copies' floor, whichever is longer (a device slowed by other
    /// programs waits on its cores more than on memory, so the copies cost
    /// it less).
    pub fn node_secs_beside_copies(&self, at: NodeAt<'_>, d: DeviceId) -> f64 {
        self.beside_copies(at, d, self.node_secs(at, d))
    }

    /// [`CostModel::node_secs_beside_copies`] for a caller that has the
    /// node's time alone already.
    pub fn beside_copies(&self, at: NodeAt<'_>, d: DeviceId, alone: f64) -> f64 {
        alone.max(self.copies_floor(at, d))
    }

    /// The estimate for node `at` on device `d`: the live average if any,
    /// else the profile scaled by how the device's observed times compare
    /// with the profile lately (load, or a profile that is off).
    pub fn node_secs(&self, at: NodeAt<'_>, d: DeviceId) -> f64 {
        let tokens = at.shape.n_tokens;
        self.live_secs(d, at.node, tokens)
            .unwrap_or_else(|| self.profiled_secs(at, d) * self.scale_for(d, tokens))
    }
}

/// Bytes a second of the routed copy at `experts` experts chosen at once:
/// interpolated in log-log between the samples around it (a rate that grows
/// in proportion to the experts stays exact), the nearest sample's beyond.
fn routed_rate(samples: &[RoutedCopySample], experts: f64) -> Option<f64> {
    let mut pts: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.experts > 0 && s.bytes > 0 && s.secs > 0.0)
        .map(|s| ((s.experts as f64).ln(), (s.bytes as f64 / s.secs).ln()))
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let x = experts.max(1.0).ln();
    let (first, last) = (*pts.first()?, *pts.last()?);
    if x <= first.0 {
        return Some(first.1.exp());
    }
    if x >= last.0 {
        return Some(last.1.exp());
    }
    let i = pts.iter().position(|p| p.0 >= x)?;
    let (a, b) = (pts[i - 1], pts[i]);
    let t = (x - a.0) / (b.0 - a.0).max(1e-12);
    Some((a.1 + t * (b.1 - a.1)).exp())
}

/// The sample of `key`'s op and type nearest to it, among those measured
/// without copy traffic.
fn nearest<'a>(dc: &'a DeviceCosts, key: &OpKey) -> Option<&'a Sample> {
    dc.profile
        .samples
        .iter()
        .filter(|s| !s.contended && s.key.op == key.op && s.key.dtype == key.dtype)
        .min_by(|a, b| {
            let da = dist(&a.key, key, a.threads, dc.threads);
            let db = dist(&b.key, key, b.threads, dc.threads);
            da.total_cmp(&db)
        })
}

fn dist(a: &OpKey, b: &OpKey, ta: usize, tb: usize) -> f64 {
    log_dist(a.m * a.k.max(1), b.m * b.k.max(1))
        + log_dist(a.tokens, b.tokens)
        + log_dist(a.ctx + 1, b.ctx + 1)
        + 2.0 * log_dist(ta, tb)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: DeviceId = DeviceId::Host;
    const G: DeviceId = DeviceId::Gpu;

    /// Node `node` of `g` in a round of `shape`, with f16 caches.
    fn at(g: &Graph, node: usize, shape: RoundShape) -> NodeAt<'_> {
        NodeAt {
            g,
            node,
            shape,
            kv_f16: true,
        }
    }

    fn sample(m: usize, tokens: usize, secs: f64) -> Sample {
        Sample {
            key: OpKey {
                op: "matmul".into(),
                dtype: Some("Q4_K".into()),
                m,
                k: 1024,
                tokens,
                ctx: 0,
            },
            threads: 2,
            contended: false,
            flops: 2.0 * (m * 1024 * tokens) as f64,
            bytes: (m * 1024) as f64 * 0.5625,
            secs,
        }
    }

    /// A 2-thread CPU profiled with one Q4_K matmul sample.
    fn one_sample_cpu() -> CostModel {
        let p = DeviceProfile {
            device: "cpu".into(),
            kind: "cpu".into(),
            samples: vec![sample(1024, 1, 1e-4)],
            ..Default::default()
        };
        CostModel::new((p, 2), None)
    }

    /// A GPU behind a 20 GB/s link whose routed copy moves 0.5 GB/s at one
    /// expert and `at_16` GB/s at 16, or (`None`) a profile without those
    /// samples.
    fn routed_gpu(at_16: Option<f64>) -> CostModel {
        let at = |experts: usize, gbps: f64| RoutedCopySample {
            experts,
            bytes: (experts as u64) << 20,
            secs: (experts << 20) as f64 / (gbps * 1e9),
        };
        let gpu = DeviceProfile {
            device: "gpu".into(),
            kind: "gpu".into(),
            h2d_pinned_gbps: Some(20.0),
            routed_copies: at_16.map_or(Vec::new(), |r| vec![at(16, r), at(1, 0.5)]),
            ..Default::default()
        };
        CostModel::new(
            (one_sample_cpu().devices.host.unwrap().profile, 2),
            Some((gpu, 1)),
        )
    }

    #[test]
    fn routed_copies_take_the_profiled_rate_at_their_expert_count() {
        let c = routed_gpu(Some(8.0));
        let secs = |experts: f64| c.routed_copy_secs(G, 1e9, experts);
        assert!(c.routed_copy_measured(G));
        // between the samples: log-log, exact for a rate in proportion
        assert!((secs(4.0) - 0.5).abs() < 1e-9, "{}", secs(4.0));
        // beyond them: the nearest sample's rate
        assert!((secs(64.0) - 0.125).abs() < 1e-9, "{}", secs(64.0));
        assert!((secs(0.5) - 2.0).abs() < 1e-9, "{}", secs(0.5));
        // never faster than a pinned copy over the link
        let fast = routed_gpu(Some(40.0));
        assert_eq!(fast.routed_copy_secs(G, 1e9, 16.0), fast.h2d_secs(G, 1e9));
        let old = routed_gpu(None);
        assert!(!old.routed_copy_measured(G));
        assert_eq!(old.routed_copy_secs(G, 1e9, 8.0), old.h2d_secs(G, 1e9));
    }

    #[test]
    fn live_average_overrides_the_profile() {
        let mut c = one_sample_cpu();
        assert!(c.is_measured(H));
        let g = tiny_graph();
        let shape = RoundShape::decode(0);
        c.observe(at(&g, 0, shape), H, 2.0);
        c.observe(at(&g, 0, shape), H, 1.0);
        assert!((c.live_secs(H, 0, 1).unwrap() - 1.7).abs() < 1e-12);
        assert!(c.device_scale(H) > 1.0, "observed far above the profile");
        c.observe_copy(H, 1e9, 2.0 / 12.0);
        assert!((c.copy_scale(H) - 2.0).abs() < 1e-9);
        assert_eq!(c.live_secs(H, 0, 2), None);
        c.clear_live();
        assert_eq!(c.live_secs(H, 0, 1), None);
        assert_eq!(c.device_scale(H), 1.0);
    }

    #[test]
    fn a_node_not_seen_lately_follows_the_device_load() {
        let mut c = one_sample_cpu();
        let g = tiny_graph();
        let shape = RoundShape::decode(0);
        c.observe(at(&g, 0, shape), H, 1e-4);
        let prof = c.profiled_secs(at(&g, 0, shape), H);
        let seen = c.live_secs(H, 0, 1).unwrap();
        // the device then runs its other node 3x slower in the same rounds
        let prof1 = c.profiled_secs(at(&g, 1, shape), H);
        for _ in 0..2000 {
            c.observe(at(&g, 1, shape), H, 3.0 * prof1 * (1e-4 / prof));
        }
        let now = c.live_secs(H, 0, 1).unwrap();
        assert!((now / seen - 3.0).abs() < 0.05, "{seen} -> {now}");
    }

    #[test]
    fn prompt_rounds_do_not_rescale_decode_times() {
        // the profile is off by different factors at different batch sizes
        // (here: observed at 1x the profile at 1 token, 0.25x at 64): a
        // decode time stays what decode rounds measured
        let mut c = one_sample_cpu();
        let g = tiny_graph();
        let decode = RoundShape::decode(0);
        let prompt = RoundShape {
            n_tokens: 64,
            past: 0,
            n_outputs: 1,
        };
        let p1 = c.profiled_secs(at(&g, 0, decode), H);
        c.observe(at(&g, 0, decode), H, p1);
        let seen = c.live_secs(H, 0, 1).unwrap();
        let p64 = c.profiled_secs(at(&g, 0, prompt), H);
        for _ in 0..200 {
            c.observe(at(&g, 0, prompt), H, 0.25 * p64);
        }
        let now = c.live_secs(H, 0, 1).unwrap();
        assert!((now / seen - 1.0).abs() < 1e-9, "{seen} -> {now}");
        assert!(c.device_scale(H) < 0.5, "the device-wide ratio did move");
    }

    #[test]
    fn contention_is_the_median_of_the_op_at_the_nearest_batch() {
        // copy traffic doubles the memory-bound decode products (one of
        // them lost its core and ran 50x slower) and barely touches the
        // compute-bound prompt one; the device-wide factor fits neither
        let busy = |s: Sample, f: f64| Sample {
            contended: true,
            secs: s.secs * f,
            ..s
        };
        let (d, p) = (sample(1024, 1, 1e-4), sample(1024, 64, 4e-3));
        let (d2, d3) = (sample(512, 1, 1e-5), sample(2048, 1, 2e-4));
        let profile = DeviceProfile {
            device: "cpu".into(),
            kind: "cpu".into(),
            samples: vec![
                d.clone(),
                d2.clone(),
                d3.clone(),
                p.clone(),
                busy(d, 2.0),
                busy(d2, 50.0),
                busy(d3, 1.9),
                busy(p, 1.05),
            ],
            ..Default::default()
        };
        let c = CostModel::new((profile, 2), None);
        let g = tiny_graph();
        let prompt = RoundShape {
            n_tokens: 64,
            past: 0,
            n_outputs: 1,
        };
        let decode = c.contention_of(at(&g, 0, RoundShape::decode(0)), H);
        assert!((decode - 2.0).abs() < 1e-9, "{decode}");
        assert!((c.contention_of(at(&g, 0, prompt), H) - 1.05).abs() < 1e-9);
        let device = c.contention(H);
        assert!(device > 1.1 && device < 1.9, "{device}");
        // without samples under traffic, the device-wide factor (1: none)
        assert_eq!(one_sample_cpu().contention_of(at(&g, 0, prompt), H), 1.0);
        // beside copies: the floor (2x) until the device's own load passes it
        let mut c = c;
        let dec = RoundShape::decode(0);
        let p0 = c.profiled_secs(at(&g, 0, dec), H);
        assert!((c.node_secs_beside_copies(at(&g, 0, dec), H) / p0 - 2.0).abs() < 1e-9);
        for _ in 0..2000 {
            c.observe(at(&g, 0, dec), H, 3.0 * p0);
        }
        let loaded = c.node_secs_beside_copies(at(&g, 0, dec), H);
        assert!((loaded / p0 - 3.0).abs() < 1e-6, "{loaded}");
    }

    fn tiny_graph() -> Graph {
        use ats_core::dtype::DType;
        use ats_core::graph::{GraphBuilder, GraphInput, SubLayer, WeightInfo};
        let mut b = GraphBuilder::new(GraphInput::Rows { cols: 1024 });
        let w = b.weight(WeightInfo {
            name: "w".into(),
            dtype: DType::Q4K,
            ne: vec![1024, 1024],
            bytes: 1024 * 1024 / 256 * 144,
            file_offset: 0,
            layer: None,
            sublayer: SubLayer::FfnUp,
        });
        let mid = b.matmul("m", 0, w, None);
        let out = b.matmul("m2", mid, w, None);
        b.finish(out)
    }

    #[test]
    fn nearest_distance_prefers_close_shapes() {
        let a = sample(1024, 1, 0.0).key;
        let b = sample(2048, 1, 0.0).key;
        let c = sample(1024, 512, 0.0).key;
        assert!(dist(&a, &b, 2, 2) < dist(&a, &c, 2, 2));
    }
}
