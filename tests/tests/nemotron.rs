//! Issue 19: Nemotron-4 / Minitron (LayerNorm with a bias, NeoX RoPE on half
//! of each head, a non-gated FFN with squared ReLU) against Hugging Face on
//! the repository's own fixture (`tests/fixtures/nemotron`, made by
//! `scripts/fixtures/make-nemotron.sh`): logits, greedy continuation and
//! the KV cache on the CPU, the same logits on a simulated GPU under tight
//! budgets and random placements, and the SentencePiece tokenizer as
//! `sentencepiece` splits text.

use ats_core::Tokenizer;
use ats_core::graph::{Op, RopeKind};
use ats_core::spec::Arch;
use ats_core::tokenizer::TokenizerModel;
use ats_tests::hf_fixture::HfFixture;

fn fixture() -> HfFixture {
    HfFixture::new("nemotron", "nemotron-f32.gguf")
}

#[test]
fn the_file_reads_as_nemotron_with_layer_norms_and_squared_relu() {
    let spec = fixture().spec();
    let hp = &spec.hp;
    assert_eq!(spec.arch, Arch::Nemotron);
    assert_eq!(
        (hp.n_layer, hp.head_dim, hp.rope_dim, hp.n_ff),
        (4, 16, 8, 128)
    );
    let g = spec.graph();
    let count = |f: &dyn Fn(&Op) -> bool| g.nodes.iter().filter(|n| f(&n.op)).count();
    // before attention, before the FFN, and the output's
    assert_eq!(count(&|o| matches!(o, Op::LayerNorm { .. })), 9);
    assert_eq!(count(&|o| matches!(o, Op::RmsNorm { .. })), 0);
    assert_eq!(count(&|o| matches!(o, Op::ReluSqr)), 4);
    assert_eq!(count(&|o| matches!(o, Op::SwiGlu)), 0);
    assert_eq!(
        count(&|o| matches!(o, Op::Rope(r) if r.kind == RopeKind::Neox && r.rot_dim == 8)),
        8
    );
    // every tensor of the file is consumed by the graph
    assert_eq!(g.weights.len(), spec.gguf.tensors().len());
}

// An f16 cache moves the logits by 1.1e-2 in transformers itself; against
// transformers with keys and values rounded alike: 5.2e-5.
ats_tests::hf_fixture_tests!(
    fixture(),
    f16_tol: 1e-3,
    policies: [Layers, Static, Tiers, Ats],
    placement_seed: 0x6e65_6d00_5eed_0019,
);

#[test]
fn the_sentencepiece_tokenizer_splits_as_sentencepiece() {
    let spec = fixture().spec();
    let tok = Tokenizer::from_gguf(&spec.gguf.metadata).unwrap();
    assert_eq!(tok.model(), TokenizerModel::Llama);
    let m = fixture().manifest();
    for case in m["tokenizer_cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(tok.encode(text, false, false).unwrap(), want, "{text:?}");
        assert_eq!(
            tok.decode(&want).unwrap(),
            case["decoded"].as_str().unwrap()
        );
    }
    // BOS is added, EOS ends generation
    let with_bos = tok.encode("Hello", true, false).unwrap();
    assert_eq!(with_bos[0], 2);
    assert!(tok.is_eog(3));
}
