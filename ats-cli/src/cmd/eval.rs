//! `ats-cli eval`: logits for every position, written as safetensors.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use crate::args::ModelArgs;
use crate::cmd::vlm::{ImageArgs, prepare};
use crate::load;
use crate::usage::usage_bail;

/// Write the logits of every position.
#[derive(Args, Debug)]
pub struct EvalArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    image: ImageArgs,
    /// Token ids, comma-separated.
    #[arg(long = "ids", value_delimiter = ',', conflicts_with = "prompt")]
    ids: Vec<u32>,
    /// Text to tokenize instead of ids. With --image it is the user message,
    /// rendered with the chat template and the images before it (as `vlm` does).
    #[arg(short = 'p', long = "prompt")]
    prompt: Option<String>,
    /// Output file (tensor `logits`, f32, shape [n, vocab]; with images also
    /// `input_ids` and `position_ids`, i64).
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    out: PathBuf,
}

pub fn run(a: EvalArgs) -> Result<()> {
    if a.image.mmproj()?.is_some() {
        return run_vlm(a);
    }
    let mut loaded = load::load(&a.model, true)?;
    let session = &mut loaded.session;
    let ids = match &a.prompt {
        Some(p) => session.tokenizer()?.encode(p, true, true)?,
        None => a.ids.clone(),
    };
    if ids.is_empty() {
        usage_bail!("give token ids with --ids 1,2,3 or text with -p");
    }
    let logits = session.eval(&ids)?;
    let vocab = session.spec().hp.n_vocab;
    write_logits(&a.out, &logits, ids.len(), vocab)?;
    tracing::info!(
        "wrote logits [{}, {vocab}] to {}",
        ids.len(),
        a.out.display()
    );
    Ok(())
}

/// Logits of a prompt with images: the VLM path's vision phase, then the
/// language model over the expanded prompt.
fn run_vlm(a: EvalArgs) -> Result<()> {
    if !a.ids.is_empty() {
        usage_bail!("--ids cannot carry images: give the text with -p and the images with --image");
    }
    let text = a.prompt.as_deref().unwrap_or("");
    let mut p = prepare(
        &a.model,
        &a.image,
        text,
        None,
        true,
        crate::logging::quiet(),
    )?;
    let logits = ats_vision::pipeline::eval(&mut p.session, &p.input)?;
    let vocab = p.session.spec().hp.n_vocab;
    let n = p.input.ids.len();
    let ids: Vec<i64> = p.input.ids.iter().map(|&x| x as i64).collect();
    // HF's layout: [3, n], the t, h and w rows
    let pos = &p.input.positions;
    let pos: Vec<i64> = (0..3)
        .flat_map(|c| (0..n).map(move |r| pos.get(r, c) as i64))
        .collect();
    let lb: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
    let ib: Vec<u8> = ids.iter().flat_map(|v| v.to_le_bytes()).collect();
    let pb: Vec<u8> = pos.iter().flat_map(|v| v.to_le_bytes()).collect();
    use safetensors::{Dtype, tensor::TensorView};
    let data = safetensors::serialize(
        [
            ("logits", TensorView::new(Dtype::F32, vec![n, vocab], &lb)?),
            ("input_ids", TensorView::new(Dtype::I64, vec![n], &ib)?),
            (
                "position_ids",
                TensorView::new(Dtype::I64, vec![3, n], &pb)?,
            ),
        ],
        None,
    )?;
    std::fs::write(&a.out, data).with_context(|| format!("cannot write {}", a.out.display()))?;
    if !crate::logging::quiet() {
        eprintln!(
            "ats: wrote logits [{n}, {vocab}] ({} image tokens) to {}",
            p.input.embeds.rows.len(),
            a.out.display()
        );
    }
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
