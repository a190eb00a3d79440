//! The scheduler: requests answered together give each the answer it gets
//! alone (greedy), decodes are not starved by a long prompt, a full KV pool
//! preempts the newest request, which later resumes with the answer it
//! gets alone (never an over-full pool), a
//! cancelled request frees its blocks, and grammars and log-probabilities
//! are per request.

use std::collections::HashMap;
use std::sync::Arc;

use ats_core::SamplerConfig;
use ats_core::device::KvType;
use ats_core::grammar::{GrammarSpec, Grammars};
use ats_core::round::{EmbedOverride, Positions};
use ats_core::sampling::TokenLogprob;
use ats_core::spec::ModelSpec;
use ats_sched::config::Policy;
use ats_sched::scheduler::{Event, Request, RequestId, Scheduler, SchedulerConfig};
use ats_sched::session::{GenParams, Generation, Session, StopReason};
use ats_tests::{cpu, engine_on, fixtures, host_only};

fn session(n_ctx: usize) -> Session {
    let spec = Arc::new(ModelSpec::open(fixtures().join("qwen2/qwen2-f32.gguf")).unwrap());
    engine_on(
        spec,
        host_only(cpu(2)),
        n_ctx,
        KvType::F32,
        Policy::Ats,
        false,
    )
}

fn greedy(max_tokens: usize) -> GenParams {
    GenParams {
        max_tokens,
        sampler: SamplerConfig::greedy(),
        ignore_eos: true,
        ..GenParams::default()
    }
}

/// Prompts of different lengths from the fixture's tokenizer.
fn prompts(s: &Session) -> Vec<Vec<u32>> {
    let tok = s.tokenizer().unwrap();
    [
        "Permission is hereby granted, free of charge, to any person",
        "The GNU General Public License is a free, copyleft license",
        "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND",
        "Everyone is permitted to copy and distribute verbatim copies of this license document, but changing it is not allowed.",
        "Licensed under the Apache License",
    ]
    .iter()
    .map(|p| tok.encode(p, true, true).unwrap())
    .collect()
}

/// What draining a scheduler gave: each request's text from its events,
/// its final generation (or error), and the most requests run at once.
struct Drained {
    text: HashMap<RequestId, String>,
    logprobs: HashMap<RequestId, Vec<TokenLogprob>>,
    done: HashMap<RequestId, Result<Generation, String>>,
    most: usize,
}

/// Runs the scheduler until idle; returns each request's text (from its
/// events) and final generation, and the most requests that ran at once.
fn drain(sched: &mut Scheduler, s: &mut Session) -> Drained {
    let (mut text, mut done) = (HashMap::new(), HashMap::new());
    let mut logprobs: HashMap<RequestId, Vec<TokenLogprob>> = HashMap::new();
    let mut most = 0;
    let mut steps = 0;
    while !sched.is_idle() {
        steps += 1;
        assert!(steps < 10_000, "the scheduler makes progress");
        for ev in sched.step(s) {
            match ev {
                Event::Text { id, text: t } => {
                    text.entry(id).or_insert_with(String::new).push_str(&t)
                }
                Event::Logprobs { id, logprobs: l } => logprobs.entry(id).or_default().extend(l),
                Event::Done { id, generation } => {
                    done.insert(id, Ok(generation));
                }
                Event::Failed { id, error } => {
                    done.insert(id, Err(error));
                }
            }
        }
        most = most.max(sched.running());
    }
    Drained {
        text,
        logprobs,
        done,
        most,
    }
}

#[test]
fn requests_answered_together_match_their_answers_alone() {
    let mut solo = session(512);
    let ps = prompts(&solo);
    let want: Vec<Generation> = ps
        .iter()
        .enumerate()
        .map(|(i, p)| {
            solo.reset();
            solo.generate(p, &greedy(4 + 3 * i), &mut |_| true).unwrap()
        })
        .collect();
    let mut s = session(512);
    let mut sched = Scheduler::new(SchedulerConfig {
        max_seqs: 3,
        round_tokens: Some(16),
    });
    let ids: Vec<RequestId> = ps
        .iter()
        .enumerate()
        .map(|(i, p)| sched.submit(Request::text(p.clone(), greedy(4 + 3 * i))))
        .collect();
    let Drained {
        text, done, most, ..
    } = drain(&mut sched, &mut s);
    assert_eq!(most, 3, "three at once, the rest waited");
    for (i, id) in ids.iter().enumerate() {
        let g = done[id].as_ref().unwrap();
        assert_eq!(g.tokens, want[i].tokens, "request {i}");
        assert_eq!(g.text, want[i].text, "request {i}");
        assert_eq!(
            text.get(id).cloned().unwrap_or_default(),
            g.text,
            "events carry the text"
        );
        assert_eq!(g.stop, StopReason::MaxTokens);
        assert_eq!(g.timings.gen_tokens, 4 + 3 * i);
        assert!(g.timings.ttft_ms > 0.0 && g.timings.prompt_ms > 0.0);
    }
    assert_eq!(
        s.pool_stats().held,
        0,
        "every finished request gave its blocks back"
    );
}

