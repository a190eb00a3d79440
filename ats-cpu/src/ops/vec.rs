//! Small f32 vector primitives for the attention and element-wise kernels,
//! with an AVX2+FMA path chosen at run time and a portable path.

use std::sync::OnceLock;

use half::f16;

/// Whether the AVX2 paths (AVX2, FMA, F16C) run here.
pub(crate) fn has_avx2() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("fma")
                && std::is_x86_feature_detected!("f16c")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Whether the 512-bit attention kernels run here: the AVX2 paths, and
/// AVX-512 F.
pub(crate) fn has_avx512f() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            has_avx2() && std::is_x86_feature_detected!("avx512f")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// `sum a[i] * b[i]` (portable).
pub fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    // four partial sums, the same association as the SIMD path's lanes would not be;
    // tests compare with a tolerance
    let mut s = [0.0f32; 4];
    let n4 = a.len() / 4 * 4;
    for i in (0..n4).step_by(4) {
        for k in 0..4 {
            s[k] += a[i + k] * b[i + k];
        }
    }
    let mut t = (s[0] + s[1]) + (s[2] + s[3]);
    for i in n4..a.len() {
        t += a[i] * b[i];
    }
    t
}

/// `sum a[i] * b[i]`.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2 and FMA were detected at run time.
        return unsafe { avx2::dot(a, b) };
    }
    dot_scalar(a, b)
}

/// `y += alpha * x` (portable).
pub fn axpy_scalar(y: &mut [f32], alpha: f32, x: &[f32]) {
    for (yv, &xv) in y.iter_mut().zip(x) {
        *yv += alpha * xv;
    }
}

/// `y += alpha * x`.
#[inline]
pub fn axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
    debug_assert_eq!(y.len(), x.len());
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2 and FMA were detected at run time.
        return unsafe { avx2::axpy(y, alpha, x) };
    }
    axpy_scalar(y, alpha, x)
}

/// `dst[i] = src[i]` as f32 (portable).
pub fn f16_to_f32_scalar(src: &[f16], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = s.to_f32();
    }
}

/// `dst[i] = src[i]` as f32, for the shorter of the two. The `half` crate's
/// own slice conversion calls a detected-feature function per 8 values,
/// which took most of the time of a decode attention over an f16 cache.
#[inline]
pub fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2, FMA and F16C were detected at run time.
        return unsafe { avx2::f16_to_f32(src, dst) };
    }
    f16_to_f32_scalar(src, dst)
}

/// `y *= alpha`.
#[inline]
pub fn scale(y: &mut [f32], alpha: f32) {
    for v in y {
        *v *= alpha;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use half::f16;

    /// # Safety
    /// The CPU must support AVX2 and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
        let n = src.len().min(dst.len());
        let n8 = n / 8 * 8;
        let (ps, pd) = (src.as_ptr() as *const u16, dst.as_mut_ptr());
        let mut i = 0;
        while i < n8 {
            // SAFETY: i + 8 <= n, inside both slices (f16 is a u16 in memory).
            unsafe {
                let h = _mm_loadu_si128(ps.add(i) as *const __m128i);
                _mm256_storeu_ps(pd.add(i), _mm256_cvtph_ps(h));
            }
            i += 8;
        }
        for j in n8..n {
            dst[j] = src[j].to_f32();
        }
    }

    /// # Safety
    /// The CPU must support AVX2 and FMA; `b` is at least as long as `a`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let n16 = n / 16 * 16;
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let mut i = 0;
        while i < n16 {
            // SAFETY: i + 16 <= n, so both 8-lane loads stay inside the slices.
            unsafe {
                acc0 =
                    _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc0);
                acc1 = _mm256_fmadd_ps(
                    _mm256_loadu_ps(pa.add(i + 8)),
                    _mm256_loadu_ps(pb.add(i + 8)),
                    acc1,
                );
            }
            i += 16;
        }
        let acc = _mm256_add_ps(acc0, acc1);
        let hi = _mm256_extractf128_ps(acc, 1);
        let lo = _mm256_castps256_ps128(acc);
        let s4 = _mm_add_ps(hi, lo);
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        let s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
        let mut t = _mm_cvtss_f32(s1);
        for j in n16..n {
            t += a[j] * b[j];
        }
        t
    }

    /// # Safety
    /// The CPU must support AVX2 and FMA; `x` is at least as long as `y`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
        let n = y.len().min(x.len());
        let n8 = n / 8 * 8;
        let va = _mm256_set1_ps(alpha);
        let (py, px) = (y.as_mut_ptr(), x.as_ptr());
        let mut i = 0;
        while i < n8 {
            // SAFETY: i + 8 <= n, inside both slices; y is uniquely borrowed.
            unsafe {
                let r = _mm256_fmadd_ps(va, _mm256_loadu_ps(px.add(i)), _mm256_loadu_ps(py.add(i)));
                _mm256_storeu_ps(py.add(i), r);
            }
            i += 8;
        }
        for j in n8..n {
            y[j] += alpha * x[j];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simd_matches_scalar() {
        for n in [0, 1, 7, 8, 15, 16, 17, 64, 100] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let exact: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            assert!((dot(&a, &b) as f64 - exact).abs() < 1e-5, "n={n}");
            assert!((dot_scalar(&a, &b) as f64 - exact).abs() < 1e-5, "n={n}");
            let mut y1 = b.clone();
            let mut y2 = b.clone();
            axpy(&mut y1, 0.5, &a);
            axpy_scalar(&mut y2, 0.5, &a);
            for (p, q) in y1.iter().zip(&y2) {
                assert!((p - q).abs() < 1e-6);
            }
            // conversion is exact either way
            let h: Vec<f16> = a.iter().map(|&x| f16::from_f32(x * 1000.0)).collect();
            let (mut f1, mut f2) = (vec![0f32; n], vec![0f32; n]);
            f16_to_f32(&h, &mut f1);
            f16_to_f32_scalar(&h, &mut f2);
            assert_eq!(f1, f2, "n={n}");
        }
    }
}
