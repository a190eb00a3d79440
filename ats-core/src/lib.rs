//! `ats-core`: what every ATS crate shares.
//!
//! The GGUF reader ([`gguf`]), element and quantisation types ([`dtype`],
//! [`quant`]), model specifications per architecture ([`spec`]), the op graph
//! of a forward round ([`graph`], built per architecture in [`models`]), the
//! tokenizer, chat template, sampler and grammars for constrained decoding, and the [`device::Device`] trait with
//! its budget [`ledger`], and the [`machine::Machine`] that names devices by role.

pub mod chat;
pub mod device;
pub mod dtype;
pub mod files;
pub mod gguf;
pub mod grammar;
pub mod graph;
pub mod ledger;
pub mod machine;
pub mod models;
pub mod names;
pub mod quant;
pub mod round;
pub mod sampling;
pub mod spec;
pub mod synth;
pub mod tokenizer;

pub use chat::{ChatError, ChatMessage, ChatTemplate, ContentPart};
pub use dtype::DType;
pub use sampling::{Sampler, SamplerConfig};
pub use tokenizer::{TokenStream, Tokenizer, TokenizerError};
