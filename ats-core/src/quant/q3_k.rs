//! Q3_K: 256 elements in 110 bytes; 16 sub-blocks of 16 with a signed 6-bit
//! scale each, 3-bit quants (2 low bits plus a high-bit mask).
//!
//! Block layout (little-endian):
//!
//! | bytes    | field    | meaning                                          |
//! | -------- | -------- | ------------------------------------------------ |
//! | 0..32    | `hmask`  | third bits: bit `4h + s` of byte `l` belongs to  |
//! |          |          | element `128h + 32s + l`                         |
//! | 32..96   | `qs`     | low 2 bits, arranged like Q2_K's `qs`: bits      |
//! |          |          | `2s..2s+2` of byte `l` of half `h` hold element  |
//! |          |          | `128h + 32s + l`                                 |
//! | 96..108  | `scales` | 16 scales of 6 bits, stored plus 32 (see below)  |
//! | 108..110 | `d`      | f16 super-scale                                  |
//!
//! Element `i` of sub-block `j = i / 16` is `d * (s_j - 32) * (q_i - 4)`
//! where `q_i` is `low | high << 2` in `0..8` (equivalently: the low bits,
//! minus 4 when the mask bit is clear).
//!
//! The 12 scale bytes: the low 4 bits of scales 0..8 are the low nibbles of
//! bytes `0..8` and those of scales 8..16 their high nibbles; the top 2 bits
//! of scale `j` are bits `2 * (j / 4)..+2` of byte `8 + j % 4`.
//!
//! Quantisation follows ggml's reference byte for byte: each sub-block's
//! scale comes from `fit_q3`, the scales are quantised to 6 signed bits
//! against the one of largest magnitude, and the levels are recomputed from
//! the stored values. Input already on a Q3_K grid is re-encoded exactly
//! (see `exact.rs`).

use half::f16;

use super::exact::{Grid, Parts, settle};
use super::q2_k::{flatten, pack_2bit};
use super::search::{fit_q3, nearest_int};
use super::{f16_at, put_f16};
use crate::dtype::QK_K;

/// Elements per block.
pub const BLOCK_ELEMS: usize = QK_K;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 110;
/// Offset of the 32 bytes of high-bit masks.
pub const OFF_HMASK: usize = 0;
/// Offset of the 64 bytes of packed 2-bit low parts.
pub const OFF_QS: usize = 32;
/// Offset of the 12 bytes of packed 6-bit scales.
pub const OFF_SCALES: usize = 96;
/// Offset of the f16 super-scale `d`.
pub const OFF_D: usize = 108;

/// The 16 scales of a Q3_K block, already minus 32 (so in `-32..32`).
pub fn unpack_q3k_scales(scales: &[u8; 12]) -> [i8; 16] {
    std::array::from_fn(|j| {
        let low = if j < 8 {
            scales[j] & 0x0f
        } else {
            scales[j - 8] >> 4
        };
        let high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
        (low | (high << 4)) as i8 - 32
    })
}

/// Packs 16 signed scales (clamped to `-32..32`) into Q3_K's 12 bytes; the
/// inverse of [`unpack_q3k_scales`].
pub fn pack_q3k_scales(s: &[i8; 16]) -> [u8; 12] {
    let mut out = [0u8; 12];
    for (j, &v) in s.iter().enumerate() {
        let l = (v.clamp(-32, 31) + 32) as u8;
        if j < 8 {
            out[j] |= l & 0x0f;
        } else {
            out[j - 8] |= (l & 0x0f) << 4;
        }
        out[8 + j % 4] |= (l >> 4) << (2 * (j / 4));
    }
    out
}

/// Dequantises one block.
pub fn dequantize_block(block: &[u8; BLOCK_BYTES], y: &mut [f32; BLOCK_ELEMS]) {
    let d = f16_at(block, OFF_D);
    let mut sb = [0u8; 12];
    sb.copy_from_slice(&block[OFF_SCALES..OFF_D]);
    let scales = unpack_q3k_scales(&sb);
    let hmask = &block[OFF_HMASK..OFF_QS];
    let (qs, _) = block[OFF_QS..OFF_SCALES].as_chunks::<32>();
    let (ys, _) = y.as_chunks_mut::<16>();
    for (j, y) in ys.iter_mut().enumerate() {
        let (h, s, l0) = (j / 8, (j / 2) % 4, 16 * (j % 2));
        let dl = d * f32::from(scales[j]);
        let bit = 4 * h + s;
        for (l, y) in (l0..l0 + 16).zip(y.iter_mut()) {
            let low = ((qs[h][l] >> (2 * s)) & 3) as i8;
            let off = if (hmask[l] >> bit) & 1 == 1 { 0 } else { 4 };
            *y = dl * f32::from(low - off);
        }
    }
}

