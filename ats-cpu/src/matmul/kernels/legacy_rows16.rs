//! The 8-token tile of the block formats with a value layout (Q4_0, Q4_1,
//! IQ4_NL, MXFP4, Q8_0) on AVX-512 VNNI, for rounds of 3 to 15 tokens (a
//! few sequences decoding together): 16 rows a call, one per lane, as in
//! the one-token kernel of [`super::legacy512`].
//!
//! A block of the 16 rows is loaded and its levels looked up once, then
//! transposed with 16 unpacks so that register `c` holds values `4c..4c +
//! 4` of every row. Each token's same 4 values meet it in one `vpdpbusd`
//! with a broadcast operand: 8 per token and block, 64 per block, each
//! serving 64 products, with no reduction after them. [`super::legacy_pairs`]'
//! 4-row tile spends about 100 instructions on every 16 `vpdpbusd`
//! (unpacking per row pair, broadcasts through memory, scales per pair);
//! here about 80 go with 64.
//!
//! The arithmetic per (row, token) is the other tiles': the exact integer
//! sum of the block (levels made unsigned by a bias whose `bias x sum(x)`
//! the sum starts from minus), then `acc = fma(isum, d * dx, acc)` and
//! `acc = fma(c, s, acc)`, so the results are the same bits.

use std::arch::x86_64::*;

use super::legacy::{LegacyBlock, has_c};
use super::legacy512::{
    Layout, ROWS, first_dwords, head_offsets, heads16, prefetch_ahead, quad_block, scales16,
    store_rows,
};
use crate::matmul::acts::QuantActs;

/// Tokens per call.
pub(super) const TOKENS: usize = 8;

/// The dwords of four quads' registers (row `4g + k` of a block in 128-bit
/// lane `k` of `q[g]`, 4 dwords each) by dword: register `j` holds dword `j`
/// of every row, row `LANE_ROW[l]` in lane `l`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) fn by_dword(q: [__m512i; 4]) -> [__m512i; 4] {
    // per 128-bit lane: [a0 b0 a1 b1], [a2 b2 a3 b3] and likewise c, d
    let ab_lo = _mm512_unpacklo_epi32(q[0], q[1]);
    let ab_hi = _mm512_unpackhi_epi32(q[0], q[1]);
    let cd_lo = _mm512_unpacklo_epi32(q[2], q[3]);
    let cd_hi = _mm512_unpackhi_epi32(q[2], q[3]);
    [
        _mm512_unpacklo_epi64(ab_lo, cd_lo),
        _mm512_unpackhi_epi64(ab_lo, cd_lo),
        _mm512_unpacklo_epi64(ab_hi, cd_hi),
        _mm512_unpackhi_epi64(ab_hi, cd_hi),
    ]
}

/// Dot products of 16 evenly spaced weight rows of a format with a value
/// layout ([`LegacyBlock::VALUES`]) with tokens `t0..t0 + 8`, token `t0 +
/// n`'s into `out[n]`.
///
/// # Safety
/// The CPU must support AVX2/FMA/F16C and AVX-512 F/BW/VL/VNNI; `B::VALUES`
/// is set; row `r` (`0..16`) at `first + r * stride` holds `acts.blocks`
/// whole blocks, with `16 * stride` below 2^31; `t0 + 8 <= acts.t_pad`;
/// `acts.xsums` is built where the layout has a bias.
// `t` and `k` index several arrays at once.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn tokens8_vnni<B: LegacyBlock>(
    first: *const u8,
    stride: usize,
    acts: &QuantActs,
    t0: usize,
    out: &mut [[f32; ROWS]; TOKENS],
) {
    let layout = Layout::of::<B>();
    let (nb, tp) = (acts.blocks, acts.t_pad);
    debug_assert!(t0 + TOKENS <= tp && (layout.bias == 0 || acts.xsums.len() == tp * nb));
    debug_assert!(acts.qs.len() >= tp * nb);
    let bias = layout.bias;
    let idx = head_offsets(stride);
    // each token's blocks, as dwords
    let mut x = [acts.qs.as_ptr() as *const i32; TOKENS];
    for t in 0..TOKENS {
        x[t] = acts.qs[(t0 + t) * nb..].as_ptr() as *const i32;
    }
    let mut acc = [_mm512_setzero_ps(); TOKENS];
    for b in 0..nb {
        let off = b * B::BYTES;
        // as in the one-token kernel
        let headed = layout.headed && b + 1 < nb;
        let z = _mm512_setzero_si512();
        let (mut lo, mut hi, mut heads) = ([z; 4], [z; 4], [z; 4]);
        // A loop, not a closure: closures are not inlined into kernels here.
        for g in 0..4 {
            let q = first.wrapping_add(4 * g * stride + off);
            // SAFETY: block b (and b + 1 when headed) of each row (caller).
            (lo[g], hi[g], heads[g]) = unsafe { quad_block(q, stride, &layout, headed) };
        }
        prefetch_ahead::<true>(first.wrapping_add(ROWS * off), ROWS * B::BYTES);
        let (wl, wh) = (by_dword(lo), by_dword(hi));
        let w = [wl[0], wl[1], wl[2], wl[3], wh[0], wh[1], wh[2], wh[3]];
        let heads = if headed {
            first_dwords(&heads)
        } else {
            // SAFETY: the heads of block b of each row (caller).
            unsafe { heads16(first.wrapping_add(off), idx) }
        };
        let (d, c) = scales16::<B>(heads);
        // block b's scales, sums and bias shares of the 8 tokens
        let at_b = b * tp + t0;
        let (xd, xs) = (&acts.d[at_b..at_b + TOKENS], &acts.s[at_b..at_b + TOKENS]);
        let mut isum = [z; TOKENS];
        if bias != 0 {
            let xsums = &acts.xsums[at_b..at_b + TOKENS];
            for t in 0..TOKENS {
                isum[t] = _mm512_set1_epi32(-i32::from(bias) * xsums[t]);
            }
        }
        for k in 0..8 {
            for t in 0..TOKENS {
                // SAFETY: dword k of block b of token t0 + t (`qs` holds
                // `t_pad` tokens' blocks, caller; `Q8Block` is aligned).
                let xk = _mm512_set1_epi32(unsafe { x[t].add(8 * b + k).read() });
                isum[t] = _mm512_dpbusd_epi32(isum[t], w[k], xk);
            }
        }
        for t in 0..TOKENS {
            let dx = _mm512_set1_ps(xd[t]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, dx), acc[t]);
            if has_c::<B>() {
                acc[t] = _mm512_fmadd_ps(c, _mm512_set1_ps(xs[t]), acc[t]);
            }
        }
    }
    for (acc, out) in acc.into_iter().zip(out) {
        store_rows(acc, out);
    }
}
