//! The operations a forward round is made of.

use serde::Serialize;

/// How rotary embeddings pair the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum RopeKind {
    /// Adjacent pairs `(2i, 2i+1)` (llama.cpp's "normal" mode; GGUF llama q/k rows are permuted for it).
    Normal,
    /// Halves `(i, i + d/2)` (rotate-half, HF's layout; Qwen models).
    Neox,
    /// Multimodal RoPE (Qwen2-VL text): NeoX pairing where pair `i` takes its
    /// position from section `s` (temporal, height, width, extra) by `sections`.
    MRope {
        /// Rotation pairs per section.
        sections: [usize; 4],
    },
    /// 2D vision RoPE (Qwen2-VL vision): NeoX pairing, the first half of the
    /// pairs rotate by the patch row, the second half by the patch column.
    Vision2d,
}

/// Rotary position embedding applied to `n_heads` heads of `head_dim` columns.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RopeSpec {
    /// Pairing scheme.
    pub kind: RopeKind,
    /// Heads in the row.
    pub n_heads: usize,
    /// Columns per head.
    pub head_dim: usize,
    /// Leading dimensions of each head that rotate (the rest pass through).
    pub rot_dim: usize,
    /// Frequency base.
    pub theta: f32,
    /// YaRN context extension, when the model was trained with it.
    pub yarn: Option<Yarn>,
}

/// YaRN (context extension by frequency interpolation): pairs that turn
/// fewer than `beta_slow` times over the original context are interpolated
/// (frequency divided by `factor`), pairs that turn more than `beta_fast`
/// times keep their frequency, a linear ramp mixes the ones between; cos and
/// sin are scaled by `attn_factor`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Yarn {
    /// Context extension ratio (> 1).
    pub factor: f32,
    /// The context length before the extension.
    pub orig_ctx: usize,
    /// Rotations over the original context above which a pair extrapolates.
    pub beta_fast: f32,
    /// Rotations below which a pair interpolates.
    pub beta_slow: f32,
    /// Scale of cos and sin.
    pub attn_factor: f32,
    /// Whether the ramp's ends are rounded to whole pairs (floor, ceil):
    /// llama.cpp always rounds; Hugging Face rounds unless the model's
    /// config says `truncate: false` (gpt-oss).
    pub truncate: bool,
}

impl Yarn {
    /// `0.1 ln(factor) + 1`: the default magnitude scale for `factor`.
    pub fn default_attn_factor(factor: f32) -> f32 {
        if factor <= 1.0 {
            1.0
        } else {
            0.1 * factor.ln() + 1.0
        }
    }

    /// The share of pair `i`'s frequency kept from extrapolation (1: the
    /// original frequency, 0: divided by `factor`), for `dim` rotated
    /// dimensions and frequency base `theta`. The ramp's ends are computed
    /// in f64 and the ramp in f32, as Hugging Face's reference does.
    pub fn extrapolation(&self, i: usize, dim: usize, theta: f32) -> f32 {
        let corr = |rot: f32| {
            dim as f64 * (self.orig_ctx as f64 / (rot as f64 * 2.0 * std::f64::consts::PI)).ln()
                / (2.0 * (theta as f64).ln())
        };
        let (mut lo, mut hi) = (corr(self.beta_fast), corr(self.beta_slow));
        if self.truncate {
            lo = lo.floor();
            hi = hi.ceil();
        }
        let lo = lo.max(0.0) as f32;
        let mut hi = hi.min(dim as f64 - 1.0) as f32;
        if lo == hi {
            hi += 0.001;
        }
        let ramp = ((i as f32 - lo) / (hi - lo)).clamp(0.0, 1.0);
        1.0 - ramp
    }
}

