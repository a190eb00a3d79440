//! A streaming layout's residency, judged by its run in virtual time:
//! qwen3-8b shapes on the `pcie-gen5-desktop` model at 4 GB, 4 threads,
//! 4K deep. The static DP priced every non-resident item at its CPU time
//! and kept whole runs of layers resident, leaving the output head on the
//! CPU and the other layers' copies waiting on the link: the planner's
//! decode plan ran 42.5 ms (32.4 ms once the GPU profile was timed as runs
//! time it). Pricing non-resident items as the CPU and the link share them,
//! and spreading alike items over the layers, it runs 29.1 ms.
//!
//! A run's first layout also tries the residency the DP makes for the
//! reference prompt alone: on the `rtx3060-laptop` model at 4 GB, llama-8b
//! shapes, the one it made for the whole workload ran a 512-token prompt
//! at 0.64x the `layers` baseline's rate (its KV caches on the host).

use std::sync::Arc;

use ats_core::device::KvType;
use ats_core::spec::ModelSpec;
use ats_sched::config::{Policy, RunConfig, Workload};
use ats_tests::{
    frozen_decode_session, median_decode_secs, sim_machine, sim_session, tpot_after_auditions,
    zeros_model,
};

const DEPTH: usize = 4096;
const VRAM: u64 = 4_000_000_000;

#[test]
fn the_planners_decode_plan_keeps_the_link_and_the_cpu_busy() {
    let dir = tempfile::tempdir().unwrap();
    let spec = zeros_model(dir.path(), "qwen3-8b");
    let vm = sim_machine("pcie-gen5-desktop,compute=off", 4, Some(VRAM));
    let mut e = frozen_decode_session(&spec, &vm, 4, VRAM, DEPTH);
    let prompt: Vec<u32> = (0..DEPTH as u32).map(|i| (i * 7 + 3) % 1000).collect();
    e.prefill(&prompt, false).unwrap();
    let ms = median_decode_secs(&mut e) * 1e3;
    eprintln!("decode: {ms:.2} ms");
    assert!(ms < 31.0, "decode ran {ms:.2} ms (before: 42.5, then 32.4)");
}

/// Virtual seconds of a 512-token prompt and of a decode round after it
/// (past the auditions), planned by `policy` for 512 + 128 tokens.
fn prompt_and_tpot(spec: &Arc<ModelSpec>, policy: Policy) -> (f64, f64) {
    let vm = sim_machine("rtx3060-laptop,compute=off", 8, Some(VRAM));
    let run = RunConfig {
        n_ctx: 640,
        kv_type: KvType::F16,
        policy,
        vram: Some(VRAM),
        workload: Some(Workload {
            depth: 0,
            prompt: 512,
            generate: 128,
        }),
        ..RunConfig::for_model(spec, 8)
    };
    let mut e = sim_session(spec, &vm, &run);
    let prompt: Vec<u32> = (0..512).map(|i| (i * 7 + 3) % 1000).collect();
    let t0 = e.now();
    e.prefill(&prompt, false).unwrap();
    let prompt_secs = e.now() - t0;
    let tpot = tpot_after_auditions(&mut e, 100);
    (prompt_secs, tpot)
}

#[test]
fn the_first_layout_runs_prompts_and_decode_ahead_of_layer_offload() {
    let dir = tempfile::tempdir().unwrap();
    let spec = zeros_model(dir.path(), "llama-8b");
    let (ats_prompt, ats_tpot) = prompt_and_tpot(&spec, Policy::Ats);
    let (layers_prompt, layers_tpot) = prompt_and_tpot(&spec, Policy::Layers);
    eprintln!(
        "ats: prompt {ats_prompt:.3} s, TPOT {:.2} ms; layers: {layers_prompt:.3} s, {:.2} ms",
        ats_tpot * 1e3,
        layers_tpot * 1e3
    );
    // the workload-weighted residency alone: 0.557 s against 0.357 s
    assert!(
        ats_prompt < layers_prompt,
        "prompt {ats_prompt} against {layers_prompt}"
    );
    assert!(
        ats_tpot < layers_tpot,
        "decode {ats_tpot} against {layers_tpot}"
    );
}
