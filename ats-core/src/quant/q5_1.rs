//! Q5_1: 32 elements in 24 bytes, a scale, a minimum and 5-bit quants.
//!
//! Block layout (little-endian):
//!
//! | bytes  | field | meaning                                             |
//! | ------ | ----- | --------------------------------------------------- |
//! | 0..2   | `d`   | f16 scale                                           |
//! | 2..4   | `m`   | f16 minimum (the value of level 0)                  |
//! | 4..8   | `qh`  | u32; bit `i` is the fifth (high) bit of element `i` |
//! | 8..24  | `qs`  | 16 bytes; byte `j` holds the low 4 bits of element  |
//! |        |       | `j` (low nibble) and of element `j + 16` (high)     |
//!
//! Element `i` is `d * q_i + m` with `q_i` in `0..32`.
//!
//! Quantisation (ggml's reference): `m` is the block minimum and
//! `d = (max - min) / 31`; each element is `trunc((x - min) / d + 0.5)`,
//! computed with `1 / d` in f32.

use super::q4_1::min_max;
use super::q5_0::{pack5, unpack5};
use super::{f16_at, put_f16};

/// Elements per block.
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 24;
/// Offset of the f16 scale `d`.
pub const OFF_D: usize = 0;
/// Offset of the f16 minimum `m`.
pub const OFF_M: usize = 2;
/// Offset of the little-endian u32 of high bits.
pub const OFF_QH: usize = 4;
/// Offset of the 16 bytes of packed low nibbles.
pub const OFF_QS: usize = 8;

/// Dequantises one block.
pub fn dequantize_block(block: &[u8; BLOCK_BYTES], y: &mut [f32; BLOCK_ELEMS]) {
    let d = f16_at(block, OFF_D);
    let m = f16_at(block, OFF_M);
    let qh = u32::from_le_bytes([
        block[OFF_QH],
        block[OFF_QH + 1],
        block[OFF_QH + 2],
        block[OFF_QH + 3],
    ]);
    unpack5(qh, &block[OFF_QS..], |i, q| y[i] = f32::from(q) * d + m);
}

/// Quantises one block with ggml's reference rounding.
pub fn quantize_block(x: &[f32; BLOCK_ELEMS], block: &mut [u8; BLOCK_BYTES]) {
    let (min, max) = min_max(x);
    let d = (max - min) / 31.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(block, OFF_D, d);
    put_f16(block, OFF_M, min);
    let levels = x.map(|v| (((v - min) * id + 0.5) as i8).clamp(0, 31) as u8);
    let qh = pack5(&levels, &mut block[OFF_QS..]);
    block[OFF_QH..OFF_QS].copy_from_slice(&qh.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[..2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        b[2..4].copy_from_slice(&half::f16::from_f32(1.0).to_le_bytes());
        b[4..8].copy_from_slice(&(1u32 << 31).to_le_bytes());
        b[23] = 0xf3; // element 15: level 3, element 31: level 16 + 15
        let mut y = [0.0; BLOCK_ELEMS];
        dequantize_block(&b, &mut y);
        assert_eq!((y[15], y[31], y[0]), (2.5, 16.5, 1.0));
    }

    #[test]
    fn quantize_hits_min_and_max() {
        let x: [f32; BLOCK_ELEMS] = std::array::from_fn(|i| i as f32 - 10.0);
        let mut b = [0u8; BLOCK_BYTES];
        quantize_block(&x, &mut b);
        let mut y = [0.0; BLOCK_ELEMS];
        dequantize_block(&b, &mut y);
        assert_eq!(y, x); // step 1, min -10: every integer is representable
    }
}
