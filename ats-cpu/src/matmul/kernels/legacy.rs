//! Kernels shared by the 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1,
//! Q8_0, IQ4_NL, MXFP4) against 8-bit activations.
//!
//! A weight block decodes to `w_k = d * q_k + c`: integer `q_k` (0..=31, or
//! signed for Q8_0 and the table formats IQ4_NL and MXFP4, whose nibbles
//! index a table of small integers) and a per-block constant `c` (`-8d`,
//! `-16d`, the min `m`, or none). `d` is an f16, or for MXFP4 a power of two
//! stored as its exponent. An activation block is `x_k = dx * qx_k` with
//! `s = dx * sum(qx)`, so `sum_k w_k x_k = d * dx * sum(q_k qx_k) + c * s`,
//! as ggml computes it.
//!
//! Every kernel here evaluates exactly, for each (row, token) and blocks in
//! order: `isum = sum(q_k qx_k)` (exact integer), then
//! `acc = fma(isum, d * dx, acc)` and `acc = fma(c, s, acc)` in f32. Only the
//! lanes differ (rows, tokens), so results are bit-identical across
//! instruction sets, tile shapes, batch sizes and threads.

use ats_core::quant::mxfp4::e8m0_to_f32_half;

use super::kquant::f16_at;
use crate::matmul::acts::{ActFormat, QuantActs};

/// The per-block constant `c` of a format.
pub(super) enum BlockC {
    /// None (Q8_0).
    None,
    /// `k * d` (Q4_0: -8, Q5_0: -16).
    Offset(f32),
    /// The f16 min stored after the scale (Q4_1, Q5_1).
    Min,
}

/// How a block stores its scale `d`, always at its first byte.
pub(super) enum BlockScale {
    /// An f16.
    F16,
    /// An E8M0 exponent `e` for `2^(e - 128)` (MXFP4, with doubled levels).
    E8m0Half,
}

/// How a block stores its 32 values, for the 512-bit one-token kernel
/// ([`super::legacy512`]).
pub(super) enum Values {
    /// 16 bytes of nibbles at byte `at` (values `0..16` in the low nibbles,
    /// `16..32` in the high ones), nibble `q` standing for `levels[q]`.
    Nibbles {
        /// Byte offset of the nibbles in the block.
        at: usize,
        /// The integer value of each nibble.
        levels: [i8; 16],
    },
    /// 32 signed bytes at byte `at`.
    Bytes {
        /// Byte offset of the values in the block.
        at: usize,
    },
}

