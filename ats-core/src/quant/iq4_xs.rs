//! IQ4_XS: 256 elements in 136 bytes: IQ4_NL's non-linear levels in eight
//! sub-blocks of 32, each with a 6-bit signed scale under one f16 factor.
//!
//! Block layout (little-endian):
//!
//! | bytes   | field      | meaning                                           |
//! | ------- | ---------- | ------------------------------------------------- |
//! | 0..2    | `d`        | f16 super-block factor                            |
//! | 2..4    | `scales_h` | u16; bits `2j..2j+2` are the high 2 bits of the   |
//! |         |            | scale of sub-block `j`                            |
//! | 4..8    | `scales_l` | byte `j / 2`, nibble `j % 2` (low first): the low |
//! |         |            | 4 bits of the scale of sub-block `j`              |
//! | 8..136  | `qs`       | 16 bytes per sub-block, packed like an IQ4_NL     |
//! |         |            | block: element `j` low nibble, `j + 16` high      |
//!
//! Sub-block `j` has the scale `ls_j` (0..64) and element `i` of it is
//! `(d * (ls_j - 32)) * KVALUES[q_i]`.
//!
//! Quantisation is what `llama-quantize` runs without an importance matrix
//! (ggml's `quantize_iq4_xs`): each sub-block's f32 scale by the IQ4_NL
//! search, `d = -s / 32` for the scale `s` of largest magnitude, each scale
//! rounded to `d * l`, then the indices again with the rounded scales.

use super::iq4_nl::{best_index, decode_nibbles, fit_block, pack_nibbles};
use super::search::nearest_int;
use super::{f16_at, put_f16};

/// Elements per block.
pub const BLOCK_ELEMS: usize = 256;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 136;
/// Offset of the f16 factor `d`.
pub const OFF_D: usize = 0;
/// Offset of the u16 of high scale bits.
pub const OFF_SCALES_H: usize = 2;
/// Offset of the 4 bytes of low scale nibbles.
pub const OFF_SCALES_L: usize = 4;
/// Offset of the 128 bytes of packed indices.
pub const OFF_QS: usize = 8;

/// The eight 6-bit scales `ls` (0..64) of a block, one per sub-block.
/// (Inlined: the CPU kernels call it per row and tile of tokens.)
#[inline]
pub fn unpack_scales(block: &[u8]) -> [u8; 8] {
    let h = u16::from_le_bytes([block[OFF_SCALES_H], block[OFF_SCALES_H + 1]]);
    std::array::from_fn(|j| {
        let lo = (block[OFF_SCALES_L + j / 2] >> (4 * (j % 2))) & 0x0f;
        let hi = ((h >> (2 * j)) & 3) as u8;
        lo | (hi << 4)
    })
}

/// Stores eight 6-bit scales (0..64): the inverse of [`unpack_scales`].
pub fn pack_scales(ls: &[u8; 8], block: &mut [u8]) {
    let mut h = 0u16;
    for (j, &l) in ls.iter().enumerate() {
        h |= u16::from(l >> 4) << (2 * j);
    }
    block[OFF_SCALES_H..OFF_SCALES_H + 2].copy_from_slice(&h.to_le_bytes());
    for j in 0..4 {
        block[OFF_SCALES_L + j] = (ls[2 * j] & 0x0f) | ((ls[2 * j + 1] & 0x0f) << 4);
    }
}

/// Dequantises one block.
pub fn dequantize_block(block: &[u8; BLOCK_BYTES], y: &mut [f32; BLOCK_ELEMS]) {
    let d = f16_at(block, OFF_D);
    let ls = unpack_scales(block);
    let (ys, _) = y.as_chunks_mut::<32>();
    for (j, y) in ys.iter_mut().enumerate() {
        let dl = d * (f32::from(ls[j]) - 32.0);
        decode_nibbles(&block[OFF_QS + 16 * j..][..16], dl, y);
    }
}

/// Quantises one block as `llama-quantize` does without an importance matrix.
pub fn quantize_block(x: &[f32; BLOCK_ELEMS], block: &mut [u8; BLOCK_BYTES]) {
    let (xs, _) = x.as_chunks::<32>();
    let mut scratch = [0u8; 32];
    let scales: [f32; 8] = std::array::from_fn(|j| fit_block(&xs[j], &mut scratch));
    let (mut amax, mut max_scale) = (0f32, 0f32);
    for &s in &scales {
        if s.abs() > amax {
            amax = s.abs();
            max_scale = s;
        }
    }
    let d = -max_scale / 32.0;
    put_f16(block, OFF_D, d);
    // ggml rounds with the f32 factor, not the stored f16 one.
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut ls = [0u8; 8];
    for (j, (xb, &s)) in xs.iter().zip(&scales).enumerate() {
        let l = nearest_int(id * s).clamp(-32, 31);
        let dl = d * l as f32;
        let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
        let levels: [u8; 32] = std::array::from_fn(|i| best_index(idl * xb[i]));
        pack_nibbles(&levels, &mut block[OFF_QS + 16 * j..]);
        ls[j] = (l + 32) as u8;
    }
    pack_scales(&ls, block);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_round_trip() {
        let ls: [u8; 8] = [0, 63, 32, 17, 48, 1, 62, 31];
        let mut b = [0u8; BLOCK_BYTES];
        pack_scales(&ls, &mut b);
        assert_eq!(unpack_scales(&b), ls);
    }

    #[test]
    fn known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[..2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        // sub-block 0: ls 34 (scale 1.0); sub-block 7: ls 0 (scale -16)
        let mut ls = [32u8; 8];
        ls[0] = 34;
        ls[7] = 0;
        pack_scales(&ls, &mut b);
        b[OFF_QS] = 0xf0; // element 0: -127, element 16: 113
        b[OFF_QS + 16 * 7 + 15] = 0x08; // element 7 * 32 + 15: index 8 (1); + 31: index 0
        let mut y = [0.0; BLOCK_ELEMS];
        dequantize_block(&b, &mut y);
        assert_eq!((y[0], y[16], y[1]), (-127.0, 113.0, -127.0));
        assert_eq!((y[7 * 32 + 15], y[7 * 32 + 31]), (-16.0, 2032.0));
        // sub-blocks with ls 32 are zero
        assert!(y[32..7 * 32].iter().all(|&v| v == 0.0));
    }
}
