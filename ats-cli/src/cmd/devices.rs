//! `ats-cli devices`: the GPUs this machine has, as the driver reports them,
//! with the host-to-device bandwidth measured by `ats-cli profile` if a
//! profile exists.

use anyhow::Result;
use ats_sched::profile::{default_profile_path, hardware_fingerprint, load_profile};
use ats_sched::size::fmt_bytes;
use clap::Args;

/// List the GPUs.
#[derive(Args, Debug)]
pub struct DevicesArgs {}

pub fn run(_a: DevicesArgs) -> Result<()> {
    let gpus = match ats_cuda::list_gpus() {
        Ok(g) => g,
        Err(e) => {
            println!("no usable GPU: {e}");
            return Ok(());
        }
    };
    for g in gpus {
        println!("GPU {}: {}", g.ordinal, g.name);
        println!(
            "  memory: {} total, {} free",
            fmt_bytes(g.total_bytes),
            fmt_bytes(g.free_bytes)
        );
        println!(
            "  compute capability {}.{}, {} SMs",
            g.compute_capability.0, g.compute_capability.1, g.sm_count
        );
        let link = |l: Option<(u32, u32)>| {
            l.map_or("not reported".to_string(), |(gen_, w)| {
                format!("PCIe {gen_}.0 x{w}")
            })
        };
        println!(
            "  link: {} (max {}){}",
            link(g.pcie_link),
            link(g.pcie_max_link),
            g.pci_bus_id
                .as_ref()
                .map_or(String::new(), |b| format!(", bus {b}"))
        );
        // the CLI names its devices "cpu" and the GPU's name
        let fp = hardware_fingerprint(&["cpu".to_string(), g.name.clone()]);
        let measured = default_profile_path(&fp)
            .and_then(|p| load_profile(&p, Some(&fp)).ok().flatten())
            .and_then(|p| p.device(&g.name).cloned());
        match measured {
            Some(d) => println!(
                "  measured: host-to-device {} GB/s pinned, {} GB/s pageable; device-to-host {} GB/s",
                d.h2d_pinned_gbps.map_or("-".into(), |v| format!("{v:.1}")),
                d.h2d_pageable_gbps
                    .map_or("-".into(), |v| format!("{v:.1}")),
                d.d2h_gbps.map_or("-".into(), |v| format!("{v:.1}")),
            ),
            None => println!("  measured: no profile of this GPU yet"),
        }
    }
    Ok(())
}
