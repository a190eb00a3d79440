//! Plans corrected by measurement: when the cost model is wrong about the
//! GPU, the decode audition keeps the fastest plan and a later re-plan does
//! not undo it; a re-plan from live costs moves weights off the GPU; the
//! logits never change and the budget holds.

use std::sync::Arc;

use ats_core::device::{Device, KvType};
use ats_core::spec::ModelSpec;
use ats_core::synth::SynthSpec;
use ats_cpu::CpuDevice;
use ats_sched::config::Policy;
use ats_sched::planner::PlanKind;
use ats_sched::profile::{CostModel, DeviceProfile, OpKey, Sample};
use ats_sched::session::Session;
use ats_sched::sim::SimGpuConfig;
use ats_tests::{engine_on, host_only, sim_gpu_with, try_engine_with_cost, with_gpu};

/// A simulated GPU 30 times slower than one CPU thread, with slow copies,
/// while the engine's cost model (no profile) takes it for a fast GPU. The
/// margin is wide because a loaded machine slows the CPU but not the
/// simulated GPU's sleeps (at 10x, a busy machine flipped the outcome).
fn slow_gpu(budget: u64) -> Arc<dyn Device> {
    sim_gpu_with(
        SimGpuConfig {
            memory: budget,
            speed: 1.0 / 30.0,
            copy_gbps: 0.5,
            launch_us: 0.0,
            sync_us: 0.0,
            ..SimGpuConfig::default()
        },
        1,
    )
}

fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-6);
    a.iter()
        .zip(b)
        .fold(0f32, |m, (x, y)| m.max((x - y).abs() / scale))
}

/// The `tiny` synthetic model with 16 layers and a wider FFN (about 9 MB,
/// Q4_K/Q6_K), written to `dir`: enough layers that streaming layouts fit.
fn synthetic(dir: &std::path::Path) -> Arc<ModelSpec> {
    let spec = SynthSpec {
        n_layer: 16,
        n_ff: 768,
        tied: false,
        ..SynthSpec::preset("tiny").unwrap()
    };
    let path = dir.join("synthetic.gguf");
    spec.write(&path, 11).unwrap();
    Arc::new(ModelSpec::open(&path).unwrap())
}

/// A CPU-only reference engine and an engine on the CPU and a slow
/// simulated GPU (half the model's bytes) that the cost model believes fast.
fn engines(spec: &Arc<ModelSpec>, policy: Policy) -> (Session, Session, Arc<dyn Device>) {
    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(2).unwrap());
    let base = engine_on(
        spec.clone(),
        host_only(cpu.clone()),
        64,
        KvType::F32,
        Policy::Ats,
        false,
    );
    let gpu = slow_gpu(spec.gguf.file_len() / 2);
    let e = try_engine_with_cost(
        spec.clone(),
        with_gpu(cpu, gpu.clone()),
        believed_fast(),
        64,
        KvType::F32,
        policy,
        false,
    )
    .unwrap();
    (base, e, gpu)
}

/// A cost model that takes the GPU for a very fast one: one sample at a
/// petaflop and a petabyte per second, free switches, terabyte copies.
fn believed_fast() -> CostModel {
    let fast = Sample {
        key: OpKey {
            op: "matmul".into(),
            dtype: Some("Q4_K".into()),
            m: 256,
            k: 256,
            tokens: 1,
            ctx: 0,
        },
        threads: 1,
        contended: false,
        flops: 1e9,
        bytes: 1e9,
        secs: 1e-6,
    };
    CostModel::new(
        (
            DeviceProfile {
                device: "cpu".into(),
                kind: "cpu".into(),
                ..Default::default()
            },
            2,
        ),
        Some((
            DeviceProfile {
                device: "believed fast".into(),
                kind: "gpu".into(),
                samples: vec![fast],
                h2d_pinned_gbps: Some(1000.0),
                h2d_pageable_gbps: Some(1000.0),
                d2h_gbps: Some(1000.0),
                switch_secs: Some(0.0),
            },
            1,
        )),
    )
}

#[test]
fn a_misjudged_gpu_loses_the_audition_and_stays_lost() {
    let dir = tempfile::tempdir().unwrap();
    let spec = synthetic(dir.path());
    let ids: Vec<u32> = (0..48).map(|i| (i * 37 + 5) % 1024).collect();
    let (mut base, mut e, _) = engines(&spec, Policy::Ats);
    let first = e.plan_set().tiers[0].clone();
    assert_eq!(first.tier, 1);
    assert_ne!(
        first.kind,
        PlanKind::Static,
        "premise: a GPU believed fast gets the decode rounds ({:?})",
        first.estimates
    );
    base.prefill(&ids[..8], false).unwrap();
    e.prefill(&ids[..8], false).unwrap();
    // 3 shapes x 6 rounds at most, then a few more with the winner
    let mut step = 0;
    let mut after = 0;
    while after < 4 {
        after += usize::from(e.planner().last_audition().is_some());
        assert!(step < 40, "the audition ended within its rounds");
        let t = ids[8 + step];
        let (a, b) = (e.decode(t).unwrap(), base.decode(t).unwrap());
        let d = max_rel_diff(&a, &b);
        assert!(d < 1e-5, "step {step}: logits differ by {d} across plans");
        step += 1;
    }
    let report = e.planner().last_audition().unwrap().clone();
    assert!(report.entries.len() >= 2, "{report:?}");
    assert_eq!(
        report.entries[0].kinds[0], first.kind,
        "the planner's own choice runs first"
    );
    let winner = &report.entries[report.winner];
    assert!(
        winner.kinds.contains(&PlanKind::Static),
        "the slow GPU does more of the work in every other plan: {report:?}"
    );
    assert_eq!(e.plan_set().tiers[0].kind, PlanKind::Static);
    // a re-plan uses the measured correction and keeps the winner
    e.force_replan().unwrap();
    assert_eq!(e.plan_set().tiers[0].kind, PlanKind::Static);
    assert!(!e.planner().auditioning());
}

#[test]
fn a_replan_from_live_costs_moves_weights_off_a_slow_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let spec = synthetic(dir.path());
    let ids: Vec<u32> = (0..48).map(|i| (i * 53 + 3) % 1024).collect();
    let (mut base, mut e, gpu) = engines(&spec, Policy::Static);
    let budget = spec.gguf.file_len() / 2;
    let resident = |e: &Session| {
        e.planner()
            .report()
            .items
            .iter()
            .filter(|i| i.resident)
            .map(|i| i.bytes)
            .sum::<u64>()
    };
    let before = resident(&e);
    assert!(before > 0, "premise: a GPU believed fast holds weights");
    base.prefill(&ids[..8], false).unwrap();
    e.prefill(&ids[..8], false).unwrap();
    for (k, &t) in ids[8..].iter().enumerate() {
        if k == 6 {
            // the GPU's nodes have been measured: 10x slower than a CPU thread
            assert!(e.force_replan().unwrap());
            assert!(
                e.planner().replan_stats().relayouts >= 1,
                "the layout changed"
            );
            assert!(
                resident(&e) < before,
                "weights left the GPU: {} of {before} bytes stay",
                resident(&e)
            );
        }
        let d = max_rel_diff(&e.decode(t).unwrap(), &base.decode(t).unwrap());
        assert!(d < 1e-5, "step {k}: logits differ by {d}");
        assert!(gpu.ledger().peak() <= budget);
    }
}
