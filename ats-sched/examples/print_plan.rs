//! Print the plan ATS makes for a model under a VRAM budget: where each
//! weight tensor lives and why, the GPU memory per region, and the plan
//! chosen for each token tier. Nothing is run or loaded onto a device.
//!
//! `cargo run --release -p ats-sched --example print_plan -- [MODEL.gguf] [BUDGET]`
//! (without a model, a small synthetic llama-shaped one is written to a
//! temporary folder)

use std::sync::Arc;

use ats_core::device::Device;
use ats_core::dtype::DType;
use ats_core::machine::Machine;
use ats_core::spec::ModelSpec;
use ats_core::synth::SynthSpec;
use ats_cpu::CpuDevice;
use ats_sched::config::RunConfig;
use ats_sched::planner::Planner;
use ats_sched::profile::{CostModel, DeviceProfile};

use ats_sched::sim::{SimGpu, SimGpuConfig};
use ats_sched::size::{fmt_bytes, parse_size};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = tempfile::tempdir()?;
    let path = match args.next() {
        Some(p) => p.into(),
        None => {
            let p = dir.path().join("synthetic.gguf");
            synthetic().write(&p, 7)?;
            p
        }
    };
    let spec = ModelSpec::open(&path)?;
    // default budget: room for the KV cache and buffers plus half the
    // weights, so some weights stay on the CPU
    let budget = match args.next() {
        Some(b) => parse_size(&b)?,
        None => spec.gguf.file_len() / 2 + (2 << 20),
    };

    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(1)?);
    // a GPU whose kernels run 8x faster than one CPU thread
    let gpu_cfg = SimGpuConfig {
        memory: budget,
        speed: 8.0,
        copy_gbps: 16.0,
        ..SimGpuConfig::default()
    };
    let cpu_profile = DeviceProfile {
        device: "cpu".into(),
        kind: "cpu".into(),
        ..Default::default()
    };
    let cost = CostModel::new((cpu_profile, 1), Some((gpu_profile(&gpu_cfg), 1)));
    let gpu: Arc<dyn Device> = Arc::new(SimGpu::new(cpu.clone(), gpu_cfg));
    let machine = Machine::new(cpu, Some(gpu))?;
    let run = RunConfig {
        n_ctx: 256,
        ..RunConfig::for_model(&spec, 1)
    };
    let planner = Planner::new(spec.graph().clone(), &machine, cost, &run)?;
    let set = planner.plans();
    let r = planner.report();

    println!("{} under a {} budget", path.display(), fmt_bytes(budget));
    for t in &r.tensors {
        println!(
            "  {:<32} {:>10}  {:<6} {:<9} {}",
            t.name,
            fmt_bytes(t.bytes),
            t.placement.name(),
            t.region.map_or("none", |r| r.name()),
            t.why
        );
    }
    println!("GPU peak {}:", fmt_bytes(r.peak_bytes));
    for (region, bytes) in r.regions.iter().filter(|x| x.1 > 0) {
        println!("  {:<9} {:>10}", region.name(), fmt_bytes(bytes));
    }
    for t in &set.tiers {
        println!(
            "tier {:>5}: {:?} plan, {:.3} ms per round (estimated)",
            t.tier,
            t.kind,
            t.est_secs * 1e3
        );
    }
    for n in &r.notes {
        println!("note: {n}");
    }
    Ok(())
}

/// A small llama-shaped model of Q4_K weights (about 3 MB).
fn synthetic() -> SynthSpec {
    SynthSpec {
        arch: "llama".into(),
        n_embd: 256,
        n_layer: 4,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 64,
        n_ff: 768,
        n_vocab: 2048,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_expert: 0,
        n_expert_shared: 0,
        n_dense_lead: 0,
        tied: false,
        main_type: DType::Q4K,
        more_bits_type: DType::Q6K,
    }
}

/// Without a measured profile (`ats-cli profile`) the cost model plans for a
/// typical discrete GPU's roofline, with the simulated GPU's copy speed.
fn gpu_profile(cfg: &SimGpuConfig) -> DeviceProfile {
    DeviceProfile {
        device: "sim-gpu".into(),
        kind: "gpu".into(),
        h2d_pinned_gbps: Some(cfg.copy_gbps),
        h2d_pageable_gbps: Some(cfg.copy_gbps),
        d2h_gbps: Some(cfg.copy_gbps),
        switch_secs: Some((cfg.sync_us + cfg.launch_us) * 1e-6),
        ..Default::default()
    }
}
