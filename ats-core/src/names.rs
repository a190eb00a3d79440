//! Every GGUF metadata key and tensor name ATS reads, in one place.

/// `general.architecture`.
pub const ARCH: &str = "general.architecture";
/// `general.name`.
pub const NAME: &str = "general.name";
/// `general.alignment`.
pub const ALIGNMENT: &str = "general.alignment";
/// `general.file_type`.
pub const FILE_TYPE: &str = "general.file_type";

/// Per-architecture hyperparameter keys, `{arch}.` followed by these.
pub mod hp {
    /// Training context length.
    pub const CONTEXT_LENGTH: &str = "context_length";
    /// Hidden size.
    pub const EMBEDDING_LENGTH: &str = "embedding_length";
    /// Number of decoder blocks.
    pub const BLOCK_COUNT: &str = "block_count";
    /// Trailing blocks that only predict further tokens (multi-token
    /// prediction, GLM's NextN): counted in `block_count`, not run.
    pub const NEXTN_PREDICT_LAYERS: &str = "nextn_predict_layers";
    /// FFN intermediate size.
    pub const FEED_FORWARD_LENGTH: &str = "feed_forward_length";
    /// Query heads.
    pub const HEAD_COUNT: &str = "attention.head_count";
    /// Key/value heads.
    pub const HEAD_COUNT_KV: &str = "attention.head_count_kv";
    /// Key head size (when not hidden / heads).
    pub const KEY_LENGTH: &str = "attention.key_length";
    /// Value head size.
    pub const VALUE_LENGTH: &str = "attention.value_length";
    /// RMSNorm epsilon.
    pub const RMS_EPS: &str = "attention.layer_norm_rms_epsilon";
    /// LayerNorm epsilon.
    pub const LN_EPS: &str = "attention.layer_norm_epsilon";
    /// RoPE frequency base.
    pub const ROPE_FREQ_BASE: &str = "rope.freq_base";
    /// Rotated dimensions per head.
    pub const ROPE_DIM: &str = "rope.dimension_count";
    /// M-RoPE sections (pairs per t/h/w/extra).
    pub const ROPE_SECTIONS: &str = "rope.dimension_sections";
    /// RoPE scaling type (`none`, or `yarn` where the architecture takes it).
    pub const ROPE_SCALING_TYPE: &str = "rope.scaling.type";
    /// RoPE scaling factor (context extension ratio).
    pub const ROPE_SCALING_FACTOR: &str = "rope.scaling.factor";
    /// The context length the model was trained at before the extension.
    pub const ROPE_SCALING_ORIG_CTX: &str = "rope.scaling.original_context_length";
    /// YaRN: rotations per context below which a pair extrapolates.
    pub const ROPE_YARN_BETA_FAST: &str = "rope.scaling.yarn_beta_fast";
    /// YaRN: rotations per context above which a pair interpolates.
    pub const ROPE_YARN_BETA_SLOW: &str = "rope.scaling.yarn_beta_slow";
    /// YaRN: the magnitude scale of cos and sin (absent: `0.1 ln(factor) + 1`).
    pub const ROPE_YARN_ATTN_FACTOR: &str = "rope.scaling.yarn_attn_factor";
    /// YaRN: the extrapolation mix (only 1, the default, is supported).
    pub const ROPE_YARN_EXT_FACTOR: &str = "rope.scaling.yarn_ext_factor";
    /// YaRN's log multiplier of the magnitude scale (DeepSeek; not supported).
    pub const ROPE_YARN_LOG_MUL: &str = "rope.scaling.yarn_log_multiplier";
    /// Keys a sliding-window layer attends to (the query's own included).
    pub const SLIDING_WINDOW: &str = "attention.sliding_window";
    /// Which layers use the sliding window: every n-th layer is full
    /// (an integer n), or one boolean per layer.
    pub const SLIDING_WINDOW_PATTERN: &str = "attention.sliding_window_pattern";
    /// Experts per MoE layer.
    pub const EXPERT_COUNT: &str = "expert_count";
    /// Experts used per token.
    pub const EXPERT_USED_COUNT: &str = "expert_used_count";
    /// Expert FFN intermediate size.
    pub const EXPERT_FF_LENGTH: &str = "expert_feed_forward_length";
    /// Shared experts beside the routed ones (their FFN is this many
    /// expert FFNs wide).
    pub const EXPERT_SHARED_COUNT: &str = "expert_shared_count";
    /// Leading blocks with a dense FFN before the MoE blocks.
    pub const LEADING_DENSE_BLOCK_COUNT: &str = "leading_dense_block_count";
    /// How router logits become scores: 1 softmax, 2 sigmoid.
    pub const EXPERT_GATING_FUNC: &str = "expert_gating_func";
    /// Whether the chosen experts' weights are renormalised to sum to one.
    pub const EXPERT_WEIGHTS_NORM: &str = "expert_weights_norm";
    /// Factor on the chosen experts' weights.
    pub const EXPERT_WEIGHTS_SCALE: &str = "expert_weights_scale";
    /// Expert groups (group-limited routing when groups used < groups).
    pub const EXPERT_GROUP_COUNT: &str = "expert_group_count";
    /// Expert groups a token may choose from.
    pub const EXPERT_GROUP_USED_COUNT: &str = "expert_group_used_count";
    /// Vocabulary size.
    pub const VOCAB_SIZE: &str = "vocab_size";
}

