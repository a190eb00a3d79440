//! Issue 4: the same logits whatever sits where. Random placements across the
//! CPU and a simulated GPU, and every policy's plans, against the CPU alone.

use std::sync::Arc;

use ats_core::device::{Device, HostMemory, KvType};
use ats_core::graph::Op;
use ats_core::round::{Positions, Round};
use ats_core::spec::ModelSpec;
use ats_cpu::CpuDevice;
use ats_sched::config::Policy;
use ats_sched::exec::{ExecConfig, ExecPlan, Executor, WeightHome};
use ats_sched::sim::{SimGpu, SimGpuConfig};
use ats_tests::{Reference, XorShift, engine_on, fixtures, gpu_if, host_only, with_gpu};

const TEXT: [(&str, &str); 4] = [
    ("llama", "llama-f32.gguf"),
    ("qwen2", "qwen2-f32.gguf"),
    ("qwen3", "qwen3-f32.gguf"),
    ("qwen3_moe", "qwen3_moe-f32.gguf"),
];

fn sim_gpu(budget: u64) -> Arc<dyn Device> {
    let inner: Arc<dyn Device> = Arc::new(CpuDevice::new(1).unwrap());
    let cfg = SimGpuConfig {
        memory: budget,
        copy_gbps: 50.0,
        launch_us: 0.0,
        sync_us: 0.0,
        ..SimGpuConfig::default()
    };
    Arc::new(SimGpu::new(inner, cfg))
}

/// Largest relative difference, |a-b| / max(|b|, 1).
fn max_rel(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / y.abs().max(1.0))
        .fold(0.0, f32::max)
}

/// A random valid plan: each node and weight home drawn at random, each
/// attention node on its KV cache's device.
fn random_plan(g: &ats_core::graph::Graph, rng: &mut XorShift, mode: usize) -> ExecPlan {
    let mut p = ExecPlan::all_cpu(g);
    for (i, _) in g.nodes.iter().enumerate() {
        p.node_device[i] = match mode {
            0 => gpu_if(false),
            1 => gpu_if(true),
            2 => gpu_if(i % 2 == 1),
            _ => gpu_if(rng.coin(50)),
        };
    }
    for w in 0..g.weights.len() {
        p.weight_home[w] = match mode {
            0 => WeightHome::Host,
            1 => WeightHome::Resident,
            // alternating with everything streamed
            2 => WeightHome::Host,
            _ => {
                if rng.coin(40) {
                    WeightHome::Resident
                } else {
                    WeightHome::Host
                }
            }
        };
    }
    ats_tests::caches_follow_attention(g, &mut p);
    p
}

fn round_for(spec: &ModelSpec, ids: &[u32]) -> Round {
    let mut r = Round::text(ids.to_vec(), 0, true);
    if spec.arch.uses_mrope() {
        r.positions = Positions::mrope_text(0, ids.len());
    }
    r
}

#[test]
fn random_placements_give_the_cpu_logits() {
    let mut rng = XorShift(0x5eed_1234_5678_9abc);
    for (dir, file) in TEXT {
        let spec = ModelSpec::open(fixtures().join(dir).join(file)).unwrap();
        let graph = spec.graph().clone();
        let host: Arc<dyn HostMemory> = spec.gguf.backing().clone();
        let ids = Reference::open(&format!("{dir}/reference.safetensors")).ids("full_ids");
        let cfg = ExecConfig {
            kv_capacity: 64,
            kv_block_tokens: ats_sched::session::KV_BLOCK_TOKENS,
            kv_type: KvType::F32,
            slots_per_role: 2,
            region: None,
        };
        let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(2).unwrap());
        let mut base = Executor::new(
            graph.clone(),
            host.clone(),
            host_only(cpu.clone()),
            cfg.clone(),
            ExecPlan::all_cpu(&graph),
        )
        .unwrap();
        // prefill, then two decode steps, so the KV cache is exercised on each side
        let (a, b) = ids.split_at(ids.len() - 2);
        let want: Vec<Vec<f32>> = vec![
            base.run(&Arc::new(round_for(&spec, a))).unwrap().to_vec(),
            base.run(&Arc::new(Round {
                past: a.len(),
                ..round_decode(&spec, b[0], a.len())
            }))
            .unwrap()
            .to_vec(),
            base.run(&Arc::new(Round {
                past: a.len() + 1,
                ..round_decode(&spec, b[1], a.len() + 1)
            }))
            .unwrap()
            .to_vec(),
        ];
        for trial in 0..24 {
            let plan = random_plan(&graph, &mut rng, trial.min(3));
            let gpu = sim_gpu(1 << 30);
            let mut ex = Executor::new(
                graph.clone(),
                host.clone(),
                with_gpu(cpu.clone(), gpu.clone()),
                cfg.clone(),
                plan.clone(),
            )
            .unwrap();
            let got = [
                ex.run(&Arc::new(round_for(&spec, a))).unwrap().to_vec(),
                ex.run(&Arc::new(round_decode(&spec, b[0], a.len())))
                    .unwrap()
                    .to_vec(),
                ex.run(&Arc::new(round_decode(&spec, b[1], a.len() + 1)))
                    .unwrap()
                    .to_vec(),
            ];
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                let d = max_rel(g, w);
                assert!(
                    d < 1e-5,
                    "{dir} trial {trial} round {k}: relative difference {d}, {} switches",
                    plan.switches()
                );
            }
        }
    }
}

