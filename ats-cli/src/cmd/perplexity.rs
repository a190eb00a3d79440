//! `ats-cli perplexity`: llama.cpp's method — non-overlapping chunks of
//! `-c` tokens, each from an empty cache, scoring the second half of each.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;
use tracing::info;

use crate::args::ModelArgs;
use crate::load;
use crate::usage::usage_bail;

/// Measure perplexity over a text file.
#[derive(Args, Debug)]
pub struct PerplexityArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The text (UTF-8).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    file: PathBuf,
    /// Stop after this many chunks.
    #[arg(long = "chunks")]
    chunks: Option<usize>,
}

/// Negative log-likelihood of `target` under softmax(`logits`), in f64.
pub fn nll(logits: &[f32], target: usize) -> f64 {
    let mx = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let z: f64 = logits.iter().map(|&x| (x as f64 - mx).exp()).sum();
    -(logits[target] as f64 - mx - z.ln())
}

pub fn run(mut a: PerplexityArgs) -> Result<()> {
    let text = crate::cmd::run::prompt_text(&None, &Some(a.file.clone()))?;
    let n_ctx = a.model.ctx.unwrap_or(512);
    if n_ctx < 2 {
        usage_bail!("-c must be at least 2 for perplexity");
    }
    a.model.ctx = Some(n_ctx);
    let mut loaded = load::load(&a.model, true)?;
    let session = &mut loaded.session;
    let tok = session.tokenizer()?.clone();
    let tokens = tok.encode(&text, true, false)?;
    let mut n_chunks = tokens.len() / n_ctx;
    if let Some(c) = a.chunks {
        n_chunks = n_chunks.min(c);
    }
    if n_chunks == 0 {
        bail!(
            "{} tokens: need at least -c {n_ctx} tokens of text",
            tokens.len()
        );
    }
    let vocab = session.spec().hp.n_vocab;
    let first = n_ctx / 2;
    info!(
        "perplexity over {n_chunks} chunks of {n_ctx} tokens ({} tokens in the file)",
        tokens.len()
    );
    let (mut sum, mut sum2, mut count) = (0.0f64, 0.0f64, 0usize);
    let t0 = std::time::Instant::now();
    for c in 0..n_chunks {
        let mut chunk = tokens[c * n_ctx..(c + 1) * n_ctx].to_vec();
        if tok.add_bos()
            && let Some(b) = tok.bos_id()
        {
            chunk[0] = b;
        }
        let logits = session.eval(&chunk)?;
        for j in first..n_ctx - 1 {
            let l = nll(&logits[j * vocab..(j + 1) * vocab], chunk[j + 1] as usize);
            sum += l;
            sum2 += l * l;
            count += 1;
        }
        print!("[{}]{:.4},", c + 1, (sum / count as f64).exp());
        std::io::stdout().flush()?;
    }
    let mean = sum / count as f64;
    let var = (sum2 / count as f64 - mean * mean).max(0.0);
    let ppl = mean.exp();
    let err = ppl * (var / (count as f64 - 1.0).max(1.0)).sqrt();
    println!();
    println!("Final estimate: PPL = {ppl:.4} +/- {err:.5}");
    info!(
        "{:.2} s, {:.1} tokens/s",
        t0.elapsed().as_secs_f64(),
        (n_chunks * n_ctx) as f64 / t0.elapsed().as_secs_f64()
    );
    Ok(())
}