impl RopeSpec {
    /// The position component (0 = t, 1 = h, 2 = w; 3 = none) and the
    /// frequency index of rotation pair `i`: the pairing every backend follows.
    pub fn pair_source(&self, i: usize) -> (usize, usize) {
        match self.kind {
            RopeKind::Normal | RopeKind::Neox => (0, i),
            RopeKind::MRope { sections } => {
                let total: usize = sections.iter().sum();
                let s = i % total.max(1);
                let mut acc = 0;
                let mut c = 3;
                for (k, &n) in sections.iter().enumerate() {
                    acc += n;
                    if s < acc {
                        c = k;
                        break;
                    }
                }
                (c, i)
            }
            RopeKind::Vision2d => {
                let quarter = self.head_dim / 4;
                if i < quarter {
                    (0, i)
                } else {
                    (1, i - quarter)
                }
            }
        }
    }

    /// The inverse frequency `theta^(-2i/dim)` of rotation pair `i`, where
    /// `dim` is the number of rotated dimensions that share one frequency
    /// ladder (`rot_dim`, or half the head for 2D vision RoPE). Computed in
    /// f32 the way Hugging Face's reference does.
    pub fn inv_freq(&self, i: usize) -> f32 {
        let dim = match self.kind {
            RopeKind::Vision2d => self.head_dim / 2,
            _ => self.rot_dim,
        };
        let pos_freq = self.theta.powf((2 * i) as f32 / dim as f32);
        match &self.yarn {
            None => 1.0 / pos_freq,
            Some(y) => {
                let keep = y.extrapolation(i, dim, self.theta);
                let interp = 1.0 / (y.factor * pos_freq);
                interp * (1.0 - keep) + (1.0 / pos_freq) * keep
            }
        }
    }

    /// The scale of cos and sin (YaRN's magnitude correction; 1 without it).
    pub fn mscale(&self) -> f32 {
        self.yarn.map_or(1.0, |y| y.attn_factor)
    }
}

/// Which keys a query may attend to.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Mask {
    /// Every key at or before the query's position.
    Causal,
    /// Every key of the round (vision full attention).
    Full,
    /// Keys in the query's own segment; segment boundaries come from the
    /// round (`Round::segments`): contiguous windows after window reordering.
    Segments,
}

/// Attention of new queries over keys and values.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AttnSpec {
    /// The KV cache this attention appends to and reads (`None`: attend over
    /// this round's k and v only, as the vision encoder does).
    pub cache: Option<usize>,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (grouped-query attention when fewer than `n_heads`).
    pub n_kv_heads: usize,
    /// Columns per head.
    pub head_dim: usize,
    /// Score scale, usually `1/sqrt(head_dim)`.
    pub scale: f32,
    /// Which keys each query sees.
    pub mask: Mask,
    /// With a causal mask: only the last `window` keys up to the query's
    /// own position (sliding-window attention); `None`: all of them.
    pub window: Option<usize>,
    /// The node's weight holds one sink logit per query head: an extra
    /// score in each softmax's denominator that adds no value (gpt-oss).
    pub sinks: bool,
}

/// GELU variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum GeluKind {
    /// Exact: `x * Phi(x)` with erf.
    Erf,
    /// The tanh approximation.
    Tanh,
    /// `x * sigmoid(1.702 x)`.
    Quick,
}

/// How an expert combines its gate and up products.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum ExpertAct {
    /// `silu(gate) * up`.
    SwiGlu,
    /// gpt-oss's clamped SwiGLU: `g = min(gate, limit)`,
    /// `u = clamp(up, -limit, limit)`, `g * sigmoid(alpha g) * (u + 1)`.
    SwiGluOai {
        /// Sigmoid slope.
        alpha: f32,
        /// Clamp bound.
        limit: f32,
    },
}

/// How a router turns logits into scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Gating {
    /// A softmax over all logits (after the logit bias, if any); experts
    /// are chosen by score.
    Softmax,
    /// A sigmoid per logit; experts are chosen by score plus a per-expert
    /// selection bias that does not enter their weights (GLM-4.5,
    /// DeepSeek-V3).
    Sigmoid,
}

/// A router's scores, choice and weights: the chosen experts' scores,
/// renormalised to sum to one when `norm_topk` (then, for softmax, a
/// softmax over the chosen logits alone: gpt-oss's routing), times `scale`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Routing {
    /// Scores from logits.
    pub gating: Gating,
    /// Renormalise the chosen weights.
    pub norm_topk: bool,
    /// Factor on the (renormalised) weights.
    pub scale: f32,
}

