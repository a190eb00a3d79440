//! Where a modelled machine's time goes: one model on one machine model,
//! as `ats-cli bench -p P -n N` runs it, with the virtual time of the
//! prompt and of the decode tokens split by device and op kind (for
//! fitting a preset to measurements, e.g. `h200-host` to
//! `docs/gpu-results.md`).
//!
//! `cargo run --release -p ats-sched --example sim_breakdown -- MACHINE MODEL VRAM_GB POLICY [P N] [--items] [--threads=N]`
//! (`--items`: every placement item, its bytes and residency; `--threads`:
//! the host threads ATS runs with, 16 unless given)
//! (MODEL: a synth preset, run on all-zero weights with `compute=off`).

mod common;

use std::collections::BTreeMap;

use ats_core::machine::DeviceId;
use ats_sched::config::{Policy, Workload};
use ats_sched::rescheduler::ReschedConfig;
use ats_sched::session::Session;
use common::{machine, prompt, session_for, zeros_model};

/// Per (device, op kind): virtual seconds and nodes, over the rounds run
/// since the last call.
#[derive(Default)]
struct Split {
    ops: BTreeMap<(String, &'static str), (f64, usize)>,
    copies: f64,
    copy_bytes: u64,
    rounds: usize,
    total: f64,
}

impl Split {
    fn add(&mut self, e: &Session) {
        let st = e.executor().last_stats();
        let g = e.graph();
        for &(n, d, s) in &st.node_secs {
            let dev = if d == DeviceId::Host { "cpu" } else { "gpu" };
            let x = self
                .ops
                .entry((dev.to_string(), g.nodes[n].op.kind_name()))
                .or_default();
            x.0 += s;
            x.1 += 1;
        }
        for &(_, b, s) in &st.async_copies {
            self.copies += s;
            self.copy_bytes += b;
        }
        self.rounds += 1;
        self.total += st.total_secs;
    }

