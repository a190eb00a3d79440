//! The load experiment on the machine model (`rtx3060-laptop`), in virtual
//! time: decode TPOT through phases of other programs' load, with the
//! static policy (plans fixed after the first decode audition) against the
//! load-aware re-scheduler, and against sessions planned with each
//! pressure in force from the start (what a plan can reach under it); and
//! TPOT as the generation grows under a thermal wall (ATSInfer's Figure 12).
//!
//! `cargo run --release -p ats-sched --example load_adaptivity [-- load|thermal [MODEL [VRAM_GB [hint]]]]`
//! (`hint`: the thermal run's layout is chosen for its 64-token prompt and
//! 2,048 generated tokens, as `--workload 64,2048` would)
//! (MODEL: a synth preset, default `llama-8b`; timing only, `compute=off`).

mod common;

use ats_sched::config::{Policy, Workload};
use ats_sched::rescheduler::ReschedConfig;
use ats_sched::session::Session;
use common::{machine, median, prompt, session, session_for, zeros_model};

/// Phase boundaries in scenario seconds: normal, CPU pressure, GPU + PCIe
/// pressure, normal again.
const PHASES: [(f64, f64, &str); 4] = [
    (0.0, 25.0, "normal"),
    (25.0, 55.0, "CPU pressure"),
    (55.0, 85.0, "GPU+PCIe pressure"),
    (85.0, 110.0, "normal again"),
];

/// Other programs: 70% of the cores from 25 s to 55 s; then a game taking
/// 60% of the SM time and the link 3x slower until 85 s.
const LOAD: &str = "cpuload=25:0.7;55:0,gpuload=55:0.6;85:0,pcieslow=55:3;85:1";

/// The two pressures of [`LOAD`], each held from the start.
const HELD: [&str; 2] = ["cpuload=0:0.7", "gpuload=0:0.6,pcieslow=0:3"];

/// Seconds skipped at the start of each phase (the re-scheduler's reaction).
const SETTLE: f64 = 3.0;

/// One decode round: when it ended, its TPOT, and the plans it ran under.
struct Sample {
    t: f64,
    tpot: f64,
    replans: usize,
    relayouts: usize,
    plan: &'static str,
}

fn policy(load_aware: bool) -> ReschedConfig {
    if load_aware {
        ReschedConfig::default()
    } else {
        ReschedConfig {
            epsilon: 1e12,
            ..ReschedConfig::default()
        }
    }
}

/// Decodes until the scenario clock reaches `until`, resetting the context
/// every `reset` tokens; returns (scenario seconds, TPOT) per round.
fn drive(
    e: &mut Session,
    vm: &ats_sched::sim::VirtualMachine,
    until: f64,
    reset: usize,
) -> Vec<Sample> {
    let mut out = Vec::new();
    let p = prompt(e, 64);
    e.prefill(&p, false).expect("prefill");
    let mut n = 0usize;
    while vm.scenario_time() < until {
        if n > 0 && n.is_multiple_of(reset) {
            e.reset();
            e.prefill(&p, false).expect("prefill");
        }
        let t0 = e.now();
        e.decode(100 + (n % 1000) as u32).expect("decode");
        let st = e.planner().replan_stats();
        out.push(Sample {
            t: vm.scenario_time(),
            tpot: e.now() - t0,
            replans: st.replans,
            relayouts: st.relayouts,
            plan: e.plan_set().tiers[0].kind.name(),
        });
        n += 1;
    }
    out
}

fn phase_median(s: &[Sample], a: f64, b: f64) -> f64 {
    let v: Vec<f64> = s
        .iter()
        .filter(|x| x.t >= a + SETTLE && x.t < b)
        .map(|x| x.tpot)
        .collect();
    median(&v) * 1e3
}

