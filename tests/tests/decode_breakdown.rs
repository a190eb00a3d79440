//! The decode breakdown (`Session::decode_breakdown`, `bench`'s
//! `decode_breakdown`) against what the plan says must happen: every node once
//! a round on its device, every streamed weight copied once a round.

use std::collections::BTreeSet;
use std::sync::Arc;

use ats_core::device::{Device, HostMemory, KvType};
use ats_core::graph::Op;
use ats_core::machine::DeviceId;
use ats_core::round::Round;
use ats_core::spec::ModelSpec;
use ats_cpu::CpuDevice;
use ats_sched::config::Policy;
use ats_sched::exec::{ExecConfig, ExecPlan, Executor, WeightHome};
use ats_sched::session::DecodeBreakdown;
use ats_tests::{engine_on, fixtures, gpu_if, host_only, sim_gpu, with_gpu};

fn llama() -> ModelSpec {
    ModelSpec::open(fixtures().join("llama/llama-f32.gguf")).unwrap()
}

#[test]
fn streamed_decode_rounds_count_every_node_and_copied_byte() {
    let spec = llama();
    let g = spec.graph().clone();
    let host: Arc<dyn HostMemory> = spec.gguf.backing().clone();
    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(1).unwrap());
    // nodes alternate between the CPU and a simulated GPU; every weight lives
    // on the host, so the GPU's are streamed into temp slots each round
    let mut plan = ExecPlan::all_cpu(&g);
    for i in 0..g.nodes.len() {
        plan.node_device[i] = gpu_if(i % 2 == 1);
    }
    ats_tests::caches_follow_attention(&g, &mut plan);
    assert!(plan.weight_home.iter().all(|h| *h == WeightHome::Host));
    let cfg = ExecConfig {
        kv_capacity: 16,
        kv_block_tokens: ats_sched::session::KV_BLOCK_TOKENS,
        kv_type: KvType::F32,
        slots_per_role: 2,
        region: None,
    };
    let machine = with_gpu(cpu, sim_gpu(1 << 30, 1));
    let mut ex = Executor::new(g.clone(), host, machine.clone(), cfg, plan.clone()).unwrap();
    ex.run(&Arc::new(Round::text(vec![1, 2, 3], 0, false)))
        .unwrap();
    let mut b = DecodeBreakdown::default();
    let rounds = 4;
    for t in 0..rounds {
        ex.run(&Arc::new(Round::text(vec![5 + t as u32], 3 + t, false)))
            .unwrap();
        b.add(&g, ex.last_stats());
    }
    assert_eq!(b.rounds, rounds);
    // each node once a round, on the device the plan gave it
    for d in DeviceId::ALL {
        let want = plan.node_device.iter().filter(|&&x| x == d).count() * rounds;
        let got: usize = b
            .ops
            .iter()
            .filter(|((dd, _), _)| *dd == d)
            .map(|(_, v)| v.1)
            .sum();
        assert_eq!(got, want, "the {d}");
    }
    // each weight a GPU node reads is copied once a round, whole
    let streamed: BTreeSet<usize> = g
        .nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| plan.node_device[*i] == DeviceId::Gpu)
        .flat_map(|(_, n)| n.weights.iter().copied())
        .collect();
    let bytes: u64 = streamed.iter().map(|&w| g.weights[w].bytes).sum();
    assert!(bytes > 0);
    assert_eq!(b.copy_bytes, bytes * rounds as u64);
    assert!(b.copy_secs > 0.0 && b.switches >= rounds && b.activation_bytes > 0);
    // host-timed CPU nodes fit in the rounds' wall time
    let cpu_secs: f64 = b
        .ops
        .iter()
        .filter(|((d, _), _)| *d == DeviceId::Host)
        .map(|(_, v)| v.0)
        .sum();
    assert!(
        cpu_secs > 0.0 && cpu_secs <= b.wall_secs,
        "{cpu_secs} of {}",
        b.wall_secs
    );
    // the report is per token and names the devices
    let r = b.report(&machine);
    assert_eq!(r.devices.len(), 2);
    assert_eq!(r.devices[1].device, "sim-gpu");
    assert!((r.copy_mb * 1e6 - bytes as f64).abs() < 1.0);
    let per_token: f64 = r.devices[0].ops.iter().map(|o| o.nodes).sum();
    assert_eq!(
        per_token as usize,
        plan.node_device
            .iter()
            .filter(|&&x| x == DeviceId::Host)
            .count()
    );
    let line = r.to_string();
    assert!(
        line.contains("copies") && line.contains("sim-gpu"),
        "{line}"
    );
}

#[test]
fn the_engine_counts_decode_rounds_only_until_reset() {
    let spec = Arc::new(llama());
    let matmuls = spec
        .graph()
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::MatMul))
        .count();
    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(1).unwrap());
    let mut e = engine_on(spec, host_only(cpu), 32, KvType::F32, Policy::Ats, false);
    e.prefill(&[1, 2, 3], false).unwrap();
    assert_eq!(
        e.decode_breakdown().rounds,
        0,
        "a prompt round is not decode"
    );
    for t in 0..5 {
        e.decode(7 + t).unwrap();
    }
    let r = e.decode_breakdown().report(e.machine());
    assert_eq!(r.rounds, 5);
    let mm = r.devices[0].ops.iter().find(|o| o.op == "matmul").unwrap();
    assert_eq!(mm.nodes, matmuls as f64);
    assert!(r.wall_ms > 0.0 && r.devices[0].ms <= r.wall_ms);
    e.reset_decode_breakdown();
    assert_eq!(e.decode_breakdown().rounds, 0);
}
