//! The K-quant 8-token tile on AVX-512 VNNI, for rounds of a few sequences
//! decoding together: 8 rows at a time, the 8 tokens in the lanes of
//! 256-bit registers, as [`super::kquant`]'s AVX2 tile, with one
//! `vpdpbusd` per 4 values of a row (AVX2: a `vpmaddubsw` and a 16-bit
//! add) and one `vpmulld` per group of 16 (or 32) that shares a scale.
//!
//! It reads 8 rows from their starts to their ends. A 16-row tile (16
//! streams at once) won in cache on a 1B model's 6.7 KB Q6_K rows and lost
//! end to end. Its weights are asked for a few super-blocks ahead in each
//! row, and past a row's end in the next tile's row: with short rows (a
//! 2048-wide Q5_K row is 8 super-blocks) a prefetch within the row comes
//! too late to help.
//!
//! The integers (`sum(sc_g x S_g)`, `sum(mn_g x B_g)`) and the two FMAs per
//! super-block are those of every other path, and so are the results.

use std::arch::x86_64::*;

use super::kquant::SuperBlock;
use super::simd::{add_block8, store_tokens8};
use crate::matmul::acts::QuantActs;

/// Rows per tile: 8 accumulators and 8 of the group sums fill half the
/// registers (1024x2048 Q6_K x 8 tokens in `isa_pair`: 217 us with 4 rows,
/// 206 with 8).
pub(super) const ROWS: usize = 8;
/// Super-blocks ahead that a row's weights are asked for (1B Q4_K_M at 8
/// sequences, before the prefetch went on into the next tile: none 140, 2
/// 159, 4 156, 8 149 tokens/s).
const AHEAD: usize = 4;

/// The tile of a format: rows `rows` against tokens `t0..t0 + 8`, token
/// `t0 + n` into `out[n]`, the next tile's rows `next_tile` bytes on
/// ([`tokens8_vnni`]).
///
/// Safety: as [`tokens8_vnni`] states.
pub(super) type Tokens8Fn = unsafe fn(
    rows: [*const u8; ROWS],
    acts: &QuantActs,
    t0: usize,
    next_tile: usize,
    out: &mut [[f32; ROWS]; 8],
);

/// One row's super-block as the tile reads it: what [`super::kquant::Canon`]
/// holds, in the shapes that one broadcast load each takes.
#[repr(C, align(32))]
pub(super) struct Block {
    /// The 256 values, unsigned.
    pub q: [u8; 256],
    /// The scale of each group of 16.
    pub sc: [i32; 16],
    /// The mins of groups `2p` and `2p + 1` as a pair of int16 (low: `2p`).
    pub mn: [u32; 8],
    /// Factor of the scales.
    pub d: f32,
    /// Factor of the mins.
    pub dmin: f32,
}

impl Default for Block {
    fn default() -> Self {
        Block {
            q: [0; 256],
            sc: [0; 16],
            mn: [0; 8],
            d: 0.0,
            dmin: 0.0,
        }
    }
}

/// A format the tile takes: unsigned values with integer scales and mins
/// per group of 16, as in [`super::kquant`]'s canonical form.
pub(super) trait Unpack8: SuperBlock {
    /// Groups of 16 that share a scale (2 for the formats of sub-blocks of
    /// 32): their sums are scaled once, together.
    const SCALE_GROUPS: usize = 1;

    /// Unpacks the super-block at `p` into `out`. (Not `#[inline]`: inlined
    /// into the tile, 1024x2048 x 8 tokens took 184 -> 225 us for Q6_K and
    /// 196 -> 245 for Q5_K in `isa_pair`.)
    ///
    /// # Safety
    /// The CPU must support AVX2; `p` points to a whole super-block.
    unsafe fn unpack8(p: *const u8, out: &mut Block);
}

