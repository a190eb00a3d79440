//! Load following in virtual time: the load experiment of
//! `docs/scheduling.md` (llama-8b shapes on the `rtx3060-laptop` model at
//! 4 GB and 2 GB: normal, CPU pressure, a game on the GPU and the link,
//! normal again). The clock is the machine model's, so the outcome is
//! exact on any machine under any load: the load-aware policy is never
//! more than 2% slower than the static one in any phase, at 4 GB removes
//! under GPU and PCIe pressure what the best plan made under that load
//! does, at 2 GB removes at least half of the static policy's slowdown
//! under either pressure (the goal), and re-plans less than once a
//! second.

use std::sync::Arc;

use ats_core::device::KvType;
use ats_core::spec::ModelSpec;
use ats_sched::config::{Policy, RunConfig};
use ats_sched::rescheduler::ReschedConfig;
use ats_sched::sim::VirtualMachine;
use ats_tests::{sim_machine, sim_session, zeros_model};

/// Normal to 25 s, 70% of the cores taken to 55 s, then 60% of the SM time
/// and a 3x slower link to 85 s, normal to 110 s (scenario seconds).
const MACHINE: &str = "rtx3060-laptop,compute=off,\
    cpuload=25:0.7;55:0,gpuload=55:0.6;85:0,pcieslow=55:3;85:1";
const PHASE_ENDS: [f64; 4] = [25.0, 55.0, 85.0, 110.0];

/// Median TPOT (virtual seconds) per phase, after its first 3 s, and the
/// re-plans made.
fn phases(spec: &Arc<ModelSpec>, vram: u64, resched: ReschedConfig) -> ([f64; 4], usize) {
    let vm: VirtualMachine = sim_machine(MACHINE, 8, Some(vram));
    let run = RunConfig {
        n_ctx: 1024,
        kv_type: KvType::F16,
        policy: Policy::Ats,
        resched,
        vram: Some(vram),
        ..RunConfig::for_model(spec, 8)
    };
    let mut e = sim_session(spec, &vm, &run);
    vm.start_scenario();
    let prompt: Vec<u32> = (0..64).map(|i| i * 7 + 3).collect();
    let mut per_phase: [Vec<f64>; 4] = Default::default();
    let mut n = 0u32;
    e.prefill(&prompt, false).unwrap();
    while vm.scenario_time() < PHASE_ENDS[3] {
        if n > 0 && n.is_multiple_of(400) {
            e.reset();
            e.prefill(&prompt, false).unwrap();
        }
        let t0 = e.now();
        e.decode(100 + n % 1000).unwrap();
        let (t, tpot) = (vm.scenario_time(), e.now() - t0);
        let i = PHASE_ENDS.iter().position(|&end| t < end).unwrap_or(3);
        let start = if i == 0 { 0.0 } else { PHASE_ENDS[i - 1] };
        if t >= start + 3.0 {
            per_phase[i].push(tpot);
        }
        n += 1;
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let m = per_phase.each_mut().map(median);
    (m, e.planner().replan_stats().replans)
}

/// Per phase: the load-aware policy's TPOT over the static one's, the
/// share of the static policy's increase over normal it removed, and its
/// re-plans.
fn compare(vram: u64) -> (Vec<f64>, Vec<f64>, usize) {
    let dir = tempfile::tempdir().unwrap();
    let spec = zeros_model(dir.path(), "llama-8b");
    let frozen = ReschedConfig {
        epsilon: 1e12,
        ..ReschedConfig::default()
    };
    let (fixed, none) = phases(&spec, vram, frozen);
    assert_eq!(none, 0, "the static policy never re-plans");
    let (aware, replans) = phases(&spec, vram, ReschedConfig::default());
    let ratio: Vec<f64> = aware.iter().zip(&fixed).map(|(a, s)| a / s).collect();
    let removed: Vec<f64> = (0..4)
        .map(|i| 1.0 - (aware[i] - aware[0]) / (fixed[i] - fixed[0]))
        .collect();
    eprintln!(
        "{vram} B: static {fixed:?}, load-aware {aware:?}, ratios {ratio:?}, \
         removed {removed:?}, {replans} re-plans"
    );
    (ratio, removed, replans)
}

#[test]
fn at_2_gb_half_the_slowdown_of_either_pressure_is_removed() {
    let (ratio, removed, replans) = compare(2_000_000_000);
    assert!(ratio.iter().all(|&r| r <= 1.02), "{ratio:?}");
    // the goal, half of each: 61% and 66% are removed (under CPU
    // pressure a layout move estimated 2-3% faster is made since moves
    // have their own hysteresis, 2%; at 5% it was kept out and 45% was
    // removed)
    assert!(removed[1] >= 0.5 && removed[2] >= 0.5, "{removed:?}");
    assert!((replans as f64) < PHASE_ENDS[3], "{replans} re-plans");
}

#[test]
fn the_load_aware_policy_follows_the_load_and_never_loses() {
    let (ratio, removed, replans) = compare(4_000_000_000);
    assert!(ratio.iter().all(|&r| r <= 1.02), "{ratio:?}");
    // under the game a move reaches what a plan made under it does (30%
    // removed, `--policy static`'s layout; `load_adaptivity` says why half
    // is out of reach at 4 GB); priced as if leaving weights were copied
    // back, not just freed, the move did not pay and 21% was removed
    assert!(removed[2] >= 0.28, "GPU and PCIe pressure: {removed:?}");
    assert!((replans as f64) < PHASE_ENDS[3], "{replans} re-plans");
}
