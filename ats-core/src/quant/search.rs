//! The searches that pick a sub-block's scale (and min) for the K-quants.
//!
//! Each fits `x ≈ scale * level (+ min)` over a sub-block by trying a small
//! set of candidate scales around the naive `range / levels`, re-deriving the
//! best scale (and min) of each candidate's levels by weighted least squares,
//! and keeping the candidate with the smallest weighted error. They follow
//! ggml's reference quantisers step for step, in the same f32 operation
//! order, so ATS writes the same bytes as `llama-quantize` without an
//! importance matrix (the fixture tests check it on every weight of the
//! `llama_quant` models). Where a search is the hot spot, independent
//! sub-blocks or candidates run side by side as SIMD lanes, each lane still
//! doing ggml's scalar sequence.
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

/// 1.5 * 2^23: adding it rounds an f32 below 2^22 in magnitude to an integer.
const ROUND_MAGIC: f32 = 12_582_912.0;

/// `nearest_int(v).clamp(lo, hi)` as an f32, for integer bounds: clamping
/// first and rounding by [`ROUND_MAGIC`] gives the same value for any finite
/// `v`, with no round trip through the integer registers, so it vectorises.
#[inline(always)]
fn level(v: f32, lo: f32, hi: f32) -> f32 {
    let v = if v > lo { v } else { lo };
    let v = if v < hi { v } else { hi };
    (v + ROUND_MAGIC) - ROUND_MAGIC
}

