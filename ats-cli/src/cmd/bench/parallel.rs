//! `ats-cli bench --parallel N,...`: N sequences of a P-token prompt each
//! generating G tokens in one batch, as llama-batched-bench measures them
//! (`-npp P -ntg G -npl N`): the prompts of all N processed in rounds of the
//! session's largest tier (S_PP), then G rounds of one token per sequence
//! (S_TG), both aggregated over the batch.

use anyhow::Result;
use ats_sched::config::Workload;
use ats_sched::session::{KV_BLOCK_TOKENS, Logits, SeqId, SeqInput, Session};
use ats_sched::size::fmt_bytes;
use rand::{Rng, SeedableRng};

use super::{BenchArgs, stats, with_context};
use crate::args::ModelArgs;
use crate::load;
use crate::usage::usage_bail;

/// One batch size's measurements, over the repetitions.
pub struct BatchResult {
    /// Sequences in the batch.
    pub parallel: usize,
    /// Prompt tokens per second over the batch (S_PP), one per repetition.
    pub pp_ts: Vec<f64>,
    /// Generated tokens per second over the batch (S_TG), one per repetition.
    pub tg_ts: Vec<f64>,
}

/// The prompts and generated tokens of one batch (random ids).
pub struct BatchWork<'a> {
    /// One prompt per sequence.
    pub prompts: &'a [Vec<u32>],
    /// The tokens fed back in each of the G rounds (the same for every
    /// sequence: what they are does not change the work).
    pub generated: &'a [u32],
}

/// Measures `work` `reps` times after one untimed warm-up run.
pub fn measure(session: &mut Session, work: &BatchWork<'_>, reps: usize) -> Result<BatchResult> {
    once(session, work)?;
    let mut r = BatchResult {
        parallel: work.prompts.len(),
        pp_ts: Vec::new(),
        tg_ts: Vec::new(),
    };
    for _ in 0..reps {
        let (pp, tg) = once(session, work)?;
        r.pp_ts.push(pp);
        r.tg_ts.push(tg);
    }
    Ok(r)
}

/// One run of the batch: (S_PP, S_TG) in tokens per second.
fn once(session: &mut Session, work: &BatchWork<'_>) -> Result<(f64, f64)> {
    // fresh sequences that do not look up cached prefixes, so every run
    // computes every prompt token
    let seqs: Vec<SeqId> = work
        .prompts
        .iter()
        .map(|_| session.add_sequence())
        .collect();
    let result = run_batch(session, &seqs, work);
    for &s in &seqs {
        session.remove_sequence(s);
    }
    result
}

fn run_batch(session: &mut Session, seqs: &[SeqId], work: &BatchWork<'_>) -> Result<(f64, f64)> {
    let n_prompt: usize = work.prompts.iter().map(Vec::len).sum();
    // the machine's clock: a machine model's virtual time
    let t = session.now();
    prefill_all(session, seqs, work.prompts)?;
    let pp = n_prompt as f64 / (session.now() - t);
    let mut tg = 0.0;
    if !work.generated.is_empty() {
        let t = session.now();
        for &id in work.generated {
            let one = [id];
            let inputs: Vec<SeqInput<'_>> = seqs
                .iter()
                .map(|&seq| SeqInput {
                    seq,
                    tokens: &one,
                    embeds: None,
                    logits: Logits::Last,
                })
                .collect();
            session.run_batch(&inputs)?;
        }
        tg = (seqs.len() * work.generated.len()) as f64 / (session.now() - t);
    }
    Ok((pp, tg))
}

/// Feeds every prompt in rounds of at most the session's largest round,
/// packing chunks of consecutive prompts into each round.
fn prefill_all(session: &mut Session, seqs: &[SeqId], prompts: &[Vec<u32>]) -> Result<()> {
    let budget = session.max_round_tokens().max(1);
    let mut fed = vec![0usize; prompts.len()];
    let mut next = 0;
    while next < prompts.len() {
        let mut inputs = Vec::new();
        let mut room = budget;
        let mut k = next;
        while k < prompts.len() && room > 0 {
            let p = &prompts[k];
            let n = (p.len() - fed[k]).min(room);
            let done = fed[k] + n == p.len();
            inputs.push(SeqInput {
                seq: seqs[k],
                tokens: &p[fed[k]..fed[k] + n],
                embeds: None,
                logits: if done { Logits::Last } else { Logits::None },
            });
            room -= n;
            k += 1;
        }
        session.run_batch(&inputs)?;
        for (i, inp) in inputs.iter().enumerate() {
            fed[next + i] += inp.tokens.len();
        }
        while next < prompts.len() && fed[next] == prompts[next].len() {
            next += 1;
        }
    }
    Ok(())
}

