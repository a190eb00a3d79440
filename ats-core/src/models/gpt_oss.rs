//! gpt-oss (OpenAI): a pre-norm MoE decoder. Attention has q/k/v/o biases,
//! NeoX RoPE with YaRN, one learned sink logit per head, and alternates
//! sliding-window layers (even) with full ones (odd). Every FFN is a
//! mixture of experts whose router has a bias and whose weights are a
//! softmax over the selected logits; experts have biases and a clamped
//! SwiGLU (`alpha` 1.702, `limit` 7, fixed by the architecture: the GGUF
//! has no key for them).

use super::decoder::{AttnExtras, Decoder};
use crate::graph::{ExpertAct, Graph, RopeKind, SubLayer};
use crate::names::tensor as t;
use crate::spec::{ModelSpec, SpecError};

/// The clamped SwiGLU of gpt-oss's experts.
const ACT: ExpertAct = ExpertAct::SwiGluOai {
    alpha: 1.702,
    limit: 7.0,
};

pub(crate) fn build(spec: &ModelSpec) -> Result<Graph, SpecError> {
    let mut m = Decoder::new(spec);
    let attn = AttnExtras {
        window: true,
        sinks: true,
        out_bias: true,
    };
    let mut x = m.embed()?;
    for il in 0..spec.hp.n_layer {
        // x = x + W_o attn_sinks(rope(W_q n(x) + b_q), rope(W_k n(x) + b_k), W_v n(x) + b_v) + b_o
        let h = m.norm(x, il, t::ATTN_NORM, SubLayer::AttnQkv)?;
        let (q, k, v) = m.qkv(h, il, true)?;
        let (q, k) = m.rope(q, k, il, RopeKind::Neox, None);
        let a = m.attention_with(q, k, v, il, attn)?;
        x = m.residual(x, a, format!("blk.{il}.attn_residual"));
        // x = x + moe(post_attention_norm(x))
        let h = m.norm(x, il, t::ATTN_POST_NORM, SubLayer::MoeRouter)?;
        let f = m.moe_with(h, il, ACT, true)?;
        x = m.residual(x, f, format!("blk.{il}.ffn_residual"));
    }
    m.output(x)
}
