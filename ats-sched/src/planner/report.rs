//! What a plan puts where and why, and its memory per region.

use serde::Serialize;

use crate::engine::Policy;

/// One weight tensor's placement.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TensorRow {
    /// Tensor name.
    pub name: String,
    /// Bytes.
    pub bytes: u64,
    /// `gpu` (resident), `cpu` (host memory, computed on the CPU or streamed per round).
    pub placement: String,
    /// Ledger region on the GPU it uses (`resident`, `temp` when streamed in some tiers, `none`).
    pub region: String,
    /// Why it is there.
    pub why: String,
}

/// One placement item, for reports and the re-scheduler.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ItemRow {
    /// `blk.3 attn_qkv`, `output`, ...
    pub name: String,
    /// Its nodes.
    pub nodes: Vec<usize>,
    /// Weight plus KV bytes.
    pub bytes: u64,
    /// Resident on the GPU (KV cache there, for attention).
    pub resident: bool,
    /// Runs on the GPU in the decode (tier 1) plan.
    pub on_gpu_tier1: bool,
    /// Estimated seconds of a decode round where it runs in the tier-1 plan.
    pub est_decode_secs: f64,
    /// Estimated seconds to copy its weights to the GPU for a decode round.
    pub est_copy_secs: f64,
}

/// The plan in numbers.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PlanReport {
    /// Policy.
    pub policy: Option<Policy>,
    /// The GPU budget, if a GPU is used.
    pub budget_bytes: Option<u64>,
    /// The plan's GPU peak: resident + KV + temp slots + compute buffers.
    pub peak_bytes: u64,
    /// Planned GPU bytes per region (`resident`, `kv`, `temp`, `compute`).
    pub regions: Vec<(String, u64)>,
    /// Largest tier the compute buffers are sized for.
    pub max_tier: usize,
    /// Whether temp slots (streaming) are part of the layout.
    pub streaming: bool,
    /// Estimated seconds of the reference workload (a 512-token prompt, 128 tokens generated).
    pub workload_secs: f64,
    /// Seconds per GB of weight copies the plan assumed.
    pub copy_secs_per_gb: f64,
    /// Per weight tensor.
    pub tensors: Vec<TensorRow>,
    /// Per placement item.
    pub items: Vec<ItemRow>,
    /// Remarks for the user (no profile, budget notes).
    pub notes: Vec<String>,
}
