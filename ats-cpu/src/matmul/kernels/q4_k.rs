//! Q4_K weights: super-blocks of 256 four-bit values in 8 sub-blocks of 32,
//! each with a 6-bit scale and a 6-bit min, and f16 factors `d` and `dmin`
//! (144 bytes: d 0, dmin 2, packed scales 4..16, values 16..144).

#[cfg(target_arch = "x86_64")]
use super::kquant::set_k4_scales_avx2;
use super::kquant::{Canon, SuperBlock, set_k4_scales};

/// The Q4_K super-block format.
pub(super) struct Q4K;

impl SuperBlock for Q4K {
    const BYTES: usize = 144;
    const I16_SUMS: usize = 4;

    fn unpack(b: &[u8], c: &mut Canon) {
        set_k4_scales(b, c);
        // Values 64j..64j+32 are the low nibbles of bytes 32j.., the next 32 the high ones.
        for j in 0..4 {
            for l in 0..32 {
                let q = b[16 + 32 * j + l];
                c.q[64 * j + l] = q & 0x0f;
                c.q[64 * j + 32 + l] = q >> 4;
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack_avx2(p: *const u8, c: &mut Canon) {
        use std::arch::x86_64::*;
        // SAFETY: a whole 144-byte block at p (caller).
        set_k4_scales_avx2(unsafe { std::slice::from_raw_parts(p, Self::BYTES) }, c);
        let m = _mm256_set1_epi8(0x0f);
        let out = c.q.as_mut_ptr() as *mut __m256i;
        for j in 0..4 {
            // SAFETY: bytes 16 + 32j .. 48 + 32j are inside the block; 2j + 1 < 8 slots.
            unsafe {
                let v = _mm256_loadu_si256(p.add(16 + 32 * j) as *const __m256i);
                _mm256_store_si256(out.add(2 * j), _mm256_and_si256(v, m));
                _mm256_store_si256(
                    out.add(2 * j + 1),
                    _mm256_and_si256(_mm256_srli_epi16(v, 4), m),
                );
            }
        }
    }
}
