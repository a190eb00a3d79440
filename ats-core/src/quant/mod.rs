//! Reference (de)quantisation of every element type ATS runs: plain floats and
//! llama.cpp's block formats (legacy, K-quants, IQ4_NL / IQ4_XS and MXFP4).
//!
//! Each format lives in its own module and is described there byte by byte.
//! The code works on the byte layout itself (little-endian, f16 through the
//! `half` crate), never by transmuting `repr(C)` structs, so it runs on any
//! alignment and host byte order. Every module exposes its block geometry
//! (`BLOCK_ELEMS`, `BLOCK_BYTES`), the byte offsets of its fields (`OFF_*`),
//! and `dequantize_block` / `quantize_block` on fixed-size arrays; this module
//! dispatches whole rows on a [`DType`] and checks their lengths.
//!
//! Dequantisation is bit-exact with ggml's `to_float` (and gguf-py). Every
//! quantiser reproduces ggml's reference quantiser byte for byte (for the
//! K-quants, IQ4_NL and IQ4_XS: `llama-quantize` without an importance
//! matrix), checked against the fixtures and, for IQ4_NL / IQ4_XS, against
//! vectors ggml made (`tests/data/iq4.*`). One deliberate addition: ggml's
//! K-quant search is not idempotent, so values that already lie on a K-quant grid are re-encoded
//! exactly instead (see `exact.rs`): requantising dequantised weights gives
//! back the same values bit for bit.
//!
//! Helpers for kernels that read K-quant blocks directly:
//! [`get_scale_min_k4`] and [`unpack_scale_min_k4`] (the 6-bit scales and
//! mins of Q4_K/Q5_K), [`unpack_q3k_scales`] (the signed 6-bit scales of
//! Q3_K), and their inverses [`pack_scale_min_k4`] and [`pack_q3k_scales`].

use crate::dtype::DType;

mod exact;
mod float;
pub mod iq4_nl;
pub mod iq4_xs;
pub mod mxfp4;
pub mod q2_k;
pub mod q3_k;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;
mod search;

pub use float::{bf16_bits_from_f32, f16_bits_from_f32};
pub use q3_k::{pack_q3k_scales, unpack_q3k_scales};
pub use q4_k::{get_scale_min_k4, pack_scale_min_k4, unpack_scale_min_k4};

#[cfg(test)]
mod tests;

/// Why a row cannot be (de)quantised. Lengths are checked before any work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    /// The element count does not fill whole blocks.
    #[error("{dtype}: {n} elements is not a whole number of {block_size}-element blocks")]
    PartialBlock {
        /// The element type.
        dtype: DType,
        /// The element count asked for.
        n: usize,
        /// Elements per block of `dtype`.
        block_size: usize,
    },
    /// The byte buffer does not hold exactly the blocks of `n` elements.
    #[error("{dtype}: {n} elements take {expected} bytes, the buffer has {actual}")]
    ByteLength {
        /// The element type.
        dtype: DType,
        /// The element count.
        n: usize,
        /// Bytes `n` elements take.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// The byte size of `n` elements does not fit in `usize`.
    #[error("{dtype}: {n} elements overflow the address space")]
    TooLarge {
        /// The element type.
        dtype: DType,
        /// The element count.
        n: usize,
    },
}

/// Bytes that `n` elements of `dtype` take, or why they cannot be stored.
pub fn row_bytes_checked(dtype: DType, n: usize) -> Result<usize, QuantError> {
    let block_size = dtype.block_size();
    if !n.is_multiple_of(block_size) {
        return Err(QuantError::PartialBlock {
            dtype,
            n,
            block_size,
        });
    }
    dtype.row_bytes(n).ok_or(QuantError::TooLarge { dtype, n })
}

fn check_lengths(dtype: DType, n: usize, actual: usize) -> Result<(), QuantError> {
    let expected = row_bytes_checked(dtype, n)?;
    if expected != actual {
        return Err(QuantError::ByteLength {
            dtype,
            n,
            expected,
            actual,
        });
    }
    Ok(())
}