#[test]
fn a_second_request_with_the_same_prompt_reads_the_cached_prefix() {
    let mut s = session(512);
    let p: Vec<u32> = prompts(&s).concat();
    assert!(
        p.len() > 2 * s.run_config().kv_block_tokens,
        "premise: a prompt of several blocks"
    );
    let mut sched = Scheduler::new(SchedulerConfig::default());
    let a = sched.submit(Request::text(p.clone(), greedy(3)));
    let first = drain(&mut sched, &mut s).done;
    let b = sched.submit(Request::text(p.clone(), greedy(3)));
    let second = drain(&mut sched, &mut s).done;
    let (ga, gb) = (first[&a].as_ref().unwrap(), second[&b].as_ref().unwrap());
    assert_eq!(ga.timings.cached_tokens, 0);
    let bt = s.run_config().kv_block_tokens;
    assert_eq!(gb.timings.cached_tokens, (p.len() - 1) / bt * bt);
    assert_eq!(
        ga.tokens, gb.tokens,
        "the same answer from the cached prefix"
    );
}

#[test]
fn requests_with_a_common_prefix_compute_it_once() {
    let mut s = session(1024);
    let bt = s.run_config().kv_block_tokens;
    let ps = prompts(&s);
    // a shared "system prompt" of several blocks, then different questions
    let system: Vec<u32> = ps.concat();
    let ask = |tail: &[u32]| [system.as_slice(), tail].concat();
    let mut sched = Scheduler::new(SchedulerConfig {
        max_seqs: 4,
        round_tokens: Some(64),
    });
    let a = sched.submit(Request::text(ask(&ps[0]), greedy(3)));
    let b = sched.submit(Request::text(ask(&ps[1]), greedy(3)));
    let c = sched.submit(Request::text(ask(&ps[0]), greedy(3)));
    let done = drain(&mut sched, &mut s).done;
    let g = |id| done[&id].as_ref().unwrap().clone();
    let (ga, gb, gc) = (g(a), g(b), g(c));
    assert_eq!(ga.timings.cached_tokens, 0);
    // b and c waited for a's prefix instead of computing it again
    assert_eq!(gb.timings.cached_tokens, system.len() / bt * bt);
    assert_eq!(gc.timings.cached_tokens, (ask(&ps[0]).len() - 1) / bt * bt);
    assert_eq!(gc.tokens, ga.tokens, "the same prompt, the same answer");
    // and each answer is the one it gets alone
    let mut solo = session(1024);
    for (req, got) in [(ask(&ps[1]), &gb), (ask(&ps[0]), &gc)] {
        solo.reset();
        let want = solo.generate(&req, &greedy(3), &mut |_| true).unwrap();
        assert_eq!(got.tokens, want.tokens);
    }
}

/// A request of `prompt` whose rows `rows` are the image `image` (one row
/// of the model's width per image token), at M-RoPE text positions.
fn image_request(prompt: &[u32], rows: std::ops::Range<usize>, image: &[f32]) -> Request {
    let embeds = EmbedOverride {
        rows: rows.collect(),
        data: image.to_vec(),
    };
    let positions = Positions::mrope_text(0, prompt.len());
    Request {
        prompt: prompt.to_vec(),
        embeds: Some((embeds, positions, prompt.len() as i64)),
        params: greedy(3),
    }
}

