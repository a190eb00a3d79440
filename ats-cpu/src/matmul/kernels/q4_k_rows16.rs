//! Q4_K's 8-token tile on AVX-512 VNNI, for rounds of a few sequences
//! decoding together: 16 rows a call, one per lane, as
//! [`super::legacy_rows16`] does for the 32-element formats.
//!
//! Each sub-block of 32 values of the 16 rows is loaded once and
//! transposed so that register `c` holds values `4c..4c + 4` of every row;
//! each token's same 4 values meet it in one `vpdpbusd` with a broadcast
//! operand, 8 per token and sub-block. A half sub-block's sum (16 values)
//! fits in 16 bits, so two `vpdpwssd` apply the rows' 6-bit scales
//! (1024x2048 x 8 tokens in `isa_pair` on a Xeon: 162 us with a `vpmulld`
//! and a `vpaddd` per sub-block, 141 with these). The rows' mins come
//! transposed by pairs of sub-blocks, so 4 `vpdpwssd` give each token's
//! `sum(m_j x B_j)`.
//! [`super::q4_k512::rows16_tokens_vnni`] instead reduces 4 partial sums
//! per row for every token and super-block.
//!
//! Every row's integers are those of the other paths (`sum(sc_j x S_j)`,
//! `sum(m_j x B_j)`), and so are its two FMAs per super-block and the
//! results.

use std::arch::x86_64::*;

use super::legacy_rows16::{TOKENS, by_dword};
use super::legacy512::{
    ROWS, ROWS_AHEAD, f16_lanes, first_dwords, halves4, lanes4, prefetch_rows, quad_rows,
    store_rows,
};
use super::q4_k512::{BYTES, block_sums, scale_words};
use crate::matmul::acts::QuantActs;

/// The rows' 6-bit scales of the super-blocks' 8 sub-blocks as dwords,
/// their high words zero (register `j`: sub-block `j` of every row), and their mins by pairs of
/// words (register `k`: sub-blocks `2k` and `2k + 1`), row `LANE_ROW[l]`
/// in lane `l`, from the quads' heads.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
fn scales_and_mins(heads: &[__m512i; 4]) -> ([__m512i; 8], [__m512i; 4]) {
    let z = _mm512_setzero_si512();
    let (mut lo, mut hi, mut mins) = ([z; 4], [z; 4], [z; 4]);
    for g in 0..4 {
        let (sc, mn) = scale_words(heads[g]);
        (lo[g], hi[g]) = (_mm512_unpacklo_epi16(sc, z), _mm512_unpackhi_epi16(sc, z));
        mins[g] = mn;
    }
    let (a, b) = (by_dword(lo), by_dword(hi));
    (
        [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]],
        by_dword(mins),
    )
}

