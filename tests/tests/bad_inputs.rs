//! The bad-input matrix of `docs/reliability.md`: each hostile or mistaken
//! input, and what ATS does with it (a typed error that names the thing, or a
//! documented clean outcome), one test per row.

use std::io::Cursor;
use std::sync::Arc;

use ats_core::chat::{ChatError, ChatMessage, ChatTemplate};
use ats_core::device::{Device, KvType};
use ats_core::gguf::{GgufErrorKind, GgufFile, GgufWriter, TensorInfo, Value};
use ats_core::spec::{ModelSpec, SpecError};
use ats_core::tokenizer::{Tokenizer, TokenizerError};
use ats_cpu::CpuDevice;
use ats_sched::config::{Policy, RunConfig};
use ats_sched::session::{GenParams, Session, SessionError, StopReason};
use ats_sched::size::parse_size;
use ats_tests::{default_cost, engine_on, fixtures, host_only, run_config, with_gpu};
use ats_vision::preprocess::{
    DecodeLimits, PreprocessConfig, PreprocessError, decode_image, preprocess_bytes,
};

fn llama_bytes() -> Vec<u8> {
    std::fs::read(fixtures().join("llama/llama-f32.gguf")).unwrap()
}

/// The llama fixture rewritten: `kv` may replace (Some) or drop (None) each
/// metadata value, `data` may replace each tensor's bytes.
fn rewrite(
    kv: impl Fn(&str, &Value) -> Option<Value>,
    data: impl Fn(&TensorInfo, &[u8]) -> Vec<u8>,
) -> Vec<u8> {
    let f = GgufFile::open(fixtures().join("llama/llama-f32.gguf")).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata.iter() {
        if let Some(v) = kv(k, v) {
            w.kv(k, v);
        }
    }
    let mut bytes = Vec::new();
    for t in f.tensors() {
        w.tensor(&t.name, t.ne.clone(), t.dtype().unwrap()).unwrap();
        bytes.push(data(t, f.tensor_data(t)));
    }
    w.to_bytes(&bytes).unwrap()
}

fn keep(_: &str, v: &Value) -> Option<Value> {
    Some(v.clone())
}

fn same(_: &TensorInfo, d: &[u8]) -> Vec<u8> {
    d.to_vec()
}

fn spec_of(bytes: Vec<u8>) -> Result<ModelSpec, SpecError> {
    ModelSpec::from_gguf(Arc::new(GgufFile::from_bytes(bytes)?))
}

fn engine(spec: ModelSpec, n_ctx: usize) -> Session {
    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(2).unwrap());
    engine_on(
        Arc::new(spec),
        host_only(cpu),
        n_ctx,
        KvType::F32,
        Policy::Ats,
        false,
    )
}

fn gguf_err(bytes: Vec<u8>) -> GgufErrorKind {
    let Err(e) = GgufFile::from_bytes(bytes) else {
        panic!("the file must be rejected")
    };
    e.kind
}