/// Text-model tensor names.
pub mod tensor {
    /// Token embedding table.
    pub const TOKEN_EMBD: &str = "token_embd.weight";
    /// Final norm.
    pub const OUTPUT_NORM: &str = "output_norm.weight";
    /// Output projection (absent when tied to the embedding).
    pub const OUTPUT: &str = "output.weight";
    /// Llama 3 RoPE frequency factors.
    pub const ROPE_FREQS: &str = "rope_freqs.weight";

    /// Attention input norm.
    pub const ATTN_NORM: &str = "attn_norm.weight";
    /// Query projection.
    pub const ATTN_Q: &str = "attn_q.weight";
    /// Key projection.
    pub const ATTN_K: &str = "attn_k.weight";
    /// Value projection.
    pub const ATTN_V: &str = "attn_v.weight";
    /// Query bias.
    pub const ATTN_Q_BIAS: &str = "attn_q.bias";
    /// Key bias.
    pub const ATTN_K_BIAS: &str = "attn_k.bias";
    /// Value bias.
    pub const ATTN_V_BIAS: &str = "attn_v.bias";
    /// Per-head query norm.
    pub const ATTN_Q_NORM: &str = "attn_q_norm.weight";
    /// Per-head key norm.
    pub const ATTN_K_NORM: &str = "attn_k_norm.weight";
    /// Attention output projection.
    pub const ATTN_OUT: &str = "attn_output.weight";
    /// Attention output bias.
    pub const ATTN_OUT_BIAS: &str = "attn_output.bias";
    /// Per-head attention sink logits (gpt-oss).
    pub const ATTN_SINKS: &str = "attn_sinks.weight";
    /// gpt-oss: the norm after the attention residual, before the FFN.
    /// GLM-4: the norm of the attention's output, before its residual.
    pub const ATTN_POST_NORM: &str = "post_attention_norm.weight";
    /// Norm of the FFN's output, before its residual (GLM-4).
    pub const FFN_POST_NORM: &str = "post_ffw_norm.weight";
    /// FFN input norm.
    pub const FFN_NORM: &str = "ffn_norm.weight";
    /// FFN gate projection.
    pub const FFN_GATE: &str = "ffn_gate.weight";
    /// FFN up projection.
    pub const FFN_UP: &str = "ffn_up.weight";
    /// FFN down projection.
    pub const FFN_DOWN: &str = "ffn_down.weight";
    /// FFN up bias (Nemotron, when the model has MLP biases).
    pub const FFN_UP_BIAS: &str = "ffn_up.bias";
    /// FFN down bias.
    pub const FFN_DOWN_BIAS: &str = "ffn_down.bias";
    /// MoE router.
    pub const FFN_GATE_INP: &str = "ffn_gate_inp.weight";
    /// Stacked expert gate projections.
    pub const FFN_GATE_EXPS: &str = "ffn_gate_exps.weight";
    /// Stacked expert up projections.
    pub const FFN_UP_EXPS: &str = "ffn_up_exps.weight";
    /// Stacked expert down projections.
    pub const FFN_DOWN_EXPS: &str = "ffn_down_exps.weight";
    /// MoE router bias.
    pub const FFN_GATE_INP_BIAS: &str = "ffn_gate_inp.bias";
    /// Per-expert gate biases (`[n_ff, n_expert]`).
    pub const FFN_GATE_EXPS_BIAS: &str = "ffn_gate_exps.bias";
    /// Per-expert up biases.
    pub const FFN_UP_EXPS_BIAS: &str = "ffn_up_exps.bias";
    /// Per-expert down biases (`[n_embd, n_expert]`).
    pub const FFN_DOWN_EXPS_BIAS: &str = "ffn_down_exps.bias";
    /// Per-expert bias added to sigmoid scores to choose experts, not to
    /// weigh them (GLM-4.5's `e_score_correction_bias`).
    pub const FFN_EXP_PROBS_B: &str = "exp_probs_b.bias";
    /// Shared expert gate projection.
    pub const FFN_GATE_SHEXP: &str = "ffn_gate_shexp.weight";
    /// Shared expert up projection.
    pub const FFN_UP_SHEXP: &str = "ffn_up_shexp.weight";
    /// Shared expert down projection.
    pub const FFN_DOWN_SHEXP: &str = "ffn_down_shexp.weight";

