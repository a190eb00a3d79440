//! Q4_0: 32 elements in 18 bytes, one scale and 4-bit quants offset by 8.
//!
//! Block layout (little-endian):
//!
//! | bytes  | field | meaning                                             |
//! | ------ | ----- | --------------------------------------------------- |
//! | 0..2   | `d`   | f16 scale                                           |
//! | 2..18  | `qs`  | 16 bytes; byte `j` holds element `j` in its low     |
//! |        |       | nibble and element `j + 16` in its high nibble      |
//!
//! Element `i` is `d * (q_i - 8)` with `q_i` in `0..16`.
//!
//! Quantisation (ggml's reference): `d = m / -8` where `m` is the element of
//! largest magnitude (the first one on ties), so `m` itself maps to level 0
//! exactly; each element is `trunc(x / d + 8.5)` capped at 15, computed as
//! `x * (1 / d)` with the f32 `d`.

use super::{f16_at, put_f16};

/// Elements per block.
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 18;
/// Offset of the f16 scale `d`.
pub const OFF_D: usize = 0;
/// Offset of the 16 bytes of packed nibbles.
pub const OFF_QS: usize = 2;

/// Dequantises one block.
pub fn dequantize_block(block: &[u8; BLOCK_BYTES], y: &mut [f32; BLOCK_ELEMS]) {
    let d = f16_at(block, OFF_D);
    let (lo, hi) = y.split_at_mut(BLOCK_ELEMS / 2);
    for ((&q, a), b) in block[OFF_QS..].iter().zip(lo).zip(hi) {
        *a = f32::from((q & 0x0f) as i8 - 8) * d;
        *b = f32::from((q >> 4) as i8 - 8) * d;
    }
}

/// Quantises one block with ggml's reference rounding.
pub fn quantize_block(x: &[f32; BLOCK_ELEMS], block: &mut [u8; BLOCK_BYTES]) {
    let m = signed_absmax(x);
    let d = m / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(block, OFF_D, d);
    let level = |v: f32| ((v * id + 8.5) as i8).clamp(0, 15) as u8;
    let (lo, hi) = x.split_at(BLOCK_ELEMS / 2);
    for ((q, &a), &b) in block[OFF_QS..].iter_mut().zip(lo).zip(hi) {
        *q = level(a) | (level(b) << 4);
    }
}

/// The element of largest magnitude, sign kept; the first one on ties.
pub(super) fn signed_absmax(x: &[f32]) -> f32 {
    let (mut amax, mut m) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            m = v;
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[..2].copy_from_slice(&half::f16::from_f32(0.25).to_le_bytes());
        b[2] = 0xf0; // element 0: 0 -> -8, element 16: 15 -> 7
        b[17] = 0x9a; // element 15: 10 -> 2, element 31: 9 -> 1
        let mut y = [0.0; BLOCK_ELEMS];
        dequantize_block(&b, &mut y);
        assert_eq!(
            (y[0], y[16], y[15], y[31], y[1]),
            (-2.0, 1.75, 0.5, 0.25, -2.0)
        );
    }

    #[test]
    fn extreme_element_maps_to_level_zero() {
        let mut x = [0.0; BLOCK_ELEMS];
        x[5] = -4.0;
        x[6] = 4.0; // same magnitude later: the first one wins
        x[7] = 1.0;
        let mut b = [0u8; BLOCK_BYTES];
        quantize_block(&x, &mut b);
        assert_eq!(f16_at(&b, OFF_D), 0.5);
        let mut y = [0.0; BLOCK_ELEMS];
        dequantize_block(&b, &mut y);
        // d = -4 / -8 = 0.5, so -4 is level 0 exactly.
        assert_eq!((y[5], y[7], y[0]), (-4.0, 1.0, 0.0));
        // +4 would need level 16: it is capped at 15 (3.5).
        assert_eq!(y[6], 3.5);
    }
}
