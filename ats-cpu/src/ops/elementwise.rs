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

/// `out = silu(gate) * up`.
pub fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = silu(g) * u;
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
        let mut out = [0.0; 2];
        swiglu(&[1.0, 0.0], &[2.0, 3.0], &mut out);
        assert_eq!(out, [2.0 * silu(1.0), 0.0]);
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
