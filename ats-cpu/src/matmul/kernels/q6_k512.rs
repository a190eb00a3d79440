//! Q6_K's prompt tiles on AVX-512 VNNI, as [`super::legacy_tiles`] does
//! for the block formats: each row's six-bit values (unsigned, `0..64`)
//! meet 16 or 32 tokens in the lanes of 512-bit registers, each group of 16's sum is scaled by its int8 scale,
//! and the offset 32 is the canonical form's min (`32 x sc` against the
//! tokens' sums of 16), so the two integers and the two FMAs per
//! super-block are those of every other path.

use std::arch::x86_64::*;

use super::kquant::f16_at;
use super::prompt_tiles::{store_tokens, token_sums, token_vectors, weighted_sums};
use super::q6_k::half_runs;
use crate::matmul::acts::QuantActs;

/// Bytes per super-block: nibbles 0..128, high bits 128..192, scales
/// 192..208, d 208.
const BYTES: usize = 210;
/// Dot products of `MR` Q6_K rows with tokens `t0..t0 + 16 * NT`, token
/// `t0 + n`'s into `out[n]`.
///
/// # Safety
/// The CPU must support AVX2/FMA/F16C and AVX-512 F/BW/VL/VNNI; each
/// `rows[i]` holds `acts.blocks` whole super-blocks; `out` holds `16 * NT`
/// tokens; `t0` is a multiple of 16 with `t0 + 16 * NT <= acts.t_pad`;
/// `acts` holds Q8_K values with `qs16` and `bsums16` built.
// `v`, `k`, `i` and `r` index several arrays at once.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn tokens_vnni<const NT: usize, const MR: usize>(
    rows: [*const u8; MR],
    acts: &QuantActs,
    t0: usize,
    out: &mut [[f32; MR]],
) {
    let (nb, tp, qb) = (acts.blocks, acts.t_pad, acts.qblocks);
    debug_assert!(out.len() == 16 * NT && t0.is_multiple_of(16) && t0 + 16 * NT <= tp);
    debug_assert!(qb == 8 * nb && acts.qs16.len() == tp / 16 * qb * 8);
    debug_assert!(acts.bsums16.len() == tp / 16 * nb * 8);
    let x16 = token_vectors(acts, t0);
    let b16 = token_sums(acts, t0);
    // the next 16 tokens' vectors and sums
    let (next, next_sums) = (qb * 8, nb * 8);
    let mut acc = [[_mm512_setzero_ps(); MR]; NT];
    for b in 0..nb {
        // Loops, not closures: closures are not inlined into kernels here.
        let mut blk = [std::ptr::null::<u8>(); MR];
        let mut sc = [[0i8; 16]; MR];
        // the offset's weights, 32 x the scales of groups 2p and 2p + 1 as
        // an int16 pair
        let mut offs = [[0u32; 8]; MR];
        for i in 0..MR {
            blk[i] = rows[i].wrapping_add(b * BYTES);
            // SAFETY: the 16 scales at 192..208 of each super-block (caller).
            sc[i] = unsafe { (blk[i].add(192) as *const [i8; 16]).read_unaligned() };
            for p in 0..8 {
                let [lo, hi] = [
                    32 * i16::from(sc[i][2 * p]),
                    32 * i16::from(sc[i][2 * p + 1]),
                ];
                offs[i][p] = u32::from(lo as u16) | u32::from(hi as u16) << 16;
            }
        }
        let mut isum = [[_mm512_setzero_si512(); MR]; NT];
        for n in 0..2 {
            // Through memory, to be broadcast by the load unit.
            let mut wm = [[[0u32; 8]; 4]; MR];
            for (i, wm) in wm.iter_mut().enumerate() {
                // SAFETY: a whole super-block (caller); 32-byte stores into 8 u32.
                unsafe {
                    for (r, q) in half_runs(blk[i], n).into_iter().enumerate() {
                        _mm256_storeu_si256(wm[r].as_mut_ptr() as *mut __m256i, q);
                    }
                }
            }
            let wm = std::hint::black_box(&wm);
            for r in 0..4 {
                // the run's 32-value group, of the super-block and of the row
                let q = 4 * n + r;
                let gq = 8 * b + q;
                for half in 0..2 {
                    let g = 2 * q + half;
                    let mut s = [[_mm512_setzero_si512(); MR]; NT];
                    // Inline rather than `prompt_tiles::dot_step`, which
                    // measured 10% slower here (with the rows. words laid out
                    // for it; 64 tokens, 1024x2048: 1161-1188 -> 1296-1304 us).
                    for v in 4 * half..4 * half + 4 {
                        let mut x = [_mm512_setzero_si512(); NT];
                        for k in 0..NT {
                            // SAFETY: vector v of group gq of token group k; aligned.
                            x[k] = unsafe {
                                _mm512_load_si512(x16.add(k * next + 8 * gq + v) as *const _)
                            };
                        }
                        for i in 0..MR {
                            let w = _mm512_set1_epi32(wm[i][r][v] as i32);
                            for k in 0..NT {
                                s[k][i] = _mm512_dpbusd_epi32(s[k][i], w, x[k]);
                            }
                        }
                    }
                    for k in 0..NT {
                        for i in 0..MR {
                            let scale = _mm512_set1_epi32(i32::from(sc[i][g]));
                            let sv = _mm512_mullo_epi32(s[k][i], scale);
                            isum[k][i] = _mm512_add_epi32(isum[k][i], sv);
                        }
                    }
                }
            }
        }
        for k in 0..NT {
            // SAFETY: 16 floats of block b's token scales.
            let xd = unsafe { _mm512_loadu_ps(acts.d[b * tp + t0 + 16 * k..][..16].as_ptr()) };
            for i in 0..MR {
                // SAFETY: the super-block's d at 208..210 (caller).
                let d = f16_at(unsafe { std::slice::from_raw_parts(blk[i], BYTES) }, 208);
                let dd = _mm512_mul_ps(_mm512_set1_ps(d), xd);
                acc[k][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[k][i]), dd, acc[k][i]);
                // the offset, a min with factor d (negated, as the other paths)
                // SAFETY: token group k's 8 pair vectors of super-block b.
                let msum = unsafe { weighted_sums(b16.add(k * next_sums + 8 * b), &offs[i]) };
                let nd = _mm512_mul_ps(_mm512_set1_ps(-d), xd);
                acc[k][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum), nd, acc[k][i]);
            }
        }
    }
    store_tokens(&acc, out);
}
