//! Shared by the scheduling experiments: a synthetic model, simulated
//! machines, calibration of the cost model, and TPOT measurement.

#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use ats_core::device::{Device, KvType};
use ats_core::dtype::DType;
use ats_core::graph::cost::RoundShape;
use ats_core::machine::{DeviceId, Machine};
use ats_core::spec::ModelSpec;
use ats_core::synth::SynthSpec;
use ats_cpu::CpuDevice;
use ats_sched::config::{Policy, RunConfig};
use ats_sched::planner::Planner;
use ats_sched::profile::{CostModel, DeviceProfile};
use ats_sched::rescheduler::ReschedConfig;
use ats_sched::session::Session;
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
pub struct SimMachine {
    /// The host CPU runs this many times slower than this machine's core.
    pub cpu_dilation: f64,
    /// CPU pressure over time.
    pub cpu_slow: Slowdown,
    /// The simulated GPU.
    pub gpu: SimGpuConfig,
}

/// The (dilated, one-thread) CPU and the simulated GPU.
pub fn devices(m: &SimMachine) -> (Machine, Arc<SimGpu>) {
    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(1).expect("cpu"));
    let cpu: Arc<dyn Device> = Arc::new(Throttled::new(cpu, m.cpu_dilation, m.cpu_slow.clone()));
    let inner: Arc<dyn Device> = Arc::new(
        CpuDevice::with_isa(1, ats_cpu::matmul::Isa::detect(), "sim-gpu-kernels").expect("cpu"),
    );
    let gpu = Arc::new(SimGpu::new(inner, m.gpu.clone()));
    let gpu_dev: Arc<dyn Device> = gpu.clone();
    (Machine::new(cpu, Some(gpu_dev)).expect("machine"), gpu)
}

/// A cost model whose node times come from running the model once on each
/// device (live measurements), with the simulated GPU's copy and switch costs.
pub fn calibrated_cost(spec: &Arc<ModelSpec>, devs: &Machine, m: &SimMachine) -> CostModel {
    let mut cost = CostModel::new(
        (
            DeviceProfile {
                device: "cpu".into(),
                kind: "cpu".into(),
                ..Default::default()
            },
            1,
        ),
        Some((
            m.gpu.derive_profile("sim-gpu", &DeviceProfile::default()),
            1,
        )),
    );
    let graph = spec.graph().clone();
    // the GPU is calibrated on an unbudgeted twin: the same simulated
    // hardware, but room for every weight (the budget is a policy limit,
    // and the calibration runs the whole model resident)
    let mut twin_cfg = m.gpu.clone();
    twin_cfg.memory = 1 << 40;
    let (twin, _) = devices(&SimMachine {
        gpu: twin_cfg,
        ..m.clone()
    });
    let twin = Machine::new(devs.host().clone(), twin.gpu().cloned()).expect("machine");
    for d in DeviceId::ALL {
        let mut plan = ats_sched::exec::ExecPlan::all_cpu(&graph);
        if d == DeviceId::Gpu {
            plan.node_device.iter_mut().for_each(|x| *x = d);
            plan.weight_home
                .iter_mut()
                .for_each(|h| *h = ats_sched::exec::WeightHome::Resident);
            plan.kv_device.iter_mut().for_each(|x| *x = d);
        }
        let host: Arc<dyn ats_core::device::HostMemory> = spec.gguf.backing().clone();
        let cfg = ats_sched::exec::ExecConfig {
            kv_capacity: 512,
            kv_block_tokens: ats_sched::session::KV_BLOCK_TOKENS,
            kv_type: KvType::F16,
            slots_per_role: 2,
            region: None,
        };
        let Ok(mut ex) =
            ats_sched::exec::Executor::new(graph.clone(), host, twin.clone(), cfg, plan)
        else {
            continue;
        };
        // the GPU reports its kernels' own times (as the engine sees them
        // live); a sync after every node would add a round trip to each
        ex.profile_nodes = d == DeviceId::Host;
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
                let dev = twin.get(d).expect("both devices");
                for (node, secs) in dev.drain_timings().nodes {
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
    m: &SimMachine,
    budget_frac: f64,
    n_ctx: usize,
    load_aware: bool,
) -> (Session, Arc<SimGpu>) {
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
    let run = RunConfig {
        n_ctx,
        policy: Policy::Ats,
        max_chunk: Some(64),
        resched,
        ..RunConfig::for_model(spec, 1)
    };
    let planner = Planner::new(spec.graph().clone(), &devs, cost, &run).expect("a plan");
    (
        Session::with_planner(spec.clone(), devs, planner).expect("session"),
        gpu,
    )
}

/// Median seconds per decode step over `n` steps after a short prompt.
pub fn tpot(e: &mut Session, n: usize) -> f64 {
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
