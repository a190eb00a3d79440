//! `ats-vision`: Qwen2-VL and Qwen2.5-VL vision encoders from an mmproj GGUF,
//! and the VLM pipeline that feeds their image embeddings to the language model.
//!
//! - [`preprocess`]: image bytes to pixel rows exactly as HF's processor.
//! - [`VisionSpec`]: the projector, its hyperparameters, its checked tensors.
//! - [`qwen2vl`](mod@qwen2vl) / [`qwen25vl`](mod@qwen25vl): the vision graph of each
//!   architecture, top to bottom; [`windows`] and [`positions`] the layouts they use.
//! - [`VisionEncoder`]: runs the graph on the CPU or a GPU (weights streamed
//!   from host memory), flash attention with a Q chunk chosen from the budget.
//! - [`Vlm`]: prompt, image-pad expansion, M-RoPE positions, encode, free,
//!   then the language engine.

pub mod cache;
pub mod encoder;
mod error;
pub mod graph;
pub mod pipeline;
pub mod positions;
pub mod preprocess;
pub mod qwen25vl;
pub mod qwen2vl;
pub mod spec;
pub mod windows;

pub use cache::{CacheStats, EmbeddingCache, ImageKey};
pub use encoder::{
    EncodePlan, EncodeStats, EncoderConfig, EncoderDevice, ImageEmbedding, VisionEncoder,
};
pub use error::VisionError;
pub use graph::VisionGraph;
pub use pipeline::{VisionPhase, Vlm, VlmInput};
pub use spec::{ImageTokenIds, Projector, VisionHParams, VisionMlp, VisionNorm, VisionSpec};
