//! Q5_0: 32 elements in 22 bytes, one scale and 5-bit quants offset by 16.
//!
//! Block layout (little-endian):
//!
//! | bytes  | field | meaning                                             |
//! | ------ | ----- | --------------------------------------------------- |
//! | 0..2   | `d`   | f16 scale                                           |
//! | 2..6   | `qh`  | u32; bit `i` is the fifth (high) bit of element `i` |
//! | 6..22  | `qs`  | 16 bytes; byte `j` holds the low 4 bits of element  |
//! |        |       | `j` (low nibble) and of element `j + 16` (high)     |
//!
//! Element `i` is `d * (q_i - 16)` with `q_i` in `0..32`.
//!
//! Quantisation (ggml's reference): `d = m / -16` where `m` is the element of
//! largest magnitude (the first on ties); each element is
//! `trunc(x / d + 16.5)` capped at 31, computed with `1 / d` in f32.

use super::q4_0::signed_absmax;
use super::{f16_at, put_f16};

/// Elements per block.
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 22;
/// Offset of the f16 scale `d`.
pub const OFF_D: usize = 0;
/// Offset of the little-endian u32 of high bits.
pub const OFF_QH: usize = 2;
/// Offset of the 16 bytes of packed low nibbles.
pub const OFF_QS: usize = 6;

/// The 5-bit levels of a Q5_0 or Q5_1 block from its high-bit word and nibbles.
pub(super) fn unpack5(qh: u32, qs: &[u8], mut f: impl FnMut(usize, u8)) {
    for (j, &q) in qs.iter().enumerate().take(BLOCK_ELEMS / 2) {
        let h0 = ((qh >> j) & 1) as u8;
        let h1 = ((qh >> (j + 16)) & 1) as u8;
        f(j, (q & 0x0f) | (h0 << 4));
        f(j + 16, (q >> 4) | (h1 << 4));
    }
}

/// Packs 32 five-bit levels into the high-bit word and the nibbles.
pub(super) fn pack5(levels: &[u8; BLOCK_ELEMS], qs: &mut [u8]) -> u32 {
    let mut qh = 0u32;
    for (j, q) in qs.iter_mut().enumerate().take(BLOCK_ELEMS / 2) {
        let (a, b) = (levels[j], levels[j + 16]);
        *q = (a & 0x0f) | ((b & 0x0f) << 4);
        qh |= u32::from(a >> 4) << j;
        qh |= u32::from(b >> 4) << (j + 16);
    }
    qh
}

fn qh_at(block: &[u8]) -> u32 {
    u32::from_le_bytes([
        block[OFF_QH],
        block[OFF_QH + 1],
        block[OFF_QH + 2],
        block[OFF_QH + 3],
    ])
}

/// Dequantises one block.
pub fn dequantize_block(block: &[u8; BLOCK_BYTES], y: &mut [f32; BLOCK_ELEMS]) {
    let d = f16_at(block, OFF_D);
    unpack5(qh_at(block), &block[OFF_QS..], |i, q| {
        y[i] = f32::from(q as i8 - 16) * d;
    });
}

/// Quantises one block with ggml's reference rounding.
pub fn quantize_block(x: &[f32; BLOCK_ELEMS], block: &mut [u8; BLOCK_BYTES]) {
    let m = signed_absmax(x);
    let d = m / -16.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(block, OFF_D, d);
    let levels = x.map(|v| ((v * id + 16.5) as i8).clamp(0, 31) as u8);
    let qh = pack5(&levels, &mut block[OFF_QS..]);
    block[OFF_QH..OFF_QS].copy_from_slice(&qh.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[..2].copy_from_slice(&half::f16::from_f32(2.0).to_le_bytes());
        // element 0: level 31 (high bit + nibble 15); element 17: level 16.
        b[2..6].copy_from_slice(&(1u32 | 1 << 17).to_le_bytes());
        b[6] = 0x0f;
        let mut y = [0.0; BLOCK_ELEMS];
        dequantize_block(&b, &mut y);
        assert_eq!((y[0], y[16], y[17], y[1]), (30.0, -32.0, 0.0, -32.0));
    }

    #[test]
    fn quantize_error_is_at_most_one_step() {
        // Levels run from -16 (the extreme element, exact) to +15: on the
        // far side the last half step is cut off, so the bound is one step.
        let x: [f32; BLOCK_ELEMS] = std::array::from_fn(|i| (i as f32 * 0.7).sin() * 3.0);
        let mut b = [0u8; BLOCK_BYTES];
        quantize_block(&x, &mut b);
        let mut y = [0.0; BLOCK_ELEMS];
        dequantize_block(&b, &mut y);
        let d = f16_at(&b, OFF_D);
        let m = signed_absmax(&x);
        assert_eq!(d, half::f16::from_f32(m / -16.0).to_f32());
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() <= d.abs() * 1.001, "{a} vs {b}");
        }
    }
}
