//! The run configuration: one typed struct, built once by the CLI or a
//! library user, logged once, from which the planner, the executor, the
//! session and the vision encoder derive their settings.

use ats_core::device::KvType;
use ats_core::round::MAX_CONTEXT;
use ats_core::spec::ModelSpec;
use serde::Serialize;

use crate::exec::ExecConfig;
use crate::rescheduler::ReschedConfig;
use crate::size::fmt_bytes;

/// How weights are placed between CPU and GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// llama.cpp's baseline: whole layers on the GPU, filled to the budget
    /// (see [`crate::planner::baseline`]).
    Layers,
    /// llama.cpp's `--cpu-moe`: routed experts on the CPU, the rest as `layers`.
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
    /// Every policy, in the order help texts list them.
    pub const ALL: [Policy; 5] = [
        Policy::Layers,
        Policy::CpuMoe,
        Policy::Static,
        Policy::Tiers,
        Policy::Ats,
    ];

    /// Parses a policy name.
    pub fn parse(s: &str) -> Result<Policy, String> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown policy {s:?} (layers, cpu-moe, static, tiers, ats)"))
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

    /// Whether this is one of llama.cpp's baselines (placed as llama.cpp
    /// places, not searched).
    pub fn is_baseline(self) -> bool {
        matches!(self, Policy::Layers | Policy::CpuMoe)
    }
}

/// The context length a model gets when none is asked for: its training
/// context, at most this many tokens (a KV cache for a 128K-token context
/// would take more memory than most machines have for one sequence).
pub const DEFAULT_MAX_CONTEXT: usize = 4096;

/// Why a run configuration cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A context no position can address.
    #[error("a context of {0} tokens is out of range: it must be 1 to {max}", max = MAX_CONTEXT)]
    Context(usize),
    /// KV blocks whose rows are not a power of two (GPU kernels address
    /// blocks by shifts).
    #[error("KV blocks of {0} rows: the row count must be a power of two")]
    BlockRows(usize),
    /// A count that must be at least 1.
    #[error("{what} must be at least 1")]
    Zero {
        /// What it counts.
        what: &'static str,
    },
}

/// What one sequence of a run is expected to do, for the workload the
/// planner judges layouts by (see [`RunConfig::workload`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Workload {
    /// Tokens already in the context when the prompt starts.
    pub depth: usize,
    /// Prompt tokens.
    pub prompt: usize,
    /// Generated tokens.
    pub generate: usize,
}

/// Everything a run is configured by.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunConfig {
    /// Context length in tokens: what the KV caches hold, shared by every
    /// sequence (as llama.cpp's `-c` with `-np`); one sequence may use all of it.
    pub n_ctx: usize,
    /// KV cache element type.
    pub kv_type: KvType,
    /// Placement policy.
    pub policy: Policy,
    /// Largest prompt chunk per round, and largest tier planned for
    /// (`None`: as the planner chooses).
    pub max_chunk: Option<usize>,
    /// Temp slots per weight role on a GPU (2 = double buffering).
    pub slots_per_role: usize,
    /// Rounds return every row's logits (eval, perplexity), so compute
    /// buffers are planned to hold them.
    pub all_logits: bool,
    /// CPU threads.
    pub threads: usize,
    /// The GPU memory budget (`None`: no budget asked for; a GPU then
    /// offers what its ledger allows).
    pub vram: Option<u64>,
    /// Load-aware re-scheduling settings.
    pub resched: ReschedConfig,
    /// Sequences that may run at once (their KV shares the `n_ctx` rows).
    pub parallel: usize,
    /// Rows per KV block ([`crate::session::KV_BLOCK_TOKENS`]).
    pub kv_block_tokens: usize,
    /// The request the layout is chosen for (`None`: a prompt filling half
    /// of a sequence's context, at least 512 tokens, then 128 generated).
    /// Layouts trade prompt speed for decode speed, so a run that knows
    /// its requests (a benchmark, long generations from short prompts)
    /// says so here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<Workload>,
}

impl RunConfig {
    /// The defaults for `spec` on `threads` CPU threads: the model's context
    /// up to [`DEFAULT_MAX_CONTEXT`], f16 KV, the `ats` policy, no GPU budget.
    pub fn for_model(spec: &ModelSpec, threads: usize) -> RunConfig {
        RunConfig {
            n_ctx: spec.hp.n_ctx_train.clamp(1, DEFAULT_MAX_CONTEXT),
            kv_type: KvType::F16,
            policy: Policy::Ats,
            max_chunk: None,
            slots_per_role: 2,
            all_logits: false,
            threads,
            vram: None,
            resched: ReschedConfig::default(),
            parallel: 1,
            kv_block_tokens: crate::session::KV_BLOCK_TOKENS,
            workload: None,
        }
    }

    /// Rows every layer's KV cache has: the context in whole blocks.
    pub fn kv_rows(&self) -> usize {
        self.n_ctx.div_ceil(self.kv_block_tokens.max(1)) * self.kv_block_tokens.max(1)
    }

    /// Checks the values every component relies on (the one place they are checked).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=MAX_CONTEXT).contains(&self.n_ctx) {
            return Err(ConfigError::Context(self.n_ctx));
        }
        if self.max_chunk == Some(0) {
            return Err(ConfigError::Zero {
                what: "the prompt chunk",
            });
        }
        if self.slots_per_role == 0 {
            return Err(ConfigError::Zero {
                what: "temp slots per role",
            });
        }
        if self.threads == 0 {
            return Err(ConfigError::Zero { what: "threads" });
        }
        if self.parallel == 0 {
            return Err(ConfigError::Zero {
                what: "parallel sequences",
            });
        }
        if !self.kv_block_tokens.is_power_of_two() {
            return Err(ConfigError::BlockRows(self.kv_block_tokens));
        }
        Ok(())
    }

    /// The executor's settings for the language model.
    pub fn exec(&self) -> ExecConfig {
        ExecConfig {
            kv_capacity: self.kv_rows(),
            kv_block_tokens: self.kv_block_tokens,
            kv_type: self.kv_type,
            slots_per_role: self.slots_per_role,
            region: None,
        }
    }

    /// The one line a run logs at start.
    pub fn summary(&self) -> String {
        format!(
            "ctx {}, parallel {}, kv {:?}, policy {}, threads {}, vram {}, chunk {}",
            self.n_ctx,
            self.parallel,
            self.kv_type,
            self.policy.name(),
            self.threads,
            self.vram.map_or_else(|| "none".to_string(), fmt_bytes),
            self.max_chunk
                .map_or_else(|| "by tier".to_string(), |c| c.to_string()),
        )
    }
}
