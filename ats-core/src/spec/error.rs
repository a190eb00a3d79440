//! Errors of model specification loading.

use crate::dtype::DTypeError;
use crate::gguf::GgufError;

/// A model file ATS cannot run, with the key or tensor at fault.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(
        "unsupported architecture {0:?} (supported: llama, qwen2, qwen3, qwen3moe, qwen2vl, gpt-oss)"
    )]
    UnknownArch(String),
    #[error("missing metadata key {0:?}")]
    MissingKey(String),
    #[error("metadata key {key:?}: {problem}")]
    BadKey { key: String, problem: String },
    #[error("missing tensor {0:?}")]
    MissingTensor(String),
    #[error("tensor {name:?} has shape {found:?} (ggml order), expected {expected:?}")]
    BadShape {
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    #[error("tensor {name:?}: {source}")]
    TensorType { name: String, source: DTypeError },
    #[error("{0}")]
    Unsupported(String),
}
