//! Errors of the GGUF reader and writer.

use std::path::PathBuf;

/// A GGUF file that cannot be read, with the file it came from.
#[derive(Debug, thiserror::Error)]
#[error("{}: {kind}", path.display())]
pub struct GgufError {
    /// The file (or `<memory>` for in-memory bytes).
    pub path: PathBuf,
    /// What is wrong.
    pub kind: GgufErrorKind,
}

/// What is wrong with a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum GgufErrorKind {
    #[error("cannot open or map the file: {0}")]
    Io(#[from] std::io::Error),
    #[error("not a GGUF file (magic {0:02x?}, expected \"GGUF\")")]
    BadMagic([u8; 4]),
    #[error("GGUF version {0} is not supported (only 2 and 3)")]
    UnsupportedVersion(u32),
    #[error(
        "file truncated while reading {what} at byte {offset} (need {need} bytes, file has {len})"
    )]
    Truncated {
        what: String,
        offset: u64,
        need: u64,
        len: u64,
    },
    #[error("{what} count {count} cannot fit in the {remaining} bytes left in the file")]
    CountTooLarge {
        what: String,
        count: u64,
        remaining: u64,
    },
    #[error("metadata key {key:?}: unknown value type {tag}")]
    BadValueType { key: String, tag: u32 },
    #[error("metadata key {key:?}: nested arrays deeper than {max} levels")]
    TooDeep { key: String, max: usize },
    #[error("{what} is not valid UTF-8")]
    BadUtf8 { what: String },
    #[error("duplicate metadata key {0:?}")]
    DuplicateKey(String),
    #[error("duplicate tensor name {0:?}")]
    DuplicateTensor(String),
    #[error("metadata key {key:?}: {problem}")]
    BadKey { key: String, problem: String },
    #[error("tensor {name:?}: {problem}")]
    BadTensor { name: String, problem: String },
    #[error("tensor {name:?}: {source}")]
    TensorType {
        name: String,
        source: crate::dtype::DTypeError,
    },
}

impl GgufError {
    pub(crate) fn new(path: impl Into<PathBuf>, kind: GgufErrorKind) -> Self {
        GgufError {
            path: path.into(),
            kind,
        }
    }
}
