//! MXFP4 (the OCP microscaling format gpt-oss ships its experts in): 32
//! elements in 17 bytes, a power-of-two scale and 4-bit E2M1 floats.
//!
//! Block layout:
//!
//! | bytes  | field | meaning                                             |
//! | ------ | ----- | --------------------------------------------------- |
//! | 0      | `e`   | E8M0 scale: the exponent of a power of two          |
//! | 1..17  | `qs`  | 16 bytes; byte `j` holds element `j` in its low     |
//! |        |       | nibble and element `j + 16` in its high nibble      |
//!
//! A nibble is an E2M1 float (sign, 2 exponent bits, 1 mantissa bit:
//! 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives). ggml keeps them doubled
//! as small integers ([`KVALUES`]) and halves the scale instead, so element
//! `i` is `KVALUES[q_i] * 2^(e - 128)`, exactly the E2M1 value times `2^(e - 127)`.
//!
//! Quantisation is ggml's reference (`quantize_row_mxfp4_ref`, which
//! gguf-py reproduces): `e = floor(log2(max|x|)) - 2 + 127`, then each element
//! to the level nearest to it (the first on ties).

/// Elements per block.
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 17;
/// Offset of the E8M0 scale byte.
pub const OFF_E: usize = 0;
/// Offset of the 16 bytes of packed nibbles.
pub const OFF_QS: usize = 1;

/// The E2M1 values doubled, by nibble (ggml's `kvalues_mxfp4`); the sign
/// bit is bit 3, so nibble 8 is a negative zero stored as 0.
pub const KVALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// Half the value of an E8M0 scale, `2^(e - 128)`, as ggml computes it
/// (exact for every byte: the two smallest are f32 subnormals).
#[inline]
pub fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}

/// Dequantises one block.
pub fn dequantize_block(block: &[u8; BLOCK_BYTES], y: &mut [f32; BLOCK_ELEMS]) {
    let d = e8m0_to_f32_half(block[OFF_E]);
    let (lo, hi) = y.split_at_mut(BLOCK_ELEMS / 2);
    for ((&q, a), b) in block[OFF_QS..].iter().zip(lo).zip(hi) {
        *a = f32::from(KVALUES[usize::from(q & 0x0f)]) * d;
        *b = f32::from(KVALUES[usize::from(q >> 4)]) * d;
    }
}

/// Quantises one block with ggml's reference rounding.
pub fn quantize_block(x: &[f32; BLOCK_ELEMS], block: &mut [u8; BLOCK_BYTES]) {
    let amax = x
        .iter()
        .fold(0f32, |a, &v| if a < v.abs() { v.abs() } else { a });
    block[OFF_E] = scale_byte(amax);
    let d = e8m0_to_f32_half(block[OFF_E]);
    let (lo, hi) = x.split_at(BLOCK_ELEMS / 2);
    for ((q, &a), &b) in block[OFF_QS..].iter_mut().zip(lo).zip(hi) {
        *q = best_index(a, d) | (best_index(b, d) << 4);
    }
}

/// The scale byte for a block whose largest magnitude is `amax`: ggml
/// computes `floor(log2(amax)) - 2 + 127` in f32 and converts it to a byte
/// (C's conversion, which we saturate: it never wraps, and NaN gives 0).
fn scale_byte(amax: f32) -> u8 {
    if amax > 0.0 {
        (amax.log2().floor() - 2.0 + 127.0) as u8
    } else {
        0
    }
}

/// The nibble whose level times `d` is nearest to `x`, the first on ties.
fn best_index(x: f32, d: f32) -> u8 {
    let mut best = (0u8, (f32::from(KVALUES[0]) * d - x).abs());
    for (i, &k) in KVALUES.iter().enumerate().skip(1) {
        let err = (f32::from(k) * d - x).abs();
        if err < best.1 {
            best = (i as u8, err);
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e8m0_half_is_a_power_of_two() {
        for e in 0..=255u8 {
            assert_eq!(
                f64::from(e8m0_to_f32_half(e)),
                2f64.powi(i32::from(e) - 128),
                "{e}"
            );
        }
    }

    #[test]
    fn known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[0] = 128; // d = 1: elements are the doubled E2M1 values
        b[1] = 0xf7; // element 0: nibble 7 (12), element 16: nibble 15 (-12)
        b[16] = 0x95; // element 15: nibble 5 (6), element 31: nibble 9 (-1)
        let mut y = [0.0; BLOCK_ELEMS];
        dequantize_block(&b, &mut y);
        assert_eq!(
            (y[0], y[16], y[15], y[31], y[1]),
            (12.0, -12.0, 6.0, -1.0, 0.0)
        );
    }

    #[test]
    fn scale_covers_the_largest_element() {
        // max 5.0: e = 2 - 2 + 127 = 127, d = 0.5: levels up to 6; 5 lies
        // between 4 and 6 and the first (4) wins the tie
        let mut x = [0.0; BLOCK_ELEMS];
        x[3] = 5.0;
        x[4] = -1.3;
        let mut b = [0u8; BLOCK_BYTES];
        quantize_block(&x, &mut b);
        assert_eq!(b[0], 127);
        let mut y = [0.0; BLOCK_ELEMS];
        dequantize_block(&b, &mut y);
        assert_eq!((y[3], y[4], y[0]), (4.0, -1.5, 0.0));
    }
}
