//! Fuzz targets for every parser of untrusted input that ATS owns: GGUF files
//! (through the model spec, the tokenizer, the chat template and a CPU
//! forward pass), the tokenizer on arbitrary bytes and token ids, hostile chat
//! templates, image bytes through preprocessing, and size / option strings.
//!
//! Each target runs for `ATS_FUZZ_SECS` (20 s by default); a long run is
//! `ATS_FUZZ_SECS=600 cargo test -p ats-tests --test fuzz -- --nocapture`.
//! See `docs/reliability.md` for the figures of the last long run.

use std::io::Cursor;
use std::sync::{Arc, OnceLock};

use ats_core::chat::{CHATML_TEMPLATE, ChatLimits, ChatMessage, ChatTemplate, ContentPart};
use ats_core::device::{Device, KvType};
use ats_core::dtype::DType;
use ats_core::gguf::{GgufFile, GgufWriter, Value, ValueType};
use ats_core::spec::ModelSpec;
use ats_core::synth::SynthSpec;
use ats_core::tokenizer::Tokenizer;
use ats_cpu::CpuDevice;
use ats_sched::config::Policy;
use ats_sched::size::parse_size;
use ats_tests::fuzz::{class_of, fuzz};
use ats_tests::{fixtures, host_only, try_engine_on};
use ats_vision::preprocess::{DecodeLimits, PreprocessConfig, preprocess_bytes};

fn err<E: std::fmt::Debug>(e: E) -> String {
    class_of(&format!("{e:?}"))
}

fn words(list: &[&str]) -> Vec<Vec<u8>> {
    list.iter().map(|s| s.as_bytes().to_vec()).collect()
}

/// The llama fixture's metadata (tokenizer, chat template, hyperparameters)
/// with no tensors: a 20 KB file whose every byte is parser input.
fn metadata_only_gguf() -> Vec<u8> {
    let f = GgufFile::open(fixtures().join("llama/llama-f32.gguf")).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata.iter() {
        w.kv(k, v.clone());
    }
    w.to_bytes(&[]).unwrap()
}

/// The gpt-oss fixture's metadata with no tensors: YaRN, the sliding
/// window, the o200k pre-tokenizer and the harmony template as parser input.
fn gpt_oss_metadata_only_gguf() -> Vec<u8> {
    let path = ats_tests::repo_fixtures().join("gpt-oss/gpt-oss-f32.gguf");
    let f = GgufFile::open(path).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata.iter() {
        w.kv(k, v.clone());
    }
    w.to_bytes(&[]).unwrap()
}

/// gpt-oss's own chat template, from the gpt-oss fixture.
fn gpt_oss_template() -> Vec<u8> {
    let path = ats_tests::repo_fixtures().join("gpt-oss/gpt-oss-f32.gguf");
    let f = GgufFile::open(path).unwrap();
    let t = f.metadata.get_str("tokenizer.chat_template").unwrap();
    t.as_bytes().to_vec()
}

/// A complete llama model small enough to run per input: F32, 1 layer,
/// hidden 32, vocabulary 64.
fn micro_model_gguf() -> Vec<u8> {
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
    let dir = std::env::temp_dir().join(format!("ats-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("micro.gguf");
    s.write(&p, 3).unwrap();
    let b = std::fs::read(&p).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    b
}

/// Every value type, nested arrays, version 2, a quantised tensor.
fn all_values_gguf() -> Vec<u8> {
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
#[test]
fn fuzz_gguf() {
    let seeds = vec![
        all_values_gguf(),
        metadata_only_gguf(),
        gpt_oss_metadata_only_gguf(),
        micro_model_gguf(),
        std::fs::read(fixtures().join("dequant/dequant.gguf")).unwrap(),
    ];
    let dict = words(&[
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
    ]);
    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(1).unwrap());
    let mut ran = 0u64;
    let report = fuzz("gguf", seeds, dict, 1 << 20, |b| {
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
                    host_only(cpu.clone()),
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
                        ran += 1;
                        "ran".to_string()
                    }
                    Err(e) => err(e),
                }
            }
            Ok(_) => "ok".to_string(),
            Err(e) => err(e),
        };
        Ok(format!("spec {spec} | tokenizer {tok} | chat {chat}"))
    });
    eprintln!("fuzz gguf: {ran} inputs ran a forward pass");
    assert!(report.accepted > 0 && ran > 0);
}