#[test]
fn an_image_prompt_reuses_the_rows_of_the_same_image_only() {
    let spec = Arc::new(ModelSpec::open(fixtures().join("qwen2_vl/qwen2_vl-f32.gguf")).unwrap());
    let n_embd = spec.hp.n_embd;
    let mut s = engine_on(
        spec,
        host_only(cpu(2)),
        512,
        KvType::F32,
        Policy::Ats,
        false,
    );
    let bt = s.run_config().kv_block_tokens;
    let p: Vec<u32> = prompts(&s).concat();
    // an image of 40 rows starting past the first block
    let rows = bt + 3..bt + 43;
    assert!(
        p.len() > rows.end + 2 * bt,
        "premise: blocks after the image"
    );
    let image = |seed: u32| -> Vec<f32> {
        (0..rows.len() * n_embd)
            .map(|i| ((i as u32).wrapping_mul(2654435761) ^ seed) as f32 / u32::MAX as f32 - 0.5)
            .collect()
    };
    let (x, y) = (image(1), image(2));
    let mut sched = Scheduler::new(SchedulerConfig::default());
    let mut run = |req: Request| {
        let id = sched.submit(req);
        drain(&mut sched, &mut s).done.remove(&id).unwrap().unwrap()
    };
    let first = run(image_request(&p, rows.clone(), &x));
    let again = run(image_request(&p, rows.clone(), &x));
    let other = run(image_request(&p, rows.clone(), &y));
    assert_eq!(first.timings.cached_tokens, 0);
    assert_eq!(again.timings.cached_tokens, (p.len() - 1) / bt * bt);
    assert_eq!(
        again.tokens, first.tokens,
        "the same answer from the cached rows"
    );
    // another image: only the blocks wholly before it are shared
    assert_eq!(other.timings.cached_tokens, rows.start / bt * bt);
}

#[test]
fn decodes_go_on_while_a_long_prompt_is_fed_in_chunks() {
    let mut s = session(512);
    let ps = prompts(&s);
    let mut sched = Scheduler::new(SchedulerConfig {
        max_seqs: 2,
        round_tokens: Some(4),
    });
    let short = sched.submit(Request::text(ps[4].clone(), greedy(12)));
    // the short one is decoding before the long one arrives
    while sched.running() == 0 || s.seq_tokens(1).is_none_or(|t| t < ps[4].len()) {
        sched.step(&mut s);
    }
    let long = sched.submit(Request::text(ps[3].clone(), greedy(2)));
    let mut short_tokens_during_long_prompt = 0;
    let mut long_started = false;
    let mut done = HashMap::new();
    while !sched.is_idle() {
        for ev in sched.step(&mut s) {
            match ev {
                Event::Text { id, .. } if id == short && long_started => {
                    short_tokens_during_long_prompt += 1
                }
                Event::Done { id, generation } => {
                    done.insert(id, generation);
                }
                Event::Failed { error, .. } => panic!("{error}"),
                _ => {}
            }
        }
        long_started |= sched.running() == 2;
    }
    assert!(
        short_tokens_during_long_prompt >= 5,
        "the short answer kept coming while the long prompt was fed 3 tokens a round ({short_tokens_during_long_prompt})"
    );
    assert_eq!(done[&long].tokens.len(), 2);
}

/// Two prompts of a block each (of 32 tokens), with no common prefix.
fn two_prompts() -> [Vec<u32>; 2] {
    [
        (0..24).map(|i| (i * 11 + 1) % 500).collect(),
        (0..20).map(|i| (i * 7 + 3) % 500).collect(),
    ]
}

#[test]
fn a_full_kv_pool_preempts_the_newest_request_and_resumes_it() {
    // 3 blocks of cache for two answers that each grow into a second block
    let mut s = session(96);
    assert_eq!(s.run_config().kv_block_tokens, 32, "premise: blocks of 32");
    let p = two_prompts();
    let mut solo = session(512);
    let want: Vec<Generation> = p
        .iter()
        .map(|p| {
            solo.reset();
            solo.generate(p, &greedy(40), &mut |_| true).unwrap()
        })
        .collect();
    let mut sched = Scheduler::new(SchedulerConfig {
        max_seqs: 2,
        round_tokens: None,
    });
    let ids: Vec<RequestId> = p
        .iter()
        .map(|p| sched.submit(Request::text(p.clone(), greedy(40))))
        .collect();
    let Drained {
        text, done, most, ..
    } = drain(&mut sched, &mut s);
    assert_eq!(most, 2, "both ran at once before the pool filled");
    assert!(
        sched.preemptions() >= 1,
        "the pool cannot hold both answers"
    );
    for (i, id) in ids.iter().enumerate() {
        let g = done[id].as_ref().unwrap();
        assert_eq!(g.tokens, want[i].tokens, "request {i}: its answer alone");
        assert_eq!(
            text.get(id).cloned().unwrap_or_default(),
            g.text,
            "request {i}: the events carry the text once"
        );
        assert_eq!(g.timings.gen_tokens, 40);
        assert_eq!(g.timings.prompt_tokens, p[i].len());
        assert_eq!(
            g.timings.decode_rounds, 39,
            "request {i}: a decode round a token after the first, preempted or not"
        );
    }
    assert_eq!(s.pool_stats().held, 0);
    assert!(s.pool_stats().blocks * s.run_config().kv_block_tokens >= 96);
}

