//! `ats-cli eval`: logits for every position, written as safetensors.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use crate::args::ModelArgs;
use crate::load;
use crate::usage::usage_bail;

/// Write the logits of every position.
#[derive(Args, Debug)]
pub struct EvalArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Token ids, comma-separated.
    #[arg(long = "ids", value_delimiter = ',', conflicts_with = "prompt")]
    ids: Vec<u32>,
    /// Text to tokenize instead of ids.
    #[arg(short = 'p', long = "prompt")]
    prompt: Option<String>,
    /// Output file (tensor `logits`, f32, shape [n, vocab]).
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    out: PathBuf,
}

pub fn run(a: EvalArgs) -> Result<()> {
    let mut loaded = load::load(&a.model, true)?;
    let engine = &mut loaded.engine;
    let ids = match &a.prompt {
        Some(p) => engine.tokenizer()?.encode(p, true, true)?,
        None => a.ids.clone(),
    };
    if ids.is_empty() {
        usage_bail!("give token ids with --ids 1,2,3 or text with -p");
    }
    let logits = engine.eval(&ids)?;
    let vocab = engine.spec().hp.n_vocab;
    write_logits(&a.out, &logits, ids.len(), vocab)?;
    tracing::info!(
        "wrote logits [{}, {vocab}] to {}",
        ids.len(),
        a.out.display()
    );
    Ok(())
}

/// Writes `[n, vocab]` f32 logits as the safetensors tensor `logits`.
pub fn write_logits(path: &PathBuf, logits: &[f32], n: usize, vocab: usize) -> Result<()> {
    let bytes: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![n, vocab], &bytes)?;
    let data = safetensors::serialize([("logits", view)], None)?;
    std::fs::write(path, data).with_context(|| format!("cannot write {}", path.display()))
}
