//! IQ4_XS's kernels on AVX-512 VNNI: the one-token (decode) kernel, 16
//! rows at once, as [`super::legacy512`] does for IQ4_NL, a super-block's 8
//! sub-blocks in turn; and the prompt tiles, as [`super::legacy_tiles`]
//! does for IQ4_NL, with each sub-block's scale.
//!
//! Each sub-block is an IQ4_NL block without its own scale: its 16 rows'
//! sums come from [`super::legacy512::quad_sums`] and [`super::legacy512::reduce`] (the
//! levels biased by 128, each row's sums starting from minus the bias's
//! share, from the Q8_K block sums), are multiplied by the rows' 6-bit
//! scales less 32, and summed. Every row's integer is the one the other
//! paths compute (at most 8 x 32 x 32 x 127 x 127 < 2^31), and so are its
//! single FMA per super-block and the results.

use std::arch::x86_64::*;

use ats_core::quant::iq4_nl::KVALUES;
use ats_core::quant::iq4_xs::unpack_scales;

use super::kquant::f16_at;
use super::legacy::Values;
use super::legacy512::{
    ROWS, f16_lanes, head_offsets, heads16, prefetch_ahead, quad_rows, quad_sums, reduce,
    store_rows, unsigned_levels,
};
use super::prompt_tiles::{dot_step, store_tokens, token_vectors};
use super::simd::table_nibbles;
use crate::matmul::acts::QuantActs;

/// Bytes per super-block: d (f16), the scales' high bits (u16), their low
/// nibbles (4 bytes), 128 bytes of nibbles.
const BYTES: usize = 136;

/// The layout of a sub-block's values.
const NIBBLES: Values = Values::Nibbles {
    at: 0,
    levels: KVALUES,
};

/// A sub-block's scales less 32 in the 16 lanes: its low nibble at bit
/// `LO` of `lo` (the rows' 4 low-nibble bytes), its high pair at bit `HI`
/// of `hi` (the rows' u16 of high bits).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
fn scales<const LO: u32, const HI: u32>(lo: __m512i, hi: __m512i) -> __m512i {
    let low = _mm512_and_si512(_mm512_srli_epi32::<LO>(lo), _mm512_set1_epi32(0x0f));
    let high = _mm512_and_si512(_mm512_srli_epi32::<HI>(hi), _mm512_set1_epi32(3));
    let ls = _mm512_or_si512(low, _mm512_slli_epi32::<4>(high));
    _mm512_sub_epi32(ls, _mm512_set1_epi32(32))
}

/// Dot products of 16 evenly spaced IQ4_XS rows with token `t`, into
/// `out[0]`: the one-token kernel.
///
/// # Safety
/// The CPU must support AVX2/FMA/F16C and AVX-512 F/BW/VL/VNNI; row `r`
/// (`0..16`) at `first + r * stride` holds `acts.blocks` whole super-blocks,
/// with `16 * stride` below 2^31; `t < acts.n_tokens`; `acts` holds Q8_K
/// values.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn rows16_vnni(
    first: *const u8,
    stride: usize,
    acts: &QuantActs,
    t: usize,
    out: &mut [[f32; ROWS]; 1],
) {
    let (nb, tp) = (acts.blocks, acts.t_pad);
    debug_assert!(t < acts.n_tokens && acts.qs.len() == tp * nb * 8);
    let (levels, bias) = const { unsigned_levels(&Some(NIBBLES)) };
    // SAFETY: `levels` is 16 bytes.
    let table =
        _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(levels.as_ptr() as *const __m128i) });
    let quarter = -i32::from(bias / 4);
    let idx = head_offsets(stride);
    let xq = acts.qs[t * nb * 8..(t + 1) * nb * 8].as_ptr();
    let bsums = &acts.bsums[t * nb..(t + 1) * nb];
    let mut acc = _mm512_setzero_ps();
    for (b, bs) in bsums.iter().enumerate() {
        let off = b * BYTES;
        // SAFETY: the first 8 bytes of super-block b of each row (caller).
        let (h0, h1) = unsafe {
            (
                heads16(first.wrapping_add(off), idx),
                heads16(first.wrapping_add(off + 4), idx),
            )
        };
        let hi = _mm512_srli_epi32::<16>(h0);
        let mut isum = _mm512_setzero_si512();
        for j in 0..8 {
            // SAFETY: Q8_K block b of the token holds 8 aligned Q8Blocks.
            let x = unsafe {
                let x = xq.add(8 * b + j) as *const __m128i;
                [
                    _mm512_broadcast_i32x4(_mm_load_si128(x)),
                    _mm512_broadcast_i32x4(_mm_load_si128(x.add(1))),
                ]
            };
            let xsum = i32::from(bs[2 * j]) + i32::from(bs[2 * j + 1]);
            let init = _mm512_set1_epi32(quarter * xsum);
            let mut quads = [_mm512_setzero_si512(); 4];
            for (g, quad) in quads.iter_mut().enumerate() {
                let q = first.wrapping_add(4 * g * stride + off + 8 + 16 * j);
                let p = quad_rows(q, stride);
                // SAFETY: 16 nibble bytes of sub-block j at each p[k]
                // (caller); features enabled here.
                *quad = unsafe { quad_sums(&NIBBLES, p, table, x, init) };
            }
            let sc = match j {
                0 => scales::<0, 0>(h1, hi),
                1 => scales::<4, 2>(h1, hi),
                2 => scales::<8, 4>(h1, hi),
                3 => scales::<12, 6>(h1, hi),
                4 => scales::<16, 8>(h1, hi),
                5 => scales::<20, 10>(h1, hi),
                6 => scales::<24, 12>(h1, hi),
                _ => scales::<28, 14>(h1, hi),
            };
            isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(reduce(quads), sc));
        }
        prefetch_ahead::<false>(first.wrapping_add(ROWS * off), ROWS * BYTES);
        let dx = _mm512_set1_ps(acts.d[b * tp + t]);
        let d = f16_lanes::<0>(h0);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, dx), acc);
    }
    store_rows(acc, &mut out[0]);
}

