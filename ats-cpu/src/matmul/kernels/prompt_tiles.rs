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
/// n][i]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) fn store_tokens<const NT: usize, const MR: usize>(
    acc: &[[__m512; MR]; NT],
    out: &mut [[f32; MR]],
) {
    for (k, acc) in acc.iter().enumerate() {
        for (i, a) in acc.iter().enumerate() {
            let mut v = [0f32; 16];
            // SAFETY: 16 floats.
            unsafe { _mm512_storeu_ps(v.as_mut_ptr(), *a) };
            for (o, v) in out[16 * k..16 * k + 16].iter_mut().zip(v) {
                o[i] = v;
            }
        }
    }
}
