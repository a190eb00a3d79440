//! `ats-cli inspect`: what a GGUF file holds.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use ats_core::gguf::GgufFile;
use ats_core::spec::ModelSpec;
use ats_sched::size::fmt_bytes;
use clap::Args;

/// Describe a GGUF file.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The file.
    file: PathBuf,
    /// One line per tensor.
    #[arg(long = "tensors")]
    tensors: bool,
    /// Every metadata key.
    #[arg(long = "metadata")]
    metadata: bool,
}

pub fn run(a: InspectArgs) -> Result<()> {
    let f = GgufFile::open(&a.file).with_context(|| format!("cannot read {}", a.file.display()))?;
    println!(
        "file:          {} ({})",
        a.file.display(),
        fmt_bytes(f.file_len())
    );
    println!(
        "format:        GGUF v{}, {} metadata keys, {} tensors, alignment {}",
        f.version,
        f.metadata.len(),
        f.tensors().len(),
        f.alignment
    );
    println!("architecture:  {}", f.architecture().unwrap_or("(none)"));
    if let Some(n) = f.metadata.get_str("general.name") {
        println!("name:          {n}");
    }
    if let Some(arch) = f.architecture() {
        let prefix = format!("{arch}.");
        for (k, v) in f.metadata.iter().filter(|(k, _)| k.starts_with(&prefix)) {
            println!("  {:<40} {v}", &k[prefix.len()..]);
        }
    }
    let tok_model = f.metadata.get_str("tokenizer.ggml.model");
    let n_tokens = f
        .metadata
        .get_array("tokenizer.ggml.tokens")
        .map_or(0, |a| a.len());
    let n_merges = f
        .metadata
        .get_array("tokenizer.ggml.merges")
        .map_or(0, |a| a.len());
    match tok_model {
        Some(m) => println!(
            "tokenizer:     {m} (pre {}), {n_tokens} tokens, {n_merges} merges, bos {:?}, eos {:?}, add_bos {:?}, chat template: {}",
            f.metadata.get_str("tokenizer.ggml.pre").unwrap_or("-"),
            f.metadata.get_u64("tokenizer.ggml.bos_token_id"),
            f.metadata.get_u64("tokenizer.ggml.eos_token_id"),
            f.metadata.get_bool("tokenizer.ggml.add_bos_token"),
            if f.metadata.get_str("tokenizer.chat_template").is_some() {
                "yes"
            } else {
                "no"
            }
        ),
        None => println!("tokenizer:     none"),
    }
    let mut by_type: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
    for t in f.tensors() {
        let e = by_type.entry(t.type_name).or_default();
        e.0 += 1;
        e.1 += t.bytes;
    }
    let total: u64 = f.tensors().iter().map(|t| t.bytes).sum();
    let params: u64 = f.tensors().iter().map(|t| t.n_elements()).sum();
    println!(
        "tensors:       {} ({} parameters), {}",
        f.tensors().len(),
        params,
        fmt_bytes(total)
    );
    for (ty, (n, b)) in &by_type {
        println!("  {ty:<8} {n:>5} tensors {:>12}", fmt_bytes(*b));
    }
    match ModelSpec::from_gguf(std::sync::Arc::new(GgufFile::open(&a.file)?)) {
        Ok(s) => println!(
            "runnable:      yes ({:?}, {} layers, hidden {}, {} heads / {} KV heads, vocab {})",
            s.arch, s.hp.n_layer, s.hp.n_embd, s.hp.n_head, s.hp.n_head_kv, s.hp.n_vocab
        ),
        Err(e) => println!("runnable:      no: {e}"),
    }
    if a.metadata {
        for (k, v) in f.metadata.iter() {
            println!("{k} = {v}");
        }
    }
    if a.tensors {
        for t in f.tensors() {
            println!(
                "{:<40} {:<8} {:>20} {:>12} @{}",
                t.name,
                t.type_name,
                format!("{:?}", t.shape()),
                fmt_bytes(t.bytes),
                t.file_offset
            );
        }
    }
    Ok(())
}
