//! GLM-4.5 / 4.6 (`glm4moe`): pre-norm blocks with q/k/v biases, per-head
//! q/k norms where the file has them (the 355B model; Air has none) and NeoX
//! RoPE on the first half of each head. The first `leading_dense_block_count`
//! FFNs are dense SwiGLU; the others route each token to the top-k experts by
//! sigmoid score plus a selection bias, weigh them by their renormalised,
//! scaled scores, and add a shared expert. The trailing NextN (multi-token
//! prediction) blocks are carried, not run.

use super::decoder::Decoder;
use crate::graph::{Graph, RopeKind, SubLayer};
use crate::names::tensor as t;
use crate::spec::{ModelSpec, SpecError};

pub(crate) fn build(spec: &ModelSpec) -> Result<Graph, SpecError> {
    let mut m = Decoder::new(spec);
    let mut x = m.embed()?;
    for il in 0..spec.hp.n_layer {
        // x = x + W_o attn(rope(qn(W_q n(x) + b_q)), rope(kn(W_k n(x) + b_k)), W_v n(x) + b_v)
        let h = m.norm(x, il, t::ATTN_NORM, SubLayer::AttnQkv)?;
        let (q, k, v) = m.qkv(h, il, true)?;
        let (q, k) = m.opt_head_norms(q, k, il)?;
        let (q, k) = m.rope(q, k, il, RopeKind::Neox, None);
        let a = m.attention(q, k, v, il)?;
        x = m.residual(x, a, format!("blk.{il}.attn_residual"));
        // x = x + ffn(n(x)), or x + shared(n(x)) + routed(n(x))
        let dense = il < spec.hp.n_dense_lead;
        // the norm goes with the first product that reads it
        let sub = match (dense, spec.hp.n_expert_shared) {
            (false, 0) => SubLayer::MoeRouter,
            _ => SubLayer::FfnUp,
        };
        let h = m.norm(x, il, t::ATTN_POST_NORM, sub)?;
        let f = if dense {
            m.ffn(h, il)?
        } else {
            let shared = m.shared_expert(h, il)?;
            let routed = m.moe(h, il)?;
            match shared {
                Some(s) => m.residual(routed, s, format!("blk.{il}.ffn_moe_shared")),
                None => routed,
            }
        };
        x = m.residual(x, f, format!("blk.{il}.ffn_residual"));
    }
    m.output(x)
}
