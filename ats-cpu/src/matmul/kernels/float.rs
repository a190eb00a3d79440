//! Kernels shared by the float weight types (F32, F16, BF16) against f32
//! activations: each weight is widened to f32 and multiplied in f32 (FMA).

/// A float element type of weights.
pub(super) trait FloatElem {
    /// Bytes per element.
    const BYTES: usize;

    /// Element `k` of `row` as f32.
    fn get(row: &[u8], k: usize) -> f32;

    /// The 8 elements at `p` as f32.
    ///
    /// # Safety
    /// The CPU must support AVX2/FMA/F16C and `p` must be valid for 8 elements.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8_avx2(p: *const u8) -> std::arch::x86_64::__m256;
}

/// Portable dot product of one weight row with one activation row, in
/// exactly the SIMD kernels' order: eight FMA chains over `k mod 8`, summed
/// `((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))`, then an FMA chain over
/// the tail, so that every instruction set gives the same bits.
pub(super) fn dot_scalar<E: FloatElem>(row: &[u8], x: &[f32]) -> f32 {
    let mut a = [0f32; 8];
    let main = x.len() / 8 * 8;
    for k in (0..main).step_by(8) {
        for (l, a) in a.iter_mut().enumerate() {
            *a = E::get(row, k + l).mul_add(x[k + l], *a);
        }
    }
    let h = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    let mut s = (h[0] + h[2]) + (h[1] + h[3]);
    for (k, &xk) in x.iter().enumerate().skip(main) {
        s = E::get(row, k).mul_add(xk, s);
    }
    s
}

#[cfg(target_arch = "x86_64")]
pub(super) use avx2::tile as tile_avx2;

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::FloatElem;
    use crate::matmul::kernels::simd::hsum;

    /// Dot products of `MR` weight rows with `NR` activation rows of `cols`
    /// values. Every pair runs the same sequence (8-lane FMA chain over the
    /// row, fixed-order lane sum, then the tail), whatever the tile shape.
    ///
    /// # Safety
    /// The CPU must support AVX2/FMA/F16C; every `rows[i]` must hold `cols`
    /// elements and every `xs[j]` `cols` floats. `prefetch` as in the legacy tile.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::matmul::kernels) unsafe fn tile<
        E: FloatElem,
        const MR: usize,
        const NR: usize,
    >(
        rows: [*const u8; MR],
        xs: [*const f32; NR],
        cols: usize,
        prefetch: usize,
        out: &mut [[f32; MR]; NR],
    ) {
        let main = cols / 8 * 8;
        let mut acc = [[_mm256_setzero_ps(); NR]; MR];
        for k in (0..main).step_by(8) {
            // SAFETY: k + 8 <= cols: inside every row (caller).
            let w: [__m256; MR] =
                std::array::from_fn(|i| unsafe { E::load8_avx2(rows[i].add(k * E::BYTES)) });
            if prefetch != 0 && (k * E::BYTES) % 64 < 8 * E::BYTES {
                for r in rows {
                    // A hint only: the address may lie past the matrix (never read).
                    _mm_prefetch::<_MM_HINT_T0>(
                        r.wrapping_add(k * E::BYTES + prefetch) as *const i8
                    );
                }
            }
            for j in 0..NR {
                // SAFETY: as above, for the activation rows.
                let x = unsafe { _mm256_loadu_ps(xs[j].add(k)) };
                for i in 0..MR {
                    acc[i][j] = _mm256_fmadd_ps(w[i], x, acc[i][j]);
                }
            }
        }
        for i in 0..MR {
            // SAFETY: the tail elements main..cols are inside the row.
            let row = unsafe { std::slice::from_raw_parts(rows[i], cols * E::BYTES) };
            for j in 0..NR {
                let mut s = hsum(acc[i][j]);
                for k in main..cols {
                    // SAFETY: k < cols.
                    s = E::get(row, k).mul_add(unsafe { *xs[j].add(k) }, s);
                }
                out[j][i] = s;
            }
        }
    }
}
