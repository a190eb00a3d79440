//! `exp` of eight f32 lanes (AVX2), for the attention softmax and the gated
//! activations: libm's scalar `expf` per element was the largest cost of
//! SwiGLU in batched decode. Sixteen lanes (AVX-512 F) for the 512-bit
//! attention kernels, with the same operations, so the same bits per lane.

/// ln of the smallest normal f32: below it the result is 0.
#[cfg(target_arch = "x86_64")]
const LO: f32 = -87.336_54;
/// The largest argument taken (the result stays finite).
#[cfg(target_arch = "x86_64")]
const HI: f32 = 88.3;
/// ln 2 in two parts for the Cody-Waite reduction: `r = x - n ln 2`.
#[cfg(target_arch = "x86_64")]
const LN2: [f32; 2] = [0.693_359_4, -2.121_944_4e-4];
/// The polynomial's coefficients, highest degree first (Cephes' expf).
#[cfg(target_arch = "x86_64")]
const POLY: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    5e-1,
];

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{HI, LN2, LO, POLY};

    /// `exp(x)` for eight lanes: Cody-Waite reduction by ln 2 and a degree-5
    /// polynomial (Cephes' expf), within 2 ulp of the libm result for the
    /// arguments attention and the gated activations give (|x| <= 88); 0 where
    /// the result is not a normal f32, and at most about 2.2e38 (no infinity).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn exp8(x: __m256) -> __m256 {
        let lo = _mm256_set1_ps(LO);
        let under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
        let x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(HI));
        let fx = _mm256_round_ps(
            _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
        );
        let r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(LN2[0]), x);
        let r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(LN2[1]), r);
        let mut p = _mm256_set1_ps(POLY[0]);
        for c in &POLY[1..] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
        }
        let r2 = _mm256_mul_ps(r, r);
        let y = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0));
        let pow2 = _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)),
            23,
        ));
        _mm256_andnot_ps(under, _mm256_mul_ps(y, pow2))
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512 {
    use std::arch::x86_64::*;

    use super::{HI, LN2, LO, POLY};

    /// [`super::avx2::exp8`] for sixteen lanes: each lane's operations are
    /// the same, so are its bits.
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub fn exp16(x: __m512) -> __m512 {
        let lo = _mm512_set1_ps(LO);
        let under = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, lo);
        let x = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(HI));
        // round to nearest, no exceptions: `_mm256_round_ps`'s mode
        let fx = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
        );
        let r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(LN2[0]), x);
        let r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(LN2[1]), r);
        let mut p = _mm512_set1_ps(POLY[0]);
        for c in &POLY[1..] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(*c));
        }
        let r2 = _mm512_mul_ps(r, r);
        let y = _mm512_add_ps(_mm512_fmadd_ps(p, r2, r), _mm512_set1_ps(1.0));
        let pow2 = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(
            _mm512_cvtps_epi32(fx),
            _mm512_set1_epi32(127),
        )));
        _mm512_maskz_mov_ps(!under, _mm512_mul_ps(y, pow2))
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use std::arch::x86_64::*;

    use super::avx2::exp8;

    #[test]
    fn exp8_is_within_two_ulp() {
        if !crate::ops::vec::has_avx2() {
            eprintln!("no AVX2: the vector exp is not used here");
            return;
        }
        let mut worst = 0f32;
        for i in 0..400_000 {
            let x = -90.0 + i as f32 * 0.000_445;
            let mut out = [0f32; 8];
            // SAFETY: AVX2/FMA detected above.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), exp8(_mm256_set1_ps(x))) };
            let want = (x as f64).exp();
            if want < f32::MIN_POSITIVE as f64 {
                assert!(out[0] < 1.2e-38, "exp({x}) = {}", out[0]);
                continue;
            }
            if x > 88.3 {
                assert!(out[0].is_finite() && out[0] > 2e38, "exp({x}) = {}", out[0]);
                continue;
            }
            let ulp = ((out[0] as f64 - want).abs()
                / (want as f32).abs() as f64
                / f32::EPSILON as f64) as f32;
            worst = worst.max(ulp);
        }
        assert!(worst <= 2.0, "worst {worst} ulp");
    }

    #[test]
    fn exp16_gives_exp8_bits_in_every_lane() {
        if !crate::ops::vec::has_avx512f() {
            eprintln!("no AVX-512 F: exp16 is not used here");
            return;
        }
        let xs: Vec<f32> = (0..48_000)
            .map(|i| -100.0 + i as f32 * 0.004_17)
            .chain([f32::NEG_INFINITY, -0.0, 0.0, 88.3, 89.0, f32::NAN])
            .collect();
        for c in xs.chunks(16) {
            let mut x = [0f32; 16];
            x[..c.len()].copy_from_slice(c);
            let (mut wide, mut narrow) = ([0f32; 16], [0f32; 16]);
            // SAFETY: AVX-512 F (and with it AVX2/FMA) detected above.
            unsafe {
                let v = super::avx512::exp16(_mm512_loadu_ps(x.as_ptr()));
                _mm512_storeu_ps(wide.as_mut_ptr(), v);
                for h in 0..2 {
                    let v = exp8(_mm256_loadu_ps(x.as_ptr().add(8 * h)));
                    _mm256_storeu_ps(narrow.as_mut_ptr().add(8 * h), v);
                }
            }
            let bits = |v: &[f32; 16]| v.map(f32::to_bits);
            assert_eq!(bits(&wide), bits(&narrow), "{x:?}");
        }
    }
}
