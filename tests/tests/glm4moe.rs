//! Issue 19: GLM-4.5 (`glm4moe`: a leading dense block, then MoE blocks
//! routed by sigmoid scores with a selection bias, renormalised and scaled
//! weights and a shared expert; q/k/v biases, q/k norms, NeoX RoPE on half
//! of each head) against Hugging Face on the repository's own fixture
//! (`tests/fixtures/glm4moe`, made by `scripts/fixtures/make-glm4moe.sh`):
//! logits, greedy continuation and the KV cache on the CPU, the same logits
//! on a simulated GPU under tight budgets and random placements, and the
//! files ATS refuses by name.

use ats_core::gguf::Value;
use ats_core::graph::{Gating, Op, RopeKind, Routing};
use ats_core::spec::{Arch, ModelSpec};
use ats_tests::hf_fixture::{HfFixture, chat_messages, ids_of};

fn fixture() -> HfFixture {
    HfFixture::new("glm4moe", "glm4moe-f32.gguf")
}

/// The fixture with metadata changed by `edit` and tensors dropped.
fn edited(edit: &[(&str, Option<Value>)], drop: &[&str]) -> Result<ModelSpec, String> {
    ats_tests::edited::edited_spec(&fixture().gguf, edit, drop)
}

#[test]
fn the_file_reads_as_glm4moe_with_a_dense_lead_and_shared_experts() {
    let spec = fixture().spec();
    let hp = &spec.hp;
    assert_eq!(spec.arch, Arch::Glm4Moe);
    // the converter counts the NextN block the checkpoint does not carry
    assert_eq!(
        (hp.n_layer, hp.n_dense_lead, hp.n_ff, hp.n_ff_expert),
        (4, 1, 96, 32)
    );
    assert_eq!(
        (hp.n_expert, hp.n_expert_used, hp.n_expert_shared),
        (8, 2, 1)
    );
    let glm = Routing {
        gating: Gating::Sigmoid,
        norm_topk: true,
        scale: 2.5,
    };
    assert_eq!(hp.routing, glm);
    let g = spec.graph();
    let count = |f: &dyn Fn(&Op) -> bool| g.nodes.iter().filter(|n| f(&n.op)).count();
    let routers = count(
        &|o| matches!(o, Op::MoeRouter { n_expert: 8, top_k: 2, routing } if *routing == glm),
    );
    assert_eq!(routers, 3);
    assert_eq!(count(&|o| matches!(o, Op::MoeExperts { .. })), 3);
    // the dense block's FFN and three shared experts
    assert_eq!(count(&|o| matches!(o, Op::SwiGlu)), 4);
    assert_eq!(
        count(&|o| matches!(o, Op::Rope(r) if r.kind == RopeKind::Neox && r.rot_dim == 16)),
        8
    );
    // q/k norms: per layer one of each, plus the block norms and the output's
    assert_eq!(count(&|o| matches!(o, Op::RmsNorm { .. })), 4 * 4 + 1);
    // every tensor of the file is consumed by the graph
    assert_eq!(g.weights.len(), spec.gguf.tensors().len());
}

// An f16 cache moves the logits in transformers itself; against
// transformers with keys and values rounded alike the gap is what f32
// differences of 1e-6 make of some f16 roundings.
ats_tests::hf_fixture_tests!(
    fixture(),
    f16_tol: 5e-3,
    policies: [Layers, Static, Tiers, Ats],
    placement_seed: 0x6c6d_3450_5eed_0019,
);

