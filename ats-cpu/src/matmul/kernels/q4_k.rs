//! Q4_K weights: super-blocks of 256 four-bit values in 8 sub-blocks of 32,
//! each with a 6-bit scale and a 6-bit min, and f16 factors `d` and `dmin`
//! (144 bytes: d 0, dmin 2, packed scales 4..16, values 16..144).

use super::kquant::{Canon, SuperBlock, Wide, set_k4_scales};
#[cfg(target_arch = "x86_64")]
use super::kquant::{
    TokenAccsAvx2, k4_min_sums_avx2, k4_scale_words, prefetch_block_avx2, set_k4_scales_avx2,
};
#[cfg(target_arch = "x86_64")]
use crate::matmul::acts::QuantActs;

/// The Q4_K super-block format.
pub(super) struct Q4K;

impl SuperBlock for Q4K {
    const BYTES: usize = 144;
    const I16_SUMS: usize = 4;
    const WIDE: Wide = Wide::Q4K;
    #[cfg(target_arch = "x86_64")]
    const ROWS16_VNNI: Option<super::kquant::Rows16Fn> = Some(super::q4_k512::rows16_vnni);
    #[cfg(target_arch = "x86_64")]
    const ROWS16_TOKENS_VNNI: Option<super::kquant::Rows16TokensFn> =
        Some(super::q4_k512::rows16_tokens_vnni);
    #[cfg(target_arch = "x86_64")]
    const ROWS16_TOKENS8_VNNI: Option<super::kquant::Rows16Tokens8Fn> =
        Some(super::q4_k_rows16::tokens8_vnni);
    #[cfg(target_arch = "x86_64")]
    const ROWS16_TOKENS8_TO_31: bool = true;
    #[cfg(target_arch = "x86_64")]
    const PROMPT_TILES_VNNI: Option<super::prompt_tiles::Tiles> = Some([
        super::k4_tiles::tokens_vnni::<false, 1, 4>,
        super::k4_tiles::tokens_vnni::<false, 2, 4>,
    ]);

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

    /// Without the canonical form: see [`k4_dots_avx2`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dots_avx2<const N: usize>(
        row: *const u8,
        acts: &QuantActs,
        t0: usize,
        prefetch: usize,
    ) -> [f32; N] {
        // SAFETY: as the caller guarantees.
        unsafe { k4_dots_avx2::<N, false>(row, acts, t0, prefetch) }
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

/// One Q4_K row's (or with `FIFTH`, Q5_K row's) dot products with tokens
/// `t0..t0 + N`, without the canonical form: the values meet the activations
/// in registers and each sub-block's scale is broadcast (the canonical path
/// stores 256 values and 16 scale vectors per block, which made Q4_K the
/// slowest format per byte: 4.4 GiB/s a core against 7.7 for Q6_K). A
/// block's values, scales and mins are decoded once for all `N` tokens; the
/// integer sums and FMAs are the canonical path's.
///
/// # Safety
/// As [`SuperBlock::dots_avx2`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn k4_dots_avx2<const N: usize, const FIFTH: bool>(
    row: *const u8,
    acts: &QuantActs,
    t0: usize,
    prefetch: usize,
) -> [f32; N] {
    use std::arch::x86_64::*;
    let (nb, tp) = (acts.blocks, acts.t_pad);
    debug_assert!(t0 + N <= tp);
    let bytes = if FIFTH { 176 } else { 144 };
    // the nibbles' offset in a block (Q5_K's fifth bits come first)
    let nibbles = if FIFTH { 48 } else { 16 };
    let (m4, one) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(1));
    let mut accs = TokenAccsAvx2::<N>::new();
    for b in 0..nb {
        // SAFETY: super-block b is inside the row (caller).
        let blk = unsafe { std::slice::from_raw_parts(row.add(b * bytes), bytes) };
        prefetch_block_avx2(blk.as_ptr(), bytes, prefetch);
        // SAFETY: bytes 0..16 of the block (d, dmin, the 12 scale bytes).
        let head = unsafe { _mm_loadu_si128(blk.as_ptr() as *const __m128i) };
        let (a0, a1, a2) = (
            _mm_extract_epi32(head, 1) as u32,
            _mm_extract_epi32(head, 2) as u32,
            _mm_extract_epi32(head, 3) as u32,
        );
        // d and dmin as f32 lanes 0 and 1
        let dd = _mm_cvtph_ps(head);
        let (d, dmin) = (_mm_cvtss_f32(dd), _mm_cvtss_f32(_mm_shuffle_ps(dd, dd, 1)));
        let [sc_lo, sc_hi, mn_lo, mn_hi] = k4_scale_words(a0, a1, a2);
        let sc = (u64::from(sc_hi) << 32) | u64::from(sc_lo);
        // SAFETY: the 8 value blocks of super-block b of tokens t0..t0 + N
        // are in `qs` (t0 + N <= t_pad).
        let x: [*const __m256i; N] = std::array::from_fn(|n| unsafe {
            acts.qs.as_ptr().add(((t0 + n) * nb + b) * 8) as *const __m256i
        });
        let mut isum = [_mm256_setzero_si256(); N];
        for j in 0..4 {
            let s_lo = _mm256_set1_epi16(((sc >> (16 * j)) & 0xff) as i16);
            let s_hi = _mm256_set1_epi16(((sc >> (16 * j + 8)) & 0xff) as i16);
            // SAFETY: 32 nibble bytes of the block.
            let v =
                unsafe { _mm256_loadu_si256(blk.as_ptr().add(nibbles + 32 * j) as *const __m256i) };
            let (mut lo, mut hi) = (
                _mm256_and_si256(v, m4),
                _mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
            );
            if FIFTH {
                // value 64j + l's fifth bit is bit 2j of byte 16 + l, 64j + 32 + l's bit 2j + 1
                // SAFETY: bytes 16..48 of the block.
                let h = unsafe { _mm256_loadu_si256(blk.as_ptr().add(16) as *const __m256i) };
                let bit = |k: usize| {
                    let b = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(k as i32)), one);
                    _mm256_slli_epi16(b, 4)
                };
                lo = _mm256_or_si256(lo, bit(2 * j));
                hi = _mm256_or_si256(hi, bit(2 * j + 1));
            }
            for n in 0..N {
                // SAFETY: as for `x`; `Q8Block`s are 32-byte aligned.
                let (x_lo, x_hi) = unsafe {
                    (
                        _mm256_load_si256(x[n].add(2 * j)),
                        _mm256_load_si256(x[n].add(2 * j + 1)),
                    )
                };
                let plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x_lo), s_lo);
                let phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x_hi), s_hi);
                isum[n] = _mm256_add_epi32(isum[n], _mm256_add_epi32(plo, phi));
            }
        }
        let msum = k4_min_sums_avx2::<N>(mn_lo, mn_hi, acts, b, t0);
        accs.add_block(&isum, Some((&msum, dmin)), d, acts, b, t0);
    }
    accs.finish()
}
