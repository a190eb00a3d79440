//! Matrix multiplication of f32 activations by a weight matrix stored in any
//! supported GGUF type: the hot kernels of the CPU backend.
//!
//! `y[t * rows + r] = sum_c x[t * cols + c] * W[r, c]`, with the numerics of
//! llama.cpp's CPU backend so that logits can be compared with it:
//! - F32 weights: f32 FMA dot products.
//! - F16 / BF16 weights: widened to f32 on the fly, f32 FMA (ggml rounds the
//!   activations to f16 / bf16 first; we keep them f32).
//! - Q4_0, Q5_0, Q8_0: activations quantised to Q8_0 blocks (ggml's reference
//!   rounding), integer dot products per block.
//! - Q4_1, Q5_1: Q8_1 activations (with ggml's f16 block sums for the mins).
//! - K-quants: Q8_K activations (f32 scale, 16 block sums per 256 values).
//!
//! Every kernel evaluates the same operations in the same order for each
//! output: for quantised weights an exact integer dot product per block, then
//! one f32 FMA chain over the blocks; for float weights eight FMA lanes and a
//! fixed lane sum. So results are bit-identical whatever the instruction set,
//! the tile, the batch (a token computed alone or inside a prefill) and the
//! thread count.
//!
//! Decode (one token) is bound by memory bandwidth: its kernels put 4 rows in
//! the vector lanes, read the weights as one linear stream and prefetch
//! ahead. Prefill is bound by compute: its kernels put 8 tokens in the lanes
//! (16 or 32 on AVX-512 VNNI; token-interleaved activations, quantised once
//! per call) and reuse each unpacked weight block for all of them. Work is
//! split over output rows and tokens on the *current* [`crate::team`].
//! Kernels are chosen by [`Isa`], detected at run time; [`Isa::Scalar`]
//! runs anywhere.

mod acts;
mod gemm;
mod isa;
mod kernels;
#[cfg(test)]
mod tests;

use std::cell::RefCell;

use ats_core::DType;

pub use isa::{ALL_ISAS, Isa, UnknownIsa};

/// A row-major weight matrix in GGUF layout: `rows` rows of `cols` elements
/// of `dtype` (GGUF `ne = [cols, rows]`).
#[derive(Clone, Copy, Debug)]
pub struct WeightMatrix<'a> {
    /// Element or block type.
    pub dtype: DType,
    /// Output features.
    pub rows: usize,
    /// Input features (elements per row).
    pub cols: usize,
    /// `rows * dtype.row_bytes(cols)` bytes.
    pub data: &'a [u8],
}

impl<'a> WeightMatrix<'a> {
    /// A weight matrix, checked: whole blocks per row and exactly the bytes
    /// the shape needs.
    pub fn new(
        dtype: DType,
        rows: usize,
        cols: usize,
        data: &'a [u8],
    ) -> Result<Self, MatmulError> {
        let w = WeightMatrix {
            dtype,
            rows,
            cols,
            data,
        };
        w.validate()?;
        Ok(w)
    }

    /// Bytes per row, or why the shape cannot hold this type.
    pub fn row_bytes(&self) -> Result<usize, MatmulError> {
        self.dtype
            .row_bytes(self.cols)
            .ok_or(MatmulError::PartialBlock {
                dtype: self.dtype,
                cols: self.cols,
                block: self.dtype.block_size(),
            })
    }

    /// Checks that `data` holds exactly `rows` whole rows.
    pub fn validate(&self) -> Result<(), MatmulError> {
        let rb = self.row_bytes()?;
        let expected = rb.checked_mul(self.rows);
        if expected != Some(self.data.len()) {
            return Err(MatmulError::WeightBytes {
                dtype: self.dtype,
                rows: self.rows,
                cols: self.cols,
                got: self.data.len(),
                expected,
            });
        }
        Ok(())
    }
}

