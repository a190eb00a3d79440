//! Planner quality: on a grid of simulated machines, run the GPU-only,
//! static and dynamic decode plans for real and count how often the
//! planner's choice is the fastest (within 5%): its choice by estimate
//! alone, and its choice after the decode audition of the first rounds.
//!
//! `cargo run --release -p ats-sched --example planner_quality`

mod common;

use ats_sched::exec::ExecPlan;
use ats_sched::planner::{PlanKind, PlanSet};
use ats_sched::rescheduler::ReschedConfig;
use ats_sched::sim::{SimGpuConfig, Slowdown};
use common::{SimMachine, engine, tpot, write_model};

/// Measurement passes over the plans (interleaved, so drift hits all alike).
const PASSES: usize = 3;
/// Decode steps per plan and pass.
const STEPS: usize = 7;

fn decode_plan(set: &PlanSet) -> &ExecPlan {
    &set.plans[set.tiers[0].plan]
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let spec = write_model(dir.path());
    let (mut hits_est, mut hits, mut total) = (0, 0, 0);
    println!(
        "| dilation | copy GB/s | GPU speed | budget | ctx | static | gpu-only | dynamic | by estimate | after audition | fastest | ok (estimate) | ok (audition) |"
    );
    println!(
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- | --- |"
    );
    for dilation in [2.0, 6.0] {
        for copy in [1.0, 4.0, 16.0] {
            for speed in [0.5, 1.0] {
                for budget in [0.15, 0.4, 0.7] {
                    for ctx in [256usize, 2048] {
                        // `planner_quality 6,4,1,0.4,2048` runs one configuration
                        let this = format!("{dilation},{copy},{speed},{budget},{ctx}");
                        if std::env::args().nth(1).is_some_and(|only| only != this) {
                            continue;
                        }
                        let m = SimMachine {
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
                        let by_estimate = e.plan_set().clone();
                        // the first decode rounds are the audition (3 shapes and a recheck)
                        let rounds = ReschedConfig::default().audition_rounds;
                        tpot(&mut e, 4 * rounds + 2);
                        let audited = e.plan_set().clone();
                        if let Some(r) = e.planner().last_audition() {
                            eprintln!("{this}: {r:?}");
                        }
                        // the plans to measure: each shape forced, plus the two choices
                        let mut sets: Vec<(String, PlanSet)> = Vec::new();
                        for kind in [PlanKind::Static, PlanKind::GpuOnly, PlanKind::Dynamic] {
                            if let Some(s) = e.planner().plans_forced(kind).ok().flatten() {
                                sets.push((format!("{kind:?}"), s));
                            }
                        }
                        sets.push(("estimate".into(), by_estimate));
                        sets.push(("audition".into(), audited));
                        // identical decode plans are measured once
                        let mut uniq: Vec<usize> = Vec::new();
                        let alias: Vec<usize> = (0..sets.len())
                            .map(|i| {
                                match uniq
                                    .iter()
                                    .find(|&&u| decode_plan(&sets[u].1) == decode_plan(&sets[i].1))
                                {
                                    Some(&u) => u,
                                    None => {
                                        uniq.push(i);
                                        i
                                    }
                                }
                            })
                            .collect();
                        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); sets.len()];
                        for _ in 0..PASSES {
                            for &u in &uniq {
                                if e.set_plans_for_experiment(sets[u].1.clone()).is_ok() {
                                    samples[u].push(tpot(&mut e, STEPS));
                                }
                            }
                        }
                        let time = |i: usize| -> Option<f64> {
                            let mut v = samples[alias[i]].clone();
                            v.sort_by(f64::total_cmp);
                            (!v.is_empty()).then(|| v[v.len() / 2])
                        };
                        let named = |n: &str| sets.iter().position(|s| s.0 == n);
                        let forced_t = |k: &str| named(k).and_then(time);
                        let fastest = ["Static", "GpuOnly", "Dynamic"]
                            .iter()
                            .filter_map(|k| forced_t(k).map(|t| (*k, t)))
                            .chain(named("estimate").and_then(time).map(|t| ("estimate", t)))
                            .chain(named("audition").and_then(time).map(|t| ("audition", t)))
                            .min_by(|a, b| a.1.total_cmp(&b.1))
                            .expect("the static plan always runs");
                        let kind_of = |n: &str| {
                            let i = named(n).expect("both choices are measured");
                            format!("{:?}", sets[i].1.tiers[0].kind)
                        };
                        let ok = |n: &str| {
                            named(n)
                                .and_then(time)
                                .is_some_and(|t| t <= fastest.1 * 1.05)
                        };
                        let (ok_est, ok_aud) = (ok("estimate"), ok("audition"));
                        total += 1;
                        hits_est += usize::from(ok_est);
                        hits += usize::from(ok_aud);
                        let ms = |k: &str| {
                            forced_t(k).map_or("-".to_string(), |s| format!("{:.2}", s * 1e3))
                        };
                        let yes = |b: bool| if b { "yes" } else { "no" };
                        println!(
                            "| {dilation} | {copy} | {speed} | {:.0}% | {ctx} | {} | {} | {} | {} | {} | {} | {} | {} |",
                            budget * 100.0,
                            ms("Static"),
                            ms("GpuOnly"),
                            ms("Dynamic"),
                            kind_of("estimate"),
                            kind_of("audition"),
                            fastest.0,
                            yes(ok_est),
                            yes(ok_aud)
                        );
                    }
                }
            }
        }
    }
    println!();
    println!(
        "by estimate alone: within 5% of the fastest plan in {hits_est} of {total} configurations ({:.0}%)",
        100.0 * hits_est as f64 / total as f64
    );
    println!(
        "after the audition: within 5% of the fastest plan in {hits} of {total} configurations ({:.0}%)",
        100.0 * hits as f64 / total as f64
    );
}
