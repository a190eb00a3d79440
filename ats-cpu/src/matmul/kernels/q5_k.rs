//! Q5_K weights: super-blocks of 256 five-bit values (nibbles plus a bit
//! plane) in 8 sub-blocks of 32 with 6-bit scales and mins, and f16 factors
//! `d` and `dmin` (176 bytes: d 0, dmin 2, scales 4..16, fifth bits 16..48,
//! nibbles 48..176).

#[cfg(target_arch = "x86_64")]
use super::kquant::set_k4_scales_avx2;
use super::kquant::{Canon, SuperBlock, Wide, f16_at, set_k4_scales};
#[cfg(target_arch = "x86_64")]
use crate::matmul::acts::QuantActs;
#[cfg(target_arch = "x86_64")]
use ats_core::quant::q4_k::unpack_scale_min_k4;

/// The Q5_K super-block format.
pub(super) struct Q5K;

impl SuperBlock for Q5K {
    const BYTES: usize = 176;
    const I16_SUMS: usize = 4;
    const WIDE: Wide = Wide::Q5K;
    #[cfg(target_arch = "x86_64")]
    const TOKENS8_VNNI: Option<super::kquant_tokens8::Tokens8Fn> =
        Some(super::kquant_tokens8::tokens8_vnni::<Q5K>);
    #[cfg(target_arch = "x86_64")]
    const PROMPT_TILES_VNNI: Option<super::prompt_tiles::Tiles> = Some([
        super::k4_tiles::tokens_vnni::<true, 1, 4>,
        super::k4_tiles::tokens_vnni::<true, 2, 4>,
    ]);

    fn unpack(b: &[u8], c: &mut Canon) {
        set_k4_scales(b, c);
        // Like Q4_K; value 64j + l takes bit 2j of byte 16 + l as its fifth
        // bit, value 64j + 32 + l bit 2j + 1.
        for j in 0..4 {
            for l in 0..32 {
                let (q, h) = (b[48 + 32 * j + l], b[16 + l]);
                c.q[64 * j + l] = (q & 0x0f) | (((h >> (2 * j)) & 1) << 4);
                c.q[64 * j + 32 + l] = (q >> 4) | (((h >> (2 * j + 1)) & 1) << 4);
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack_avx2(p: *const u8, c: &mut Canon) {
        // SAFETY: a whole 176-byte block at p (caller).
        set_k4_scales_avx2(unsafe { std::slice::from_raw_parts(p, Self::BYTES) }, c);
        // SAFETY: a whole block at p (caller); `c.q` is 8 aligned 32-byte slots.
        unsafe { values_avx2(p, c.q.as_mut_ptr() as *mut std::arch::x86_64::__m256i) };
    }

    /// Without the canonical form: see [`super::q4_k::k4_dots_avx2`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dots_avx2<const N: usize>(
        row: *const u8,
        acts: &QuantActs,
        t0: usize,
        prefetch: usize,
    ) -> [f32; N] {
        // SAFETY: as the caller guarantees.
        unsafe { super::q4_k::k4_dots_avx2::<N, true>(row, acts, t0, prefetch) }
    }
}

/// The 256 five-bit values of the Q5_K block at `p` into the 8 32-byte
/// slots at `out`.
///
/// # Safety
/// The CPU must support AVX2; `p` points to a whole block; `out` is 8
/// aligned 32-byte slots.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn values_avx2(p: *const u8, out: *mut std::arch::x86_64::__m256i) {
    use std::arch::x86_64::*;
    let (m, one) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(1));
    // SAFETY: the fifth bits are bytes 16..48.
    let h = unsafe { _mm256_loadu_si256(p.add(16) as *const __m256i) };
    for j in 0..4 {
        let bit = |k: i32| {
            _mm256_slli_epi16(
                _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(k)), one),
                4,
            )
        };
        // SAFETY: bytes 48 + 32j .. 80 + 32j are inside the block; 2j + 1 < 8 slots.
        unsafe {
            let v = _mm256_loadu_si256(p.add(48 + 32 * j) as *const __m256i);
            let lo = _mm256_or_si256(_mm256_and_si256(v, m), bit(2 * j as i32));
            let hi = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(v, 4), m),
                bit(2 * j as i32 + 1),
            );
            _mm256_store_si256(out.add(2 * j), lo);
            _mm256_store_si256(out.add(2 * j + 1), hi);
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl super::kquant_tokens8::Unpack8 for Q5K {
    const SCALE_GROUPS: usize = 2;

    /// The canonical form's values, and each sub-block's scale and min for
    /// both its groups of 16.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack8(p: *const u8, out: &mut super::kquant_tokens8::Block) {
        // SAFETY: a whole 176-byte block at p (caller).
        let b = unsafe { std::slice::from_raw_parts(p, Self::BYTES) };
        let head: &[u8; 12] = b[4..16].try_into().expect("12 scale bytes");
        let (sc, mn) = unpack_scale_min_k4(head);
        for j in 0..8 {
            out.sc[2 * j] = i32::from(sc[j]);
            out.sc[2 * j + 1] = i32::from(sc[j]);
            out.mn[j] = u32::from(mn[j]) * 0x1_0001;
        }
        out.d = f16_at(b, 0);
        out.dmin = f16_at(b, 2);
        // SAFETY: as above; `out.q` is 8 aligned 32-byte slots.
        unsafe { values_avx2(p, out.q.as_mut_ptr() as *mut std::arch::x86_64::__m256i) };
    }
}