/// Dot products of [`ROWS`] rows with tokens `t0..t0 + 8`, token `t0 + n`'s
/// into `out[n]`; the weights [`AHEAD`] super-blocks on are asked for into
/// L2, from the next tile's rows (`next_tile` bytes on) past the rows' ends
/// (`next_tile` 0: none asked for).
///
/// # Safety
/// The CPU must support AVX2/FMA/F16C and AVX-512 F/BW/VL/VNNI; each
/// `rows[i]` holds `acts.blocks` whole super-blocks; `t0` is a multiple of
/// 8 with `t0 + 8 <= acts.t_pad`, and `acts.qs8` / `acts.bsums8` are built.
// `g`, `u` and `i` index several arrays and pointer offsets at once.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn tokens8_vnni<K: Unpack8>(
    rows: [*const u8; ROWS],
    acts: &QuantActs,
    t0: usize,
    next_tile: usize,
    out: &mut [[f32; ROWS]; 8],
) {
    let (nb, tp) = (acts.blocks, acts.t_pad);
    debug_assert!(t0.is_multiple_of(8) && t0 + 8 <= tp);
    debug_assert!(acts.qs8.len() == tp * nb * 8 && acts.bsums8.len() == tp * nb);
    let x8 = acts.qs8[t0 * nb * 8..(t0 + 8) * nb * 8].as_ptr() as *const __m256i;
    let s8 = acts.bsums8[t0 * nb..(t0 + 8) * nb].as_ptr() as *const __m256i;
    let mut acc = [_mm256_setzero_ps(); ROWS];
    let mut blocks: [Block; ROWS] = std::array::from_fn(|_| Block::default());
    for b in 0..nb {
        if next_tile != 0 {
            // each row's super-block AHEAD blocks on, or past its end the
            // next tile's row's (short rows are read before a row's
            // prefetch could reach them)
            let (ahead, past) = (b + AHEAD, (b + AHEAD).checked_sub(nb));
            let off = past.map_or(ahead * K::BYTES, |k| next_tile + k * K::BYTES);
            for i in 0..ROWS {
                let at = rows[i].wrapping_add(off);
                for line in (0..K::BYTES).step_by(64) {
                    // A hint only: the address may lie past the matrix (never read).
                    _mm_prefetch::<_MM_HINT_T1>(at.wrapping_add(line) as *const i8);
                }
            }
        }
        for i in 0..ROWS {
            // SAFETY: super-block b of row i is inside the row (caller).
            unsafe { K::unpack8(rows[i].wrapping_add(b * K::BYTES), &mut blocks[i]) };
        }
        // Broadcasts read the values, scales and mins from memory (load
        // unit); `black_box` keeps LLVM from turning them into shuffles.
        let bl = std::hint::black_box(&blocks);
        let q: [&[u32; 64]; ROWS] = std::array::from_fn(|i| {
            // SAFETY: 256 bytes, 4-aligned (Block is 32-aligned).
            unsafe { &*(bl[i].q.as_ptr() as *const [u32; 64]) }
        });
        let mut isum = [_mm256_setzero_si256(); ROWS];
        for g in (0..16).step_by(K::SCALE_GROUPS) {
            let mut s = [_mm256_setzero_si256(); ROWS];
            for u in 4 * g..4 * (g + K::SCALE_GROUPS) {
                // SAFETY: vector u of super-block b of this token group; aligned.
                let x = unsafe { _mm256_load_si256(x8.add(64 * b + u)) };
                for i in 0..ROWS {
                    s[i] = _mm256_dpbusd_epi32(s[i], _mm256_set1_epi32(q[i][u] as i32), x);
                }
            }
            for i in 0..ROWS {
                let sc = _mm256_set1_epi32(bl[i].sc[g]);
                isum[i] = _mm256_add_epi32(isum[i], _mm256_mullo_epi32(s[i], sc));
            }
        }
        let mut msum = [_mm256_setzero_si256(); ROWS];
        for p in 0..8 {
            // SAFETY: sums 2p, 2p + 1 of the 8 tokens; 32 bytes.
            let s = unsafe { _mm256_loadu_si256(s8.add(8 * b + p)) };
            for i in 0..ROWS {
                let pair = _mm256_set1_epi32(bl[i].mn[p] as i32);
                msum[i] = _mm256_dpwssd_epi32(msum[i], s, pair);
            }
        }
        // SAFETY: 8 floats of the scales of super-block b.
        let xd = unsafe { _mm256_loadu_ps(acts.d[b * tp + t0..][..8].as_ptr()) };
        for i in 0..ROWS {
            acc[i] = add_block8(acc[i], (isum[i], msum[i]), (bl[i].d, bl[i].dmin), xd);
        }
    }
    store_tokens8(acc, out);
}
