//! Q6_K's 8-token tile on AVX-512 VNNI for 16 rows in a row, one per lane,
//! as [`super::q4_k_rows16`] does for Q4_K.
//!
//! Each run of 32 values of the 16 rows (low or high nibbles of 32 bytes,
//! with two bits of 32 more) is put together once and transposed so that
//! register `c` holds values `4c..4c + 4` of every row; each token's same
//! 4 values meet it in one `vpdpbusd` with a broadcast operand. A group of
//! 16 values' sum needs 18 bits, so one `vpmulld` per group and token
//! applies its scale. The 8-row tile ([`super::kquant_tokens8`]) has the
//! tokens in the lanes instead and broadcasts each row's values: twice the
//! `vpdpbusd` (256-bit), twice the `vpmulld`, and every row unpacked
//! through memory.
//!
//! Every row's integers are those of the other paths (`sum(sc_g x S_g)`
//! with the values unsigned, `sum(32 sc_g x B_g)` for their offset), and
//! so are its two FMAs per super-block and the results.

use std::arch::x86_64::*;

use super::legacy_rows16::{TOKENS, by_dword};
use super::legacy512::{
    ROWS, ROWS_AHEAD, f16_lanes, halves4, lanes4, prefetch_rows, quad_rows, store_rows,
};
use super::q4_k_rows16::token_dwords;
use crate::matmul::acts::QuantActs;

/// Bytes per super-block: 128 bytes of low nibbles, 64 of high bit pairs,
/// 16 signed scales, d (f16).
const BYTES: usize = 210;
/// Where the scales start.
const SCALES: usize = 192;
/// The rows' 16 signed scales as dwords (register `g`: group `g` of every
/// row, row `LANE_ROW[l]` in lane `l`), and the offsets' factors
/// `32 x scale` by pairs of words (register `p`: groups `2p`, `2p + 1`).
///
/// # Safety
/// Each of the 16 rows holds a whole super-block at `q + r * stride`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
unsafe fn scales(q: *const u8, stride: usize) -> ([__m512i; 16], [__m512i; 8]) {
    let z = _mm512_setzero_si512();
    let mut quads = [z; 4];
    for (g, quad) in quads.iter_mut().enumerate() {
        // SAFETY: the 16 scale bytes of each row's super-block (caller).
        *quad = unsafe { lanes4(quad_rows(q.wrapping_add(4 * g * stride + SCALES), stride)) };
    }
    // register c: scale bytes 4c..4c + 4 of every row
    let bytes = by_dword(quads);
    let mut sc = [z; 16];
    for (g, sc) in sc.iter_mut().enumerate() {
        // byte g % 4 of the dword to the top, then back with its sign
        let top = match g % 4 {
            0 => _mm512_slli_epi32::<24>(bytes[g / 4]),
            1 => _mm512_slli_epi32::<16>(bytes[g / 4]),
            2 => _mm512_slli_epi32::<8>(bytes[g / 4]),
            _ => bytes[g / 4],
        };
        *sc = _mm512_srai_epi32::<24>(top);
    }
    let mut pairs = [z; 8];
    for (p, pair) in pairs.iter_mut().enumerate() {
        let low = _mm512_and_si512(sc[2 * p], _mm512_set1_epi32(0xffff));
        let words = _mm512_or_si512(low, _mm512_slli_epi32::<16>(sc[2 * p + 1]));
        *pair = _mm512_slli_epi16::<5>(words);
    }
    (sc, pairs)
}

/// The rows' `d` (f16 at byte 208) as f32, row `LANE_ROW[l]` in lane `l`.
///
/// # Safety
/// As [`scales`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
unsafe fn factors(q: *const u8, stride: usize) -> __m512 {
    let z = _mm512_setzero_si512();
    let mut quads = [z; 4];
    for (g, quad) in quads.iter_mut().enumerate() {
        // SAFETY: bytes 194..210 of each row's super-block (caller).
        *quad = unsafe { lanes4(quad_rows(q.wrapping_add(4 * g * stride + 194), stride)) };
    }
    // dword 3 of each lane holds bytes 206..210: d in its high half
    f16_lanes::<16>(by_dword(quads)[3])
}

/// Run `r`'s low 4 bits from its nibble bytes `v`: the low nibbles for
/// runs 0 and 1 of a half, the high ones for 2 and 3.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
fn nibbles(v: __m512i, r: usize) -> __m512i {
    let v = if r < 2 { v } else { _mm512_srli_epi16::<4>(v) };
    _mm512_and_si512(v, _mm512_set1_epi8(0x0f))
}

/// Run `r`'s top 2 bits (bits `2r..2r + 2` of its high bytes `v`) as bits
/// 4 and 5.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
fn top_bits(v: __m512i, r: usize) -> __m512i {
    let v = match r {
        0 => _mm512_slli_epi16::<4>(v),
        1 => _mm512_slli_epi16::<2>(v),
        2 => v,
        _ => _mm512_srli_epi16::<2>(v),
    };
    _mm512_and_si512(v, _mm512_set1_epi8(0x30))
}

