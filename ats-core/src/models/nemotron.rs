//! Nemotron-4 / Minitron (`nemotron`): a pre-norm decoder normalised by
//! LayerNorm with a bias (the converter stores Nemotron's `1 + w` weights
//! already added), NeoX RoPE on part of each head, and a non-gated FFN with
//! squared ReLU. Attention and FFN biases are taken where the file has them.

use super::decoder::{AttnExtras, Decoder};
use crate::graph::{Graph, RopeKind, SubLayer};
use crate::names::tensor::{self as t, blk};
use crate::spec::{ModelSpec, SpecError};

pub(crate) fn build(spec: &ModelSpec) -> Result<Graph, SpecError> {
    let mut m = Decoder::new(spec);
    let mut x = m.embed()?;
    for il in 0..spec.hp.n_layer {
        // x = x + W_o attn(rope(W_q ln(x)), rope(W_k ln(x)), W_v ln(x)) (+ b_o)
        let h = m.norm(x, il, t::ATTN_NORM, SubLayer::AttnQkv)?;
        let qkv_bias = spec.has_tensor(&blk(il, t::ATTN_Q_BIAS));
        let (q, k, v) = m.qkv(h, il, qkv_bias)?;
        let (q, k) = m.rope(q, k, il, RopeKind::Neox, None);
        let extras = AttnExtras {
            out_bias: spec.has_tensor(&blk(il, t::ATTN_OUT_BIAS)),
            ..AttnExtras::default()
        };
        let a = m.attention_with(q, k, v, il, extras)?;
        x = m.residual(x, a, format!("blk.{il}.attn_residual"));
        // x = x + W_down relu(W_up ln(x))^2
        let h = m.norm(x, il, t::FFN_NORM, SubLayer::FfnUp)?;
        let f = m.ffn_relu_sqr(h, il)?;
        x = m.residual(x, f, format!("blk.{il}.ffn_residual"));
    }
    m.output(x)
}
