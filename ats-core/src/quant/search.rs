//! The searches that pick a sub-block's scale (and min) for the K-quants.
//!
//! Each fits `x ≈ scale * level (+ min)` over one sub-block by trying a small
//! set of candidate scales around the naive `range / levels`, re-deriving the
//! best scale (and min) of each candidate's levels by weighted least squares,
//! and keeping the candidate with the smallest weighted error. They follow
//! ggml's reference quantisers step for step, in the same f32 operation
//! order, so that ATS writes the same bytes as `llama-quantize` (without an
//! importance matrix) wherever the arithmetic allows.
//!
//! All loops are over fixed-size arrays and every level is clamped before it
//! is used, so NaN or infinite inputs give garbage levels, never a panic.

/// Below this magnitude a sub-block is treated as all zero.
pub(super) const GROUP_MAX_EPS: f32 = 1e-15;

/// Rounds to the nearest integer, ties to even, for `|x| < 2^22`.
///
/// Adding 1.5 * 2^23 moves `x` into the binade where one ulp is 1, so the
/// FPU's own rounding does the work and the integer sits in the low mantissa
/// bits; unlike `round_ties_even` this needs no SSE4.1 and vectorises. Out of
/// range (or NaN) inputs give an unspecified value.
#[inline(always)]
pub(super) fn nearest_int(x: f32) -> i32 {
    ((x + 12_582_912.0).to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// Fits `x ≈ scale * L - min_out` with `L` in `0..=nmax` and `min_out >= 0`
/// (ggml's `make_qkx2_quants`). The first guess maps the sub-block's minimum
/// (never above 0) to level 0 and its maximum to `nmax`. Then for `k` in
/// `0..=nstep` the inverse scale `(nmax + rmin + k * rdelta) / (max - min)`
/// gives levels, whose weighted least-squares scale and min are kept when
/// they lower the weighted error (squared, or absolute with `use_mad`).
/// `min` is the best candidate's min so far, so later candidates are taken
/// against it; ggml does the same, and the bytes depend on it. Returns
/// `(scale, min_out)`; `levels` gets `L`.
#[allow(clippy::too_many_arguments)]
pub(super) fn fit_scale_min<const N: usize>(
    x: &[f32; N],
    w: &[f32; N],
    nmax: i32,
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
    levels: &mut [u8; N],
) -> (f32, f32) {
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = w[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..N {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        levels.fill(0);
        return (0.0, -min);
    }
    let err = |d: f32| if use_mad { d.abs() } else { d * d };
    let nmaxf = nmax as f32;
    let iscale = nmaxf / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..N {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        levels[i] = l as u8;
        best_error += w[i] * err(scale * l as f32 + min - x[i]);
    }
    let mut aux = [0u8; N];
    for step in 0..=nstep {
        // `min` moves to each accepted candidate's fitted min, and the
        // following candidates are taken against it.
        let iscale = (rmin + rdelta * step as f32 + nmaxf) / (max - min);
        // Levels first (independent, so the compiler can vectorise), then
        // the sums in ggml's order.
        for i in 0..N {
            aux[i] = nearest_int(iscale * (x[i] - min)).clamp(0, nmax) as u8;
        }
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..N {
            let l = f32::from(aux[i]);
            let wl = w[i] * l;
            sum_l += wl;
            sum_l2 += wl * l;
            sum_xl += wl * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..N {
                cur_error += w[i] * err(this_scale * f32::from(aux[i]) + this_min - x[i]);
            }
            if cur_error < best_error {
                *levels = aux;
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Fits `x ≈ scale * (L - nmax)` with `L` in `0..2 * nmax`, weighting each
/// element by `x²` (ggml's `make_qx_quants` with its `rmse_type` 1 and no
/// importance weights): the element of largest magnitude sets the naive
/// scale, 18 candidates within ±0.9 levels of it are tried, and the best
/// least-squares scale wins. Returns the scale (0 for an all-zero sub-block,
/// whose levels are then 0).
pub(super) fn fit_symmetric<const N: usize>(x: &[f32; N], nmax: i32, levels: &mut [u8; N]) -> f32 {
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let weight = x.map(|v| v * v);
    // Levels for one inverse scale, and their sums Σw·x·l and Σw·l².
    let fit = |iscale: f32, out: &mut [u8; N]| {
        let mut l = [0i32; N];
        for i in 0..N {
            l[i] = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        }
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for i in 0..N {
            let lf = l[i] as f32;
            sumlx += weight[i] * x[i] * lf;
            suml2 += weight[i] * lf * lf;
            out[i] = (l[i] + nmax) as u8;
        }
        (sumlx, suml2)
    };
    let (sumlx, suml2) = fit(-nmaxf / max, levels);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    let mut aux = [0u8; N];
    for step in (-9..=9).filter(|&s| s != 0) {
        let iscale = -(nmaxf + 0.1 * step as f32) / max;
        let (sumlx, suml2) = fit(iscale, &mut aux);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            *levels = aux;
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Fits `x ≈ scale * (L - nmax)` with `L` in `0..2 * nmax` for Q3_K (ggml's
/// `make_q3_quants` with its rmse search): starts from the naive scale of the
/// largest element, then for up to 5 rounds moves single levels to where the
/// `x²`-weighted least-squares scale of the others puts them, keeping each
/// move that improves the fit. Returns the scale (0 and levels 0 for an
/// all-zero sub-block).
pub(super) fn fit_q3<const N: usize>(x: &[f32; N], nmax: i32, levels: &mut [u8; N]) -> f32 {
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut l = [0i32; N];
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for i in 0..N {
        l[i] = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        let w = x[i] * x[i];
        let lf = l[i] as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    for _ in 0..5 {
        let mut changed = false;
        for i in 0..N {
            let w = x[i] * x[i];
            let li = l[i] as f32;
            let mut slx = sumlx - w * x[i] * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = nearest_int(x[i] * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != l[i] {
                    let nl = new_l as f32;
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l[i] = new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    for i in 0..N {
        levels[i] = (l[i] + nmax) as u8;
    }
    if suml2 > 0.0 { sumlx / suml2 } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_ties_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(-2.5), -2);
        assert_eq!(nearest_int(-2.6), -3);
        assert_eq!(nearest_int(4_194_303.0), 4_194_303);
        assert_eq!(nearest_int(-4_194_303.0), -4_194_303);
        // No panic outside the range.
        let _ = (
            nearest_int(f32::NAN),
            nearest_int(f32::INFINITY),
            nearest_int(-1e30),
        );
    }

    #[test]
    fn scale_min_recovers_an_exact_grid() {
        // x = 0.5 * L - 1.5 with L cycling 0..=15: the fit must be exact.
        let x: [f32; 32] = std::array::from_fn(|i| 0.5 * (i % 16) as f32 - 1.5);
        let w = [1.0; 32];
        let mut l = [0u8; 32];
        let (scale, min) = fit_scale_min(&x, &w, 15, -1.0, 0.1, 20, false, &mut l);
        assert!(
            (scale - 0.5).abs() < 1e-6 && (min - 1.5).abs() < 1e-6,
            "{scale} {min}"
        );
        for (i, &q) in l.iter().enumerate() {
            assert_eq!(q as usize, i % 16);
        }
    }

    #[test]
    fn symmetric_fits_recover_an_exact_grid() {
        // x = 0.25 * (L - 32) over a spread of levels including the extreme -32.
        let lv: [i32; 16] = [-32, -20, -7, -1, 0, 1, 3, 5, 8, 13, 21, 31, -3, 2, 9, -15];
        let x = lv.map(|l| 0.25 * l as f32);
        let mut l = [0u8; 16];
        let scale = fit_symmetric(&x, 32, &mut l);
        // The largest magnitude, -8, gives the naive inverse scale -32 / -8 = 4.
        assert_eq!(scale, 0.25);
        for (q, want) in l.iter().zip(lv) {
            assert_eq!(i32::from(*q) - 32, want);
        }
        let lv3: [i32; 16] = [-4, -3, -2, -1, 0, 1, 2, 3, 3, 2, 1, 0, -1, -2, -3, -4];
        let x3 = lv3.map(|l| 0.5 * l as f32);
        let mut l3 = [0u8; 16];
        let s3 = fit_q3(&x3, 4, &mut l3);
        for (q, want) in l3.iter().zip(lv3) {
            assert_eq!((i32::from(*q) - 4) as f32 * s3, 0.5 * want as f32);
        }
    }

    #[test]
    fn all_zero_sub_blocks() {
        let mut l = [7u8; 16];
        assert_eq!(fit_symmetric(&[0.0; 16], 32, &mut l), 0.0);
        assert_eq!(l, [0; 16]);
        assert_eq!(fit_q3(&[0.0; 16], 4, &mut l), 0.0);
        let (s, m) = fit_scale_min(&[0.0; 16], &[1.0; 16], 3, -0.5, 0.1, 15, true, &mut l);
        assert_eq!((s, m), (0.0, 0.0));
    }
}
