//! Engine settings: one typed struct, passed down and logged once.

use ats_core::device::KvType;
use serde::Serialize;

use crate::rescheduler::ReschedConfig;

/// How weights are placed between CPU and GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// llama.cpp's baseline: whole layers on the GPU, filled to the budget
    /// (the boundary layer split at attention/FFN); large prompt batches of
    /// CPU layers stream their weights to the GPU, as llama.cpp offloads ops;
    /// prompts run in micro-batches of at most 512 tokens (its `n_ubatch`).
    Layers,
    /// llama.cpp's `--cpu-moe`: routed experts on the CPU, the rest on the GPU as it fits.
    CpuMoe,
    /// The tensor-granularity static placement DP only.
    Static,
    /// Per-token-tier plans (GPU-only streaming or static), no dynamic promotion.
    Tiers,
    /// Everything: static DP, tiers, dynamic transfers, load-aware re-planning.
    #[default]
    Ats,
}

impl Policy {
    /// Parses a policy name.
    pub fn parse(s: &str) -> Result<Policy, String> {
        Ok(match s {
            "layers" => Policy::Layers,
            "cpu-moe" => Policy::CpuMoe,
            "static" => Policy::Static,
            "tiers" => Policy::Tiers,
            "ats" => Policy::Ats,
            other => {
                return Err(format!(
                    "unknown policy {other:?} (layers, cpu-moe, static, tiers, ats)"
                ));
            }
        })
    }

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Layers => "layers",
            Policy::CpuMoe => "cpu-moe",
            Policy::Static => "static",
            Policy::Tiers => "tiers",
            Policy::Ats => "ats",
        }
    }
}

/// Engine settings.
#[derive(Clone, Debug, Serialize)]
pub struct EngineConfig {
    /// Context length (KV cache capacity); `None`: the model's, capped at 4096.
    pub n_ctx: Option<usize>,
    /// KV cache element type.
    pub kv_type: KvType,
    /// Placement policy.
    pub policy: Policy,
    /// Largest prompt chunk per round (`None`: as the tier choice says).
    pub max_chunk: Option<usize>,
    /// Temp slots per weight role on a GPU (2 = double buffering).
    pub slots_per_role: usize,
    /// Load-aware re-scheduling settings.
    #[serde(skip)]
    pub resched: ReschedConfig,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            n_ctx: None,
            kv_type: KvType::F16,
            policy: Policy::Ats,
            max_chunk: None,
            slots_per_role: 2,
            resched: ReschedConfig::default(),
        }
    }
}
