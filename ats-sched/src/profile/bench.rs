//! Running the micro-benchmarks of the install-phase profile through the
//! same executor the engine uses, on any device.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use ats_core::device::{Device, DeviceKind, HostBytes, HostMemory};
use ats_core::gguf::Backing;
use ats_core::graph::cost::RoundShape;
use ats_core::graph::{GraphBuilder, GraphInput, Op, Rows};
use ats_core::ledger::Region;
use ats_core::machine::{DeviceId, Machine};
use ats_core::round::{Positions, Round};

use super::micros::{Micro, expert_set, large_batch_set, micro_set};
use super::{DeviceProfile, PROFILE_VERSION, Profile, RoutedCopySample, Sample, op_key};
use crate::exec::{ExecConfig, ExecError, ExecPlan, Executor, WeightHome};

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Fewer shapes and repetitions (under a minute).
    pub quick: bool,
    /// CPU thread counts to measure.
    pub cpu_threads: Vec<usize>,
    /// Repetitions per sample (the median is kept).
    pub reps: usize,
    /// Leave the micro-benchmarks' weights zero: for machine models, whose
    /// devices only time the work (see [`crate::sim::machine`]).
    pub zero_weights: bool,
}

impl BenchOptions {
    /// The defaults for a full or quick profile on a machine with `max_threads` threads.
    pub fn new(quick: bool, max_threads: usize) -> Self {
        let mut t = vec![1, max_threads];
        if max_threads >= 4 {
            t.insert(1, max_threads / 2);
        }
        t.dedup();
        BenchOptions {
            quick,
            cpu_threads: if quick { vec![max_threads] } else { t },
            reps: if quick { 3 } else { 5 },
            zero_weights: false,
        }
    }
}

