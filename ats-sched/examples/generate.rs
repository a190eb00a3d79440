//! Generate text with `ats-sched` and `ats-cpu` under a VRAM budget.
//!
//! The GPU here is ATS's simulated one (a CPU device that keeps a GPU's
//! memory ledger and costs), so this runs on any machine; swap in
//! `ats_cuda::open_device(Some(budget))` for a real GPU. The planner places
//! the weights that fit the budget on the GPU and streams or leaves the rest
//! on the CPU; the ledger shows the peak stayed inside the budget.
//!
//! `cargo run --release -p ats-sched --example generate -- MODEL.gguf [BUDGET] [PROMPT]`
//! (e.g. SmolLM2-135M-Instruct.Q4_1.gguf 40M "The capital of France is")

use std::io::Write;
use std::sync::Arc;

use ats_core::SamplerConfig;
use ats_core::device::Device;
use ats_core::machine::Machine;
use ats_core::spec::ModelSpec;
use ats_cpu::CpuDevice;
use ats_sched::config::RunConfig;
use ats_sched::profile::{CostModel, DeviceProfile};
use ats_sched::session::{GenEvent, GenParams, Session};

use ats_sched::sim::{SimGpu, SimGpuConfig};
use ats_sched::size::{fmt_bytes, parse_size};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let Some(model) = args.next() else {
        eprintln!("usage: generate MODEL.gguf [BUDGET (e.g. 40M)] [PROMPT]");
        std::process::exit(2);
    };
    let budget = parse_size(&args.next().unwrap_or_else(|| "40M".into()))?;
    let prompt = args
        .next()
        .unwrap_or_else(|| "The capital of France is".into());

    // the host CPU, and a simulated GPU with `budget` bytes
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(threads)?);
    // a GPU whose kernels run 8x faster than one CPU thread
    let gpu_cfg = SimGpuConfig {
        memory: budget,
        speed: 8.0,
        copy_gbps: 16.0,
        ..SimGpuConfig::default()
    };
    let kernels: Arc<dyn Device> = Arc::new(CpuDevice::new(1)?);
    let cpu_profile = DeviceProfile {
        device: "cpu".into(),
        kind: "cpu".into(),
        ..Default::default()
    };
    let cost = CostModel::new((cpu_profile, threads), Some((gpu_profile(&gpu_cfg), 1)));
    let gpu: Arc<dyn Device> = Arc::new(SimGpu::new(kernels, gpu_cfg));
    let machine = Machine::new(cpu, Some(gpu))?;

    let spec = Arc::new(ModelSpec::open(&model)?);
    let run = RunConfig {
        n_ctx: 512,
        vram: Some(budget),
        ..RunConfig::for_model(&spec, threads)
    };
    let mut engine = Session::new(spec, machine, cost, run)?;

    let ids = engine.tokenizer()?.encode(&prompt, true, true)?;
    let params = GenParams {
        max_tokens: 32,
        sampler: SamplerConfig::greedy(),
        ..GenParams::default()
    };
    print!("{prompt}");
    let g = engine.generate(&ids, &params, &mut |ev| {
        if let GenEvent::Text(t) = ev {
            print!("{t}");
            let _ = std::io::stdout().flush();
        }
        true // false would stop the generation
    })?;
    println!();
    eprintln!(
        "{} tokens at {:.1} t/s, stopped by {:?}",
        g.timings.gen_tokens,
        g.timings.gen_tps(),
        g.stop
    );
    for (_, d) in engine.machine().iter() {
        let s = d.ledger().snapshot();
        let budget = s.budget.map_or("no budget".into(), fmt_bytes);
        eprintln!("{}: peak {} ({budget})", s.device, fmt_bytes(s.peak));
    }
    Ok(())
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