/// Fits `x ≈ scale * L - min_out` with `L` in `0..=nmax` and `min_out >= 0`
/// for `S` sub-blocks at once (ggml's `make_qkx2_quants`).
///
/// The sub-blocks are lanes: `x[i][s]` is element `i` of sub-block `s`, and
/// every lane runs ggml's scalar operations in ggml's order (so results are
/// bit-identical) while the lanes vectorise, which one sub-block's running
/// sums cannot.
///
/// Per sub-block: the first guess maps its minimum (never above 0) to level
/// 0 and its maximum to `nmax`. Then for `k` in `0..=nstep` the inverse scale
/// `(nmax + rmin + k * rdelta) / (max - min)` gives levels, whose weighted
/// least-squares scale and min are kept when they lower the weighted error
/// (absolute with `MAD`, else squared). `min` is the best candidate's min so
/// far, so later candidates are taken against it; ggml does the same, and
/// the bytes depend on it. Returns each sub-block's `(scale, min_out)`;
/// `levels[i][s]` gets `L`.
pub(super) fn fit_scale_min<const N: usize, const S: usize, const MAD: bool>(
    x: &[[f32; S]; N],
    w: &[[f32; S]; N],
    nmax: i32,
    (rmin, rdelta, nstep): (f32, f32, i32),
    levels: &mut [[u8; S]; N],
) -> ([f32; S], [f32; S]) {
    let err = |d: f32| if MAD { d.abs() } else { d * d };
    let nmaxf = nmax as f32;
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = w[0];
    let mut sum_x: [f32; S] = std::array::from_fn(|s| w[0][s] * x[0][s]);
    for i in 1..N {
        for s in 0..S {
            if x[i][s] < min[s] {
                min[s] = x[i][s];
            }
            if x[i][s] > max[s] {
                max[s] = x[i][s];
            }
            sum_w[s] += w[i][s];
            sum_x[s] += w[i][s] * x[i][s];
        }
    }
    for m in &mut min {
        if *m > 0.0 {
            *m = 0.0;
        }
    }
    // A flat sub-block has levels 0 and scale 0; its lane computes garbage
    // (a division by zero) that is replaced at the end.
    let flat: [bool; S] = std::array::from_fn(|s| max[s] == min[s]);

    let iscale: [f32; S] = std::array::from_fn(|s| nmaxf / (max[s] - min[s]));
    let mut scale = iscale.map(|v| 1.0 / v);
    let mut best_error = [0.0f32; S];
    let mut lv = [[0.0f32; S]; N];
    for i in 0..N {
        for s in 0..S {
            let l = level(iscale[s] * (x[i][s] - min[s]), 0.0, nmaxf);
            lv[i][s] = l;
            best_error[s] += w[i][s] * err(scale[s] * l + min[s] - x[i][s]);
        }
    }
    let mut best_lv = lv;

    for step in 0..=nstep {
        let iscale: [f32; S] =
            std::array::from_fn(|s| (rmin + rdelta * step as f32 + nmaxf) / (max[s] - min[s]));
        let (mut sum_l, mut sum_l2, mut sum_xl) = ([0.0f32; S], [0.0f32; S], [0.0f32; S]);
        for i in 0..N {
            for s in 0..S {
                let l = level(iscale[s] * (x[i][s] - min[s]), 0.0, nmaxf);
                lv[i][s] = l;
                let wl = w[i][s] * l;
                sum_l[s] += wl;
                sum_l2[s] += wl * l;
                sum_xl[s] += wl * x[i][s];
            }
        }
        let mut this_scale = [0.0f32; S];
        let mut this_min = [0.0f32; S];
        let mut valid = [false; S];
        for s in 0..S {
            let det = sum_w[s] * sum_l2[s] - sum_l[s] * sum_l[s];
            valid[s] = det > 0.0;
            this_scale[s] = (sum_w[s] * sum_xl[s] - sum_x[s] * sum_l[s]) / det;
            this_min[s] = (sum_l2[s] * sum_x[s] - sum_l[s] * sum_xl[s]) / det;
            if this_min[s] > 0.0 {
                this_min[s] = 0.0;
                this_scale[s] = sum_xl[s] / sum_l2[s];
            }
        }
        let mut cur_error = [0.0f32; S];
        for i in 0..N {
            for s in 0..S {
                cur_error[s] += w[i][s] * err(this_scale[s] * lv[i][s] + this_min[s] - x[i][s]);
            }
        }
        let accept: [bool; S] =
            std::array::from_fn(|s| !flat[s] && valid[s] && cur_error[s] < best_error[s]);
        if !accept.contains(&true) {
            continue;
        }
        for s in 0..S {
            if accept[s] {
                best_error[s] = cur_error[s];
                scale[s] = this_scale[s];
                min[s] = this_min[s];
            }
        }
        for (b, l) in best_lv.iter_mut().zip(&lv) {
            for s in 0..S {
                b[s] = if accept[s] { l[s] } else { b[s] };
            }
        }
    }
    for (out, b) in levels.iter_mut().zip(&best_lv) {
        for s in 0..S {
            out[s] = if flat[s] { 0 } else { b[s] as u8 };
        }
    }
    let scale = std::array::from_fn(|s| if flat[s] { 0.0 } else { scale[s] });
    (scale, min.map(|m| -m))
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
    let (lo, hi) = (-nmaxf, nmaxf - 1.0);
    // Levels for one inverse scale, and their sums Σw·x·l and Σw·l².
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for i in 0..N {
            let l = level(iscale * x[i], lo, hi);
            sumlx += weight[i] * x[i] * l;
            suml2 += weight[i] * l * l;
        }
        (sumlx, suml2)
    };
    let mut best_iscale = -nmaxf / max;
    let (sumlx, suml2) = sums(best_iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;

    // The 18 other candidates are independent: sum them all in lanes, then
    // pick in ggml's order.
    const STEPS: [i32; 18] = [
        -9, -8, -7, -6, -5, -4, -3, -2, -1, 1, 2, 3, 4, 5, 6, 7, 8, 9,
    ];
    let iscale = STEPS.map(|s| -(nmaxf + 0.1 * s as f32) / max);
    let (mut sumlx, mut suml2) = ([0.0f32; 18], [0.0f32; 18]);
    for i in 0..N {
        let wx = weight[i] * x[i];
        for c in 0..18 {
            let l = level(iscale[c] * x[i], lo, hi);
            sumlx[c] += wx * l;
            suml2[c] += weight[i] * l * l;
        }
    }
    for c in 0..18 {
        if suml2[c] > 0.0 && sumlx[c] * sumlx[c] > best * suml2[c] {
            best_iscale = iscale[c];
            scale = sumlx[c] / suml2[c];
            best = scale * sumlx[c];
        }
    }
    for (l, &v) in levels.iter_mut().zip(x) {
        *l = (level(best_iscale * v, lo, hi) + nmaxf) as u8;
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
        // Lane 0: x = 0.5 * L - 1.5 with L cycling 0..=15, lane 1 the same
        // shifted up by 1.5 (min 0): both fits must be exact.
        let x: [[f32; 2]; 32] = std::array::from_fn(|i| {
            let v = 0.5 * (i % 16) as f32;
            [v - 1.5, v]
        });
        let w = [[1.0; 2]; 32];
        let mut l = [[0u8; 2]; 32];
        let (scale, min) = fit_scale_min::<32, 2, false>(&x, &w, 15, (-1.0, 0.1, 20), &mut l);
        assert_eq!(scale, [0.5, 0.5]);
        assert_eq!(min, [1.5, 0.0]);
        for (i, q) in l.iter().enumerate() {
            assert_eq!(*q, [(i % 16) as u8; 2]);
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
        let mut l2 = [[7u8; 2]; 16];
        let (s, m) = fit_scale_min::<16, 2, true>(
            &[[0.0, -1.0]; 16],
            &[[1.0; 2]; 16],
            3,
            (-0.5, 0.1, 15),
            &mut l2,
        );
        // Flat sub-blocks: scale 0, levels 0, and the min is the value (or 0).
        assert_eq!((s, m), ([0.0, 0.0], [0.0, 1.0]));
        assert_eq!(l2, [[0; 2]; 16]);
    }
}
