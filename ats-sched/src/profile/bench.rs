//! Running the micro-benchmarks of the install-phase profile through the
//! same executor the engine uses, on any device.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use ats_core::device::{Device, DeviceKind, HostBytes, HostMemory};
use ats_core::dtype::DType;
use ats_core::gguf::Backing;
use ats_core::graph::cost::RoundShape;
use ats_core::graph::{
    AttnSpec, Graph, GraphBuilder, GraphInput, KvCacheInfo, Mask, Op, Rows, SubLayer, WeightInfo,
};
use ats_core::ledger::Region;
use ats_core::round::{Positions, Round};

use super::{DeviceProfile, PROFILE_VERSION, Profile, Sample, op_key};
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
        }
    }
}

/// One micro-benchmark: a graph, its weights, and the rows it takes.
#[derive(Clone)]
struct Micro {
    graph: Arc<Graph>,
    host: Arc<Backing>,
    /// Node whose time is the sample.
    node: usize,
    tokens: usize,
    past: usize,
}

fn weight(name: &str, dtype: DType, ne: Vec<usize>, offset: &mut u64) -> WeightInfo {
    let n: usize = ne.iter().product();
    let bytes = dtype.bytes_for(n as u64).expect("whole blocks");
    let w = WeightInfo {
        name: name.into(),
        dtype,
        ne,
        bytes,
        file_offset: *offset,
        layer: None,
        sublayer: SubLayer::FfnUp,
    };
    *offset += bytes.div_ceil(64) * 64;
    w
}

fn weights_backing(ws: &[&WeightInfo]) -> Arc<Backing> {
    let end = ws
        .iter()
        .map(|w| w.file_offset + w.bytes)
        .max()
        .unwrap_or(0);
    let mut data = vec![0u8; end as usize];
    for (i, w) in ws.iter().enumerate() {
        let n = w.ne.iter().product::<usize>();
        let a = (3.0 / w.cols() as f32).sqrt();
        let bytes = ats_core::synth::random_tensor(w.dtype, n, a, 17 + i as u64);
        data[w.file_offset as usize..][..bytes.len()].copy_from_slice(&bytes);
    }
    Arc::new(Backing::Owned(data))
}

fn matmul_micro(dtype: DType, rows: usize, cols: usize, tokens: usize) -> Micro {
    let mut off = 0;
    let w = weight("w", dtype, vec![cols, rows], &mut off);
    let host = weights_backing(&[&w]);
    let mut b = GraphBuilder::new(GraphInput::Rows { cols });
    let wi = b.weight(w);
    let out = b.matmul("matmul", 0, wi, None);
    Micro {
        graph: Arc::new(b.finish(out)),
        host,
        node: 0,
        tokens,
        past: 0,
    }
}

fn attention_micro(n_heads: usize, n_kv: usize, hd: usize, tokens: usize, ctx: usize) -> Micro {
    let (dq, dkv) = (n_heads * hd, n_kv * hd);
    let mut off = 0;
    let wk = weight("wk", DType::F32, vec![dq, dkv], &mut off);
    let wv = weight("wv", DType::F32, vec![dq, dkv], &mut off);
    let host = weights_backing(&[&wk, &wv]);
    let mut b = GraphBuilder::new(GraphInput::Rows { cols: dq });
    let (k, v) = {
        let (wk, wv) = (b.weight(wk), b.weight(wv));
        (b.matmul("k", 0, wk, None), b.matmul("v", 0, wv, None))
    };
    let cache = b.kv_cache(KvCacheInfo {
        layer: 0,
        n_kv_heads: n_kv,
        head_dim: hd,
    });
    let spec = AttnSpec {
        cache: Some(cache),
        n_heads,
        n_kv_heads: n_kv,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
        mask: Mask::Causal,
    };
    let out = b.attention("attention", 0, k, v, spec);
    Micro {
        graph: Arc::new(b.finish(out)),
        host,
        node: 2,
        tokens,
        past: ctx.saturating_sub(tokens),
    }
}

fn elementwise_micro(op: &str, cols: usize, tokens: usize) -> Micro {
    let mut off = 0;
    let w = weight("norm", DType::F32, vec![cols], &mut off);
    let host = weights_backing(&[&w]);
    let mut b = GraphBuilder::new(GraphInput::Rows { cols });
    let out = match op {
        "rms_norm" => {
            let wi = b.weight(w);
            b.rms_norm("rms_norm", 0, wi, 1e-5, cols)
        }
        "swiglu" => b.swiglu("swiglu", 0, 0),
        _ => b.add("add", 0, 0),
    };
    Micro {
        graph: Arc::new(b.finish(out)),
        host,
        node: 0,
        tokens,
        past: 0,
    }
}

