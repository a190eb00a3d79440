//! IQ4_NL: 32 elements in 18 bytes, one scale and 4-bit indices into a
//! fixed non-linear table of 16 levels.
//!
//! Block layout (little-endian):
//!
//! | bytes  | field | meaning                                             |
//! | ------ | ----- | --------------------------------------------------- |
//! | 0..2   | `d`   | f16 scale                                           |
//! | 2..18  | `qs`  | 16 bytes; byte `j` holds the index of element `j`   |
//! |        |       | in its low nibble and of element `j + 16` in its    |
//! |        |       | high nibble                                         |
//!
//! Element `i` is `d * KVALUES[q_i]`. The levels are denser near zero, where
//! most weights lie, than Q4_0's evenly spaced ones.
//!
//! Quantisation is what `llama-quantize` runs without an importance matrix
//! (ggml's `quantize_iq4_nl`, 7 tries each side): weights `x^2`, a first
//! scale from the element of largest magnitude, then 15 scales around it,
//! keeping the one with the best weighted least-squares fit.

use super::f16_at;

/// Elements per block.
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 18;
/// Offset of the f16 scale `d`.
pub const OFF_D: usize = 0;
/// Offset of the 16 bytes of packed indices.
pub const OFF_QS: usize = 2;

/// The 16 levels an index selects (ggml's `kvalues_iq4nl`), ascending.
pub const KVALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Blocks whose largest magnitude is below this are stored as zeros.
const GROUP_MAX_EPS: f32 = 1e-15;
/// Scales tried on each side of the first guess.
const NTRY: i32 = 7;

/// Dequantises one block.
pub fn dequantize_block(block: &[u8; BLOCK_BYTES], y: &mut [f32; BLOCK_ELEMS]) {
    let d = f16_at(block, OFF_D);
    decode_nibbles(&block[OFF_QS..], d, y);
}

/// The 32 elements `d * KVALUES[q]` of 16 bytes of packed indices.
pub(super) fn decode_nibbles(qs: &[u8], d: f32, y: &mut [f32; 32]) {
    let (lo, hi) = y.split_at_mut(16);
    for ((&q, a), b) in qs.iter().zip(lo).zip(hi) {
        *a = d * f32::from(KVALUES[usize::from(q & 0x0f)]);
        *b = d * f32::from(KVALUES[usize::from(q >> 4)]);
    }
}

/// Packs 32 indices: element `j` in the low nibble of byte `j`, element
/// `j + 16` in its high nibble.
pub(super) fn pack_nibbles(levels: &[u8; 32], qs: &mut [u8]) {
    for (j, q) in qs[..16].iter_mut().enumerate() {
        *q = levels[j] | (levels[j + 16] << 4);
    }
}

/// Quantises one block as `llama-quantize` does without an importance matrix.
pub fn quantize_block(x: &[f32; BLOCK_ELEMS], block: &mut [u8; BLOCK_BYTES]) {
    let mut levels = [0u8; BLOCK_ELEMS];
    let d = fit_block(x, &mut levels);
    let h = half::f16::from_f32(d);
    block[OFF_D..OFF_D + 2].copy_from_slice(&h.to_le_bytes());
    // ggml picks the indices again with the exact (f32) scale.
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for (l, &v) in levels.iter_mut().zip(x) {
        *l = best_index(id * v);
    }
    pack_nibbles(&levels, &mut block[OFF_QS..]);
}

/// The index of the level nearest to `x` (ggml's `best_index_int8`: a
/// binary search, ties to the upper level).
pub(super) fn best_index(x: f32) -> u8 {
    let v = |i: usize| f32::from(KVALUES[i]);
    if x <= v(0) {
        return 0;
    }
    if x >= v(15) {
        return 15;
    }
    let (mut ml, mut mu) = (0usize, 15usize);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < v(mav) {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - v(mu - 1) < v(mu) - x {
        (mu - 1) as u8
    } else {
        mu as u8
    }
}

/// The f32 scale of a 32-element group by ggml's search (weights `x^2`),
/// with the indices of its best fit in `levels`; 0 for a silent group
/// (`levels` then untouched).
pub(super) fn fit_block(x: &[f32; 32], levels: &mut [u8; 32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let k0 = f32::from(KVALUES[0]);
    let fit = |id: f32, levels: &mut [u8; 32]| {
        let (mut sumqx, mut sumq2) = (0f32, 0f32);
        for (l, &v) in levels.iter_mut().zip(x) {
            *l = best_index(id * v);
            let q = f32::from(KVALUES[usize::from(*l)]);
            let w = v * v;
            sumqx += w * q * v;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    };
    let (sumqx, sumq2) = fit(1.0 / (-max / k0), levels);
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    let mut trial = [0u8; 32];
    for itry in -NTRY..=NTRY {
        let id = (itry as f32 + k0) / max;
        let (sumqx, sumq2) = fit(id, &mut trial);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[..2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        b[2] = 0xf0; // element 0: index 0 (-127), element 16: index 15 (113)
        b[17] = 0x78; // element 15: index 8 (1), element 31: index 7 (-10)
        let mut y = [0.0; BLOCK_ELEMS];
        dequantize_block(&b, &mut y);
        assert_eq!(
            (y[0], y[16], y[15], y[31], y[1]),
            (-63.5, 56.5, 0.5, -5.0, -63.5)
        );
    }

    #[test]
    fn best_index_is_the_nearest_level() {
        for (i, &k) in KVALUES.iter().enumerate() {
            assert_eq!(best_index(f32::from(k)), i as u8);
        }
        assert_eq!(best_index(-1000.0), 0);
        assert_eq!(best_index(1000.0), 15);
        assert_eq!(best_index(0.0), 8); // 1 is nearer than -10
        assert_eq!(best_index(101.0), 15); // a tie between 89 and 113 goes up
        assert_eq!(best_index(100.9), 14);
    }

    #[test]
    fn levels_on_the_grid_are_recovered() {
        let x: [f32; 32] = std::array::from_fn(|i| 0.25 * f32::from(KVALUES[i % 16]));
        let mut b = [0u8; BLOCK_BYTES];
        quantize_block(&x, &mut b);
        let mut y = [0.0; BLOCK_ELEMS];
        dequantize_block(&b, &mut y);
        assert_eq!(y, x);
    }

    #[test]
    fn silent_block_is_zero() {
        let mut b = [0xffu8; BLOCK_BYTES];
        quantize_block(&[1e-16; 32], &mut b);
        let mut y = [1.0; BLOCK_ELEMS];
        dequantize_block(&b, &mut y);
        assert!(y.iter().all(|&v| v == 0.0));
        // ggml stores index 8 (level 1) for every element of a silent block.
        assert!(b[OFF_QS..].iter().all(|&q| q == 0x88));
    }
}
