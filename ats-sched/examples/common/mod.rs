//! Shared by the scheduling experiments: a synthetic model, simulated
//! machines, calibration of the cost model, and TPOT measurement.

#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use ats_core::device::{Device, KvType};
use ats_core::dtype::DType;
use ats_core::graph::cost::RoundShape;
use ats_core::spec::ModelSpec;
use ats_core::synth::SynthSpec;
use ats_cpu::CpuDevice;
use ats_sched::engine::{Engine, EngineConfig, Policy};
use ats_sched::planner::{Planner, PlannerConfig};
use ats_sched::profile::{CostModel, DeviceProfile};
use ats_sched::rescheduler::ReschedConfig;
use ats_sched::sim::{SimGpu, SimGpuConfig, Slowdown, Throttled};

/// A llama-shaped model big enough that copies and CPU work both matter
/// (about 24 MB of Q4_K/Q6_K weights).
pub fn write_model(dir: &Path) -> Arc<ModelSpec> {
    let spec = SynthSpec {
        arch: "llama".into(),
        n_embd: 512,
        n_layer: 8,
        n_head: 8,
        n_head_kv: 4,
        head_dim: 64,
        n_ff: 1792,
        n_vocab: 8192,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_expert: 0,
        tied: false,
        main_type: DType::Q4K,
        more_bits_type: DType::Q6K,
    };
    let path = dir.join("synthetic.gguf");
    spec.write(&path, 7).expect("writing the synthetic model");
    Arc::new(ModelSpec::open(&path).expect("reading it back"))
}

/// A simulated machine.
#[derive(Clone, Debug)]
pub struct Machine {
    /// The host CPU runs this many times slower than this machine's core.
    pub cpu_dilation: f64,
    /// CPU pressure over time.
    pub cpu_slow: Slowdown,
    /// The simulated GPU.
    pub gpu: SimGpuConfig,
}

/// Device 0: the (dilated, one-thread) CPU; device 1: the simulated GPU.
pub fn devices(m: &Machine) -> (Vec<Arc<dyn Device>>, Arc<SimGpu>) {
    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(1).expect("cpu"));
    let cpu: Arc<dyn Device> = Arc::new(Throttled::new(cpu, m.cpu_dilation, m.cpu_slow.clone()));
    let inner: Arc<dyn Device> = Arc::new(
        CpuDevice::with_isa(1, ats_cpu::matmul::Isa::detect(), "sim-gpu-kernels").expect("cpu"),
    );
    let gpu = Arc::new(SimGpu::new(inner, m.gpu.clone()));
    (vec![cpu, gpu.clone()], gpu)
}

/// A cost model whose node times come from running the model once on each
/// device (live measurements), with the simulated GPU's copy and switch costs.
pub fn calibrated_cost(spec: &Arc<ModelSpec>, devs: &[Arc<dyn Device>], m: &Machine) -> CostModel {
    let mut cost = CostModel::new(vec![
        (
            DeviceProfile {
                device: "cpu".into(),
                kind: "cpu".into(),
                ..Default::default()
            },
            1,
        ),
        (
            m.gpu.derive_profile("sim-gpu", &DeviceProfile::default()),
            1,
        ),
    ]);
    let graph = Arc::new(spec.graph().unwrap());
    // the GPU is calibrated on an unbudgeted twin: the same simulated
    // hardware, but room for every weight (the budget is a policy limit,
    // and the calibration runs the whole model resident)
    let mut twin_cfg = m.gpu.clone();
    twin_cfg.memory = 1 << 40;
    let (mut twin, _) = devices(&Machine {
        gpu: twin_cfg,
        ..m.clone()
    });
    twin[0] = devs[0].clone();
    let devs = &twin;
    for d in 0..devs.len() {
        let mut plan = ats_sched::exec::ExecPlan::all_cpu(&graph);
        if d == 1 {
            plan.node_device.iter_mut().for_each(|x| *x = 1);
            plan.weight_home
                .iter_mut()
                .for_each(|h| *h = ats_sched::exec::WeightHome::Resident(1));
            plan.kv_device.iter_mut().for_each(|x| *x = 1);
        }
        let host: Arc<dyn ats_core::device::HostMemory> = spec.gguf.backing().clone();
        let cfg = ats_sched::exec::ExecConfig {
            kv_capacity: 512,
            kv_type: KvType::F16,
            slots_per_role: 2,
            region: None,
        };
        let Ok(mut ex) =
            ats_sched::exec::Executor::new(graph.clone(), host, devs.to_vec(), cfg, plan)
        else {
            continue;
        };
        // the GPU reports its kernels' own times (as the engine sees them
        // live); a sync after every node would add a round trip to each
        ex.profile_nodes = d == 0;
        for (tokens, past) in [(1usize, 128usize), (64, 0)] {
            let shape = RoundShape {
                n_tokens: tokens,
                past,
                n_outputs: 1,
            };
            for rep in 0..3 {
                let r = Arc::new(ats_core::round::Round::text(
                    (0..tokens as u32).collect(),
                    past,
                    false,
                ));
                if ex.run(&r).is_err() {
                    break;
                }
                if rep == 0 {
                    continue; // warm-up
                }
                let stats = ex.last_stats().clone();
                for &(node, dev, secs) in &stats.node_secs {
                    cost.observe(&graph, dev, node, shape, true, secs);
                }
                for (node, secs) in devs[d].drain_timings().nodes {
                    cost.observe(&graph, d, node, shape, true, secs);
                }
            }
        }
    }
    cost
}

/// An engine on the machine, with load-aware re-planning on or off.
pub fn engine(
    spec: &Arc<ModelSpec>,
    m: &Machine,
    budget_frac: f64,
    n_ctx: usize,
    load_aware: bool,
) -> (Engine, Arc<SimGpu>) {
    let mut m = m.clone();
    m.gpu.memory = (spec.gguf.file_len() as f64 * budget_frac) as u64 + (4 << 20);
    let (devs, gpu) = devices(&m);
    let cost = calibrated_cost(spec, &devs, &m);
    let resched = if load_aware {
        ReschedConfig::default()
    } else {
        ReschedConfig {
            epsilon: 1e12,
            ..ReschedConfig::default()
        }
    };
    let pcfg = PlannerConfig {
        policy: Policy::Ats,
        n_ctx,
        kv_type: KvType::F16,
        slots_per_role: 2,
        all_logits: false,
        max_tier: Some(64),
        force_kind: None,
        resched: resched.clone(),
    };
    let planner = Planner::new(Arc::new(spec.graph().unwrap()), &devs, cost, pcfg).expect("a plan");
    let ecfg = EngineConfig {
        n_ctx: Some(n_ctx),
        kv_type: KvType::F16,
        policy: Policy::Ats,
        resched,
        ..EngineConfig::default()
    };
    (
        Engine::new(spec.clone(), devs, planner, ecfg).expect("engine"),
        gpu,
    )
}

/// Median seconds per decode step over `n` steps after a short prompt.
pub fn tpot(e: &mut Engine, n: usize) -> f64 {
    e.reset();
    e.prefill(&[1, 2, 3, 4, 5, 6, 7, 8], false)
        .expect("prefill");
    let mut v = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        e.decode(10 + i as u32).expect("decode");
        v.push(t.elapsed().as_secs_f64());
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
