//! Q6_K: 256 elements in 210 bytes; 16 sub-blocks of 16 with a signed 8-bit
//! scale each, 6-bit quants offset by 32.
//!
//! Block layout (little-endian):
//!
//! | bytes    | field    | meaning                                          |
//! | -------- | -------- | ------------------------------------------------ |
//! | 0..128   | `ql`     | low 4 bits, 2 halves of 64 bytes: byte `l` of    |
//! |          |          | half `h` holds element `128h + l` (low nibble)   |
//! |          |          | and `128h + 64 + l` (high nibble), `l` in 0..64  |
//! | 128..192 | `qh`     | high 2 bits, 2 halves of 32 bytes: bits          |
//! |          |          | `2s..2s+2` of byte `l` of half `h` belong to     |
//! |          |          | element `128h + 32s + l`                         |
//! | 192..208 | `scales` | 16 × i8, the scale of each 16-element sub-block  |
//! | 208..210 | `d`      | f16 super-scale                                  |
//!
//! Element `i` of sub-block `j = i / 16` is `d * scales[j] * (q_i - 32)`,
//! `q_i` in `0..64`.
//!
//! Quantisation follows ggml's reference byte for byte: each sub-block's
//! scale comes from `fit_symmetric` (`x²`-weighted, 19 candidates), the
//! scales are quantised to 8 signed bits against the one of largest
//! magnitude (which becomes -128), and the levels are recomputed from the
//! stored values. Input already on a Q6_K grid is re-encoded exactly (see
//! `exact.rs`).

use half::f16;

use super::exact::{Grid, Parts, settle};
use super::q2_k::flatten;
use super::search::{GROUP_MAX_EPS, fit_symmetric, nearest_int};
use super::{f16_at, put_f16};
use crate::dtype::QK_K;

/// Elements per block.
pub const BLOCK_ELEMS: usize = QK_K;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 210;
/// Offset of the 128 bytes of low nibbles.
pub const OFF_QL: usize = 0;
/// Offset of the 64 bytes of high 2-bit pairs.
pub const OFF_QH: usize = 128;
/// Offset of the 16 signed 8-bit scales.
pub const OFF_SCALES: usize = 192;
/// Offset of the f16 super-scale `d`.
pub const OFF_D: usize = 208;

/// Dequantises one block.
pub fn dequantize_block(block: &[u8; BLOCK_BYTES], y: &mut [f32; BLOCK_ELEMS]) {
    let d = f16_at(block, OFF_D);
    // d * scale per sub-block, multiplied by the level afterwards as ggml does.
    let ds: [f32; 16] = std::array::from_fn(|j| d * f32::from(block[OFF_SCALES + j] as i8));
    let (ql, _) = block[OFF_QL..OFF_QH].as_chunks::<64>();
    let (qh, _) = block[OFF_QH..OFF_SCALES].as_chunks::<32>();
    let (ys, _) = y.as_chunks_mut::<128>();
    for (h, ((ql, qh), y)) in ql.iter().zip(qh).zip(ys).enumerate() {
        let ds = &ds[8 * h..8 * h + 8];
        for l in 0..32 {
            let (a, b, hb) = (ql[l], ql[l + 32], qh[l]);
            let q = |low: u8, s: u32| f32::from((low | (((hb >> s) & 3) << 4)) as i8 - 32);
            let is = l / 16;
            y[l] = ds[is] * q(a & 0x0f, 0);
            y[l + 32] = ds[is + 2] * q(b & 0x0f, 2);
            y[l + 64] = ds[is + 4] * q(a >> 4, 4);
            y[l + 96] = ds[is + 6] * q(b >> 4, 6);
        }
    }
}

/// Quantises one block (ggml's reference search, no importance matrix;
/// values already on a Q6_K grid are re-encoded exactly).
pub fn quantize_block(x: &[f32; BLOCK_ELEMS], block: &mut [u8; BLOCK_BYTES]) {
    settle(x, &search(x), &GRID, block, pack, dequantize_block);
}

/// The ranges of Q6_K's integers.
const GRID: Grid = Grid {
    q: (-32, 31),
    sc: (-128, 127),
    m: None,
    sc_top: -128,
    m_top: 0,
};

