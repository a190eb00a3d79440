//! `ats-core`: what every ATS crate shares.
//!
//! The GGUF reader ([`gguf`]), element and quantisation types ([`dtype`],
//! [`quant`]), model specifications per architecture ([`spec`]), the op graph
//! of a forward round ([`graph`], built per architecture in [`models`]), the
//! tokenizer, chat template and sampler, and the [`device::Device`] trait with
//! its budget [`ledger`].

pub mod dtype;
pub mod gguf;
pub mod quant;

pub use dtype::DType;
pub mod device;
pub mod graph;
pub mod ledger;
pub mod models;
pub mod names;
pub mod round;
pub mod spec;
