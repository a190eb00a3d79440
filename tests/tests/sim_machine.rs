//! The machine model: runs compute exact logits, and time comes from the
//! model alone, so two runs give the same timings to the last bit.

use std::sync::Arc;

use ats_core::device::KvType;
use ats_core::spec::ModelSpec;
use ats_core::synth::SynthSpec;
use ats_sched::config::Policy;
use ats_tests::{
    cpu, engine_on, host_only, max_abs_diff, sim_cost, sim_machine, try_engine_with_cost,
};

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

/// Decode times (virtual seconds per round) and logits of a short run.
fn run(spec: &Arc<ModelSpec>, machine: &str) -> (Vec<f64>, Vec<Vec<f32>>, String) {
    let vm = sim_machine(machine, 4, Some(spec.gguf.file_len() / 2));
    let cost = sim_cost(&vm);
    let mut e = try_engine_with_cost(
        spec.clone(),
        vm.machine().clone(),
        cost,
        64,
        KvType::F32,
        Policy::Ats,
        false,
    )
    .unwrap();
    let ids: Vec<u32> = (0..40).map(|i| (i * 37 + 5) % 1024).collect();
    let mut logits = vec![e.prefill(&ids[..8], false).unwrap()];
    let mut times = Vec::new();
    for &t in &ids[8..] {
        let t0 = e.now();
        logits.push(e.decode(t).unwrap());
        times.push(e.now() - t0);
    }
    (times, logits, format!("{:?}", e.plan_set().tiers[0].kind))
}

#[test]
fn a_modelled_machine_computes_exact_logits_in_repeatable_time() {
    let dir = tempfile::tempdir().unwrap();
    let spec = synthetic(dir.path());
    let (t1, l1, k1) = run(&spec, "rtx3060-laptop");
    let (t2, l2, k2) = run(&spec, "rtx3060-laptop");
    assert_eq!(t1, t2, "the same run, the same virtual times");
    assert_eq!(k1, k2);
    assert!(t1.iter().all(|&t| t > 0.0 && t < 1.0), "{t1:?}");
    let mut base = engine_on(
        spec.clone(),
        host_only(cpu(2)),
        64,
        KvType::F32,
        Policy::Ats,
        false,
    );
    let ids: Vec<u32> = (0..40).map(|i| (i * 37 + 5) % 1024).collect();
    let want = base.prefill(&ids[..8], false).unwrap();
    assert!(max_abs_diff(&l1[0], &want) < 1e-4);
    for (k, &t) in ids[8..].iter().enumerate() {
        let want = base.decode(t).unwrap();
        let d = max_abs_diff(&l1[k + 1], &want);
        assert!(d < 1e-4, "step {k}: {d}");
    }
    assert_eq!(l1, l2);
    // a slower link and host make the same decode slower
    let (t3, _, _) = run(&spec, "rtx3060-laptop,pcie=gen3x4,cores=2");
    let sum = |v: &[f64]| v.iter().sum::<f64>();
    assert!(sum(&t3) > sum(&t1), "{} vs {}", sum(&t3), sum(&t1));
}

/// The profile of a machine model times its routed-expert copy per count
/// of experts as the model runs it (`rtx3060-laptop`: 0.39 GB/s an expert,
/// at most 12.5 GB/s), and routed experts on both devices.
#[test]
fn the_profile_times_routed_copies_and_experts() {
    let vm = sim_machine("rtx3060-laptop,compute=off", 8, None);
    let p = vm.profile(true, &|_| ats_tests::sim_kernels()).unwrap();
    let gpu = &p.devices[1];
    assert!(gpu.routed_copies.len() >= 3, "{:?}", gpu.routed_copies);
    for s in &gpu.routed_copies {
        let gbps = s.bytes as f64 / s.secs / 1e9;
        let want = (0.39 * s.experts as f64).min(12.5);
        assert!(
            (gbps / want - 1.0).abs() < 0.05,
            "{} experts: {gbps:.2} GB/s, the model runs {want:.2}",
            s.experts
        );
    }
    for d in &p.devices {
        let tokens: Vec<usize> = d
            .samples
            .iter()
            .filter(|s| s.key.op == "moe_experts" && !s.contended)
            .map(|s| s.key.tokens)
            .collect();
        assert!(
            tokens.contains(&1) && tokens.contains(&512),
            "{}: {tokens:?}",
            d.kind
        );
    }
}
