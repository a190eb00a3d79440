//! The 16-token (prefill) tile of the 32-element block formats on AVX-512
//! VNNI: [`super::legacy`]'s 8-token tile with the tokens in the 16 lanes
//! of 512-bit registers. Each row's block is unpacked, biased and scaled
//! once for twice the tokens: in the 8-token tile those steps were about
//! three instructions for every `vpdpbusd`.
//!
//! The arithmetic per (row, token) is the 8-token tile's: the exact integer
//! sum of the block (signed values biased by 128, `128 x sum(x)` taken off
//! again), then `acc = fma(isum, d * dx, acc)` and `acc = fma(c, s, acc)`,
//! so the results are the same bits.

use std::arch::x86_64::*;

use super::legacy::{LegacyBlock, has_c, scales4_avx2 as scales4};
use crate::matmul::acts::QuantActs;

/// Tokens per tile.
pub(super) const TOKENS: usize = 16;

/// Dot products of `MR` weight rows with tokens `t0..t0 + 16`, token
/// `t0 + n`'s into `out[n]`.
///
/// # Safety
/// The CPU must support AVX2/FMA/F16C and AVX-512 F/BW/VL/VNNI; each
/// `rows[i]` points to `acts.blocks` whole blocks; `t0` is a multiple of 16
/// with `t0 + 16 <= acts.t_pad`; `acts.qs16` is built, and for signed
/// formats `acts.xsums`.
// `v` and `i` index several arrays at once.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn tokens16_vnni<B: LegacyBlock, const MR: usize>(
    rows: [*const u8; MR],
    acts: &QuantActs,
    t0: usize,
    out: &mut [[f32; MR]; TOKENS],
) {
    let (nb, tp) = (acts.blocks, acts.t_pad);
    debug_assert!(t0.is_multiple_of(TOKENS) && t0 + TOKENS <= tp);
    debug_assert!(acts.qs16.len() == tp / TOKENS * nb * 8);
    debug_assert!(!B::SIGNED || acts.xsums.len() == tp * nb);
    let mut acc = [_mm512_setzero_ps(); MR];
    let x16 = acts.qs16[t0 / TOKENS * nb * 8..].as_ptr() as *const __m512i;
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
        // two chains (even and odd v) halve the wait on vpdpbusd's latency
        let mut even = [_mm512_setzero_si512(); MR];
        let mut odd = [_mm512_setzero_si512(); MR];
        for v in 0..8 {
            // SAFETY: vector v of block b of this token group; aligned.
            let x = unsafe { _mm512_load_si512(x16.add(8 * b + v) as *const _) };
            for i in 0..MR {
                let w = _mm512_set1_epi32(wm[i][v] as i32);
                let a = if v % 2 == 0 {
                    &mut even[i]
                } else {
                    &mut odd[i]
                };
                *a = _mm512_dpbusd_epi32(*a, w, x);
            }
        }
        let mut isum = even;
        for i in 0..MR {
            isum[i] = _mm512_add_epi32(even[i], odd[i]);
        }
        if B::SIGNED {
            // the bias's share, 128 x sum(x) per token
            // SAFETY: 16 ints of block b's sums (`xsums` built, caller).
            let xs =
                unsafe { _mm512_loadu_si512(acts.xsums[b * tp + t0..][..16].as_ptr() as *const _) };
            let xs = _mm512_slli_epi32::<7>(xs);
            for s in &mut isum {
                *s = _mm512_sub_epi32(*s, xs);
            }
        }
        // SAFETY: two slices of 16 floats.
        let (xd, xs) = unsafe {
            (
                _mm512_loadu_ps(acts.d[b * tp + t0..][..16].as_ptr()),
                _mm512_loadu_ps(acts.s[b * tp + t0..][..16].as_ptr()),
            )
        };
        // Scales 4 rows at a time (the last group repeats its last row).
        for i0 in (0..MR).step_by(4) {
            let p = std::array::from_fn(|k| blk[(i0 + k).min(MR - 1)]);
            // SAFETY: whole blocks (caller).
            let (dv, cv) = unsafe { scales4::<B>(p) };
            for k in 0..4.min(MR - i0) {
                let i = i0 + k;
                let lane = _mm512_set1_epi32(k as i32);
                let d = _mm512_permutexvar_ps(lane, _mm512_castps128_ps512(dv));
                let f = _mm512_cvtepi32_ps(isum[i]);
                acc[i] = _mm512_fmadd_ps(f, _mm512_mul_ps(d, xd), acc[i]);
                if has_c::<B>() {
                    let c = _mm512_permutexvar_ps(lane, _mm512_castps128_ps512(cv));
                    acc[i] = _mm512_fmadd_ps(c, xs, acc[i]);
                }
            }
        }
    }
    for (i, a) in acc.into_iter().enumerate() {
        let mut v = [0f32; TOKENS];
        // SAFETY: 16 floats.
        unsafe { _mm512_storeu_ps(v.as_mut_ptr(), a) };
        for (o, v) in out.iter_mut().zip(v) {
            o[i] = v;
        }
    }
}
