//! GGUF, llama.cpp's model file format: a validated memory-mapped reader and a
//! streaming writer.

mod backing;
mod error;
mod reader;
mod value;
mod writer;

pub use backing::{Backing, Hold};
pub use error::{GgufError, GgufErrorKind};
pub use reader::{DEFAULT_ALIGNMENT, GGUF_MAGIC, GgufFile, Metadata, TensorInfo};
pub use value::{Value, ValueType};
pub use writer::{GgufWriter, TensorSpec, encode_value};

#[cfg(test)]
mod tests;
