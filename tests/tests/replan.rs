//! Re-planning keeps the KV cache: logits after a forced re-plan, and after
//! moving every KV cache between devices, equal those of an undisturbed run.
//! The GPU is a machine model's (virtual time), so which plans the
//! audition and the re-plans pick is the same on every run.

use std::sync::Arc;

use ats_core::device::{Device, HostMemory, KvType};
use ats_core::machine::DeviceId;
use ats_core::machine::Machine;
use ats_core::round::Round;
use ats_core::spec::ModelSpec;
use ats_cpu::CpuDevice;
use ats_sched::config::Policy;
use ats_sched::exec::{ExecConfig, ExecPlan, Executor, WeightHome};
use ats_tests::{Reference, engine_on, fixtures, host_only, sim_machine};

/// A laptop of the machine model with a GPU budget of `budget` bytes.
fn sim(budget: u64) -> Machine {
    sim_machine("rtx3060-laptop", 2, Some(budget))
        .machine()
        .clone()
}

#[test]
fn logits_survive_a_forced_replan() {
    let spec = Arc::new(ModelSpec::open(fixtures().join("qwen3/qwen3-f32.gguf")).unwrap());
    let ids = Reference::open("qwen3/reference.safetensors").ids("full_ids");
    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(2).unwrap());
    let mut base = engine_on(
        spec.clone(),
        host_only(cpu.clone()),
        64,
        KvType::F32,
        Policy::Ats,
        false,
    );
    let mut e = engine_on(
        spec.clone(),
        sim(spec.gguf.file_len() / 2),
        64,
        KvType::F32,
        Policy::Ats,
        false,
    );
    base.prefill(&ids[..20], false).unwrap();
    e.prefill(&ids[..20], false).unwrap();
    for (k, &t) in ids[20..].iter().enumerate() {
        if k % 5 == 2 {
            assert!(e.force_replan().unwrap(), "a GPU engine re-plans");
        }
        assert_eq!(e.decode(t).unwrap(), base.decode(t).unwrap(), "step {k}");
    }
    assert!(e.planner().replan_stats().replans >= 3);
}

#[test]
fn moving_kv_caches_between_devices_keeps_their_contents() {
    let spec = ModelSpec::open(fixtures().join("llama/llama-f32.gguf")).unwrap();
    let graph = spec.graph().clone();
    let host: Arc<dyn HostMemory> = spec.gguf.backing().clone();
    let ids = Reference::open("llama/reference.safetensors").ids("full_ids");
    let cfg = ExecConfig {
        kv_capacity: 64,
        kv_block_tokens: ats_sched::session::KV_BLOCK_TOKENS,
        kv_type: KvType::F16,
        slots_per_role: 2,
        region: None,
    };
    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(2).unwrap());
    let mut base = Executor::new(
        graph.clone(),
        host.clone(),
        host_only(cpu.clone()),
        cfg.clone(),
        ExecPlan::all_cpu(&graph),
    )
    .unwrap();
    let on_gpu = |g: &ats_core::graph::Graph| ExecPlan {
        node_device: vec![DeviceId::Gpu; g.nodes.len()],
        weight_home: vec![WeightHome::Resident; g.weights.len()],
        kv_device: vec![DeviceId::Gpu; g.kv_caches.len()],
    };
    let mut ex = Executor::new(
        graph.clone(),
        host.clone(),
        sim(1 << 30),
        cfg,
        on_gpu(&graph),
    )
    .unwrap();
    let prompt = Arc::new(Round::text(ids[..16].to_vec(), 0, false));
    assert_eq!(ex.run(&prompt).unwrap(), base.run(&prompt).unwrap());
    let before = ex.read_kv(16).unwrap();
    for (k, &t) in ids[16..24].iter().enumerate() {
        // alternate: caches to the CPU, then back to the GPU
        let plan = if k % 2 == 0 {
            ExecPlan::all_cpu(&graph)
        } else {
            on_gpu(&graph)
        };
        ex.set_plan(plan).unwrap();
        if k == 0 {
            assert_eq!(
                ex.read_kv(16).unwrap(),
                before,
                "moved caches hold the same bytes"
            );
        }
        let r = Arc::new(Round::text(vec![t], 16 + k, false));
        assert_eq!(ex.run(&r).unwrap(), base.run(&r).unwrap(), "step {k}");
    }
}
