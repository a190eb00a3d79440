//! Stable-toolchain smoke run of the fuzz targets: every parser of untrusted
//! input that ATS owns (GGUF files through the model spec, the tokenizer, the
//! chat template and a CPU forward pass; the tokenizer on arbitrary bytes and
//! token ids; hostile chat templates; image bytes through preprocessing; size
//! and option strings; response-format schemas, grammars and tool calls;
//! the server's request bodies through every endpoint's checks and prompt
//! builder).
//!
//! The target bodies live in `ats_tests::fuzz::targets`, shared with the
//! coverage-guided libFuzzer targets in `fuzz/` (the main fuzzer, nightly);
//! this file drives them with the seeded mutation loop of
//! `ats_tests::fuzz` so CI needs no nightly. Each target runs for
//! `ATS_FUZZ_SECS` (20 s by default). See `docs/reliability.md`.

use std::sync::atomic::Ordering;

use ats_tests::fuzz::targets::{
    ChatTemplateTarget, Gguf, ImagePreprocess, SchemaAndTools, ServerRequest, SizeAndOptions,
    Target, TokenizerTarget, smoke,
};

#[test]
fn fuzz_gguf() {
    let (t, report) = smoke::<Gguf>();
    let ran = t.ran.load(Ordering::Relaxed);
    eprintln!("fuzz gguf: {ran} inputs ran a forward pass");
    assert!(report.accepted > 0 && ran > 0);
}

#[test]
fn fuzz_tokenizer() {
    assert!(smoke::<TokenizerTarget>().1.accepted > 0);
}

#[test]
fn fuzz_chat_template() {
    assert!(smoke::<ChatTemplateTarget>().1.accepted > 0);
}

#[test]
fn fuzz_image_preprocess() {
    assert!(smoke::<ImagePreprocess>().1.accepted > 0);
}

#[test]
fn fuzz_size_and_options() {
    assert!(smoke::<SizeAndOptions>().1.accepted > 0);
}

#[test]
fn fuzz_schema_and_tools() {
    assert!(smoke::<SchemaAndTools>().1.accepted > 0);
}

#[test]
fn fuzz_server_request() {
    assert!(smoke::<ServerRequest>().1.accepted > 0);
}

/// Every seed of every target runs without a panic (what libFuzzer runs
/// first, from `fuzz/seed.sh`'s corpus), and each target accepts one.
#[test]
fn every_seed_runs() {
    fn all<T: Target>() {
        let t = T::new();
        let ok = T::seeds().iter().filter(|s| t.run(s).is_ok()).count();
        assert!(ok > 0, "{}: no seed accepted", T::NAME);
    }
    all::<Gguf>();
    all::<TokenizerTarget>();
    all::<ChatTemplateTarget>();
    all::<ImagePreprocess>();
    all::<SizeAndOptions>();
    all::<SchemaAndTools>();
    all::<ServerRequest>();
}