#[test]
fn routing_keys_are_read_and_bad_ones_named() {
    let err = |edit: &[(&str, Option<Value>)], drop: &[&str]| edited(edit, drop).unwrap_err();
    // llama.cpp's defaults when the keys are absent: sigmoid, no renormalisation, scale 1
    let bare = edited(
        &[
            ("glm4moe.expert_gating_func", None),
            ("glm4moe.expert_weights_norm", None),
            ("glm4moe.expert_weights_scale", None),
        ],
        &[],
    )
    .unwrap();
    let plain = Routing {
        gating: Gating::Sigmoid,
        norm_topk: false,
        scale: 1.0,
    };
    assert_eq!(bare.hp.routing, plain);
    let softmax = edited(&[("glm4moe.expert_gating_func", Some(Value::U32(1)))], &[]).unwrap();
    assert_eq!(softmax.hp.routing.gating, Gating::Softmax);
    let e = err(&[("glm4moe.expert_gating_func", Some(Value::U32(4)))], &[]);
    assert!(e.contains("glm4moe.expert_gating_func"), "{e}");
    let e = err(&[("glm4moe.expert_weights_norm", Some(Value::U32(1)))], &[]);
    assert!(e.contains("glm4moe.expert_weights_norm"), "{e}");
    let e = err(
        &[("glm4moe.expert_weights_scale", Some(Value::F32(-1.0)))],
        &[],
    );
    assert!(e.contains("glm4moe.expert_weights_scale"), "{e}");
    // group-limited routing (DeepSeek-V3's) is refused, not ignored
    let groups = [
        ("glm4moe.expert_group_count", Some(Value::U32(4))),
        ("glm4moe.expert_group_used_count", Some(Value::U32(2))),
    ];
    let e = err(&groups, &[]);
    assert!(e.contains("glm4moe.expert_group_used_count"), "{e}");
    let e = err(
        &[("glm4moe.leading_dense_block_count", Some(Value::U32(5)))],
        &[],
    );
    assert!(e.contains("glm4moe.leading_dense_block_count"), "{e}");
    let e = err(
        &[("glm4moe.expert_shared_count", Some(Value::U64(u64::MAX)))],
        &[],
    );
    assert!(e.contains("glm4moe.expert_shared_count"), "{e}");
    // a sigmoid router needs its selection bias; a shared expert its tensors
    let e = err(&[], &["blk.2.exp_probs_b.bias"]);
    assert!(e.contains("blk.2.exp_probs_b.bias"), "{e}");
    let e = err(&[], &["blk.3.ffn_down_shexp.weight"]);
    assert!(e.contains("blk.3.ffn_down_shexp.weight"), "{e}");
    // without q/k norms (GLM-4.5-Air) the layers build without them
    let drop: Vec<String> = (0..4)
        .flat_map(|l| {
            [
                format!("blk.{l}.attn_q_norm.weight"),
                format!("blk.{l}.attn_k_norm.weight"),
            ]
        })
        .collect();
    let drop: Vec<&str> = drop.iter().map(|s| s.as_str()).collect();
    let air = edited(&[], &drop).unwrap();
    let norms = air
        .graph()
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::RmsNorm { .. }))
        .count();
    assert_eq!(norms, 2 * 4 + 1);
}

#[test]
fn chat_prompt_and_its_tokens_agree_with_transformers() {
    use ats_core::{ChatTemplate, Tokenizer};
    let spec = fixture().spec();
    let md = &spec.gguf.metadata;
    let tok = Tokenizer::from_gguf(md).unwrap();
    let tmpl = ChatTemplate::from_gguf(md).unwrap();
    let manifest = fixture().manifest();
    let chat = &manifest["chat"];
    let want = chat["text"].as_str().unwrap();
    assert_eq!(tmpl.render(&chat_messages(chat), true).unwrap(), want);
    // "[gMASK]<sop>" comes from the template: the tokenizer adds no BOS
    assert_eq!(tok.encode(want, true, true).unwrap(), ids_of(&chat["ids"]));
    for t in ["<|endoftext|>", "<|user|>", "<|observation|>"] {
        let id = manifest["special_ids"][t].as_u64().unwrap() as u32;
        assert!(tok.is_eog(id), "{t} ends generation");
    }

    // tools, an earlier call with its reasoning, the tool's answer, and a
    // prompt that opens a <think> block, as transformers renders them
    let case = &manifest["chat_tools"];
    let said = chat_messages(case);
    let mut vars = ats_core::chat::TemplateVars {
        tools: case["tools"].as_array().unwrap().clone(),
        ..Default::default()
    };
    vars.kwargs.insert("enable_thinking".into(), true.into());
    let text = tmpl.render_with(&said, &vars, true).unwrap();
    assert_eq!(text, case["text"].as_str().unwrap());
    assert_eq!(tok.encode(&text, true, true).unwrap(), ids_of(&case["ids"]));
    // GLM-4.5's own formats are what the server reads
    assert_eq!(
        ats_core::chat::tools::ToolFormat::detect(&tmpl),
        ats_core::chat::tools::ToolFormat::Glm
    );
    let format = ats_core::chat::reasoning::ReasoningFormat::of(&tok, Some(&tmpl));
    assert_eq!(format, ats_core::chat::reasoning::ReasoningFormat::Think);
}
