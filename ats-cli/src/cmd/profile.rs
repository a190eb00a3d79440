//! `ats-cli profile`: the install-phase benchmark of this machine's devices.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use ats_core::device::Device;
use ats_core::machine::Machine;
use ats_cpu::CpuDevice;
use ats_sched::profile::{
    BenchOptions, default_profile_path, hardware_fingerprint, profile_devices, save_profile,
};
use clap::Args;

use crate::args::DeviceArgs;
use crate::load;

/// Measure kernels, copies and switches; save the profile.
#[derive(Args, Debug)]
pub struct ProfileArgs {
    /// Fewer shapes and repetitions: under a minute.
    #[arg(long = "quick")]
    quick: bool,
    /// CPU threads (default: all cores).
    #[arg(short = 't', long = "threads")]
    threads: Option<usize>,
    /// Also profile a simulated GPU with these settings.
    #[arg(long = "sim-gpu", num_args = 0..=1, default_missing_value = "")]
    sim_gpu: Option<String>,
    /// Write here instead of the cache directory.
    #[arg(short = 'o', long = "out")]
    out: Option<PathBuf>,
}

pub fn run(a: ProfileArgs) -> Result<()> {
    let devices = DeviceArgs {
        threads: a.threads,
        sim_gpu: a.sim_gpu.clone(),
        ..DeviceArgs::default()
    };
    let mut machine = load::machine(&devices)?.machine;
    // a real GPU is profiled whenever one opens (its whole free memory is
    // the budget here: the profile measures speeds, not capacity)
    if a.sim_gpu.is_none() {
        match ats_cuda::open_device(None) {
            Ok(gpu) => machine = Machine::new(machine.host().clone(), Some(gpu))?,
            Err(e) => eprintln!("ats: warning: no usable GPU ({e}): profiling the CPU alone"),
        }
    }
    let threads = load::threads(a.threads)?;
    let opts = BenchOptions::new(a.quick, threads);
    let make_cpu = |t: usize| -> Result<Arc<dyn Device>, String> {
        Ok(Arc::new(CpuDevice::new(t).map_err(|e| e.to_string())?) as Arc<dyn Device>)
    };
    // a bar on a terminal, else a plain line every few seconds
    let bar = crate::progress::enabled().then(|| crate::progress::bar(0));
    let mut last = std::time::Instant::now();
    let mut progress = |what: &str, done: usize, total: usize| match &bar {
        Some(pb) => {
            pb.set_message(format!("profiling {what}"));
            pb.set_length(total as u64);
            pb.set_position(done as u64);
        }
        None => {
            if last.elapsed().as_secs() >= 5 || done == total {
                tracing::info!("profiling {what} {done}/{total}");
                last = std::time::Instant::now();
            }
        }
    };
    let profile =
        profile_devices(&machine, &make_cpu, &opts, &mut progress).map_err(anyhow::Error::msg)?;
    if let Some(pb) = &bar {
        pb.finish_and_clear();
    }
    let names = load::real_device_names(&machine);
    let path = match a.out {
        Some(p) => p,
        None => default_profile_path(&hardware_fingerprint(&names))
            .context("no cache directory (set HOME or XDG_CACHE_HOME)")?,
    };
    save_profile(&profile, &path).map_err(anyhow::Error::msg)?;
    println!(
        "profiled {} devices in {:.1} s: {}",
        profile.devices.len(),
        profile.took_secs,
        path.display()
    );
    for d in &profile.devices {
        println!(
            "  {}: {} samples{}{}",
            d.device,
            d.samples.len(),
            d.h2d_pinned_gbps
                .or(d.h2d_pageable_gbps)
                .map_or(String::new(), |g| format!(", host->device {g:.1} GB/s")),
            d.switch_secs
                .map_or(String::new(), |s| format!(", switch {:.1} us", s * 1e6))
        );
    }
    Ok(())
}