    /// The full name of a per-block tensor: `blk.{layer}.{name}`.
    pub fn blk(layer: usize, name: &str) -> String {
        format!("blk.{layer}.{name}")
    }
}

/// Vision projector (mmproj) keys.
pub mod clip {
    /// Projector type (`qwen2vl_merger`, `qwen2.5vl_merger`).
    pub const PROJECTOR_TYPE: &str = "clip.projector_type";
    /// Whether the file has a vision encoder.
    pub const HAS_VISION: &str = "clip.has_vision_encoder";
    /// Output embedding size (the language model's hidden size).
    pub const PROJECTION_DIM: &str = "clip.vision.projection_dim";
    /// Nominal image size.
    pub const IMAGE_SIZE: &str = "clip.vision.image_size";
    /// Patch size.
    pub const PATCH_SIZE: &str = "clip.vision.patch_size";
    /// Vision hidden size.
    pub const EMBEDDING_LENGTH: &str = "clip.vision.embedding_length";
    /// Vision MLP size.
    pub const FEED_FORWARD_LENGTH: &str = "clip.vision.feed_forward_length";
    /// Vision blocks.
    pub const BLOCK_COUNT: &str = "clip.vision.block_count";
    /// Vision heads.
    pub const HEAD_COUNT: &str = "clip.vision.attention.head_count";
    /// Norm epsilon.
    pub const LAYER_NORM_EPS: &str = "clip.vision.attention.layer_norm_epsilon";
    /// Pixel mean.
    pub const IMAGE_MEAN: &str = "clip.vision.image_mean";
    /// Pixel std.
    pub const IMAGE_STD: &str = "clip.vision.image_std";
    /// SiLU (gated) MLP instead of GELU.
    pub const USE_SILU: &str = "clip.use_silu";
    /// GELU MLP.
    pub const USE_GELU: &str = "clip.use_gelu";
    /// Window-attention pattern: every n-th block uses full attention.
    pub const N_WA_PATTERN: &str = "clip.vision.n_wa_pattern";
    /// Window size in pixels (when the file states it).
    pub const WINDOW_SIZE: &str = "clip.vision.window_size";
    /// Projector type in files with several modalities.
    pub const VISION_PROJECTOR_TYPE: &str = "clip.vision.projector_type";
    /// Patches merged per side by the projector.
    pub const SPATIAL_MERGE_SIZE: &str = "clip.vision.spatial_merge_size";
    /// Head size, when not hidden / heads.
    pub const HEAD_DIM: &str = "clip.vision.attention.head_dim";
    /// Smallest image area in pixels the file recommends.
    pub const IMAGE_MIN_PIXELS: &str = "clip.vision.image_min_pixels";
    /// Largest image area in pixels the file recommends.
    pub const IMAGE_MAX_PIXELS: &str = "clip.vision.image_max_pixels";

