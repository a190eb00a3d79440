//! Issue 3 correctness: every text fixture against Hugging Face (logits,
//! greedy continuation, token-by-token decoding), the quantised fixtures
//! against llama.cpp, and SmolLM2 against llama.cpp's figures.

use ats_core::device::KvType;
use ats_core::sampling::SamplerConfig;
use ats_sched::session::GenParams;
use ats_tests::{Reference, argmax, cpu_engine, fixtures, max_abs_diff, smollm2};

const TEXT: [(&str, &str); 4] = [
    ("llama", "llama-f32.gguf"),
    ("qwen2", "qwen2-f32.gguf"),
    ("qwen3", "qwen3-f32.gguf"),
    ("qwen3_moe", "qwen3_moe-f32.gguf"),
];

#[test]
fn logits_greedy_and_kv_cache_match_hf_for_every_text_fixture() {
    for (dir, file) in TEXT {
        let r = Reference::open(&format!("{dir}/reference.safetensors"));
        let ids = r.ids("input_ids");
        let (want, _) = r.f32("logits");
        let mut e = cpu_engine(&fixtures().join(dir).join(file), 64, KvType::F32);
        let vocab = e.spec().hp.n_vocab;

        // one prefill, logits at every position
        let got = e.eval(&ids).unwrap();
        let d = max_abs_diff(&got, &want);
        assert!(d < 1e-3, "{dir}: prompt logits differ by {d}");

        // greedy continuation with the KV cache: ids and logits per step
        let greedy = r.ids("greedy_ids");
        let (g_logits, _) = r.f32("greedy_logits");
        e.reset();
        let mut logits = e.prefill(&ids, false).unwrap();
        for (k, &want_id) in greedy.iter().enumerate() {
            let d = max_abs_diff(&logits, &g_logits[k * vocab..(k + 1) * vocab]);
            assert!(d < 1e-3, "{dir}: greedy step {k} logits differ by {d}");
            assert_eq!(argmax(&logits) as u32, want_id, "{dir}: greedy step {k}");
            logits = e.decode(want_id).unwrap();
        }

        // token by token gives the batched prefill's logits (KV cache test)
        let full = r.ids("full_ids");
        let (full_logits, _) = r.f32("full_logits");
        e.reset();
        for (p, &t) in full.iter().enumerate() {
            let l = e.decode(t).unwrap();
            let d = max_abs_diff(&l, &full_logits[p * vocab..(p + 1) * vocab]);
            assert!(
                d < 1e-3,
                "{dir}: token-by-token position {p} differs by {d}"
            );
        }
        let batched = e.eval(&full).unwrap();
        let d = max_abs_diff(&batched, &full_logits);
        assert!(d < 1e-3, "{dir}: batched full logits differ by {d}");

        // the default f16 cache stays within its tolerance
        let mut e16 = cpu_engine(&fixtures().join(dir).join(file), 64, KvType::F16);
        let d = max_abs_diff(&e16.eval(&full).unwrap(), &full_logits);
        assert!(d < 5e-2, "{dir}: f16 KV logits differ by {d}");
    }
}

#[test]
fn greedy_generation_through_the_sampler_reproduces_the_fixture() {
    for (dir, file) in TEXT {
        let r = Reference::open(&format!("{dir}/reference.safetensors"));
        let mut e = cpu_engine(&fixtures().join(dir).join(file), 64, KvType::F32);
        let params = GenParams {
            max_tokens: 16,
            sampler: SamplerConfig {
                temperature: 0.0,
                ..SamplerConfig::default()
            },
            stop: vec![],
            ignore_eos: true,
            ..Default::default()
        };
        let g = e
            .generate(&r.ids("input_ids"), &params, &mut |_| true)
            .unwrap();
        assert_eq!(g.tokens, r.ids("greedy_ids"), "{dir}");
    }
}

