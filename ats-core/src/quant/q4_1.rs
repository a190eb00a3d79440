//! Q4_1: 32 elements in 20 bytes, a scale, a minimum and 4-bit quants.
//!
//! Block layout (little-endian):
//!
//! | bytes  | field | meaning                                             |
//! | ------ | ----- | --------------------------------------------------- |
//! | 0..2   | `d`   | f16 scale                                           |
//! | 2..4   | `m`   | f16 minimum (the value of level 0)                  |
//! | 4..20  | `qs`  | 16 bytes; byte `j` holds element `j` in its low     |
//! |        |       | nibble and element `j + 16` in its high nibble      |
//!
//! Element `i` is `d * q_i + m` with `q_i` in `0..16`.
//!
//! Quantisation (ggml's reference): `m` is the block minimum and
//! `d = (max - min) / 15`; each element is `trunc((x - min) / d + 0.5)`
//! capped at 15, computed with `1 / d` in f32.

use super::{f16_at, put_f16};

/// Elements per block.
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 20;
/// Offset of the f16 scale `d`.
pub const OFF_D: usize = 0;
/// Offset of the f16 minimum `m`.
pub const OFF_M: usize = 2;
/// Offset of the 16 bytes of packed nibbles.
pub const OFF_QS: usize = 4;

/// Dequantises one block.
pub fn dequantize_block(block: &[u8; BLOCK_BYTES], y: &mut [f32; BLOCK_ELEMS]) {
    let d = f16_at(block, OFF_D);
    let m = f16_at(block, OFF_M);
    let (lo, hi) = y.split_at_mut(BLOCK_ELEMS / 2);
    for ((&q, a), b) in block[OFF_QS..].iter().zip(lo).zip(hi) {
        *a = f32::from(q & 0x0f) * d + m;
        *b = f32::from(q >> 4) * d + m;
    }
}

/// Quantises one block with ggml's reference rounding.
pub fn quantize_block(x: &[f32; BLOCK_ELEMS], block: &mut [u8; BLOCK_BYTES]) {
    let (min, max) = min_max(x);
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(block, OFF_D, d);
    put_f16(block, OFF_M, min);
    let level = |v: f32| (((v - min) * id + 0.5) as i8).clamp(0, 15) as u8;
    let (lo, hi) = x.split_at(BLOCK_ELEMS / 2);
    for ((q, &a), &b) in block[OFF_QS..].iter_mut().zip(lo).zip(hi) {
        *q = level(a) | (level(b) << 4);
    }
}

/// Minimum and maximum of a block, starting from ±`f32::MAX` as ggml does.
pub(super) fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[..2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        b[2..4].copy_from_slice(&half::f16::from_f32(-1.0).to_le_bytes());
        b[4] = 0xf0;
        let mut y = [0.0; BLOCK_ELEMS];
        dequantize_block(&b, &mut y);
        assert_eq!((y[0], y[16], y[1]), (-1.0, 6.5, -1.0));
    }

    #[test]
    fn quantize_hits_min_and_max() {
        let x: [f32; BLOCK_ELEMS] = std::array::from_fn(|i| i as f32 / 31.0 * 15.0 - 3.0);
        let mut b = [0u8; BLOCK_BYTES];
        quantize_block(&x, &mut b);
        let mut y = [0.0; BLOCK_ELEMS];
        dequantize_block(&b, &mut y);
        assert_eq!((y[0], y[31]), (-3.0, 12.0));
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() <= 0.5 + 1e-6, "{a} vs {b}");
        }
    }
}