    /// `general.architecture` of an mmproj file.
    pub const ARCH_CLIP: &str = "clip";
    /// Qwen2-VL's projector type.
    pub const PROJ_QWEN2VL: &str = "qwen2vl_merger";
    /// Qwen2.5-VL's projector type.
    pub const PROJ_QWEN25VL: &str = "qwen2.5vl_merger";

    /// Token opening an image in the prompt.
    pub const VISION_START_TOKEN: &str = "<|vision_start|>";
    /// Token closing an image.
    pub const VISION_END_TOKEN: &str = "<|vision_end|>";
    /// The placeholder each image embedding replaces.
    pub const IMAGE_PAD_TOKEN: &str = "<|image_pad|>";
    /// Where an image goes in rendered prompt text (llama.cpp's mtmd marker).
    pub const MEDIA_MARKER: &str = "<__media__>";

    /// Vision tensor names.
    pub mod tensor {
        /// Conv3d patch embedding, first temporal frame (`[p, p, 3, d]`).
        pub const PATCH_EMBD: &str = "v.patch_embd.weight";
        /// Conv3d patch embedding, second temporal frame.
        pub const PATCH_EMBD_1: &str = "v.patch_embd.weight.1";
        /// Patch embedding bias (Qwen-VL has none).
        pub const PATCH_BIAS: &str = "v.patch_embd.bias";
        /// The merger's norm (`ln_q`).
        pub const POST_LN: &str = "v.post_ln.weight";
        /// The merger's norm bias (LayerNorm).
        pub const POST_LN_BIAS: &str = "v.post_ln.bias";
        /// Merger first linear layer.
        pub const MM_0: &str = "mm.0.weight";
        /// Merger first linear bias.
        pub const MM_0_BIAS: &str = "mm.0.bias";
        /// Merger second linear layer.
        pub const MM_2: &str = "mm.2.weight";
        /// Merger second linear bias.
        pub const MM_2_BIAS: &str = "mm.2.bias";

        /// Block input norm.
        pub const LN1: &str = "ln1.weight";
        /// Block input norm bias.
        pub const LN1_BIAS: &str = "ln1.bias";
        /// MLP input norm.
        pub const LN2: &str = "ln2.weight";
        /// MLP input norm bias.
        pub const LN2_BIAS: &str = "ln2.bias";
        /// Query projection.
        pub const ATTN_Q: &str = "attn_q.weight";
        /// Query bias.
        pub const ATTN_Q_BIAS: &str = "attn_q.bias";
        /// Key projection.
        pub const ATTN_K: &str = "attn_k.weight";
        /// Key bias.
        pub const ATTN_K_BIAS: &str = "attn_k.bias";
        /// Value projection.
        pub const ATTN_V: &str = "attn_v.weight";
        /// Value bias.
        pub const ATTN_V_BIAS: &str = "attn_v.bias";
        /// Attention output projection.
        pub const ATTN_OUT: &str = "attn_out.weight";
        /// Attention output bias.
        pub const ATTN_OUT_BIAS: &str = "attn_out.bias";
        /// MLP gate projection (gated MLPs).
        pub const FFN_GATE: &str = "ffn_gate.weight";
        /// MLP gate bias.
        pub const FFN_GATE_BIAS: &str = "ffn_gate.bias";
        /// MLP up projection (`fc1` of plain MLPs).
        pub const FFN_UP: &str = "ffn_up.weight";
        /// MLP up bias.
        pub const FFN_UP_BIAS: &str = "ffn_up.bias";
        /// MLP down projection (`fc2`).
        pub const FFN_DOWN: &str = "ffn_down.weight";
        /// MLP down bias.
        pub const FFN_DOWN_BIAS: &str = "ffn_down.bias";

        /// The full name of a vision block tensor: `v.blk.{layer}.{name}`.
        pub fn blk(layer: usize, name: &str) -> String {
            format!("v.blk.{layer}.{name}")
        }
    }
}
