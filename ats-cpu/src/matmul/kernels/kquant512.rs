//! The K-quant row kernels on 512-bit registers (AVX-512 F/BW): Q4_K, Q5_K
//! and Q6_K rows meet up to 8 tokens a super-block at a time.
//!
//! They compute the AVX2 row kernels' integers ([`super::q4_k::k4_dots_avx2`],
//! Q6_K's `dots_avx2`) in fewer instructions. A block's values are decoded
//! once for all tokens and regrouped into four registers whose 8-byte chunk
//! `s` is sub-block `s`, like the activations ([`QuantActs::qsp`], built once
//! per product): every 16-bit lane of a `maddubs` then stays in one
//! sub-block, so four (Q6_K: two) products are summed in 16 bits and scaled
//! by one `madd`, as llama.cpp's repacked tiles do, without repacking the
//! weights. The integer sums are exact and meet the same f32 sequence
//! ([`TokenAccsAvx2`]), so the results are bit-identical to every other
//! path's. A whole tile of 8 tokens keeps them in lanes: its mins come from
//! the token-interleaved block sums and its 8 integer sums reduce together.
//!
//! On the Xeon these were written on (`examples/isa_pair.rs`, one thread,
//! weights in L2) they take 20% less time than AVX2 for Q4_K rounds of 4
//! tokens and 31% for 8-16 (3% more for one), 12% (one token) to 44%
//! (eight) less for Q6_K, 43% for Q5_K at 8. Q4_K's VNNI variant takes a
//! further 8% off at 8 tokens on a Zen 4 (212 -> 194 us).

use std::arch::x86_64::*;

use super::kquant::{
    TokenAccsAvx2, k4_min_sums_avx2, k4_scale_words, min_sums_avx2, prefetch_block_avx2,
};
use crate::matmul::acts::QuantActs;

/// A 512-bit register whose 16-bit lanes are `a` in the low half and `b` in
/// the high one.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
fn halves_epi16(a: i16, b: i16) -> __m512i {
    _mm512_inserti64x4::<1>(
        _mm512_castsi256_si512(_mm256_set1_epi16(a)),
        _mm256_set1_epi16(b),
    )
}

/// The sum of the two 256-bit halves (exact: int32 lanes of block sums).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
fn fold(v: __m512i) -> __m256i {
    _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v))
}

/// Token `n`'s sum of the 16 int32 lanes of `v[n]`, in lane `n`: pairs,
/// then quads, then 128-bit lanes are added (exact).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) fn token_sums8(v: &[__m512i; 8]) -> __m256i {
    // per 128-bit lane: [a0 + a2, b0 + b2, a1 + a3, b1 + b3]
    let pair = |a, b| _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    // per 128-bit lane: the four tokens' partial sums in order
    let quad = |p, q| _mm512_add_epi32(_mm512_unpacklo_epi64(p, q), _mm512_unpackhi_epi64(p, q));
    let c0 = quad(pair(v[0], v[1]), pair(v[2], v[3]));
    let c4 = quad(pair(v[4], v[5]), pair(v[6], v[7]));
    // [c0 lanes 0 + 1, c0 2 + 3, c4 0 + 1, c4 2 + 3], then the halves of each
    let z = _mm512_add_epi32(
        _mm512_shuffle_i64x2::<0x88>(c0, c4),
        _mm512_shuffle_i64x2::<0xdd>(c0, c4),
    );
    let w = _mm512_add_epi32(z, _mm512_shuffle_i64x2::<0xb1>(z, z));
    _mm512_castsi512_si256(_mm512_shuffle_i64x2::<0x08>(w, w))
}

