//! Plans corrected by measurement: when the cost model is wrong about the
//! GPU, the decode audition keeps the fastest plan and a later re-plan does
//! not undo it; a re-plan from live costs moves weights off the GPU; the
//! logits never change and the budget holds.
//!
//! The machine is a machine model in virtual time (`--sim-machine`): its
//! GPU is far slower than its CPU, and every time the engine measures comes
//! from the model, so the outcomes are exact and the same under any load on
//! the machine running the tests.

use std::sync::Arc;

use ats_core::device::{Device, KvType};
use ats_core::spec::ModelSpec;
use ats_core::synth::SynthSpec;
use ats_cpu::CpuDevice;
use ats_sched::config::Policy;
use ats_sched::planner::PlanKind;
use ats_sched::profile::{CostModel, DeviceProfile, OpKey, Sample};
use ats_sched::session::Session;
use ats_sched::sim::VirtualMachine;
use ats_tests::{engine_on, host_only, sim_machine, try_engine_with_cost};

/// A laptop whose GPU runs kernels at a hundredth of its bandwidth with
/// half a millisecond per launch, over a PCIe 1.0 x1 link, while the
/// engine's cost model takes it for a fast GPU.
const SLOW_GPU: &str = "rtx3060-laptop,matvec_eff=0.01,elem_eff=0.01,gemm_tflops=0.05,\
attn_tflops=0.01,kernel_us=500,pcie=gen1x1";

fn slow_gpu(budget: u64) -> VirtualMachine {
    sim_machine(SLOW_GPU, 4, Some(budget))
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
    let vm = slow_gpu(spec.gguf.file_len() / 2);
    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(2).unwrap());
    let base = engine_on(
        spec.clone(),
        host_only(cpu.clone()),
        64,
        KvType::F32,
        Policy::Ats,
        false,
    );
    let gpu = vm.machine().gpu().unwrap().clone();
    let e = try_engine_with_cost(
        spec.clone(),
        vm.machine().clone(),
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
                ..Default::default()
            },
            1,
        )),
    )
}

#[test]
fn a_misjudged_gpu_loses_the_audition_and_stays_lost() {
    let dir = tempfile::tempdir().unwrap();
    let spec = synthetic(dir.path());
    let first = audition(&spec);
    // virtual time: the same run measures the same to the last bit
    assert_eq!(audition(&spec), first);
}

/// Runs the audition on the slow GPU and checks what it decided; returns
/// its report.
fn audition(spec: &Arc<ModelSpec>) -> ats_sched::planner::audition::AuditionReport {
    let ids: Vec<u32> = (0..48).map(|i| (i * 37 + 5) % 1024).collect();
    let (mut base, mut e, _) = engines(spec, Policy::Ats);
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
    // the static plan ran faster than every other candidate
    for (i, c) in report.entries.iter().enumerate() {
        if i != report.winner {
            assert!(c.measured_secs > winner.measured_secs, "{report:?}");
        }
    }
    report
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
