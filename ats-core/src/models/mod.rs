//! One file per architecture: each builds the forward graph of a round and,
//! in doing so, checks every tensor the architecture needs.

mod decoder;
mod glm4;
mod glm4moe;
mod gpt_oss;
mod llama;
mod nemotron;
mod qwen2;
mod qwen2vl;
mod qwen3;
mod qwen3moe;

use crate::graph::Graph;
use crate::spec::{Arch, ModelSpec, SpecError};

/// Builds the graph of `spec`'s architecture.
pub fn build(spec: &ModelSpec) -> Result<Graph, SpecError> {
    match spec.arch {
        Arch::Llama => llama::build(spec),
        Arch::Qwen2 => qwen2::build(spec),
        Arch::Qwen3 => qwen3::build(spec),
        Arch::Qwen3Moe => qwen3moe::build(spec),
        Arch::Qwen2Vl => qwen2vl::build(spec),
        Arch::GptOss => gpt_oss::build(spec),
        Arch::Glm4 => glm4::build(spec),
        Arch::Glm4Moe => glm4moe::build(spec),
        Arch::Nemotron => nemotron::build(spec),
    }
}
