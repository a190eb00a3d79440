//! Writes every fuzz target's seeds to `CORPUS/<target>/` and its dictionary
//! to `CORPUS/../dict/<target>.dict`: what `fuzz/seed.sh` runs so that
//! libFuzzer's corpora are reproducible.
//!
//!     cargo run -p ats-tests --example fuzz_seeds -- fuzz/corpus

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ats_tests::fuzz::targets::{
    ChatTemplateTarget, Gguf, ImagePreprocess, SchemaAndTools, ServerRequest, SizeAndOptions,
    Target, TokenizerTarget, write_dict, write_seeds,
};

fn one<T: Target>(root: &Path, dicts: &Path) -> Result<()> {
    let dir = root.join(T::NAME);
    let n = write_seeds::<T>(&dir).with_context(|| format!("writing {}", dir.display()))?;
    let dict = dicts.join(format!("{}.dict", T::NAME));
    write_dict::<T>(&dict).with_context(|| format!("writing {}", dict.display()))?;
    eprintln!("{}: {n} seeds", T::NAME);
    Ok(())
}

fn main() -> Result<()> {
    let root: PathBuf = std::env::args_os()
        .nth(1)
        .context("usage: fuzz_seeds CORPUS_DIR")?
        .into();
    let dicts = root.join("../dict");
    std::fs::create_dir_all(&dicts).with_context(|| format!("creating {}", dicts.display()))?;
    one::<Gguf>(&root, &dicts)?;
    one::<TokenizerTarget>(&root, &dicts)?;
    one::<ChatTemplateTarget>(&root, &dicts)?;
    one::<ImagePreprocess>(&root, &dicts)?;
    one::<SizeAndOptions>(&root, &dicts)?;
    one::<SchemaAndTools>(&root, &dicts)?;
    one::<ServerRequest>(&root, &dicts)
}
