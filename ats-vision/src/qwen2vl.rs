//! Qwen2-VL's vision tower (HF `Qwen2VisionTransformerPretrainedModel`):
//! Conv3d patch embedding, LayerNorm blocks with 2D RoPE and full attention
//! over the image, QuickGELU MLPs, then the 2x2 patch merger.

use ats_core::graph::Mask;

use crate::VisionError;
use crate::graph::{VisionGraph, Vit};
use crate::positions::vision_positions;
use crate::spec::VisionSpec;

pub(crate) fn build(spec: &VisionSpec, grid: [usize; 3]) -> Result<VisionGraph, VisionError> {
    let hp = &spec.hp;
    let n_tokens = grid[0] * grid[1] * grid[2] / (hp.merge_size * hp.merge_size);
    let mut v = Vit::new(spec);
    let mut x = v.patch_embed()?;
    for il in 0..hp.n_layer {
        x = v.block(x, il, Mask::Full)?;
    }
    let y = v.merger(x, n_tokens)?;
    Ok(VisionGraph {
        graph: v.b.finish(y),
        positions: vision_positions(grid[1], grid[2], hp.merge_size, None),
        segments: Vec::new(),
        grid,
        n_tokens,
    })
}
