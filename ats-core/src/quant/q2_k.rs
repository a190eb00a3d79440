//! Q2_K: 256 elements in 84 bytes; 16 sub-blocks of 16 with a 4-bit scale
//! and a 4-bit min each, 2-bit quants.
//!
//! Block layout (little-endian):
//!
//! | bytes   | field    | meaning                                          |
//! | ------- | -------- | ------------------------------------------------ |
//! | 0..16   | `scales` | byte `j`: scale of sub-block `j` in the low      |
//! |         |          | nibble, its min in the high nibble               |
//! | 16..80  | `qs`     | 2 halves of 32 bytes; bits `2s..2s+2` of byte    |
//! |         |          | `l` of half `h` hold element `128h + 32s + l`    |
//! | 80..82  | `d`      | f16 super-scale of the scales                    |
//! | 82..84  | `dmin`   | f16 super-scale of the mins                      |
//!
//! Element `i` of sub-block `j = i / 16` is `d * sc_j * q_i - dmin * m_j`,
//! `q_i` in `0..4`.
//!
//! Quantisation follows ggml's reference byte for byte: each sub-block's
//! scale and min come from `fit_scale_min` (weights `|x|`, absolute error,
//! 16 candidates), are quantised to 4 bits against the largest of each, and
//! the levels are recomputed from the stored values. Input already on a
//! Q2_K grid is re-encoded exactly (see `exact.rs`).

use half::f16;

use super::exact::{Grid, Parts, settle};
use super::search::{fit_scale_min, nearest_int};
use super::{f16_at, put_f16};
use crate::dtype::QK_K;

/// Elements per block.
pub const BLOCK_ELEMS: usize = QK_K;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 84;
/// Offset of the 16 bytes of 4-bit scale / min pairs.
pub const OFF_SCALES: usize = 0;
/// Offset of the 64 bytes of packed 2-bit quants.
pub const OFF_QS: usize = 16;
/// Offset of the f16 super-scale `d`.
pub const OFF_D: usize = 80;
/// Offset of the f16 super-scale of the mins `dmin`.
pub const OFF_DMIN: usize = 82;

/// Dequantises one block.
pub fn dequantize_block(block: &[u8; BLOCK_BYTES], y: &mut [f32; BLOCK_ELEMS]) {
    let d = f16_at(block, OFF_D);
    let dmin = f16_at(block, OFF_DMIN);
    let scales = &block[OFF_SCALES..OFF_QS];
    let (qs, _) = block[OFF_QS..OFF_D].as_chunks::<32>();
    let (ys, _) = y.as_chunks_mut::<16>();
    for (j, y) in ys.iter_mut().enumerate() {
        // Sub-block j: half j / 8, shift 2 * ((j / 2) % 4), bytes 16 * (j % 2)..
        let q = &qs[j / 8][16 * (j % 2)..16 * (j % 2) + 16];
        let shift = 2 * ((j / 2) % 4);
        let dl = d * f32::from(scales[j] & 0x0f);
        let ml = dmin * f32::from(scales[j] >> 4);
        for (y, &q) in y.iter_mut().zip(q) {
            *y = dl * f32::from((q >> shift) & 3) - ml;
        }
    }
}

/// Quantises one block (ggml's reference search, no importance matrix;
/// values already on a Q2_K grid are re-encoded exactly).
pub fn quantize_block(x: &[f32; BLOCK_ELEMS], block: &mut [u8; BLOCK_BYTES]) {
    settle(x, &search(x), &GRID, block, pack, dequantize_block);
}

/// The ranges of Q2_K's integers.
const GRID: Grid = Grid {
    q: (0, 3),
    sc: (0, 15),
    m: Some((0, 15)),
    sc_top: 15,
    m_top: 15,
};

