//! The fuzz targets themselves, one body each, shared by the two harnesses
//! that drive them: the stable-toolchain mutation loop of
//! `tests/tests/fuzz.rs` (a short smoke run in `cargo test`) and the
//! coverage-guided libFuzzer targets in `fuzz/` (`cargo +nightly fuzz run`,
//! the main fuzzer).
//!
//! A target is built once ([`Target::new`]: fixtures, tokenizer, CPU device),
//! then [`Target::run`] takes one input: `Ok(class)` when accepted, `Err(class)`
//! when refused cleanly (the class feeds the stable harness's corpus
//! selection; libFuzzer ignores it). Invariants are assertions, so a
//! violation is a panic, which both harnesses report as a crash.

use std::io::Cursor;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ats_core::chat::tools::{ToolChoice, ToolFormat, ToolSpec};
use ats_core::chat::{CHATML_TEMPLATE, ChatLimits, ChatMessage, ChatTemplate, ContentPart};
use ats_core::device::{Device, KvType};
use ats_core::dtype::DType;
use ats_core::gguf::{GgufFile, GgufWriter, Value, ValueType};
use ats_core::grammar::{GrammarSpec, Grammars};
use ats_core::spec::ModelSpec;
use ats_core::synth::SynthSpec;
use ats_core::tokenizer::Tokenizer;
use ats_cpu::CpuDevice;
use ats_sched::config::Policy;
use ats_sched::size::parse_size;
use ats_vision::preprocess::{DecodeLimits, PreprocessConfig, preprocess_bytes};

use super::class_of;
pub use super::server_request::ServerRequest;
use crate::{fixtures, host_only, repo_fixtures, try_engine_on};

/// One fuzz target: its seeds, its dictionary and its body.
pub trait Target: Sync + Send {
    /// The name (`fuzz/fuzz_targets/NAME.rs`, `fuzz_NAME` in the stable suite).
    const NAME: &'static str;
    /// The longest input the stable harness makes (libFuzzer: `-max_len`).
    const MAX_LEN: usize;
    /// Builds the target's state (fixtures, tokenizer, device).
    fn new() -> Self;
    /// Seed inputs, from the fixtures.
    fn seeds() -> Vec<Vec<u8>>;
    /// Tokens worth inserting (keywords, magic numbers).
    fn dict() -> Vec<Vec<u8>>;
    /// Runs one input.
    fn run(&self, input: &[u8]) -> Result<String, String>;
}

/// Writes `T`'s seeds into `dir` (one file each, named by content), for
/// libFuzzer's corpus (`fuzz/seed.sh`).
pub fn write_seeds<T: Target>(dir: &std::path::Path) -> std::io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    let seeds = T::seeds();
    for s in &seeds {
        std::fs::write(dir.join(format!("seed-{:016x}", super::fnv(s))), s)?;
    }
    Ok(seeds.len())
}

/// Writes `T`'s dictionary in libFuzzer's format (`-dict=`).
pub fn write_dict<T: Target>(path: &std::path::Path) -> std::io::Result<()> {
    let mut out = String::new();
    for w in T::dict() {
        out.push('"');
        for b in w {
            if b.is_ascii_graphic() && b != b'"' && b != b'\\' || b == b' ' {
                out.push(b as char);
            } else {
                out.push_str(&format!("\\x{b:02X}"));
            }
        }
        out.push_str("\"\n");
    }
    std::fs::write(path, out)
}

/// Runs `T` under the stable mutation loop for [`super::budget`].
pub fn smoke<T: Target>() -> (T, super::Report) {
    let t = T::new();
    let report = super::fuzz(T::NAME, T::seeds(), T::dict(), T::MAX_LEN, |b| t.run(b));
    (t, report)
}

fn err<E: std::fmt::Debug>(e: E) -> String {
    class_of(&format!("{e:?}"))
}

fn words(list: &[&str]) -> Vec<Vec<u8>> {
    list.iter().map(|s| s.as_bytes().to_vec()).collect()
}

/// A GGUF file's metadata with no tensors: every byte is parser input.
fn metadata_only(path: std::path::PathBuf) -> Vec<u8> {
    let f = GgufFile::open(path).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata.iter() {
        w.kv(k, v.clone());
    }
    w.to_bytes(&[]).unwrap()
}

