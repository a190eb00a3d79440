//! Q4_K: 256 elements in 144 bytes; 8 sub-blocks of 32 with a 6-bit scale
//! and a 6-bit min each, 4-bit quants.
//!
//! Block layout (little-endian):
//!
//! | bytes    | field    | meaning                                          |
//! | -------- | -------- | ------------------------------------------------ |
//! | 0..2     | `d`      | f16 super-scale of the sub-block scales          |
//! | 2..4     | `dmin`   | f16 super-scale of the sub-block mins            |
//! | 4..16    | `scales` | 8 scales and 8 mins, 6 bits each, packed in 12   |
//! |          |          | bytes (see [`get_scale_min_k4`])                 |
//! | 16..144  | `qs`     | 4 chunks of 32 bytes; byte `l` of chunk `c`      |
//! |          |          | holds element `64c + l` (sub-block `2c`) in its  |
//! |          |          | low nibble and `64c + 32 + l` (sub-block `2c+1`) |
//! |          |          | in its high nibble                               |
//!
//! Element `i` of sub-block `j` is `d * sc_j * q_i - dmin * m_j`.
//!
//! The 12 scale bytes: bytes `0..4` hold the scales of sub-blocks 0..4 in
//! their low 6 bits, bytes `4..8` the mins of sub-blocks 0..4 likewise;
//! sub-blocks 4..8 keep their low 4 bits in bytes `8..12` (scale in the low
//! nibble, min in the high nibble) and their top 2 bits in the spare top 2
//! bits of bytes `0..4` (scales) and `4..8` (mins).
//!
//! Quantisation follows ggml's reference byte for byte: each sub-block gets
//! a scale and min from `fit_scale_min` (weights `rms(x) + |x|`, 21
//! candidate scales), the scales and mins are quantised to 6 bits against the
//! largest of each, and the levels are recomputed from the stored values.
//! Input that already lies on a Q4_K grid is re-encoded exactly instead
//! (see `exact.rs`), so requantising dequantised data is lossless.

use half::f16;

use super::exact::{Grid, Parts, settle};
use super::search::{fit_scale_min, nearest_int};
use super::{f16_at, put_f16};
use crate::dtype::QK_K;

/// Elements per block.
pub const BLOCK_ELEMS: usize = QK_K;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 144;
/// Offset of the f16 super-scale `d`.
pub const OFF_D: usize = 0;
/// Offset of the f16 super-scale of the mins `dmin`.
pub const OFF_DMIN: usize = 2;
/// Offset of the 12 bytes of packed 6-bit scales and mins.
pub const OFF_SCALES: usize = 4;
/// Offset of the 128 bytes of packed nibbles.
pub const OFF_QS: usize = 16;

/// The 6-bit scale and min of sub-block `j` (`0..8`) from the 12 packed
/// scale bytes of a Q4_K or Q5_K block (ggml's `get_scale_min_k4`).
///
/// # Panics
///
/// If `j >= 8` or `scales` is shorter than 12 bytes.
#[inline]
pub fn get_scale_min_k4(j: usize, scales: &[u8]) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        (
            (scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4),
            (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4),
        )
    }
}

/// All 8 scales and all 8 mins of a Q4_K or Q5_K block at once,
/// [`get_scale_min_k4`] four fields at a time: fields 0..4 are the low 6
/// bits of bytes 0..4 (scales) and 4..8 (mins); fields 4..8 take their low
/// 4 bits from bytes 8..12 (scales the low nibbles, mins the high) and
/// their top 2 from the top bits of bytes 0..4 and 4..8. No branches: the
/// CPU's prompt kernels decode every row's super-blocks with it.
#[inline]
pub fn unpack_scale_min_k4(scales: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    // Written out, without closures: an array map's closure was not inlined
    // into the kernels that call this.
    let [s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11] = *scales;
    let a = u32::from_le_bytes([s0, s1, s2, s3]);
    let b = u32::from_le_bytes([s4, s5, s6, s7]);
    let c = u32::from_le_bytes([s8, s9, s10, s11]);
    let (low6, low4, top2) = (0x3f3f_3f3f_u32, 0x0f0f_0f0f_u32, 0x0303_0303_u32);
    let sc_high = (c & low4) | ((a >> 6) & top2) << 4;
    let m_high = ((c >> 4) & low4) | ((b >> 6) & top2) << 4;
    let sc = (u64::from(sc_high) << 32 | u64::from(a & low6)).to_le_bytes();
    let m = (u64::from(m_high) << 32 | u64::from(b & low6)).to_le_bytes();
    (sc, m)
}

