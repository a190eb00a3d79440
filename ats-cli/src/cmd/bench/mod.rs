//! `ats-cli bench`: prompt processing and generation speed with spread, like
//! llama-bench; with `--parallel`, of batches of sequences, like
//! llama-batched-bench (`parallel.rs`).

mod parallel;

use anyhow::{Context, Result};
use ats_sched::config::Workload;
use clap::Args;
use rand::{Rng, SeedableRng};

use crate::args::ModelArgs;
use crate::load;
use crate::usage::usage_bail;

/// Measure prompt-processing and generation tokens/s.
#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Prompt tokens per pp test (0: skip).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
    n_prompt: usize,
    /// Generated tokens per tg test (0: skip).
    #[arg(short = 'n', long = "n-gen", default_value_t = 128)]
    n_gen: usize,
    /// Tokens already in the context before each test (llama-bench's
    /// `-d`): prefilled, untimed, so the test runs at that depth.
    #[arg(short = 'd', long = "n-depth", default_value_t = 0)]
    n_depth: usize,
    /// Repetitions.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    reps: usize,
    /// One JSON document on standard output.
    #[arg(long = "json")]
    json: bool,
    /// Batches of this many sequences, each with a -p token prompt and -n
    /// generated tokens (a list: 1,4,8,16), measured as llama-batched-bench
    /// does: prompt and generation tokens/s aggregated over the batch.
    #[arg(
        long = "parallel",
        short = 'P',
        value_name = "N,...",
        value_delimiter = ','
    )]
    parallel: Vec<usize>,
}

/// `model` with the context a test needs: `per_seq` tokens in one
/// sequence (`what` names the flags that make them), `total` over all.
/// Past the model's own context it is a choice the user makes with -c,
/// not one made for them (a -c too small for the test is the engine's
/// error, as it runs).
fn with_context(model: &ModelArgs, per_seq: usize, total: usize, what: &str) -> Result<ModelArgs> {
    let mut model = model.clone();
    if total > ats_core::round::MAX_CONTEXT {
        usage_bail!(
            "{what} is {total} tokens in all, beyond the longest context ({})",
            ats_core::round::MAX_CONTEXT
        );
    }
    if model.ctx.is_none() {
        let trained = ats_core::spec::ModelSpec::open(&model.model)
            .with_context(|| format!("cannot load {}", model.model.display()))?
            .hp
            .n_ctx_train;
        if per_seq > trained {
            usage_bail!(
                "{what} is {per_seq} tokens, more than the model's context of {trained}: give -c {per_seq} to run past it"
            );
        }
        model.ctx = Some(total);
    }
    Ok(model)
}

