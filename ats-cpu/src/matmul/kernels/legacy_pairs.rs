//! The 8-token tile of the 32-element block formats on AVX-512 VNNI where
//! [`super::legacy_rows16`] cannot run (Q5_0 and Q5_1, which have no value
//! layout; rows of which 16 pass 2^31 bytes), for rounds of 3 to 15 tokens
//! (a few sequences decoding together): each
//! 512-bit register holds 2 rows x 8 tokens, (row pair, token) per lane.
//! One 64-bit broadcast of two rows' 4 weights meets the 8 tokens' same 4
//! values, each twice ([`QuantActs::qs8p`]), so a `vpdpbusd` serves 64
//! products where [`super::legacy`]'s 256-bit 8-token tile serves 32 with
//! the same unpacking, broadcasting and scaling around it.
//!
//! The arithmetic per (row, token) is the other tiles': the exact integer
//! sum of the block (signed values biased by 128, `128 x sum(x)` taken off
//! again), then `acc = fma(isum, d * dx, acc)` and `acc = fma(c, s, acc)`,
//! so the results are the same bits.

use std::arch::x86_64::*;

use super::legacy::{LegacyBlock, has_c, scales4_avx2 as scales4};
use crate::matmul::acts::QuantActs;

/// Where weights `4u..4u + 4` of a row pair sit in the pair-interleaved
/// buffer (in u64s): `unpacklo/hi_epi32` interleave within 128-bit halves,
/// so the lo store holds u = 0, 1, 4, 5 and the hi store u = 2, 3, 6, 7.
const PAIR_AT: [usize; 8] = [0, 1, 4, 5, 2, 3, 6, 7];

/// Lanes `2t, 2t + 1` from lane `t` of 8: a token's value for both rows.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
fn dup_ps(v: __m256) -> __m512 {
    let idx = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(v))
}

