//! A stated workload (`RunConfig::workload`, `--workload`, what `bench`
//! plans for) chooses the layout: in virtual time on the `rtx3060-laptop`
//! model at 4 GB, llama-8b shapes, a layout chosen for long generations
//! decodes faster than one chosen for long prompts, and the other way
//! round for prompts.

use std::sync::Arc;

use ats_core::device::KvType;
use ats_core::spec::ModelSpec;
use ats_sched::config::{Policy, RunConfig, Workload};
use ats_tests::{sim_machine, sim_session, tpot_after_auditions, zeros_model};

const N_CTX: usize = 2176;

/// Virtual seconds of a 2,048-token prompt and of one decode token after
/// a 64-token prompt, in a session planned for `workload`.
fn timings(spec: &Arc<ModelSpec>, workload: Option<Workload>) -> (f64, f64) {
    let vm = sim_machine("rtx3060-laptop,compute=off", 8, Some(4_000_000_000));
    let run = RunConfig {
        n_ctx: N_CTX,
        kv_type: KvType::F16,
        policy: Policy::Ats,
        vram: Some(4_000_000_000),
        workload,
        ..RunConfig::for_model(spec, 8)
    };
    let mut e = sim_session(spec, &vm, &run);
    let ids = |n: u32| -> Vec<u32> { (0..n).map(|i| i * 7 + 3).collect() };
    let t0 = e.now();
    e.prefill(&ids(2048), false).unwrap();
    let prompt = e.now() - t0;
    e.reset();
    e.prefill(&ids(64), false).unwrap();
    let tpot = tpot_after_auditions(&mut e, 400);
    (prompt, tpot)
}

#[test]
fn the_layout_follows_the_stated_workload() {
    let dir = tempfile::tempdir().unwrap();
    let spec = zeros_model(dir.path(), "llama-8b");
    let generate = Workload {
        depth: 0,
        prompt: 64,
        generate: 2048,
    };
    let prompts = Workload {
        depth: 0,
        prompt: 2048,
        generate: 16,
    };
    let (g_prompt, g_tpot) = timings(&spec, Some(generate));
    let (p_prompt, p_tpot) = timings(&spec, Some(prompts));
    let (d_prompt, d_tpot) = timings(&spec, None);
    eprintln!(
        "planned for generation: prompt {g_prompt:.3} s, TPOT {g_tpot:.4} s; \
         for prompts: {p_prompt:.3} s, {p_tpot:.4} s; default: {d_prompt:.3} s, {d_tpot:.4} s"
    );
    assert!(g_tpot < p_tpot, "decode: {g_tpot} against {p_tpot}");
    assert!(p_prompt < g_prompt, "prompt: {p_prompt} against {g_prompt}");
    // the default (half the context as prompt, 128 tokens) sits between,
    // within 1-2% (the auditions find each layout's fastest decode plan)
    assert!(g_tpot <= d_tpot * 1.01, "decode: {g_tpot} against {d_tpot}");
    assert!(
        p_prompt <= d_prompt * 1.02,
        "prompt: {p_prompt} against {d_prompt}"
    );
}