fn load(model_name: &str, vram_gb: f64) {
    let dir = std::env::temp_dir().join("ats-load-adaptivity");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let model = zeros_model(&dir, model_name);
    let spec = format!("rtx3060-laptop,compute=off,{LOAD}");
    println!("policy,t_s,tpot_ms,replans,relayouts,decode_plan");
    let mut summary = Vec::new();
    for load_aware in [false, true] {
        let name = if load_aware { "load-aware" } else { "static" };
        let vm = machine(&spec, 8, (vram_gb * 1e9) as u64);
        let mut e = session(&model, &vm, Policy::Ats, 1024, policy(load_aware)).expect("session");
        vm.start_scenario();
        let s = drive(&mut e, &vm, PHASES[3].1, 400);
        let st = e.planner().replan_stats().clone();
        for x in s.iter().step_by(10) {
            println!(
                "{name},{:.2},{:.3},{},{},{}",
                x.t,
                x.tpot * 1e3,
                x.replans,
                x.relayouts,
                x.plan
            );
        }
        eprintln!("{name}: {st:?}");
        let phases: Vec<f64> = PHASES.iter().map(|p| phase_median(&s, p.0, p.1)).collect();
        summary.push((name, phases, st.replans, st.relayouts, s.len()));
    }
    eprintln!("model {model_name}, --vram {vram_gb}G, machine {spec}");
    eprintln!(
        "| policy | normal | CPU pressure | GPU+PCIe pressure | normal again | re-plans | moves | rounds |"
    );
    eprintln!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (name, p, r, m, n) in &summary {
        eprintln!(
            "| {name} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {r} | {m} | {n} |",
            p[0], p[1], p[2], p[3]
        );
    }
    let (s, l) = (&summary[0].1, &summary[1].1);
    let removed = |i: usize| 100.0 * (1.0 - (l[i] - l[0]) / (s[i] - s[0]));
    eprintln!(
        "TPOT increase removed: CPU pressure {:.0}%, GPU+PCIe pressure {:.0}%; load-aware / static per phase: {}; re-plans per second {:.3}",
        removed(1),
        removed(2),
        (0..4)
            .map(|i| format!("{:.3}", l[i] / s[i]))
            .collect::<Vec<_>>()
            .join(", "),
        summary[1].2 as f64 / PHASES[3].1
    );
    // planned from the start under each pressure, by `ats` and by the
    // static policy (whose layout has no temp slots)
    let held: Vec<(f64, f64)> = HELD
        .iter()
        .map(|h| {
            let ats = planned_under(&model, vram_gb, h, Policy::Ats);
            (ats, planned_under(&model, vram_gb, h, Policy::Static))
        })
        .collect();
    let reach = |i: usize| {
        let best = held[i - 1].0.min(held[i - 1].1);
        100.0 * (1.0 - (best - s[0]) / (s[i] - s[0]))
    };
    eprintln!(
        "planned under each pressure from the start (ats / static policy): CPU {:.2} / {:.2} ms, GPU+PCIe {:.2} / {:.2} ms; the better removes {:.0}% and {:.0}% of the increase",
        held[0].0,
        held[0].1,
        held[1].0,
        held[1].1,
        reach(1),
        reach(2)
    );
}

/// Median TPOT (ms) of a load-aware session planned and auditioned with
/// `held` in force from the start (its profile still of the idle machine):
/// what the re-scheduler could reach had it known the load at once.
fn planned_under(
    model: &std::sync::Arc<ats_core::spec::ModelSpec>,
    vram_gb: f64,
    held: &str,
    plan_policy: Policy,
) -> f64 {
    let vm = machine(
        &format!("rtx3060-laptop,compute=off,{held}"),
        8,
        (vram_gb * 1e9) as u64,
    );
    let mut e = session(model, &vm, plan_policy, 1024, policy(true)).expect("session");
    vm.start_scenario();
    let s = drive(&mut e, &vm, 25.0, 400);
    phase_median(&s, 0.0, 25.0)
}

/// TPOT per 128 generated tokens as one generation grows past a thermal
/// wall (GPU clock to 60% and CPU clock to 75% after 30 s).
fn thermal(model_name: &str, vram_gb: f64, hint: bool) {
    let dir = std::env::temp_dir().join("ats-load-adaptivity");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let model = zeros_model(&dir, model_name);
    let spec = "rtx3060-laptop,compute=off,thermal=30:0.6,cputhermal=30:0.75";
    let n_gen = 2048;
    let mut cols = Vec::new();
    for load_aware in [false, true] {
        let vm = machine(spec, 8, (vram_gb * 1e9) as u64);
        // with `hint`, the layout is chosen for this run's prompt and generation
        let workload = hint.then_some(Workload {
            depth: 0,
            prompt: 64,
            generate: n_gen,
        });
        let mut e = session_for(
            &model,
            &vm,
            Policy::Ats,
            n_gen + 128,
            policy(load_aware),
            workload,
        )
        .expect("session");
        vm.start_scenario();
        let p = prompt(&e, 64);
        e.prefill(&p, false).expect("prefill");
        let mut per = Vec::new();
        let mut chunk = Vec::new();
        for i in 0..n_gen {
            let t0 = e.now();
            e.decode(100 + (i % 1000) as u32).expect("decode");
            chunk.push(e.now() - t0);
            if chunk.len() == 128 {
                per.push((vm.scenario_time(), median(&chunk) * 1e3));
                chunk.clear();
            }
        }
        cols.push((per, e.planner().replan_stats().replans));
    }
    eprintln!("model {model_name}, --vram {vram_gb}G, machine {spec}");
    eprintln!(
        "| tokens | static: time s | static TPOT ms | load-aware: time s | load-aware TPOT ms |"
    );
    eprintln!("| ---: | ---: | ---: | ---: | ---: |");
    for i in 0..cols[0].0.len() {
        let (a, b) = (cols[0].0[i], cols[1].0[i]);
        eprintln!(
            "| {} | {:.1} | {:.2} | {:.1} | {:.2} |",
            (i + 1) * 128,
            a.0,
            a.1,
            b.0,
            b.1
        );
    }
    eprintln!("re-plans: static {}, load-aware {}", cols[0].1, cols[1].1);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map_or("load", String::as_str);
    let model = args.get(2).map_or("llama-8b", String::as_str);
    let vram: f64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(4.0);
    match mode {
        "thermal" => thermal(model, vram, args.get(4).is_some_and(|a| a == "hint")),
        _ => load(model, vram),
    }
}