/// Mean and sample standard deviation.
fn stats(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

pub fn run(a: BenchArgs) -> Result<()> {
    if a.reps == 0 {
        usage_bail!("-r must be at least 1");
    }
    if !a.parallel.is_empty() {
        return parallel::run(&a);
    }
    if a.n_prompt == 0 && a.n_gen == 0 {
        usage_bail!("nothing to measure: -p and -n are both 0");
    }
    let need = a.n_depth.saturating_add(a.n_prompt.max(a.n_gen).max(1));
    let mut model = with_context(&a.model, need, need, "-d plus -p or -n")?;
    model.workload.get_or_insert(Workload {
        depth: a.n_depth,
        prompt: a.n_prompt,
        generate: a.n_gen,
    });
    let mut loaded = load::load(&model, false)?;
    let session = &mut loaded.session;
    let vocab = session.spec().hp.n_vocab as u32;
    let mut rng = rand::rngs::StdRng::seed_from_u64(1234);
    let mut tokens =
        |n: usize| -> Vec<u32> { (0..n).map(|_| rng.random_range(0..vocab)).collect() };
    let depth = tokens(a.n_depth);
    // an empty context, or one holding the depth tokens (untimed)
    let start = |session: &mut ats_sched::session::Session| -> Result<()> {
        session.reset();
        if !depth.is_empty() {
            session.prefill(&depth, false)?;
        }
        Ok(())
    };
    let at = if a.n_depth > 0 {
        format!(" @ d{}", a.n_depth)
    } else {
        String::new()
    };
    let mut results = Vec::new();
    if a.n_prompt > 0 {
        // warm-up, then timed repetitions
        let p = tokens(a.n_prompt);
        start(session)?;
        session.prefill(&p, false)?;
        let mut tps = Vec::new();
        for _ in 0..a.reps {
            start(session)?;
            // the machine's clock: a machine model's virtual time
            let t = session.now();
            session.prefill(&p, false)?;
            tps.push(a.n_prompt as f64 / (session.now() - t));
        }
        results.push((format!("pp{}{at}", a.n_prompt), a.n_prompt, tps));
    }
    if a.n_gen > 0 {
        let g = tokens(a.n_gen);
        // warm-up, through the decode audition so that the timed runs use its winner
        start(session)?;
        session.decode(g[0])?;
        for &id in g.iter().skip(1) {
            if !session.planner().auditioning() {
                break;
            }
            session.decode(id)?;
        }
        let mut tps = Vec::new();
        // only the timed rounds: not the warm-up and audition above
        session.reset_decode_breakdown();
        for _ in 0..a.reps {
            start(session)?;
            let t = session.now();
            for &id in &g {
                session.decode(id)?;
            }
            tps.push(a.n_gen as f64 / (session.now() - t));
        }
        results.push((format!("tg{}{at}", a.n_gen), a.n_gen, tps));
    }
    let threads = session.run_config().threads;
    let devices: Vec<String> = session
        .machine()
        .iter()
        .map(|(_, d)| d.info().name.clone())
        .collect();
    if a.json {
        let tests: Vec<serde_json::Value> = results
            .iter()
            .map(|(name, n, tps)| {
                let (m, s) = stats(tps);
                serde_json::json!({"test": name, "n_tokens": n, "avg_ts": m, "stddev_ts": s, "samples_ts": tps})
            })
            .collect();
        let j = serde_json::json!({
            "model": model.model.display().to_string(),
            "model_bytes": session.spec().gguf.file_len(),
            "threads": threads,
            "devices": devices,
            "policy": model.policy.name(),
            "simulated": crate::report::simulated(),
            "vram_budget": model.devices.vram,
            "repetitions": a.reps,
            "n_depth": a.n_depth,
            "tests": tests,
            "decode_plan": session.plan_set().tiers.first().map(|t| t.kind),
            "audition": session.planner().last_audition(),
            "replans": session.planner().replan_stats().replans,
            "relayouts": session.planner().replan_stats().relayouts,
            "replan_stats": session.planner().replan_stats(),
            "memory": crate::report::memory_json(session),
            "decode_breakdown": (a.n_gen > 0).then(|| session.decode_breakdown().report(session.machine())),
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        if let Some(m) = crate::report::simulated() {
            println!("SIMULATED: tokens/s in the virtual time of the machine model {m}");
            println!();
        }
        println!("| model | size | threads | devices | policy | test | t/s |");
        println!("| --- | ---: | ---: | --- | --- | --- | ---: |");
        for (name, _, tps) in &results {
            let (m, s) = stats(tps);
            println!(
                "| {} | {} | {threads} | {} | {} | {name} | {m:.2} ± {s:.2} |",
                model
                    .model
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                ats_sched::size::fmt_bytes(session.spec().gguf.file_len()),
                devices.join("+"),
                model.policy.name(),
            );
        }
        if !crate::logging::quiet() {
            crate::report::print_plan_changes(session);
            if a.n_gen > 0 {
                eprintln!(
                    "ats: {}",
                    session.decode_breakdown().report(session.machine())
                );
            }
        }
    }
    Ok(())
}
