//! Sampler checks against exact distributions and brute force.

use super::*;

/// Logits whose softmax is exactly `probs`.
fn logits_of(probs: &[f64]) -> Vec<f32> {
    probs.iter().map(|p| p.ln() as f32).collect()
}

fn softmax_f64(logits: &[f32], t: f64) -> Vec<f64> {
    let m = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let e: Vec<f64> = logits.iter().map(|&l| ((l as f64 - m) / t).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|x| x / s).collect()
}

fn pseudo_logits(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Xoshiro256::seed_from(seed);
    (0..n)
        .map(|_| (r.next_f64() * 20.0 - 10.0) as f32)
        .collect()
}

fn argmax(l: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in l.iter().enumerate() {
        if x > l[best] {
            best = i;
        }
    }
    best as u32
}

fn config(temperature: f32, top_k: usize, top_p: f32, min_p: f32) -> SamplerConfig {
    SamplerConfig {
        temperature,
        top_k,
        top_p,
        min_p,
        repeat_penalty: 1.0,
        frequency_penalty: 0.0,
        presence_penalty: 0.0,
        repeat_last_n: 0,
        seed: 42,
    }
}

fn frequencies(s: &mut Sampler, logits: &[f32], n: usize) -> Vec<f64> {
    let mut counts = vec![0usize; logits.len()];
    for _ in 0..n {
        counts[s.sample(logits, &[]) as usize] += 1;
    }
    counts.into_iter().map(|c| c as f64 / n as f64).collect()
}

#[test]
fn greedy_is_argmax() {
    let mut s = Sampler::new(SamplerConfig::greedy());
    for seed in 0..50 {
        let l = pseudo_logits(1000, seed);
        assert_eq!(s.sample(&l, &[]), argmax(&l));
    }
    // Negative temperature is greedy too; ties go to the lowest id.
    let mut s = Sampler::new(config(-1.0, 40, 0.9, 0.1));
    assert_eq!(s.sample(&[1.0, 3.0, 3.0, 2.0], &[]), 1);
}

#[test]
fn top_k_one_is_greedy() {
    let mut s = Sampler::new(config(1.5, 1, 1.0, 0.0));
    for seed in 0..50 {
        let l = pseudo_logits(500, seed);
        assert_eq!(s.sample(&l, &[]), argmax(&l));
    }
}

