//! Qwen2.5-VL's vision tower (HF `Qwen2_5_VisionTransformerPretrainedModel`):
//! Conv3d patch embedding, then the merge groups reordered window by window;
//! RMSNorm blocks with 2D RoPE, attention within each window (a contiguous run
//! of rows: no mask) except every `n_wa_pattern`-th block, which attends over
//! the whole image; SwiGLU MLPs; the 2x2 patch merger; finally the merged rows
//! put back in raster order.

use ats_core::graph::Mask;

use crate::VisionError;
use crate::graph::{VisionGraph, Vit};
use crate::positions::vision_positions;
use crate::spec::VisionSpec;
use crate::windows::window_index;

pub(crate) fn build(spec: &VisionSpec, grid: [usize; 3]) -> Result<VisionGraph, VisionError> {
    let hp = &spec.hp;
    let unit = hp.merge_size * hp.merge_size;
    let (llm_h, llm_w) = (grid[1] / hp.merge_size, grid[2] / hp.merge_size);
    let n_tokens = grid[0] * llm_h * llm_w;
    let windows = hp
        .uses_windows()
        .then(|| window_index(llm_h, llm_w, hp.window_groups(), unit));
    let mut v = Vit::new(spec);
    let mut x = v.patch_embed()?;
    if let Some(w) = &windows {
        x = v.b.permute_rows("window_order", x, unit, w.index.clone());
    }
    for il in 0..hp.n_layer {
        let mask = if hp.full_attention(il) {
            Mask::Full
        } else {
            Mask::Segments
        };
        x = v.block(x, il, mask)?;
    }
    let mut y = v.merger(x, n_tokens)?;
    if let Some(w) = &windows {
        y = v.b.permute_rows("window_restore", y, 1, w.inverse.clone());
    }
    Ok(VisionGraph {
        graph: v.b.finish(y),
        positions: vision_positions(
            grid[1],
            grid[2],
            hp.merge_size,
            windows.as_ref().map(|w| w.index.as_slice()),
        ),
        segments: windows.map(|w| w.cu_seqlens).unwrap_or_default(),
        grid,
        n_tokens,
    })
}
