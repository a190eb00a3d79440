//! Shared by the scheduling experiments: synthetic models, machine models
//! in virtual time (`--sim-machine`), sessions on them, and TPOT measured
//! by the machine's clock.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ats_core::device::{Device, KvType};
use ats_core::dtype::DType;
use ats_core::spec::ModelSpec;
use ats_core::synth::SynthSpec;
use ats_cpu::CpuDevice;
use ats_sched::config::{Policy, RunConfig, Workload};
use ats_sched::planner::Planner;
use ats_sched::rescheduler::ReschedConfig;
use ats_sched::session::Session;
use ats_sched::sim::{MachineSpec, VirtualMachine};

/// A llama-shaped model big enough that copies and CPU work both matter
/// (about 24 MB of Q4_K/Q6_K weights), with random weights.
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
        n_expert_shared: 0,
        n_dense_lead: 0,
        tied: false,
        main_type: DType::Q4K,
        more_bits_type: DType::Q6K,
    };
    let path = dir.join("synthetic.gguf");
    spec.write(&path, 7).expect("writing the synthetic model");
    Arc::new(ModelSpec::open(&path).expect("reading it back"))
}

/// A synthetic model of a `SynthSpec` preset's shapes (`llama-8b`,
/// `qwen3-30b-a3b`, ...) with all-zero weights in a sparse file: for
/// timing-only machine models (`compute=off`).
pub fn zeros_model(dir: &Path, preset: &str) -> Arc<ModelSpec> {
    let spec = SynthSpec::preset(preset).expect("a synth preset");
    let path: PathBuf = dir.join(format!("{preset}-zeros.gguf"));
    if !path.exists() {
        spec.write_zeros(&path, None)
            .expect("writing the sparse model");
    }
    Arc::new(ModelSpec::open(&path).expect("reading it back"))
}

/// Real threads for the simulated devices' kernels.
fn real_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A real CPU device for a simulated device's kernels.
pub fn kernels() -> Arc<dyn Device> {
    Arc::new(
        CpuDevice::with_isa(
            real_threads(),
            ats_cpu::matmul::Isa::detect(),
            "sim-kernels",
        )
        .expect("cpu"),
    )
}

/// A machine model: `spec` (`NAME[,key=value...]`), ATS on `threads` host
/// threads, a GPU budget of `vram` bytes.
pub fn machine(spec: &str, threads: usize, vram: u64) -> VirtualMachine {
    let spec = MachineSpec::parse(spec).unwrap_or_else(|e| panic!("{e}"));
    VirtualMachine::new(spec, threads, Some(vram), kernels(), kernels())
}

/// A session of `model` on `vm` under `policy`, planned with the machine's
/// own profile (as `ats-cli --sim-machine` plans), re-planning as `resched`
/// says.
pub fn session(
    model: &Arc<ModelSpec>,
    vm: &VirtualMachine,
    policy: Policy,
    n_ctx: usize,
    resched: ReschedConfig,
) -> Result<Session, String> {
    session_for(model, vm, policy, n_ctx, resched, None)
}

/// [`session`], its layout chosen for `workload` (as `bench` and
/// `--workload` state it).
pub fn session_for(
    model: &Arc<ModelSpec>,
    vm: &VirtualMachine,
    policy: Policy,
    n_ctx: usize,
    resched: ReschedConfig,
    workload: Option<Workload>,
) -> Result<Session, String> {
    let cost = vm.cost_model(true, &|_| kernels())?;
    let run = RunConfig {
        n_ctx,
        kv_type: KvType::F16,
        policy,
        resched,
        vram: vm.machine().gpu().and_then(|g| g.ledger().budget()),
        workload,
        ..RunConfig::for_model(model, vm.threads())
    };
    let planner =
        Planner::new(model.graph().clone(), vm.machine(), cost, &run).map_err(|e| e.to_string())?;
    Session::with_planner(model.clone(), vm.machine().clone(), planner).map_err(|e| e.to_string())
}

/// Re-scheduling that never re-plans and never auditions (the static
/// policy of the load experiment, and plans judged by estimate alone).
pub fn frozen() -> ReschedConfig {
    ReschedConfig {
        epsilon: 1e12,
        audition_rounds: 0,
        ..ReschedConfig::default()
    }
}

/// Virtual seconds of each of `n` decode rounds.
pub fn decode_times(e: &mut Session, n: usize, first_token: u32) -> Vec<f64> {
    let vocab = e.spec().hp.n_vocab as u32;
    (0..n)
        .map(|i| {
            let t0 = e.now();
            e.decode((first_token + i as u32 * 7919) % vocab)
                .expect("decode");
            e.now() - t0
        })
        .collect()
}

/// The median.
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

/// `n` prompt tokens (a fixed pattern within the vocabulary).
pub fn prompt(e: &Session, n: usize) -> Vec<u32> {
    let vocab = e.spec().hp.n_vocab as u32;
    (0..n as u32).map(|i| (i * 7 + 3) % vocab).collect()
}