/// gpt-oss's own chat template, from the gpt-oss fixture.
fn gpt_oss_template() -> Vec<u8> {
    let path = repo_fixtures().join("gpt-oss/gpt-oss-f32.gguf");
    let f = GgufFile::open(path).unwrap();
    let t = f.metadata.get_str("tokenizer.chat_template").unwrap();
    t.as_bytes().to_vec()
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

/// The llama fixture's tokenizer (byte-level BPE, ChatML specials).
pub fn llama_tokenizer() -> Tokenizer {
    let f = GgufFile::open(fixtures().join("llama/llama-f32.gguf")).unwrap();
    Tokenizer::from_gguf(&f.metadata).unwrap()
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

/// Arbitrary bytes as (lossy) text through encode, and as token ids (in and
/// out of range) through decode and the streaming detokenizer. Text without
/// special tokens must round-trip exactly (byte-level BPE loses nothing).
/// The first byte picks the mode.
pub struct TokenizerTarget {
    tok: Tokenizer,
}

impl Target for TokenizerTarget {
    const NAME: &'static str = "tokenizer";
    const MAX_LEN: usize = 4096;

    fn new() -> Self {
        TokenizerTarget {
            tok: llama_tokenizer(),
        }
    }

    fn seeds() -> Vec<Vec<u8>> {
        let cases: serde_json::Value = serde_json::from_slice(
            &std::fs::read(fixtures().join("tokenizer/cases.json")).unwrap(),
        )
        .unwrap();
        let mut seeds: Vec<Vec<u8>> = Vec::new();
        let mut collect = |v: &serde_json::Value| {
            if let Some(s) = v.get("text").and_then(|t| t.as_str()) {
                seeds.push([&[0u8][..], s.as_bytes()].concat());
            }
        };
        match &cases {
            serde_json::Value::Array(a) => a.iter().for_each(&mut collect),
            serde_json::Value::Object(o) => o
                .values()
                .flat_map(|v| v.as_array().cloned().unwrap_or_default())
                .for_each(|v| collect(&v)),
            _ => {}
        }
        seeds.push(b"\x00Hello, world! It's 2024.\n\tTabs   and  spaces".to_vec());
        seeds.push("\x01<|im_start|>user\nhi<|im_end|>\n<|endoftext|>".into());
        seeds
            .push(b"\x02\x00\x00\x00\x00\x01\x00\x00\x00\xff\xff\xff\xff\x00\x02\x00\x00".to_vec());
        seeds.push(b"\x03\xf0\x9f\xa6\x80\xe2\x82\xac\xc3\xa9\xff\xfe\x80".to_vec());
        seeds
    }

    fn dict() -> Vec<Vec<u8>> {
        words(&[
            "<|im_start|>",
            "<|im_end|>",
            "<|endoftext|>",
            "<|",
            "|>",
            "🦀",
            "\u{301}",
            "\u{200d}",
            "\u{fffd}",
            "\r\n",
            "   ",
            "'s",
            "1234567",
        ])
    }

    fn run(&self, b: &[u8]) -> Result<String, String> {
        let tok = &self.tok;
        let n = tok.vocab_size() as u32;
        let (mode, rest) = b.split_first().ok_or("empty")?;
        match mode % 4 {
            0 | 1 => {
                let text = String::from_utf8_lossy(rest);
                let parse_special = mode % 4 == 1;
                let ids = tok
                    .encode(&text, mode & 4 != 0, parse_special)
                    .map_err(err)?;
                assert!(ids.iter().all(|&id| id < n));
                let back = tok.decode(&ids).map_err(err)?;
                if !parse_special && mode & 4 == 0 {
                    assert_eq!(back, text, "round trip of {ids:?}");
                }
                Ok(format!("{} ids", ids.len().min(4)))
            }
            _ => {
                // ids: u32 LE words, folded near the vocabulary when mode says so
                let ids: Vec<u32> = rest
                    .chunks(4)
                    .map(|c| {
                        let mut w = [0u8; 4];
                        w[..c.len()].copy_from_slice(c);
                        let id = u32::from_le_bytes(w);
                        if mode % 4 == 2 { id % (n + 8) } else { id }
                    })
                    .collect();
                let mut stream = tok.stream();
                let mut ok = true;
                for &id in &ids {
                    if stream.push(id).is_err() {
                        ok = false;
                        break;
                    }
                    let _ = tok.token_to_piece(id);
                }
                if ok {
                    // only the start of one unfinished character is held back
                    assert!(stream.finish() < 4, "held back more than a character");
                }
                let whole = tok.decode(&ids);
                assert_eq!(ok, whole.is_ok(), "stream and decode agree on {ids:?}");
                whole.map(|_| String::new()).map_err(err)
            }
        }
    }
}

/// Hostile templates: loops, huge repeats, deep recursion, garbage. Every
/// render ends within the fuel and the output cap, with a typed error or text.
pub struct ChatTemplateTarget {
    limits: ChatLimits,
    msgs: Vec<ChatMessage>,
}

impl Target for ChatTemplateTarget {
    const NAME: &'static str = "chat_template";
    const MAX_LEN: usize = 4096;

    fn new() -> Self {
        ChatTemplateTarget {
            limits: ChatLimits {
                fuel: 100_000,
                max_output_bytes: 1 << 16,
            },
            msgs: vec![
                ChatMessage::text("system", "be brief"),
                ChatMessage::new(
                    "user",
                    vec![ContentPart::Image, ContentPart::Text("what is it?".into())],
                ),
                ChatMessage::text("assistant", "a cat"),
            ],
        }
    }

    fn seeds() -> Vec<Vec<u8>> {
        vec![
            std::fs::read(fixtures().join("tokenizer/chat_template.jinja")).unwrap(),
            CHATML_TEMPLATE.as_bytes().to_vec(),
            // gpt-oss's harmony template (macros, namespaces, tool rendering)
            gpt_oss_template(),
            b"{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"
                .to_vec(),
            b"{{ 'ab' * 100000000 }}".to_vec(),
            b"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}".to_vec(),
            b"{% set ns = namespace(s='xy') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}"
                .to_vec(),
            b"{{ messages | tojson }}{{ raise_exception('no') }}{{ strftime_now('%Y') }}".to_vec(),
            b"{% for m in messages recursive %}{{ loop(messages) }}{% endfor %}".to_vec(),
            b"{{ messages[0].content.strip().split('x') | join(',') }}{{ bos_token * 99999 }}"
                .to_vec(),
        ]
    }

    fn dict() -> Vec<Vec<u8>> {
        words(&[
            "{%",
            "%}",
            "{{",
            "}}",
            "{#",
            "#}",
            " for x in ",
            " endfor ",
            "range(99999999)",
            " * 99999999",
            " ~ ",
            "loop.cycle(",
            "recursive",
            "macro",
            "endmacro",
            "|tojson",
            "|join",
            "messages",
            "[0]",
            ".items()",
            "namespace(",
            "set ",
            "if ",
            "endif",
            "raise_exception(",
            "strftime_now(",
            "'",
            "\"",
            "(",
            ")",
            "[",
            "]",
            "-",
            "+",
        ])
    }

    fn run(&self, b: &[u8]) -> Result<String, String> {
        let src = String::from_utf8_lossy(b);
        let t = ChatTemplate::new(src, "<s>", "</s>")
            .map_err(err)?
            .with_limits(self.limits);
        let out = t.render(&self.msgs, true).map_err(err)?;
        assert!(out.len() <= self.limits.max_output_bytes);
        Ok(String::new())
    }
}

/// Image bytes of every format ATS decodes, re-encoded from the fixture
/// images; decode limits small enough that no input can cost more than a few
/// tens of MB or milliseconds.
pub struct ImagePreprocess {
    cfg: PreprocessConfig,
    limits: DecodeLimits,
}

impl Target for ImagePreprocess {
    const NAME: &'static str = "image_preprocess";
    const MAX_LEN: usize = 1 << 18;

    fn new() -> Self {
        ImagePreprocess {
            cfg: PreprocessConfig::default(),
            limits: DecodeLimits {
                max_side: 8192,
                max_pixels: 4 << 20,
                max_alloc: 32 << 20,
            },
        }
    }

    fn seeds() -> Vec<Vec<u8>> {
        let mut seeds = Vec::new();
        for name in ["small.png", "large.png"] {
            let png = std::fs::read(fixtures().join("vl_images").join(name)).unwrap();
            let img = image::load_from_memory(&png).unwrap();
            seeds.push(png);
            for fmt in [
                image::ImageFormat::Jpeg,
                image::ImageFormat::WebP,
                image::ImageFormat::Gif,
                image::ImageFormat::Bmp,
            ] {
                let mut out = Cursor::new(Vec::new());
                img.to_rgba8().write_to(&mut out, fmt).unwrap_or_else(|_| {
                    img.to_rgb8().write_to(&mut out, fmt).unwrap();
                });
                seeds.push(out.into_inner());
            }
        }
        seeds
    }

    fn dict() -> Vec<Vec<u8>> {
        words(&[
            "\u{89}PNG\r\n\u{1a}\n",
            "IHDR",
            "IDAT",
            "IEND",
            "PLTE",
            "tRNS",
            "RIFF",
            "WEBPVP8L",
            "VP8X",
            "GIF89a",
            "BM",
        ])
    }

    fn run(&self, b: &[u8]) -> Result<String, String> {
        let pv = preprocess_bytes(b, &self.cfg, &self.limits).map_err(err)?;
        let [t, h, w] = pv.grid_thw;
        assert_eq!(pv.n_patches, t * h * w);
        assert_eq!(pv.data.len(), pv.n_patches * pv.row_len);
        assert!(pv.data.iter().all(|v| v.is_finite()));
        Ok(format!("{t}x{h}x{w}"))
    }
}

/// Size strings (`--vram`, `--sim-gpu mem=`), policies and `--sim-gpu` specs.
/// A parsed size is at least one byte, and plain byte counts parse exactly.
pub struct SizeAndOptions;

impl Target for SizeAndOptions {
    const NAME: &'static str = "size_and_options";
    const MAX_LEN: usize = 256;

    fn new() -> Self {
        SizeAndOptions
    }

    fn seeds() -> Vec<Vec<u8>> {
        words(&[
            "2G",
            "1500M",
            "2GiB",
            "4096",
            "1.5 TB",
            "0.0000001K",
            "18446744073709551615",
            "1e309",
            "ats",
            "mem=2G,copy=4,speed=0.5,slow=0:1;10:3,launch=0",
        ])
    }

    fn dict() -> Vec<Vec<u8>> {
        words(&[
            "K", "KiB", "M", "MiB", "G", "GiB", "T", "TiB", "B", ".", "e", "-", "+", " ", "\u{a0}",
            "٣", "NaN", "inf", "mem=", ",", ";", ":", "=",
        ])
    }

    fn run(&self, b: &[u8]) -> Result<String, String> {
        let s = String::from_utf8_lossy(b);
        let _ = Policy::parse(&s);
        let _ = ats_sched::sim::SimGpuConfig::parse(&s);
        let v = parse_size(&s).map_err(|e| class_of(&e))?;
        assert!(v >= 1, "{s:?} -> {v}");
        if let Ok(n) = s.trim().parse::<u64>()
            && n < 1 << 53
            && s.trim().bytes().all(|c| c.is_ascii_digit())
        {
            assert_eq!(v, n, "{s:?}");
        }
        Ok(String::new())
    }
}

/// The server's schema and tool fields as far as a library reaches them
/// (the request checks themselves, `check_chat` and the data-URL decoder,
/// are private to the `ats-cli` binary and fuzzed by its own unit test,
/// `serve::fuzz`). The first byte picks what the rest is:
///
/// - 0: a `response_format` JSON schema, compiled against the llama
///   vocabulary and followed for a few tokens (mask, then the first allowed
///   token);
/// - 1: a Lark grammar, the same way;
/// - 2: a tool's `parameters` schema, turned into the call grammar of each
///   tool format (harmony, Hermes, Llama 3, generic) and compiled;
/// - 3: a model's answer, read back for calls in each tool format.
pub struct SchemaAndTools {
    tok: Tokenizer,
    grammars: Grammars,
}

impl SchemaAndTools {
    fn follow(&self, spec: &GrammarSpec) -> Result<String, String> {
        let mut c = self.grammars.compile(spec).map_err(err)?;
        let mut logits = vec![0f32; self.tok.vocab_size()];
        for step in 0..4 {
            if c.is_finished() {
                return Ok(format!("finished at {step}"));
            }
            logits.fill(0.0);
            c.mask(&mut logits).map_err(err)?;
            let Some(next) = logits.iter().position(|l| l.is_finite()) else {
                return Ok(format!("no token at {step}"));
            };
            c.accept(next as u32).map_err(err)?;
        }
        Ok("followed".into())
    }

    fn tool(parameters: serde_json::Value) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "weather".into(),
            description: "the weather".into(),
            parameters,
        }]
    }
}