/// Quantises one block (ggml's reference search, no importance matrix;
/// values already on a Q3_K grid are re-encoded exactly).
pub fn quantize_block(x: &[f32; BLOCK_ELEMS], block: &mut [u8; BLOCK_BYTES]) {
    settle(x, &search(x), &GRID, block, pack, dequantize_block);
}

/// The ranges of Q3_K's integers.
const GRID: Grid = Grid {
    q: (-4, 3),
    sc: (-32, 31),
    m: None,
    sc_top: -32,
    m_top: 0,
};

/// ggml's reference search: each 16-element sub-block's scale, then the
/// scales quantised to 6 signed bits against the one of largest magnitude,
/// then every element re-rounded against the scale stored.
fn search(x: &[f32; BLOCK_ELEMS]) -> Parts<16, 16> {
    let (xs, _) = x.as_chunks::<16>();
    let mut levels = [[0u8; 16]; 16];
    let mut scales = [0.0f32; 16];
    let (mut max_scale, mut amax) = (0.0f32, 0.0f32);
    for (j, (xs, ls)) in xs.iter().zip(levels.iter_mut()).enumerate() {
        scales[j] = fit_q3(xs, 4, ls);
        if scales[j].abs() > amax {
            amax = scales[j].abs();
            max_scale = scales[j];
        }
    }

    let mut sc = [0i32; 16];
    let mut d = 0.0f32;
    if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        sc = scales.map(|s| nearest_int(iscale * s).clamp(-32, 31));
        d = f16::from_f32(1.0 / iscale).to_f32();
    }

    // Re-round every element against the scale actually stored; a sub-block
    // whose stored scale is 0 keeps the levels of its fit.
    for (j, (xs, ls)) in xs.iter().zip(levels.iter_mut()).enumerate() {
        let dj = d * sc[j] as f32;
        if dj == 0.0 {
            continue;
        }
        for (l, &v) in ls.iter_mut().zip(xs) {
            *l = (nearest_int(v / dj).clamp(-4, 3) + 4) as u8;
        }
    }
    Parts {
        d,
        dmin: 0.0,
        sc,
        m: [0; 16],
        q: levels.map(|l| l.map(|v| v as i8 - 4)),
    }
}

/// Packs the integer content of a block.
fn pack(p: &Parts<16, 16>, block: &mut [u8; BLOCK_BYTES]) {
    put_f16(block, OFF_D, p.d);
    let sc = p.sc.map(|v| v as i8);
    block[OFF_SCALES..OFF_D].copy_from_slice(&pack_q3k_scales(&sc));
    // Each level plus 4 splits into its high bit (the mask) and 2 low bits.
    let mut levels = flatten(&p.q).map(|v| (v as i8 + 4) as u8);
    let hmask = &mut block[OFF_HMASK..OFF_QS];
    hmask.fill(0);
    for (i, l) in levels.iter_mut().enumerate() {
        if *l > 3 {
            hmask[i % 32] |= 1 << (i / 32);
            *l -= 4;
        }
    }
    pack_2bit(&levels, &mut block[OFF_QS..OFF_SCALES]);
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
    fn scale_packing_round_trips() {
        for v in -32..32i8 {
            let s: [i8; 16] =
                std::array::from_fn(|j| ((v as i32 + 32 + 5 * j as i32) % 64 - 32) as i8);
            assert_eq!(unpack_q3k_scales(&pack_q3k_scales(&s)), s);
        }
    }

    #[test]
    fn scale_bytes_follow_the_documented_layout() {
        // Scale 9 stored as 9 + 32 = 0b10_1001: low nibble 9 in the high
        // nibble of byte 1, top bits 0b10 at bits 4..6 of byte 9.
        let mut s = [-32i8; 16];
        s[9] = 9;
        let p = pack_q3k_scales(&s);
        assert_eq!(p[1], 0x90);
        assert_eq!(p[9], 0b10 << 4);
        assert_eq!(p[0], 0);
    }

    #[test]
    fn known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[OFF_D..].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        let mut s = [0i8; 16];
        s[0] = 2;
        s[13] = -3;
        b[OFF_SCALES..OFF_D].copy_from_slice(&pack_q3k_scales(&s));
        // Element 0: low 3, mask set -> level 3. Element 1: low 0, mask clear -> -4.
        b[OFF_QS] = 3;
        b[OFF_HMASK] = 1;
        // Element 209 (sub-block 13, h 1, s 2, l 17): low 1, mask bit 6 set.
        b[OFF_QS + 32 + 17] = 1 << 4;
        b[OFF_HMASK + 17] = 1 << 6;
        let mut y = [0.0; BLOCK_ELEMS];
        dequantize_block(&b, &mut y);
        assert_eq!((y[0], y[1], y[209]), (3.0, -4.0, -1.5));
    }
}
