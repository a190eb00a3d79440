//! F16 weights, widened to f32 on the fly (F16C) and multiplied with f32
//! activations (FMA).
//!
//! ggml instead rounds the activations to f16 before its dot product; we keep
//! them f32 (more precise). Our results therefore differ from llama.cpp's by
//! that rounding, about 2^-11 relative per activation.

use super::float::FloatElem;

/// The F16 element type.
pub(super) struct F16;

impl FloatElem for F16 {
    const BYTES: usize = 2;

    fn get(row: &[u8], k: usize) -> f32 {
        half::f16::from_bits(u16::from_le_bytes([row[2 * k], row[2 * k + 1]])).to_f32()
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8_avx2(p: *const u8) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: 8 elements (16 bytes) readable at p (caller).
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }
}
