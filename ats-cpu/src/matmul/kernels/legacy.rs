//! Kernels shared by the 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1,
//! Q8_0) against 8-bit activations.
//!
//! A weight block decodes to `w_k = d * q_k + c`: integer `q_k` (0..=31, or
//! -128..=127 for Q8_0) and a per-block constant `c` (`-8d`, `-16d`, the min
//! `m`, or none). An activation block is `x_k = dx * qx_k` with
//! `s = dx * sum(qx)`, so `sum_k w_k x_k = d * dx * sum(q_k qx_k) + c * s`:
//! an exact integer dot product, one scale and one correction per block, as
//! ggml computes it.

use crate::matmul::acts::{ActFormat, QuantActs};

/// A 32-element block format.
pub(super) trait LegacyBlock {
    /// Bytes per block.
    const BYTES: usize;
    /// The activation format its kernels use.
    const ACTS: ActFormat;
    /// Whether the integer values are signed (Q8_0) rather than unsigned.
    const SIGNED: bool;
    /// Whether blocks carry a correction `c` (all but Q8_0).
    const HAS_C: bool;

    /// Scale `d` and correction `c` of `block`.
    fn scales(block: &[u8]) -> (f32, f32);
    /// The 32 integer values of `block`.
    fn values(block: &[u8]) -> [i32; 32];

    /// The 32 values of the block at `p` as bytes (unsigned, or signed if [`Self::SIGNED`]).
    ///
    /// # Safety
    /// The CPU must support AVX2/FMA/F16C and `p` must point to a whole block.
    #[cfg(target_arch = "x86_64")]
    unsafe fn unpack_avx2(p: *const u8) -> std::arch::x86_64::__m256i;

    /// [`Self::scales`] with F16C.
    ///
    /// # Safety
    /// As [`Self::unpack_avx2`].
    #[cfg(target_arch = "x86_64")]
    unsafe fn scales_avx2(p: *const u8) -> (f32, f32);
}

/// Portable dot product of one weight row with token `t`.
pub(super) fn dot_scalar<B: LegacyBlock>(row: &[u8], acts: &QuantActs, t: usize) -> f32 {
    let (tp, nb) = (acts.t_pad, acts.blocks);
    let xq = &acts.qs[t * nb..(t + 1) * nb];
    let (mut acc, mut corr) = (0f32, 0f32);
    for (b, (blk, xb)) in row.chunks_exact(B::BYTES).zip(xq).enumerate() {
        let (d, c) = B::scales(blk);
        let isum: i32 = B::values(blk)
            .iter()
            .zip(&xb.0)
            .map(|(&w, &x)| w * x as i32)
            .sum();
        acc += d * acts.d[b * tp + t] * isum as f32;
        if B::HAS_C {
            corr += c * acts.s[b * tp + t];
        }
    }
    acc + corr
}

#[cfg(target_arch = "x86_64")]
pub(super) use avx2::tile as tile_avx2;

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::LegacyBlock;
    use crate::matmul::acts::QuantActs;
    use crate::matmul::kernels::simd::hsum;

    /// Dot products of `MR` weight rows with tokens `t0..t0 + NR`.
    ///
    /// Every (row, token) pair runs the same instruction sequence whatever
    /// `MR` and `NR` are, so results do not depend on the tiling.
    /// `prefetch` (bytes, 0 for none) is how far ahead of each row to ask
    /// for the cache lines of the next tile while this one computes.
    ///
    /// # Safety
    /// The CPU must support AVX2/FMA/F16C; each `rows[i]` must point to
    /// `acts.blocks` whole blocks; `t0 + NR <= acts.t_pad`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::matmul::kernels) unsafe fn tile<
        B: LegacyBlock,
        const MR: usize,
        const NR: usize,
    >(
        rows: [*const u8; MR],
        acts: &QuantActs,
        t0: usize,
        prefetch: usize,
        out: &mut [[f32; NR]; MR],
    ) {
        let (nb, tp) = (acts.blocks, acts.t_pad);
        debug_assert!(t0 + NR <= tp && acts.qs.len() == tp * nb);
        // With several tokens, the corrections first, in a short pass over the
        // block scales, so the main loop keeps its registers for the
        // accumulators; with one, inside the main loop (same FMA chain).
        let fused = NR == 1;
        let mut corr = [[0f32; NR]; MR];
        if B::HAS_C && !fused {
            for b in 0..nb {
                let xs = &acts.s[b * tp + t0..b * tp + t0 + NR];
                for (i, corr) in corr.iter_mut().enumerate() {
                    // SAFETY: block `b` of row `i` lies inside the row (caller).
                    let (_, c) = unsafe { B::scales_avx2(rows[i].add(b * B::BYTES)) };
                    for (cj, &s) in corr.iter_mut().zip(xs) {
                        *cj = c.mul_add(s, *cj);
                    }
                }
            }
        }
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); NR]; MR];
        let xq = acts.qs.as_ptr();
        for b in 0..nb {
            let xd = &acts.d[b * tp + t0..b * tp + t0 + NR];
            for i in 0..MR {
                // SAFETY: block `b` of row `i` lies inside the row (caller).
                let p = unsafe { rows[i].add(b * B::BYTES) };
                if prefetch != 0 {
                    // A hint only: the address may lie past the matrix (never read).
                    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(prefetch) as *const i8);
                }
                // SAFETY: as above; the CPU features are enabled here.
                let ((d, c), w) = unsafe { (B::scales_avx2(p), B::unpack_avx2(p)) };
                if B::HAS_C && fused {
                    corr[i][0] = c.mul_add(acts.s[b * tp + t0], corr[i][0]);
                }
                let wa = if B::SIGNED { _mm256_sign_epi8(w, w) } else { w };
                let scale: [f32; NR] = std::array::from_fn(|j| d * xd[j]);
                for j in 0..NR {
                    // SAFETY: token t0 + j < t_pad, so its block b is in `qs`;
                    // `Q8Block` is 32-byte aligned.
                    let x =
                        unsafe { _mm256_load_si256(xq.add((t0 + j) * nb + b) as *const __m256i) };
                    let x = if B::SIGNED { _mm256_sign_epi8(x, w) } else { x };
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(wa, x), ones);
                    acc[i][j] =
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(scale[j]), acc[i][j]);
                }
            }
        }
        for i in 0..MR {
            for j in 0..NR {
                out[i][j] = hsum(acc[i][j]) + corr[i][j];
            }
        }
    }
}