/// ggml's reference search: each 16-element sub-block's scale, then the
/// scales quantised to 8 signed bits against the one of largest magnitude,
/// then every element re-rounded against the scale stored.
fn search(x: &[f32; BLOCK_ELEMS]) -> Parts<16, 16> {
    let (xs, _) = x.as_chunks::<16>();
    let mut levels = [[0u8; 16]; 16];
    let mut scales = [0.0f32; 16];
    let (mut max_scale, mut max_abs) = (0.0f32, 0.0f32);
    for (j, (xs, ls)) in xs.iter().zip(levels.iter_mut()).enumerate() {
        scales[j] = fit_symmetric(xs, 32, ls);
        if scales[j].abs() > max_abs {
            max_abs = scales[j].abs();
            max_scale = scales[j];
        }
    }
    let mut p = Parts {
        d: 0.0,
        dmin: 0.0,
        sc: [0; 16],
        m: [0; 16],
        // An all-zero block: every byte 0, so every level -32.
        q: [[-32; 16]; 16],
    };
    if max_abs < GROUP_MAX_EPS {
        return p;
    }

    let iscale = -128.0 / max_scale;
    p.d = f16::from_f32(1.0 / iscale).to_f32();
    p.sc = scales.map(|s| nearest_int(iscale * s).clamp(-128, 127));

    // Re-round every element against the scale actually stored; a sub-block
    // whose stored scale is 0 keeps the levels of its fit.
    for (j, (xs, ls)) in xs.iter().zip(levels.iter_mut()).enumerate() {
        let dj = p.d * p.sc[j] as f32;
        if dj == 0.0 {
            continue;
        }
        for (l, &v) in ls.iter_mut().zip(xs) {
            *l = (nearest_int(v / dj).clamp(-32, 31) + 32) as u8;
        }
    }
    p.q = levels.map(|l| l.map(|v| v as i8 - 32));
    p
}

/// Packs the integer content of a block.
fn pack(p: &Parts<16, 16>, block: &mut [u8; BLOCK_BYTES]) {
    put_f16(block, OFF_D, p.d);
    for (b, &s) in block[OFF_SCALES..OFF_D].iter_mut().zip(&p.sc) {
        *b = s as i8 as u8;
    }
    let levels = flatten(&p.q).map(|v| (v as i8 + 32) as u8);
    let (ql, rest) = block.split_at_mut(OFF_QH);
    let (ql, _) = ql.as_chunks_mut::<64>();
    let (qh, _) = rest[..OFF_SCALES - OFF_QH].as_chunks_mut::<32>();
    let (lv, _) = levels.as_chunks::<128>();
    for ((ql, qh), l) in ql.iter_mut().zip(qh.iter_mut()).zip(lv) {
        for i in 0..32 {
            let (a, b, c, e) = (l[i], l[i + 32], l[i + 64], l[i + 96]);
            ql[i] = (a & 0x0f) | ((c & 0x0f) << 4);
            ql[i + 32] = (b & 0x0f) | ((e & 0x0f) << 4);
            qh[i] = (a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6);
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
        b[OFF_D..].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        b[OFF_SCALES] = 2;
        b[OFF_SCALES + 13] = (-4i8) as u8;
        // Element 0: low nibble of ql[0], bits 0..2 of qh[0]: level 63 -> 31.
        b[OFF_QL] = 0x0f;
        b[OFF_QH] = 3;
        // Element 209 = 128 + 81 (s 2, l 17): high nibble of ql[64 + 17],
        // bits 4..6 of qh[32 + 17]: level 0x25 = 37 -> 5.
        b[OFF_QL + 64 + 17] = 0x50;
        b[OFF_QH + 32 + 17] = 2 << 4;
        let mut y = [0.0; BLOCK_ELEMS];
        dequantize_block(&b, &mut y);
        assert_eq!(y[0], 1.0 * 31.0);
        assert_eq!(y[1], 1.0 * -32.0);
        assert_eq!(y[209], -2.0 * 5.0);
    }
}
