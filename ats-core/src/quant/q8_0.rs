//! Q8_0: 32 elements in 34 bytes, one scale and 8-bit signed quants.
//!
//! Block layout (little-endian):
//!
//! | bytes  | field | meaning                                   |
//! | ------ | ----- | ----------------------------------------- |
//! | 0..2   | `d`   | f16 scale                                 |
//! | 2..34  | `qs`  | 32 × i8, element `i` is `qs[i]`           |
//!
//! Element `i` is `d * qs[i]`.
//!
//! Quantisation (ggml's reference): `d = max|x| / 127`; each element is
//! `x / d` rounded half away from zero, computed as `x * (1 / d)` with the
//! f32 (not the f16-rounded) `d`.

use super::{f16_at, put_f16};

/// Elements per block.
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 34;
/// Offset of the f16 scale `d`.
pub const OFF_D: usize = 0;
/// Offset of the 32 signed quants.
pub const OFF_QS: usize = 2;

/// Dequantises one block.
pub fn dequantize_block(block: &[u8; BLOCK_BYTES], y: &mut [f32; BLOCK_ELEMS]) {
    let d = f16_at(block, OFF_D);
    for (y, &q) in y.iter_mut().zip(&block[OFF_QS..]) {
        *y = f32::from(q as i8) * d;
    }
}

/// Quantises one block with ggml's reference rounding.
pub fn quantize_block(x: &[f32; BLOCK_ELEMS], block: &mut [u8; BLOCK_BYTES]) {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(block, OFF_D, d);
    for (q, &v) in block[OFF_QS..].iter_mut().zip(x) {
        // `as` saturates (and maps NaN to 0), so no input can wrap.
        *q = (v * id).round() as i8 as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[..2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        b[2] = 3;
        b[3] = (-128i8) as u8;
        b[33] = 127;
        let mut y = [0.0; BLOCK_ELEMS];
        dequantize_block(&b, &mut y);
        assert_eq!((y[0], y[1], y[2], y[31]), (1.5, -64.0, 0.0, 63.5));
    }

    #[test]
    fn quantize_rounds_half_away_from_zero() {
        // amax 127 makes d = 1: x = ±2.5 must become ±3 (not the even 2).
        let mut x = [0.0; BLOCK_ELEMS];
        x[0] = 127.0;
        x[1] = 2.5;
        x[2] = -2.5;
        let mut b = [0u8; BLOCK_BYTES];
        quantize_block(&x, &mut b);
        assert_eq!(f16_at(&b, OFF_D), 1.0);
        assert_eq!((b[2] as i8, b[3] as i8, b[4] as i8), (127, 3, -3));
    }
}
