//! RMSNorm and LayerNorm over rows (or groups of columns within rows).

/// `out = x / sqrt(mean(x^2) + eps) * w` over each `group`-wide slice.
pub fn rms_norm(x: &[f32], w: &[f32], out: &mut [f32], group: usize, eps: f32) {
    for (xs, os) in x.chunks_exact(group).zip(out.chunks_exact_mut(group)) {
        let ss = sum_of_squares(xs);
        let scale = 1.0 / ((ss / group as f64) as f32 + eps).sqrt();
        for ((o, &v), &g) in os.iter_mut().zip(xs).zip(w) {
            *o = v * scale * g;
        }
    }
}

/// Independent sums of squares in [`sum_of_squares`]: enough chains to hide
/// the f64 add's latency (one chain made a norm of 8 rows of 576 about 5 us,
/// 1.4% of a SmolLM2 round of 8 decode tokens, on the critical path).
const LANES: usize = 8;

/// The sum of `x^2`, accumulated in f64 (in f32 a wide row loses bits) over
/// [`LANES`] chains in a fixed order, so the result does not depend on the
/// thread count or the split.
fn sum_of_squares(x: &[f32]) -> f64 {
    let mut acc = [0f64; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += (v as f64) * (v as f64);
        }
    }
    for (a, &v) in acc.iter_mut().zip(chunks.remainder()) {
        *a += (v as f64) * (v as f64);
    }
    let [a0, a1, a2, a3, a4, a5, a6, a7] = acc;
    ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))
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
    fn sum_of_squares_matches_a_sequential_sum() {
        for n in [0, 1, 7, 8, 9, 576, 2049] {
            let x: Vec<f32> = (0..n)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.37)
                .collect();
            let seq: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
            let got = sum_of_squares(&x);
            assert!((got - seq).abs() <= seq * 1e-14, "{n}: {got} vs {seq}");
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
