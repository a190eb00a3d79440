//! GLM-4-0414 (`glm4`): a decoder with q/k/v biases, RoPE on the first half
//! of each head in llama.cpp's "normal" pairing (the converter keeps
//! Hugging Face's interleaved order), "sandwich" norms (each sub-layer's
//! output is normalised again before its residual) and gate and up in one
//! `ffn_up` matrix.

use super::decoder::Decoder;
use crate::graph::{Graph, RopeKind, SubLayer};
use crate::names::tensor as t;
use crate::spec::{ModelSpec, SpecError};

pub(crate) fn build(spec: &ModelSpec) -> Result<Graph, SpecError> {
    let mut m = Decoder::new(spec);
    let mut x = m.embed()?;
    for il in 0..spec.hp.n_layer {
        // x = x + n_post(W_o attn(rope(W_q n(x) + b_q), rope(W_k n(x) + b_k), W_v n(x) + b_v))
        let h = m.norm(x, il, t::ATTN_NORM, SubLayer::AttnQkv)?;
        let (q, k, v) = m.qkv(h, il, true)?;
        let (q, k) = m.rope(q, k, il, RopeKind::Normal, None);
        let a = m.attention(q, k, v, il)?;
        let a = m.norm(a, il, t::ATTN_POST_NORM, SubLayer::AttnOut)?;
        x = m.residual(x, a, format!("blk.{il}.attn_residual"));
        // x = x + n_post(W_down swiglu(W_up n(x)))
        let h = m.norm(x, il, t::FFN_NORM, SubLayer::FfnUp)?;
        let f = m.ffn_fused_up(h, il)?;
        let f = m.norm(f, il, t::FFN_POST_NORM, SubLayer::FfnDown)?;
        x = m.residual(x, f, format!("blk.{il}.ffn_residual"));
    }
    m.output(x)
}
