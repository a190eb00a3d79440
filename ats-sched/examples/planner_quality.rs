//! Planner quality on the machine model: over a grid of models x VRAM
//! budgets x host threads x PCIe generations x context lengths on the
//! `pcie-gen5-desktop` preset (the NVIDIA paper's sensitivity machine, its
//! link set to each generation), run the static, GPU-only and dynamic decode
//! plans in virtual time and count how often the planner's choice by
//! estimate alone is within 5% of the fastest, and which shape wins.
//!
//! Timing only (`compute=off`: no logits), on real models' shapes with
//! all-zero sparse weights, so the 8B and 30B models plan and run here.
//!
//! `cargo run --release -p ats-sched --example planner_quality [-- FILTER [hint]]`
//! (FILTER: run the configurations whose row contains it, e.g. `gen3`, or
//! "" for all; `hint`: the session states its workload, decode at the
//! prefilled context's depth, as `--workload` does). Each shape's decode
//! estimate and its measurement go to stderr.

mod common;

use ats_core::spec::ModelSpec;
use ats_sched::config::{Policy, Workload};
use ats_sched::exec::ExecPlan;
use ats_sched::planner::{PlanKind, PlanSet};
use common::{decode_times, frozen, machine, median, prompt, session_for, zeros_model};

/// Decode rounds measured per plan (virtual time: every round at the same
/// depth costs the same; three show the depth's drift).
const ROUNDS: usize = 3;

fn decode_plan(set: &PlanSet) -> &ExecPlan {
    &set.plans[set.tiers[0].plan]
}

struct Row {
    line: String,
    ok: bool,
    winner: PlanKind,
}

fn run_one(
    model: &std::sync::Arc<ModelSpec>,
    name: &str,
    budget_gb: f64,
    threads: usize,
    generation: u32,
    ctx: usize,
    hint: bool,
) -> Option<Row> {
    let spec = format!("pcie-gen5-desktop,pcie=gen{generation}x16,compute=off");
    let vm = machine(&spec, threads, (budget_gb * 1e9) as u64);
    // with `hint`, the planner is told the decode depth (`--workload`)
    let workload = hint.then_some(Workload {
        depth: ctx,
        prompt: 1,
        generate: 64,
    });
    let mut e = match session_for(model, &vm, Policy::Ats, ctx + 64, frozen(), workload) {
        Ok(e) => e,
        Err(err) => {
            eprintln!("{name} {budget_gb}G t{threads} gen{generation} {ctx}: {err}");
            return None;
        }
    };
    let chosen = e.plan_set().clone();
    let t1 = chosen.tiers[0].clone();
    let p = prompt(&e, ctx);
    e.prefill(&p, false).expect("prefill");
    // the planner's choice, then each shape; a shape whose decode plan is
    // one measured already is folded into it (static first: a dynamic plan
    // that promotes nothing is the static plan)
    let est_time = median(&decode_times(&mut e, ROUNDS, 11));
    let mut measured: Vec<(PlanKind, ExecPlan, f64)> = Vec::new();
    for kind in [PlanKind::Static, PlanKind::GpuOnly, PlanKind::Dynamic] {
        let Ok(Some(set)) = e.planner().plans_forced(kind) else {
            continue;
        };
        let plan = decode_plan(&set).clone();
        if measured.iter().any(|m| m.1 == plan) {
            continue;
        }
        let est = set.tiers[0].est_secs;
        e.set_plans_for_experiment(set).expect("forced plans");
        let t = median(&decode_times(&mut e, ROUNDS, 101));
        // the estimate that chose it, against its virtual measurement
        eprintln!(
            "{name} {budget_gb}G t{threads} gen{generation} {ctx}: {} estimated {:.2} ms, measured {:.2} ms ({:+.0}%)",
            kind.name(),
            est * 1e3,
            t * 1e3,
            (est / t - 1.0) * 100.0
        );
        measured.push((kind, plan, t));
    }
    let (winner, _, fastest) = measured
        .iter()
        .min_by(|a, b| a.2.total_cmp(&b.2))
        .cloned()
        .expect("static always runs");
    let ok = est_time <= fastest * 1.05;
    let cell = |k: PlanKind| {
        measured
            .iter()
            .find(|m| m.0 == k)
            .map_or("=".to_string(), |m| format!("{:.2}", m.2 * 1e3))
    };
    let line = format!(
        "| {name} | {budget_gb}G | {threads} | gen{generation} | {}K | {} | {} | {} | {} ({:.2}) | {} | {} |",
        ctx / 1024,
        cell(PlanKind::Static),
        cell(PlanKind::GpuOnly),
        cell(PlanKind::Dynamic),
        t1.kind.name(),
        est_time * 1e3,
        winner.name(),
        if ok { "yes" } else { "no" },
    );
    Some(Row { line, ok, winner })
}

fn main() {
    let filter = std::env::args().nth(1).filter(|f| !f.is_empty());
    let hint = std::env::args().nth(2).is_some_and(|a| a == "hint");
    let dir = std::env::temp_dir().join("ats-planner-quality");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let models = [
        ("llama-8b", zeros_model(&dir, "llama-8b")),
        ("qwen3-8b", zeros_model(&dir, "qwen3-8b")),
        ("qwen3-30b-a3b", zeros_model(&dir, "qwen3-30b-a3b")),
    ];
    println!(
        "| model | VRAM | threads | PCIe | ctx | static ms | gpu-only ms | dynamic ms | by estimate (ms) | fastest | within 5% |"
    );
    println!("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- | --- | --- |");
    let mut rows = Vec::new();
    for (name, model) in &models {
        for budget in [2.0, 4.0, 8.0] {
            for threads in [4usize, 8, 16] {
                for generation in [3u32, 4, 5] {
                    for ctx in [4096usize, 16384] {
                        let tag = format!("{name} {budget}G t{threads} gen{generation} {ctx}");
                        if filter.as_ref().is_some_and(|f| !tag.contains(f.as_str())) {
                            continue;
                        }
                        if let Some(r) =
                            run_one(model, name, budget, threads, generation, ctx, hint)
                        {
                            println!("{}", r.line);
                            rows.push(r);
                        }
                    }
                }
            }
        }
    }
    let n = rows.len().max(1);
    let ok = rows.iter().filter(|r| r.ok).count();
    println!();
    println!(
        "by estimate alone within 5% of the fastest: {ok} of {} ({:.0}%)",
        rows.len(),
        100.0 * ok as f64 / n as f64
    );
    for k in [PlanKind::Static, PlanKind::Dynamic, PlanKind::GpuOnly] {
        let w = rows.iter().filter(|r| r.winner == k).count();
        println!(
            "fastest shape {}: {w} ({:.0}%)",
            k.name(),
            100.0 * w as f64 / n as f64
        );
    }
}
