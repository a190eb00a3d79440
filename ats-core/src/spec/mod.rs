//! Model specifications: the architecture, its hyperparameters from GGUF
//! metadata, and the checked weight table.

mod error;
mod hparams;

pub use error::SpecError;
pub use hparams::HParams;

use std::sync::Arc;

use crate::gguf::{GgufFile, Hold};
use crate::graph::{Graph, GraphInput, SubLayer, WeightInfo};
use crate::names;

/// A supported text architecture (`general.architecture`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// Llama 2/3, SmolLM2 (`llama`).
    Llama,
    /// Qwen2 / Qwen2.5 (`qwen2`): q/k/v biases.
    Qwen2,
    /// Qwen3 (`qwen3`): per-head q/k norms.
    Qwen3,
    /// Qwen3 MoE (`qwen3moe`).
    Qwen3Moe,
    /// The text part of Qwen2-VL / Qwen2.5-VL (`qwen2vl`): M-RoPE.
    Qwen2Vl,
    /// OpenAI's gpt-oss (`gpt-oss`): MoE with biases and a clamped SwiGLU,
    /// attention sinks, sliding-window layers alternating with full ones, YaRN.
    #[serde(rename = "gpt-oss")]
    GptOss,
    /// GLM-4-0414 (`glm4`): q/k/v biases, half-head RoPE, norms after
    /// attention and after the FFN as well as before, gate and up in one matrix.
    Glm4,
    /// GLM-4.5 / 4.6 (`glm4moe`): q/k/v biases, optional q/k norms, NeoX
    /// RoPE on half of each head; leading dense blocks, then MoE blocks with
    /// a sigmoid router, a selection bias and a shared expert.
    Glm4Moe,
    /// Nemotron-4 / Minitron (`nemotron`): LayerNorm with bias, NeoX RoPE on
    /// part of each head, a non-gated FFN with squared ReLU.
    Nemotron,
}

impl Arch {
    /// The architecture named in a GGUF file.
    pub fn from_name(name: &str) -> Result<Arch, SpecError> {
        Ok(match name {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "qwen3moe" => Arch::Qwen3Moe,
            "qwen2vl" => Arch::Qwen2Vl,
            "gpt-oss" => Arch::GptOss,
            "glm4" => Arch::Glm4,
            "glm4moe" => Arch::Glm4Moe,
            "nemotron" => Arch::Nemotron,
            other => return Err(SpecError::UnknownArch(other.to_string())),
        })
    }

    /// The GGUF name (also the metadata key prefix).
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Qwen3Moe => "qwen3moe",
            Arch::Qwen2Vl => "qwen2vl",
            Arch::GptOss => "gpt-oss",
            Arch::Glm4 => "glm4",
            Arch::Glm4Moe => "glm4moe",
            Arch::Nemotron => "nemotron",
        }
    }

    /// Whether the FFNs are mixtures of experts (all of them, or all after
    /// `leading_dense_block_count` dense ones).
    pub fn is_moe(self) -> bool {
        matches!(self, Arch::Qwen3Moe | Arch::GptOss | Arch::Glm4Moe)
    }

    /// For architectures with sliding-window layers: every n-th layer is
    /// full attention, the others slide (llama.cpp's pattern, also what the
    /// models' own configs list).
    pub fn swa_pattern(self) -> Option<usize> {
        match self {
            Arch::GptOss => Some(2),
            _ => None,
        }
    }

    /// How the model normalises its hidden state.
    pub fn norm_kind(self) -> NormKind {
        match self {
            Arch::Nemotron => NormKind::Layer,
            _ => NormKind::Rms,
        }
    }

    /// Whether the model's positions have M-RoPE's 4 components.
    pub fn uses_mrope(self) -> bool {
        self == Arch::Qwen2Vl
    }
}

/// The hidden state's normalisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormKind {
    /// RMSNorm times a weight (`rms_eps`).
    Rms,
    /// LayerNorm times a weight plus a bias (`ln_eps`); the bias tensor is
    /// the weight's name with `.bias` for `.weight`.
    Layer,
}

/// A loaded text model: architecture, hyperparameters, the mapped file.
#[derive(Clone, Debug)]
pub struct ModelSpec {
    /// Architecture.
    pub arch: Arch,
    /// Hyperparameters.
    pub hp: HParams,
    /// The mapped GGUF file the weights are read from.
    pub gguf: Arc<GgufFile>,
    /// The graph of one forward round, built once when the file is opened.
    graph: Arc<Graph>,
}

impl ModelSpec {
    /// Reads the architecture and hyperparameters, then builds the graph
    /// (once: every user of the model shares it), which checks every
    /// tensor's presence, type and shape.
    pub fn from_gguf(gguf: Arc<GgufFile>) -> Result<ModelSpec, SpecError> {
        let arch_name = gguf
            .metadata
            .get_str(names::ARCH)
            .ok_or_else(|| SpecError::MissingKey(names::ARCH.into()))?;
        let arch = Arch::from_name(arch_name)?;
        let hp = HParams::from_gguf(arch, &gguf)?;
        let mut spec = ModelSpec {
            arch,
            hp,
            gguf,
            graph: Arc::new(Graph {
                nodes: Vec::new(),
                values: Vec::new(),
                weights: Vec::new(),
                kv_caches: Vec::new(),
                input: GraphInput::Tokens,
                output: 0,
            }),
        };
        spec.graph = Arc::new(crate::models::build(&spec)?);
        Ok(spec)
    }

    /// Opens and checks a GGUF model file, mapped.
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<ModelSpec, SpecError> {
        Self::open_with(path, Hold::Mapped)
    }

    /// Opens and checks a GGUF model file, its bytes held as `hold` says.
    pub fn open_with(
        path: impl AsRef<std::path::Path>,
        hold: Hold,
    ) -> Result<ModelSpec, SpecError> {
        Self::from_gguf(Arc::new(GgufFile::open_with(path, hold)?))
    }

    /// The graph of one forward round.
    pub fn graph(&self) -> &Arc<Graph> {
        &self.graph
    }

    /// A weight's info, checked against the expected GGML dimensions
    /// (innermost first).
    pub fn weight(&self, name: &str, ne: &[usize]) -> Result<WeightInfo, SpecError> {
        let t = self
            .gguf
            .tensor(name)
            .ok_or_else(|| SpecError::MissingTensor(name.to_string()))?;
        let dtype = t.dtype().map_err(|source| SpecError::TensorType {
            name: name.to_string(),
            source,
        })?;
        let found: Vec<usize> = t.ne.iter().map(|&d| d as usize).collect();
        if found != ne {
            return Err(SpecError::BadShape {
                name: name.to_string(),
                expected: ne.to_vec(),
                found,
            });
        }
        Ok(WeightInfo {
            name: name.to_string(),
            dtype,
            ne: found,
            bytes: t.bytes,
            file_offset: t.file_offset,
            layer: None,
            sublayer: SubLayer::Embed,
        })
    }

    /// Whether the file holds a tensor.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.gguf.tensor(name).is_some()
    }

    /// The bytes of a weight, borrowed from the mapping.
    pub fn weight_data(&self, w: &WeightInfo) -> &[u8] {
        let start = w.file_offset as usize;
        &self.gguf.backing().bytes()[start..start + w.bytes as usize]
    }
}
