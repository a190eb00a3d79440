//! Many sequences in one session never see each other: random prompts run
//! together (different lengths, prompt chunks of some in the same rounds as
//! decode tokens of others, some starting late, some finishing early) give
//! each sequence the logits it gets alone, on the CPU and on a simulated GPU
//! under a tight budget with every policy; the GPU's ledger stays within the
//! budget as sequences come and go; a common prompt prefix is stored once.

use std::sync::Arc;

use ats_core::device::{Device, KvType};
use ats_core::machine::Machine;
use ats_core::spec::ModelSpec;
use ats_sched::config::Policy;
use ats_sched::session::{Logits, SeqId, SeqInput, Session};
use ats_tests::{XorShift, cpu, engine_on, fixtures, host_only, sim_gpu, with_gpu};

/// One sequence's part of the test: its prompt, the tokens fed after it
/// (teacher-forced, so the logits compare exactly), the round it starts in.
#[derive(Clone, Debug)]
struct Script {
    prompt: Vec<u32>,
    cont: Vec<u32>,
    start: usize,
}

fn scripts(rng: &mut XorShift, n: usize, vocab: u32) -> Vec<Script> {
    (0..n)
        .map(|i| {
            let len = 3 + (rng.next_u64() % 38) as usize;
            let cont = (rng.next_u64() % 9) as usize;
            let tok = |r: &mut XorShift| (r.next_u64() % u64::from(vocab)) as u32;
            Script {
                prompt: (0..len).map(|_| tok(rng)).collect(),
                cont: (0..cont).map(|_| tok(rng)).collect(),
                start: if i % 3 == 2 { 1 + i / 3 } else { 0 },
            }
        })
        .collect()
}

/// What a script gets alone: the logits after its prompt, then after each
/// fed token.
fn alone(e: &mut Session, s: &Script) -> Vec<Vec<f32>> {
    e.reset();
    let mut out = vec![e.prefill(&s.prompt, false).unwrap()];
    for &t in &s.cont {
        out.push(e.decode(t).unwrap());
    }
    out
}

/// A running script: its sequence and what it has fed and got.
struct Live {
    seq: SeqId,
    fed: usize,
    got: Vec<Vec<f32>>,
}

/// Runs the scripts together in rounds of at most `budget` new tokens
/// (decode tokens first, then prompt chunks of random sizes); `check` sees
/// the session after every round. Returns each script's logits.
fn together(
    e: &mut Session,
    scripts: &[Script],
    rng: &mut XorShift,
    check: &mut dyn FnMut(&Session),
) -> Vec<Vec<Vec<f32>>> {
    let mut live: Vec<Option<Live>> = scripts.iter().map(|_| None).collect();
    let mut done: Vec<Option<Vec<Vec<f32>>>> = scripts.iter().map(|_| None).collect();
    let budget = e.max_round_tokens().min(24);
    for round in 0.. {
        for (i, s) in scripts.iter().enumerate() {
            if s.start == round {
                live[i] = Some(Live {
                    seq: e.add_sequence(),
                    fed: 0,
                    got: Vec::new(),
                });
            }
        }
        if done.iter().all(Option::is_some) {
            break;
        }
        // (script, tokens, whether the logits are wanted)
        let mut parts: Vec<(usize, Vec<u32>, bool)> = Vec::new();
        let mut left = budget;
        for (i, l) in live.iter().enumerate() {
            let (Some(l), s) = (l, &scripts[i]) else {
                continue;
            };
            if l.fed >= s.prompt.len() {
                let k = l.fed - s.prompt.len();
                parts.push((i, vec![s.cont[k]], true));
                left -= 1;
            }
        }
        for (i, l) in live.iter().enumerate() {
            let (Some(l), s) = (l, &scripts[i]) else {
                continue;
            };
            let rest = s.prompt.len().saturating_sub(l.fed);
            if rest == 0 || left == 0 {
                continue;
            }
            let n = (1 + (rng.next_u64() as usize % rest)).min(left);
            left -= n;
            parts.push((
                i,
                s.prompt[l.fed..l.fed + n].to_vec(),
                l.fed + n == s.prompt.len(),
            ));
        }
        if parts.is_empty() {
            continue; // only late starters left
        }
        let inputs: Vec<SeqInput<'_>> = parts
            .iter()
            .map(|(i, toks, want)| SeqInput {
                seq: live[*i].as_ref().unwrap().seq,
                tokens: toks,
                embeds: None,
                logits: if *want { Logits::Last } else { Logits::None },
            })
            .collect();
        let out = e.run_batch(&inputs).unwrap();
        check(e);
        for ((i, toks, want), logits) in parts.iter().zip(out) {
            let l = live[*i].as_mut().unwrap();
            l.fed += toks.len();
            if *want {
                l.got.push(logits);
            }
            let s = &scripts[*i];
            if l.fed == s.prompt.len() + s.cont.len() {
                let l = live[*i].take().unwrap();
                e.remove_sequence(l.seq);
                done[*i] = Some(l.got);
            }
        }
    }
    done.into_iter().map(Option::unwrap).collect()
}

fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-6);
    a.iter()
        .zip(b)
        .fold(0f32, |m, (x, y)| m.max((x - y).abs() / scale))
}

