//! Q4_K's one-token (decode) kernel on AVX-512 VNNI: 16 rows at once, one
//! per lane of the FMA chains, as [`super::legacy512`] does for the
//! 32-element formats.
//!
//! A register holds 16 nibble bytes of 4 rows (a 128-bit lane each): the
//! low nibbles of bytes `32p..32p + 32` are sub-block `2p`'s values, the
//! high ones sub-block `2p + 1`'s. Two `vpdpbusd` give each row 4 partial
//! sums of 8 products per sub-block (at most 8 x 15 x 127 < 2^15), so two
//! sub-blocks' sums pack exactly into words and one `vpdpwssd` applies the
//! rows' 6-bit scales; the whole super-block is summed before one
//! reduction into lanes. The rows' scales and mins are decoded 4 rows at a
//! time from their 16-byte heads, in the same lanes. The quads run in a
//! loop: unrolled, LLVM hoisted every quad's loads and spilled them (15-20%
//! slower on a 1B model). Every row's integers are those of the other paths
//! (`sum(sc_j x S_j)`, `sum(m_j x B_j)`), and so are its two FMAs per
//! super-block and the results.

use std::arch::x86_64::*;

use super::legacy512::{
    ROWS, f16_lanes, first_dwords, halves4, lanes4, prefetch_ahead, quad_rows, reduce, store_rows,
};
use crate::matmul::acts::QuantActs;

/// Bytes per super-block: d, dmin (f16), 12 bytes of 6-bit scales and mins,
/// 128 bytes of nibbles.
pub(super) const BYTES: usize = 144;

/// The scales and mins of a quad's rows as 8 words each in the row's
/// 128-bit lane, from their heads `h` (per lane: d and dmin, then the 12
/// bytes of packed 6-bit fields): `k4_scale_words` on 4 rows at once.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) fn scale_words(h: __m512i) -> (__m512i, __m512i) {
    let (m6, m4, m2) = (
        _mm512_set1_epi32(0x3f3f_3f3f),
        _mm512_set1_epi32(0x0f0f_0f0f),
        _mm512_set1_epi32(0x0303_0303),
    );
    // per lane: [a0, a1, a0, a1] and [a2, a2 >> 4, ..]
    let a01 = _mm512_shuffle_epi32::<0b10_01_10_01>(h);
    let a2 = _mm512_srlv_epi32(
        _mm512_shuffle_epi32::<0b11_11_11_11>(h),
        _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0),
    );
    // [scales 0..4, mins 0..4, ..] and [scales 4..8, mins 4..8, ..]
    let low = _mm512_and_si512(a01, m6);
    let top = _mm512_slli_epi32::<4>(_mm512_and_si512(_mm512_srli_epi32::<6>(a01), m2));
    let high = _mm512_or_si512(_mm512_and_si512(a2, m4), top);
    // [scales 0..8, mins 0..8] as bytes, then words
    let both = _mm512_unpacklo_epi32(low, high);
    let z = _mm512_setzero_si512();
    (_mm512_unpacklo_epi8(both, z), _mm512_unpackhi_epi8(both, z))
}

/// Quad `g` (rows `4g..4g + 4` from `first`, `stride` apart) of the
/// super-blocks at `off`, decoded once for every token: the rows' heads,
/// their mins as words, each pair of sub-blocks' scales as
/// [`_mm512_packs_epi32`] lays out their sums, and the nibbles of each
/// 32-byte pair `p` as registers `4p..4p + 4` (low nibbles of its first
/// and second 16 bytes, then the high ones), 16 bytes of each row in its
/// 128-bit lane.
struct Quad {
    head: __m512i,
    mins: __m512i,
    pairs: [__m512i; 4],
    nibbles: [__m512i; 16],
}

