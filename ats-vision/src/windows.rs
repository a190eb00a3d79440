//! Qwen2.5-VL's window attention layout, as HF's `get_window_index`: merge
//! groups are reordered window by window (windows in raster order over the
//! merged grid, groups in raster order inside each), so every window is a
//! contiguous run of rows and window layers need no mask at all.

/// The window order of one image's merge groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Windows {
    /// Source merge group of each position in window order (HF's `window_index`).
    pub index: Vec<u32>,
    /// The inverse permutation (HF's `argsort(window_index)`): restores raster order.
    pub inverse: Vec<u32>,
    /// Cumulative window lengths in patches, from 0 (HF's `cu_window_seqlens`
    /// after `unique_consecutive`: no empty windows).
    pub cu_seqlens: Vec<usize>,
}

/// Windows of `window` x `window` merge groups over a merged grid of
/// `llm_h` x `llm_w` groups of `unit` patches each; windows at the bottom and
/// right edges are partial.
pub fn window_index(llm_h: usize, llm_w: usize, window: usize, unit: usize) -> Windows {
    let window = window.max(1);
    let n = llm_h * llm_w;
    let mut index = Vec::with_capacity(n);
    let mut cu_seqlens = vec![0];
    for wy in (0..llm_h).step_by(window) {
        for wx in (0..llm_w).step_by(window) {
            let (h, w) = (window.min(llm_h - wy), window.min(llm_w - wx));
            for dy in 0..h {
                for dx in 0..w {
                    index.push(((wy + dy) * llm_w + wx + dx) as u32);
                }
            }
            cu_seqlens.push(cu_seqlens[cu_seqlens.len() - 1] + h * w * unit);
        }
    }
    let mut inverse = vec![0u32; n];
    for (dst, &src) in index.iter().enumerate() {
        inverse[src as usize] = dst as u32;
    }
    Windows {
        index,
        inverse,
        cu_seqlens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_windows_at_the_edges() {
        // 3 x 5 groups, windows of 2: a 2x2 grid of windows with partial edges
        let w = window_index(3, 5, 2, 4);
        assert_eq!(w.index, [0, 1, 5, 6, 2, 3, 7, 8, 4, 9, 10, 11, 12, 13, 14]);
        assert_eq!(w.cu_seqlens, [0, 16, 32, 40, 48, 56, 60]);
        for (dst, &src) in w.index.iter().enumerate() {
            assert_eq!(w.inverse[src as usize] as usize, dst);
        }
    }

    #[test]
    fn one_window_covers_a_small_grid() {
        let w = window_index(2, 3, 4, 4);
        assert_eq!(w.index, [0, 1, 2, 3, 4, 5]);
        assert_eq!(w.cu_seqlens, [0, 24]);
    }
}
