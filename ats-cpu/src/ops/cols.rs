//! Gathering strided blocks of columns (one temporal frame of Conv3d patch rows).

/// Blocks of columns: `blocks` runs of `len` columns, `stride` apart, from `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColBlocks {
    /// Column of the first block.
    pub offset: usize,
    /// Columns per block.
    pub len: usize,
    /// Columns from one block's start to the next.
    pub stride: usize,
    /// Blocks.
    pub blocks: usize,
}

impl ColBlocks {
    /// Columns of the gathered rows.
    pub fn out_cols(&self) -> usize {
        self.blocks * self.len
    }

    /// Whether every block lies within rows of `in_cols` columns.
    pub fn fits(&self, in_cols: usize) -> bool {
        self.blocks == 0
            || (self.blocks - 1)
                .checked_mul(self.stride)
                .and_then(|x| x.checked_add(self.offset))
                .and_then(|x| x.checked_add(self.len))
                .is_some_and(|end| end <= in_cols)
    }
}

/// `out[r, b * len + j] = x[r, offset + b * stride + j]` for every row of `x`
/// (`in_cols` wide); the blocks must fit ([`ColBlocks::fits`]).
pub fn gather_cols(x: &[f32], in_cols: usize, b: &ColBlocks, out: &mut [f32]) {
    let w = b.out_cols();
    if w == 0 {
        return;
    }
    for (row, o) in x.chunks_exact(in_cols).zip(out.chunks_exact_mut(w)) {
        for (k, dst) in o.chunks_exact_mut(b.len).enumerate() {
            let s = b.offset + k * b.stride;
            dst.copy_from_slice(&row[s..s + b.len]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_an_index_by_index_gather() {
        // rows laid out (c=3, t=2, 4 pixels): frame t is offset t*4, stride 8
        let (rows, in_cols) = (5, 24);
        let x: Vec<f32> = (0..rows * in_cols).map(|i| i as f32).collect();
        for t in 0..2 {
            let b = ColBlocks {
                offset: t * 4,
                len: 4,
                stride: 8,
                blocks: 3,
            };
            assert!(b.fits(in_cols));
            let mut out = vec![0.0; rows * 12];
            gather_cols(&x, in_cols, &b, &mut out);
            for r in 0..rows {
                for c in 0..3 {
                    for p in 0..4 {
                        assert_eq!(out[r * 12 + c * 4 + p], x[r * in_cols + c * 8 + t * 4 + p]);
                    }
                }
            }
        }
    }

    #[test]
    fn blocks_past_the_row_do_not_fit() {
        let b = ColBlocks {
            offset: 5,
            len: 4,
            stride: 8,
            blocks: 3,
        };
        assert!(!b.fits(24) && b.fits(25));
        let huge = ColBlocks {
            stride: usize::MAX,
            ..b
        };
        assert!(!huge.fits(usize::MAX));
    }
}