/// Runs a micro-benchmark on device `d` of `devices` and returns the median seconds of its node.
fn time_micro(
    devices: &[Arc<dyn Device>],
    d: usize,
    m: &Micro,
    reps: usize,
) -> Result<f64, ExecError> {
    let g = &m.graph;
    let plan = ExecPlan {
        node_device: vec![d; g.nodes.len()],
        weight_home: vec![
            if d == 0 {
                WeightHome::Host
            } else {
                WeightHome::Resident(d)
            };
            g.weights.len()
        ],
        kv_device: vec![d; g.kv_caches.len()],
    };
    let cfg = ExecConfig {
        kv_capacity: (m.past + m.tokens).max(1),
        ..ExecConfig::default()
    };
    let host: Arc<dyn HostMemory> = m.host.clone();
    let mut ex = Executor::new(g.clone(), host, devices.to_vec(), cfg, plan)?;
    ex.profile_nodes = true;
    let cols = match g.input {
        GraphInput::Rows { cols } => cols,
        GraphInput::Tokens => 1,
    };
    let round = Arc::new(Round {
        input_rows: Some(Arc::new(vec![0.01; m.tokens * cols])),
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

/// The shapes a profile measures: the matrices of real model families.
fn matmul_shapes(quick: bool) -> Vec<(usize, usize)> {
    if quick {
        vec![(576, 576), (1536, 576), (2048, 2048), (8192, 2048)]
    } else {
        vec![
            (576, 576),
            (1536, 576),
            (576, 1536),
            (2048, 2048),
            (8192, 2048),
            (2048, 8192),
            (4096, 4096),
            (14336, 4096),
        ]
    }
}

fn token_counts(quick: bool) -> Vec<usize> {
    if quick {
        vec![1, 16, 128]
    } else {
        vec![1, 4, 16, 64, 512]
    }
}

fn dtypes(quick: bool) -> Vec<DType> {
    if quick {
        vec![DType::Q4_1, DType::Q4K, DType::Q6K, DType::Q8_0, DType::F32]
    } else {
        vec![
            DType::F32,
            DType::F16,
            DType::Q8_0,
            DType::Q4_0,
            DType::Q4_1,
            DType::Q5_0,
            DType::Q4K,
            DType::Q5K,
            DType::Q6K,
        ]
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

/// Measures the given devices. `make_cpu(threads)` makes a CPU device with
/// that many threads (device 0 of `devices` is the host CPU). `progress`
/// gets (what, done, total).
pub fn profile_devices(
    devices: &[Arc<dyn Device>],
    make_cpu: &dyn Fn(usize) -> Result<Arc<dyn Device>, String>,
    opts: &BenchOptions,
    progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<Profile, String> {
    let t0 = Instant::now();
    let e = |x: ExecError| x.to_string();
    let mut micros: Vec<Micro> = Vec::new();
    for dt in dtypes(opts.quick) {
        for &(r, c) in &matmul_shapes(opts.quick) {
            for &t in &token_counts(opts.quick) {
                // keep the full profile to minutes: skip the largest products;
                // K-quant rows need whole 256-element super-blocks
                if (r * c * t) as f64 > if opts.quick { 3e9 } else { 8e9 }
                    || c % dt.block_size() != 0
                {
                    continue;
                }
                micros.push(matmul_micro(dt, r, c, t));
            }
        }
    }
    let attn_ctx: Vec<usize> = if opts.quick {
        vec![256, 2048]
    } else {
        vec![128, 512, 2048, 8192]
    };
    for &(h, kv, hd) in &[(9usize, 3usize, 64usize), (32, 8, 128)] {
        for &ctx in &attn_ctx {
            for &t in &[1usize, 64] {
                if t <= ctx {
                    micros.push(attention_micro(h, kv, hd, t, ctx));
                }
            }
        }
    }
    for op in ["add", "rms_norm", "swiglu"] {
        for &cols in &[576usize, 4096] {
            for &t in &[1usize, 512] {
                micros.push(elementwise_micro(op, cols, t));
            }
        }
    }

    let mut profile = Profile {
        version: PROFILE_VERSION,
        fingerprint: super::hardware_fingerprint(
            &devices
                .iter()
                .map(|d| d.info().name.clone())
                .collect::<Vec<_>>(),
        ),
        quick: opts.quick,
        took_secs: 0.0,
        devices: Vec::new(),
    };
    let total = micros.len() * (opts.cpu_threads.len() + 1 + devices.len().saturating_sub(1));
    let mut done = 0;

    // the CPU over thread counts, and under copy traffic at the full count
    let mut cpu = DeviceProfile {
        device: devices[0].info().name.clone(),
        kind: "cpu".into(),
        ..Default::default()
    };
    let full = devices[0].info().parallelism.unwrap_or(1);
    for &threads in &opts.cpu_threads {
        let dev = if threads == full {
            devices[0].clone()
        } else {
            make_cpu(threads)?
        };
        let set = [dev];
        for m in &micros {
            progress(&format!("cpu x{threads}"), done, total);
            let s = time_micro(&set, 0, m, opts.reps).map_err(e)?;
            cpu.samples.push(sample_of(m, threads, false, s));
            done += 1;
        }
    }
    {
        let _traffic = CopyTraffic::start();
        let set = [devices[0].clone()];
        for m in &micros {
            progress("cpu under copy traffic", done, total);
            let s = time_micro(&set, 0, m, opts.reps).map_err(e)?;
            cpu.samples.push(sample_of(m, full, true, s));
            done += 1;
        }
    }
    profile.devices.push(cpu);

    // A GPU's time per token falls steeply with the batch, so prompt tiers
    // cannot be extrapolated from the small batches the CPU can afford:
    // real GPUs also measure the large ones (in seconds, on a GPU). Their
    // weights are made only when there is such a GPU, once per shape.
    let real_gpus = devices[1..]
        .iter()
        .filter(|d| d.info().kind == DeviceKind::Gpu)
        .count();
    let mut gpu_micros: Vec<Micro> = Vec::new();
    if real_gpus > 0 {
        let mut shapes: Vec<Micro> = Vec::new();
        for dt in dtypes(opts.quick) {
            for &(r, c) in &[(4096usize, 4096usize), (14336, 4096), (4096, 14336)] {
                if c % dt.block_size() == 0 {
                    shapes.push(matmul_micro(dt, r, c, 512));
                }
            }
        }
        shapes.push(attention_micro(32, 8, 128, 512, 2048));
        for m in shapes {
            // the same weights at 2048 tokens (attention: the whole 2048 context)
            let end = m.tokens + m.past;
            gpu_micros.push(Micro {
                tokens: 2048,
                past: end.saturating_sub(2048),
                ..m.clone()
            });
            gpu_micros.push(m);
        }
    }
    let total = total + real_gpus * gpu_micros.len();

    for d in 1..devices.len() {
        let dev = &devices[d];
        let extra: &[Micro] = if dev.info().kind == DeviceKind::Gpu {
            &gpu_micros
        } else {
            &[]
        };
        let mut dp = DeviceProfile {
            device: dev.info().name.clone(),
            kind: match dev.info().kind {
                DeviceKind::Cpu => "cpu",
                DeviceKind::Gpu => "gpu",
                DeviceKind::SimulatedGpu => "simulated_gpu",
            }
            .into(),
            ..Default::default()
        };
        for m in micros.iter().chain(extra) {
            progress(&dev.info().name, done, total);
            let s = time_micro(devices, d, m, opts.reps).map_err(e)?;
            dp.samples.push(sample_of(m, 1, false, s));
            done += 1;
        }
        let (pinned, pageable, d2h) =
            bandwidth(dev.as_ref(), if opts.quick { 16 << 20 } else { 64 << 20 })
                .map_err(|x| x.to_string())?;
        dp.h2d_pinned_gbps = pinned;
        dp.h2d_pageable_gbps = Some(pageable);
        dp.d2h_gbps = Some(d2h);
        dp.switch_secs = Some(switch_cost(devices, d).map_err(e)?);
        profile.devices.push(dp);
    }
    progress("done", total, total);
    profile.took_secs = t0.elapsed().as_secs_f64();
    Ok(profile)
}

/// Host-to-device (async from shared memory, and blocking from a Vec) and device-to-host GB/s.
fn bandwidth(
    dev: &dyn Device,
    bytes: usize,
) -> Result<(Option<f64>, f64, f64), ats_core::device::DeviceError> {
    let buf = dev.alloc(Region::Workspace, bytes, "bandwidth test")?;
    let data = vec![7u8; bytes];
    let t = Instant::now();
    dev.write(&buf, 0, &data)?;
    dev.synchronize()?;
    let pageable = bytes as f64 / t.elapsed().as_secs_f64() / 1e9;
    let pinned = if dev.supports_async() {
        let host: Arc<dyn HostMemory> = Arc::new(Backing::Owned(data.clone()));
        let _ = dev.pin_host(&host)?;
        let src = HostBytes {
            owner: host,
            offset: 0,
            len: bytes,
        };
        let t = Instant::now();
        dev.copy_async(&buf, 0, &src)?;
        dev.synchronize()?;
        Some(bytes as f64 / t.elapsed().as_secs_f64() / 1e9)
    } else {
        None
    };
    let mut back = vec![0u8; bytes];
    let t = Instant::now();
    dev.read(&buf, 0, &mut back)?;
    let d2h = bytes as f64 / t.elapsed().as_secs_f64() / 1e9;
    Ok((pinned, pageable, d2h))
}

/// The fixed cost of a switch: a chain of small adds alternating between
/// the host and device `d`, minus the same chain on the host alone.
fn switch_cost(devices: &[Arc<dyn Device>], d: usize) -> Result<f64, ExecError> {
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
    let time_plan = |node_device: Vec<usize>| -> Result<f64, ExecError> {
        let plan = ExecPlan {
            node_device,
            weight_home: vec![],
            kv_device: vec![],
        };
        let mut ex = Executor::new(
            g.clone(),
            host.clone(),
            devices.to_vec(),
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
    let alt = time_plan((0..N).map(|i| if i % 2 == 0 { d } else { 0 }).collect())?;
    let same = time_plan(vec![0; N])?;
    Ok(((alt - same) / N as f64).max(0.0))
}
