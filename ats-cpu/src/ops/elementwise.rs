//! Element-wise operations.

/// `out = a + b`.
pub fn add(a: &[f32], b: &[f32], out: &mut [f32]) {
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = x + y;
    }
}

/// `out = a * b`.
pub fn mul(a: &[f32], b: &[f32], out: &mut [f32]) {
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = x * y;
    }
}

/// `silu(x) = x * sigmoid(x)`.
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// `out = silu(gate) * up`: eight lanes at a time where AVX2 is present
/// (within a few ulp of [`swiglu_scalar`]; every element takes the same
/// path wherever it lies, so a token's values do not depend on the batch).
pub fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::vec::has_avx2() {
        // SAFETY: AVX2/FMA detected.
        return unsafe { avx2::swiglu(gate, up, out) };
    }
    swiglu_scalar(gate, up, out)
}

/// [`swiglu`], portable.
pub fn swiglu_scalar(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = silu(g) * u;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use crate::ops::exp::avx2::exp8;

    /// `silu(g) * u` of eight lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn swiglu8(g: __m256, u: __m256) -> __m256 {
        let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
        let s = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0), e));
        _mm256_mul_ps(s, u)
    }

    /// [`super::swiglu`] with AVX2; the tail goes through a zero-padded
    /// buffer so that it takes the same path.
    #[target_feature(enable = "avx2,fma")]
    pub fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
        let n = out.len().min(gate.len()).min(up.len());
        let body = n - n % 8;
        for i in (0..body).step_by(8) {
            // SAFETY: i + 8 <= body <= the length of each slice.
            unsafe {
                let g = _mm256_loadu_ps(gate.as_ptr().add(i));
                let u = _mm256_loadu_ps(up.as_ptr().add(i));
                _mm256_storeu_ps(out.as_mut_ptr().add(i), swiglu8(g, u));
            }
        }
        if body < n {
            let (mut g, mut u, mut o) = ([0f32; 8], [0f32; 8], [0f32; 8]);
            g[..n - body].copy_from_slice(&gate[body..n]);
            u[..n - body].copy_from_slice(&up[body..n]);
            // SAFETY: three 8-float stack buffers.
            unsafe {
                let r = swiglu8(_mm256_loadu_ps(g.as_ptr()), _mm256_loadu_ps(u.as_ptr()));
                _mm256_storeu_ps(o.as_mut_ptr(), r);
            }
            out[body..n].copy_from_slice(&o[..n - body]);
        }
    }
}

/// gpt-oss's clamped SwiGLU: `g = min(gate, limit)`, `u = clamp(up, -limit,
/// limit)`, `out = g * sigmoid(alpha g) * (u + 1)`. NaN stays NaN (as
/// PyTorch's clamp keeps it), rather than becoming the bound.
pub fn swiglu_oai(gate: &[f32], up: &[f32], alpha: f32, limit: f32, out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        let g = if g > limit { limit } else { g };
        let u = if u > limit {
            limit
        } else if u < -limit {
            -limit
        } else {
            u
        };
        *o = g / (1.0 + (-alpha * g).exp()) * (u + 1.0);
    }
}

/// Exact GELU, `x * Phi(x)`.
pub fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x / std::f32::consts::SQRT_2))
}

/// GELU, tanh approximation.
pub fn gelu_tanh(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // sqrt(2/pi)
    0.5 * x * (1.0 + (C * (x + 0.044715 * x * x * x)).tanh())
}

/// Squared ReLU, `max(x, 0)^2`.
pub fn relu_sqr(x: f32) -> f32 {
    let r = x.max(0.0);
    r * r
}

/// QuickGELU, `x * sigmoid(1.702 x)`.
pub fn gelu_quick(x: f32) -> f32 {
    x / (1.0 + (-1.702 * x).exp())
}

/// erf in f64 (Abramowitz-Stegun 7.1.26 is too coarse for a 5e-4 tolerance;
/// this uses the complementary error function's continued-fraction-free
/// Chebyshev fit from Numerical Recipes, relative error < 1.2e-7).
pub fn erf(x: f32) -> f32 {
    let z = (x as f64).abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    let v = 1.0 - r;
    (if x >= 0.0 { v } else { -v }) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        for (x, want) in [
            (0.0f32, 0.0f64),
            (0.5, 0.520_499_877_8),
            (1.0, 0.842_700_792_9),
            (-2.0, -0.995_322_265),
        ] {
            assert!((erf(x) as f64 - want).abs() < 2e-7, "erf({x})");
        }
    }

    #[test]
    fn activations() {
        assert!((silu(1.0) - 0.731_058_6).abs() < 1e-6);
        assert!((gelu_erf(1.0) - 0.841_344_7).abs() < 1e-6);
        assert!((gelu_tanh(1.0) - 0.841_192).abs() < 1e-5);
        assert!((gelu_quick(1.0) - 0.845_795_1).abs() < 1e-5);
        assert_eq!(
            (relu_sqr(-2.0), relu_sqr(0.0), relu_sqr(3.0)),
            (0.0, 0.0, 9.0)
        );
        let mut out = [0.0; 2];
        swiglu(&[1.0, 0.0], &[2.0, 3.0], &mut out);
        assert!(
            (out[0] - 2.0 * silu(1.0)).abs() < 1e-6 && out[1] == 0.0,
            "{out:?}"
        );
    }

    #[test]
    fn swiglu_matches_the_portable_one_and_ignores_position() {
        let n = 203; // a tail of 3 after 25 vectors
        let gate: Vec<f32> = (0..n).map(|i| (i as f32 - 101.0) * 0.93).collect();
        let up: Vec<f32> = (0..n).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
        let (mut fast, mut slow) = (vec![0f32; n], vec![0f32; n]);
        swiglu(&gate, &up, &mut fast);
        swiglu_scalar(&gate, &up, &mut slow);
        for (i, (a, b)) in fast.iter().zip(&slow).enumerate() {
            // below -88 libm's exp overflows to infinity (silu -0) and the
            // vector one saturates at 2.2e38 (silu about -1e-36)
            let tol = 4.0 * f32::EPSILON * b.abs() + 1e-30;
            assert!(
                (a - b).abs() <= tol,
                "{i}: g {} u {}: {a} vs {b}",
                gate[i],
                up[i]
            );
        }
        // each value is the same alone as in the middle or the tail of a run
        for i in [0, 9, 100, 200, 202] {
            let mut one = [0f32];
            swiglu(&gate[i..=i], &up[i..=i], &mut one);
            assert_eq!(one[0].to_bits(), fast[i].to_bits(), "{i}");
        }
        let mut nan = [0f32; 9];
        swiglu(&[f32::NAN; 9], &[1.0; 9], &mut nan);
        assert!(nan.iter().all(|x| x.is_nan()));
    }

    #[test]
    fn clamped_swiglu_clamps_gate_above_and_up_both_ways() {
        let glu = |g: f32| g / (1.0 + (-1.702 * g).exp());
        let gate = [1.0f32, 9.0, -9.0, 1.0, f32::NAN];
        let up = [2.0f32, 0.5, 0.5, -20.0, 1.0];
        let mut out = [0.0; 5];
        swiglu_oai(&gate, &up, 1.702, 7.0, &mut out);
        assert_eq!(out[0], glu(1.0) * 3.0);
        assert_eq!(out[1], glu(7.0) * 1.5); // gate clamped to 7
        assert_eq!(out[2], glu(-9.0) * 1.5); // not clamped below
        assert_eq!(out[3], glu(1.0) * -6.0); // up clamped to -7
        assert!(out[4].is_nan());
    }
}