impl Routing {
    /// Softmax scores renormalised over the chosen experts (Qwen3 MoE, gpt-oss).
    pub const SOFTMAX_NORM: Routing = Routing {
        gating: Gating::Softmax,
        norm_topk: true,
        scale: 1.0,
    };
}

/// One operation. Inputs, outputs and weights are listed on the [`super::Node`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Op {
    /// Token embedding lookup: `out[t] = table[token[t]]`, then the round's
    /// embedding overrides (image embeddings) replace their rows. Weight: the table.
    Embed,
    /// RMSNorm over each `group`-column slice of a row, times the weight.
    RmsNorm {
        /// Epsilon under the square root.
        eps: f32,
        /// Columns normalised together (the row width, or the head size for per-head norms).
        group: usize,
    },
    /// LayerNorm over the row: `(x - mean) / sqrt(var + eps) * w + b`. Weights: w, b.
    LayerNorm {
        /// Epsilon under the square root.
        eps: f32,
    },
    /// `y = x W^T (+ bias)`. Weights: W (`[out, in]`), optional bias.
    MatMul,
    /// Element-wise sum of two inputs.
    Add,
    /// Element-wise product of two inputs.
    Mul,
    /// Rotary embedding on one input, with the round's positions.
    /// Optional weight: per-pair frequency factors (llama 3 `rope_freqs`).
    Rope(RopeSpec),
    /// Attention. Inputs: q, k, v.
    Attention(AttnSpec),
    /// `silu(gate) * up`. Inputs: gate, up.
    SwiGlu,
    /// GELU of one input.
    Gelu(GeluKind),
    /// Squared ReLU of one input, `max(x, 0)^2` (Nemotron's FFN).
    ReluSqr,
    /// MoE router: scores of the `n_expert` logits `x W_gate^T`, top-k,
    /// weights as `routing` says. Weights: the router, then for softmax
    /// gating an optional logit bias, for sigmoid gating the selection bias
    /// (required). Output per token: `top_k` expert ids (as f32) then their
    /// weights.
    MoeRouter {
        /// Experts in the layer.
        n_expert: usize,
        /// Experts used per token.
        top_k: usize,
        /// Scores, choice and weights.
        routing: Routing,
    },
    /// Routed gated experts: `sum_k w_k * down_e(act(gate_e x, up_e x))`.
    /// Inputs: x, routing. Weights: stacked gate, up, down (`[n_expert, out,
    /// in]`), then with `biases` their per-expert biases (`[n_expert, out]`),
    /// each added to its product.
    MoeExperts {
        /// Experts in the layer.
        n_expert: usize,
        /// Experts used per token.
        top_k: usize,
        /// How gate and up combine.
        act: ExpertAct,
        /// Whether gate, up and down have per-expert biases.
        biases: bool,
    },
    /// Keeps the rows listed in the round's `output_rows` (whose logits are wanted).
    SelectRows,
    /// Reorders rows: `out[i] = in[perm[i]]` in groups of `group` rows
    /// (vision window reordering and its inverse).
    PermuteRows {
        /// Row groups moved as a unit.
        group: usize,
        /// Source group of each destination group.
        perm: Vec<u32>,
    },
    /// Reinterprets `[rows, cols]` as `[rows / f, cols * f]` (a copy on devices
    /// whose buffers are not views; the vision patch merger).
    MergeRows {
        /// Rows merged into one.
        factor: usize,
    },
    /// Gathers strided blocks of columns of each row:
    /// `out[r, b * len + j] = in[r, offset + b * stride + j]` for `b < blocks`,
    /// `j < len` (one temporal frame of Conv3d patch rows laid out `(c, t, y, x)`).
    GatherCols {
        /// Column of the first block.
        offset: usize,
        /// Columns per block.
        len: usize,
        /// Columns from one block's start to the next.
        stride: usize,
        /// Blocks gathered.
        blocks: usize,
    },
}