const FORMATS: [ToolFormat; 5] = [
    ToolFormat::Harmony,
    ToolFormat::Hermes,
    ToolFormat::Glm,
    ToolFormat::Llama3,
    ToolFormat::Generic,
];

/// A `<think>` split of `text`, whole and streamed in pieces of 3 bytes
/// (at char boundaries), which must agree.
fn think_split_agrees(text: &str, open: bool) -> (String, String) {
    use ats_core::chat::harmony::Part;
    use ats_core::chat::think::{ThinkSplitter, split};
    let whole = split(text, open);
    let mut s = ThinkSplitter::new(open);
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = rest.len().min(3);
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        pieces.extend(s.push(&rest[..cut]));
        rest = &rest[cut..];
    }
    pieces.extend(s.finish());
    let mut streamed = (String::new(), String::new());
    for (p, t) in pieces {
        match p {
            Part::Reasoning => streamed.0.push_str(&t),
            Part::Content => streamed.1.push_str(&t),
        }
    }
    assert_eq!(streamed, whole, "{text:?} (open: {open})");
    whole
}

impl Target for SchemaAndTools {
    const NAME: &'static str = "schema_and_tools";
    const MAX_LEN: usize = 4096;

    fn new() -> Self {
        let tok = llama_tokenizer();
        let grammars = Grammars::new(&tok).unwrap();
        SchemaAndTools { tok, grammars }
    }

