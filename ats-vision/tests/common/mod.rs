//! Paths shared by the preprocessing tests.
#![allow(dead_code)] // each test binary uses a subset

use std::path::{Path, PathBuf};

/// The workspace root: the nearest ancestor of this crate whose Cargo.toml declares `[workspace]`.
pub fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .find(|d| {
            std::fs::read_to_string(d.join("Cargo.toml")).is_ok_and(|t| t.contains("[workspace]"))
        })
        .expect("no workspace Cargo.toml above the crate")
        .to_path_buf()
}

/// `shared/fixtures/vl_images`, next to the workspace root.
pub fn vl_images() -> PathBuf {
    workspace_root().join("../shared/fixtures/vl_images")
}

/// This crate's `test-data/preprocess`.
pub fn test_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("test-data/preprocess")
}

/// Reads a file, naming it on failure.
pub fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}