/// The min sums of 8 tokens `t0..t0 + 8` (a multiple of 8) for super-block
/// `b`, token `n` in lane `n`, from the token-interleaved block sums:
/// `pair_mins(p)` holds, as 16-bit lanes, the mins of groups `2p, 2p + 1`
/// repeated in its low half and of `2p + 2, 2p + 3` in its high half.
///
/// # Safety
/// `acts.bsums8` must be built.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
unsafe fn min_sums8(
    pair_mins: impl Fn(usize) -> __m512i,
    acts: &QuantActs,
    b: usize,
    t0: usize,
) -> __m256i {
    let at = ((t0 / 8) * acts.blocks + b) * 8;
    debug_assert!(at + 8 <= acts.bsums8.len());
    let mut sum = _mm512_setzero_si512();
    for p in (0..8).step_by(2) {
        // SAFETY: vectors p, p + 1 (64 bytes) of the block's 8 (caller).
        let s = unsafe { _mm512_loadu_si512(acts.bsums8.as_ptr().add(at + p) as *const __m512i) };
        sum = _mm512_add_epi32(sum, _mm512_madd_epi16(s, pair_mins(p)));
    }
    fold(sum)
}

/// Whether a row kernel for `N` tokens from `t0` can keep tokens in lanes:
/// a whole tile of 8 with the interleaved block sums built.
#[inline]
fn lanes8(acts: &QuantActs, n: usize, t0: usize) -> bool {
    let built = !acts.bsums8.is_empty() && acts.bsums8.len() == acts.bsums.len();
    n == 8 && t0.is_multiple_of(8) && built
}

/// Token `t0 + n`'s activation scale of super-block `b` in lane `n`.
///
/// # Safety
/// `t0 + 8 <= acts.t_pad`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
unsafe fn scales8(acts: &QuantActs, b: usize, t0: usize) -> __m256 {
    // SAFETY: 8 floats of block b's scales (caller).
    unsafe { _mm256_loadu_ps(acts.d.as_ptr().add(b * acts.t_pad + t0)) }
}

/// Four registers of a super-block's values in the regrouped order of
/// [`QuantActs::qsp`] (register `j`, 8-byte chunk `s`: sub-block `s`'s
/// values `8j..8j + 8`), from the four registers `a`, `b` (sub-blocks 0..4)
/// and `c`, `e` (4..8) whose chunks `q` hold sub-block `map(q)`'s values
/// `8 (q % 4)..`: `lo` / `hi` pick the chunks of `j = 0, 1` and `2, 3` in
/// sub-block order from each pair.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
fn regroup(halves: [[__m512i; 2]; 2], lo: __m512i, hi: __m512i) -> [__m512i; 4] {
    let [[a, b], [c, e]] = halves;
    let (a01, a23) = (
        _mm512_permutex2var_epi64(a, lo, b),
        _mm512_permutex2var_epi64(a, hi, b),
    );
    let (c01, c23) = (
        _mm512_permutex2var_epi64(c, lo, e),
        _mm512_permutex2var_epi64(c, hi, e),
    );
    [
        _mm512_shuffle_i64x2::<0x44>(a01, c01),
        _mm512_shuffle_i64x2::<0xee>(a01, c01),
        _mm512_shuffle_i64x2::<0x44>(a23, c23),
        _mm512_shuffle_i64x2::<0xee>(a23, c23),
    ]
}

/// The 64 bytes of register `j` at `x`.
///
/// # Safety
/// `x` points to a regrouped super-block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
unsafe fn load(x: *const u8, j: usize) -> __m512i {
    // SAFETY: 64 bytes of the 256 (caller, j < 4).
    unsafe { _mm512_loadu_si512(x.add(64 * j) as *const __m512i) }
}

/// [`super::q4_k::k4_dots_avx2`] on 512-bit registers: one row of Q4_K (or
/// with `FIFTH`, Q5_K) against tokens `t0..t0 + N`.
///
/// The block's 128 nibble bytes hold sub-blocks `(0, 2)` and `(4, 6)` in
/// their low nibbles, `(1, 3)` and `(5, 7)` in their high ones; regrouped
/// like the activations, every 16-bit lane of the four products stays in
/// one sub-block, so they are summed in 16 bits (at most 4 x 2 x 31 x 127)
/// and scaled by one `madd`: 5 multiplications per 256 values and token
/// where two sub-blocks a register take 8.
///
/// # Safety
/// The CPU must support AVX2/FMA/F16C and AVX-512 F/BW; `row` must point to
/// `acts.blocks` whole super-blocks; `t0 + N <= acts.t_pad`; `acts.qsp` is
/// built.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) unsafe fn k4_dots<const N: usize, const FIFTH: bool>(
    row: *const u8,
    acts: &QuantActs,
    t0: usize,
    prefetch: usize,
) -> [f32; N] {
    // SAFETY: the caller's contract; the features are enabled here.
    unsafe { k4_body::<N, FIFTH, false>(row, acts, t0, prefetch) }
}