    fn seeds() -> Vec<Vec<u8>> {
        let schema = br#"{"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}, "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}}, "required": ["name"], "additionalProperties": false}"#;
        let params = br#"{"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}"#;
        let with = |mode: u8, b: &[u8]| [&[mode][..], b].concat();
        vec![
            with(0, schema),
            with(0, br##"{"anyOf": [{"type": "number"}, {"type": "string", "pattern": "^[a-z]+$"}], "$defs": {"x": {"$ref": "#/$defs/x"}}}"##),
            with(1, b"start: \"yes\" | \"no\" | num\nnum: /[0-9]+/\n"),
            with(1, b"start: \"<tool_call>\" \"\\n\" call \"\\n\" \"</tool_call>\"\ncall: %json {\"type\": \"object\"}\n"),
            with(2, params),
            with(3, b"<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"),
            with(3, br#"{"name": "weather", "parameters": {"city": "Oslo"}}"#),
            with(3, br#"{"tool_call": {"name": "weather", "arguments": {}}}"#),
            with(3, b"<|channel|>analysis<|message|>Look it up.<|end|><|start|>assistant<|channel|>commentary to=functions.weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}"),
            with(3, b"<think>Oslo.</think>\n<tool_call>weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>"),
        ]
    }

    fn dict() -> Vec<Vec<u8>> {
        words(&[
            "\"type\"",
            "\"object\"",
            "\"string\"",
            "\"integer\"",
            "\"array\"",
            "\"properties\"",
            "\"required\"",
            "\"items\"",
            "\"enum\"",
            "\"const\"",
            "\"anyOf\"",
            "\"oneOf\"",
            "\"allOf\"",
            "\"$ref\"",
            "\"#/$defs/x\"",
            "\"pattern\"",
            "\"minLength\"",
            "\"maxItems\"",
            "\"additionalProperties\"",
            "%json",
            "start:",
            "/[a-z]*/",
            "<tool_call>",
            "</tool_call>",
            "\"name\"",
            "\"arguments\"",
            "\"parameters\"",
            "\"tool_call\"",
            "<|channel|>",
            "<|message|>",
            "<|end|>",
            "<|start|>",
            " to=functions.weather",
            "<think>",
            "</think>",
            "<arg_key>",
            "</arg_key>",
            "<arg_value>",
            "</arg_value>",
            "{",
            "}",
            "[",
            "]",
            ":",
            ",",
            "99999999999",
        ])
    }

    fn run(&self, b: &[u8]) -> Result<String, String> {
        let (mode, rest) = b.split_first().ok_or("empty")?;
        match mode % 4 {
            0 => {
                let schema: serde_json::Value = serde_json::from_slice(rest).map_err(err)?;
                self.follow(&GrammarSpec::JsonSchema(schema))
            }
            1 => self.follow(&GrammarSpec::Lark(
                String::from_utf8_lossy(rest).into_owned(),
            )),
            2 => {
                let params: serde_json::Value = serde_json::from_slice(rest).map_err(err)?;
                let tools = Self::tool(params);
                let mut out = String::new();
                for f in FORMATS {
                    if let Some(g) = f.grammar(&tools, &ToolChoice::Required, &self.tok) {
                        out.push_str(&match self.grammars.compile(&g) {
                            Ok(_) => "ok ".to_string(),
                            Err(e) => err(e),
                        });
                    }
                }
                Ok(out)
            }
            _ => {
                let text = String::from_utf8_lossy(rest);
                let tools = Self::tool(serde_json::json!({"type": "object"}));
                let mut calls = 0;
                for f in FORMATS {
                    let a = f.parse(&text, &tools);
                    // only declared tools count, and arguments are objects
                    assert!(a.calls.iter().all(|c| c.name == "weather"), "{a:?}");
                    assert!(a.calls.iter().all(|c| c.arguments.is_object()), "{a:?}");
                    calls += a.calls.len();
                }
                let (reasoning, _) = think_split_agrees(&text, false);
                think_split_agrees(&text, true);
                let think = if reasoning.is_empty() {
                    ""
                } else {
                    ", reasoning"
                };
                Ok(format!("{} calls{think}", calls.min(4)))
            }
        }
    }
}
