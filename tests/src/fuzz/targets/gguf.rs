//! The fuzz target `gguf`: GGUF bytes through the reader, the tokenizer and
//! chat template it carries, the model spec, and a forward pass on the CPU;
//! and the GGUF files its seeds are built from.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ats_core::chat::{ChatLimits, ChatMessage, ChatTemplate};
use ats_core::device::{Device, KvType};
use ats_core::dtype::DType;
use ats_core::gguf::{GgufFile, GgufWriter, Value, ValueType};
use ats_core::spec::ModelSpec;
use ats_core::synth::SynthSpec;
use ats_core::tokenizer::Tokenizer;
use ats_cpu::CpuDevice;
use ats_sched::config::Policy;

use super::{Target, err, words};
use crate::fuzz::class_of;
use crate::{fixtures, host_only, repo_fixtures, try_engine_on};

/// A GGUF file's metadata with no tensors: every byte is parser input.
fn metadata_only(path: std::path::PathBuf) -> Vec<u8> {
    let f = GgufFile::open(path).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata.iter() {
        w.kv(k, v.clone());
    }
    w.to_bytes(&[]).unwrap()
}

/// A complete llama model small enough to run per input: F32, 1 layer,
/// hidden 32, vocabulary 64.
pub fn micro_model_gguf() -> Vec<u8> {
    let s = SynthSpec {
        n_embd: 32,
        n_layer: 1,
        n_head: 2,
        n_head_kv: 1,
        head_dim: 16,
        n_ff: 64,
        n_vocab: 64,
        main_type: DType::F32,
        more_bits_type: DType::F32,
        ..SynthSpec::preset("tiny").unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("micro.gguf");
    s.write(&p, 3).unwrap();
    std::fs::read(&p).unwrap()
}

/// Every value type, nested arrays, version 2, a quantised tensor.
pub fn all_values_gguf() -> Vec<u8> {
    let mut w = GgufWriter::new().version(2);
    w.kv("general.architecture", Value::str("llama"))
        .kv("u8", Value::U8(7))
        .kv("i16", Value::I16(-700))
        .kv("u32", Value::U32(70000))
        .kv("f32", Value::F32(1.5))
        .kv("bool", Value::Bool(true))
        .kv("i64", Value::I64(-(1 << 40)))
        .kv("f64", Value::F64(-2.25))
        .kv("strs", Value::strings(["a", "héllo", "🦀"]))
        .kv(
            "nested",
            Value::Array(
                ValueType::Array,
                vec![Value::i32s([1, 2]), Value::i32s([3])],
            ),
        );
    w.tensor("a", vec![4, 2], DType::F32).unwrap();
    w.tensor("b", vec![32], DType::Q8_0).unwrap();
    let a: Vec<u8> = (0..8).flat_map(|i| (i as f32).to_le_bytes()).collect();
    w.to_bytes(&[a, vec![1u8; 34]]).unwrap()
}

/// GGUF bytes -> reader -> model spec -> graph -> CPU engine (3 tokens), and
/// reader -> tokenizer -> encode/decode, reader -> chat template -> render.
/// Whatever parses must then behave: tensor data of the declared size, and
/// logits of the vocabulary's length.
pub struct Gguf {
    cpu: Arc<dyn Device>,
    /// Inputs that ran a forward pass.
    pub ran: AtomicU64,
}

impl Target for Gguf {
    const NAME: &'static str = "gguf";
    const MAX_LEN: usize = 1 << 20;

    fn new() -> Self {
        Gguf {
            cpu: Arc::new(CpuDevice::new(1).unwrap()),
            ran: AtomicU64::new(0),
        }
    }

    fn seeds() -> Vec<Vec<u8>> {
        let mut seeds = vec![
            all_values_gguf(),
            // YaRN, the sliding window, the o200k pre-tokenizer, harmony
            metadata_only(repo_fixtures().join("gpt-oss/gpt-oss-f32.gguf")),
            // partial RoPE, the glm4 pre-tokenizer, GLM-4's special tokens
            metadata_only(repo_fixtures().join("glm4/glm4-f32.gguf")),
            // sigmoid routing keys, a dense lead, shared experts
            metadata_only(repo_fixtures().join("glm4moe/glm4moe-f32.gguf")),
            // LayerNorm keys, a SentencePiece vocabulary with byte fallback
            metadata_only(repo_fixtures().join("nemotron/nemotron-f32.gguf")),
            micro_model_gguf(),
            std::fs::read(fixtures().join("dequant/dequant.gguf")).unwrap(),
        ];
        // every other architecture's hyperparameters, tokenizer and template
        for f in [
            "llama/llama-f32.gguf",
            "qwen2/qwen2-f32.gguf",
            "qwen3/qwen3-f32.gguf",
            "qwen3_moe/qwen3_moe-f32.gguf",
            "qwen2_vl/qwen2_vl-f32.gguf",
            "qwen2_vl/mmproj-qwen2_vl-f32.gguf",
        ] {
            seeds.push(metadata_only(fixtures().join(f)));
        }
        seeds
    }

    fn dict() -> Vec<Vec<u8>> {
        words(&[
            "GGUF",
            "general.architecture",
            "llama",
            "qwen3moe",
            "tokenizer.ggml.model",
            "gpt2",
            "tokenizer.chat_template",
            "llama.context_length",
            "llama.block_count",
            "general.alignment",
            "gpt-oss",
            "gpt-4o",
            "yarn",
            "gpt-oss.attention.sliding_window",
            "gpt-oss.attention.sliding_window_pattern",
            "gpt-oss.rope.scaling.type",
            "glm4",
            "glm4.rope.dimension_count",
            "glm4.nextn_predict_layers",
            "glm4moe",
            "glm4moe.expert_gating_func",
            "glm4moe.expert_weights_norm",
            "glm4moe.expert_weights_scale",
            "glm4moe.expert_group_used_count",
            "glm4moe.leading_dense_block_count",
            "glm4moe.expert_shared_count",
            "nemotron",
            "nemotron.attention.layer_norm_epsilon",
        ])
    }

    fn run(&self, b: &[u8]) -> Result<String, String> {
        let f = GgufFile::from_bytes(b.to_vec()).map_err(err)?;
        for t in f.tensors() {
            assert_eq!(f.tensor_data(t).len() as u64, t.bytes, "{}", t.name);
        }
        // the class records how far each stage got, so inputs that reach a
        // new stage (or fail a later one in a new way) join the corpus
        let tok = match Tokenizer::from_gguf(&f.metadata) {
            Ok(t) => {
                if let Ok(ids) = t.encode("Hello <|im_start|> wörld 🦀", true, true) {
                    t.decode(&ids).unwrap();
                }
                "ok".to_string()
            }
            Err(e) => err(e),
        };
        let chat = match ChatTemplate::from_gguf(&f.metadata) {
            Ok(t) => {
                let t = t.with_limits(ChatLimits {
                    fuel: 50_000,
                    max_output_bytes: 1 << 16,
                });
                match t.render(&[ChatMessage::text("user", "hi")], true) {
                    Ok(_) => "ok".to_string(),
                    Err(e) => err(e),
                }
            }
            Err(e) => err(e),
        };
        let spec = match ModelSpec::from_gguf(Arc::new(f)) {
            Ok(spec) if spec.gguf.file_len() < 1 << 20 => {
                let n_vocab = spec.hp.n_vocab;
                let mut e = try_engine_on(
                    Arc::new(spec),
                    host_only(self.cpu.clone()),
                    8,
                    KvType::F32,
                    Policy::Ats,
                    false,
                )
                .map_err(|e| class_of(&e))?;
                let ids: Vec<u32> = (0..3).map(|i| (i * 7) % n_vocab as u32).collect();
                match e.prefill(&ids, false) {
                    Ok(logits) => {
                        assert_eq!(logits.len(), n_vocab);
                        self.ran.fetch_add(1, Ordering::Relaxed);
                        "ran".to_string()
                    }
                    Err(e) => err(e),
                }
            }
            Ok(_) => "ok".to_string(),
            Err(e) => err(e),
        };
        Ok(format!("spec {spec} | tokenizer {tok} | chat {chat}"))
    }
}
