//! BF16 weights, widened to f32 on the fly (a 16-bit shift) and multiplied
//! with f32 activations (FMA).
//!
//! ggml instead rounds the activations to bf16 before its dot product; we
//! keep them f32 (more precise), so results differ from llama.cpp's by that
//! rounding, about 2^-8 relative per activation.

use super::float::FloatElem;

/// The BF16 element type.
pub(super) struct Bf16;

impl FloatElem for Bf16 {
    const BYTES: usize = 2;

    fn get(row: &[u8], k: usize) -> f32 {
        f32::from_bits((u16::from_le_bytes([row[2 * k], row[2 * k + 1]]) as u32) << 16)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8_avx2(p: *const u8) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: 8 elements (16 bytes) readable at p (caller).
        let h = unsafe { _mm_loadu_si128(p as *const __m128i) };
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
    }
}
