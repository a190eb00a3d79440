//! The vision graph of one image and the building blocks both Qwen-VL
//! towers share; each architecture's file assembles them top to bottom.

use ats_core::graph::{
    AttnSpec, GeluKind, Graph, GraphBuilder, GraphInput, Mask, RopeKind, RopeSpec, Rows, SubLayer,
    ValueId, WeightId,
};
use ats_core::names::clip::tensor as t;
use ats_core::round::Positions;

use crate::VisionError;
use crate::spec::{Projector, VisionHParams, VisionMlp, VisionNorm, VisionSpec};

/// Everything one image's encoder round needs besides its pixels.
#[derive(Clone, Debug)]
pub struct VisionGraph {
    /// The graph: pixel rows in, image embeddings (merged rows, raster order) out.
    pub graph: Graph,
    /// 2D RoPE positions of the rows as the blocks see them (after any window reordering).
    pub positions: Positions,
    /// Window boundaries in rows, cumulative from 0 (empty when no block uses windows).
    pub segments: Vec<usize>,
    /// (t, h, w) of the image in patches.
    pub grid: [usize; 3],
    /// Image tokens out (merged patches).
    pub n_tokens: usize,
}

impl VisionGraph {
    /// Patches in (pixel rows of the round).
    pub fn n_patches(&self) -> usize {
        self.grid.iter().product()
    }
}

/// Checks the grid and builds the graph of `spec`'s architecture for it.
pub(crate) fn build(spec: &VisionSpec, grid: [usize; 3]) -> Result<VisionGraph, VisionError> {
    let m = spec.hp.merge_size;
    let bad = |problem: String| VisionError::BadGrid { grid, problem };
    if grid[0] != 1 {
        return Err(bad(
            "only single images (t = 1) are supported, not video".into()
        ));
    }
    if grid[1] == 0 || grid[2] == 0 || !grid[1].is_multiple_of(m) || !grid[2].is_multiple_of(m) {
        return Err(bad(format!(
            "sides must be positive multiples of the merge size {m}"
        )));
    }
    // positions are i32 and row counts must stay far from overflow
    if grid[1].checked_mul(grid[2]).is_none_or(|n| n > 1 << 24) {
        return Err(bad("more than 2^24 patches".into()));
    }
    match spec.projector {
        Projector::Qwen2Vl => crate::qwen2vl::build(spec, grid),
        Projector::Qwen25Vl => crate::qwen25vl::build(spec, grid),
    }
}

/// A vision graph under construction: each method is one step of the
/// reference forward pass, checking the tensors it reads.
pub(crate) struct Vit<'a> {
    spec: &'a VisionSpec,
    pub hp: &'a VisionHParams,
    pub b: GraphBuilder,
}

impl<'a> Vit<'a> {
    pub fn new(spec: &'a VisionSpec) -> Self {
        let mut b = GraphBuilder::new(GraphInput::Rows {
            cols: spec.hp.row_len(),
        });
        b.at(None, SubLayer::Vision);
        Vit {
            spec,
            hp: &spec.hp,
            b,
        }
    }

    /// Registers `name` (block `il`'s, if given) with GGML dimensions `ne`.
    pub fn weight(
        &mut self,
        il: Option<usize>,
        name: &str,
        ne: &[usize],
    ) -> Result<WeightId, VisionError> {
        let full = il.map_or_else(|| name.to_string(), |l| t::blk(l, name));
        self.b.at(il, SubLayer::Vision);
        let info = self.spec.weight(&full, ne, None)?;
        Ok(self.b.weight(info))
    }

    /// Conv3d patch embedding without bias: `x_0 W_0^T + x_1 W_1^T`, where
    /// `x_f` are the columns of frame `f` in the `(c, f, y, x)` pixel rows and
    /// `W_f` the kernel's frame `f` (`[p, p, 3, d]` viewed as `[3 p p, d]`).
    pub fn patch_embed(&mut self) -> Result<ValueId, VisionError> {
        let hp = self.hp;
        let (p, d) = (hp.patch_size, hp.n_embd);
        if self.spec.has_tensor(t::PATCH_BIAS) {
            return Err(VisionError::Unsupported {
                file: self.spec.path().to_path_buf(),
                what: format!("a patch embedding bias ({})", t::PATCH_BIAS),
            });
        }
        let frame = p * p;
        let input = self.b.input();
        let mut term = |f: usize, name: &str| -> Result<ValueId, VisionError> {
            let info = self
                .spec
                .weight(name, &[p, p, 3, d], Some(&[3 * frame, d]))?;
            let w = self.b.weight(info);
            let x = self.b.gather_cols(
                &format!("patch_frame_{f}"),
                input,
                f * frame,
                frame,
                hp.temporal_patch * frame,
                3,
            );
            Ok(self.b.matmul(&format!("patch_embd_{f}"), x, w, None))
        };
        let (y0, y1) = (term(0, t::PATCH_EMBD)?, term(1, t::PATCH_EMBD_1)?);
        Ok(self.b.add("patch_embd", y0, y1))
    }

    /// The block or merger norm: `weight` (and `bias` for LayerNorm).
    pub fn norm(
        &mut self,
        x: ValueId,
        il: Option<usize>,
        weight: &str,
        bias: &str,
    ) -> Result<ValueId, VisionError> {
        let d = self.hp.n_embd;
        let w = self.weight(il, weight, &[d])?;
        let name = il.map_or_else(|| weight.to_string(), |l| t::blk(l, weight));
        Ok(match self.hp.norm {
            VisionNorm::Rms => self.b.rms_norm(&name, x, w, self.hp.eps, d),
            VisionNorm::Layer => {
                let bw = self.weight(il, bias, &[d])?;
                self.b.layer_norm(&name, x, w, bw, self.hp.eps)
            }
        })
    }

