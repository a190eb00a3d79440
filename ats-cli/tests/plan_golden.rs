//! `plan --json` for a fixed set of models, budgets, policies and simulated
//! GPUs equals what the planner produced before the session/layout redesign
//! (`tests/data/plans.jsonl`): the redesign moved code, not decisions.
//! The profile is a committed quick profile, so the plans do not depend on
//! this machine. Regenerate the goldens only for an intended planning change:
//! `ATS_BLESS_PLANS=1 cargo test -p ats-cli --test plan_golden`.

mod common;

use std::path::PathBuf;

use common::{fixture, run, stderr, stdout};
use serde_json::Value;

/// (name, model, simulated GPU, budget, policy).
fn cases() -> Vec<(String, PathBuf, &'static str, &'static str, &'static str)> {
    let mut out = Vec::new();
    let fast = "speed=8,copy=16";
    let mut add = |model: &str, path: PathBuf, sim: &'static str, vram, policy| {
        out.push((
            format!("{model} {sim} {vram} {policy}"),
            path,
            sim,
            vram,
            policy,
        ));
    };
    let llama = fixture("llama/llama-f32.gguf");
    for vram in ["3M", "8M", "40M"] {
        for policy in ["ats", "layers"] {
            add("llama", llama.clone(), fast, vram, policy);
        }
    }
    add("llama", llama, fast, "8M", "static");
    let moe = fixture("qwen3_moe/qwen3_moe-f32.gguf");
    for vram in ["3M", "40M"] {
        for policy in ["ats", "layers", "cpu-moe"] {
            add("qwen3_moe", moe.clone(), fast, vram, policy);
        }
    }
    let q4k = fixture("llama_quant/llama-Q4_K_M.gguf");
    add("llama-q4_k_m", q4k.clone(), fast, "8M", "ats");
    add("llama-q4_k_m", q4k, fast, "8M", "layers");
    add(
        "qwen2_vl",
        fixture("qwen2_vl/qwen2_vl-f32.gguf"),
        fast,
        "8M",
        "ats",
    );
    if let Some(smol) = ats_tests::smollm2() {
        for vram in ["1M", "8M", "40M"] {
            for policy in ["ats", "layers"] {
                add("smollm2", smol.clone(), fast, vram, policy);
            }
        }
        // streaming layouts with dynamic tiers, and GPU-only prompt tiers
        add("smollm2", smol.clone(), "speed=6,copy=2", "8M", "ats");
        add("smollm2", smol.clone(), "speed=6,copy=2", "8M", "tiers");
        add("smollm2", smol, "speed=3,copy=4", "20M", "ats");
    } else {
        eprintln!("SmolLM2 is not available: its plan cases are skipped");
    }
    out
}

fn plan_json(model: &std::path::Path, sim: &str, vram: &str, policy: &str) -> Value {
    let profile = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/profile-quick-2cpu.json"
    );
    let m = model.to_str().expect("UTF-8 path");
    let o = run(&[
        "-q",
        "plan",
        "-m",
        m,
        "--sim-gpu",
        sim,
        "--vram",
        vram,
        "--policy",
        policy,
        "-t",
        "2",
        "--profile",
        profile,
        "--json",
    ]);
    assert!(o.status.success(), "plan failed: {}", stderr(&o));
    let mut v: Value = serde_json::from_str(&stdout(&o)).expect("plan --json is JSON");
    // the path depends on where the fixtures are
    v.as_object_mut().expect("an object").remove("model");
    v
}

/// Whether `new` has every field of `old` with the same value (floats to a
/// relative 1e-9: a reordered sum is the same decision); new fields are allowed.
fn covers(old: &Value, new: &Value, at: &str, diffs: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, va) in a {
                match b.get(k) {
                    Some(vb) => covers(va, vb, &format!("{at}.{k}"), diffs),
                    None => diffs.push(format!("{at}.{k}: missing")),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            if a.len() != b.len() {
                diffs.push(format!("{at}: {} entries, was {}", b.len(), a.len()));
                return;
            }
            for (i, (va, vb)) in a.iter().zip(b).enumerate() {
                covers(va, vb, &format!("{at}[{i}]"), diffs);
            }
        }
        (Value::Number(a), Value::Number(b)) if a.is_f64() || b.is_f64() => {
            let (x, y) = (
                a.as_f64().unwrap_or(f64::NAN),
                b.as_f64().unwrap_or(f64::NAN),
            );
            if (x - y).abs() > 1e-9 * x.abs().max(y.abs()) {
                diffs.push(format!("{at}: {y}, was {x}"));
            }
        }
        _ if old != new => diffs.push(format!("{at}: {new}, was {old}")),
        _ => {}
    }
}

#[test]
fn plans_are_the_ones_made_before_the_redesign() {
    let golden_path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/plans.jsonl");
    let bless = std::env::var_os("ATS_BLESS_PLANS").is_some();
    let golden: std::collections::HashMap<String, Value> = if bless {
        Default::default()
    } else {
        std::fs::read_to_string(golden_path)
            .expect("the golden plans")
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).expect("a JSON line");
                (
                    v["case"].as_str().expect("a case name").to_string(),
                    v["plan"].clone(),
                )
            })
            .collect()
    };
    let mut blessed = String::new();
    let mut failures = Vec::new();
    for (name, model, sim, vram, policy) in cases() {
        let plan = plan_json(&model, sim, vram, policy);
        if bless {
            let line = serde_json::json!({ "case": name, "plan": plan });
            blessed.push_str(&serde_json::to_string(&line).expect("JSON"));
            blessed.push('\n');
            continue;
        }
        let old = golden
            .get(&name)
            .unwrap_or_else(|| panic!("no golden plan for {name}"));
        let mut diffs = Vec::new();
        covers(old, &plan, "", &mut diffs);
        if !diffs.is_empty() {
            diffs.truncate(8);
            failures.push(format!("{name}:\n  {}", diffs.join("\n  ")));
        }
    }
    if bless {
        std::fs::write(golden_path, blessed).expect("write the golden plans");
        return;
    }
    assert!(
        failures.is_empty(),
        "plans changed:\n{}",
        failures.join("\n")
    );
}