#[test]
fn a_preempted_request_stopped_while_it_waits_ends_with_its_answer_so_far() {
    let mut s = session(96);
    let mut sched = Scheduler::new(SchedulerConfig {
        max_seqs: 2,
        round_tokens: None,
    });
    let ids: Vec<RequestId> = two_prompts()
        .into_iter()
        .map(|p| sched.submit(Request::text(p, greedy(40))))
        .collect();
    let mut text = String::new();
    let collect = |evs: Vec<Event>, text: &mut String| {
        let mut done = None;
        for ev in evs {
            match ev {
                Event::Text { id, text: t } if id == ids[1] => text.push_str(&t),
                Event::Done { id, generation } if id == ids[1] => done = Some(generation),
                Event::Failed { error, .. } => panic!("{error}"),
                _ => {}
            }
        }
        done
    };
    for _ in 0..200 {
        if sched.preemptions() > 0 {
            break;
        }
        assert!(collect(sched.step(&mut s), &mut text).is_none());
    }
    assert_eq!((sched.preemptions(), sched.waiting()), (1, 1));
    let g = collect(sched.stop(ids[1], &mut s), &mut text).expect("its answer");
    assert_eq!(g.stop, StopReason::Cancelled);
    assert!(!g.tokens.is_empty(), "it had answered before it gave way");
    assert_eq!(g.text, text, "the events carry the text once");
    assert_eq!(sched.waiting(), 0);
    let done = drain(&mut sched, &mut s).done;
    assert_eq!(done[&ids[0]].as_ref().unwrap().tokens.len(), 40);
    assert_eq!(s.pool_stats().held, 0);
}

#[test]
fn a_request_alone_stops_at_the_context_and_is_never_preempted() {
    // the pool is the context: a request alone fills both at once
    let mut s = session(64);
    let p: Vec<u32> = (0..60).map(|i| (i * 11 + 1) % 500).collect();
    let mut sched = Scheduler::new(SchedulerConfig::default());
    let id = sched.submit(Request::text(p, greedy(10)));
    let done = drain(&mut sched, &mut s).done;
    let g = done[&id].as_ref().unwrap();
    assert_eq!(g.stop, StopReason::ContextFull);
    assert_eq!(sched.preemptions(), 0, "nothing to give way to");
    assert_eq!(s.pool_stats().held, 0);
}

#[test]
fn a_preempted_image_request_resumes_at_its_own_positions() {
    let spec = Arc::new(ModelSpec::open(fixtures().join("qwen2_vl/qwen2_vl-f32.gguf")).unwrap());
    let n_embd = spec.hp.n_embd;
    let on = |n_ctx: usize| {
        engine_on(
            spec.clone(),
            host_only(cpu(2)),
            n_ctx,
            KvType::F32,
            Policy::Ats,
            false,
        )
    };
    let mut s = on(128);
    assert_eq!(s.run_config().kv_block_tokens, 32, "premise: blocks of 32");
    let ps = prompts(&s);
    // a 4 x 5 image after 3 tokens, at M-RoPE grid positions: the text
    // after it (and the answer) sits 12 positions below its token index
    let request = |text: &[u32], seed: u32| {
        let p = [&text[..3], &[0; 20][..], &text[3..]].concat();
        let image: Vec<f32> = (0..20 * n_embd)
            .map(|i| ((i as u32).wrapping_mul(2654435761) ^ seed) as f32 / u32::MAX as f32 - 0.5)
            .collect();
        let mut pos = Positions::mrope_text(0, 3);
        for r in 0..20 {
            pos.data.extend([3, 3 + r / 5, 3 + r % 5, 0]);
        }
        let after = 8 + (p.len() - 23);
        pos.data.extend(Positions::mrope_text(8, p.len() - 23).data);
        Request {
            prompt: p,
            embeds: Some((
                EmbedOverride {
                    rows: (3..23).collect(),
                    data: image,
                },
                pos,
                after as i64,
            )),
            params: greedy(40),
        }
    };
    let reqs = [
        request(&[&ps[0][..], &ps[4][..]].concat(), 1),
        request(&ps[3], 2),
    ];
    assert!(
        reqs.iter().all(|r| (33..64).contains(&r.prompt.len())),
        "premise: two blocks of prompt each"
    );
    let mut alone = on(512);
    let want: Vec<Vec<u32>> = reqs
        .iter()
        .map(|r| {
            let mut one = Scheduler::new(SchedulerConfig::default());
            let id = one.submit(r.clone());
            drain(&mut one, &mut alone)
                .done
                .remove(&id)
                .unwrap()
                .unwrap()
                .tokens
        })
        .collect();
    // 4 blocks for two answers of 3 blocks each
    let mut sched = Scheduler::new(SchedulerConfig {
        max_seqs: 2,
        round_tokens: None,
    });
    let ids: Vec<RequestId> = reqs.iter().map(|r| sched.submit(r.clone())).collect();
    let done = drain(&mut sched, &mut s).done;
    assert!(
        sched.preemptions() >= 1,
        "the pool cannot hold both answers"
    );
    for (i, id) in ids.iter().enumerate() {
        let g = done[id].as_ref().unwrap();
        assert_eq!(g.tokens, want[i], "request {i}: its answer alone");
    }
    assert_eq!(s.pool_stats().held, 0);
}