/// `bench --parallel`: every batch size in turn on one session planned for
/// the largest, a table row (or a JSON test) each.
pub fn run(a: &BenchArgs) -> Result<()> {
    if a.parallel.contains(&0) {
        usage_bail!("--parallel takes batch sizes of at least 1");
    }
    if a.n_prompt == 0 {
        usage_bail!("--parallel needs a prompt (-p at least 1): each sequence starts from one");
    }
    if a.n_depth > 0 {
        usage_bail!("-d is not measured with --parallel (each sequence starts empty)");
    }
    let most = a.parallel.iter().copied().max().unwrap_or(1);
    let per_seq = a.n_prompt.saturating_add(a.n_gen);
    // each sequence holds whole KV blocks
    let blocks = per_seq
        .div_ceil(KV_BLOCK_TOKENS)
        .saturating_mul(KV_BLOCK_TOKENS);
    let mut model = with_context(&a.model, per_seq, blocks.saturating_mul(most), "-p plus -n")?;
    model.parallel = most;
    model.workload.get_or_insert(Workload {
        depth: 0,
        prompt: a.n_prompt,
        generate: a.n_gen,
    });
    let mut loaded = load::load(&model, false)?;
    let session = &mut loaded.session;
    let vocab = session.spec().hp.n_vocab as u32;
    let mut rng = rand::rngs::StdRng::seed_from_u64(1234);
    let mut tokens =
        |n: usize| -> Vec<u32> { (0..n).map(|_| rng.random_range(0..vocab)).collect() };
    let prompts: Vec<Vec<u32>> = (0..most).map(|_| tokens(a.n_prompt)).collect();
    let generated = tokens(a.n_gen);
    let mut results = Vec::new();
    for &n in &a.parallel {
        let work = BatchWork {
            prompts: &prompts[..n],
            generated: &generated,
        };
        results.push(measure(session, &work, a.reps)?);
    }
    let row = Row::of(&model, session);
    if a.json {
        print_json(a, &model, session, &row, &results)
    } else {
        print_table(a, session, &row, &results);
        Ok(())
    }
}

/// What every row of the table starts with.
struct Row {
    file: String,
    size: String,
    threads: usize,
    devices: Vec<String>,
    policy: &'static str,
}

impl Row {
    fn of(model: &ModelArgs, session: &Session) -> Row {
        Row {
            file: model
                .model
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default(),
            size: fmt_bytes(session.spec().gguf.file_len()),
            threads: session.run_config().threads,
            devices: session
                .machine()
                .iter()
                .map(|(_, d)| d.info().name.clone())
                .collect(),
            policy: model.policy.name(),
        }
    }
}

/// The plan a generation round of `n` sequences runs: its tier and shape.
fn gen_plan(session: &Session, n: usize) -> (usize, &'static str) {
    session
        .plan_set()
        .tier_for_round(n)
        .map_or((0, "none"), |t| (t.tier, t.kind.name()))
}

fn print_table(a: &BenchArgs, session: &Session, row: &Row, results: &[BatchResult]) {
    println!(
        "| model | size | threads | devices | policy | PP | TG | B | plan (TG) | S_PP t/s | S_TG t/s |"
    );
    println!("| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | --- | ---: | ---: |");
    for r in results {
        let (pp, pp_sd) = stats(&r.pp_ts);
        let (tg, tg_sd) = stats(&r.tg_ts);
        let (tier, kind) = gen_plan(session, r.parallel);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | tier {tier} {kind} | {pp:.2} ± {pp_sd:.2} | {tg:.2} ± {tg_sd:.2} |",
            row.file,
            row.size,
            row.threads,
            row.devices.join("+"),
            row.policy,
            a.n_prompt,
            a.n_gen,
            r.parallel,
        );
    }
}

fn print_json(
    a: &BenchArgs,
    model: &ModelArgs,
    session: &Session,
    row: &Row,
    results: &[BatchResult],
) -> Result<()> {
    let tests: Vec<serde_json::Value> = results
        .iter()
        .map(|r| {
            let (pp, pp_sd) = stats(&r.pp_ts);
            let (tg, tg_sd) = stats(&r.tg_ts);
            let (tier, kind) = gen_plan(session, r.parallel);
            serde_json::json!({
                "test": format!("pp{}+tg{} x{}", a.n_prompt, a.n_gen, r.parallel),
                "parallel": r.parallel,
                "n_prompt": a.n_prompt,
                "n_gen": a.n_gen,
                "pp_ts": pp,
                "pp_stddev_ts": pp_sd,
                "pp_samples_ts": r.pp_ts,
                "tg_ts": tg,
                "tg_stddev_ts": tg_sd,
                "tg_samples_ts": r.tg_ts,
                "tg_tier": tier,
                "tg_plan": kind,
            })
        })
        .collect();
    let j = serde_json::json!({
        "model": model.model.display().to_string(),
        "model_bytes": session.spec().gguf.file_len(),
        "threads": row.threads,
        "devices": row.devices,
        "policy": row.policy,
        "vram_budget": model.devices.vram,
        "n_ctx": session.n_ctx(),
        "repetitions": a.reps,
        "tests": tests,
        "replan_stats": session.planner().replan_stats(),
        "memory": crate::report::memory_json(session),
    });
    println!("{}", serde_json::to_string_pretty(&j)?);
    Ok(())
}