/// Dot products of `MR` weight rows (`MR` even) with tokens `t0..t0 + 8`,
/// token `t0 + n`'s into `out[n]`, prefetching `prefetch` bytes ahead in
/// each row (0: none).
///
/// # Safety
/// The CPU must support AVX2/FMA/F16C and AVX-512 F/BW/VL/VNNI; each
/// `rows[i]` points to `acts.blocks` whole blocks; `t0` is a multiple of 8
/// with `t0 + 8 <= acts.t_pad`; `acts.qs8p` is built, and for signed
/// formats `acts.xsums`.
// `v`, `p` and `i` index several arrays at once.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn tokens8_vnni<B: LegacyBlock, const MR: usize>(
    rows: [*const u8; MR],
    acts: &QuantActs,
    t0: usize,
    prefetch: usize,
    out: &mut [[f32; MR]; 8],
) {
    const { assert!(MR.is_multiple_of(2) && MR <= 8) };
    let (nb, tp) = (acts.blocks, acts.t_pad);
    debug_assert!(t0.is_multiple_of(8) && t0 + 8 <= tp);
    debug_assert!(acts.qs8p.len() == tp / 8 * acts.qblocks * 8);
    debug_assert!(!B::SIGNED || acts.xsums.len() == tp * nb);
    let x8 = acts.qs8p[t0 / 8 * acts.qblocks * 8..].as_ptr() as *const __m512i;
    let pairs = MR / 2;
    let mut acc = [_mm512_setzero_ps(); 4];
    for b in 0..nb {
        // A loop, not a closure: closures are not inlined into kernels here.
        let mut blk = [std::ptr::null::<u8>(); MR];
        for i in 0..MR {
            blk[i] = rows[i].wrapping_add(b * B::BYTES);
            if prefetch != 0 {
                // A hint only: the address may lie past the matrix (never read).
                _mm_prefetch::<_MM_HINT_T0>(blk[i].wrapping_add(prefetch) as *const i8);
            }
        }
        // Rows 2p and 2p + 1 interleaved 4 bytes at a time, through memory
        // so that each broadcast is a load (`black_box` keeps LLVM from
        // turning the broadcasts into shuffles).
        let mut wm = [[0u64; 8]; 4];
        for p in 0..pairs {
            // SAFETY: whole blocks (caller); the features are enabled here;
            // two 32-byte stores into 8 u64.
            unsafe {
                let (mut a, mut c) = (B::unpack_avx2(blk[2 * p]), B::unpack_avx2(blk[2 * p + 1]));
                if B::SIGNED {
                    // biased to unsigned bytes, for `vpdpbusd`
                    a = _mm256_xor_si256(a, _mm256_set1_epi8(-128));
                    c = _mm256_xor_si256(c, _mm256_set1_epi8(-128));
                }
                let dst = wm[p].as_mut_ptr() as *mut __m256i;
                _mm256_storeu_si256(dst, _mm256_unpacklo_epi32(a, c));
                _mm256_storeu_si256(dst.add(1), _mm256_unpackhi_epi32(a, c));
            }
        }
        let wm = std::hint::black_box(&wm);
        // two chains per pair (even and odd v)
        let mut chains = [[_mm512_setzero_si512(); 2]; 4];
        for v in 0..8 {
            // SAFETY: vector v of block b of the token group; aligned.
            let x = unsafe { _mm512_load_si512(x8.add(8 * b + v) as *const _) };
            for p in 0..pairs {
                let w = _mm512_set1_epi64(wm[p][PAIR_AT[v]] as i64);
                chains[p][v % 2] = _mm512_dpbusd_epi32(chains[p][v % 2], w, x);
            }
        }
        // SAFETY: 8 floats each of block b's token scales and sums.
        let (xd, xs) = unsafe {
            (
                dup_ps(_mm256_loadu_ps(acts.d[b * tp + t0..][..8].as_ptr())),
                dup_ps(_mm256_loadu_ps(acts.s[b * tp + t0..][..8].as_ptr())),
            )
        };
        let bias = if B::SIGNED {
            // the bias's share, 128 x sum(x) per token
            // SAFETY: 8 ints of block b's sums (`xsums` built, caller).
            let xs8 =
                unsafe { _mm256_loadu_ps(acts.xsums[b * tp + t0..][..8].as_ptr() as *const f32) };
            _mm512_slli_epi32::<7>(_mm512_castps_si512(dup_ps(xs8)))
        } else {
            _mm512_setzero_si512()
        };
        // Scales 4 rows at a time (the last group repeats its last row).
        let mut dv = [_mm_setzero_ps(); 2];
        let mut cv = [_mm_setzero_ps(); 2];
        for q in 0..MR.div_ceil(4) {
            let mut p4 = [blk[0]; 4];
            for k in 0..4 {
                p4[k] = blk[(4 * q + k).min(MR - 1)];
            }
            // SAFETY: whole blocks (caller).
            (dv[q], cv[q]) = unsafe { scales4::<B>(p4) };
        }
        for p in 0..pairs {
            let sum = _mm512_add_epi32(chains[p][0], chains[p][1]);
            let isum = _mm512_sub_epi32(sum, bias);
            // rows 2p and 2p + 1's scales in alternate lanes
            let (q, at) = (p / 2, 2 * (p % 2) as i32);
            let idx = _mm512_set1_epi64(i64::from(at + 1) << 32 | i64::from(at));
            let d = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(dv[q]));
            let f = _mm512_cvtepi32_ps(isum);
            acc[p] = _mm512_fmadd_ps(f, _mm512_mul_ps(d, xd), acc[p]);
            if has_c::<B>() {
                let c = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(cv[q]));
                acc[p] = _mm512_fmadd_ps(c, xs, acc[p]);
            }
        }
    }
    // lane 2t + r of pair p: token t, row 2p + r
    for p in 0..pairs {
        let mut v = [0f32; 16];
        // SAFETY: 16 floats.
        unsafe { _mm512_storeu_ps(v.as_mut_ptr(), acc[p]) };
        for t in 0..8 {
            out[t][2 * p] = v[2 * t];
            out[t][2 * p + 1] = v[2 * t + 1];
        }
    }
}