/// ggml's reference search: each 16-element sub-block's scale and min, then
/// both quantised to 4 bits against the largest of each, then every element
/// re-rounded against the values stored.
fn search(x: &[f32; BLOCK_ELEMS]) -> Parts<16, 16> {
    let (xs, _) = x.as_chunks::<16>();
    // Sub-blocks as lanes: xt[i][j] is element i of sub-block j.
    let xt: [[f32; 16]; 16] = std::array::from_fn(|i| std::array::from_fn(|j| xs[j][i]));
    let w = xt.map(|row| row.map(f32::abs));
    let mut lt = [[0u8; 16]; 16];
    let (scales, mins) = fit_scale_min::<16, 16, true>(&xt, &w, 3, (-0.5, 0.1, 15), &mut lt);
    let mut levels: [[u8; 16]; 16] = std::array::from_fn(|j| std::array::from_fn(|i| lt[i][j]));
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..16 {
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }

    let q4 = |v: f32| nearest_int(v).clamp(0, 15);
    let (mut sc, mut m) = ([0i32; 16], [0i32; 16]);
    let (mut d, mut dmin) = (0.0f32, 0.0f32);
    if max_scale > 0.0 {
        let iscale = 15.0 / max_scale;
        sc = scales.map(|s| q4(iscale * s));
        d = f16::from_f32(max_scale / 15.0).to_f32();
    }
    if max_min > 0.0 {
        let iscale = 15.0 / max_min;
        m = mins.map(|s| q4(iscale * s));
        dmin = f16::from_f32(max_min / 15.0).to_f32();
    }

    // Re-round every element against the scale and min actually stored; a
    // sub-block whose stored scale is 0 keeps the levels of its fit.
    for (j, (xs, ls)) in xs.iter().zip(levels.iter_mut()).enumerate() {
        let dj = d * sc[j] as f32;
        if dj == 0.0 {
            continue;
        }
        let dm = dmin * m[j] as f32;
        for (l, &v) in ls.iter_mut().zip(xs) {
            *l = nearest_int((v + dm) / dj).clamp(0, 3) as u8;
        }
    }
    Parts {
        d,
        dmin,
        sc,
        m,
        q: levels.map(|l| l.map(|v| v as i8)),
    }
}

/// Packs the integer content of a block.
fn pack(p: &Parts<16, 16>, block: &mut [u8; BLOCK_BYTES]) {
    put_f16(block, OFF_D, p.d);
    put_f16(block, OFF_DMIN, p.dmin);
    for j in 0..16 {
        block[OFF_SCALES + j] = (p.sc[j] as u8 & 0x0f) | ((p.m[j] as u8 & 0x0f) << 4);
    }
    pack_2bit(&flatten(&p.q), &mut block[OFF_QS..OFF_D]);
}

/// The 256 levels of 16 sub-blocks, as unsigned bytes in element order.
pub(super) fn flatten(q: &[[i8; 16]; 16]) -> [u8; QK_K] {
    std::array::from_fn(|i| q[i / 16][i % 16] as u8)
}

/// Packs 256 levels of 2 bits (Q2_K's and Q3_K's low bits) into 64 bytes:
/// byte `l` of half `h` holds element `128h + 32s + l` in bits `2s..2s+2`.
pub(super) fn pack_2bit(levels: &[u8; QK_K], qs: &mut [u8]) {
    let (ls, _) = levels.as_chunks::<128>();
    let (qs, _) = qs.as_chunks_mut::<32>();
    for (q, l) in qs.iter_mut().zip(ls) {
        for i in 0..32 {
            q[i] = (l[i] & 3)
                | ((l[i + 32] & 3) << 2)
                | ((l[i + 64] & 3) << 4)
                | ((l[i + 96] & 3) << 6);
        }
    }
}

/// ggml's reference encoding alone, without the exact re-encoding.
#[cfg(test)]
pub(super) fn reference_block(x: &[f32; BLOCK_ELEMS], block: &mut [u8; BLOCK_BYTES]) {
    pack(&search(x), block);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[OFF_D..OFF_D + 2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        b[OFF_DMIN..].copy_from_slice(&half::f16::from_f32(0.25).to_le_bytes());
        b[0] = 0x21; // sub-block 0: scale 1, min 2
        b[13] = 0x34; // sub-block 13: scale 4, min 3
        // Element 0: byte 0 of half 0, bits 0..2. Element 128 + 64 + 17 = 209
        // (sub-block 13): byte 17 of half 1, bits 4..6.
        b[OFF_QS] = 3;
        b[OFF_QS + 32 + 17] = 2 << 4;
        let mut y = [0.0; BLOCK_ELEMS];
        dequantize_block(&b, &mut y);
        assert_eq!(y[0], 0.5 * 3.0 - 0.5);
        assert_eq!(y[1], -0.5);
        assert_eq!(y[209], 2.0 * 2.0 - 0.75);
    }

    #[test]
    fn pack_2bit_places_elements() {
        let levels: [u8; QK_K] = std::array::from_fn(|i| (i % 4) as u8);
        let mut qs = [0u8; 64];
        pack_2bit(&levels, &mut qs);
        for i in 0..QK_K {
            let (h, s, l) = (i / 128, (i % 128) / 32, i % 32);
            assert_eq!(
                (qs[32 * h + l] >> (2 * s)) & 3,
                (i % 4) as u8,
                "element {i}"
            );
        }
    }
}
