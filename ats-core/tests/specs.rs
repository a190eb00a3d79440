//! Model specs and graphs of every fixture architecture.

use std::path::PathBuf;

use ats_core::graph::{Op, SubLayer};
use ats_core::spec::{Arch, ModelSpec, SpecError};

fn fixtures() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap().join("../shared/fixtures")
}

#[test]
fn every_fixture_builds_a_valid_graph() {
    let cases = [
        ("llama/llama-f32.gguf", Arch::Llama, false),
        ("qwen2/qwen2-f32.gguf", Arch::Qwen2, true),
        ("qwen3/qwen3-f32.gguf", Arch::Qwen3, true),
        ("qwen3_moe/qwen3_moe-f32.gguf", Arch::Qwen3Moe, true),
        ("qwen2_vl/qwen2_vl-f32.gguf", Arch::Qwen2Vl, true),
        ("qwen2_5_vl/qwen2_5_vl-f32.gguf", Arch::Qwen2Vl, true),
    ];
    for (file, arch, has_output) in cases {
        let spec = ModelSpec::open(fixtures().join(file)).unwrap();
        assert_eq!(spec.arch, arch, "{file}");
        let hp = &spec.hp;
        assert_eq!(
            (hp.n_embd, hp.n_layer, hp.n_head, hp.n_head_kv, hp.head_dim),
            (256, 2, 4, 2, 64)
        );
        assert_eq!(hp.n_vocab, 512);
        let g = spec.graph();
        g.validate().unwrap();
        assert_eq!(g.kv_caches.len(), 2);
        assert_eq!(g.values[g.output].cols, 512);
        let out = g
            .weights
            .iter()
            .find(|w| w.sublayer == SubLayer::Output && w.rows() == 512)
            .unwrap();
        assert_eq!(out.name == "output.weight", has_output, "{file}");
        // every tensor of the file is consumed by the graph
        assert_eq!(g.weights.len(), spec.gguf.tensors().len(), "{file}");
        if arch == Arch::Qwen3Moe {
            assert_eq!((hp.n_expert, hp.n_expert_used, hp.n_ff_expert), (8, 2, 256));
            assert!(g.nodes.iter().any(|n| matches!(
                n.op,
                Op::MoeExperts {
                    n_expert: 8,
                    top_k: 2,
                    act: ats_core::graph::ExpertAct::SwiGlu,
                    biases: false,
                }
            )));
        }
        if arch == Arch::Qwen2Vl {
            assert_eq!(hp.rope_sections, [8, 12, 12, 0]);
        }
    }
}

#[test]
fn smollm2_spec() {
    let path = dirs_models().join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if !path.exists() {
        eprintln!(
            "skipping: {} is absent (run ../shared/scripts/fetch-smollm2.sh)",
            path.display()
        );
        return;
    }
    let spec = ModelSpec::open(&path).unwrap();
    let hp = &spec.hp;
    assert_eq!(
        (
            hp.n_embd,
            hp.n_layer,
            hp.n_head,
            hp.n_head_kv,
            hp.n_ff,
            hp.n_vocab
        ),
        (576, 30, 9, 3, 1536, 49152)
    );
    assert_eq!(hp.rope_theta, 100000.0);
    let g = spec.graph();
    assert_eq!(g.weights.len(), 1 + 30 * 9 + 1);
}

fn dirs_models() -> PathBuf {
    std::env::var_os("ATS_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/ats/models")
        })
}

#[test]
fn bad_models_are_named_errors() {
    use ats_core::gguf::{GgufFile, GgufWriter, Value};
    use std::sync::Arc;
    let mut w = GgufWriter::new();
    w.kv("general.architecture", Value::str("mamba"));
    let f = GgufFile::from_bytes(w.to_bytes(&[]).unwrap()).unwrap();
    let e = ModelSpec::from_gguf(Arc::new(f)).unwrap_err();
    assert!(
        matches!(e, SpecError::UnknownArch(ref a) if a == "mamba"),
        "{e}"
    );

    // a llama file with a wrong q shape
    let src = GgufFile::open(fixtures().join("llama/llama-f32.gguf")).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata.iter() {
        w.kv(k, v.clone());
    }
    let mut data = Vec::new();
    for t in src.tensors() {
        let mut ne = t.ne.clone();
        let mut bytes = src.tensor_data(t).to_vec();
        if t.name == "blk.1.attn_q.weight" {
            ne[1] /= 2;
            bytes.truncate(bytes.len() / 2);
        }
        w.tensor(&t.name, ne, t.dtype().unwrap()).unwrap();
        data.push(bytes);
    }
    let f = GgufFile::from_bytes(w.to_bytes(&data).unwrap()).unwrap();
    let e = ModelSpec::from_gguf(Arc::new(f)).unwrap_err().to_string();
    assert_eq!(
        e,
        "tensor \"blk.1.attn_q.weight\" has shape [256, 128] (ggml order), expected [256, 256]"
    );

    // a missing key
    let mut w = GgufWriter::new();
    for (k, v) in src
        .metadata
        .iter()
        .filter(|(k, _)| *k != "llama.block_count")
    {
        w.kv(k, v.clone());
    }
    for t in src.tensors() {
        w.tensor(&t.name, t.ne.clone(), t.dtype().unwrap()).unwrap();
    }
    let data: Vec<Vec<u8>> = src
        .tensors()
        .iter()
        .map(|t| src.tensor_data(t).to_vec())
        .collect();
    let f = GgufFile::from_bytes(w.to_bytes(&data).unwrap()).unwrap();
    let e = ModelSpec::from_gguf(Arc::new(f)).unwrap_err().to_string();
    assert_eq!(e, "missing metadata key \"llama.block_count\"");
}
