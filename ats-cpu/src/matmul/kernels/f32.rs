//! F32 weights: f32 FMA dot products with f32 activations (no quantisation).

use super::float::FloatElem;

/// The F32 element type.
pub(super) struct F32;

impl FloatElem for F32 {
    const BYTES: usize = 4;

    fn get(row: &[u8], k: usize) -> f32 {
        f32::from_le_bytes([row[4 * k], row[4 * k + 1], row[4 * k + 2], row[4 * k + 3]])
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8_avx2(p: *const u8) -> std::arch::x86_64::__m256 {
        // SAFETY: 8 elements readable at p (caller).
        unsafe { std::arch::x86_64::_mm256_loadu_ps(p as *const f32) }
    }
}
