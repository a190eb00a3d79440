//! Q5_K: 256 elements in 176 bytes; 8 sub-blocks of 32 with a 6-bit scale
//! and a 6-bit min each, 5-bit quants.
//!
//! Block layout (little-endian):
//!
//! | bytes    | field    | meaning                                          |
//! | -------- | -------- | ------------------------------------------------ |
//! | 0..2     | `d`      | f16 super-scale of the sub-block scales          |
//! | 2..4     | `dmin`   | f16 super-scale of the sub-block mins            |
//! | 4..16    | `scales` | 8 scales and 8 mins, 6 bits each, packed as in   |
//! |          |          | Q4_K (see [`super::get_scale_min_k4`])           |
//! | 16..48   | `qh`     | 32 bytes of fifth bits: bit `2c` of byte `l` is  |
//! |          |          | the high bit of element `64c + l`, bit `2c + 1`  |
//! |          |          | that of element `64c + 32 + l`                   |
//! | 48..176  | `qs`     | low 4 bits, arranged exactly like Q4_K's `qs`:   |
//! |          |          | byte `l` of chunk `c` holds element `64c + l`    |
//! |          |          | (low nibble) and `64c + 32 + l` (high nibble)    |
//!
//! Element `i` of sub-block `j` is `d * sc_j * q_i - dmin * m_j`, `q_i` in
//! `0..32`.
//!
//! Quantisation follows ggml's reference byte for byte, as Q4_K's does, with
//! 31 levels and 16 candidate scales per sub-block; input already on a Q5_K
//! grid is re-encoded exactly (see `exact.rs`).

use super::exact::{Grid, Parts, settle};
use super::q4_k::{OFF_D, OFF_DMIN, OFF_SCALES, get_scale_min_k4, search};
use super::{f16_at, pack_scale_min_k4, put_f16};
use crate::dtype::QK_K;

/// Elements per block.
pub const BLOCK_ELEMS: usize = QK_K;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 176;
/// Offset of the 32 bytes of high bits.
pub const OFF_QH: usize = 16;
/// Offset of the 128 bytes of packed low nibbles.
pub const OFF_QS: usize = 48;

/// Dequantises one block.
pub fn dequantize_block(block: &[u8; BLOCK_BYTES], y: &mut [f32; BLOCK_ELEMS]) {
    let d = f16_at(block, OFF_D);
    let dmin = f16_at(block, OFF_DMIN);
    let scales = &block[OFF_SCALES..OFF_QH];
    let qh = &block[OFF_QH..OFF_QS];
    let (qs, _) = block[OFF_QS..].as_chunks::<32>();
    let (ys, _) = y.as_chunks_mut::<64>();
    for (c, (q, y)) in qs.iter().zip(ys).enumerate() {
        let (sc1, m1) = get_scale_min_k4(2 * c, scales);
        let (sc2, m2) = get_scale_min_k4(2 * c + 1, scales);
        let (d1, m1) = (d * f32::from(sc1), dmin * f32::from(m1));
        let (d2, m2) = (d * f32::from(sc2), dmin * f32::from(m2));
        let (lo, hi) = y.split_at_mut(32);
        for (l, (a, b)) in lo.iter_mut().zip(hi).enumerate() {
            let h1 = ((qh[l] >> (2 * c)) & 1) << 4;
            let h2 = ((qh[l] >> (2 * c + 1)) & 1) << 4;
            *a = d1 * f32::from((q[l] & 0x0f) | h1) - m1;
            *b = d2 * f32::from((q[l] >> 4) | h2) - m2;
        }
    }
}

/// Quantises one block (ggml's reference search, no importance matrix;
/// values already on a Q5_K grid are re-encoded exactly).
pub fn quantize_block(x: &[f32; BLOCK_ELEMS], block: &mut [u8; BLOCK_BYTES]) {
    let parts = search(x, 31, -0.5, 15);
    settle(x, &parts, &GRID, block, pack, dequantize_block);
}

/// The ranges of Q5_K's integers.
const GRID: Grid = Grid {
    q: (0, 31),
    sc: (0, 63),
    m: Some((0, 63)),
    sc_top: 63,
    m_top: 63,
};

/// Packs the integer content of a block.
fn pack(p: &Parts<8, 32>, block: &mut [u8; BLOCK_BYTES]) {
    put_f16(block, OFF_D, p.d);
    put_f16(block, OFF_DMIN, p.dmin);
    let scales = pack_scale_min_k4(&p.sc.map(|v| v as u8), &p.m.map(|v| v as u8));
    block[OFF_SCALES..OFF_QH].copy_from_slice(&scales);
    let (head, qs) = block.split_at_mut(OFF_QS);
    let qh = &mut head[OFF_QH..];
    qh.fill(0);
    let (qs, _) = qs.as_chunks_mut::<32>();
    for (c, q) in qs.iter_mut().enumerate() {
        let (lo, hi) = (&p.q[2 * c], &p.q[2 * c + 1]);
        for i in 0..32 {
            let (a, b) = (lo[i] as u8, hi[i] as u8);
            q[i] = (a & 0x0f) | ((b & 0x0f) << 4);
            qh[i] |= (((a >> 4) & 1) << (2 * c)) | (((b >> 4) & 1) << (2 * c + 1));
        }
    }
}

/// ggml's reference encoding alone, without the exact re-encoding.
#[cfg(test)]
pub(super) fn reference_block(x: &[f32; BLOCK_ELEMS], block: &mut [u8; BLOCK_BYTES]) {
    pack(&search(x, 31, -0.5, 15), block);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[..2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        b[2..4].copy_from_slice(&half::f16::from_f32(1.0).to_le_bytes());
        let mut sc = [1u8; 8];
        let mut m = [0u8; 8];
        (sc[5], m[5]) = (4, 3);
        b[4..16].copy_from_slice(&pack_scale_min_k4(&sc, &m));
        // Element 64*2 + 32 + 7 = 167 (sub-block 5): high bit 2*2+1, nibble 9.
        b[OFF_QH + 7] = 1 << 5;
        b[OFF_QS + 2 * 32 + 7] = 0x90;
        // Element 7 (sub-block 0): high bit 0 set, nibble 0 -> level 16.
        b[OFF_QH + 7] |= 1;
        let mut y = [0.0; BLOCK_ELEMS];
        dequantize_block(&b, &mut y);
        assert_eq!(y[167], 2.0 * 25.0 - 3.0);
        assert_eq!(y[7], 0.5 * 16.0);
        assert_eq!(y[135], 0.0); // low nibble of the same byte: level 0
    }
}
