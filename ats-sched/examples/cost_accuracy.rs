//! Cost-model accuracy on held-out shapes: profile this CPU (`--quick`
//! shapes: token counts 1, 16, 128), then run a real model's graph at token
//! counts the profile never saw and compare each node's measured time with
//! the profile-only estimate (nearest neighbour scaled by the roofline).
//!
//! `cargo run --release -p ats-sched --example cost_accuracy -- [MODEL.gguf] [THREADS]`
//! (default: a synthetic llama-shaped model, all cores).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use ats_core::device::{Device, HostMemory, KvType};
use ats_core::graph::cost::RoundShape;
use ats_core::machine::Machine;
use ats_core::round::Round;
use ats_core::spec::ModelSpec;
use ats_cpu::CpuDevice;
use ats_sched::exec::{ExecConfig, ExecPlan, Executor};
use ats_sched::profile::{BenchOptions, CostModel, op_key, profile_devices};

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = tempfile::tempdir().expect("temp dir");
    let spec = match args.get(1) {
        Some(p) => Arc::new(ModelSpec::open(p).expect("opening the model")),
        None => common::write_model(dir.path()),
    };
    let threads: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(threads).expect("cpu"));
    let make_cpu = |t: usize| -> Result<Arc<dyn Device>, String> {
        Ok(Arc::new(CpuDevice::new(t).map_err(|e| e.to_string())?) as Arc<dyn Device>)
    };
    let t0 = std::time::Instant::now();
    let machine = Machine::host_only(cpu).expect("machine");
    let profile = profile_devices(
        &machine,
        &make_cpu,
        &BenchOptions::new(true, threads),
        &mut |_, _, _| {},
    )
    .expect("profiling");
    eprintln!(
        "quick profile: {} samples in {:.1} s",
        profile.devices[0].samples.len(),
        t0.elapsed().as_secs_f64()
    );
    let cost = CostModel::new((profile.devices[0].clone(), threads), None);

    let graph = spec.graph().clone();
    let host: Arc<dyn HostMemory> = spec.gguf.backing().clone();
    let cfg = ExecConfig {
        kv_capacity: 512,
        kv_block_tokens: ats_sched::session::KV_BLOCK_TOKENS,
        kv_type: KvType::F16,
        slots_per_role: 2,
        region: None,
    };
    let mut ex = Executor::new(graph.clone(), host, machine, cfg, ExecPlan::all_cpu(&graph))
        .expect("executor");

    // relative errors per op kind, and per round (sum over nodes)
    let mut by_op: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut all = Vec::new();
    println!("| tokens | measured ms | estimated ms | error |");
    println!("| ---: | ---: | ---: | ---: |");
    for tokens in [2usize, 8, 32, 96, 300] {
        let shape = RoundShape {
            n_tokens: tokens,
            past: 0,
            n_outputs: 1,
        };
        let mut per_node: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
        for rep in 0..4 {
            let r = Arc::new(Round::text(
                (0..tokens as u32).map(|i| i % 100 + 1).collect(),
                0,
                false,
            ));
            ex.run(&r).expect("round");
            if rep == 0 {
                continue; // warm-up
            }
            for &(node, _, secs) in &ex.last_stats().node_secs {
                per_node.entry(node).or_default().push(secs);
            }
        }
        let (mut meas_sum, mut est_sum) = (0.0, 0.0);
        for (node, mut v) in per_node {
            let meas = median(&mut v);
            let at = ats_sched::profile::NodeAt {
                g: &graph,
                node,
                shape,
                kv_f16: true,
            };
            let est = cost.profiled_secs(at, ats_core::machine::DeviceId::Host);
            meas_sum += meas;
            est_sum += est;
            // nodes under 20 us are dominated by timer and launch noise
            if meas < 20e-6 {
                continue;
            }
            let err = (est - meas).abs() / meas;
            by_op
                .entry(op_key(&graph, node, shape).op)
                .or_default()
                .push(err);
            all.push(err);
        }
        println!(
            "| {tokens} | {:.2} | {:.2} | {:+.0}% |",
            meas_sum * 1e3,
            est_sum * 1e3,
            (est_sum - meas_sum) / meas_sum * 100.0
        );
    }
    println!();
    println!("| op | nodes | median error | worst error |");
    println!("| --- | ---: | ---: | ---: |");
    for (op, mut v) in by_op {
        let worst = v.iter().cloned().fold(0.0, f64::max);
        println!(
            "| {op} | {} | {:.0}% | {:.0}% |",
            v.len(),
            median(&mut v) * 100.0,
            worst * 100.0
        );
    }
    let worst = all.iter().cloned().fold(0.0, f64::max);
    println!(
        "| all | {} | {:.0}% | {:.0}% |",
        all.len(),
        median(&mut all) * 100.0,
        worst * 100.0
    );
}