/// [`k4_dots`] for Q4_K with VNNI's `vpdpbusd`: four u8 x i8 products
/// straight into each int32 lane, so a sub-block's four registers take
/// four instructions, then one `madd` scales them (the int32 sums, at most
/// 4 x 4 x 15 x 128, are below 2^15, so their low 16 bits hold them
/// whole). The integers, and so the results, are the same. (Q5_K's sums
/// need two chains, and measured no faster.)
///
/// # Safety
/// As [`k4_dots`], and the CPU must support AVX-512 VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn k4_dots_vnni<const N: usize>(
    row: *const u8,
    acts: &QuantActs,
    t0: usize,
    prefetch: usize,
) -> [f32; N] {
    // SAFETY: the caller's contract; the features are enabled here.
    unsafe { k4_body::<N, false, true>(row, acts, t0, prefetch) }
}

/// The body of [`k4_dots`] and [`k4_dots_vnni`], inlined into each.
///
/// # Safety
/// As [`k4_dots`]; with `VNNI`, as [`k4_dots_vnni`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
unsafe fn k4_body<const N: usize, const FIFTH: bool, const VNNI: bool>(
    row: *const u8,
    acts: &QuantActs,
    t0: usize,
    prefetch: usize,
) -> [f32; N] {
    debug_assert!(t0 + N <= acts.t_pad);
    debug_assert!(!(VNNI && FIFTH));
    let bytes = if FIFTH { 176 } else { 144 };
    let nibbles = if FIFTH { 48 } else { 16 };
    let (m4, one) = (_mm512_set1_epi8(0x0f), _mm512_set1_epi8(1));
    // chunks of j = 0, 1 (then 2, 3) of sub-blocks 0..4 from (low, high)
    // nibbles of the first 64 bytes: sub-block 0 in low chunks 0..4, 1 in
    // high 0..4, 2 in low 4..8, 3 in high 4..8
    let (lo, hi) = (
        _mm512_set_epi64(13, 5, 9, 1, 12, 4, 8, 0),
        _mm512_set_epi64(15, 7, 11, 3, 14, 6, 10, 2),
    );
    // sub-block s's scale in 16-bit lanes 4s..4s + 4
    let quads = _mm512_set_epi64(
        0x0007_0007_0007_0007,
        0x0006_0006_0006_0006,
        0x0005_0005_0005_0005,
        0x0004_0004_0004_0004,
        0x0003_0003_0003_0003,
        0x0002_0002_0002_0002,
        0x0001_0001_0001_0001,
        0,
    );
    let lanes = lanes8(acts, N, t0);
    let mut accs = TokenAccsAvx2::<N>::new();
    for b in 0..acts.blocks {
        // SAFETY: super-block b is inside the row (caller).
        let blk = unsafe { row.add(b * bytes) };
        prefetch_block_avx2(blk, bytes, prefetch);
        // SAFETY: bytes 0..16 of the block (d, dmin, the 12 scale bytes).
        let head = unsafe { _mm_loadu_si128(blk as *const __m128i) };
        let dd = _mm_cvtph_ps(head);
        let (d, dmin) = (_mm_cvtss_f32(dd), _mm_cvtss_f32(_mm_shuffle_ps(dd, dd, 1)));
        let [sc_lo, sc_hi, mn_lo, mn_hi] = k4_scale_words(
            _mm_extract_epi32(head, 1) as u32,
            _mm_extract_epi32(head, 2) as u32,
            _mm_extract_epi32(head, 3) as u32,
        );
        let sc = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, sc_hi as i32, sc_lo as i32));
        let sc = _mm512_permutexvar_epi16(quads, _mm512_castsi128_si512(sc));
        // the scales in the even 16-bit lanes only, for VNNI's int32 sums
        let sc_even = _mm512_and_si512(sc, _mm512_set1_epi32(0xffff));
        // SAFETY: the fifth bits, bytes 16..48 of a Q5_K block.
        let qh = FIFTH.then(|| unsafe {
            _mm512_broadcast_i64x4(_mm256_loadu_si256(blk.add(16) as *const __m256i))
        });
        let halves: [[__m512i; 2]; 2] = std::array::from_fn(|h| {
            // SAFETY: 64 nibble bytes of the block.
            let v = unsafe { _mm512_loadu_si512(blk.add(nibbles + 64 * h) as *const __m512i) };
            let (mut l, mut u) = (
                _mm512_and_si512(v, m4),
                _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4),
            );
            if let Some(qh) = qh {
                // sub-block k's fifth bits are bit k of the 32 bytes
                let bit = |k: i16| {
                    let s = _mm512_srlv_epi16(qh, halves_epi16(k, k + 2));
                    _mm512_slli_epi16::<4>(_mm512_and_si512(s, one))
                };
                let k = 4 * h as i16;
                l = _mm512_or_si512(l, bit(k));
                u = _mm512_or_si512(u, bit(k + 1));
            }
            [l, u]
        });
        let w = regroup(halves, lo, hi);
        let x: [*const u8; N] = std::array::from_fn(|n| acts.regrouped(t0 + n, b) as *const u8);
        let isum: [__m512i; N] = if VNNI {
            let mut isum = [_mm512_setzero_si512(); N];
            // A loop, not a closure: the VNNI instructions inline only into
            // code that has their feature (this body, once inlined).
            for (isum, &x) in isum.iter_mut().zip(&x) {
                // SAFETY: x is a regrouped super-block; VNNI callers enable
                // avx512vnni.
                *isum = unsafe {
                    let a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0], load(x, 0));
                    let a = _mm512_dpbusd_epi32(a, w[1], load(x, 1));
                    let a = _mm512_dpbusd_epi32(a, w[2], load(x, 2));
                    let a = _mm512_dpbusd_epi32(a, w[3], load(x, 3));
                    _mm512_madd_epi16(a, sc_even)
                };
            }
            isum
        } else {
            std::array::from_fn(|n| {
                // SAFETY: x[n] is a regrouped super-block.
                let p = |j: usize| _mm512_maddubs_epi16(w[j], unsafe { load(x[n], j) });
                let s16 =
                    _mm512_add_epi16(_mm512_add_epi16(p(0), p(1)), _mm512_add_epi16(p(2), p(3)));
                _mm512_madd_epi16(s16, sc)
            })
        };
        let mn = _mm_set_epi32(0, 0, mn_hi as i32, mn_lo as i32);
        if let (true, Ok(all)) = (lanes, <&[__m512i; 8]>::try_from(&isum[..])) {
            // sub-block p's min for both its groups
            let mn = _mm512_castsi128_si512(_mm_cvtepu8_epi16(mn));
            let pair =
                |p: usize| _mm512_permutexvar_epi16(halves_epi16(p as i16, p as i16 + 1), mn);
            // SAFETY: `lanes`: a whole tile of 8 tokens, `bsums8` built.
            let (dx, msum) = unsafe { (scales8(acts, b, t0), min_sums8(pair, acts, b, t0)) };
            accs.add_lanes(token_sums8(all), d, dx);
            accs.add_lanes(msum, -dmin, dx);
            continue;
        }
        let msum = k4_min_sums_avx2::<N>(mn_lo, mn_hi, acts, b, t0);
        accs.add_block(&isum.map(|v| fold(v)), Some((&msum, dmin)), d, acts, b, t0);
    }
    accs.finish()
}

