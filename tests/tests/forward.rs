//! One forward pass of every text fixture on the CPU executor against the
//! Hugging Face logits.

use std::sync::Arc;

use ats_core::device::{Device, HostMemory, KvType};
use ats_core::round::{Positions, Round};
use ats_core::spec::ModelSpec;
use ats_cpu::CpuDevice;
use ats_sched::exec::{ExecConfig, ExecPlan, Executor};
use ats_tests::{Reference, fixtures, host_only, max_abs_diff};

fn run_all(dir: &str, file: &str, kv: KvType) -> f32 {
    let spec = ModelSpec::open(fixtures().join(dir).join(file)).unwrap();
    let graph = spec.graph().clone();
    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(2).unwrap());
    let host: Arc<dyn HostMemory> = spec.gguf.backing().clone();
    let plan = ExecPlan::all_cpu(&graph);
    let cfg = ExecConfig {
        kv_capacity: 64,
        kv_block_tokens: ats_sched::session::KV_BLOCK_TOKENS,
        kv_type: kv,
        slots_per_role: 2,
        region: None,
    };
    let mut ex = Executor::new(graph, host, host_only(cpu), cfg, plan).unwrap();
    let r = Reference::open(&format!("{dir}/reference.safetensors"));
    let ids = r.ids("input_ids");
    let mut round = Round::text(ids.clone(), 0, true);
    if spec.arch.uses_mrope() {
        round.positions = Positions::mrope_text(0, ids.len());
    }
    let logits = ex.run(&Arc::new(round)).unwrap();
    let (want, _) = r.f32("logits");
    max_abs_diff(logits, &want)
}

#[test]
fn text_fixtures_match_hf_logits() {
    for (dir, file) in [
        ("llama", "llama-f32.gguf"),
        ("qwen2", "qwen2-f32.gguf"),
        ("qwen3", "qwen3-f32.gguf"),
        ("qwen3_moe", "qwen3_moe-f32.gguf"),
    ] {
        let e32 = run_all(dir, file, KvType::F32);
        let e16 = run_all(dir, file, KvType::F16);
        eprintln!("{dir}: max |diff| f32 KV {e32:.2e}, f16 KV {e16:.2e}");
        assert!(e32 < 1e-3, "{dir}: f32 KV {e32}");
        assert!(e16 < 5e-2, "{dir}: f16 KV {e16}");
    }
}
