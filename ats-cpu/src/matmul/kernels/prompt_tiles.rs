//! What the prompt tiles on AVX-512 VNNI share ([`super::legacy_tiles`],
//! [`super::iq4_xs512`], [`super::q6_k512`], [`super::k4_tiles`]): tiles
//! of 4 rows and 16 or 32 tokens, the tokens in the 16 lanes of one or two
//! 512-bit registers, on [`QuantActs::qs16`].

use std::arch::x86_64::*;

use crate::matmul::acts::QuantActs;

/// A prompt tile: 4 rows against tokens `t0..t0 + out.len()`, token
/// `t0 + n` into `out[n]`.
///
/// Safety: as the kernel's own contract states.
pub(super) type TileFn =
    unsafe fn(rows: [*const u8; 4], acts: &QuantActs, t0: usize, out: &mut [[f32; 4]]);

/// A format's tiles of 16 and of 32 tokens.
pub(super) type Tiles = [TileFn; 2];

/// The first of the 16-token interleaved vectors of the group holding
/// token `t0` (a multiple of 16; `acts.qs16` built).
#[inline]
pub(super) fn token_vectors(acts: &QuantActs, t0: usize) -> *const __m512i {
    acts.qs16[t0 / 16 * acts.qblocks * 8..].as_ptr() as *const __m512i
}

/// The first of the 16-token pairs of sums of 16 values
/// ([`QuantActs::bsums16`], built) of the group holding token `t0` (a
/// multiple of 16).
#[inline]
pub(super) fn token_sums(acts: &QuantActs, t0: usize) -> *const __m512i {
    acts.bsums16[t0 / 16 * acts.blocks * 8..].as_ptr() as *const __m512i
}

/// `sum_p w[p] x (sums 2p and 2p + 1)` per token of one 16-token group,
/// `sums` its super-block's 8 pair vectors ([`token_sums`]), `w[p]` a pair
/// of int16 weights (low half for sum 2p). Exact in int32 for Q8_K's sums.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VNNI; 8 vectors at `sums`, 64-byte
/// aligned.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn weighted_sums(sums: *const __m512i, w: &[u32; 8]) -> __m512i {
    let mut m = _mm512_setzero_si512();
    for (p, &w) in w.iter().enumerate() {
        // SAFETY: vector p of the 8 (caller).
        let s = unsafe { _mm512_load_si512(sums.add(p) as *const _) };
        m = _mm512_dpwssd_epi32(m, s, _mm512_set1_epi32(w as i32));
    }
    m
}

/// One step of a tile: for each row `i`, its 4 weights `wm[i][v]` (bytes,
/// broadcast from memory) against vector `at` of each of the `NT` token
/// groups (`next` vectors apart from `x16`), added to `s[k][i]`.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI; vectors `x16 + k * next +
/// at` (`k < NT`) are readable and 64-byte aligned.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn dot_step<const NT: usize, const MR: usize>(
    s: &mut [[__m512i; MR]; NT],
    wm: &[[u32; 8]; MR],
    v: usize,
    x16: *const __m512i,
    at: usize,
    next: usize,
) {
    let mut x = [_mm512_setzero_si512(); NT];
    for (k, x) in x.iter_mut().enumerate() {
        // SAFETY: readable and aligned (caller).
        *x = unsafe { _mm512_load_si512(x16.add(k * next + at) as *const _) };
    }
    for (i, wm) in wm.iter().enumerate() {
        let w = _mm512_set1_epi32(wm[v] as i32);
        for (s, x) in s.iter_mut().zip(&x) {
            s[i] = _mm512_dpbusd_epi32(s[i], w, *x);
        }
    }
}

/// Stores `acc[k][i]` (row `i`, tokens `16k..16k + 16`) into `out[16k +
/// n][i]`: each 4 rows are transposed in registers (4x4 within each
/// 128-bit lane), so that a token's 4 results leave in one 16-byte store,
/// where a scalar scatter took 16 loads and stores per row and group (a
/// tenth of a tile's time at 2 super-blocks a row).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) fn store_tokens<const NT: usize, const MR: usize>(
    acc: &[[__m512; MR]; NT],
    out: &mut [[f32; MR]],
) {
    for (k, acc) in acc.iter().enumerate() {
        let out = &mut out[16 * k..16 * k + 16];
        let quads = MR / 4;
        for q in 0..quads {
            let i0 = 4 * q;
            let [a0, a1, a2, a3] = [acc[i0], acc[i0 + 1], acc[i0 + 2], acc[i0 + 3]];
            // per lane: rows 0, 1 and 2, 3 of tokens 0, 1 (lo) and 2, 3 (hi)
            let (t0, t1) = (_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
            let (t2, t3) = (_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
            // (casts, not closures: closures are not inlined into kernels)
            let (t0, t1) = (_mm512_castps_pd(t0), _mm512_castps_pd(t1));
            let (t2, t3) = (_mm512_castps_pd(t2), _mm512_castps_pd(t3));
            // token j of each lane's 4, rows 0..4
            let r = [
                _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2)),
                _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2)),
                _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3)),
                _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3)),
            ];
            for (j, r) in r.iter().enumerate() {
                let lanes = [
                    _mm512_castps512_ps128(*r),
                    _mm512_extractf32x4_ps::<1>(*r),
                    _mm512_extractf32x4_ps::<2>(*r),
                    _mm512_extractf32x4_ps::<3>(*r),
                ];
                for (l, v) in lanes.into_iter().enumerate() {
                    let o = &mut out[4 * l + j][i0..i0 + 4];
                    // SAFETY: 4 floats.
                    unsafe { _mm_storeu_ps(o.as_mut_ptr(), v) };
                }
            }
        }
        for (i, a) in acc.iter().enumerate().skip(4 * quads) {
            let mut v = [0f32; 16];
            // SAFETY: 16 floats.
            unsafe { _mm512_storeu_ps(v.as_mut_ptr(), *a) };
            for (o, v) in out.iter_mut().zip(v) {
                o[i] = v;
            }
        }
    }
}
