//! Issue 18: a layout move after a lasting change of load, in virtual time
//! (llama-8b shapes on the `rtx3060-laptop` model at 4 GB; from 10 s a
//! game takes 90% of the GPU's SM time and keeps it). The re-plan a drift
//! causes first auditions the decode plans again in the same layout (the
//! live costs it was planned from are still half under the old load); the
//! move is weighed in the re-plan that audition owes, and made there.
//! Without auditions the drift's own re-plan weighs and makes it.

use std::sync::Arc;

use ats_core::device::KvType;
use ats_core::spec::ModelSpec;
use ats_sched::config::{Policy, RunConfig};
use ats_sched::rescheduler::ReschedConfig;
use ats_tests::{sim_machine, sim_session, zeros_model};

const MACHINE: &str = "rtx3060-laptop,compute=off,gpuload=10:0.9";
const LOAD_STARTS: f64 = 10.0;

/// What one decode round saw.
#[derive(Clone, Copy, Debug)]
struct Round {
    /// Scenario seconds at its end.
    t: f64,
    /// Its TPOT, virtual seconds.
    secs: f64,
    /// Re-plans and layout moves so far.
    replans: usize,
    moves: usize,
    /// Whether an audition runs after it.
    auditioning: bool,
}

fn decode_rounds(spec: &Arc<ModelSpec>, audition_rounds: usize, n: u32) -> Vec<Round> {
    let vram = 4_000_000_000;
    let vm = sim_machine(MACHINE, 8, Some(vram));
    let run = RunConfig {
        n_ctx: 1024,
        kv_type: KvType::F16,
        policy: Policy::Ats,
        resched: ReschedConfig {
            audition_rounds,
            ..ReschedConfig::default()
        },
        vram: Some(vram),
        ..RunConfig::for_model(spec, 8)
    };
    let mut e = sim_session(spec, &vm, &run);
    vm.start_scenario();
    let prompt: Vec<u32> = (0..64).map(|i| i * 7 + 3).collect();
    e.prefill(&prompt, false).unwrap();
    (0..n)
        .map(|i| {
            let t0 = e.now();
            e.decode(100 + i).unwrap();
            let st = e.planner().replan_stats();
            Round {
                t: vm.scenario_time(),
                secs: e.now() - t0,
                replans: st.replans,
                moves: st.relayouts,
                auditioning: e.planner().auditioning(),
            }
        })
        .collect()
}

fn median(rounds: &[Round]) -> f64 {
    let mut v: Vec<f64> = rounds.iter().map(|r| r.secs).collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The first round after which `f` holds.
fn first(rounds: &[Round], f: impl Fn(&Round) -> bool) -> usize {
    rounds.iter().position(f).expect("it happens")
}

/// Rounds of the loaded plan before anything moved, and of the moved
/// layout once settled.
fn before_and_after(r: &[Round], moved: usize) -> (f64, f64) {
    let loaded = first(r, |x| x.t > LOAD_STARTS + 0.5);
    let drift = first(r, |x| x.replans > 0 && x.t > LOAD_STARTS);
    (median(&r[loaded..drift]), median(&r[moved + 20..]))
}

#[test]
fn a_drift_auditions_first_and_moves_weights_in_the_replan_after() {
    let dir = tempfile::tempdir().unwrap();
    let spec = zeros_model(dir.path(), "llama-8b");
    let r = decode_rounds(&spec, 6, 320);
    // the first plans' audition ends long before the load
    let drift = first(&r, |x| x.replans > 0);
    assert!(r[drift].t > LOAD_STARTS, "{:?}", r[drift]);
    // the drift's re-plan keeps the layout and auditions the decode plans
    assert!(
        r[drift].auditioning && r[drift].moves == 0,
        "{:?}",
        r[drift]
    );
    let ended = drift + first(&r[drift..], |x| !x.auditioning);
    let moved = first(&r, |x| x.moves > 0);
    // the move is made in the re-plan the audition owes, the round after it ended
    assert_eq!(moved, ended + 1, "audition ended after round {ended}");
    assert_eq!(r.last().unwrap().moves, 1, "one move");
    let (before, after) = before_and_after(&r, moved);
    eprintln!("TPOT under the load: {before:.4} s before the move, {after:.4} s after");
    assert!(after < 0.6 * before, "the move pays: {before} -> {after}");
}

#[test]
fn without_auditions_the_drifts_own_replan_moves_weights() {
    let dir = tempfile::tempdir().unwrap();
    let spec = zeros_model(dir.path(), "llama-8b");
    let r = decode_rounds(&spec, 0, 320);
    let drift = first(&r, |x| x.replans > 0);
    assert!(r[drift].t > LOAD_STARTS, "{:?}", r[drift]);
    assert_eq!(r[drift].moves, 1, "{:?}", r[drift]);
    assert_eq!(r.last().unwrap().moves, 1, "one move");
    let (before, after) = before_and_after(&r, drift);
    eprintln!("TPOT under the load: {before:.4} s before the move, {after:.4} s after");
    assert!(after < 0.6 * before, "the move pays: {before} -> {after}");
}
