//! `ats-cli plan`: what goes where under a VRAM budget, and why.

use std::sync::Arc;

use anyhow::{Context, Result};
use ats_core::spec::ModelSpec;
use ats_sched::planner::{PlanKind, Planner, PlannerConfig};
use ats_sched::size::fmt_bytes;
use clap::Args;

use crate::args::ModelArgs;
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

fn kind_name(k: PlanKind) -> &'static str {
    match k {
        PlanKind::CpuOnly => "cpu-only",
        PlanKind::GpuOnly => "gpu-only",
        PlanKind::Static => "static",
        PlanKind::Dynamic => "dynamic",
    }
}

pub fn run(a: PlanArgs) -> Result<()> {
    let spec = Arc::new(
        ModelSpec::open(&a.model.model)
            .with_context(|| format!("cannot load {}", a.model.model.display()))?,
    );
    let mut margs = a.model.clone();
    let mut devs = load::devices(&margs)?;
    if devs.list.len() == 1 && margs.vram.is_some() {
        // planning needs a GPU to plan for: say so and use a simulated one
        tracing::warn!(
            "no GPU here: planning for a simulated GPU with the given budget (--sim-gpu SPEC sets its speed)"
        );
        margs.sim_gpu = Some(String::new());
        devs = load::devices(&margs)?;
    }
    let cost = load::cost_model(&margs, &devs)?;
    let devices = devs.list;
    let n_ctx = load::context_len(&margs, &spec)?;
    let cfg = PlannerConfig {
        policy: margs.policy,
        n_ctx,
        kv_type: margs.kv_type,
        slots_per_role: 2,
        all_logits: false,
        max_tier: margs.batch,
        force_kind: None,
        resched: Default::default(),
    };
    let planner = Planner::new(Arc::new(spec.graph()?), &devices, cost, cfg)?;
    let set = planner.plans();
    let r = &set.report;
    if a.json {
        let j = serde_json::json!({
            "model": margs.model.display().to_string(),
            "policy": margs.policy.name(),
            "n_ctx": n_ctx,
            "devices": devices.iter().map(|d| d.info().name.clone()).collect::<Vec<_>>(),
            "budget_bytes": r.budget_bytes,
            "peak_bytes": r.peak_bytes,
            "regions": r.regions.iter().map(|(k, v)| (k.clone(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
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
    println!(
        "{:<34} {:>10}  {:<6} {:<9} why",
        "tensor", "bytes", "device", "region"
    );
    for t in &r.tensors {
        println!(
            "{:<34} {:>10}  {:<6} {:<9} {}",
            t.name,
            fmt_bytes(t.bytes),
            t.placement,
            t.region,
            t.why
        );
    }
    println!();
    match r.budget_bytes {
        Some(b) => {
            println!(
                "GPU budget {}; planned peak {}:",
                fmt_bytes(b),
                fmt_bytes(r.peak_bytes)
            );
            for (k, v) in &r.regions {
                println!("  {k:<9} {:>10}", fmt_bytes(*v));
            }
            println!(
                "  (layout: compute buffers for tiers up to {}, temp slots: {})",
                r.max_tier,
                if r.streaming { "yes" } else { "no" }
            );
        }
        None => println!("no GPU: everything runs on the CPU"),
    }
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
            kind_name(t.kind),
            t.est_secs * 1e3,
            est(PlanKind::GpuOnly),
            est(PlanKind::Static),
            est(PlanKind::Dynamic),
            t.switches,
            t.streamed_items
        );
    }
    for n in &r.notes {
        println!("note: {n}");
    }
    Ok(())
}
