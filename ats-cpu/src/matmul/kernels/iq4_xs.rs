//! IQ4_XS weights: super-blocks of 256 four-bit indices into IQ4_NL's table
//! of signed levels, in 8 sub-blocks of 32 with 6-bit scales `ls` and an f16
//! factor `d` (136 bytes: d 0, high scale bits 2..4, low scale nibbles
//! 4..8, indices 8..136), `w = d * (ls - 32) * KVALUES[q]`, against Q8_K
//! activations. The canonical form holds the levels as signed bytes, each
//! sub-block's scale `ls - 32` on both its groups of 16, and no mins.

use ats_core::quant::iq4_nl::KVALUES;
use ats_core::quant::iq4_xs::unpack_scales;

use super::kquant::{Canon, SuperBlock, f16_at};
#[cfg(target_arch = "x86_64")]
use super::kquant::{TokenAccsAvx2, prefetch_block_avx2};
#[cfg(target_arch = "x86_64")]
use crate::matmul::acts::QuantActs;

/// The IQ4_XS super-block format.
pub(super) struct Iq4Xs;

/// Canonical scales (no mins) and factors of an IQ4_XS super-block.
fn scales(b: &[u8], c: &mut Canon) {
    for (j, &ls) in unpack_scales(b).iter().enumerate() {
        let sc = i16::from(ls) - 32;
        c.set_sc(2 * j, sc);
        c.set_sc(2 * j + 1, sc);
    }
    c.mn = [0; 16];
    c.d = f16_at(b, 0);
    c.dmin = 0.0;
}

impl SuperBlock for Iq4Xs {
    const BYTES: usize = 136;
    // signed levels up to 127: one maddubs pair sum (2 x 127 x 127) per int16
    const I16_SUMS: usize = 1;
    const SIGNED: bool = true;
    #[cfg(target_arch = "x86_64")]
    const ROWS16_VNNI: Option<super::kquant::Rows16Fn> = Some(super::iq4_xs512::rows16_vnni);
    #[cfg(target_arch = "x86_64")]
    const PROMPT_TILES_VNNI: Option<super::prompt_tiles::Tiles> = Some([
        super::iq4_xs512::tokens_vnni::<1, 4>,
        super::iq4_xs512::tokens_vnni::<2, 4>,
    ]);

    fn unpack(b: &[u8], c: &mut Canon) {
        scales(b, c);
        // Sub-block j: low nibbles of bytes 8 + 16j.. are values 32j..32j+16,
        // the high ones the next 16.
        for j in 0..8 {
            for l in 0..16 {
                let q = b[8 + 16 * j + l];
                c.q[32 * j + l] = KVALUES[usize::from(q & 0x0f)] as u8;
                c.q[32 * j + 16 + l] = KVALUES[usize::from(q >> 4)] as u8;
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack_avx2(p: *const u8, c: &mut Canon) {
        use std::arch::x86_64::*;
        // SAFETY: a whole 136-byte block at p (caller).
        scales(unsafe { std::slice::from_raw_parts(p, Self::BYTES) }, c);
        let out = c.q.as_mut_ptr() as *mut __m256i;
        for j in 0..8 {
            // SAFETY: bytes 8 + 16j .. 24 + 16j are inside the block; j < 8
            // aligned 32-byte slots in `c.q`.
            unsafe {
                let v = super::simd::table_nibbles(p.add(8 + 16 * j), &KVALUES);
                _mm256_store_si256(out.add(j), v);
            }
        }
    }

    /// Without the canonical form: each sub-block's levels are looked up in
    /// registers and meet the activations there, its scale applied by `madd`.
    /// The integer sum and the single FMA per super-block are those of the
    /// canonical path (whose min term adds exactly zero). A block's levels
    /// are looked up once for all `N` tokens.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dots_avx2<const N: usize>(
        row: *const u8,
        acts: &QuantActs,
        t0: usize,
        prefetch: usize,
    ) -> [f32; N] {
        use std::arch::x86_64::*;
        let nb = acts.blocks;
        debug_assert!(t0 + N <= acts.t_pad);
        let mut accs = TokenAccsAvx2::<N>::new();
        for b in 0..nb {
            // SAFETY: super-block b is inside the row (caller).
            let blk = unsafe { std::slice::from_raw_parts(row.add(b * Self::BYTES), Self::BYTES) };
            prefetch_block_avx2(blk.as_ptr(), Self::BYTES, prefetch);
            let ls = unpack_scales(blk);
            // SAFETY: the 8 value blocks of super-block b of tokens t0..t0 + N
            // are in `qs` (t0 + N <= t_pad).
            let x: [*const __m256i; N] = std::array::from_fn(|n| unsafe {
                acts.qs.as_ptr().add(((t0 + n) * nb + b) * 8) as *const __m256i
            });
            let mut isum = [_mm256_setzero_si256(); N];
            for (j, &l) in ls.iter().enumerate() {
                // SAFETY: bytes 8 + 16j .. 24 + 16j of the block.
                let w =
                    unsafe { super::simd::table_nibbles(blk.as_ptr().add(8 + 16 * j), &KVALUES) };
                let (wa, s) = (_mm256_sign_epi8(w, w), _mm256_set1_epi16(i16::from(l) - 32));
                for n in 0..N {
                    // SAFETY: as for `x`; `Q8Block`s are 32-byte aligned.
                    let xv = unsafe { _mm256_load_si256(x[n].add(j)) };
                    let p = _mm256_maddubs_epi16(wa, _mm256_sign_epi8(xv, w));
                    isum[n] = _mm256_add_epi32(isum[n], _mm256_madd_epi16(p, s));
                }
            }
            accs.add_block(&isum, None, f16_at(blk, 0), acts, b, t0);
        }
        accs.finish()
    }
}
