//! `ats-cli synth`: write a synthetic model (random weights of a real
//! architecture's shapes) for benchmarks.

use std::path::PathBuf;

use anyhow::{Context, Result};
use ats_core::gguf::GgufFile;
use ats_core::synth::{DonorVocab, SynthSpec};
use ats_sched::size::fmt_bytes;
use clap::Args;

/// Write a random-weight model of a preset's shapes.
#[derive(Args, Debug)]
pub struct SynthArgs {
    /// tiny, tiny-glm4moe, llama-1b, llama-8b, qwen3-8b, qwen3-30b-a3b or glm4.5-air.
    #[arg(long = "preset")]
    preset: String,
    /// Output file.
    #[arg(short = 'o', long = "out")]
    out: PathBuf,
    /// Random seed.
    #[arg(long = "seed", default_value_t = 1)]
    seed: u64,
    /// Copy the tokenizer (and vocabulary size) of this model, so the file
    /// runs from text and llama.cpp can load it.
    #[arg(long = "vocab-from", value_name = "DONOR.gguf")]
    vocab_from: Option<PathBuf>,
    /// All-zero weights in a sparse file (no disk, instant): for
    /// `--sim-machine ...,compute=off` runs, which never read a weight.
    #[arg(long = "zeros")]
    zeros: bool,
}

pub fn run(a: SynthArgs) -> Result<()> {
    let Some(spec) = SynthSpec::preset(&a.preset) else {
        crate::usage::usage_bail!(
            "unknown preset {:?} (one of {:?})",
            a.preset,
            SynthSpec::PRESETS
        );
    };
    let vocab = match &a.vocab_from {
        Some(p) => {
            let donor =
                GgufFile::open(p).with_context(|| format!("cannot read {}", p.display()))?;
            Some(DonorVocab::from_gguf(&donor)?)
        }
        None => None,
    };
    let spec = match &vocab {
        Some(v) => spec.with_vocab(v),
        None => spec,
    };
    let t = std::time::Instant::now();
    if a.zeros {
        spec.write_zeros(&a.out, vocab.as_ref())
    } else {
        spec.write_with(&a.out, a.seed, vocab.as_ref())
    }
    .with_context(|| format!("cannot write {}", a.out.display()))?;
    println!(
        "wrote {} ({} parameters, {}) in {:.1} s",
        a.out.display(),
        spec.n_params(),
        fmt_bytes(spec.weight_bytes()?),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
