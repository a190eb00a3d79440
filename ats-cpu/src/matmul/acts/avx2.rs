//! The AVX2 quantisers: the scalar ones' bytes, eight lanes at a time.

use std::arch::x86_64::*;

use super::{ActFormat, Q8Block, QK8, QKK};

/// `v` rounded to f16 (nearest even, like `half` and ggml) and back (F16C).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn round_f16(v: f32) -> f32 {
    let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(v));
    _mm_cvtss_f32(_mm_cvtph_ps(h))
}

/// Largest lane of `v`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hmax(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_max_ss(m, _mm_movehdup_ps(m));
    _mm_cvtss_f32(m)
}

/// Sum of the eight lanes of `v`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01));
    _mm_cvtsi128_si32(s)
}

/// `roundf` (half away from zero), exact for every float: the fraction
/// `v - trunc(v)` is exact, so comparing it with 0.5 decides the tie.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn round_away(v: __m256) -> __m256 {
    let sign = _mm256_set1_ps(-0.0);
    let t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    let frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    let up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5), _CMP_GE_OQ);
    let one = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0));
    _mm256_add_ps(t, _mm256_and_ps(up, one))
}

/// Packs four vectors of 8 int32 (each in -127..=127) into 32 int8, in order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pack32(i: [__m256i; 4]) -> __m256i {
    let a = _mm256_packs_epi32(i[0], i[1]);
    let b = _mm256_packs_epi32(i[2], i[3]);
    // The packs interleave 128-bit lanes; this puts the dwords back in order.
    let p = _mm256_packs_epi16(a, b);
    _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

/// AVX2 twin of [`super::q8_row_scalar`]; bit-identical output.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q8_row(
    x: &[f32],
    qs: &mut [Q8Block],
    d: &mut [f32],
    s: &mut [f32],
    format: ActFormat,
) {
    debug_assert!(qs.len() * QK8 == x.len() && d.len() == qs.len() && s.len() == qs.len());
    let sign = _mm256_set1_ps(-0.0);
    for (((xb, qb), db), sb) in x.chunks_exact(QK8).zip(qs).zip(d).zip(s) {
        // SAFETY: `xb` has 32 floats: four unaligned 8-float loads.
        let v: [__m256; 4] =
            std::array::from_fn(|k| unsafe { _mm256_loadu_ps(xb.as_ptr().add(8 * k)) });
        let a01 = _mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1]));
        let a23 = _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3]));
        let amax = hmax(_mm256_max_ps(a01, a23));
        let dd = amax / 127.0;
        let id = _mm256_set1_ps(if dd != 0.0 { 1.0 / dd } else { 0.0 });
        let q: [__m256i; 4] =
            std::array::from_fn(|k| _mm256_cvtps_epi32(round_away(_mm256_mul_ps(v[k], id))));
        let sum = hsum_i32(_mm256_add_epi32(
            _mm256_add_epi32(q[0], q[1]),
            _mm256_add_epi32(q[2], q[3]),
        ));
        // SAFETY: `Q8Block` is 32 bytes, aligned to 32.
        unsafe { _mm256_store_si256(qb.0.as_mut_ptr() as *mut __m256i, pack32(q)) };
        let d16 = round_f16(dd);
        *db = d16;
        // As `super::block_sum`, with F16C.
        *sb = match format {
            ActFormat::Q8_1 => round_f16(sum as f32 * dd),
            _ => sum as f32 * d16,
        };
    }
}

/// AVX2 twin of [`super::q8k_row_scalar`]; bit-identical output.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q8k_row(x: &[f32], qs: &mut [Q8Block], d: &mut [f32], bsums: &mut [[i16; 16]]) {
    debug_assert!(qs.len() * QK8 == x.len() && d.len() * QKK == x.len());
    let sign = _mm256_set1_ps(-0.0);
    for (((xb, qb), db), bs) in x
        .chunks_exact(QKK)
        .zip(qs.chunks_exact_mut(8))
        .zip(d)
        .zip(bsums)
    {
        // SAFETY: `xb` has 256 floats: 32 unaligned 8-float loads.
        let v: [__m256; 32] =
            std::array::from_fn(|k| unsafe { _mm256_loadu_ps(xb.as_ptr().add(8 * k)) });
        let mut m = _mm256_setzero_ps();
        for vk in v {
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, vk));
        }
        let amax = hmax(m);
        if amax == 0.0 {
            *db = 0.0;
            qb.fill(Q8Block::default());
            *bs = [0; 16];
            continue;
        }
        // ggml keeps the first value of largest magnitude, with its sign.
        let max = xb.iter().copied().find(|v| v.abs() == amax).unwrap_or(amax);
        let iscale = -127.0 / max;
        let is = _mm256_set1_ps(iscale);
        let top = _mm256_set1_epi32(127);
        let q: [__m256i; 32] = std::array::from_fn(|k| {
            let r = _mm256_round_ps(
                _mm256_mul_ps(is, v[k]),
                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
            );
            _mm256_min_epi32(_mm256_cvtps_epi32(r), top)
        });
        for (g, sum) in bs.iter_mut().enumerate() {
            *sum = hsum_i32(_mm256_add_epi32(q[2 * g], q[2 * g + 1])) as i16;
        }
        for (k, b) in qb.iter_mut().enumerate() {
            let p = pack32([q[4 * k], q[4 * k + 1], q[4 * k + 2], q[4 * k + 3]]);
            // SAFETY: `Q8Block` is 32 bytes, aligned to 32.
            unsafe { _mm256_store_si256(b.0.as_mut_ptr() as *mut __m256i, p) };
        }
        *db = 1.0 / iscale;
    }
}