#[test]
fn truncated_gguf_names_what_was_cut() {
    let good = llama_bytes();
    for cut in [
        0,
        3,
        4,
        10,
        23,
        24,
        200,
        5000,
        good.len() / 2,
        good.len() - 1,
    ] {
        let kind = gguf_err(good[..cut].to_vec());
        let msg = kind.to_string();
        assert!(
            matches!(
                kind,
                GgufErrorKind::Truncated { .. }
                    | GgufErrorKind::CountTooLarge { .. }
                    | GgufErrorKind::BadTensor { .. }
            ),
            "cut at {cut}: {msg}"
        );
    }
    // from a path, the error names the file
    let dir = std::env::temp_dir().join(format!("ats-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("cut.gguf");
    std::fs::write(&p, &good[..good.len() / 3]).unwrap();
    let e = ModelSpec::open(&p).err().unwrap().to_string();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(e.contains("cut.gguf"), "{e}");
}

#[test]
fn wrong_magic_is_not_a_gguf_file() {
    let mut b = llama_bytes();
    b[..4].copy_from_slice(b"GGML");
    let kind = gguf_err(b);
    assert!(matches!(kind, GgufErrorKind::BadMagic(m) if &m == b"GGML"));
    assert!(kind.to_string().contains("not a GGUF file"));
    // a PNG handed over as a model
    let png = std::fs::read(fixtures().join("vl_images/small.png")).unwrap();
    assert!(matches!(gguf_err(png), GgufErrorKind::BadMagic(_)));
}

/// GGUF header bytes with one tensor of the given dimensions and type.
fn one_tensor(ne: &[u64], ty: u32, data: usize) -> Vec<u8> {
    let mut v = b"GGUF".to_vec();
    v.extend_from_slice(&3u32.to_le_bytes());
    v.extend_from_slice(&1u64.to_le_bytes());
    v.extend_from_slice(&0u64.to_le_bytes());
    v.extend_from_slice(&4u64.to_le_bytes());
    v.extend_from_slice(b"huge");
    v.extend_from_slice(&(ne.len() as u32).to_le_bytes());
    for d in ne {
        v.extend_from_slice(&d.to_le_bytes());
    }
    v.extend_from_slice(&ty.to_le_bytes());
    v.extend_from_slice(&0u64.to_le_bytes());
    v.resize(v.len().next_multiple_of(32) + data, 0);
    v
}

#[test]
fn a_2_pow_62_element_tensor_is_refused_before_any_allocation() {
    for (ne, ty) in [
        (vec![1u64 << 31, 1 << 31], 0u32), // 2^62 f32: 2^64 bytes, overflows
        (vec![1 << 62], 1),                // f16: 2^63 bytes
        (vec![1 << 62], 8),                // q8_0 blocks
        (vec![u64::MAX, 2], 0),            // element count overflows
        (vec![0, 7], 0),                   // zero-sized dimension
    ] {
        let kind = gguf_err(one_tensor(&ne, ty, 64));
        let msg = kind.to_string();
        assert!(
            matches!(kind, GgufErrorKind::BadTensor { ref name, .. } if name == "huge"),
            "{ne:?} type {ty}: {msg}"
        );
    }
    // an unknown type id names the tensor and the id
    let msg = gguf_err(one_tensor(&[32], 99, 64)).to_string();
    assert!(msg.contains("huge") && msg.contains("99"), "{msg}");
}

#[test]
fn nan_weights_stop_generation_with_a_typed_error() {
    let b = rewrite(keep, |t, d| {
        if t.name == "output_norm.weight" {
            d.chunks(4).flat_map(|_| f32::NAN.to_le_bytes()).collect()
        } else {
            d.to_vec()
        }
    });
    let mut e = engine(spec_of(b).unwrap(), 32);
    let ids = e.tokenizer().unwrap().encode("Hello", true, false).unwrap();
    // the forward pass itself reports what it computed
    let logits = e.prefill(&ids, false).unwrap();
    assert!(logits.iter().all(|l| l.is_nan()));
    e.reset();
    let Err(err) = e.generate(&ids, &GenParams::default(), &mut |_| true) else {
        panic!("NaN logits cannot be sampled")
    };
    assert!(
        matches!(err, SessionError::NonFiniteLogits { position } if position == ids.len()),
        "{err}"
    );
}

#[test]
fn a_tokenizer_with_missing_merges_is_a_named_error() {
    let b = rewrite(
        |k, v| (k != "tokenizer.ggml.merges").then(|| v.clone()),
        same,
    );
    let f = GgufFile::from_bytes(b.clone()).unwrap();
    let e = Tokenizer::from_gguf(&f.metadata).err().unwrap();
    assert!(
        matches!(e, TokenizerError::MissingKey { key } if key == "tokenizer.ggml.merges"),
        "{e}"
    );
    // the model still loads (it can run from token ids); asking for text fails with the reason
    let eng = engine(spec_of(b).unwrap(), 16);
    let msg = eng.tokenizer().err().unwrap().to_string();
    assert!(msg.contains("tokenizer.ggml.merges"), "{msg}");
    // merges that name tokens absent from the vocabulary
    let b = rewrite(
        |k, v| {
            Some(if k == "tokenizer.ggml.merges" {
                Value::strings(["zzq qqz", "h e"])
            } else {
                v.clone()
            })
        },
        same,
    );
    let f = GgufFile::from_bytes(b).unwrap();
    let e = Tokenizer::from_gguf(&f.metadata).err().unwrap().to_string();
    assert!(e.contains("merges"), "{e}");
}

#[test]
fn a_chat_template_that_does_not_compile_is_named_when_a_chat_is_asked_for() {
    let b = rewrite(
        |k, v| {
            Some(if k == "tokenizer.chat_template" {
                Value::str("{% for m in messages %}{{ m.content }")
            } else {
                v.clone()
            })
        },
        same,
    );
    // the model loads and runs from text; only the chat template is refused
    let eng = engine(spec_of(b).unwrap(), 16);
    assert!(eng.tokenizer().is_ok());
    let msg = eng.chat_template().err().unwrap().to_string();
    assert!(msg.contains("chat template cannot be used"), "{msg}");
    assert!(msg.contains("syntax"), "the compile error itself: {msg}");
    // a file without one gets ChatML, flagged as a fallback
    let b = rewrite(
        |k, v| (k != "tokenizer.chat_template").then(|| v.clone()),
        same,
    );
    let eng = engine(spec_of(b).unwrap(), 16);
    assert!(eng.chat_template().unwrap().is_fallback());
}

#[test]
fn an_unknown_architecture_is_named() {
    let b = rewrite(
        |k, v| {
            Some(if k == "general.architecture" {
                Value::str("mamba9")
            } else {
                v.clone()
            })
        },
        same,
    );
    let e = spec_of(b).err().unwrap();
    assert!(
        matches!(e, SpecError::UnknownArch(ref a) if a == "mamba9"),
        "{e}"
    );
    assert!(e.to_string().contains("supported: llama"));
    // a missing hyperparameter names the key
    let b = rewrite(|k, v| (k != "llama.block_count").then(|| v.clone()), same);
    let e = spec_of(b).err().unwrap();
    assert!(e.to_string().contains("llama.block_count"), "{e}");
}

#[test]
fn zero_and_absurd_hyperparameters_are_errors() {
    for (key, value) in [
        ("llama.attention.head_count", Value::U32(0)),
        ("llama.attention.head_count_kv", Value::U32(0)),
        ("llama.attention.head_count", Value::U32(7)),
        ("llama.embedding_length", Value::U32(0)),
        ("llama.block_count", Value::U32(1 << 30)),
        ("llama.rope.freq_base", Value::str("fast")),
    ] {
        let b = rewrite(
            |k, v| Some(if k == key { value.clone() } else { v.clone() }),
            same,
        );
        match spec_of(b) {
            Err(e) => assert!(!e.to_string().is_empty()),
            Ok(_) => panic!("{key} = {value:?} must be rejected"),
        }
    }
}

/// Found by the `gguf` libFuzzer target (6 December 2026): a 32 KB gpt-oss
/// header with `block_count` 3 674 210 308 and no tensors made the loader
/// build a sliding-window flag per block (3.6 GB, 5 s) before it noticed
/// the missing tensors. The count is now checked against the file's
/// tensors first, for every architecture.
#[test]
fn a_block_count_beyond_the_files_tensors_is_refused_before_per_block_work() {
    let huge = 3_674_210_308u64;
    let gpt_oss =
        GgufFile::open(ats_tests::repo_fixtures().join("gpt-oss/gpt-oss-f32.gguf")).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in gpt_oss.metadata.iter() {
        let v = if k == "gpt-oss.block_count" {
            Value::U64(huge)
        } else {
            v.clone()
        };
        w.kv(k, v);
    }
    let header_only = w.to_bytes(&[]).unwrap();
    let llama = rewrite(
        |k, v| {
            Some(if k == "llama.block_count" {
                Value::U64(huge)
            } else {
                v.clone()
            })
        },
        same,
    );
    // The key is named (the loader stopped at the block count, which it
    // reads before anything per block; before the fix gpt-oss failed later,
    // on its missing embedding, and llama on its missing block tensors).
    for (arch, bytes) in [("gpt-oss", header_only), ("llama", llama)] {
        match spec_of(bytes) {
            Err(SpecError::BadKey { key, problem }) => {
                assert_eq!(key, format!("{arch}.block_count"), "{problem}");
                assert!(problem.contains("3674210308 blocks"), "{problem}");
            }
            other => panic!("{arch}: {other:?}"),
        }
    }
}

#[test]
fn a_prompt_over_the_context_is_refused_and_the_session_survives() {
    let mut e = engine(spec_of(llama_bytes()).unwrap(), 16);
    let ids: Vec<u32> = (1..=17).collect();
    let err = e.prefill(&ids, false).err().unwrap();
    assert!(matches!(err, SessionError::Input(_)), "{err}");
    assert!(err.to_string().contains("do not fit the context"), "{err}");
    assert_eq!(e.past(), 0, "a refused prompt leaves nothing behind");
    let l = e.prefill(&ids[..16], false).unwrap();
    assert_eq!(l.len(), 512);
    let err = e.decode(1).err().unwrap();
    assert!(err.to_string().contains("do not fit the context"), "{err}");
    assert!(matches!(
        e.prefill(&[], false).err().unwrap(),
        SessionError::Input(_)
    ));
}

#[test]
fn token_ids_outside_the_vocabulary_are_refused() {
    let mut e = engine(spec_of(llama_bytes()).unwrap(), 16);
    for bad in [512u32, 9999, u32::MAX] {
        let Err(err) = e.prefill(&[1, bad], false) else {
            panic!("{bad} is out of range")
        };
        assert!(err.to_string().contains(&bad.to_string()), "{err}");
        assert_eq!(e.past(), 0);
    }
    e.prefill(&[1, 2], false).unwrap();
    assert!(e.decode(u32::MAX).is_err());
    assert_eq!(e.past(), 2);
    // decoding arbitrary ids back to text is an error, not a panic
    let tok = e.tokenizer().unwrap();
    assert!(tok.decode(&[1, u32::MAX]).is_err());
}

#[test]
fn a_huge_max_tokens_stops_at_the_full_context() {
    let n_ctx = 24;
    let mut e = engine(spec_of(llama_bytes()).unwrap(), n_ctx);
    let ids = e.tokenizer().unwrap().encode("Hello", true, false).unwrap();
    let params = GenParams {
        max_tokens: usize::MAX,
        ignore_eos: true,
        ..GenParams::default()
    };
    let g = e.generate(&ids, &params, &mut |_| true).unwrap();
    assert_eq!(g.stop, StopReason::ContextFull);
    // every context slot is used; the last sampled token is returned, not decoded
    assert_eq!(e.past(), n_ctx);
    assert_eq!(g.tokens.len(), n_ctx - ids.len() + 1);
}

#[test]
fn a_zero_context_is_an_error() {
    let spec = Arc::new(spec_of(llama_bytes()).unwrap());
    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(1).unwrap());
    let machine = host_only(cpu);
    let cost = default_cost(&machine);
    let run = run_config(&spec, 0, KvType::F32, Policy::Ats, false);
    let err = Session::new(spec, machine, cost, run).err().unwrap();
    assert!(
        err.to_string()
            .contains("context of 0 tokens is out of range"),
        "{err}"
    );
}

#[test]
fn hostile_chat_templates_end_within_the_default_limits() {
    let msgs = [ChatMessage::text("user", "hi")];
    let render =
        |src: &str| ChatTemplate::new(src, "<s>", "</s>").and_then(|t| t.render(&msgs, true));
    // a loop of 10^10 iterations
    let e =
        render("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}");
    assert!(
        matches!(
            e,
            Err(ChatError::OutOfFuel { .. } | ChatError::OutputTooLarge { .. })
        ),
        "{e:?}"
    );
    // a string of 10^12 bytes
    let e = render("{{ 'x' * 1000000000000 }}");
    assert!(e.is_err(), "{e:?}");
    // doubling a string 64 times
    let e = render(
        "{% set ns = namespace(s='xy') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
    );
    assert!(e.is_err(), "{e:?}");
    // unbounded recursion
    let e = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
    assert!(e.is_err(), "{e:?}");
    // not a template at all
    assert!(matches!(render("{% for %}"), Err(ChatError::Syntax(_))));
    // a template that rejects the conversation says why
    assert!(matches!(
        render("{{ raise_exception('roles must alternate') }}"),
        Err(ChatError::Raised(m)) if m == "roles must alternate"
    ));
}

#[test]
fn a_zero_byte_image_is_empty() {
    assert!(matches!(decode_image(&[]), Err(PreprocessError::Empty)));
    let cfg = PreprocessConfig::default();
    assert!(matches!(
        preprocess_bytes(&[], &cfg, &DecodeLimits::default()),
        Err(PreprocessError::Empty)
    ));
    assert!(matches!(
        decode_image(b"not an image at all"),
        Err(PreprocessError::UnknownFormat { .. })
    ));
}

fn crc32(data: &[u8]) -> u32 {
    let mut c = 0xffff_ffffu32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// A valid 1x1 PNG whose header then claims `w` x `h`: what a decompression
/// bomb looks like to a decoder that trusts its header.
fn png_claiming(w: u32, h: u32) -> Vec<u8> {
    let img = image::RgbImage::from_pixel(1, 1, image::Rgb([9, 9, 9]));
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    let mut b = out.into_inner();
    // IHDR data starts at 16: width, height (BE); its CRC covers type + data
    b[16..20].copy_from_slice(&w.to_be_bytes());
    b[20..24].copy_from_slice(&h.to_be_bytes());
    let crc = crc32(&b[12..29]);
    b[29..33].copy_from_slice(&crc.to_be_bytes());
    b
}

#[test]
fn a_decompression_bomb_png_is_refused_from_its_header() {
    let cfg = PreprocessConfig::default();
    let limits = DecodeLimits::default();
    // 60000 x 60000 = 3.6 Gpx: over max_pixels
    let e = preprocess_bytes(&png_claiming(60_000, 60_000), &cfg, &limits).err();
    assert!(
        matches!(e, Some(PreprocessError::TooLarge { width: 60_000, .. })),
        "{e:?}"
    );
    // 20000 x 20000 RGB = 1.2 GB in memory: a full decode is refused before any pixel...
    let bomb = png_claiming(20_000, 20_000);
    let e = decode_image(&bomb).err();
    assert!(matches!(e, Some(PreprocessError::TooLarge { .. })), "{e:?}");
    // ...and the streaming path (bounded memory) fails on the missing rows
    let e = preprocess_bytes(&bomb, &cfg, &limits).err();
    assert!(
        matches!(
            e,
            Some(PreprocessError::Truncated { .. } | PreprocessError::Corrupt { .. })
        ),
        "{e:?}"
    );
    // tighter limits refuse it outright
    let tight = DecodeLimits {
        max_pixels: 4 << 20,
        ..limits
    };
    assert!(matches!(
        preprocess_bytes(&bomb, &cfg, &tight),
        Err(PreprocessError::TooLarge { .. })
    ));
}

#[test]
fn truncated_and_degenerate_images_are_errors() {
    let png = std::fs::read(fixtures().join("vl_images/small.png")).unwrap();
    let cfg = PreprocessConfig::default();
    let limits = DecodeLimits::default();
    for cut in [8, 20, 40, png.len() / 2, png.len() - 13] {
        assert!(
            preprocess_bytes(&png[..cut], &cfg, &limits).is_err(),
            "cut at {cut}"
        );
    }
    assert!(matches!(
        preprocess_bytes(&png_claiming(0, 5), &cfg, &limits),
        Err(PreprocessError::ZeroSized { .. } | PreprocessError::Corrupt { .. })
    ));
    // a 1 x 400 strip: beyond the aspect ratio the resizer accepts
    let strip = image::RgbImage::from_pixel(1, 400, image::Rgb([1, 2, 3]));
    let mut out = Cursor::new(Vec::new());
    strip.write_to(&mut out, image::ImageFormat::Png).unwrap();
    let e = preprocess_bytes(&out.into_inner(), &cfg, &limits).err();
    assert!(e.is_some_and(|e| e.to_string().contains("aspect")));
}

#[test]
fn sizes_users_get_wrong_are_errors() {
    assert_eq!(parse_size("1K"), Ok(1000));
    for bad in [
        "", "0", "0.1", "-1G", "1e30T", "2X", "NaN", "G", "1..5G", "٣G", "1 G B",
    ] {
        assert!(parse_size(bad).is_err(), "{bad:?}");
    }
    assert_eq!(parse_size("  2 GiB "), Ok(2 << 30));
}

/// `--vram 1K`: parses, then planning says the budget is too small and names
/// the least that works (tests/tests/budget.rs checks that the minimum runs).
#[test]
fn vram_1k_names_the_minimum() {
    use ats_sched::config::ConfigError;
    use ats_sched::planner::{PlanError, Planner};
    use ats_sched::sim::{SimGpu, SimGpuConfig};
    let budget = parse_size("1K").unwrap();
    let spec = spec_of(llama_bytes()).unwrap();
    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(1).unwrap());
    let gpu: Arc<dyn Device> = Arc::new(SimGpu::new(
        cpu.clone(),
        SimGpuConfig {
            memory: budget,
            ..SimGpuConfig::default()
        },
    ));
    let machine = with_gpu(cpu, gpu);
    let cost = || default_cost(&machine);
    let run = run_config(&spec, 64, KvType::F16, Policy::Ats, false);
    let graph = spec.graph().clone();
    // contexts no position can address are refused before any sizing
    // arithmetic (2 x n_ctx x row width once overflowed here)
    for n_ctx in [0, ats_core::round::MAX_CONTEXT + 1, usize::MAX] {
        let bad = RunConfig {
            n_ctx,
            ..run.clone()
        };
        let e = Planner::new(graph.clone(), &machine, cost(), &bad)
            .err()
            .unwrap();
        assert!(
            matches!(e, PlanError::Config(ConfigError::Context(n)) if n == n_ctx),
            "{e}"
        );
    }
    let e = Planner::new(graph, &machine, cost(), &run).err().unwrap();
    assert!(
        matches!(e, PlanError::BudgetTooSmall { budget: 1000, minimum, .. } if minimum > 1000),
        "{e}"
    );
    // the library names the minimum; the CLI adds the flag that gives it
    assert!(e.to_string().contains("the smallest plan needs"), "{e}");
}

/// The incomplete UTF-8 sequence at the end of `bytes`, in bytes (0 if
/// none): the longest suffix (at most 3 bytes) that begins a character
/// and ends before it does.
fn unfinished_tail(bytes: &[u8]) -> usize {
    (1..=3.min(bytes.len()))
        .rev()
        .find(|&k| {
            matches!(std::str::from_utf8(&bytes[bytes.len() - k..]),
                Err(e) if e.valid_up_to() == 0 && e.error_len().is_none())
        })
        .unwrap_or(0)
}

#[test]
fn a_max_tokens_cut_inside_a_character_returns_whole_characters() {
    // a random-weight model sampled hot emits byte tokens, some of them the
    // first bytes of multi-byte characters: find generations a limit cuts there
    let mut e = ats_tests::cpu_engine(&fixtures().join("qwen2/qwen2-f32.gguf"), 64, KvType::F32);
    let tok = e.tokenizer().unwrap().clone();
    let mut cut = 0;
    for seed in 0..300 {
        let mut sampler = ats_core::SamplerConfig {
            temperature: 1.5,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed,
            ..Default::default()
        };
        sampler.repeat_last_n = 0;
        let params = GenParams {
            max_tokens: 1 + (seed as usize % 6),
            sampler,
            stop: vec![],
            ignore_eos: true,
            ..Default::default()
        };
        e.reset();
        let g = e.generate(&[1, 2, 3], &params, &mut |_| true).unwrap();
        let bytes: Vec<u8> = g
            .tokens
            .iter()
            .flat_map(|&t| tok.token_to_piece(t).unwrap().to_vec())
            .collect();
        let tail = unfinished_tail(&bytes);
        let whole = String::from_utf8_lossy(&bytes[..bytes.len() - tail]);
        assert_eq!(g.text, whole, "seed {seed}: only whole characters");
        assert_eq!(g.held_back_bytes, tail, "seed {seed}");
        cut += usize::from(tail > 0);
    }
    assert!(cut > 0, "no generation was cut inside a character");
}

#[test]
fn an_image_wider_than_png_allows_is_named_with_its_size() {
    // PNG caps sides at 2^31 - 1: the decoder refuses before it reports a
    // size, and the message used to say "0x0"
    let e = decode_image(&png_claiming(1 << 31, 7))
        .unwrap_err()
        .to_string();
    assert!(e.contains("2147483648x7"), "{e}");
    assert!(!e.contains("0x0"), "{e}");
}
