//! Plain float element types: F32, F16 and BF16.
//!
//! Layout: no blocks (block size 1). Each element is stored little-endian on
//! its own: F32 in 4 bytes (IEEE binary32), F16 in 2 bytes (IEEE binary16),
//! BF16 in 2 bytes (the upper half of a binary32: sign, 8 exponent bits,
//! 7 mantissa bits).
//!
//! Widening to f32 is exact for both 16-bit types. Narrowing rounds to
//! nearest, ties to even, as ggml does; a BF16 NaN is kept a quiet NaN
//! (ggml forces the quiet bit, where truncation could turn a NaN into an
//! infinity).

use half::f16;

/// F32 bytes to f32 values; lengths were checked by the caller.
pub(super) fn f32_from_bytes(src: &[u8], dst: &mut [f32]) {
    let (words, _) = src.as_chunks::<4>();
    for (y, w) in dst.iter_mut().zip(words) {
        *y = f32::from_le_bytes(*w);
    }
}

/// f32 values to F32 bytes.
pub(super) fn f32_to_bytes(src: &[f32], dst: &mut [u8]) {
    let (words, _) = dst.as_chunks_mut::<4>();
    for (w, x) in words.iter_mut().zip(src) {
        *w = x.to_le_bytes();
    }
}

/// F16 bytes to f32 values.
pub(super) fn f16_from_bytes(src: &[u8], dst: &mut [f32]) {
    let (halves, _) = src.as_chunks::<2>();
    for (y, h) in dst.iter_mut().zip(halves) {
        *y = f16::from_le_bytes(*h).to_f32();
    }
}

/// f32 values to F16 bytes.
pub(super) fn f16_to_bytes(src: &[f32], dst: &mut [u8]) {
    let (halves, _) = dst.as_chunks_mut::<2>();
    for (h, &x) in halves.iter_mut().zip(src) {
        *h = f16_bits_from_f32(x).to_le_bytes();
    }
}

/// BF16 bytes to f32 values: the 16 bits are the top half of the f32.
pub(super) fn bf16_from_bytes(src: &[u8], dst: &mut [f32]) {
    let (halves, _) = src.as_chunks::<2>();
    for (y, h) in dst.iter_mut().zip(halves) {
        *y = f32::from_bits(u32::from(u16::from_le_bytes(*h)) << 16);
    }
}

/// f32 values to BF16 bytes.
pub(super) fn bf16_to_bytes(src: &[f32], dst: &mut [u8]) {
    let (halves, _) = dst.as_chunks_mut::<2>();
    for (h, &x) in halves.iter_mut().zip(src) {
        *h = bf16_bits_from_f32(x).to_le_bytes();
    }
}

/// The f16 bit pattern nearest to `x` (ties to even), as ggml stores it.
pub fn f16_bits_from_f32(x: f32) -> u16 {
    f16::from_f32(x).to_bits()
}

/// The bf16 bit pattern nearest to `x` (ties to even), as ggml stores it;
/// NaNs stay NaN with the quiet bit set.
pub fn bf16_bits_from_f32(x: f32) -> u16 {
    let u = x.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        // Keep sign and payload top bits; the quiet bit guarantees a NaN.
        return ((u >> 16) | 0x40) as u16;
    }
    // Add just under half an ulp of bf16, plus one when the kept lsb is odd:
    // exact ties then round to the even neighbour. Cannot overflow u32:
    // the largest finite input plus 0x8000 stays below 2^32.
    ((u + 0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even_and_keeps_nan() {
        // 1 + 2^-8 is exactly between bf16 1.0 and 1 + 2^-7: ties to even (1.0).
        assert_eq!(bf16_bits_from_f32(1.0 + 1.0 / 256.0), 0x3f80);
        // 1 + 3 * 2^-8 is between 1 + 2^-7 (odd) and 1 + 2^-6: goes up.
        assert_eq!(bf16_bits_from_f32(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(bf16_bits_from_f32(f32::INFINITY), 0x7f80);
        assert_eq!(bf16_bits_from_f32(f32::MAX), 0x7f80); // rounds up to inf
        // A NaN whose payload lives only in the low bits stays a NaN.
        let nan = f32::from_bits(0x7f80_0001);
        let b = bf16_bits_from_f32(nan);
        assert!(f32::from_bits(u32::from(b) << 16).is_nan());
        assert_eq!(bf16_bits_from_f32(-0.0), 0x8000);
    }

    #[test]
    fn f16_rounds_to_nearest_even() {
        assert_eq!(f16_bits_from_f32(1.0), 0x3c00);
        assert_eq!(f16_bits_from_f32(-2.5), 0xc100);
        assert_eq!(f16_bits_from_f32(65504.0), 0x7bff);
        // Exact ties: 1 + 2^-11 goes down to 1.0, 1 + 3 * 2^-11 up to 1 + 2^-9.
        assert_eq!(f16_bits_from_f32(1.0 + 1.0 / 2048.0), 0x3c00);
        assert_eq!(f16_bits_from_f32(1.0 + 3.0 / 2048.0), 0x3c02);
        assert_eq!(f16_bits_from_f32(65520.0), 0x7c00); // tie to even: inf
    }
}
