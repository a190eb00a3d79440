//! The load experiment: decode TPOT over time while, on a simulated machine,
//! CPU pressure comes first and then GPU plus copy pressure, with the
//! static plan (no re-planning) against the load-aware re-scheduler.
//!
//! `cargo run --release -p ats-sched --example load_adaptivity [-- SECONDS]`

mod common;

use std::time::Instant;

use ats_sched::sim::{SimGpuConfig, Slowdown};
use common::{SimMachine, engine, write_model};

fn main() {
    let total: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(80.0);
    let dir = tempfile::tempdir().expect("temp dir");
    let spec = write_model(dir.path());
    // phases: normal, CPU pressure x2.5, GPU and copy pressure x3, normal
    let (p1, p2, p3) = (total * 0.2, total * 0.45, total * 0.75);
    let machine = SimMachine {
        cpu_dilation: 6.0,
        cpu_slow: Slowdown::steps(vec![(0.0, 1.0), (p1, 2.5), (p2, 1.0)]),
        gpu: SimGpuConfig {
            copy_gbps: 3.0,
            speed: 1.0,
            launch_us: 10.0,
            sync_us: 20.0,
            compute_slowdown: Slowdown::steps(vec![(0.0, 1.0), (p2, 3.0), (p3, 1.0)]),
            copy_slowdown: Slowdown::steps(vec![(0.0, 1.0), (p2, 3.0), (p3, 1.0)]),
            ..SimGpuConfig::default()
        },
    };
    println!("time_s,policy,tpot_ms,replans,refreshes,relayouts,decode_plan");
    let mut summary = Vec::new();
    for load_aware in [false, true] {
        let name = if load_aware { "load-aware" } else { "static" };
        let (mut e, _gpu) = engine(&spec, &machine, 0.35, 512, load_aware);
        // the scripts' clocks started with the devices: measure from now
        let t0 = Instant::now();
        let mut samples: Vec<(f64, f64)> = Vec::new();
        let mut ctx = 0;
        e.prefill(&[1, 2, 3, 4], false).expect("prefill");
        while t0.elapsed().as_secs_f64() < total {
            if ctx > 400 {
                e.reset();
                e.prefill(&[1, 2, 3, 4], false).expect("prefill");
                ctx = 0;
            }
            let t = Instant::now();
            e.decode(5 + (ctx % 1000) as u32).expect("decode");
            let tp = t.elapsed().as_secs_f64();
            let now = t0.elapsed().as_secs_f64();
            samples.push((now, tp));
            println!(
                "{now:.2},{name},{:.3},{},{},{},{:?}",
                tp * 1e3,
                e.planner().replan_stats().replans,
                e.planner().replan_stats().refreshes,
                e.planner().replan_stats().relayouts,
                e.plan_set().tiers[0].kind
            );
            ctx += 1;
        }
        let phase = |a: f64, b: f64| {
            // skip the first seconds of each phase: the re-scheduler's tau
            let v: Vec<f64> = samples
                .iter()
                .filter(|s| s.0 >= a + 2.0 && s.0 < b)
                .map(|s| s.1)
                .collect();
            let mut v2 = v.clone();
            v2.sort_by(f64::total_cmp);
            if v2.is_empty() {
                f64::NAN
            } else {
                v2[v2.len() / 2] * 1e3
            }
        };
        summary.push((
            name,
            phase(0.0, p1),
            phase(p1, p2),
            phase(p2, p3),
            phase(p3, total),
            e.planner().replan_stats().replans,
        ));
    }
    eprintln!("| policy | normal | CPU pressure | GPU+copy pressure | normal again | re-plans |");
    eprintln!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for (name, a, b, c, d, r) in &summary {
        eprintln!("| {name} | {a:.2} ms | {b:.2} ms | {c:.2} ms | {d:.2} ms | {r} |");
    }
    let (s, l) = (&summary[0], &summary[1]);
    let removed =
        |base_s: f64, hi_s: f64, base_l: f64, hi_l: f64| 1.0 - (hi_l - base_l) / (hi_s - base_s);
    eprintln!(
        "TPOT increase removed by the load-aware policy: CPU pressure {:.0}%, GPU+copy pressure {:.0}%",
        100.0 * removed(s.1, s.2, l.1, l.2),
        100.0 * removed(s.1, s.3, l.1, l.3)
    );
}
