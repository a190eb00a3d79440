//! Planner quality: on a grid of simulated machines, run the GPU-only,
//! static and dynamic decode plans for real and count how often the
//! planner's choice is the fastest (within 5%).
//!
//! `cargo run --release -p ats-sched --example planner_quality`

mod common;

use ats_sched::planner::PlanKind;
use ats_sched::sim::{SimGpuConfig, Slowdown};
use common::{Machine, engine, tpot, write_model};

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let spec = write_model(dir.path());
    let mut hits = 0;
    let mut total = 0;
    println!(
        "| dilation | copy GB/s | GPU speed | budget | ctx | static | gpu-only | dynamic | chosen | fastest | ok |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |");
    for dilation in [2.0, 6.0] {
        for copy in [1.0, 4.0, 16.0] {
            for speed in [0.5, 1.0] {
                for budget in [0.15, 0.4, 0.7] {
                    for ctx in [256usize, 2048] {
                        let m = Machine {
                            cpu_dilation: dilation,
                            cpu_slow: Slowdown::none(),
                            gpu: SimGpuConfig {
                                copy_gbps: copy,
                                speed,
                                launch_us: 10.0,
                                sync_us: 20.0,
                                ..SimGpuConfig::default()
                            },
                        };
                        let (mut e, _gpu) = engine(&spec, &m, budget, ctx, false);
                        let chosen = e.plan_set().tiers[0].kind;
                        let mut times = Vec::new();
                        for kind in [PlanKind::Static, PlanKind::GpuOnly, PlanKind::Dynamic] {
                            let Some(set) = e.planner().plans_forced(kind) else {
                                times.push((kind, None));
                                continue;
                            };
                            if e.set_plans_for_experiment(set).is_err() {
                                times.push((kind, None));
                                continue;
                            }
                            times.push((kind, Some(tpot(&mut e, 9))));
                        }
                        let fastest = times
                            .iter()
                            .filter_map(|t| t.1.map(|s| (t.0, s)))
                            .min_by(|a, b| a.1.total_cmp(&b.1))
                            .expect("the static plan always runs");
                        let chosen_t = times
                            .iter()
                            .find(|t| t.0 == chosen)
                            .and_then(|t| t.1)
                            .unwrap_or(f64::INFINITY);
                        let ok = chosen_t <= fastest.1 * 1.05;
                        total += 1;
                        hits += usize::from(ok);
                        let ms = |k: PlanKind| {
                            times
                                .iter()
                                .find(|t| t.0 == k)
                                .and_then(|t| t.1)
                                .map_or("-".to_string(), |s| format!("{:.2}", s * 1e3))
                        };
                        println!(
                            "| {dilation} | {copy} | {speed} | {:.0}% | {ctx} | {} | {} | {} | {chosen:?} | {:?} | {} |",
                            budget * 100.0,
                            ms(PlanKind::Static),
                            ms(PlanKind::GpuOnly),
                            ms(PlanKind::Dynamic),
                            fastest.0,
                            if ok { "yes" } else { "no" }
                        );
                    }
                }
            }
        }
    }
    println!();
    println!(
        "planner within 5% of the fastest plan in {hits} of {total} configurations ({:.0}%)",
        100.0 * hits as f64 / total as f64
    );
}
