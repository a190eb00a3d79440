//! The prompt tiles of Q4_K and Q5_K on AVX-512 VNNI, as
//! [`super::legacy_tiles`] does for the block formats: each row's
//! sub-block of 32 values (nibbles, and for Q5_K a fifth bit) meets 16 or
//! 32 tokens in the lanes of 512-bit registers; its sum is scaled by the
//! sub-block's 6-bit scale, and its min meets the tokens' sums of the
//! sub-block. The two integers and the two FMAs per super-block are those
//! of every other path (`sum sc_j x S_j`, `sum m_j x B_j`; `d`, `-dmin`).

use std::arch::x86_64::*;

use ats_core::quant::q4_k::unpack_scale_min_k4;

use super::kquant::f16_at;
use super::prompt_tiles::{dot_step, store_tokens, token_sums, token_vectors, weighted_sums};
use crate::matmul::acts::QuantActs;

/// Dot products of `MR` Q4_K (`FIVE` false, 144-byte super-blocks) or Q5_K
/// (`FIVE`, 176 bytes) rows with tokens `t0..t0 + 16 * NT`, token `t0 + n`'s
/// into `out[n]`.
///
/// # Safety
/// The CPU must support AVX2/FMA/F16C and AVX-512 F/BW/VL/VNNI; each
/// `rows[i]` holds `acts.blocks` whole super-blocks of the format; `out`
/// holds `16 * NT` tokens; `t0` is a multiple of 16 with
/// `t0 + 16 * NT <= acts.t_pad`; `acts` holds Q8_K values with `qs16` and
/// `bsums16` built.
// `v`, `k`, `i` and `j` index several arrays at once.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn tokens_vnni<const FIVE: bool, const NT: usize, const MR: usize>(
    rows: [*const u8; MR],
    acts: &QuantActs,
    t0: usize,
    out: &mut [[f32; MR]],
) {
    let bytes = if FIVE { 176 } else { 144 };
    // the nibbles' offset in the super-block
    let qs_at = if FIVE { 48 } else { 16 };
    let (nb, tp, qb) = (acts.blocks, acts.t_pad, acts.qblocks);
    debug_assert!(out.len() == 16 * NT && t0.is_multiple_of(16) && t0 + 16 * NT <= tp);
    debug_assert!(qb == 8 * nb && acts.qs16.len() == tp / 16 * qb * 8);
    debug_assert!(acts.bsums16.len() == tp / 16 * nb * 8);
    let x16 = token_vectors(acts, t0);
    let b16 = token_sums(acts, t0);
    // the next 16 tokens' vectors and sums
    let (next, next_sums) = (qb * 8, nb * 8);
    let (m4, one) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(1));
    let mut acc = [[_mm512_setzero_ps(); MR]; NT];
    for b in 0..nb {
        // Loops, not closures: closures are not inlined into kernels here.
        let mut blk = [std::ptr::null::<u8>(); MR];
        let mut scm = [([0u8; 8], [0u8; 8]); MR];
        // each min as an int16 pair, weighing both sums of 16 of its sub-block
        let mut mins = [[0u32; 8]; MR];
        for i in 0..MR {
            blk[i] = rows[i].wrapping_add(b * bytes);
            // SAFETY: the 12 scale bytes at 4..16 of each super-block (caller).
            scm[i] = unpack_scale_min_k4(unsafe { &*(blk[i].add(4) as *const [u8; 12]) });
            for j in 0..8 {
                mins[i][j] = u32::from(scm[i].1[j]) * 0x1_0001;
            }
        }
        let mut isum = [[_mm512_setzero_si512(); MR]; NT];
        for p in 0..4 {
            // sub-blocks 2p (low nibbles) and 2p + 1 (high) of each row,
            // through memory, to be broadcast by the load unit
            let mut wm = [[[0u32; 8]; MR]; 2];
            for i in 0..MR {
                // SAFETY: 32 nibble bytes (and the 32 fifth-bit bytes) of
                // the super-block (caller); 32-byte stores into 8 u32.
                unsafe {
                    let v = _mm256_loadu_si256(blk[i].add(qs_at + 32 * p) as *const __m256i);
                    let mut lo = _mm256_and_si256(v, m4);
                    let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
                    if FIVE {
                        let h = _mm256_loadu_si256(blk[i].add(16) as *const __m256i);
                        let shift = _mm_cvtsi32_si128(2 * p as i32);
                        let bits = _mm256_srl_epi16(h, shift);
                        let b0 = _mm256_and_si256(bits, one);
                        let b1 = _mm256_and_si256(_mm256_srli_epi16::<1>(bits), one);
                        lo = _mm256_or_si256(lo, _mm256_slli_epi16::<4>(b0));
                        hi = _mm256_or_si256(hi, _mm256_slli_epi16::<4>(b1));
                    }
                    _mm256_storeu_si256(wm[0][i].as_mut_ptr() as *mut __m256i, lo);
                    _mm256_storeu_si256(wm[1][i].as_mut_ptr() as *mut __m256i, hi);
                }
            }
            let wm = std::hint::black_box(&wm);
            for h in 0..2 {
                let j = 2 * p + h;
                let gq = 8 * b + j;
                let mut s = [[_mm512_setzero_si512(); MR]; NT];
                for v in 0..8 {
                    // SAFETY: vector v of the group of each token group; the
                    // features are enabled here.
                    unsafe { dot_step(&mut s, &wm[h], v, x16, 8 * gq + v, next) };
                }
                for k in 0..NT {
                    for i in 0..MR {
                        let sc = _mm512_set1_epi32(i32::from(scm[i].0[j]));
                        let sv = _mm512_mullo_epi32(s[k][i], sc);
                        isum[k][i] = _mm512_add_epi32(isum[k][i], sv);
                    }
                }
            }
        }
        for k in 0..NT {
            // SAFETY: 16 floats of block b's token scales.
            let xd = unsafe { _mm512_loadu_ps(acts.d[b * tp + t0 + 16 * k..][..16].as_ptr()) };
            for i in 0..MR {
                // SAFETY: d and dmin, the super-block's first 4 bytes (caller).
                let head = unsafe { std::slice::from_raw_parts(blk[i], 4) };
                let (d, dmin) = (f16_at(head, 0), f16_at(head, 2));
                let dd = _mm512_mul_ps(_mm512_set1_ps(d), xd);
                acc[k][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[k][i]), dd, acc[k][i]);
                // SAFETY: token group k's 8 pair vectors of super-block b.
                let msum = unsafe { weighted_sums(b16.add(k * next_sums + 8 * b), &mins[i]) };
                let nd = _mm512_mul_ps(_mm512_set1_ps(-dmin), xd);
                acc[k][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum), nd, acc[k][i]);
            }
        }
    }
    store_tokens(&acc, out);
}