    fn print(&self, what: &str, per: f64) {
        println!(
            "{what}: {:.2} ms in {} rounds; copies {:.1} MB in {:.2} ms",
            self.total * 1e3 / per,
            self.rounds,
            self.copy_bytes as f64 / 1e6 / per,
            self.copies * 1e3 / per
        );
        for ((d, op), (s, n)) in &self.ops {
            println!(
                "  {d} {op:<12} {:9.3} ms  {:7.1} nodes",
                s * 1e3 / per,
                *n as f64 / per
            );
        }
    }
}

fn main() {
    let items = std::env::args().any(|a| a == "--items");
    let threads: usize = std::env::args()
        .find_map(|a| a.strip_prefix("--threads=").map(String::from))
        .map_or(16, |t| t.parse().expect("--threads=N"));
    let a: Vec<String> = std::env::args()
        .filter(|x| x != "--items" && !x.starts_with("--threads="))
        .collect();
    if a.len() < 5 {
        eprintln!("usage: sim_breakdown MACHINE MODEL VRAM_GB POLICY [P N]");
        std::process::exit(2);
    }
    let (spec, model_name) = (&a[1], &a[2]);
    let vram: f64 = a[3].parse().expect("VRAM in GB");
    let policy = Policy::parse(&a[4]).expect("a policy");
    let p: usize = a.get(5).and_then(|s| s.parse().ok()).unwrap_or(2048);
    let n_gen: usize = a.get(6).and_then(|s| s.parse().ok()).unwrap_or(128);
    let dir = std::env::temp_dir().join("ats-sim-breakdown");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let model = zeros_model(&dir, model_name);
    let vm = machine(&format!("{spec},compute=off"), threads, (vram * 1e9) as u64);
    // the context and workload `ats-cli bench -p P -n N` plans for
    let n_ctx = p.max(n_gen).max(1);
    let workload = Workload {
        depth: 0,
        prompt: p,
        generate: n_gen,
    };
    let mut e = session_for(
        &model,
        &vm,
        policy,
        n_ctx,
        ReschedConfig::default(),
        Some(workload),
    )
    .expect("session");
    let r = e.planner().report();
    println!(
        "{model_name} on {spec} at {vram}G, {}: resident {:.2} GB, max tier {}, temp slots {}",
        policy.name(),
        r.tensors
            .iter()
            .filter(|t| t.region == Some(ats_core::ledger::Region::Resident))
            .map(|t| t.bytes)
            .sum::<u64>() as f64
            / 1e9,
        r.max_tier,
        r.streaming
    );
    if items {
        // the attention costs the residency DP weighs (decode at half the
        // context, a fresh 512-token prompt)
        let g = e.graph();
        if let Some(n) = g.nodes.iter().position(|x| x.op.kind_name() == "attention") {
            let c = e.planner().cost();
            for (what, n_tokens, past) in [
                ("decode", 1, n_ctx / 2),
                ("prompt 512", 512, 0),
                ("prompt 2048", 2048, 0),
            ] {
                let sh = ats_core::graph::cost::RoundShape {
                    n_tokens,
                    past,
                    n_outputs: 1,
                };
                let at = |shape| ats_sched::profile::NodeAt {
                    g,
                    node: n,
                    shape,
                    kv_f16: true,
                };
                println!(
                    "  attention {what}: cpu {:.3} ms, gpu {:.3} ms",
                    c.node_secs(at(sh), DeviceId::Host) * 1e3,
                    c.node_secs(at(sh), DeviceId::Gpu) * 1e3
                );
            }
        }
        for it in &r.items {
            println!(
                "  item {:<24} {:>9.1} MB resident {} decode est {:.3} ms",
                it.name,
                it.bytes as f64 / 1e6,
                it.resident,
                it.est_decode_secs * 1e3
            );
        }
    }
    for t in &e.plan_set().tiers {
        let others: Vec<String> = t
            .estimates
            .iter()
            .filter_map(|(k, e)| e.map(|e| format!("{} {:.2}", k.name(), e * 1e3)))
            .collect();
        println!(
            "  tier {:>5}: {:<9} est {:9.2} ms ({})",
            t.tier,
            t.kind.name(),
            t.est_secs * 1e3,
            others.join(", ")
        );
    }
    if p > 0 {
        let ids = prompt(&e, p);
        let mut s = Split::default();
        let mut start = 0;
        while start < p {
            let (_, chunk) = e.planner().choose(p - start);
            let end = (start + chunk).min(p);
            e.prefill(&ids[start..end], false).expect("prefill");
            s.add(&e);
            start = end;
        }
        s.print(&format!("prompt of {p}"), 1.0);
        println!("  = {:.1} tokens/s", p as f64 / s.total);
    }
    if n_gen > 0 {
        // warm-up through the audition, as bench does
        e.reset();
        for i in 0..64 {
            e.decode(5 + i).expect("decode");
            if !e.planner().auditioning() && i > 0 {
                break;
            }
        }
        if let Some(a) = e.planner().last_audition() {
            let parts: Vec<String> = a
                .entries
                .iter()
                .map(|x| {
                    format!(
                        "{} {:.2} ms (est {:.2})",
                        x.kinds
                            .iter()
                            .map(|k| k.name())
                            .collect::<Vec<_>>()
                            .join("/"),
                        x.measured_secs * 1e3,
                        x.est_secs * 1e3
                    )
                })
                .collect();
            println!("audition: {}", parts.join(", "));
        }
        e.reset();
        let mut s = Split::default();
        for i in 0..n_gen {
            e.decode(100 + i as u32).expect("decode");
            s.add(&e);
        }
        s.print("decode per token", n_gen as f64);
        println!(
            "  = {:.1} tokens/s, plan {}, re-plans {}",
            n_gen as f64 / s.total,
            e.plan_set().tiers[0].kind.name(),
            e.planner().replan_stats().replans
        );
    }
}