    /// `x W^T + b` for block `il`'s `weight` and `bias` of `[n_in, n_out]`.
    fn linear(
        &mut self,
        x: ValueId,
        il: usize,
        weight: &str,
        bias: &str,
        n_in: usize,
        n_out: usize,
    ) -> Result<ValueId, VisionError> {
        let w = self.weight(Some(il), weight, &[n_in, n_out])?;
        let b = self.weight(Some(il), bias, &[n_out])?;
        Ok(self.b.matmul(&t::blk(il, weight), x, w, Some(b)))
    }

    /// Self-attention of block `il`: q, k, v with biases, 2D RoPE on q and k,
    /// attention under `mask`, the output projection with bias.
    pub fn attention(&mut self, h: ValueId, il: usize, mask: Mask) -> Result<ValueId, VisionError> {
        let hp = self.hp;
        let d = hp.n_embd;
        let q = self.linear(h, il, t::ATTN_Q, t::ATTN_Q_BIAS, d, d)?;
        let k = self.linear(h, il, t::ATTN_K, t::ATTN_K_BIAS, d, d)?;
        let v = self.linear(h, il, t::ATTN_V, t::ATTN_V_BIAS, d, d)?;
        let rope = RopeSpec {
            kind: RopeKind::Vision2d,
            n_heads: hp.n_head,
            head_dim: hp.head_dim,
            rot_dim: hp.head_dim,
            theta: hp.rope_theta,
            yarn: None,
        };
        let q = self.b.rope(&format!("v.blk.{il}.rope_q"), q, rope, None);
        let k = self.b.rope(&format!("v.blk.{il}.rope_k"), k, rope, None);
        let spec = AttnSpec {
            cache: None,
            n_heads: hp.n_head,
            n_kv_heads: hp.n_head,
            head_dim: hp.head_dim,
            scale: 1.0 / (hp.head_dim as f32).sqrt(),
            mask,
            window: None,
            sinks: false,
        };
        let a = self
            .b
            .attention(&format!("v.blk.{il}.attn"), [q, k, v], spec, None);
        self.linear(a, il, t::ATTN_OUT, t::ATTN_OUT_BIAS, d, d)
    }

    /// The block's MLP.
    pub fn mlp(&mut self, h: ValueId, il: usize) -> Result<ValueId, VisionError> {
        let (d, f) = (self.hp.n_embd, self.hp.n_ff);
        let a = match self.hp.mlp {
            VisionMlp::SwiGlu => {
                let g = self.linear(h, il, t::FFN_GATE, t::FFN_GATE_BIAS, d, f)?;
                let u = self.linear(h, il, t::FFN_UP, t::FFN_UP_BIAS, d, f)?;
                self.b.swiglu(&format!("v.blk.{il}.ffn_swiglu"), g, u)
            }
            VisionMlp::Plain(kind) => {
                let u = self.linear(h, il, t::FFN_UP, t::FFN_UP_BIAS, d, f)?;
                self.b.gelu(&format!("v.blk.{il}.ffn_act"), u, kind)
            }
        };
        self.linear(a, il, t::FFN_DOWN, t::FFN_DOWN_BIAS, f, d)
    }

    /// One block: `x + attn(norm1 x)`, then `+ mlp(norm2 x)`.
    pub fn block(&mut self, x: ValueId, il: usize, mask: Mask) -> Result<ValueId, VisionError> {
        let (ln1, ln1b, ln2, ln2b) = (t::LN1, t::LN1_BIAS, t::LN2, t::LN2_BIAS);
        let h = self.norm(x, Some(il), ln1, ln1b)?;
        let a = self.attention(h, il, mask)?;
        let x = self.b.add(&format!("v.blk.{il}.attn_residual"), x, a);
        let h = self.norm(x, Some(il), ln2, ln2b)?;
        let f = self.mlp(h, il)?;
        Ok(self.b.add(&format!("v.blk.{il}.ffn_residual"), x, f))
    }

    /// The patch merger: norm, each merge group's rows side by side, then
    /// `mm.2(gelu(mm.0 x))` into the language model's embedding size.
    pub fn merger(&mut self, x: ValueId, n_tokens: usize) -> Result<ValueId, VisionError> {
        let hp = self.hp;
        let unit = hp.merge_size * hp.merge_size;
        let (m, o) = (hp.n_embd * unit, hp.projection_dim);
        let h = self.norm(x, None, t::POST_LN, t::POST_LN_BIAS)?;
        let h = self
            .b
            .merge_rows("merge_groups", h, unit, Rows::Fixed(n_tokens));
        let w0 = self.weight(None, t::MM_0, &[m, m])?;
        let b0 = self.weight(None, t::MM_0_BIAS, &[m])?;
        let h = self.b.matmul("mm.0", h, w0, Some(b0));
        // HF's merger uses nn.GELU(): the exact erf form
        let h = self.b.gelu("mm.gelu", h, GeluKind::Erf);
        let w2 = self.weight(None, t::MM_2, &[m, o])?;
        let b2 = self.weight(None, t::MM_2_BIAS, &[o])?;
        Ok(self.b.matmul("mm.2", h, w2, Some(b2)))
    }
}