/// One Q6_K super-block decoded for the regrouped activations: register
/// `j`'s chunk `s` holds sub-block `s`'s values `8j..8j + 8` (registers 0
/// and 1 every sub-block's first group of 16, 2 and 3 its second), with
/// the 16 group scales in group order and in the 16-bit lanes that meet
/// each pair's products.
pub(super) struct Q6kBlock {
    /// The values, `0..64`, regrouped.
    w: [__m512i; 4],
    /// The 16 int8 scales as int16, in group order.
    sc: __m256i,
    /// Group `2s` (`even`) or `2s + 1` (`odd`) in 16-bit lanes `4s..4s + 4`.
    sc_even: __m512i,
    /// See `sc_even`.
    sc_odd: __m512i,
}

impl Q6kBlock {
    /// The integer sum of the block's `sc x q` products with a regrouped
    /// Q8_K block `x`, as 16 int32 lanes: each pair of registers' products
    /// are summed in 16 bits (at most 2 x 2 x 63 x 127) and scaled by one
    /// `madd`.
    ///
    /// # Safety
    /// `x` points to a regrouped super-block.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
    pub(super) unsafe fn isum(&self, x: *const u8) -> __m512i {
        let w = &self.w;
        // SAFETY: `x` is a regrouped super-block (caller).
        let p = |j: usize| _mm512_maddubs_epi16(w[j], unsafe { load(x, j) });
        _mm512_add_epi32(
            _mm512_madd_epi16(_mm512_add_epi16(p(0), p(1)), self.sc_even),
            _mm512_madd_epi16(_mm512_add_epi16(p(2), p(3)), self.sc_odd),
        )
    }