/// Packs 8 scales and 8 mins (low 6 bits of each are kept) into the 12
/// bytes of a Q4_K or Q5_K block; the inverse of [`unpack_scale_min_k4`].
pub fn pack_scale_min_k4(sc: &[u8; 8], m: &[u8; 8]) -> [u8; 12] {
    let mut out = [0u8; 12];
    for j in 0..8 {
        let (s, m) = (sc[j] & 63, m[j] & 63);
        if j < 4 {
            out[j] |= s;
            out[j + 4] |= m;
        } else {
            out[j + 4] = (s & 0x0f) | ((m & 0x0f) << 4);
            out[j - 4] |= (s >> 4) << 6;
            out[j] |= (m >> 4) << 6;
        }
    }
    out
}

/// Dequantises one block.
pub fn dequantize_block(block: &[u8; BLOCK_BYTES], y: &mut [f32; BLOCK_ELEMS]) {
    let d = f16_at(block, OFF_D);
    let dmin = f16_at(block, OFF_DMIN);
    let scales = &block[OFF_SCALES..OFF_QS];
    let (qs, _) = block[OFF_QS..].as_chunks::<32>();
    let (ys, _) = y.as_chunks_mut::<64>();
    for (c, (q, y)) in qs.iter().zip(ys).enumerate() {
        let (sc1, m1) = get_scale_min_k4(2 * c, scales);
        let (sc2, m2) = get_scale_min_k4(2 * c + 1, scales);
        let (d1, m1) = (d * f32::from(sc1), dmin * f32::from(m1));
        let (d2, m2) = (d * f32::from(sc2), dmin * f32::from(m2));
        let (lo, hi) = y.split_at_mut(32);
        for ((&q, a), b) in q.iter().zip(lo).zip(hi) {
            *a = d1 * f32::from(q & 0x0f) - m1;
            *b = d2 * f32::from(q >> 4) - m2;
        }
    }
}

/// Quantises one block (ggml's reference search, no importance matrix;
/// values already on a Q4_K grid are re-encoded exactly).
pub fn quantize_block(x: &[f32; BLOCK_ELEMS], block: &mut [u8; BLOCK_BYTES]) {
    let parts = search(x, 15, -1.0, 20);
    settle(x, &parts, &GRID, block, pack, dequantize_block);
}

/// The ranges of Q4_K's integers.
const GRID: Grid = Grid {
    q: (0, 15),
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
    block[OFF_SCALES..OFF_QS].copy_from_slice(&scales);
    let (qs, _) = block[OFF_QS..].as_chunks_mut::<32>();
    for (c, q) in qs.iter_mut().enumerate() {
        let (lo, hi) = (&p.q[2 * c], &p.q[2 * c + 1]);
        for i in 0..32 {
            q[i] = (lo[i] as u8 & 0x0f) | ((hi[i] as u8 & 0x0f) << 4);
        }
    }
}