/// Decodes quad `g` of the super-blocks at `off` ([`Quad`]).
///
/// # Safety
/// The CPU must support AVX-512 F/BW; bytes `off..off + BYTES` of each of
/// the quad's rows are readable.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
unsafe fn quad_decode(first: *const u8, stride: usize, off: usize, g: usize) -> Quad {
    let m4 = _mm512_set1_epi8(0x0f);
    let q = first.wrapping_add(4 * g * stride + off);
    // SAFETY: 16 head bytes at each row (caller).
    let head = unsafe { lanes4(quad_rows(q, stride)) };
    let (sc, mins) = scale_words(head);
    let pairs = [
        scale_pair::<0>(sc),
        scale_pair::<1>(sc),
        scale_pair::<2>(sc),
        scale_pair::<3>(sc),
    ];
    let mut nibbles = [_mm512_setzero_si512(); 16];
    // A loop, not closures: closures are not inlined into kernels here.
    for (p, n) in nibbles.chunks_exact_mut(4).enumerate() {
        // SAFETY: 32 nibble bytes of the super-block at each row (caller).
        let (lo, hi) = unsafe { halves4(quad_rows(q.wrapping_add(16 + 32 * p), stride)) };
        n[0] = _mm512_and_si512(lo, m4);
        n[1] = _mm512_and_si512(hi, m4);
        n[2] = _mm512_and_si512(_mm512_srli_epi16::<4>(lo), m4);
        n[3] = _mm512_and_si512(_mm512_srli_epi16::<4>(hi), m4);
    }
    Quad {
        head,
        mins,
        pairs,
        nibbles,
    }
}

/// The integer sums of a decoded quad against one token's 16 groups of 16
/// values `x`: `sum_j sc_j x S_j` in 4 partial sums per row (its 128-bit
/// lane).
///
/// Each pair of sub-blocks' partial sums (at most 8 x 15 x 127, below
/// 2^15) is packed to words and scaled by one `vpdpwssd`, so every scale is
/// applied once per row and the sums stay exact.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI; `x` points to a Q8_K block's
/// 256 values, 16-byte aligned.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn quad_token(quad: &Quad, x: *const __m128i) -> __m512i {
    let z = _mm512_setzero_si512();
    let mut sum = z;
    for (p, (n, pair)) in quad.nibbles.chunks_exact(4).zip(quad.pairs).enumerate() {
        // SAFETY: groups 4p..4p + 4 of the token's block (caller).
        let [x0, x1, y0, y1] = unsafe {
            [
                _mm512_broadcast_i32x4(_mm_load_si128(x.add(4 * p))),
                _mm512_broadcast_i32x4(_mm_load_si128(x.add(4 * p + 1))),
                _mm512_broadcast_i32x4(_mm_load_si128(x.add(4 * p + 2))),
                _mm512_broadcast_i32x4(_mm_load_si128(x.add(4 * p + 3))),
            ]
        };
        let even = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, n[0], x0), n[1], x1);
        let odd = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, n[2], y0), n[3], y1);
        sum = _mm512_dpwssd_epi32(sum, _mm512_packs_epi32(even, odd), pair);
    }
    sum
}

/// Sub-blocks `2P` and `2P + 1`'s scales from a lane's 8 scale words, 4
/// words each, as [`_mm512_packs_epi32`] lays out two sub-blocks' sums.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
fn scale_pair<const P: i8>(w: __m512i) -> __m512i {
    let (a, b, c, d) = (4 * P, 4 * P + 1, 4 * P + 2, 4 * P + 3);
    _mm512_shuffle_epi8(
        w,
        _mm512_broadcast_i32x4(_mm_setr_epi8(
            a, b, a, b, a, b, a, b, c, d, c, d, c, d, c, d,
        )),
    )
}

/// The sub-blocks' sums of the token's values (`bsums` holds sums of 16)
/// as 8 words, in every 128-bit lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) fn block_sums(bsums: &[i16; 16]) -> __m512i {
    // SAFETY: 32 bytes.
    let s = unsafe { _mm256_loadu_si256(bsums.as_ptr() as *const __m256i) };
    let pairs = _mm256_madd_epi16(s, _mm256_set1_epi16(1));
    // at most 32 x 127: the int32 sums pack to words exactly
    let w = _mm256_packs_epi32(pairs, pairs);
    let w = _mm256_permute4x64_epi64::<0x08>(w);
    _mm512_broadcast_i32x4(_mm256_castsi256_si128(w))
}