    /// The offset 32 as mins: `32 x sc` per group, with factor `d`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
    pub(super) fn mins(&self) -> __m256i {
        _mm256_slli_epi16(self.sc, 5)
    }
}

/// What decoding a Q6_K super-block needs, built once per kernel call.
pub(super) struct Q6kDecoder {
    m4: __m512i,
    three: __m512i,
    lo: __m512i,
    hi: __m512i,
    even: __m512i,
    odd: __m512i,
}

impl Q6kDecoder {
    /// The masks and permutations.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
    pub(super) fn new() -> Self {
        // group 2s (`even`) or 2s + 1 (`odd`) in 16-bit lanes 4s..4s + 4
        let even = _mm512_set_epi64(
            0x000e_000e_000e_000e,
            0x000c_000c_000c_000c,
            0x000a_000a_000a_000a,
            0x0008_0008_0008_0008,
            0x0006_0006_0006_0006,
            0x0004_0004_0004_0004,
            0x0002_0002_0002_0002,
            0,
        );
        Q6kDecoder {
            m4: _mm512_set1_epi8(0x0f),
            three: _mm512_set1_epi8(3),
            // as in `k4_dots`, with sub-block 1 in the low chunks 4..8 and 2
            // in the high chunks 0..4
            lo: _mm512_set_epi64(13, 9, 5, 1, 12, 8, 4, 0),
            hi: _mm512_set_epi64(15, 11, 7, 3, 14, 10, 6, 2),
            even,
            odd: _mm512_add_epi16(even, _mm512_set1_epi16(1)),
        }
    }

