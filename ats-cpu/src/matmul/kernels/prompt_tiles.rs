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