/// Dot products of `MR` IQ4_XS rows with tokens `t0..t0 + 16 * NT`, token
/// `t0 + n`'s into `out[n]`: per sub-block, its levels biased by 128 meet
/// the tokens' values in the lanes of 512-bit registers, the bias's share
/// (`128 x` the group sums) comes off, and the sum is scaled by `ls - 32`;
/// the super-block's integer is that of the other paths, and so is its
/// single FMA.
///
/// # Safety
/// The CPU must support AVX2/FMA/F16C and AVX-512 F/BW/VL/VNNI; each
/// `rows[i]` holds `acts.blocks` whole super-blocks; `out` holds `16 * NT`
/// tokens; `t0` is a multiple of 16 with `t0 + 16 * NT <= acts.t_pad`;
/// `acts` holds Q8_K values with `qs16` and `xsums` built.
// `v`, `k` and `i` index several arrays at once.
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
    debug_assert!(acts.xsums.len() == tp * qb);
    let x16 = token_vectors(acts, t0);
    // the next 16 tokens' vectors
    let next = qb * 8;
    let mut acc = [[_mm512_setzero_ps(); MR]; NT];
    for b in 0..nb {
        // Loops, not closures: closures are not inlined into kernels here.
        let mut blk = [std::ptr::null::<u8>(); MR];
        let mut ls = [[0u8; 8]; MR];
        for i in 0..MR {
            blk[i] = rows[i].wrapping_add(b * BYTES);
            // SAFETY: super-block b of each row is whole (caller).
            ls[i] = unpack_scales(unsafe { std::slice::from_raw_parts(blk[i], BYTES) });
        }
        let mut isum = [[_mm512_setzero_si512(); MR]; NT];
        for j in 0..8 {
            let g = 8 * b + j;
            // Through memory, to be broadcast by the load unit (as in the
            // block formats' tiles).
            let mut wm = [[0u32; 8]; MR];
            for (i, wm) in wm.iter_mut().enumerate() {
                // SAFETY: sub-block j's 16 nibble bytes (caller); a 32-byte
                // store into 8 u32.
                unsafe {
                    let w = table_nibbles(blk[i].add(8 + 16 * j), &KVALUES);
                    let w = _mm256_xor_si256(w, _mm256_set1_epi8(-128));
                    _mm256_storeu_si256(wm.as_mut_ptr() as *mut __m256i, w);
                }
            }
            let wm = std::hint::black_box(&wm);
            let mut s = [[_mm512_setzero_si512(); MR]; NT];
            for v in 0..8 {
                // SAFETY: vector v of the group of each token group; the
                // features are enabled here.
                unsafe { dot_step(&mut s, wm, v, x16, 8 * g + v, next) };
            }
            for k in 0..NT {
                let t = t0 + 16 * k;
                // SAFETY: 16 ints of group g's sums (`xsums` built, caller).
                let xs = unsafe {
                    _mm512_loadu_si512(acts.xsums[g * tp + t..][..16].as_ptr() as *const _)
                };
                let xs = _mm512_slli_epi32::<7>(xs);
                for i in 0..MR {
                    let sc = _mm512_set1_epi32(i32::from(ls[i][j]) - 32);
                    let d = _mm512_sub_epi32(s[k][i], xs);
                    isum[k][i] = _mm512_add_epi32(isum[k][i], _mm512_mullo_epi32(d, sc));
                }
            }
        }
        for k in 0..NT {
            // SAFETY: 16 floats of block b's token scales.
            let xd = unsafe { _mm512_loadu_ps(acts.d[b * tp + t0 + 16 * k..][..16].as_ptr()) };
            for i in 0..MR {
                // SAFETY: the super-block's first two bytes (caller).
                let d = f16_at(unsafe { std::slice::from_raw_parts(blk[i], 2) }, 0);
                let dd = _mm512_mul_ps(_mm512_set1_ps(d), xd);
                acc[k][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[k][i]), dd, acc[k][i]);
            }
        }
    }
    store_tokens(&acc, out);
}