/// Dot products of 16 evenly spaced Q4_K rows with token `t`, into
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
    let xq = acts.qs[t * nb * 8..(t + 1) * nb * 8].as_ptr();
    let bsums = &acts.bsums[t * nb..(t + 1) * nb];
    let mut acc = _mm512_setzero_ps();
    for (b, bs) in bsums.iter().enumerate() {
        let off = b * BYTES;
        // Q8_K block b of the token: 8 aligned Q8Blocks (16 groups of 16)
        let x = xq.wrapping_add(8 * b) as *const __m128i;
        let z = _mm512_setzero_si512();
        let (mut heads, mut sums, mut mins) = ([z; 4], [z; 4], [z; 4]);
        for g in 0..4 {
            // SAFETY: super-block b of each row is whole; x is the token's
            // aligned Q8_K block (caller).
            sums[g] = unsafe {
                let quad = quad_decode(first, stride, off, g);
                (heads[g], mins[g]) = (quad.head, quad.mins);
                quad_token(&quad, x)
            };
        }
        let isum = reduce(sums);
        let bw = block_sums(bs);
        let msum = reduce([
            _mm512_madd_epi16(mins[0], bw),
            _mm512_madd_epi16(mins[1], bw),
            _mm512_madd_epi16(mins[2], bw),
            _mm512_madd_epi16(mins[3], bw),
        ]);
        prefetch_ahead::<false>(first.wrapping_add(ROWS * off), ROWS * BYTES);
        let dx = _mm512_set1_ps(acts.d[b * tp + t]);
        let h = first_dwords(&heads);
        let (d, dmin) = (f16_lanes::<0>(h), f16_lanes::<16>(h));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, dx), acc);
        // -dmin, as the other paths negate it (the sign bit flipped)
        let neg = _mm512_castsi512_ps(_mm512_xor_si512(
            _mm512_castps_si512(dmin),
            _mm512_set1_epi32(i32::MIN),
        ));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(neg, dx), acc);
    }
    store_rows(acc, &mut out[0]);
}

/// Tokens one call of [`rows16_tokens_vnni`] takes at most.
pub(super) const MAX_TOKENS: usize = 8;

/// Dot products of 16 evenly spaced Q4_K rows with tokens `t0..t0 + width`
/// (`width` up to [`MAX_TOKENS`]), token `t0 + n` into `out[n]`: each quad
/// of rows is decoded once and met by every token, and each token's sums
/// are those of [`rows16_vnni`], in the same order, so are its results.
/// (One body generic over the token count served both, but made the
/// one-token kernel 18% slower: 37 -> 44 us for 1024 x 2048.)
///
/// # Safety
/// As [`rows16_vnni`], for every token `t0..t0 + width`; `out` holds
/// `width` rows of results.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn rows16_tokens_vnni(
    first: *const u8,
    stride: usize,
    acts: &QuantActs,
    t0: usize,
    width: usize,
    out: &mut [[f32; ROWS]],
) {
    let (nb, tp) = (acts.blocks, acts.t_pad);
    let width = width.min(MAX_TOKENS).min(out.len());
    debug_assert!(t0 + width <= acts.n_tokens && acts.qs.len() == tp * nb * 8);
    let z = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); MAX_TOKENS];
    let mut sums = [[z; 4]; MAX_TOKENS];
    for b in 0..nb {
        let off = b * BYTES;
        let (mut heads, mut mins) = ([z; 4], [z; 4]);
        for g in 0..4 {
            // SAFETY: super-block b of each row is whole (caller).
            let quad = unsafe { quad_decode(first, stride, off, g) };
            (heads[g], mins[g]) = (quad.head, quad.mins);
            for (n, sums) in sums[..width].iter_mut().enumerate() {
                // Q8_K block b of token t0 + n: 8 aligned Q8Blocks
                let x = acts.qs[((t0 + n) * nb + b) * 8..].as_ptr() as *const __m128i;
                // SAFETY: x is that block, below t_pad (caller).
                sums[g] = unsafe { quad_token(&quad, x) };
            }
        }
        prefetch_ahead::<false>(first.wrapping_add(ROWS * off), ROWS * BYTES);
        let h = first_dwords(&heads);
        let (d, dmin) = (f16_lanes::<0>(h), f16_lanes::<16>(h));
        // -dmin, as the other paths negate it (the sign bit flipped)
        let neg = _mm512_castsi512_ps(_mm512_xor_si512(
            _mm512_castps_si512(dmin),
            _mm512_set1_epi32(i32::MIN),
        ));
        for (n, (acc, sums)) in acc.iter_mut().zip(&sums).take(width).enumerate() {
            let t = t0 + n;
            let isum = reduce(*sums);
            let bw = block_sums(&acts.bsums[t * nb + b]);
            let msum = reduce([
                _mm512_madd_epi16(mins[0], bw),
                _mm512_madd_epi16(mins[1], bw),
                _mm512_madd_epi16(mins[2], bw),
                _mm512_madd_epi16(mins[3], bw),
            ]);
            let dx = _mm512_set1_ps(acts.d[b * tp + t]);
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, dx), *acc);
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(neg, dx), *acc);
        }
    }
    for (acc, out) in acc.into_iter().zip(out.iter_mut()).take(width) {
        store_rows(acc, out);
    }
}