/// Runs a micro-benchmark on device `d` of `machine` and returns the median
/// seconds of its node, timed as a run times it (a GPU's node by its
/// in-stream events, not by the host around a synchronisation: the wait
/// for the host made every GPU sample 5x too slow for small ops).
fn time_micro(
    machine: &Machine,
    d: DeviceId,
    m: &Micro,
    opts: &BenchOptions,
) -> Result<f64, ExecError> {
    let reps = opts.reps;
    let g = &m.graph;
    let home = match d {
        DeviceId::Host => WeightHome::Host,
        DeviceId::Gpu => WeightHome::Resident,
    };
    let plan = ExecPlan {
        node_device: vec![d; g.nodes.len()],
        weight_home: vec![home; g.weights.len()],
        kv_device: vec![d; g.kv_caches.len()],
    };
    let cfg = ExecConfig {
        kv_capacity: (m.past + m.tokens).max(1),
        ..ExecConfig::default()
    };
    let host: Arc<dyn HostMemory> = m.host.clone();
    let mut ex = Executor::new(g.clone(), host, machine.clone(), cfg, plan)?;
    let cols = match g.input {
        GraphInput::Rows { cols } => cols,
        GraphInput::Tokens => 1,
    };
    let round = Arc::new(Round {
        // a device that only times the work needs no input values
        input_rows: Some(Arc::new(input_rows(m.tokens * cols, opts.zero_weights))),
        n_rows: m.tokens,
        positions: Positions::linear(m.past, m.tokens),
        past: m.past,
        output_rows: vec![m.tokens - 1],
        ..Round::default()
    });
    ex.run(&round)?; // warm-up
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        ex.run(&round)?;
        let t = ex
            .last_stats()
            .node_secs
            .iter()
            .find(|(n, _, _)| *n == m.node)
            .map_or(ex.last_stats().total_secs, |x| x.2);
        times.push(t);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// A micro-benchmark's input: zeros for a device that only times the work,
/// else small values that differ from row to row (rows alike would route
/// every token of a MoE layer to the same experts).
fn input_rows(n: usize, zero: bool) -> Vec<f32> {
    if zero {
        return vec![0.0; n];
    }
    (0..n)
        .map(|i| ((i * 7919 % 201) as f32 - 100.0) * 1e-4)
        .collect()
}

fn sample_of(m: &Micro, threads: usize, contended: bool, secs: f64) -> Sample {
    let shape = RoundShape {
        n_tokens: m.tokens,
        past: m.past,
        n_outputs: 1,
    };
    let c = m.graph.node_cost(m.node, shape, true);
    Sample {
        key: op_key(&m.graph, m.node, shape),
        threads,
        contended,
        flops: c.flops,
        bytes: c.memory_bytes(),
        secs,
    }
}

/// Keeps a memory-bound copy running on another thread while alive
/// (memory-controller contention, as PCIe DMA causes).
struct CopyTraffic {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl CopyTraffic {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            let src = vec![1u8; 64 << 20];
            let mut dst = vec![0u8; 64 << 20];
            while !s.load(Ordering::Relaxed) {
                dst.copy_from_slice(&src);
                std::hint::black_box(&dst);
            }
        });
        CopyTraffic {
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for CopyTraffic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Measures `machine`'s devices. `make_cpu(threads)` makes a CPU device with
/// that many threads (for the host's smaller thread counts). `progress`
/// gets (what, done, total).
pub fn profile_devices(
    machine: &Machine,
    make_cpu: &dyn Fn(usize) -> Result<Arc<dyn Device>, String>,
    opts: &BenchOptions,
    progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<Profile, String> {
    profile_devices_with(machine, make_cpu, opts, progress, &|| {
        Box::new(CopyTraffic::start())
    })
}

/// [`profile_devices`] with the copy traffic of the contended CPU samples
/// made by `traffic` (alive while its guard is): a machine model starts
/// modelled PCIe traffic instead of a thread copying memory.
pub fn profile_devices_with(
    machine: &Machine,
    make_cpu: &dyn Fn(usize) -> Result<Arc<dyn Device>, String>,
    opts: &BenchOptions,
    progress: &mut dyn FnMut(&str, usize, usize),
    traffic: &dyn Fn() -> Box<dyn std::any::Any>,
) -> Result<Profile, String> {
    let t0 = Instant::now();
    // a real GPU (or a model of one) also measures large batches
    let gpu_like = machine
        .gpu()
        .is_some_and(|g| g.info().kind == DeviceKind::Gpu || g.virtual_time());
    let sets = || {
        let large = if gpu_like {
            large_batch_set(opts.quick)
        } else {
            Vec::new()
        };
        let experts = expert_set(opts.quick, gpu_like);
        (micro_set(opts.quick), large, experts)
    };
    let (micros, large, experts) = if opts.zero_weights {
        super::micros::with_zero_weights(sets)
    } else {
        sets()
    };
    let host_experts: Vec<&Micro> = experts
        .iter()
        .filter(|m| m.tokens <= HOST_EXPERT_TOKENS)
        .collect();
    let names: Vec<String> = machine.iter().map(|(_, d)| d.info().name.clone()).collect();
    let gpu_runs = machine
        .gpu()
        .map_or(0, |_| micros.len() + large.len() + experts.len());
    let mut count = Progress {
        done: 0,
        total: (micros.len() + host_experts.len()) * (opts.cpu_threads.len() + 1) + gpu_runs,
        report: progress,
    };
    let all: Vec<&Micro> = micros.iter().collect();
    let mut devices = vec![profile_host(
        machine, make_cpu, opts, &all, &mut count, traffic,
    )?];
    if let Some(gpu) = machine.gpu() {
        let all: Vec<&Micro> = micros.iter().chain(&large).collect();
        devices.push(profile_gpu(machine, gpu.as_ref(), opts, &all, &mut count)?);
    }
    // the routed experts last: a machine model's clock then reaches every
    // other sample at the time it did before they were measured (its
    // rounding moved plans that tie)
    let more = profile_host(machine, make_cpu, opts, &host_experts, &mut count, traffic)?;
    devices[0].samples.extend(more.samples);
    if let (Some(gpu), Some(dp)) = (machine.gpu(), devices.get_mut(1)) {
        let all: Vec<&Micro> = experts.iter().collect();
        dp.samples
            .extend(gpu_samples(machine, gpu.as_ref(), opts, &all, &mut count)?);
    }
    (count.report)("done", count.total, count.total);
    Ok(Profile {
        version: PROFILE_VERSION,
        fingerprint: super::hardware_fingerprint(&names),
        quick: opts.quick,
        took_secs: t0.elapsed().as_secs_f64(),
        devices,
    })
}

/// Runs done out of a total, reported as they go.
struct Progress<'a> {
    done: usize,
    total: usize,
    report: &'a mut dyn FnMut(&str, usize, usize),
}

impl Progress<'_> {
    fn step(&mut self, what: &str) {
        (self.report)(what, self.done, self.total);
        self.done += 1;
    }
}

/// The host CPU over thread counts, and under copy traffic at the full count.
fn profile_host(
    machine: &Machine,
    make_cpu: &dyn Fn(usize) -> Result<Arc<dyn Device>, String>,
    opts: &BenchOptions,
    micros: &[&Micro],
    count: &mut Progress<'_>,
    traffic: &dyn Fn() -> Box<dyn std::any::Any>,
) -> Result<DeviceProfile, String> {
    let e = |x: ExecError| x.to_string();
    let host = machine.host();
    let mut cpu = DeviceProfile {
        device: host.info().name.clone(),
        kind: DeviceKind::Cpu.name().into(),
        ..Default::default()
    };
    let full = host.info().parallelism.unwrap_or(1);
    for &threads in &opts.cpu_threads {
        let dev = if threads == full {
            host.clone()
        } else {
            make_cpu(threads)?
        };
        let alone = Machine::host_only(dev).map_err(|x| x.to_string())?;
        for m in micros {
            count.step(&format!("cpu x{threads}"));
            let s = time_micro(&alone, DeviceId::Host, m, opts).map_err(e)?;
            cpu.samples.push(sample_of(m, threads, false, s));
        }
    }
    let _traffic = traffic();
    let alone = Machine::host_only(host.clone()).map_err(|x| x.to_string())?;
    for m in micros {
        count.step("cpu under copy traffic");
        let s = time_micro(&alone, DeviceId::Host, m, opts).map_err(e)?;
        cpu.samples.push(sample_of(m, full, true, s));
    }
    Ok(cpu)
}

/// The GPU's kernels, copy bandwidths and switch cost.
fn profile_gpu(
    machine: &Machine,
    gpu: &dyn Device,
    opts: &BenchOptions,
    micros: &[&Micro],
    count: &mut Progress<'_>,
) -> Result<DeviceProfile, String> {
    let e = |x: ExecError| x.to_string();
    let mut dp = DeviceProfile {
        device: gpu.info().name.clone(),
        kind: gpu.info().kind.name().into(),
        samples: gpu_samples(machine, gpu, opts, micros, count)?,
        ..Default::default()
    };
    let bytes = if opts.quick { 16 << 20 } else { 64 << 20 };
    let (pinned, pageable, d2h) = bandwidth(gpu, bytes).map_err(|x| x.to_string())?;
    dp.h2d_pinned_gbps = pinned;
    dp.h2d_pageable_gbps = Some(pageable);
    dp.d2h_gbps = Some(d2h);
    dp.switch_secs = Some(switch_cost(machine).map_err(e)?);
    if gpu.supports_async() {
        dp.routed_copies = routed_copies(gpu, opts).map_err(|x| x.to_string())?;
    }
    Ok(dp)
}

/// The GPU's kernel samples of `micros`.
fn gpu_samples(
    machine: &Machine,
    gpu: &dyn Device,
    opts: &BenchOptions,
    micros: &[&Micro],
    count: &mut Progress<'_>,
) -> Result<Vec<Sample>, String> {
    let mut out = Vec::with_capacity(micros.len());
    for m in micros {
        count.step(&gpu.info().name);
        let s = time_micro(machine, DeviceId::Gpu, m, opts).map_err(|x| x.to_string())?;
        out.push(sample_of(m, 1, false, s));
    }
    Ok(out)
}

/// The largest batch of routed experts timed on the CPU (a 2048-token
/// layer would take seconds a repetition).
const HOST_EXPERT_TOKENS: usize = 512;

/// Experts in the routed-copy samples' stacked tensor (a 512-token prompt
/// of a 128-expert model chooses nearly all of them).
const ROUTED_EXPERTS: usize = 128;
/// Bytes of one expert in those samples (a 30B-A3B expert matrix is 0.9 MB).
const ROUTED_EXPERT_BYTES: usize = 512 << 10;

/// The routed-expert copy per count of experts chosen at once: its rate
/// grows with them where the device's SMs copy them (a fixed rate per
/// expert), up to the link's.
fn routed_copies(
    dev: &dyn Device,
    opts: &BenchOptions,
) -> Result<Vec<RoutedCopySample>, ats_core::device::DeviceError> {
    let len = ROUTED_EXPERTS * ROUTED_EXPERT_BYTES;
    let dst = dev.alloc(Region::Workspace, len, "routed copy test")?;
    let host: Arc<dyn HostMemory> = Arc::new(Backing::Owned(vec![7u8; len]));
    dev.pin_host(&host)?;
    let src = HostBytes {
        owner: host,
        offset: 0,
        len,
    };
    let counts: &[usize] = if opts.quick {
        &[1, 8, 32, 128]
    } else {
        &[1, 2, 4, 8, 16, 32, 64, 128]
    };
    let mut out = Vec::with_capacity(counts.len());
    for &experts in counts {
        let routing = routing_of(dev, experts)?;
        let mut times = Vec::with_capacity(opts.reps);
        for _ in 0..opts.reps.max(1) {
            dev.synchronize()?;
            let t = dev.now();
            dev.copy_routed_async(&dst, &src, ROUTED_EXPERT_BYTES, &routing, experts, 1)?;
            dev.synchronize()?;
            times.push(dev.now() - t);
        }
        times.sort_by(f64::total_cmp);
        out.push(RoutedCopySample {
            experts,
            bytes: (experts * ROUTED_EXPERT_BYTES) as u64,
            secs: times[times.len() / 2],
        });
    }
    Ok(out)
}

/// A routing on `dev` of `experts` rows choosing one expert each, spread
/// over the stacked tensor: each row its expert's id, then its weight.
fn routing_of(
    dev: &dyn Device,
    experts: usize,
) -> Result<ats_core::device::Buffer, ats_core::device::DeviceError> {
    let stride = ROUTED_EXPERTS / experts.max(1);
    let vals: Vec<f32> = (0..experts)
        .flat_map(|i| [(i * stride) as f32, 1.0])
        .collect();
    let bytes: &[u8] = bytemuck::cast_slice(&vals);
    let buf = dev.alloc(Region::Workspace, bytes.len(), "routed copy test routing")?;
    dev.write(&buf, 0, bytes)?;
    Ok(buf)
}

/// Host-to-device (async from shared memory, and blocking from a Vec) and device-to-host GB/s.
fn bandwidth(
    dev: &dyn Device,
    bytes: usize,
) -> Result<(Option<f64>, f64, f64), ats_core::device::DeviceError> {
    let buf = dev.alloc(Region::Workspace, bytes, "bandwidth test")?;
    let data = vec![7u8; bytes];
    // timed by the device's own clock (a machine model's virtual time)
    let t = dev.now();
    dev.write(&buf, 0, &data)?;
    dev.synchronize()?;
    let pageable = bytes as f64 / (dev.now() - t) / 1e9;
    let pinned = if dev.supports_async() {
        let host: Arc<dyn HostMemory> = Arc::new(Backing::Owned(data.clone()));
        let _ = dev.pin_host(&host)?;
        let src = HostBytes {
            owner: host,
            offset: 0,
            len: bytes,
        };
        let t = dev.now();
        dev.copy_async(&buf, 0, &src)?;
        dev.synchronize()?;
        Some(bytes as f64 / (dev.now() - t) / 1e9)
    } else {
        None
    };
    let mut back = vec![0u8; bytes];
    let t = dev.now();
    dev.read(&buf, 0, &mut back)?;
    let d2h = bytes as f64 / (dev.now() - t) / 1e9;
    Ok((pinned, pageable, d2h))
}

/// The fixed cost of a switch: a chain of small adds alternating between
/// the host and the GPU, minus the same chain on the host alone.
fn switch_cost(machine: &Machine) -> Result<f64, ExecError> {
    const N: usize = 32;
    let cols = 64;
    let mut b = GraphBuilder::new(GraphInput::Rows { cols });
    let mut x = 0;
    for i in 0..N {
        x = b.node(format!("add{i}"), Op::Add, &[x, x], &[], Rows::Tokens, cols);
    }
    let g = Arc::new(b.finish(x));
    let host: Arc<dyn HostMemory> = Arc::new(Backing::Owned(Vec::new()));
    let round = Arc::new(Round {
        input_rows: Some(Arc::new(vec![0.5; cols])),
        n_rows: 1,
        positions: Positions::linear(0, 1),
        output_rows: vec![0],
        ..Round::default()
    });
    let time_plan = |node_device: Vec<DeviceId>| -> Result<f64, ExecError> {
        let plan = ExecPlan {
            node_device,
            weight_home: vec![],
            kv_device: vec![],
        };
        let mut ex = Executor::new(
            g.clone(),
            host.clone(),
            machine.clone(),
            ExecConfig::default(),
            plan,
        )?;
        ex.run(&round)?;
        let mut ts = Vec::new();
        for _ in 0..7 {
            ex.run(&round)?;
            ts.push(ex.last_stats().total_secs);
        }
        ts.sort_by(f64::total_cmp);
        Ok(ts[3])
    };
    let alt = (0..N).map(|i| {
        if i % 2 == 0 {
            DeviceId::Gpu
        } else {
            DeviceId::Host
        }
    });
    let alt = time_plan(alt.collect())?;
    let same = time_plan(vec![DeviceId::Host; N])?;
    Ok(((alt - same) / N as f64).max(0.0))
}
