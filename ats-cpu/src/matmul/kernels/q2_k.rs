//! Q2_K weights: super-blocks of 256 two-bit values in 16 groups of 16, each
//! group with a 4-bit scale and a 4-bit min, and f16 factors `d` and `dmin`
//! (84 bytes: scales 0..16, values 16..80, d 80, dmin 82).

use super::kquant::{Canon, SuperBlock, f16_at};

/// The Q2_K super-block format.
pub(super) struct Q2K;

/// Canonical scales, mins and factors of a Q2_K super-block.
fn scales(b: &[u8], c: &mut Canon) {
    for (g, &s) in b[..16].iter().enumerate() {
        c.set_sc(g, (s & 0x0f) as i16);
        c.mn[g] = (s >> 4) as i16;
    }
    c.d = f16_at(b, 80);
    c.dmin = f16_at(b, 82);
}

impl SuperBlock for Q2K {
    const BYTES: usize = 84;
    const I16_SUMS: usize = 4;

    fn unpack(b: &[u8], c: &mut Canon) {
        scales(b, c);
        // Value 128n + 32j + l is bits 2j..2j+2 of byte 32n + l.
        for n in 0..2 {
            for j in 0..4 {
                for l in 0..32 {
                    c.q[128 * n + 32 * j + l] = (b[16 + 32 * n + l] >> (2 * j)) & 3;
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack_avx2(p: *const u8, c: &mut Canon) {
        use std::arch::x86_64::*;
        // SAFETY: a whole 84-byte block at p (caller): scales at 0..16.
        let s = unsafe { _mm_loadu_si128(p as *const __m128i) };
        let m4 = _mm_set1_epi8(0x0f);
        let sc = _mm256_cvtepu8_epi16(_mm_and_si128(s, m4));
        let mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), m4));
        super::kquant::set_scales_avx2(c, sc, mn);
        // SAFETY: as above.
        let b = unsafe { std::slice::from_raw_parts(p, Self::BYTES) };
        c.d = f16_at(b, 80);
        c.dmin = f16_at(b, 82);
        let three = _mm256_set1_epi8(3);
        let out = c.q.as_mut_ptr() as *mut __m256i;
        for n in 0..2 {
            // SAFETY: bytes 16 + 32n .. 48 + 32n are inside the block.
            let v = unsafe { _mm256_loadu_si256(p.add(16 + 32 * n) as *const __m256i) };
            for j in 0..4 {
                let q =
                    _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * j as i32)), three);
                // SAFETY: 4n + j < 8 aligned 32-byte slots in `c.q`.
                unsafe { _mm256_store_si256(out.add(4 * n + j), q) };
            }
        }
    }
}