#[test]
fn seeded_runs_repeat() {
    let l = pseudo_logits(200, 7);
    let run = |seed| {
        let mut c = config(1.0, 0, 1.0, 0.0);
        c.seed = seed;
        let mut s = Sampler::new(c);
        (0..200).map(|_| s.sample(&l, &[])).collect::<Vec<u32>>()
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
    // reseed restarts the sequence.
    let mut s = Sampler::new(config(1.0, 0, 1.0, 0.0));
    let a: Vec<u32> = (0..50).map(|_| s.sample(&l, &[])).collect();
    s.reseed(42);
    let b: Vec<u32> = (0..50).map(|_| s.sample(&l, &[])).collect();
    assert_eq!(a, b);
}

#[test]
fn top_p_keeps_the_smallest_sufficient_set() {
    let l = logits_of(&[0.05, 0.5, 0.15, 0.3]);
    let ids = |top_p| -> Vec<u32> {
        Sampler::new(config(1.0, 0, top_p, 0.0))
            .distribution(&l, &[])
            .into_iter()
            .map(|x| x.0)
            .collect()
    };
    assert_eq!(ids(0.49), [1]);
    assert_eq!(ids(0.7), [1, 3]);
    assert_eq!(ids(0.79), [1, 3]);
    assert_eq!(ids(0.81), [1, 3, 2]);
    assert_eq!(ids(0.96), [1, 3, 2, 0]);
    assert_eq!(ids(0.0), [1]);
    // Renormalised over the kept set.
    let d = Sampler::new(config(1.0, 0, 0.7, 0.0)).distribution(&l, &[]);
    assert!((d[0].1 - 0.5 / 0.8).abs() < 1e-6 && (d[1].1 - 0.3 / 0.8).abs() < 1e-6);
    // And draws never leave it.
    let f = frequencies(&mut Sampler::new(config(1.0, 0, 0.7, 0.0)), &l, 20_000);
    assert_eq!((f[0], f[2]), (0.0, 0.0));
    assert!((f[1] - 0.625).abs() < 0.02, "{f:?}");
}

#[test]
fn min_p_drops_tokens_below_the_fraction_of_the_best() {
    let l = logits_of(&[0.5, 0.3, 0.15, 0.05]);
    let ids = |min_p| -> Vec<u32> {
        Sampler::new(config(1.0, 0, 1.0, min_p))
            .distribution(&l, &[])
            .into_iter()
            .map(|x| x.0)
            .collect()
    };
    assert_eq!(ids(0.2), [0, 1, 2]); // floor 0.1
    assert_eq!(ids(0.31), [0, 1]); // floor 0.155
    assert_eq!(ids(0.09), [0, 1, 2, 3]); // floor 0.045
    assert_eq!(ids(1.0), [0]);
}

#[test]
fn filters_run_before_temperature() {
    // At temperature 1, top-p 0.7 keeps {0.5, 0.3}. A high temperature
    // flattens the kept pair but does not bring the others back.
    let l = logits_of(&[0.5, 0.3, 0.15, 0.05]);
    let d = Sampler::new(config(10.0, 0, 0.7, 0.0)).distribution(&l, &[]);
    assert_eq!(d.len(), 2);
    let want = softmax_f64(&l[..2], 10.0);
    assert!((d[0].1 - want[0]).abs() < 1e-6, "{d:?} {want:?}");
}

#[test]
fn draws_follow_softmax() {
    let l = [1.0f32, 2.0, 3.0, 0.5, -1.0];
    for t in [1.0, 0.5, 2.0] {
        let want = softmax_f64(&l, t as f64);
        let f = frequencies(&mut Sampler::new(config(t, 0, 1.0, 0.0)), &l, 100_000);
        for (got, want) in f.iter().zip(&want) {
            // 100k draws: the standard error is below 0.0016.
            assert!((got - want).abs() < 0.01, "t={t}: {f:?} vs {want:?}");
        }
    }
}

#[test]
fn repeat_penalty_over_the_window() {
    let mut c = config(0.0, 0, 1.0, 0.0);
    c.repeat_penalty = 2.0;
    c.repeat_last_n = 2;
    let s = Sampler::new(c);
    // Token 0 (2.0 -> 1.0) and 1 (-1 -> -2) are recent; 2 (1.5) now wins.
    assert_eq!(Sampler::new(c).sample(&[2.0, -1.0, 1.5], &[1, 0]), 2);
    // Outside the window the penalty does not apply; repeats count once.
    assert_eq!(Sampler::new(c).sample(&[2.0, -1.0, 1.5], &[0, 2, 2]), 0);
    // Exact values through the distribution with sampling on.
    let mut c2 = c;
    c2.temperature = 1.0;
    let d = Sampler::new(c2).distribution(&[2.0, -1.0, 1.5], &[0, 1]);
    let want = softmax_f64(&[1.0, -2.0, 1.5], 1.0);
    for (id, p) in d {
        assert!((p - want[id as usize]).abs() < 1e-6);
    }
    // History ids outside the vocabulary are ignored.
    assert_eq!(s.distribution(&[0.0, 1.0], &[99, 7]).len(), 1);
}

#[test]
fn frequency_and_presence_penalties_follow_openai() {
    let mut c = config(1.0, 0, 1.0, 0.0);
    c.frequency_penalty = 0.5;
    c.presence_penalty = 0.25;
    c.repeat_last_n = 4;
    // token 0 three times, token 1 once in the window; token 2 outside it
    let history = [2, 0, 0, 1, 0];
    let logits = [2.0, 1.0, 1.0, 0.0];
    let d = Sampler::new(c).distribution(&logits, &history);
    let want = softmax_f64(&[2.0 - 1.5 - 0.25, 1.0 - 0.5 - 0.25, 1.0, 0.0], 1.0);
    assert_eq!(d.len(), 4);
    for (id, p) in d {
        assert!(
            (p - want[id as usize]).abs() < 1e-6,
            "{id}: {p} vs {want:?}"
        );
    }
    // negative values encourage repeats; with the repetition penalty the
    // division comes first, as in llama.cpp
    c.temperature = 0.0;
    c.frequency_penalty = -2.0;
    c.presence_penalty = 0.0;
    assert_eq!(Sampler::new(c).sample(&[1.0, 2.0], &[0]), 0);
    c.repeat_penalty = 2.0;
    c.frequency_penalty = 0.0;
    c.presence_penalty = 2.0;
    // token 1: 3.0 / 2 - 2 = -0.5 < token 0's 0.0
    assert_eq!(Sampler::new(c).sample(&[0.0, 3.0], &[1]), 0);
    // out-of-range values are refused by validate and ignored by the sampler
    c.presence_penalty = f32::NAN;
    assert_eq!(Sampler::new(c).sample(&[0.0, 3.0], &[1]), 1);
    let e = c.validate().unwrap_err();
    assert_eq!(e.field, SamplerField::PresencePenalty);
    assert!(SamplerConfig::default().validate().is_ok());
    assert!(SamplerConfig::greedy().validate().is_ok());
}

#[test]
fn non_finite_logits() {
    let nan = f32::NAN;
    let inf = f32::INFINITY;
    let mut greedy = Sampler::new(SamplerConfig::greedy());
    let mut s = Sampler::new(SamplerConfig::default());
    // NaN is never chosen.
    for _ in 0..100 {
        assert_eq!(s.sample(&[nan, 0.0, nan], &[]), 1);
    }
    assert_eq!(greedy.sample(&[nan, -5.0, 1.0], &[]), 2);
    // +inf wins; several +inf share the draw.
    assert_eq!(greedy.sample(&[0.0, inf, inf, 3.0], &[]), 1);
    let f = frequencies(
        &mut Sampler::new(config(1.0, 0, 1.0, 0.0)),
        &[0.0, inf, inf, 3.0],
        10_000,
    );
    assert_eq!((f[0], f[3]), (0.0, 0.0));
    assert!((f[1] - 0.5).abs() < 0.03, "{f:?}");
    // Nothing finite, or nothing at all: token 0.
    assert_eq!(s.sample(&[nan, nan], &[]), 0);
    assert_eq!(s.sample(&[f32::NEG_INFINITY; 3], &[]), 0);
    assert_eq!(s.sample(&[], &[]), 0);
    assert_eq!(greedy.sample(&[], &[5]), 0);
    // A NaN temperature is greedy; NaN filters are off.
    let c = SamplerConfig {
        temperature: nan,
        top_p: nan,
        min_p: nan,
        repeat_penalty: nan,
        ..SamplerConfig::default()
    };
    assert_eq!(Sampler::new(c).sample(&[0.0, 2.0, 1.0], &[1]), 1);
}

#[test]
fn generator_is_uniform_and_deterministic() {
    let mut r = Xoshiro256::seed_from(0);
    let mut bins = [0usize; 10];
    for _ in 0..100_000 {
        let x = r.next_f64();
        assert!((0.0..1.0).contains(&x));
        bins[(x * 10.0) as usize] += 1;
    }
    for b in bins {
        assert!((b as f64 - 10_000.0).abs() < 500.0, "{bins:?}");
    }
    let mut a = Xoshiro256::seed_from(123);
    let mut b = Xoshiro256::seed_from(123);
    for _ in 0..10 {
        assert_eq!(a.next_u64(), b.next_u64());
    }
}

/// The chain written out plainly: sort everything, then top-k, top-p (on the
/// renormalised top-k set), min-p, each a cut of the sorted list.
fn reference_ids(logits: &[f32], top_k: usize, top_p: f32, min_p: f32) -> Vec<u32> {
    let mut v: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| (i as u32, l))
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    if top_k > 0 {
        v.truncate(top_k);
    }
    if top_p < 1.0 {
        let l: Vec<f32> = v.iter().map(|x| x.1).collect();
        let p = softmax_f64(&l, 1.0);
        let mut cum = 0.0;
        let mut keep = v.len();
        for (i, p) in p.iter().enumerate() {
            cum += p;
            if cum >= top_p as f64 {
                keep = i + 1;
                break;
            }
        }
        v.truncate(keep.max(1));
    }
    if min_p > 0.0 {
        let floor = v[0].1 as f64 + (min_p as f64).ln();
        let keep = v.iter().take_while(|x| x.1 as f64 >= floor).count();
        v.truncate(keep.max(1));
    }
    v.into_iter().map(|x| x.0).collect()
}

