//! Qwen3: no q/k/v biases; per-head RMSNorm of q and k before NeoX RoPE.

use super::decoder::Decoder;
use crate::graph::{Graph, RopeKind, SubLayer};
use crate::names::tensor as t;
use crate::spec::{ModelSpec, SpecError};

pub(crate) fn build(spec: &ModelSpec) -> Result<Graph, SpecError> {
    let mut m = Decoder::new(spec);
    let mut x = m.embed()?;
    for il in 0..spec.hp.n_layer {
        let h = m.norm(x, il, t::ATTN_NORM, SubLayer::AttnQkv)?;
        let (q, k, v) = m.qkv(h, il, false)?;
        let (q, k) = m.head_norms(q, k, il)?;
        let (q, k) = m.rope(q, k, il, RopeKind::Neox, None);
        let a = m.attention(q, k, v, il)?;
        x = m.residual(x, a, format!("blk.{il}.attn_residual"));
        let h = m.norm(x, il, t::FFN_NORM, SubLayer::FfnUp)?;
        let f = m.ffn(h, il)?;
        x = m.residual(x, f, format!("blk.{il}.ffn_residual"));
    }
    m.output(x)
}
