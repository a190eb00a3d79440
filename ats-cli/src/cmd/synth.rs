//! `ats-cli synth`: write a synthetic model (random weights of a real
//! architecture's shapes) for benchmarks.

use std::path::PathBuf;

use anyhow::{Context, Result};
use ats_core::synth::SynthSpec;
use ats_sched::size::fmt_bytes;
use clap::Args;

/// Write a random-weight model of a preset's shapes.
#[derive(Args, Debug)]
pub struct SynthArgs {
    /// tiny, llama-1b, llama-8b, qwen3-8b or qwen3-30b-a3b.
    #[arg(long = "preset")]
    preset: String,
    /// Output file.
    #[arg(short = 'o', long = "out")]
    out: PathBuf,
    /// Random seed.
    #[arg(long = "seed", default_value_t = 1)]
    seed: u64,
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
    let t = std::time::Instant::now();
    if a.zeros {
        spec.write_zeros(&a.out)
    } else {
        spec.write(&a.out, a.seed)
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