/// ggml's reference search shared by Q4_K and Q5_K (`nmax` 15 or 31): fits
/// each 32-element sub-block, quantises the scales and mins to 6 bits
/// against the largest of each, and re-rounds every element against the
/// values stored.
pub(super) fn search(x: &[f32; BLOCK_ELEMS], nmax: i32, rmin: f32, nstep: i32) -> Parts<8, 32> {
    let (xs, _) = x.as_chunks::<32>();
    // Sub-blocks as lanes: xt[i][j] is element i of sub-block j.
    let xt: [[f32; 8]; 32] = std::array::from_fn(|i| std::array::from_fn(|j| xs[j][i]));
    let mut sum_x2 = [0.0f32; 8];
    for row in &xt {
        for j in 0..8 {
            sum_x2[j] += row[j] * row[j];
        }
    }
    // Weight by magnitude, floored at the sub-block's rms so that small
    // elements still count.
    let av_x = sum_x2.map(|s| (s / 32.0).sqrt());
    let w = xt.map(|row| std::array::from_fn(|j| av_x[j] + row[j].abs()));
    let mut lt = [[0u8; 8]; 32];
    let (scales, mins) = fit_scale_min::<32, 8, false>(&xt, &w, nmax, (rmin, 0.1, nstep), &mut lt);
    let mut levels: [[u8; 32]; 8] = std::array::from_fn(|j| std::array::from_fn(|i| lt[i][j]));
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..8 {
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }

    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let q6 = |v: f32| nearest_int(v).clamp(0, 63);
    let sc = scales.map(|s| q6(inv_scale * s));
    let m = mins.map(|s| q6(inv_min * s));
    let d = f16::from_f32(max_scale / 63.0).to_f32();
    let dmin = f16::from_f32(max_min / 63.0).to_f32();

    // Re-round every element against the scale and min actually stored; a
    // sub-block whose stored scale is 0 keeps the levels of its fit.
    for (j, (xs, ls)) in xs.iter().zip(levels.iter_mut()).enumerate() {
        let dj = d * sc[j] as f32;
        if dj == 0.0 {
            continue;
        }
        let dm = dmin * m[j] as f32;
        for (l, &v) in ls.iter_mut().zip(xs) {
            *l = nearest_int((v + dm) / dj).clamp(0, nmax) as u8;
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

/// ggml's reference encoding alone, without the exact re-encoding.
#[cfg(test)]
pub(super) fn reference_block(x: &[f32; BLOCK_ELEMS], block: &mut [u8; BLOCK_BYTES]) {
    pack(&search(x, 15, -1.0, 20), block);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_min_packing_round_trips() {
        // Every 6-bit value in every position.
        for v in 0..64u8 {
            let sc: [u8; 8] = std::array::from_fn(|j| ((v as usize + 7 * j) % 64) as u8);
            let m: [u8; 8] = std::array::from_fn(|j| ((3 * v as usize + 11 * j) % 64) as u8);
            let packed = pack_scale_min_k4(&sc, &m);
            assert_eq!(unpack_scale_min_k4(&packed), (sc, m));
        }
    }

    #[test]
    fn unpacking_all_fields_at_once_matches_each_field() {
        // Every byte value in every position, the others from a generator
        // (packed bytes need not come from `pack_scale_min_k4`).
        let mut x = 0x2545_f491_u32;
        for at in 0..12 {
            for v in 0..=255u8 {
                let mut s: [u8; 12] = std::array::from_fn(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                });
                s[at] = v;
                let (sc, m) = unpack_scale_min_k4(&s);
                for j in 0..8 {
                    assert_eq!((sc[j], m[j]), get_scale_min_k4(j, &s), "{s:?} field {j}");
                }
            }
        }
    }

    #[test]
    fn scale_bytes_follow_the_documented_layout() {
        let sc = [1, 2, 3, 4, 0x35, 0x26, 0x17, 0x08];
        let m = [5, 6, 7, 8, 0x39, 0x2a, 0x1b, 0x0c];
        let p = pack_scale_min_k4(&sc, &m);
        assert_eq!(p[0], 1 | (0x3 << 6));
        assert_eq!(p[4], 5 | (0x3 << 6));
        assert_eq!(p[8], 0x5 | (0x9 << 4));
        assert_eq!(p[11], 0x8 | (0xc << 4));
        assert_eq!(get_scale_min_k4(4, &p), (0x35, 0x39));
    }

    #[test]
    fn known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[..2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        b[2..4].copy_from_slice(&half::f16::from_f32(0.25).to_le_bytes());
        let mut sc = [0u8; 8];
        let mut m = [0u8; 8];
        (sc[0], m[0], sc[1], m[1], sc[7], m[7]) = (2, 4, 3, 0, 63, 40);
        b[4..16].copy_from_slice(&pack_scale_min_k4(&sc, &m));
        b[16] = 0x5f; // element 0: 15, element 32: 5
        b[16 + 3 * 32 + 31] = 0xa0; // element 223: 0, element 255: 10
        let mut y = [0.0; BLOCK_ELEMS];
        dequantize_block(&b, &mut y);
        assert_eq!(y[0], 1.0 * 15.0 - 1.0);
        assert_eq!(y[32], 1.5 * 5.0);
        assert_eq!(y[223], 0.0); // sub-block 6 has scale and min 0
        assert_eq!(y[255], 31.5 * 10.0 - 10.0);
    }
}
