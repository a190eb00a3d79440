//! Finding the shared fixtures and the SmolLM2 model from a test.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The workspace root: the first ancestor of this crate with a `[workspace]` manifest.
pub fn workspace_root() -> PathBuf {
    let mut dir = Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf();
    loop {
        let manifest = dir.join("Cargo.toml");
        if std::fs::read_to_string(&manifest).is_ok_and(|s| s.contains("[workspace]")) {
            return dir;
        }
        assert!(
            dir.pop(),
            "no workspace Cargo.toml above {}",
            env!("CARGO_MANIFEST_DIR")
        );
    }
}

/// `../shared` next to the workspace.
pub fn shared() -> PathBuf {
    workspace_root().join("../shared")
}

/// The fixtures directory.
pub fn fixtures() -> PathBuf {
    shared().join("fixtures")
}

const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The SmolLM2 GGUF: from `$ATS_MODELS` or `~/.cache/ats/models`, fetched
/// once with the shared script when absent. None (with the reason printed)
/// when it cannot be had.
pub fn smollm2() -> Option<PathBuf> {
    static PATH: OnceLock<Option<PathBuf>> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = match std::env::var_os("ATS_MODELS") {
            Some(d) => PathBuf::from(d),
            None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/ats/models"),
        };
        let path = dir.join(SMOLLM2);
        if path.is_file() {
            return Some(path);
        }
        let script = shared().join("scripts/fetch-smollm2.sh");
        let out = std::process::Command::new("bash").arg(&script).output();
        match out {
            Ok(o) if o.status.success() => {
                let stdout = String::from_utf8_lossy(&o.stdout);
                let fetched = PathBuf::from(stdout.lines().last().unwrap_or("").trim());
                if fetched.is_file() {
                    Some(fetched)
                } else {
                    eprintln!(
                        "SmolLM2 not available: {} printed no model path",
                        script.display()
                    );
                    None
                }
            }
            Ok(o) => {
                eprintln!(
                    "SmolLM2 not available: {} failed: {}",
                    script.display(),
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!(
                    "SmolLM2 not available: cannot run {}: {e}",
                    script.display()
                );
                None
            }
        }
    })
    .clone()
}