/// The 32 bytes at `at` of each of the 16 rows' super-blocks at `q + r *
/// stride`, transposed as [`by_dword`] lays them out: register `c` holds
/// bytes `4c..4c + 4` of every row.
///
/// # Safety
/// As [`scales`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
unsafe fn bytes32(q: *const u8, stride: usize, at: usize) -> [__m512i; 8] {
    let z = _mm512_setzero_si512();
    let (mut lo, mut hi) = ([z; 4], [z; 4]);
    for g in 0..4 {
        // SAFETY: 32 bytes at `at` of each row's super-block (caller).
        (lo[g], hi[g]) = unsafe { halves4(quad_rows(q.wrapping_add(4 * g * stride + at), stride)) };
    }
    let (a, b) = (by_dword(lo), by_dword(hi));
    [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
}

/// One half of the 16 rows' super-blocks (values `128 n..128 n + 128`),
/// transposed once for its 4 runs: the nibble bytes of runs 0 and 2
/// (`.0[0]`), of runs 1 and 3 (`.0[1]`), and the high bit pairs of all
/// four (`.1`). Byte-wise operations commute with the transposition.
///
/// # Safety
/// As [`scales`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
unsafe fn half(q: *const u8, stride: usize, n: usize) -> ([[__m512i; 8]; 2], [__m512i; 8]) {
    // SAFETY: bytes 64n..64n + 64 and 128 + 32n..160 + 32n of each row's
    // super-block (caller).
    unsafe {
        (
            [bytes32(q, stride, 64 * n), bytes32(q, stride, 64 * n + 32)],
            bytes32(q, stride, 128 + 32 * n),
        )
    }
}

/// Run `r` of a [`half`]'s values (`32 r..32 r + 32` of it) from its
/// nibble bytes `low` and bit pairs `high`, unsigned (0..64), register `c`
/// holding values `4c..4c + 4` of every row.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
fn run(low: &[__m512i; 8], high: &[__m512i; 8], r: usize) -> [__m512i; 8] {
    std::array::from_fn(|c| _mm512_or_si512(nibbles(low[c], r), top_bits(high[c], r)))
}

/// Dot products of 16 evenly spaced Q6_K rows with tokens `t0..t0 + 8`,
/// token `t0 + n`'s into `out[n]`.
///
/// # Safety
/// The CPU must support AVX2/FMA/F16C and AVX-512 F/BW/VL/VNNI; row `r`
/// (`0..16`) at `first + r * stride` holds `acts.blocks` whole
/// super-blocks; `t0 + 8 <= acts.t_pad`; `acts` holds Q8_K values.
// `t` and `k` index several arrays at once.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn tokens8_vnni(
    first: *const u8,
    stride: usize,
    acts: &QuantActs,
    t0: usize,
    out: &mut [[f32; ROWS]; TOKENS],
) {
    let (nb, tp) = (acts.blocks, acts.t_pad);
    debug_assert!(t0 + TOKENS <= tp && acts.qs.len() == tp * nb * 8);
    debug_assert!(acts.bsums.len() == tp * nb);
    let x = token_dwords(acts, t0);
    let z = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); TOKENS];
    for b in 0..nb {
        let q = first.wrapping_add(b * BYTES);
        // SAFETY: super-block b of each row is whole (caller).
        let (sc, pairs) = unsafe { scales(q, stride) };
        let mut isum = [z; TOKENS];
        let mut halves = ([[z; 8]; 2], [z; 8]);
        for j in 0..8 {
            let (n, r) = (j / 4, j % 4);
            if r == 0 {
                // SAFETY: as above.
                halves = unsafe { half(q, stride, n) };
            }
            let w = run(&halves.0[r % 2], &halves.1, r);
            for t in 0..TOKENS {
                let mut s = [z; 2];
                for k in 0..8 {
                    // SAFETY: dword k of run j of token t0 + t's super-block
                    // b (`qs` holds `t_pad` tokens, caller).
                    let xk = _mm512_set1_epi32(unsafe { x[t].add(64 * b + 8 * j + k).read() });
                    s[k / 4] = _mm512_dpbusd_epi32(s[k / 4], w[k], xk);
                }
                // a group's sum is up to 16 x 63 x 127: past 16 bits
                let scaled = _mm512_add_epi32(
                    _mm512_mullo_epi32(s[0], sc[2 * j]),
                    _mm512_mullo_epi32(s[1], sc[2 * j + 1]),
                );
                isum[t] = _mm512_add_epi32(isum[t], scaled);
            }
        }
        prefetch_rows(first, stride, BYTES, b + ROWS_AHEAD, nb);
        // SAFETY: as above.
        let d = unsafe { factors(q, stride) };
        let neg = _mm512_castsi512_ps(_mm512_xor_si512(
            _mm512_castps_si512(d),
            _mm512_set1_epi32(i32::MIN),
        ));
        let at_b = b * tp + t0;
        let xd = &acts.d[at_b..at_b + TOKENS];
        for t in 0..TOKENS {
            // the token's 16 group sums as 8 pairs of words
            let sums = acts.bsums[(t0 + t) * nb + b].as_ptr() as *const i32;
            let mut osum = z;
            for p in 0..8 {
                // SAFETY: pair p of the token's 16 sums (32 bytes).
                let bp = _mm512_set1_epi32(unsafe { sums.add(p).read_unaligned() });
                osum = _mm512_dpwssd_epi32(osum, pairs[p], bp);
            }
            let dx = _mm512_set1_ps(xd[t]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, dx), acc[t]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(osum), _mm512_mul_ps(neg, dx), acc[t]);
        }
    }
    for (acc, out) in acc.into_iter().zip(out) {
        store_rows(acc, out);
    }
}