/// Sub-block `j`'s values of the 16 rows at `q + r * stride` (the super-
/// blocks' starts) transposed as [`by_dword`] lays them out: register `c`
/// holds values `4c..4c + 4` of every row.
///
/// # Safety
/// Each of the 16 rows holds a whole super-block at `q + r * stride`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
unsafe fn sub_block(q: *const u8, stride: usize, j: usize) -> [__m512i; 8] {
    let m4 = _mm512_set1_epi8(0x0f);
    let z = _mm512_setzero_si512();
    let (mut lo, mut hi) = ([z; 4], [z; 4]);
    // bytes 32p..32p + 32 of the nibbles: sub-block 2p low, 2p + 1 high
    let at = 16 + 32 * (j / 2);
    for g in 0..4 {
        let p = quad_rows(q.wrapping_add(4 * g * stride + at), stride);
        // SAFETY: 32 nibble bytes of each row's super-block (caller).
        let (a, c) = unsafe { halves4(p) };
        (lo[g], hi[g]) = if j.is_multiple_of(2) {
            (_mm512_and_si512(a, m4), _mm512_and_si512(c, m4))
        } else {
            (
                _mm512_and_si512(_mm512_srli_epi16::<4>(a), m4),
                _mm512_and_si512(_mm512_srli_epi16::<4>(c), m4),
            )
        };
    }
    let (a, b) = (by_dword(lo), by_dword(hi));
    [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
}

/// The dword `IMM` picks (`0x00`, `0x55`, `0xaa`, `0xff`: dword 0 to 3)
/// of each 128-bit lane of `v`, in all four dwords of the lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
fn dword<const IMM: i32>(v: __m512i) -> __m512i {
    _mm512_shuffle_epi32::<IMM>(v)
}

/// Each of tokens `t0..t0 + 8`'s Q8_K values as dwords (64 a
/// super-block).
pub(super) fn token_dwords(acts: &QuantActs, t0: usize) -> [*const i32; TOKENS] {
    let nb = acts.blocks;
    std::array::from_fn(|t| acts.qs[(t0 + t) * nb * 8..].as_ptr() as *const i32)
}

/// Dot products of 16 evenly spaced Q4_K rows with tokens `t0..t0 + 8`,
/// token `t0 + n`'s into `out[n]`.
///
/// # Safety
/// The CPU must support AVX2/FMA/F16C and AVX-512 F/BW/VL/VNNI; row `r`
/// (`0..16`) at `first + r * stride` holds `acts.blocks` whole
/// super-blocks; `t0 + 8 <= acts.t_pad`; `acts` holds Q8_K values.
// `t` and `k` index several arrays at once.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn tokens8_vnni(
    first: *const u8,
    stride: usize,
    acts: &QuantActs,
    t0: usize,
    out: &mut [[f32; ROWS]; TOKENS],
) {
    let (nb, tp) = (acts.blocks, acts.t_pad);
    debug_assert!(t0 + TOKENS <= tp && acts.qs.len() == tp * nb * 8);
    debug_assert!(acts.bsums.len() == tp * nb);
    let x = token_dwords(acts, t0);
    let z = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); TOKENS];
    for b in 0..nb {
        let q = first.wrapping_add(b * BYTES);
        let mut heads = [z; 4];
        for g in 0..4 {
            // SAFETY: 16 head bytes of each row's super-block b (caller).
            heads[g] = unsafe { lanes4(quad_rows(q.wrapping_add(4 * g * stride), stride)) };
        }
        let (scales, mins) = scales_and_mins(&heads);
        let mut isum = [z; TOKENS];
        for j in 0..8 {
            // SAFETY: super-block b of each row is whole (caller).
            let w = unsafe { sub_block(q, stride, j) };
            for t in 0..TOKENS {
                // each half's 16 values: |sum| <= 16 x 15 x 127, an int16
                let mut s = [z; 2];
                for k in 0..8 {
                    // SAFETY: dword k of sub-block j of token t0 + t's
                    // super-block b (`qs` holds `t_pad` tokens, caller).
                    let xk = _mm512_set1_epi32(unsafe { x[t].add(64 * b + 8 * j + k).read() });
                    s[k / 4] = _mm512_dpbusd_epi32(s[k / 4], w[k], xk);
                }
                // the scale dword is (scale, 0) as words, and a half's sum
                // is its int16 and the sign: one `vpdpwssd` adds scale x sum
                isum[t] = _mm512_dpwssd_epi32(isum[t], s[0], scales[j]);
                isum[t] = _mm512_dpwssd_epi32(isum[t], s[1], scales[j]);
            }
        }
        prefetch_rows(first, stride, BYTES, b + ROWS_AHEAD, nb);
        let h = first_dwords(&heads);
        let (d, dmin) = (f16_lanes::<0>(h), f16_lanes::<16>(h));
        // -dmin, as the other paths negate it (the sign bit flipped)
        let neg = _mm512_castsi512_ps(_mm512_xor_si512(
            _mm512_castps_si512(dmin),
            _mm512_set1_epi32(i32::MIN),
        ));
        let at_b = b * tp + t0;
        let xd = &acts.d[at_b..at_b + TOKENS];
        for t in 0..TOKENS {
            let bw = block_sums(&acts.bsums[(t0 + t) * nb + b]);
            let mut msum = _mm512_dpwssd_epi32(z, mins[0], dword::<0x00>(bw));
            msum = _mm512_dpwssd_epi32(msum, mins[1], dword::<0x55>(bw));
            msum = _mm512_dpwssd_epi32(msum, mins[2], dword::<0xaa>(bw));
            msum = _mm512_dpwssd_epi32(msum, mins[3], dword::<0xff>(bw));
            let dx = _mm512_set1_ps(xd[t]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, dx), acc[t]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(neg, dx), acc[t]);
        }
    }
    for (acc, out) in acc.into_iter().zip(out) {
        store_rows(acc, out);
    }
}
