//! RMSNorm and LayerNorm over rows (or groups of columns within rows).

/// `out = x / sqrt(mean(x^2) + eps) * w` over each `group`-wide slice.
pub fn rms_norm(x: &[f32], w: &[f32], out: &mut [f32], group: usize, eps: f32) {
    for (xs, os) in x.chunks_exact(group).zip(out.chunks_exact_mut(group)) {
        // accumulate in f64: the sum of squares of a wide row loses bits in f32
        let ss: f64 = xs.iter().map(|&v| (v as f64) * (v as f64)).sum();
        let scale = 1.0 / ((ss / group as f64) as f32 + eps).sqrt();
        for ((o, &v), &g) in os.iter_mut().zip(xs).zip(w) {
            *o = v * scale * g;
        }
    }
}

/// `out = (x - mean) / sqrt(var + eps) * w + b` over each row of `cols`.
pub fn layer_norm(x: &[f32], w: &[f32], b: &[f32], out: &mut [f32], cols: usize, eps: f32) {
    for (xs, os) in x.chunks_exact(cols).zip(out.chunks_exact_mut(cols)) {
        let mean = xs.iter().map(|&v| v as f64).sum::<f64>() / cols as f64;
        let var = xs.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / cols as f64;
        let inv = 1.0 / (var as f32 + eps).sqrt();
        let mean = mean as f32;
        for (((o, &v), &g), &bb) in os.iter_mut().zip(xs).zip(w).zip(b) {
            *o = (v - mean) * inv * g + bb;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_per_group() {
        let x = [1.0, 2.0, 3.0, 4.0];
        let mut out = [0.0; 4];
        rms_norm(&x, &[1.0, 2.0], &mut out, 2, 0.0);
        let r0 = (2.5f32).sqrt();
        let r1 = (12.5f32).sqrt();
        let want = [1.0 / r0, 4.0 / r0, 3.0 / r1, 8.0 / r1];
        for (a, b) in out.iter().zip(want) {
            assert!((a - b).abs() < 1e-6);
        }
    }

    #[test]
    fn layer_norm_centres_and_scales() {
        let x = [1.0, 2.0, 3.0];
        let mut out = [0.0; 3];
        layer_norm(&x, &[1.0; 3], &[0.5; 3], &mut out, 3, 0.0);
        let s = (2.0f32 / 3.0).sqrt();
        for (a, b) in out.iter().zip([-1.0 / s + 0.5, 0.5, 1.0 / s + 0.5]) {
            assert!((a - b).abs() < 1e-6, "{a} {b}");
        }
    }
}