    /// The super-block at `p`: each half-block's 64 nibble bytes give
    /// sub-blocks `(0, 1)` in their low nibbles and `(2, 3)` in their high
    /// ones, with two high bits each from the 32 bytes at `128 + 32h`.
    ///
    /// # Safety
    /// `p` points to a whole Q6_K super-block.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
    pub(super) unsafe fn block(&self, p: *const u8) -> Q6kBlock {
        // SAFETY: the 16 scales at 192..208 of the block (caller).
        let sc = unsafe { _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(192) as *const __m128i)) };
        let sc512 = _mm512_castsi256_si512(sc);
        let halves: [[__m512i; 2]; 2] = std::array::from_fn(|h| {
            // SAFETY: nibble bytes 64h..64h + 64, high bytes 128 + 32h .. 160 + 32h.
            let (ql, qh) = unsafe {
                (
                    _mm512_loadu_si512(p.add(64 * h) as *const __m512i),
                    _mm512_broadcast_i64x4(_mm256_loadu_si256(
                        p.add(128 + 32 * h) as *const __m256i
                    )),
                )
            };
            let high = |r: i16| {
                let s = _mm512_srlv_epi16(qh, halves_epi16(2 * r, 2 * r + 2));
                _mm512_slli_epi16::<4>(_mm512_and_si512(s, self.three))
            };
            [
                _mm512_or_si512(_mm512_and_si512(ql, self.m4), high(0)),
                _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16::<4>(ql), self.m4),
                    high(2),
                ),
            ]
        });
        Q6kBlock {
            w: regroup(halves, self.lo, self.hi),
            sc,
            sc_even: _mm512_permutexvar_epi16(self.even, sc512),
            sc_odd: _mm512_permutexvar_epi16(self.odd, sc512),
        }
    }
}

/// Q6_K's row kernel on 512-bit registers: each super-block decoded once
/// ([`Q6kDecoder::block`]) and met by every token ([`Q6kBlock::isum`]), 6
/// multiplications per 256 values and token where two sub-blocks a
/// register take 8.
///
/// # Safety
/// As [`k4_dots`], for Q6_K rows.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) unsafe fn q6k_dots<const N: usize>(
    row: *const u8,
    acts: &QuantActs,
    t0: usize,
    prefetch: usize,
) -> [f32; N] {
    const BYTES: usize = 210;
    debug_assert!(t0 + N <= acts.t_pad);
    let decoder = Q6kDecoder::new();
    // the groups of a pair of block-sum vectors: 2p, 2p + 1 alternating in
    // the low half, 2p + 2, 2p + 3 in the high half (less 2p)
    let pair_groups = _mm512_set_epi64(
        0x0003_0002_0003_0002,
        0x0003_0002_0003_0002,
        0x0003_0002_0003_0002,
        0x0003_0002_0003_0002,
        0x0001_0000_0001_0000,
        0x0001_0000_0001_0000,
        0x0001_0000_0001_0000,
        0x0001_0000_0001_0000,
    );
    let lanes = lanes8(acts, N, t0);
    let mut accs = TokenAccsAvx2::<N>::new();
    for b in 0..acts.blocks {
        // SAFETY: super-block b is inside the row (caller).
        let p = unsafe { row.add(b * BYTES) };
        prefetch_block_avx2(p, BYTES, prefetch);
        // SAFETY: a whole super-block; d at 208.
        let (blk, d) = unsafe {
            let d = std::ptr::read_unaligned(p.add(208) as *const u16);
            (
                decoder.block(p),
                super::kquant::f16_bits_to_f32(u16::from_le(d)),
            )
        };
        let isum: [__m512i; N] = std::array::from_fn(|n| {
            // SAFETY: a regrouped super-block of token t0 + n < t_pad.
            unsafe { blk.isum(acts.regrouped(t0 + n, b) as *const u8) }
        });
        let mn = blk.mins();
        if let (true, Ok(all)) = (lanes, <&[__m512i; 8]>::try_from(&isum[..])) {
            let mn = _mm512_castsi256_si512(mn);
            let pair = |p: usize| {
                let idx = _mm512_add_epi16(pair_groups, _mm512_set1_epi16(2 * p as i16));
                _mm512_permutexvar_epi16(idx, mn)
            };
            // SAFETY: `lanes`: a whole tile of 8 tokens, `bsums8` built.
            let (dx, msum) = unsafe { (scales8(acts, b, t0), min_sums8(pair, acts, b, t0)) };
            accs.add_lanes(token_sums8(all), d, dx);
            accs.add_lanes(msum, -d, dx);
            continue;
        }
        let msum = min_sums_avx2::<N>(mn, acts, b, t0);
        accs.add_block(&isum.map(|v| fold(v)), Some((&msum, d)), d, acts, b, t0);
    }
    accs.finish()
}