#[test]
fn a_cancelled_request_frees_its_sequence() {
    let mut s = session(512);
    let ps = prompts(&s);
    let mut sched = Scheduler::new(SchedulerConfig {
        max_seqs: 2,
        round_tokens: None,
    });
    let a = sched.submit(Request::text(ps[0].clone(), greedy(50)));
    let b = sched.submit(Request::text(ps[1].clone(), greedy(3)));
    sched.step(&mut s);
    sched.step(&mut s);
    assert_eq!(s.sequences(), 3, "two requests and the default sequence");
    assert!(sched.cancel(a, &mut s));
    assert!(!sched.cancel(a, &mut s), "already gone");
    assert_eq!(s.sequences(), 2);
    let done = drain(&mut sched, &mut s).done;
    assert!(done[&b].is_ok() && !done.contains_key(&a));
    assert_eq!(s.pool_stats().held, 0);
}

#[test]
fn grammars_and_logprobs_are_per_request_under_the_scheduler() {
    let mut solo = session(512);
    let grammars = Grammars::new(solo.tokenizer().unwrap()).unwrap();
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99},
                       "ok": {"type": "boolean"}},
        "required": ["n", "ok"],
        "additionalProperties": false
    });
    let params = |i: usize| GenParams {
        max_tokens: 40,
        sampler: SamplerConfig::greedy(),
        // a constrained answer ends where its grammar ends, ignore_eos or not
        ignore_eos: true,
        constraint: i.is_multiple_of(2).then(|| {
            grammars
                .compile(&GrammarSpec::JsonSchema(schema.clone()))
                .unwrap()
        }),
        logprobs: Some(i),
        ..GenParams::default()
    };
    let ps = prompts(&solo);
    let want: Vec<Generation> = ps
        .iter()
        .enumerate()
        .map(|(i, p)| {
            solo.reset();
            solo.generate(p, &params(i), &mut |_| true).unwrap()
        })
        .collect();
    let mut s = session(512);
    let mut sched = Scheduler::new(SchedulerConfig {
        max_seqs: 3,
        round_tokens: Some(16),
    });
    let ids: Vec<RequestId> = ps
        .iter()
        .enumerate()
        .map(|(i, p)| sched.submit(Request::text(p.clone(), params(i))))
        .collect();
    let d = drain(&mut sched, &mut s);
    for (i, id) in ids.iter().enumerate() {
        let g = d.done[id].as_ref().unwrap();
        assert_eq!(g.tokens, want[i].tokens, "request {i}");
        assert_eq!(g.logprobs, want[i].logprobs, "request {i}");
        assert_eq!(g.logprobs.len(), g.tokens.len());
        assert_eq!(d.logprobs.get(id), Some(&g.logprobs), "events carry them");
        for l in &g.logprobs {
            assert!(l.logprob <= 0.0);
            // greedy: the chosen token is the most likely
            assert!(i == 0 || l.top[0].0 == l.id);
            if i.is_multiple_of(2) {
                // a grammar may allow fewer alternatives than asked for
                assert!(l.top.len() <= i);
            } else {
                assert_eq!(l.top.len(), i);
            }
        }
        if i.is_multiple_of(2) {
            let v: serde_json::Value = serde_json::from_str(&g.text)
                .unwrap_or_else(|e| panic!("request {i}: {:?}: {e}", g.text));
            assert!(
                v["ok"].is_boolean() && v["n"].as_u64().unwrap() <= 99,
                "{v}"
            );
            assert_eq!(g.stop, StopReason::Eog);
        } else {
            assert_eq!(
                g.stop,
                StopReason::MaxTokens,
                "unconstrained: ignore_eos holds"
            );
        }
    }
}
