//! Text embeddings (`Session::embed`): the hidden states read back are the
//! ones the output projection turns into the logits, pooled and
//! normalised; the same whatever the chunking and wherever the tensors sit.

use std::sync::Arc;

use ats_core::device::KvType;
use ats_core::spec::ModelSpec;
use ats_sched::config::Policy;
use ats_sched::session::{Pooling, Session};
use ats_tests::{cpu, engine_on, fixtures, host_only, sim_gpu, with_gpu};

fn spec() -> Arc<ModelSpec> {
    Arc::new(ModelSpec::open(fixtures().join("llama/llama-f32.gguf")).unwrap())
}

fn prompt(s: &Session) -> Vec<u32> {
    s.tokenizer()
        .unwrap()
        .encode(
            "Permission is hereby granted, free of charge, to any person obtaining a copy of this software",
            true,
            true,
        )
        .unwrap()
}

/// The fixture's output projection (tied: the token embeddings), `vocab x n_embd`.
fn output_matrix(spec: &ModelSpec) -> Vec<f32> {
    let t = spec
        .gguf
        .tensor("output.weight")
        .or_else(|| spec.gguf.tensor("token_embd.weight"))
        .unwrap();
    assert_eq!(t.dtype().unwrap(), ats_core::DType::F32);
    spec.gguf
        .tensor_data(t)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

#[test]
fn the_last_hidden_state_is_what_the_logits_are_made_of() {
    let spec = spec();
    let mut s = engine_on(
        spec.clone(),
        host_only(cpu(2)),
        256,
        KvType::F32,
        Policy::Ats,
        false,
    );
    let ids = prompt(&s);
    let v = s.embed(&ids, Pooling::Last).unwrap();
    let d = spec.hp.n_embd;
    assert_eq!(v.len(), d);
    let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "unit norm, got {norm}");
    // its sequence is gone: no block is held
    assert_eq!(s.pool_stats().held, 0);
    // W v is the last token's logits over |h|: proportional, same argmax
    s.reset();
    let logits = s.prefill(&ids, false).unwrap();
    let w = output_matrix(&spec);
    let wv: Vec<f32> = w
        .chunks_exact(d)
        .map(|row| row.iter().zip(&v).map(|(a, b)| a * b).sum())
        .collect();
    let scale = logits.iter().zip(&wv).map(|(a, b)| a * b).sum::<f32>()
        / wv.iter().map(|b| b * b).sum::<f32>();
    assert!(scale > 0.0);
    let err = logits
        .iter()
        .zip(&wv)
        .map(|(a, b)| (a - scale * b).abs())
        .fold(0f32, f32::max);
    let top = logits.iter().map(|x| x.abs()).fold(0f32, f32::max);
    assert!(
        err <= 1e-4 * top.max(1.0),
        "max deviation {err} (logits up to {top})"
    );
}

#[test]
fn embeddings_do_not_depend_on_chunks_or_placement() {
    let spec = spec();
    let mut whole = engine_on(
        spec.clone(),
        host_only(cpu(2)),
        256,
        KvType::F32,
        Policy::Ats,
        false,
    );
    let ids = prompt(&whole);
    let want = whole.embed(&ids, Pooling::Mean).unwrap();
    // small chunks
    let mut run = ats_tests::run_config(&spec, 256, KvType::F32, Policy::Ats, false);
    run.max_chunk = Some(4);
    let machine = host_only(cpu(2));
    let cost = ats_tests::default_cost(&machine);
    let mut chunked = Session::new(spec.clone(), machine, cost, run).unwrap();
    assert!(
        chunked.max_round_tokens() < ids.len(),
        "premise: several chunks"
    );
    let got = chunked.embed(&ids, Pooling::Mean).unwrap();
    assert!(ats_tests::max_abs_diff(&got, &want) < 1e-5);
    // half the model on a simulated GPU, streamed under a tight budget
    let budget = spec.gguf.file_len() / 2;
    for policy in [Policy::Ats, Policy::Layers] {
        let m = with_gpu(cpu(1), sim_gpu(budget, 1));
        let mut split = engine_on(spec.clone(), m, 256, KvType::F32, policy, false);
        let got = split.embed(&ids, Pooling::Mean).unwrap();
        assert!(ats_tests::max_abs_diff(&got, &want) < 1e-4, "{policy:?}");
        // and the session still generates afterwards
        split.reset();
        assert!(split.prefill(&ids, false).is_ok());
    }
    assert!(whole.embed(&[], Pooling::Mean).is_err());
}