/// Dequantises `dst.len()` elements of `dtype` from `src`, which must hold
/// exactly `dtype.row_bytes(dst.len())` bytes.
pub fn dequantize_row(dtype: DType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    check_lengths(dtype, dst.len(), src.len())?;
    match dtype {
        DType::F32 => float::f32_from_bytes(src, dst),
        DType::F16 => float::f16_from_bytes(src, dst),
        DType::BF16 => float::bf16_from_bytes(src, dst),
        DType::Q8_0 => for_blocks(src, dst, q8_0::dequantize_block),
        DType::Q4_0 => for_blocks(src, dst, q4_0::dequantize_block),
        DType::Q4_1 => for_blocks(src, dst, q4_1::dequantize_block),
        DType::Q5_0 => for_blocks(src, dst, q5_0::dequantize_block),
        DType::Q5_1 => for_blocks(src, dst, q5_1::dequantize_block),
        DType::Q2K => for_blocks(src, dst, q2_k::dequantize_block),
        DType::Q3K => for_blocks(src, dst, q3_k::dequantize_block),
        DType::Q4K => for_blocks(src, dst, q4_k::dequantize_block),
        DType::Q5K => for_blocks(src, dst, q5_k::dequantize_block),
        DType::Q6K => for_blocks(src, dst, q6_k::dequantize_block),
        DType::IQ4NL => for_blocks(src, dst, iq4_nl::dequantize_block),
        DType::IQ4XS => for_blocks(src, dst, iq4_xs::dequantize_block),
        DType::MXFP4 => for_blocks(src, dst, mxfp4::dequantize_block),
    }
    Ok(())
}

/// Quantises `src` into `dst`, which must hold exactly
/// `dtype.row_bytes(src.len())` bytes. NaN and infinite inputs never panic;
/// the blocks that hold them get unspecified contents.
pub fn quantize_row(dtype: DType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    check_lengths(dtype, src.len(), dst.len())?;
    match dtype {
        DType::F32 => float::f32_to_bytes(src, dst),
        DType::F16 => float::f16_to_bytes(src, dst),
        DType::BF16 => float::bf16_to_bytes(src, dst),
        DType::Q8_0 => for_blocks_mut(src, dst, q8_0::quantize_block),
        DType::Q4_0 => for_blocks_mut(src, dst, q4_0::quantize_block),
        DType::Q4_1 => for_blocks_mut(src, dst, q4_1::quantize_block),
        DType::Q5_0 => for_blocks_mut(src, dst, q5_0::quantize_block),
        DType::Q5_1 => for_blocks_mut(src, dst, q5_1::quantize_block),
        DType::Q2K => for_blocks_mut(src, dst, q2_k::quantize_block),
        DType::Q3K => for_blocks_mut(src, dst, q3_k::quantize_block),
        DType::Q4K => for_blocks_mut(src, dst, q4_k::quantize_block),
        DType::Q5K => for_blocks_mut(src, dst, q5_k::quantize_block),
        DType::Q6K => for_blocks_mut(src, dst, q6_k::quantize_block),
        DType::IQ4NL => for_blocks_mut(src, dst, iq4_nl::quantize_block),
        DType::IQ4XS => for_blocks_mut(src, dst, iq4_xs::quantize_block),
        DType::MXFP4 => for_blocks_mut(src, dst, mxfp4::quantize_block),
    }
    Ok(())
}

/// Dequantises `n` elements of `dtype` from `src` into a new vector.
/// The lengths are checked before anything is allocated.
pub fn dequantize(dtype: DType, src: &[u8], n: usize) -> Result<Vec<f32>, QuantError> {
    check_lengths(dtype, n, src.len())?;
    let mut dst = vec![0.0; n];
    dequantize_row(dtype, src, &mut dst)?;
    Ok(dst)
}

/// Quantises `src` to `dtype` into a new byte vector.
pub fn quantize(dtype: DType, src: &[f32]) -> Result<Vec<u8>, QuantError> {
    let mut dst = vec![0; row_bytes_checked(dtype, src.len())?];
    quantize_row(dtype, src, &mut dst)?;
    Ok(dst)
}

/// Runs a block dequantiser over lengths already checked to match.
fn for_blocks<const B: usize, const E: usize>(
    src: &[u8],
    dst: &mut [f32],
    f: fn(&[u8; B], &mut [f32; E]),
) {
    let (blocks, _) = src.as_chunks::<B>();
    let (outs, _) = dst.as_chunks_mut::<E>();
    for (b, y) in blocks.iter().zip(outs) {
        f(b, y);
    }
}

/// Runs a block quantiser over lengths already checked to match.
fn for_blocks_mut<const B: usize, const E: usize>(
    src: &[f32],
    dst: &mut [u8],
    f: fn(&[f32; E], &mut [u8; B]),
) {
    let (xs, _) = src.as_chunks::<E>();
    let (blocks, _) = dst.as_chunks_mut::<B>();
    for (x, b) in xs.iter().zip(blocks) {
        f(x, b);
    }
}

/// The f16 stored little-endian at `block[at..at + 2]`, widened to f32.
#[inline]
fn f16_at(block: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([block[at], block[at + 1]]).to_f32()
}

/// Stores `v` rounded to f16 (to nearest, ties to even) at `block[at..at + 2]`
/// and returns the stored value widened back, which the quantisers reuse.
#[inline]
fn put_f16(block: &mut [u8], at: usize, v: f32) -> f32 {
    let h = half::f16::from_f32(v);
    block[at..at + 2].copy_from_slice(&h.to_le_bytes());
    h.to_f32()
}