/// The levels of plain unsigned nibbles (Q4_0, Q4_1).
pub(super) const UNSIGNED: [i8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

/// A 32-element block format; every block starts with its scale `d`.
pub(super) trait LegacyBlock {
    /// Bytes per block.
    const BYTES: usize;
    /// The activation format its kernels use.
    const ACTS: ActFormat;
    /// Whether the integer values are signed (Q8_0) rather than unsigned.
    const SIGNED: bool;
    /// The block constant.
    const C: BlockC;
    /// How the scale is stored.
    const SCALE: BlockScale = BlockScale::F16;
    /// How many `maddubs` results (pairs of products) may be summed in int16
    /// without overflow: 8 for 4-bit values (8 x 2 x 15 x 127 < 2^15), 4 for
    /// 5-bit, 1 for 8-bit.
    const I16_SUMS: usize;
    /// How the values are stored, for the formats the 512-bit one-token
    /// kernel [`super::legacy512`] runs.
    const VALUES: Option<Values> = None;

    /// The 32 integer values of `block`.
    fn values(block: &[u8]) -> [i32; 32];

    /// The 32 values of the block at `p` as bytes (unsigned, or signed if [`Self::SIGNED`]).
    ///
    /// # Safety
    /// The CPU must support AVX2/FMA/F16C and `p` must point to a whole block.
    #[cfg(target_arch = "x86_64")]
    unsafe fn unpack_avx2(p: *const u8) -> std::arch::x86_64::__m256i;
}

/// Whether blocks of `B` carry a constant.
pub(super) const fn has_c<B: LegacyBlock>() -> bool {
    !matches!(B::C, BlockC::None)
}

/// Scale `d` and constant `c` of `block`.
pub(super) fn scales<B: LegacyBlock>(block: &[u8]) -> (f32, f32) {
    let d = match B::SCALE {
        BlockScale::F16 => f16_at(block, 0),
        BlockScale::E8m0Half => e8m0_to_f32_half(block[0]),
    };
    let c = match B::C {
        BlockC::None => 0.0,
        BlockC::Offset(k) => k * d,
        BlockC::Min => f16_at(block, 2),
    };
    (d, c)
}

/// Portable dot product of one weight row with token `t`.
pub(super) fn dot_scalar<B: LegacyBlock>(row: &[u8], acts: &QuantActs, t: usize) -> f32 {
    let (tp, nb) = (acts.t_pad, acts.blocks);
    let xq = &acts.qs[t * nb..(t + 1) * nb];
    let mut acc = 0f32;
    for (b, (blk, xb)) in row.chunks_exact(B::BYTES).zip(xq).enumerate() {
        let (d, c) = scales::<B>(blk);
        let isum: i32 = B::values(blk)
            .iter()
            .zip(&xb.0)
            .map(|(&w, &x)| w * x as i32)
            .sum();
        acc = (isum as f32).mul_add(d * acts.d[b * tp + t], acc);
        if has_c::<B>() {
            acc = c.mul_add(acts.s[b * tp + t], acc);
        }
    }
    acc
}

#[cfg(target_arch = "x86_64")]
pub(super) use avx2::scales4 as scales4_avx2;
#[cfg(target_arch = "x86_64")]
pub(super) use avx2::{rows4 as rows4_avx2, tokens4 as tokens4_avx2, tokens8 as tokens8_avx2};

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{BlockC, BlockScale, LegacyBlock, e8m0_to_f32_half, has_c};
    use crate::matmul::acts::QuantActs;

    /// The f16 at byte `at` of each of 4 blocks, as 4 f32 lanes.
    ///
    /// # Safety
    /// Each `p[i] + at` must be valid for reading 2 bytes.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn f16x4(p: [*const u8; 4], at: usize) -> __m128 {
        // SAFETY: 2 readable bytes each (caller).
        let h = p.map(|p| unsafe { (p.add(at) as *const u16).read_unaligned() } as i32);
        // Built from zero: inserting into a live register would chain the
        // iterations of the caller's loop.
        let v = _mm_insert_epi16(_mm_setzero_si128(), h[0], 0);
        let v = _mm_insert_epi16(v, h[1], 1);
        let v = _mm_insert_epi16(v, h[2], 2);
        _mm_cvtph_ps(_mm_insert_epi16(v, h[3], 3))
    }

    /// Scales `d` and constants `c` of 4 blocks, as lanes.
    ///
    /// # Safety
    /// Each `p[i]` must point to a whole block.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::matmul::kernels) unsafe fn scales4<B: LegacyBlock>(
        p: [*const u8; 4],
    ) -> (__m128, __m128) {
        // SAFETY: blocks start with d, and with the min after it (caller).
        unsafe {
            let d = match B::SCALE {
                BlockScale::F16 => f16x4(p, 0),
                BlockScale::E8m0Half => {
                    let [a, b, c, e] = p.map(|p| e8m0_to_f32_half(p.read()));
                    _mm_setr_ps(a, b, c, e)
                }
            };
            let c = match B::C {
                BlockC::None => _mm_setzero_ps(),
                BlockC::Offset(k) => _mm_mul_ps(_mm_set1_ps(k), d),
                BlockC::Min => f16x4(p, 2),
            };
            (d, c)
        }
    }

    /// The four int32 lane sums of `p`, in order (exact, so in any order).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn reduce4(p: [__m256i; 4]) -> __m128i {
        let a = _mm256_hadd_epi32(p[0], p[1]);
        let b = _mm256_hadd_epi32(p[2], p[3]);
        let c = _mm256_hadd_epi32(a, b);
        _mm_add_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1))
    }

    /// Blocks per chunk of the one-token kernel: 4 rows x 32 blocks of int32
    /// sums (4 KiB) stay in L1 between its two passes.
    const CHUNK: usize = 32;

    /// Dot products of 4 weight rows with token `t` (lanes = rows): the
    /// one-token (decode) kernel, memory-bound. It reads each row linearly
    /// through a chunk of blocks (4 interleaved row streams measured ~25%
    /// slower from DRAM here), parking the integer block sums, then reduces
    /// them across the rows and runs the 4 FMA chains. It also prefetches
    /// `prefetch` bytes ahead (0: none).
    ///
    /// # Safety
    /// The CPU must support AVX2/FMA/F16C; each `rows[i]` must point to
    /// `acts.blocks` whole blocks; `t < acts.t_pad`.
    // `k` indexes the 4 rows' sums and the block offsets at once.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::matmul::kernels) unsafe fn rows4<B: LegacyBlock>(
        rows: [*const u8; 4],
        acts: &QuantActs,
        t: usize,
        prefetch: usize,
        out: &mut [[f32; 4]; 1],
    ) {
        let (nb, tp) = (acts.blocks, acts.t_pad);
        debug_assert!(t < tp && acts.qs.len() == tp * nb);
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm_setzero_ps();
        let xq = acts.qs[t * nb..(t + 1) * nb].as_ptr() as *const __m256i;
        // Left uninitialised: zeroing 4 KiB per call cost more than the
        // dot products of small rows. Entry k of a chunk is written before it is read.
        let mut p = [[std::mem::MaybeUninit::<__m256i>::uninit(); CHUNK]; 4];
        for c0 in (0..nb).step_by(CHUNK) {
            let cn = CHUNK.min(nb - c0);
            for (i, p) in p.iter_mut().enumerate() {
                for (k, p) in p[..cn].iter_mut().enumerate() {
                    let b = c0 + k;
                    // SAFETY: block `b` of row `i` lies inside the row (caller).
                    let blk = unsafe { rows[i].add(b * B::BYTES) };
                    if prefetch != 0 {
                        // A hint only: the address may lie past the matrix (never read).
                        _mm_prefetch::<_MM_HINT_T0>(blk.wrapping_add(prefetch) as *const i8);
                    }
                    // SAFETY: a whole block; b < nb blocks of this token
                    // (`Q8Block` is 32-byte aligned); CPU features enabled here.
                    let (w, x) = unsafe { (B::unpack_avx2(blk), _mm256_load_si256(xq.add(b))) };
                    let (wa, xs) = if B::SIGNED {
                        (_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
                    } else {
                        (w, x)
                    };
                    p.write(_mm256_madd_epi16(_mm256_maddubs_epi16(wa, xs), ones));
                }
            }
            for k in 0..cn {
                let b = c0 + k;
                let blk: [*const u8; 4] = std::array::from_fn(|i| {
                    // SAFETY: block `b` of row `i` lies inside the row (caller).
                    unsafe { rows[i].add(b * B::BYTES) }
                });
                // SAFETY: whole blocks (caller).
                let (d, c) = unsafe { scales4::<B>(blk) };
                // SAFETY: entries 0..cn of each row were written in the loop above.
                let sums = unsafe {
                    [
                        p[0][k].assume_init(),
                        p[1][k].assume_init(),
                        p[2][k].assume_init(),
                        p[3][k].assume_init(),
                    ]
                };
                let isum = _mm_cvtepi32_ps(reduce4(sums));
                let scale = _mm_mul_ps(d, _mm_set1_ps(acts.d[b * tp + t]));
                acc = _mm_fmadd_ps(isum, scale, acc);
                if has_c::<B>() {
                    acc = _mm_fmadd_ps(c, _mm_set1_ps(acts.s[b * tp + t]), acc);
                }
            }
        }
        // SAFETY: `out` holds 4 floats.
        unsafe { _mm_storeu_ps(out[0].as_mut_ptr(), acc) };
    }

    /// Dot products of `MR` weight rows with tokens `t0..t0 + 8` (lanes =
    /// tokens), from the token-interleaved activations: each 4-byte group
    /// of a weight block is broadcast against the same group of 8 tokens.
    /// It prefetches `prefetch` bytes ahead in each row (0: none): a round
    /// of a few decode tokens reads its weights once, from DRAM.
    ///
    /// # Safety
    /// The CPU must support AVX2/FMA/F16C; each `rows[i]` must point to
    /// `acts.blocks` whole blocks; `t0` is a multiple of 8 with
    /// `t0 + 8 <= acts.t_pad`, and `acts.qs8` is built.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::matmul::kernels) unsafe fn tokens8<B: LegacyBlock, const MR: usize>(
        rows: [*const u8; MR],
        acts: &QuantActs,
        t0: usize,
        prefetch: usize,
        out: &mut [[f32; MR]; 8],
    ) {
        // SAFETY: the caller's contract; the features are enabled here.
        unsafe { tokens8_body::<B, MR>(rows, acts, t0, prefetch, out) }
    }

    /// Where weights `4u..4u + 4` of a row pair sit in the pair-interleaved
    /// buffer of [`tokens4`] (in u64s): `unpacklo/hi_epi32` interleave
    /// within 128-bit halves, so the lo store holds u = 0, 1, 4, 5 and the
    /// hi store u = 2, 3, 6, 7.
    const PAIR_AT: [usize; 8] = [0, 1, 4, 5, 2, 3, 6, 7];

    /// Dot products of 4 weight rows with tokens `t0..t0 + 4`: the narrow
    /// tile of a round of 2-4 decode tokens, where the 8-token tile would
    /// spend half its lanes on padding. Lanes are (row pair x token): one
    /// 64-bit broadcast puts 4 weights of rows `2p` and `2p + 1` against the
    /// pair-duplicated activations of [`QuantActs::interleave4_pairs`], so a
    /// `maddubs` does useful work in all 8 lanes.
    ///
    /// # Safety
    /// The CPU must support AVX2/FMA/F16C; each `rows[i]` must point to
    /// `acts.blocks` whole blocks; `acts.qs4` is built for `t0`.
    // `v` and `p` index several arrays and pointer offsets at once.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::matmul::kernels) unsafe fn tokens4<B: LegacyBlock>(
        rows: [*const u8; 4],
        acts: &QuantActs,
        t0: usize,
        prefetch: usize,
        out: &mut [[f32; 4]; 4],
    ) {
        let (nb, tp) = (acts.blocks, acts.t_pad);
        debug_assert!(acts.quad_t0 == t0 && t0 + 4 <= tp && acts.qs4.len() == 8 * nb);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); 2];
        let x4 = acts.qs4.as_ptr() as *const __m256i;
        // Lane 2k and 2k + 1 both read token k's scale.
        let dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
        for b in 0..nb {
            // SAFETY: block `b` of row `i` lies inside the row (caller).
            let blk: [*const u8; 4] = std::array::from_fn(|i| unsafe { rows[i].add(b * B::BYTES) });
            if prefetch != 0 {
                for p in blk {
                    // A hint only: the address may lie past the matrix (never read).
                    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(prefetch) as *const i8);
                }
            }
            // Rows 2p and 2p + 1 interleaved 4 bytes at a time, through
            // memory so that each broadcast is a load (as in `tokens8_body`).
            let mut wm = [[0u64; 8]; 2];
            for (p, wm) in wm.iter_mut().enumerate() {
                // SAFETY: whole blocks (caller); two 32-byte stores into 8 u64.
                unsafe {
                    let (a, c) = (B::unpack_avx2(blk[2 * p]), B::unpack_avx2(blk[2 * p + 1]));
                    let dst = wm.as_mut_ptr() as *mut __m256i;
                    _mm256_storeu_si256(dst, _mm256_unpacklo_epi32(a, c));
                    _mm256_storeu_si256(dst.add(1), _mm256_unpackhi_epi32(a, c));
                }
            }
            let wm = std::hint::black_box(&wm);
            let mut isum = [_mm256_setzero_si256(); 2];
            let mut s16 = [_mm256_setzero_si256(); 2];
            for v in 0..8 {
                // SAFETY: vector v of block b of the quad; aligned.
                let x = unsafe { _mm256_load_si256(x4.add(8 * b + v)) };
                for p in 0..2 {
                    let bw = _mm256_set1_epi64x(wm[p][PAIR_AT[v]] as i64);
                    let (u, s) = if B::SIGNED {
                        (_mm256_sign_epi8(bw, bw), _mm256_sign_epi8(x, bw))
                    } else {
                        (bw, x)
                    };
                    s16[p] = _mm256_add_epi16(s16[p], _mm256_maddubs_epi16(u, s));
                }
                if (v + 1) % B::I16_SUMS == 0 {
                    for p in 0..2 {
                        isum[p] = _mm256_add_epi32(isum[p], _mm256_madd_epi16(s16[p], ones));
                        s16[p] = _mm256_setzero_si256();
                    }
                }
            }
            // SAFETY: 4 floats each of block b's scales and sums.
            let (xd, xs) = unsafe {
                (
                    _mm_loadu_ps(acts.d[b * tp + t0..][..4].as_ptr()),
                    _mm_loadu_ps(acts.s[b * tp + t0..][..4].as_ptr()),
                )
            };
            let xd = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(xd), dup);
            let xs = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(xs), dup);
            // SAFETY: whole blocks (caller).
            let (dv, cv) = unsafe { scales4::<B>(blk) };
            let (mut ds, mut cs) = ([0f64; 2], [0f64; 2]);
            // SAFETY: 4 floats into each 16-byte array.
            unsafe {
                _mm_storeu_ps(ds.as_mut_ptr() as *mut f32, dv);
                _mm_storeu_ps(cs.as_mut_ptr() as *mut f32, cv);
            }
            for p in 0..2 {
                // Scales of rows 2p, 2p + 1 alternating, as the lanes.
                let d = _mm256_castpd_ps(_mm256_set1_pd(ds[p]));
                let f = _mm256_cvtepi32_ps(isum[p]);
                acc[p] = _mm256_fmadd_ps(f, _mm256_mul_ps(d, xd), acc[p]);
                if has_c::<B>() {
                    let c = _mm256_castpd_ps(_mm256_set1_pd(cs[p]));
                    acc[p] = _mm256_fmadd_ps(c, xs, acc[p]);
                }
            }
        }
        crate::matmul::kernels::simd::store_pairs4(acc, out);
    }

    /// The body of [`tokens8`], inlined into it.
    ///
    /// # Safety
    /// As [`tokens8`].
    // `v` and `i` index several arrays and pointer offsets at once.
    #[allow(clippy::needless_range_loop)]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tokens8_body<B: LegacyBlock, const MR: usize>(
        rows: [*const u8; MR],
        acts: &QuantActs,
        t0: usize,
        prefetch: usize,
        out: &mut [[f32; MR]; 8],
    ) {
        let (nb, tp) = (acts.blocks, acts.t_pad);
        debug_assert!(t0.is_multiple_of(8) && t0 + 8 <= tp && acts.qs8.len() == tp * nb);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); MR];
        let x8 = acts.qs8[t0 * nb..(t0 + 8) * nb].as_ptr() as *const __m256i;
        for b in 0..nb {
            let blk: [*const u8; MR] = std::array::from_fn(|i| {
                // SAFETY: block `b` of row `i` lies inside the row (caller).
                unsafe { rows[i].add(b * B::BYTES) }
            });
            if prefetch != 0 {
                for p in blk {
                    // A hint only: the address may lie past the matrix (never read).
                    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(prefetch) as *const i8);
                }
            }
            // SAFETY: whole blocks (caller); the CPU features are enabled here.
            // The unpacked weights go through memory, to be broadcast 4 bytes at
            // a time by the load unit. `black_box` keeps LLVM from turning the
            // broadcasts back into register shuffles (2 ALU ops each, and
            // about 1.4x slower here); it only affects code generation.
            let mut wm = [[0u32; 8]; MR];
            for (i, wm) in wm.iter_mut().enumerate() {
                // SAFETY: a whole block (caller); the CPU features are enabled here.
                let w = unsafe { B::unpack_avx2(blk[i]) };
                // SAFETY: a 32-byte store into 8 u32.
                unsafe { _mm256_storeu_si256(wm.as_mut_ptr() as *mut __m256i, w) };
            }
            let wm = std::hint::black_box(&wm);
            let mut isum = [_mm256_setzero_si256(); MR];
            let mut s16 = [_mm256_setzero_si256(); MR];
            for v in 0..8 {
                // SAFETY: vector v of block b of this token group; aligned.
                let x = unsafe { _mm256_load_si256(x8.add(8 * b + v)) };
                for i in 0..MR {
                    // Weights 4v..4v + 4 of row i, against the same 4 values of 8 tokens.
                    let bw = _mm256_set1_epi32(wm[i][v] as i32);
                    // u8 x i8 products: signed weights carry their sign over to x
                    let (u, s) = if B::SIGNED {
                        (_mm256_sign_epi8(bw, bw), _mm256_sign_epi8(x, bw))
                    } else {
                        (bw, x)
                    };
                    s16[i] = _mm256_add_epi16(s16[i], _mm256_maddubs_epi16(u, s));
                }
                if (v + 1) % B::I16_SUMS == 0 {
                    for i in 0..MR {
                        isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(s16[i], ones));
                        s16[i] = _mm256_setzero_si256();
                    }
                }
            }
            // Scales 4 rows at a time (the last group repeats its last row).
            let (xd, xs) = (&acts.d[b * tp + t0..][..8], &acts.s[b * tp + t0..][..8]);
            // SAFETY: two slices of 8 floats.
            let (xd, xs) = unsafe { (_mm256_loadu_ps(xd.as_ptr()), _mm256_loadu_ps(xs.as_ptr())) };
            for i0 in (0..MR).step_by(4) {
                let p = std::array::from_fn(|k| blk[(i0 + k).min(MR - 1)]);
                // SAFETY: whole blocks (caller).
                let (dv, cv) = unsafe { scales4::<B>(p) };
                for k in 0..4.min(MR - i0) {
                    let lane = _mm256_set1_epi32(k as i32);
                    let d = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(dv), lane);
                    let i = i0 + k;
                    let f = _mm256_cvtepi32_ps(isum[i]);
                    acc[i] = _mm256_fmadd_ps(f, _mm256_mul_ps(d, xd), acc[i]);
                    if has_c::<B>() {
                        let c = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(cv), lane);
                        acc[i] = _mm256_fmadd_ps(c, xs, acc[i]);
                    }
                }
            }
        }
        crate::matmul::kernels::simd::store_tokens8(acc, out);
    }
}
