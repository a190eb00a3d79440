//! Routed-expert copies priced as the machine runs them: qwen3-30b-a3b
//! shapes on the `pcie-gen5-desktop` model at 4 GB, planned for a 512-token
//! prompt and 128 decode tokens. The planner priced a streamed layer's
//! experts as a pinned copy of their bytes over the link, while a router on
//! the GPU has them copied by a kernel whose SMs read mapped host memory
//! (0.39 GB/s an expert on the H200 it is fitted to): the GPU-only decode
//! plan was estimated at 26.1 ms and ran 349.9 ms, and at 16 threads the
//! prompt took a streaming layout estimated at 0.576 s that ran 0.905 s,
//! behind the one PCIe 4.0 chose (0.843 s). The profile now times the routed copy per
//! count of experts, and routed experts on both devices.

use std::sync::Arc;

use ats_core::device::KvType;
use ats_core::spec::ModelSpec;
use ats_sched::config::{Policy, RunConfig, Workload};
use ats_sched::planner::PlanKind;
use ats_sched::session::Session;
use ats_tests::{sim_machine, sim_session, tpot_after_auditions, zeros_model};

const VRAM: u64 = 4_000_000_000;

/// A session planned for a 512-token prompt and 128 decode tokens.
fn session(spec: &Arc<ModelSpec>, machine: &str, threads: usize) -> Session {
    let vm = sim_machine(&format!("{machine},compute=off"), threads, Some(VRAM));
    let run = RunConfig {
        n_ctx: 640,
        kv_type: KvType::F16,
        policy: Policy::Ats,
        vram: Some(VRAM),
        workload: Some(Workload {
            depth: 0,
            prompt: 512,
            generate: 128,
        }),
        ..RunConfig::for_model(spec, threads)
    };
    sim_session(spec, &vm, &run)
}

#[test]
fn a_moe_layouts_estimates_include_the_routed_copies() {
    let dir = tempfile::tempdir().unwrap();
    let spec = zeros_model(dir.path(), "qwen3-30b-a3b");
    let mut e = session(&spec, "pcie-gen5-desktop", 16);
    let prompt_tier = e.plan_set().tiers.last().unwrap().clone();
    assert_eq!(prompt_tier.tier, 512);
    let ids: Vec<u32> = (0..512).map(|i| (i * 7 + 3) % 1000).collect();
    let t0 = e.now();
    e.prefill(&ids, false).unwrap();
    let prompt = e.now() - t0;
    eprintln!(
        "PCIe 5.0: prompt {:.3} s estimated ({}), ran {prompt:.3} s",
        prompt_tier.est_secs,
        prompt_tier.kind.name()
    );
    let off = prompt / prompt_tier.est_secs;
    assert!(
        (0.9..1.1).contains(&off),
        "prompt ran {off:.2}x its estimate"
    );
    assert!(prompt < 0.86, "prompt ran {prompt:.3} s (before: 0.905 s)");

    // on PCIe 3.0 at 4 threads the layout streams, and decode auditions
    // the GPU-only plan
    let mut e = session(&spec, "pcie-gen5-desktop,pcie=gen3x16", 4);
    e.prefill(&ids[..64], false).unwrap();
    tpot_after_auditions(&mut e, 200);
    let audition = e.planner().last_audition().expect("decode was auditioned");
    let gpu_only = audition
        .entries
        .iter()
        .find(|x| x.kinds.contains(&PlanKind::GpuOnly))
        .expect("GPU-only auditioned");
    eprintln!(
        "PCIe 3.0: GPU-only decode {:.2} ms estimated, ran {:.2} ms",
        gpu_only.est_secs * 1e3,
        gpu_only.measured_secs * 1e3
    );
    let off = gpu_only.measured_secs / gpu_only.est_secs;
    assert!(
        (0.85..1.15).contains(&off),
        "GPU-only ran {off:.2}x its estimate"
    );
}
