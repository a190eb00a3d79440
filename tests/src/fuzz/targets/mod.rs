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

mod chat_template;
mod gguf;
mod image_preprocess;
mod schema_and_tools;
mod server_request;
mod size_and_options;
mod tokenizer;

pub use chat_template::ChatTemplateTarget;
pub use gguf::{Gguf, all_values_gguf, micro_model_gguf};
pub use image_preprocess::ImagePreprocess;
pub use schema_and_tools::SchemaAndTools;
pub use server_request::ServerRequest;
pub use size_and_options::SizeAndOptions;
pub use tokenizer::TokenizerTarget;

use ats_core::gguf::GgufFile;
use ats_core::tokenizer::Tokenizer;

use super::class_of;
use crate::fixtures;

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

/// The llama fixture's tokenizer (byte-level BPE, ChatML specials).
pub fn llama_tokenizer() -> Tokenizer {
    let f = GgufFile::open(fixtures().join("llama/llama-f32.gguf")).unwrap();
    Tokenizer::from_gguf(&f.metadata).unwrap()
}
