//! Errors of the vision encoder and the VLM pipeline.

use std::path::PathBuf;

use ats_core::dtype::DTypeError;
use ats_core::gguf::GgufError;

use crate::preprocess::PreprocessError;

/// Why an mmproj file, an image or a VLM request cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum VisionError {
    /// The mmproj file cannot be read.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// The file is not a vision projector.
    #[error(
        "{file}: not a vision projector (general.architecture is {found:?}, expected \"clip\" with a vision encoder)"
    )]
    NotMmproj {
        /// The file.
        file: PathBuf,
        /// What the file says it is.
        found: String,
    },
    /// A projector type ATS does not run.
    #[error(
        "{file}: unsupported projector type {found:?} (supported: qwen2vl_merger, qwen2.5vl_merger)"
    )]
    UnsupportedProjector {
        /// The file.
        file: PathBuf,
        /// `clip.projector_type`.
        found: String,
    },
    /// A required key is missing.
    #[error("{file}: missing metadata key {key:?}")]
    MissingKey {
        /// The file.
        file: PathBuf,
        /// The key.
        key: String,
    },
    /// A key has an unusable value.
    #[error("{file}: metadata key {key:?}: {problem}")]
    BadKey {
        /// The file.
        file: PathBuf,
        /// The key.
        key: String,
        /// What is wrong.
        problem: String,
    },
    /// A required tensor is missing.
    #[error("{file}: missing tensor {name:?}")]
    MissingTensor {
        /// The file.
        file: PathBuf,
        /// Tensor name.
        name: String,
    },
    /// A tensor has the wrong shape.
    #[error("{file}: tensor {name:?} has shape {found:?} (ggml order), expected {expected:?}")]
    BadShape {
        /// The file.
        file: PathBuf,
        /// Tensor name.
        name: String,
        /// Expected GGML dimensions.
        expected: Vec<usize>,
        /// Found GGML dimensions.
        found: Vec<usize>,
    },
    /// A tensor has an unknown element type.
    #[error("{file}: tensor {name:?}: {source}")]
    TensorType {
        /// The file.
        file: PathBuf,
        /// Tensor name.
        name: String,
        /// The type error.
        source: DTypeError,
    },
    /// A model feature this encoder does not implement.
    #[error("{file}: {what}")]
    Unsupported {
        /// The file.
        file: PathBuf,
        /// What is not supported.
        what: String,
    },
    /// The mmproj does not belong to the language model.
    #[error("the mmproj {mmproj} does not belong to the language model {model}: {problem}")]
    Mismatch {
        /// The projector file.
        mmproj: PathBuf,
        /// The language model file.
        model: PathBuf,
        /// What differs.
        problem: String,
    },
    /// An image could not be turned into pixel values.
    #[error("{image}: {source}")]
    Image {
        /// The image (file name or description).
        image: String,
        /// Why.
        source: PreprocessError,
    },
    /// Pixel values that do not fit the encoder.
    #[error("image grid {grid:?}: {problem}")]
    BadGrid {
        /// (t, h, w) in patches.
        grid: [usize; 3],
        /// What is wrong.
        problem: String,
    },
    /// Running the encoder failed (including a device budget refusing memory).
    #[error("vision encoder: {0}")]
    Exec(#[from] ats_sched::exec::ExecError),
    /// The encoder cannot fit the memory it is given.
    #[error("vision encoder on {device}: {problem}")]
    Memory {
        /// The device.
        device: String,
        /// What does not fit.
        problem: String,
    },
    /// A bad request (prompt, template, tokenizer).
    #[error("{0}")]
    Input(String),
    /// The language model failed.
    #[error(transparent)]
    Session(#[from] ats_sched::session::SessionError),
}