fn compare(what: &str, got: &[Vec<Vec<f32>>], want: &[Vec<Vec<f32>>]) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{what}: sequence {i} rounds");
        for (k, (a, b)) in g.iter().zip(w).enumerate() {
            let d = max_rel_diff(a, b);
            assert!(
                d < 1e-4,
                "{what}: sequence {i} step {k}: logits differ by {d}"
            );
        }
    }
}

/// `tokens` of `seq`, wanting the last logits.
fn last_logits(seq: SeqId, tokens: &[u32]) -> SeqInput<'_> {
    SeqInput {
        seq,
        tokens,
        embeds: None,
        logits: Logits::Last,
    }
}

fn open(rel: &str) -> Arc<ModelSpec> {
    Arc::new(ModelSpec::open(fixtures().join(rel)).unwrap())
}

#[test]
fn sequences_in_one_round_get_the_logits_they_get_alone_on_the_cpu() {
    for model in [
        "llama/llama-f32.gguf",
        "qwen3_moe/qwen3_moe-f32.gguf",
        "qwen2_vl/qwen2_vl-f32.gguf",
    ] {
        let spec = open(model);
        let vocab = spec.hp.n_vocab as u32;
        let mut rng = XorShift(0x5eed_0001);
        let sc = scripts(&mut rng, 7, vocab);
        let mut solo = engine_on(
            spec.clone(),
            host_only(cpu(2)),
            512,
            KvType::F32,
            Policy::Ats,
            false,
        );
        let want: Vec<_> = sc.iter().map(|s| alone(&mut solo, s)).collect();
        let mut e = engine_on(
            spec,
            host_only(cpu(2)),
            512,
            KvType::F32,
            Policy::Ats,
            false,
        );
        let got = together(&mut e, &sc, &mut rng, &mut |_| {});
        compare(model, &got, &want);
        let st = e.pool_stats();
        assert_eq!(st.held, 0, "{model}: every sequence gave its blocks back");
        assert_eq!(e.sequences(), 1, "only the default sequence is left");
    }
}

#[test]
fn sequences_stay_apart_and_within_the_budget_on_a_simulated_gpu_for_every_policy() {
    let spec = open("llama/llama-f32.gguf");
    let vocab = spec.hp.n_vocab as u32;
    let mut rng = XorShift(0x5eed_0002);
    let sc = scripts(&mut rng, 6, vocab);
    let mut solo = engine_on(
        spec.clone(),
        host_only(cpu(2)),
        256,
        KvType::F16,
        Policy::Ats,
        false,
    );
    let want: Vec<_> = sc.iter().map(|s| alone(&mut solo, s)).collect();
    let budget = spec.gguf.file_len() / 2;
    for policy in [Policy::Ats, Policy::Tiers, Policy::Static, Policy::Layers] {
        let gpu: Arc<dyn Device> = sim_gpu(budget, 1);
        let machine: Machine = with_gpu(cpu(2), gpu.clone());
        let mut e = engine_on(spec.clone(), machine, 256, KvType::F16, policy, false);
        let mut over = Vec::new();
        let got = together(&mut e, &sc, &mut rng, &mut |s| {
            let l = s.machine().gpu().unwrap().ledger();
            if l.used() > budget {
                over.push(l.used());
            }
        });
        compare(&format!("{policy:?}"), &got, &want);
        assert!(
            over.is_empty(),
            "{policy:?}: over the budget {budget}: {over:?}"
        );
        let peak = gpu.ledger().peak();
        assert!(peak <= budget, "{policy:?}: peak {peak} > budget {budget}");
        assert!(
            peak <= e.planner().peak_planned().max(1),
            "{policy:?}: peak over the plan"
        );
    }
}

#[test]
fn a_common_prompt_prefix_is_computed_once_and_read_by_every_sequence() {
    let spec = open("llama/llama-f32.gguf");
    let mut e = engine_on(
        spec.clone(),
        host_only(cpu(2)),
        512,
        KvType::F32,
        Policy::Ats,
        false,
    );
    let mut solo = engine_on(
        spec,
        host_only(cpu(2)),
        512,
        KvType::F32,
        Policy::Ats,
        false,
    );
    let system: Vec<u32> = (0..100).map(|i| (i * 7 + 3) % 500).collect();
    let bt = e.run_config().kv_block_tokens;
    // the first sequence computes the prefix
    let first: Vec<u32> = system.iter().copied().chain([11, 12, 13]).collect();
    let (a, shared) = e.add_sequence_for(&first);
    assert_eq!(shared, 0);
    e.run_batch(&[last_logits(a, &first)]).unwrap();
    // the next ones start after its whole blocks and compute only their own tokens
    for tail in [[21u32, 22, 23], [31, 32, 33]] {
        let p: Vec<u32> = system.iter().copied().chain(tail).collect();
        let held = e.pool_stats().held;
        let (b, shared) = e.add_sequence_for(&p);
        assert_eq!(
            shared,
            system.len() / bt * bt,
            "whole blocks of the common prefix"
        );
        let got = e
            .run_batch(&[last_logits(b, &p[shared..])])
            .unwrap()
            .remove(0);
        solo.reset();
        let want = solo.prefill(&p, false).unwrap();
        assert!(max_rel_diff(&got, &want) < 1e-4);
        assert_eq!(
            e.pool_stats().held,
            held + e.seq_tokens(b).unwrap().div_ceil(bt) - shared / bt,
            "only the new tokens' blocks are added"
        );
    }
    assert!(e.pool_stats().reused_tokens >= 2 * (system.len() / bt * bt) as u64);
}
