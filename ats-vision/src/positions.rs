//! Positions: the (row, column) of each patch for the vision tower's 2D
//! RoPE, and the language model's M-RoPE (temporal, height, width) ids as
//! HF's `get_rope_index` computes them.

use ats_core::round::Positions;

/// `(row, column)` of every patch of a `grid_h` x `grid_w` grid in the
/// processor's row order: merge groups in raster order, then the `merge` x
/// `merge` patches of each group in raster order (HF's `rot_pos_emb`).
pub fn patch_positions(grid_h: usize, grid_w: usize, merge: usize) -> Vec<[i32; 2]> {
    let mut out = Vec::with_capacity(grid_h * grid_w);
    for bh in 0..grid_h / merge {
        for bw in 0..grid_w / merge {
            for mh in 0..merge {
                for mw in 0..merge {
                    out.push([(bh * merge + mh) as i32, (bw * merge + mw) as i32]);
                }
            }
        }
    }
    out
}

/// The vision RoPE positions (2 components: row, column) of one image, with
/// its merge groups (of `merge * merge` rows) in `order` when the rows are
/// window-reordered.
pub fn vision_positions(
    grid_h: usize,
    grid_w: usize,
    merge: usize,
    order: Option<&[u32]>,
) -> Positions {
    let pos = patch_positions(grid_h, grid_w, merge);
    let unit = merge * merge;
    let data: Vec<i32> = match order {
        None => pos.iter().flatten().copied().collect(),
        Some(order) => order
            .iter()
            .flat_map(|&g| {
                pos[g as usize * unit..(g as usize + 1) * unit]
                    .iter()
                    .flatten()
                    .copied()
            })
            .collect(),
    };
    Positions {
        components: 2,
        data,
    }
}

/// A run of prompt tokens, for M-RoPE positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Span {
    /// `n` text tokens.
    Text(usize),
    /// An image's tokens: a `t` x `h` x `w` grid of merged patches.
    Image {
        /// Frames.
        t: usize,
        /// Rows of merged patches.
        h: usize,
        /// Columns of merged patches.
        w: usize,
    },
}

impl Span {
    /// Tokens in the span.
    pub fn len(&self) -> usize {
        match *self {
            Span::Text(n) => n,
            Span::Image { t, h, w } => t * h * w,
        }
    }

    /// Whether the span has no tokens.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// M-RoPE positions (4 components: temporal, height, width, 0) of a prompt
/// made of `spans`, and the position the next token takes. Text tokens count
/// up in all three sections; an image's tokens sit at `start + (f, row, col)`;
/// what follows an image starts at one past the largest position so far.
pub fn mrope_positions(spans: &[Span]) -> (Positions, i64) {
    let mut data = Vec::with_capacity(4 * spans.iter().map(Span::len).sum::<usize>());
    let mut next: i64 = 0;
    for s in spans {
        match *s {
            Span::Text(n) => {
                for i in 0..n as i64 {
                    let p = (next + i) as i32;
                    data.extend_from_slice(&[p, p, p, 0]);
                }
                next += n as i64;
            }
            Span::Image { t, h, w } => {
                for f in 0..t {
                    for r in 0..h {
                        for c in 0..w {
                            let at = |x: usize| (next + x as i64) as i32;
                            data.extend_from_slice(&[at(f), at(r), at(c), 0]);
                        }
                    }
                }
                if t * h * w > 0 {
                    next += t.max(h).max(w) as i64;
                }
            }
        }
    }
    (
        Positions {
            components: 4,
            data,
        },
        next,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_go_by_merge_group() {
        let p = patch_positions(2, 4, 2);
        assert_eq!(
            p,
            [
                [0, 0],
                [0, 1],
                [1, 0],
                [1, 1],
                [0, 2],
                [0, 3],
                [1, 2],
                [1, 3]
            ]
        );
        let reordered = vision_positions(2, 4, 2, Some(&[1, 0]));
        assert_eq!(&reordered.data[..4], &[0, 2, 0, 3]);
        assert_eq!(reordered.len(), 8);
    }

    #[test]
    fn text_after_an_image_continues_past_its_largest_side() {
        let (p, next) = mrope_positions(&[
            Span::Text(2),
            Span::Image { t: 1, h: 2, w: 3 },
            Span::Text(1),
        ]);
        assert_eq!(p.len(), 9);
        assert_eq!((p.get(1, 0), p.get(2, 0)), (1, 2));
        // image token (row 1, col 2) at start 2
        assert_eq!([p.get(7, 0), p.get(7, 1), p.get(7, 2)], [2, 3, 4]);
        assert_eq!([p.get(8, 0), p.get(8, 1), p.get(8, 2)], [5, 5, 5]);
        assert_eq!(next, 6);
    }
}
