//! The prompt tiles of the 32-element block formats on AVX-512 VNNI:
//! [`super::legacy`]'s 8-token tile with the tokens in the 16 lanes of
//! 512-bit registers, one register (16 tokens) or two (32) per broadcast
//! weight. Each row's block is unpacked, biased and scaled once for 16 or
//! 32 tokens, and with 32 each broadcast serves two `vpdpbusd`: in the
//! 8-token tile those steps were about three instructions for every
//! `vpdpbusd`.
//!
//! The arithmetic per (row, token) is the 8-token tile's: the exact integer
//! sum of the block (signed values biased by 128, `128 x sum(x)` taken off
//! again), then `acc = fma(isum, d * dx, acc)` and `acc = fma(c, s, acc)`,
//! so the results are the same bits.

use std::arch::x86_64::*;

use super::legacy::{LegacyBlock, has_c, scales4_avx2 as scales4};
use super::prompt_tiles::{dot_step, store_tokens, token_vectors};
use crate::matmul::acts::QuantActs;

/// Dot products of `MR` weight rows with tokens `t0..t0 + 16 * NT`, token
/// `t0 + n`'s into `out[n]`.
///
/// # Safety
/// The CPU must support AVX2/FMA/F16C and AVX-512 F/BW/VL/VNNI; each
/// `rows[i]` points to `acts.blocks` whole blocks; `out` holds `16 * NT`
/// tokens; `t0` is a multiple of 16 with `t0 + 16 * NT <= acts.t_pad`;
/// `acts.qs16` is built, and for signed formats `acts.xsums`.
// `v`, `k` and `i` index several arrays at once.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn tokens_vnni<B: LegacyBlock, const NT: usize, const MR: usize>(
    rows: [*const u8; MR],
    acts: &QuantActs,
    t0: usize,
    out: &mut [[f32; MR]],
) {
    let (nb, tp) = (acts.blocks, acts.t_pad);
    debug_assert!(out.len() == 16 * NT && t0.is_multiple_of(16) && t0 + 16 * NT <= tp);
    debug_assert!(acts.qs16.len() == tp / 16 * nb * 8);
    debug_assert!(!B::SIGNED || acts.xsums.len() == tp * nb);
    let x16 = token_vectors(acts, t0);
    // the next 16 tokens' vectors
    let next = nb * 8;
    let mut acc = [[_mm512_setzero_ps(); MR]; NT];
    for b in 0..nb {
        // A loop, not a closure: closures are not inlined into kernels here.
        let mut blk = [std::ptr::null::<u8>(); MR];
        for i in 0..MR {
            blk[i] = rows[i].wrapping_add(b * B::BYTES);
        }
        // The unpacked weights go through memory, to be broadcast 4 bytes
        // at a time by the load unit, as in the 8-token tile (`black_box`
        // keeps LLVM from turning the broadcasts into shuffles).
        let mut wm = [[0u32; 8]; MR];
        for (i, wm) in wm.iter_mut().enumerate() {
            // SAFETY: a whole block (caller); the features are enabled here.
            let mut w = unsafe { B::unpack_avx2(blk[i]) };
            if B::SIGNED {
                // biased to unsigned bytes, for `vpdpbusd`
                w = _mm256_xor_si256(w, _mm256_set1_epi8(-128));
            }
            // SAFETY: a 32-byte store into 8 u32.
            unsafe { _mm256_storeu_si256(wm.as_mut_ptr() as *mut __m256i, w) };
        }
        let wm = std::hint::black_box(&wm);
        let mut isum = [[_mm512_setzero_si512(); MR]; NT];
        for v in 0..8 {
            // SAFETY: vector v of block b of each token group; the
            // features are enabled here.
            unsafe { dot_step(&mut isum, wm, v, x16, 8 * b + v, next) };
        }
        for k in 0..NT {
            let t = t0 + 16 * k;
            if B::SIGNED {
                // the bias's share, 128 x sum(x) per token
                // SAFETY: 16 ints of block b's sums (`xsums` built, caller).
                let xs = unsafe {
                    _mm512_loadu_si512(acts.xsums[b * tp + t..][..16].as_ptr() as *const _)
                };
                let xs = _mm512_slli_epi32::<7>(xs);
                for s in &mut isum[k] {
                    *s = _mm512_sub_epi32(*s, xs);
                }
            }
            // SAFETY: two slices of 16 floats.
            let (xd, xs) = unsafe {
                (
                    _mm512_loadu_ps(acts.d[b * tp + t..][..16].as_ptr()),
                    _mm512_loadu_ps(acts.s[b * tp + t..][..16].as_ptr()),
                )
            };
            // Scales 4 rows at a time (the last group repeats its last row).
            for i0 in (0..MR).step_by(4) {
                let mut p = [blk[0]; 4];
                for (kk, p) in p.iter_mut().enumerate() {
                    *p = blk[(i0 + kk).min(MR - 1)];
                }
                // SAFETY: whole blocks (caller).
                let (dv, cv) = unsafe { scales4::<B>(p) };
                for kk in 0..4.min(MR - i0) {
                    let i = i0 + kk;
                    let lane = _mm512_set1_epi32(kk as i32);
                    let d = _mm512_permutexvar_ps(lane, _mm512_castps128_ps512(dv));
                    let f = _mm512_cvtepi32_ps(isum[k][i]);
                    acc[k][i] = _mm512_fmadd_ps(f, _mm512_mul_ps(d, xd), acc[k][i]);
                    if has_c::<B>() {
                        let c = _mm512_permutexvar_ps(lane, _mm512_castps128_ps512(cv));
                        acc[k][i] = _mm512_fmadd_ps(c, xs, acc[k][i]);
                    }
                }
            }
        }
    }
    store_tokens(&acc, out);
}
