//! Q6_K's one-token kernel for 16 rows in a row, eight rows at a time with
//! the rows in lanes.
//!
//! Each row's super-block is decoded as the row kernel decodes it
//! ([`Q6kDecoder::block`]) and meets the token in the same integers
//! ([`Q6kBlock::isum`]); what the eight rows share is the rest of the
//! block step. The row kernel reduces each row's two integer sums to
//! scalars and runs two scalar FMAs a block; here one transposing
//! reduction ([`token_sums8`]) gives the eight rows' sums in the lanes of
//! one register and two vector FMAs add them, each lane the f32 sequence
//! of every other path. In cache (`examples/isa_pair`, 1024x2048, one
//! thread, a Xeon of 2026 with AVX-512 VNNI) that is 88.7 -> 70.1 us. Eight rows rather than sixteen:
//! a sixteen-row Q6_K tile lost to the row kernel three times
//! (`docs/benchmarks.md`), sixteen row streams at once being the suspect.

use std::arch::x86_64::*;

use super::kquant512::{Q6kDecoder, token_sums8};
use super::legacy512::ROWS;
use crate::matmul::acts::QuantActs;

/// Bytes per super-block.
const BYTES: usize = 210;
/// Rows a pass reduces together, one per lane of a 256-bit register.
const LANES: usize = 8;

/// Dot products of 16 evenly spaced Q6_K rows with token `t`, into
/// `out[0]`, as two passes of eight rows.
///
/// # Safety
/// The CPU must support AVX2/FMA/F16C and AVX-512 F/BW; row `r` (`0..16`)
/// at `first + r * stride` holds `acts.blocks` whole super-blocks; `t <
/// acts.n_tokens`; `acts` holds Q8_K values with `qsp` built.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) unsafe fn rows16(
    first: *const u8,
    stride: usize,
    acts: &QuantActs,
    t: usize,
    out: &mut [[f32; ROWS]; 1],
) {
    for (pass, out) in out[0].chunks_exact_mut(LANES).enumerate() {
        // SAFETY: rows 8 pass .. 8 pass + 8 of the 16 (caller).
        let dots = unsafe { rows8(first.wrapping_add(pass * LANES * stride), stride, acts, t) };
        out.copy_from_slice(&dots);
    }
}

/// Dot products of 8 evenly spaced Q6_K rows with token `t`, row `r` in
/// element `r`.
///
/// # Safety
/// As [`rows16`], for 8 rows.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
unsafe fn rows8(first: *const u8, stride: usize, acts: &QuantActs, t: usize) -> [f32; LANES] {
    let decoder = Q6kDecoder::new();
    let (nb, tp) = (acts.blocks, acts.t_pad);
    debug_assert!(t < acts.n_tokens && acts.qsp.len() == tp * nb * 8);
    let z = _mm512_setzero_si512();
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        let off = b * BYTES;
        let x = acts.regrouped(t, b) as *const u8;
        // SAFETY: token t's 16 group sums of block b (32 bytes).
        let bs = unsafe { _mm256_loadu_si256(acts.bsums[t * nb + b].as_ptr() as *const __m256i) };
        let (mut isum, mut msum, mut d) = ([z; LANES], [z; LANES], [0u16; LANES]);
        for r in 0..LANES {
            let p = first.wrapping_add(r * stride + off);
            // SAFETY: super-block b of row r is whole, d at 208 (caller);
            // `x` is token t's regrouped block b.
            let blk = unsafe {
                d[r] = std::ptr::read_unaligned(p.add(208) as *const u16);
                decoder.block(p)
            };
            // SAFETY: as above.
            isum[r] = unsafe { blk.isum(x) };
            msum[r] = _mm512_zextsi256_si512(_mm256_madd_epi16(blk.mins(), bs));
        }
        prefetch_next_tile(first.wrapping_add(off), stride);
        // SAFETY: 8 f16 scales (16 bytes); the same exact conversion as
        // the other paths' `f16_bits_to_f32`.
        let d = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(d.as_ptr() as *const __m128i)) };
        let dx = _mm256_set1_ps(acts.d[b * tp + t]);
        // d x dx, then -d x dx: the other paths' products, in lanes
        acc = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(token_sums8(&isum)),
            _mm256_mul_ps(d, dx),
            acc,
        );
        let neg = _mm256_xor_ps(d, _mm256_set1_ps(-0.0));
        acc = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(token_sums8(&msum)),
            _mm256_mul_ps(neg, dx),
            acc,
        );
    }
    let mut o = [0f32; LANES];
    // SAFETY: 8 floats.
    unsafe { _mm256_storeu_ps(o.as_mut_ptr(), acc) };
    o
}

/// Asks, into L2, for the super-block at `at + r * stride` of rows `r` in
/// `8..16` (the next pass's or tile's rows, same block): a row-major matrix
/// read 8 rows at a time is 8 short streams, which the hardware prefetcher
/// follows poorly. With it the 1B at one token (memory-bound) is level
/// with the row kernel (34.0 against 33.8 t/s); a sweep of the tile's bytes
/// 32 KiB ahead, as the 16-row kernels ask, lost 6-8% (`docs/benchmarks.md`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
fn prefetch_next_tile(at: *const u8, stride: usize) {
    for r in 0..LANES {
        let next = at.wrapping_add((r + LANES) * stride);
        for line in (0..BYTES).step_by(64) {
            // A hint only: the address may lie past the matrix (never read).
            _mm_prefetch::<_MM_HINT_T1>(next.wrapping_add(line) as *const i8);
        }
    }
}