/// Why a matmul cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MatmulError {
    /// Rows of a block type must hold whole blocks.
    #[error("{dtype} weights need a multiple of {block} columns, got {cols}")]
    PartialBlock {
        /// The weight type.
        dtype: DType,
        /// Columns asked for.
        cols: usize,
        /// Elements per block of `dtype`.
        block: usize,
    },
    /// The weight bytes do not match the shape.
    #[error("{dtype} weight matrix {rows}x{cols}: {got} bytes given, {expected:?} expected")]
    WeightBytes {
        /// The weight type.
        dtype: DType,
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
        /// Bytes given.
        got: usize,
        /// Bytes the shape needs (`None`: it overflows).
        expected: Option<usize>,
    },
    /// The activations do not match `n_tokens x cols`.
    #[error("activations: {got} values given, {n_tokens} tokens x {cols} columns expected")]
    InputLen {
        /// Values given.
        got: usize,
        /// Tokens asked for.
        n_tokens: usize,
        /// Columns of the weights.
        cols: usize,
    },
    /// The output does not match `n_tokens x rows`.
    #[error("output: room for {got} values, {n_tokens} tokens x {rows} rows expected")]
    OutputLen {
        /// Values of room given.
        got: usize,
        /// Tokens asked for.
        n_tokens: usize,
        /// Rows of the weights.
        rows: usize,
    },
    /// The instruction set has no kernels here or the CPU lacks it.
    #[error("instruction set {0} is not available on this CPU (available: {1:?})")]
    IsaUnavailable(Isa, Vec<Isa>),
}

/// Reusable buffers of [`matmul_with`] (the quantised activations), grown on
/// demand and kept, so that a decode step allocates nothing.
#[derive(Debug, Default)]
pub struct MatmulScratch {
    acts: acts::QuantActs,
}

impl MatmulScratch {
    /// Empty buffers.
    pub fn new() -> Self {
        Self::default()
    }
}

thread_local! {
    static SCRATCH: RefCell<MatmulScratch> = RefCell::new(MatmulScratch::new());
}

/// `y[t * rows + r] = sum_c x[t * cols + c] * W[r, c]` for `n_tokens` tokens,
/// with the kernels of `isa`, on the current [`crate::team`]. Uses a per-thread
/// [`MatmulScratch`].
pub fn matmul(
    w: &WeightMatrix<'_>,
    x: &[f32],
    n_tokens: usize,
    y: &mut [f32],
    isa: Isa,
) -> Result<(), MatmulError> {
    SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut s) => matmul_with(w, x, n_tokens, y, isa, &mut s),
        // Re-entered from inside a matmul on this thread: use fresh buffers.
        Err(_) => matmul_with(w, x, n_tokens, y, isa, &mut MatmulScratch::new()),
    })
}

/// [`matmul`] with caller-owned buffers.
pub fn matmul_with(
    w: &WeightMatrix<'_>,
    x: &[f32],
    n_tokens: usize,
    y: &mut [f32],
    isa: Isa,
    scratch: &mut MatmulScratch,
) -> Result<(), MatmulError> {
    w.validate()?;
    if Some(x.len()) != n_tokens.checked_mul(w.cols) {
        return Err(MatmulError::InputLen {
            got: x.len(),
            n_tokens,
            cols: w.cols,
        });
    }
    if Some(y.len()) != n_tokens.checked_mul(w.rows) {
        return Err(MatmulError::OutputLen {
            got: y.len(),
            n_tokens,
            rows: w.rows,
        });
    }
    if !isa.is_available() {
        return Err(MatmulError::IsaUnavailable(isa, Isa::available()));
    }
    if w.cols == 0 {
        y.fill(0.0);
        return Ok(());
    }
    kernels::run(w, x, n_tokens, y, isa, &mut scratch.acts);
    Ok(())
}

/// The bytes of weights a matmul of `dtype` reads per `cols` columns, for
/// bandwidth figures (`None` on a partial block).
pub fn weight_bytes(dtype: DType, rows: usize, cols: usize) -> Option<usize> {
    dtype.row_bytes(cols)?.checked_mul(rows)
}