impl Op {
    /// A short name for tables and profiles.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Op::Embed => "embed",
            Op::RmsNorm { .. } => "rms_norm",
            Op::LayerNorm { .. } => "layer_norm",
            Op::MatMul => "matmul",
            Op::Add => "add",
            Op::Mul => "mul",
            Op::Rope(_) => "rope",
            Op::Attention(_) => "attention",
            Op::SwiGlu => "swiglu",
            Op::Gelu(_) => "gelu",
            Op::ReluSqr => "relu_sqr",
            Op::MoeRouter { .. } => "moe_router",
            Op::MoeExperts { .. } => "moe_experts",
            Op::SelectRows => "select_rows",
            Op::PermuteRows { .. } => "permute_rows",
            Op::MergeRows { .. } => "merge_rows",
            Op::GatherCols { .. } => "gather_cols",
        }
    }
}

/// Which of `n_expert` experts any of `rows` tokens chose, from a
/// [`Op::MoeRouter`] output read as bytes (per row: `top_k` expert ids as
/// little-endian f32, then their weights). Ids out of range (an unrouted
/// slot) choose nothing; a short buffer covers only its whole rows.
pub fn experts_chosen(router_out: &[u8], rows: usize, top_k: usize, n_expert: usize) -> Vec<bool> {
    let mut hit = vec![false; n_expert];
    let row_bytes = 2 * top_k * 4;
    for row in router_out.chunks_exact(row_bytes.max(1)).take(rows) {
        for id in row[..top_k * 4].chunks_exact(4) {
            let e = f32::from_le_bytes([id[0], id[1], id[2], id[3]]);
            if e >= 0.0 && (e as usize) < n_expert {
                hit[e as usize] = true;
            }
        }
    }
    hit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yarn_keeps_fast_pairs_and_interpolates_slow_ones() {
        // gpt-oss: head 64, theta 150000, factor 32 over 4096 tokens; the
        // ramp runs from pair 8.09 to 17.40 (rounded: 8 to 18)
        let y = Yarn {
            factor: 32.0,
            orig_ctx: 4096,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attn_factor: Yarn::default_attn_factor(32.0),
            truncate: false,
        };
        let spec = |yarn| RopeSpec {
            kind: RopeKind::Neox,
            n_heads: 1,
            head_dim: 64,
            rot_dim: 64,
            theta: 150000.0,
            yarn,
        };
        let (plain, scaled) = (spec(None), spec(Some(y)));
        assert_eq!(plain.mscale(), 1.0);
        assert!((scaled.mscale() - 1.346_573_6).abs() < 1e-6);
        for i in 0..=8 {
            assert_eq!(scaled.inv_freq(i), plain.inv_freq(i), "pair {i}");
        }
        for i in 18..32 {
            let want = plain.inv_freq(i) / 32.0;
            assert!((scaled.inv_freq(i) - want).abs() <= 1e-6 * want, "pair {i}");
        }
        // inside the ramp the two conventions differ
        let keep = y.extrapolation(12, 64, 150000.0);
        let keep_rounded = Yarn {
            truncate: true,
            ..y
        }
        .extrapolation(12, 64, 150000.0);
        assert!((keep - (1.0 - (12.0 - 8.092_779) / (17.398_024 - 8.092_779))).abs() < 1e-5);
        assert!((keep_rounded - (1.0 - 4.0 / 10.0)).abs() < 1e-6);
    }

    #[test]
    fn experts_chosen_reads_ids_not_weights() {
        // two rows of top-2: ids (3, 1) then (1, 9: none), weights after each
        let vals: [f32; 8] = [3.0, 1.0, 0.7, 0.3, 1.0, 9.0, 0.5, 0.5];
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(experts_chosen(&bytes, 2, 2, 4), [false, true, false, true]);
        // one row only, and a buffer cut mid-row
        assert_eq!(experts_chosen(&bytes, 1, 2, 4), [false, true, false, true]);
        assert_eq!(
            experts_chosen(&bytes[..20], 2, 2, 4),
            [false, true, false, true]
        );
        assert_eq!(experts_chosen(&[], 2, 2, 4), [false; 4]);
    }
}