fn llama_tokenizer() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let f = GgufFile::open(fixtures().join("llama/llama-f32.gguf")).unwrap();
        Tokenizer::from_gguf(&f.metadata).unwrap()
    })
}

/// Arbitrary bytes as (lossy) text through encode, and as token ids (in and
/// out of range) through decode and the streaming detokenizer. Text without
/// special tokens must round-trip exactly (byte-level BPE loses nothing).
#[test]
fn fuzz_tokenizer() {
    let tok = llama_tokenizer();
    let cases: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("tokenizer/cases.json")).unwrap())
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
    seeds.push(b"\x02\x00\x00\x00\x00\x01\x00\x00\x00\xff\xff\xff\xff\x00\x02\x00\x00".to_vec());
    seeds.push(b"\x03\xf0\x9f\xa6\x80\xe2\x82\xac\xc3\xa9\xff\xfe\x80".to_vec());
    let dict = words(&[
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
    ]);
    let n = tok.vocab_size() as u32;
    let report = fuzz("tokenizer", seeds, dict, 4096, |b| {
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
                let mut streamed = String::new();
                let mut ok = true;
                for &id in &ids {
                    match stream.push(id) {
                        Ok(s) => streamed.push_str(&s),
                        Err(_) => {
                            ok = false;
                            break;
                        }
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
    });
    assert!(report.accepted > 0);
}

/// Hostile templates: loops, huge repeats, deep recursion, garbage. Every
/// render ends within the fuel and the output cap, with a typed error or text.
#[test]
fn fuzz_chat_template() {
    let limits = ChatLimits {
        fuel: 100_000,
        max_output_bytes: 1 << 16,
    };
    let seeds = vec![
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
    ];
    let dict = words(&[
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
    ]);
    let msgs = vec![
        ChatMessage::text("system", "be brief"),
        ChatMessage::new(
            "user",
            vec![ContentPart::Image, ContentPart::Text("what is it?".into())],
        ),
        ChatMessage::text("assistant", "a cat"),
    ];
    let report = fuzz("chat_template", seeds, dict, 4096, |b| {
        let src = String::from_utf8_lossy(b);
        let t = ChatTemplate::new(src, "<s>", "</s>")
            .map_err(err)?
            .with_limits(limits);
        let out = t.render(&msgs, true).map_err(err)?;
        assert!(out.len() <= limits.max_output_bytes);
        Ok(String::new())
    });
    assert!(report.accepted > 0);
}

/// Image bytes of every format ATS decodes, re-encoded from the fixture
/// images, then mutated; decode limits small enough that no input can cost
/// more than a few tens of MB or milliseconds.
#[test]
fn fuzz_image_preprocess() {
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
    let dict = words(&[
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
    ]);
    let cfg = PreprocessConfig::default();
    let limits = DecodeLimits {
        max_side: 8192,
        max_pixels: 4 << 20,
        max_alloc: 32 << 20,
    };
    let report = fuzz("image_preprocess", seeds, dict, 1 << 18, |b| {
        let pv = preprocess_bytes(b, &cfg, &limits).map_err(err)?;
        let [t, h, w] = pv.grid_thw;
        assert_eq!(pv.n_patches, t * h * w);
        assert_eq!(pv.data.len(), pv.n_patches * pv.row_len);
        assert!(pv.data.iter().all(|v| v.is_finite()));
        Ok(format!("{t}x{h}x{w}"))
    });
    assert!(report.accepted > 0);
}

/// Size strings (`--vram`, `--sim-gpu mem=`), policies and `--sim-gpu` specs.
/// A parsed size is at least one byte, and plain byte counts parse exactly.
#[test]
fn fuzz_size_and_options() {
    let seeds = words(&[
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
    ]);
    let dict = words(&[
        "K", "KiB", "M", "MiB", "G", "GiB", "T", "TiB", "B", ".", "e", "-", "+", " ", "\u{a0}",
        "٣", "NaN", "inf", "mem=", ",", ";", ":", "=",
    ]);
    let report = fuzz("size_and_options", seeds, dict, 256, |b| {
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
    });
    assert!(report.accepted > 0);
}
