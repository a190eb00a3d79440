//! `ats-cli plan`: what goes where under a VRAM budget, and why.

use anyhow::Result;
use ats_sched::planner::{PlanKind, PlanReport, PlanSet, Planner};
use ats_sched::size::fmt_bytes;
use clap::Args;

use crate::args::{DeviceArgs, ModelArgs};
use crate::load;

/// Show the placement plan.
#[derive(Args, Debug)]
pub struct PlanArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// One JSON document on standard output.
    #[arg(long = "json")]
    json: bool,
}

pub fn run(a: PlanArgs) -> Result<()> {
    // planning reads no weights: the file's mapping is enough
    let spec = load::open_model(&ModelArgs {
        mmap: true,
        ..a.model.clone()
    })?;
    let mut margs = a.model.clone();
    let built = if margs.devices.vram.is_some()
        && margs.devices.sim_gpu.is_none()
        && margs.devices.sim_machine.is_none()
    {
        let strict = DeviceArgs {
            require_gpu: true,
            ..margs.devices.clone()
        };
        match load::machine(&strict) {
            Ok(b) => b,
            Err(e) => {
                // planning needs a GPU to plan for: say so and use a simulated one
                eprintln!(
                    "ats: warning: {e:#}: planning for a simulated GPU with the given budget (--sim-gpu SPEC sets its speed)"
                );
                margs.devices.sim_gpu = Some(String::new());
                load::machine(&margs.devices)?
            }
        }
    } else {
        load::machine(&margs.devices)?
    };
    let cost = load::cost_model(&margs, &built)?;
    let run = margs.run_config(&spec, false)?;
    let planner = Planner::new(spec.graph().clone(), &built.machine, cost, &run)
        .map_err(|e| load::budget_hint(e.into()))?;
    let set = planner.plans();
    let r = planner.report();
    if a.json {
        let j = serde_json::json!({
            "model": margs.model.display().to_string(),
            "policy": margs.policy.name(),
            "simulated": crate::report::simulated(),
            "n_ctx": run.n_ctx,
            "devices": built.machine.iter().map(|(_, d)| d.info().name.clone()).collect::<Vec<_>>(),
            "budget_bytes": r.budget_bytes,
            "peak_bytes": r.peak_bytes,
            "regions": r.regions,
            "max_tier": r.max_tier,
            "streaming": r.streaming,
            "workload_secs": r.workload_secs,
            "tensors": r.tensors,
            "tiers": set.tiers,
            "notes": r.notes,
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
        return Ok(());
    }
    if let Some(m) = crate::report::simulated() {
        println!("SIMULATED machine {m}: estimates from its profile in virtual time");
        println!();
    }
    print_tensors(&r);
    print_regions(&r);
    print_tiers(set);
    for n in &r.notes {
        println!("note: {n}");
    }
    Ok(())
}

fn print_tensors(r: &PlanReport) {
    println!(
        "{:<34} {:>10}  {:<6} {:<9} why",
        "tensor", "bytes", "device", "region"
    );
    for t in &r.tensors {
        println!(
            "{:<34} {:>10}  {:<6} {:<9} {}",
            t.name,
            fmt_bytes(t.bytes),
            t.placement.name(),
            t.region.map_or("none", |r| r.name()),
            t.why
        );
    }
}

fn print_regions(r: &PlanReport) {
    println!();
    match r.budget_bytes {
        Some(b) => {
            println!(
                "GPU budget {}; planned peak {}:",
                fmt_bytes(b),
                fmt_bytes(r.peak_bytes)
            );
            for (k, v) in r.regions.iter().filter(|x| x.1 > 0) {
                println!("  {:<9} {:>10}", k.name(), fmt_bytes(v));
            }
            println!(
                "  (layout: compute buffers for tiers up to {}, temp slots: {})",
                r.max_tier,
                if r.streaming { "yes" } else { "no" }
            );
        }
        None => println!("no GPU: everything runs on the CPU"),
    }
}

fn print_tiers(set: &PlanSet) {
    println!();
    println!(
        "{:>6}  {:<9} {:>12}  {:>10} {:>10} {:>10} {:>8} {:>8}",
        "tier", "plan", "est/round", "gpu-only", "static", "dynamic", "switches", "streamed"
    );
    for t in &set.tiers {
        let est = |k: PlanKind| {
            t.estimates
                .iter()
                .find(|e| e.0 == k)
                .and_then(|e| e.1)
                .map_or("-".to_string(), |s| format!("{:.2} ms", s * 1e3))
        };
        println!(
            "{:>6}  {:<9} {:>9.2} ms  {:>10} {:>10} {:>10} {:>8} {:>8}",
            t.tier,
            t.kind.name(),
            t.est_secs * 1e3,
            est(PlanKind::GpuOnly),
            est(PlanKind::Static),
            est(PlanKind::Dynamic),
            t.switches,
            t.streamed_items
        );
    }
}