#[test]
fn filters_match_the_plain_chain_on_large_vocabularies() {
    for seed in 0..12 {
        // Flat and peaked distributions over 50k tokens, so that top-p heads
        // range from a few tokens to tens of thousands.
        let scale = [0.05f32, 0.5, 3.0][seed as usize % 3];
        let l: Vec<f32> = pseudo_logits(50_000, seed)
            .iter()
            .map(|x| x * scale)
            .collect();
        for (top_k, top_p, min_p) in [
            (0, 0.95, 0.0),
            (0, 0.5, 0.0),
            (0, 0.999, 0.0),
            (0, 1.0, 0.05),
            (0, 0.9, 0.01),
            (40, 0.95, 0.05),
            (1000, 0.8, 0.0),
            (0, 0.95, 2.0),
        ] {
            let got: Vec<u32> = Sampler::new(config(1.0, top_k, top_p, min_p))
                .distribution(&l, &[])
                .into_iter()
                .map(|x| x.0)
                .collect();
            let want = reference_ids(&l, top_k, top_p, min_p);
            assert_eq!(got, want, "seed {seed} k {top_k} p {top_p} min_p {min_p}");
        }
    }
}

#[test]
fn movable_across_threads() {
    fn check<T: Send + Sync>() {}
    check::<Sampler>();
}
