//! HF's `smart_resize`: the size an image is resized to before patching.

use super::PreprocessError;

/// The (height, width) HF's Qwen2-VL processor resizes an `height` x `width` image to.
///
/// Both sides become multiples of `factor` (patch * merge = 28): each side is rounded to the
/// nearest multiple (Python's `round`, ties to even). If that area exceeds `max_pixels`, both
/// sides are scaled by `sqrt(h*w / max_pixels)` and floored to a multiple (at least `factor`);
/// if it is below `min_pixels`, they are scaled up by `sqrt(min_pixels / (h*w))` and ceiled. The
/// float steps are the same f64 operations as the Python, so results agree exactly (for
/// `height * width < 2^53`). Errors: a zero side, `factor == 0`, `max_pixels == 0` (Python
/// divides by zero), and aspect ratios above 200 (as HF).
pub fn smart_resize(
    height: u32,
    width: u32,
    factor: u32,
    min_pixels: u64,
    max_pixels: u64,
) -> Result<(u32, u32), PreprocessError> {
    if height == 0 || width == 0 {
        return Err(PreprocessError::ZeroSized { width, height });
    }
    if factor == 0 || max_pixels == 0 {
        return Err(PreprocessError::Config(format!(
            "smart_resize needs factor ({factor}) and max_pixels ({max_pixels}) > 0"
        )));
    }
    let (h, w, f) = (f64::from(height), f64::from(width), f64::from(factor));
    let ratio = h.max(w) / h.min(w);
    if ratio > 200.0 {
        return Err(PreprocessError::AspectRatio {
            height,
            width,
            ratio,
        });
    }
    let fu = u128::from(factor);
    let mut h_bar = round_half_even_div(height, factor) * fu;
    let mut w_bar = round_half_even_div(width, factor) * fu;
    let area = u64::from(height) * u64::from(width);
    if h_bar * w_bar > u128::from(max_pixels) {
        let beta = (area as f64 / max_pixels as f64).sqrt();
        h_bar = fu.max((h / beta / f).floor() as u128 * fu);
        w_bar = fu.max((w / beta / f).floor() as u128 * fu);
    } else if h_bar * w_bar < u128::from(min_pixels) {
        let beta = (min_pixels as f64 / area as f64).sqrt();
        h_bar = (h * beta / f).ceil() as u128 * fu;
        w_bar = (w * beta / f).ceil() as u128 * fu;
    }
    let too_big = |v: u128| v == 0 || v > u128::from(u32::MAX);
    if too_big(h_bar) || too_big(w_bar) {
        return Err(PreprocessError::Config(format!(
            "smart_resize({height}, {width}) gives {h_bar}x{w_bar}, outside 1..=u32::MAX"
        )));
    }
    Ok((h_bar as u32, w_bar as u32))
}

/// `round(n / d)` with ties to even, as Python's `round` of the (exact at ties) float quotient.
fn round_half_even_div(n: u32, d: u32) -> u128 {
    let (q, r) = (u128::from(n / d), u128::from(n % d));
    let twice = 2 * r;
    let d = u128::from(d);
    if twice > d || (twice == d && q % 2 == 1) {
        q + 1
    } else {
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 3136;
    const MAX: u64 = 1_003_520;

    /// (h, w, min_pixels, max_pixels, expected (h, w)).
    type Case = (u32, u32, u64, u64, (u32, u32));

    /// Expected values from transformers 5.24's `smart_resize` (the same formula).
    #[rustfmt::skip]
    const TABLE: &[Case] = &[
        (168, 224, MIN, MAX, (168, 224)),     // fixtures: already aligned
        (252, 392, MIN, MAX, (252, 392)),
        (1440, 2560, MIN, MAX, (728, 1316)),  // scaled down to max_pixels, floored
        (2560, 1440, MIN, MAX, (1316, 728)),
        (20000, 20000, MIN, MAX, (980, 980)),
        (1080, 1920, MIN, MAX, (728, 1316)),
        (4032, 3024, MIN, MAX, (1148, 840)),
        (1003, 1000, MIN, MAX, (980, 980)),   // 1008*1008 > max: floor branch
        (1004, 1000, MIN, MAX, (980, 980)),
        (1024, 980, MIN, MAX, (1008, 980)),   // 1008*980 = 987840 <= max: kept
        (1036, 980, MIN, MAX, (1008, 952)),
        (1, 1, MIN, MAX, (56, 56)),           // scaled up to min_pixels, ceiled
        (10, 10, MIN, MAX, (56, 56)),
        (14, 14, MIN, MAX, (56, 56)),
        (45, 61, MIN, MAX, (56, 56)),
        (55, 57, MIN, MAX, (56, 56)),
        (56, 56, MIN, MAX, (56, 56)),         // exactly min_pixels: kept
        (28, 112, MIN, MAX, (28, 112)),       // area == min_pixels, not below
        (42, 42, MIN, MAX, (56, 56)),         // round(1.5) = 2
        (70, 70, MIN, MAX, (56, 56)),         // round(2.5) = 2 (ties to even)
        (98, 98, MIN, MAX, (112, 112)),       // round(3.5) = 4
        (1, 200, MIN, MAX, (28, 812)),        // ratio exactly 200 is allowed
        (7, 1400, MIN, MAX, (28, 812)),
        (3000, 15, MIN, MAX, (2996, 28)),
        (5000, 25, MIN, MAX, (5012, 28)),
        (1000, 200_000, MIN, MAX, (56, 14140)), // ratio 200, floor branch
        (480, 640, 200_704, MAX, (476, 644)), // qwen-vl-utils style min_pixels
        (100, 100, 3136, 3136, (56, 56)),
        (200, 300, 784, 3136, (28, 56)),      // floor branch may end below min_pixels
        (1000, 1000, 200_704, 200_704, (448, 448)),
    ];

    #[test]
    fn matches_hf_formula_table() {
        for &(h, w, min, max, want) in TABLE {
            let got = smart_resize(h, w, 28, min, max).unwrap();
            assert_eq!(got, want, "smart_resize({h}, {w}, 28, {min}, {max})");
            assert!(got.0.is_multiple_of(28) && got.1.is_multiple_of(28));
        }
    }

    #[test]
    fn refuses_extreme_aspect_and_zero_sides() {
        for (h, w) in [(1, 201), (201, 1), (1000, 200_001)] {
            let err = smart_resize(h, w, 28, MIN, MAX).unwrap_err();
            assert!(
                matches!(err, PreprocessError::AspectRatio { .. }),
                "{h}x{w}: {err}"
            );
        }
        for (h, w) in [(0, 5), (5, 0), (0, 0)] {
            let err = smart_resize(h, w, 28, MIN, MAX).unwrap_err();
            assert!(
                matches!(err, PreprocessError::ZeroSized { .. }),
                "{h}x{w}: {err}"
            );
        }
        assert!(matches!(
            smart_resize(5, 5, 0, MIN, MAX),
            Err(PreprocessError::Config(_))
        ));
        assert!(matches!(
            smart_resize(5, 5, 28, MIN, 0),
            Err(PreprocessError::Config(_))
        ));
    }

    #[test]
    fn round_half_even_matches_python_round() {
        // Python: [round(n / 28) for n in (13, 14, 15, 41, 42, 43, 70, 98)]
        let got: Vec<u128> = [13, 14, 15, 41, 42, 43, 70, 98]
            .map(|n| round_half_even_div(n, 28))
            .to_vec();
        assert_eq!(got, [0, 0, 1, 1, 2, 2, 2, 4]);
    }
}
