//! The K-quant row kernels for rounds of 4 to 8 tokens on AVX2: Q4_K and
//! Q5_K rows against the regrouped activations of [`QuantActs::qsp`].
//!
//! A 32-byte half of a regrouped register holds four sub-blocks' 8-value
//! chunks, so the weights of a block are transposed once (4 x 4 chunks,
//! eight shuffles per half) to match; four `maddubs` products then share
//! 16-bit sums and one scaling `madd`: 10 multiplications per 256 values
//! and token where the one-sub-block-a-register kernel
//! ([`super::q4_k::k4_dots_avx2`]) takes 16. The integer sums are exact and
//! meet the same f32 sequence, so the results are the same bits. One token
//! would not repay the transposition; rounds of 1 to 3 keep the plain
//! kernels. Q6_K's version (two products a sum, 12 multiplications) measured
//! no faster than its plain kernel here (415 against 413 us for 8 tokens),
//! so Q6_K keeps it.

use std::arch::x86_64::*;

use super::kquant::{TokenAccsAvx2, k4_min_sums_avx2, k4_scale_words, prefetch_block_avx2};
use crate::matmul::acts::QuantActs;

/// Fewest tokens for which these kernels run.
pub(super) const MIN_TOKENS: usize = 4;

/// `[a, b, c, e]` as chunks of 8 bytes, transposed: register `j` holds chunk
/// `j` of each of the four in turn.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn transpose(a: __m256i, b: __m256i, c: __m256i, e: __m256i) -> [__m256i; 4] {
    // [a0, b0, a2, b2], [a1, b1, a3, b3], then the same of c and e
    let (ab02, ab13) = (_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));
    let (ce02, ce13) = (_mm256_unpacklo_epi64(c, e), _mm256_unpackhi_epi64(c, e));
    [
        _mm256_permute2x128_si256::<0x20>(ab02, ce02),
        _mm256_permute2x128_si256::<0x20>(ab13, ce13),
        _mm256_permute2x128_si256::<0x31>(ab02, ce02),
        _mm256_permute2x128_si256::<0x31>(ab13, ce13),
    ]
}

/// The sum over `j` of `w[j]`'s products with the aligned activation halves
/// `x + 2j + h`, in 16 bits (the caller bounds it), for `j` in `js`.
///
/// # Safety
/// `x` is a regrouped super-block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn products(w: &[__m256i; 4], x: *const __m256i, h: usize, js: [usize; 2]) -> __m256i {
    // SAFETY: halves 2j + h < 8 of the block (caller).
    let p = |j: usize| _mm256_maddubs_epi16(w[j], unsafe { _mm256_load_si256(x.add(2 * j + h)) });
    _mm256_add_epi16(p(js[0]), p(js[1]))
}

/// One Q4_K (with `FIFTH`, Q5_K) row against tokens `t0..t0 + N`
/// (`N >= MIN_TOKENS`).
///
/// # Safety
/// The CPU must support AVX2/FMA/F16C; `row` must point to `acts.blocks`
/// whole super-blocks; `t0 + N <= acts.t_pad`; `acts.qsp` is built.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn k4_dots<const N: usize, const FIFTH: bool>(
    row: *const u8,
    acts: &QuantActs,
    t0: usize,
    prefetch: usize,
) -> [f32; N] {
    debug_assert!(t0 + N <= acts.t_pad);
    let bytes = if FIFTH { 176 } else { 144 };
    let nibbles = if FIFTH { 48 } else { 16 };
    let (m4, one) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(1));
    // sub-block 4h + p's scale (bytes 8h + 2p, + 1 of the widened scales)
    // in 16-bit lanes 4p..4p + 4
    let spread = |h: i8| {
        let (a, b) = (8 * h, 8 * h + 2);
        let (c, e) = (8 * h + 4, 8 * h + 6);
        _mm256_setr_epi8(
            a,
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
            c,
            c + 1,
            c,
            c + 1,
            c,
            c + 1,
            c,
            c + 1,
            e,
            e + 1,
            e,
            e + 1,
            e,
            e + 1,
            e,
            e + 1,
        )
    };
    let spreads = [spread(0), spread(1)];
    let mut accs = TokenAccsAvx2::<N>::new();
    for b in 0..acts.blocks {
        // SAFETY: super-block b is inside the row (caller).
        let blk = unsafe { row.add(b * bytes) };
        prefetch_block_avx2(blk, bytes, prefetch);
        // SAFETY: bytes 0..16 of the block (d, dmin, the 12 scale bytes).
        let head = unsafe { _mm_loadu_si128(blk as *const __m128i) };
        let dd = _mm_cvtph_ps(head);
        let (d, dmin) = (_mm_cvtss_f32(dd), _mm_cvtss_f32(_mm_shuffle_ps(dd, dd, 1)));
        let [sc_lo, sc_hi, mn_lo, mn_hi] = k4_scale_words(
            _mm_extract_epi32(head, 1) as u32,
            _mm_extract_epi32(head, 2) as u32,
            _mm_extract_epi32(head, 3) as u32,
        );
        let sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_set_epi32(
            0,
            0,
            sc_hi as i32,
            sc_lo as i32,
        )));
        let sc = spreads.map(|s| _mm256_shuffle_epi8(sc, s));
        // SAFETY: the fifth bits, bytes 16..48 of a Q5_K block.
        let qh = FIFTH.then(|| unsafe { _mm256_loadu_si256(blk.add(16) as *const __m256i) });
        // sub-blocks 2j' (low nibbles) and 2j' + 1 (high), j' = 0..4
        let subs: [__m256i; 8] = std::array::from_fn(|k| {
            // SAFETY: 32 nibble bytes of the block.
            let v =
                unsafe { _mm256_loadu_si256(blk.add(nibbles + 32 * (k / 2)) as *const __m256i) };
            let v = if k % 2 == 0 {
                v
            } else {
                _mm256_srli_epi16(v, 4)
            };
            let v = _mm256_and_si256(v, m4);
            match qh {
                // sub-block k's fifth bits are bit k of the 32 bytes
                Some(qh) => {
                    let bit = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(k as i32));
                    _mm256_or_si256(v, _mm256_slli_epi16(_mm256_and_si256(bit, one), 4))
                }
                None => v,
            }
        });
        let w = [
            transpose(subs[0], subs[1], subs[2], subs[3]),
            transpose(subs[4], subs[5], subs[6], subs[7]),
        ];
        // half `2j + h` of token n's block: register j's sub-blocks 4h..4h + 4
        let x: [*const __m256i; N] =
            std::array::from_fn(|n| acts.regrouped(t0 + n, b) as *const __m256i);
        let isum: [__m256i; N] = std::array::from_fn(|n| {
            let half = |h: usize| {
                // SAFETY: x[n] is a regrouped super-block; at most
                // 4 x 2 x 31 x 127 in each 16-bit lane.
                let s16 = unsafe {
                    _mm256_add_epi16(
                        products(&w[h], x[n], h, [0, 1]),
                        products(&w[h], x[n], h, [2, 3]),
                    )
                };
                _mm256_madd_epi16(s16, sc[h])
            };
            _mm256_add_epi32(half(0), half(1))
        });
        let msum = k4_min_sums_avx2::<N>(mn_lo, mn_hi, acts, b, t0);
        accs.add_block(&isum, Some((&msum, dmin)), d, acts, b, t0);
    }
    accs.finish()
}