fn round_decode(spec: &ModelSpec, token: u32, past: usize) -> Round {
    let mut r = Round::text(vec![token], past, true);
    if spec.arch.uses_mrope() {
        r.positions = Positions::mrope_text(past, 1);
    }
    r
}

#[test]
fn every_policy_gives_the_cpu_logits_under_budgets() {
    for (dir, file) in TEXT {
        let path = fixtures().join(dir).join(file);
        let spec = Arc::new(ModelSpec::open(&path).unwrap());
        let ids = Reference::open(&format!("{dir}/reference.safetensors")).ids("full_ids");
        let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(2).unwrap());
        let mut base = engine_on(
            spec.clone(),
            host_only(cpu.clone()),
            64,
            KvType::F32,
            Policy::Ats,
            true,
        );
        let want = base.eval(&ids).unwrap();
        let model_bytes = spec.gguf.file_len();
        for policy in [
            Policy::Layers,
            Policy::CpuMoe,
            Policy::Static,
            Policy::Tiers,
            Policy::Ats,
        ] {
            for pct in [10u64, 35, 60, 100, 150] {
                let budget = model_bytes * pct / 100 + (1 << 20);
                let gpu = sim_gpu(budget);
                let mut e = engine_on(
                    spec.clone(),
                    with_gpu(cpu.clone(), gpu.clone()),
                    64,
                    KvType::F32,
                    policy,
                    true,
                );
                let got = e.eval(&ids).unwrap();
                let d = max_rel(&got, &want);
                assert!(
                    d < 1e-5,
                    "{dir} {policy:?} at {pct}%: relative difference {d}"
                );
                let peak = gpu.ledger().peak();
                assert!(
                    peak <= budget,
                    "{dir} {policy:?}: peak {peak} over budget {budget}"
                );
            }
        }
    }
}

#[test]
fn decode_streams_only_the_routed_experts() {
    let spec = ModelSpec::open(fixtures().join("qwen3_moe/qwen3_moe-f32.gguf")).unwrap();
    let graph = spec.graph().clone();
    let host: Arc<dyn HostMemory> = spec.gguf.backing().clone();
    let cfg = ExecConfig {
        kv_capacity: 64,
        kv_block_tokens: ats_sched::session::KV_BLOCK_TOKENS,
        kv_type: KvType::F32,
        slots_per_role: 2,
        region: None,
    };
    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(2).unwrap());
    let ids = Reference::open("qwen3_moe/reference.safetensors").ids("full_ids");
    for router_on_gpu in [false, true] {
        let inner: Arc<dyn Device> = Arc::new(CpuDevice::new(1).unwrap());
        let sim = Arc::new(SimGpu::new(
            inner,
            SimGpuConfig {
                launch_us: 0.0,
                sync_us: 0.0,
                ..SimGpuConfig::default()
            },
        ));
        let gpu: Arc<dyn Device> = sim.clone();
        // everything on the GPU, every weight streamed; optionally the routers on the CPU
        let mut plan = ExecPlan::all_cpu(&graph);
        plan.node_device = graph
            .nodes
            .iter()
            .map(|n| gpu_if(router_on_gpu || !matches!(n.op, Op::MoeRouter { .. })))
            .collect();
        plan.kv_device = vec![gpu_if(true); graph.kv_caches.len()];
        let mut ex = Executor::new(
            graph.clone(),
            host.clone(),
            with_gpu(cpu.clone(), gpu),
            cfg.clone(),
            plan,
        )
        .unwrap();
        let mut base = Executor::new(
            graph.clone(),
            host.clone(),
            host_only(cpu.clone()),
            cfg.clone(),
            ExecPlan::all_cpu(&graph),
        )
        .unwrap();
        let prompt = Round::text(ids[..8].to_vec(), 0, false);
        ex.run(&Arc::new(prompt.clone())).unwrap();
        base.run(&Arc::new(prompt)).unwrap();
        sim.reset_stats();
        let step = Arc::new(Round::text(vec![ids[8]], 8, false));
        let got = ex.run(&step).unwrap();
        let want = base.run(&step).unwrap();
        assert_eq!(got, want, "router on gpu: {router_on_gpu}");
        // per layer: 2 of 8 experts of each stacked tensor, the rest whole
        let expert_bytes: u64 = graph
            .weights
            .iter()
            .filter(|w| w.n_mats() > 1)
            .map(|w| w.bytes)
            .sum();
        // every other weight whole (the embedding lookup runs on the GPU here too),
        // the routers' only when they run on the GPU
        let other_bytes: u64 = graph
            .weights
            .iter()
            .filter(|w| w.n_mats() == 1 && (router_on_gpu || !w.name.contains("ffn_gate_inp")))
            .map(|w| w.bytes)
            .sum();
        // weight copies only (activations are not in the copy log), as the
        // executor read them from the device at the end of the round
        let copied: u64 = ex.last_stats().async_copies.iter().map(|c| c.1).sum();
        let routed = copied - other_bytes;
        assert_eq!(
            routed,
            expert_bytes * 2 / 8,
            "router on gpu: {router_on_gpu}: {copied} bytes copied"
        );
    }
}