#[test]
fn quantised_fixtures_match_llama_cpp() {
    let r = Reference::open("llama_quant/reference.safetensors");
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("llama_quant/reference.json")).unwrap(),
    )
    .unwrap();
    let ids = r.ids("input_ids");
    // ATS quantises activations exactly as ggml's reference does, so these
    // agree to float rounding (measured <= 5e-6); llama.cpp's CPU build ran
    // repacked kernels for Q4_0 and Q4_K (see the fixtures README), whose
    // logits differ from the reference arithmetic by up to 0.19 here
    for (variant, tol) in [
        ("Q8_0", 1e-4),
        ("Q5_K_M", 1e-4),
        ("Q4_K_M-mix", 1e-4),
        ("Q4_1", 1e-4),
        ("Q6_K", 1e-4),
        ("Q4_0", 0.25),
        ("Q4_K_M", 0.25),
    ] {
        let mut e = cpu_engine(
            &fixtures().join(format!("llama_quant/llama-{variant}.gguf")),
            64,
            KvType::F32,
        );
        let got = e.eval(&ids).unwrap();
        let (want, _) = r.f32(&format!("{variant}.llama_cpp_logits"));
        let d = max_abs_diff(&got, &want);
        eprintln!("{variant}: max |ats - llama.cpp| = {d:.2e}");
        assert!(d < tol, "{variant}: {d} >= {tol}");
        // greedy ids where llama.cpp's margins exceed our difference
        let margin = manifest["variants"][variant]["min_margin_llama_cpp_greedy"]
            .as_f64()
            .unwrap();
        if margin > 2.0 * d as f64 {
            let params = GenParams {
                max_tokens: 16,
                sampler: SamplerConfig {
                    temperature: 0.0,
                    ..SamplerConfig::default()
                },
                stop: vec![],
                ignore_eos: true,
                ..Default::default()
            };
            e.reset();
            let g = e.generate(&ids, &params, &mut |_| true).unwrap();
            assert_eq!(
                g.tokens,
                r.ids(&format!("{variant}.llama_cpp_greedy_ids")),
                "{variant}"
            );
        }
    }
}

#[test]
fn smollm2_matches_llama_cpp() {
    let Some(path) = smollm2() else { return };
    let mut e = cpu_engine(&path, 512, KvType::F16);
    let tok = e.tokenizer().unwrap().clone();
    let ids = tok.encode("The capital of France is", true, true).unwrap();
    assert_eq!(ids, [504, 3575, 282, 4649, 314]);
    let logits = e.prefill(&ids, false).unwrap();
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    let want = [
        (" Paris", 17.5692f32),
        (" the", 15.0329),
        (" London", 13.4639),
        (" Le", 13.1317),
        (" New", 13.1229),
    ];
    for (k, (text, value)) in want.iter().enumerate() {
        let id = order[k];
        assert_eq!(tok.decode(&[id as u32]).unwrap(), *text, "top-{k}");
        // llama.cpp's CPU flash attention rounds q to f16 and accumulates
        // P.V in f16 with an f16 cache; ATS keeps both in f32 (closer to the
        // f32 reference), which moves these 30-layer logits by about 0.1
        eprintln!("{text}: {} vs llama.cpp {value}", logits[id]);
        assert!(
            (logits[id] - value).abs() < 0.15,
            "{text}: {} vs llama.cpp {value}",
            logits[id]
        );
    }
    e.reset();
    let params = GenParams {
        max_tokens: 32,
        sampler: SamplerConfig {
            temperature: 0.0,
            ..SamplerConfig::default()
        },
        stop: vec![],
        ignore_eos: false,
        ..Default::default()
    };
    let g = e.generate(&ids, &params, &mut |_| true).unwrap();
    let want = " Paris.\n\nThe United States has a population of approximately 311 million people.\n\nThe United States has a population of approximately 31";
    // "311": its first '1' beats '2' by 0.005 logit in llama.cpp, and ATS's
    // margin there is as thin (0.008 for '1', then 0.047 for '2' once the
    // attention sums ran in 16 lanes rather than 8): compare up to it
    let cut = want.find("311").unwrap() + 1;
    assert_eq!(&g.text[..cut], &want[..cut]);
}

#[test]
fn smollm2_perplexity_on_gpl3_is_within_one_percent_of_llama_cpp() {
    let Some(path) = smollm2() else { return };
    let Ok(text) = std::fs::read_to_string("/usr/share/common-licenses/GPL-3") else {
        eprintln!("skipping: /usr/share/common-licenses/GPL-3 is absent");
        return;
    };
    let mut e = cpu_engine(&path, 512, KvType::F16);
    let tok = e.tokenizer().unwrap().clone();
    let tokens = tok.encode(&text, true, false).unwrap();
    let n_ctx = 512;
    let (mut sum, mut count) = (0.0f64, 0usize);
    for c in 0..tokens.len() / n_ctx {
        let chunk = &tokens[c * n_ctx..(c + 1) * n_ctx];
        let logits = e.eval(chunk).unwrap();
        let vocab = e.spec().hp.n_vocab;
        for j in n_ctx / 2..n_ctx - 1 {
            let row = &logits[j * vocab..(j + 1) * vocab];
            let mx = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
            let z: f64 = row.iter().map(|&x| (x as f64 - mx).exp()).sum();
            sum += -(row[chunk[j + 1] as usize] as f64 - mx - z.ln());
            count += 1;
        }
    }
    let ppl = (sum / count as f64).exp();
    eprintln!("SmolLM2 GPL-3 perplexity: {ppl:.4} (llama.cpp 18.39)");
    assert!((ppl - 18.39).abs() / 18.39 < 0.01, "{ppl}");
}
