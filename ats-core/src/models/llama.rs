//! Llama (Llama 2/3, SmolLM2): pre-norm decoder, RMSNorm, SwiGLU, RoPE in
//! llama.cpp's "normal" pairing (the converter permutes q/k rows for it),
//! optional Llama 3 frequency factors, optionally tied output embeddings.

use super::decoder::Decoder;
use crate::graph::{Graph, RopeKind, SubLayer};
use crate::names::tensor as t;
use crate::spec::{ModelSpec, SpecError};

pub(crate) fn build(spec: &ModelSpec) -> Result<Graph, SpecError> {
    let mut m = Decoder::new(spec);
    let rope_freqs = m.opt_weight(None, t::ROPE_FREQS, &[spec.hp.rope_dim / 2])?;
    let mut x = m.embed()?;
    for il in 0..spec.hp.n_layer {
        // h = x + W_o attn(rope(W_q n(x)), rope(W_k n(x)), W_v n(x))
        let h = m.norm(x, il, t::ATTN_NORM, SubLayer::AttnQkv)?;
        let (q, k, v) = m.qkv(h, il, false)?;
        let (q, k) = m.rope(q, k, il, RopeKind::Normal, rope_freqs);
        let a = m.attention(q, k, v, il)?;
        x = m.residual(x, a, format!("blk.{il}.attn_residual"));
        // x = h + W_down (silu(W_gate n(h)) * W_up n(h))
        let h = m.norm(x, il, t::FFN_NORM, SubLayer::FfnUp)?;
        let f = m.ffn(h, il)?;
        x = m.residual(x, f, format!("blk.{il}.ffn_residual"));
    }
    m.output(x)
}
