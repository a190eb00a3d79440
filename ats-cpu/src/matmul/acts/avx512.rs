//! The Q8_0 / Q8_1 quantiser on 512-bit registers: the scalar one's bytes,
//! sixteen blocks at a time. Each block's maximum is still a reduction of
//! its own, but the scale arithmetic (two divisions and two f16 roundings
//! a block, a latency chain in the AVX2 path) runs once for sixteen blocks,
//! and a block's values are scaled, rounded and narrowed in two registers.

use std::arch::x86_64::*;

use super::{ActFormat, Q8Block, QK8};

/// Blocks whose scales are computed together (one register of them).
const GROUP: usize = 16;

/// `v` rounded to f16 (nearest even, like `half` and ggml) and back, lane
/// by lane.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
fn round_f16(v: __m512) -> __m512 {
    _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v))
}

/// `roundf` (half away from zero), exact for every float, as the AVX2
/// path computes it: the fraction `v - trunc(v)` is exact, so comparing
/// it with 0.5 decides the tie.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
fn round_away(v: __m512) -> __m512 {
    let t = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
    let frac = _mm512_abs_ps(_mm512_sub_ps(v, t));
    let up = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(frac, _mm512_set1_ps(0.5));
    let sign = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(i32::MIN));
    let one = _mm512_castsi512_ps(_mm512_or_si512(
        sign,
        _mm512_castps_si512(_mm512_set1_ps(1.0)),
    ));
    _mm512_mask_add_ps(t, up, t, one)
}

/// The block at `xb`'s 32 values as two registers.
///
/// # Safety
/// 32 floats readable at `xb`; AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn load_block(xb: *const f32) -> [__m512; 2] {
    // SAFETY: 32 floats (caller), two unaligned 16-float loads.
    unsafe { [_mm512_loadu_ps(xb), _mm512_loadu_ps(xb.add(16))] }
}

/// AVX-512 twin of [`super::q8_row_scalar`]; bit-identical output.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(super) fn q8_row(
    x: &[f32],
    qs: &mut [Q8Block],
    d: &mut [f32],
    s: &mut [f32],
    format: ActFormat,
) {
    debug_assert!(qs.len() * QK8 == x.len() && d.len() == qs.len() && s.len() == qs.len());
    let blocks = qs.len();
    for g0 in (0..blocks).step_by(GROUP) {
        let n = GROUP.min(blocks - g0);
        let xg = &x[g0 * QK8..(g0 + n) * QK8];
        // each block's largest magnitude, in lane b (put in the register
        // lane by lane: sixteen scalar stores read back as one vector
        // stalled on store forwarding)
        let mut am = _mm512_setzero_ps();
        for b in 0..n {
            // SAFETY: block b of the group is inside `xg`.
            let v = unsafe { load_block(xg.as_ptr().add(b * QK8)) };
            let a = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
            am = _mm512_mask_mov_ps(am, 1 << b, _mm512_set1_ps(a));
        }
        let dd = _mm512_div_ps(am, _mm512_set1_ps(127.0));
        let nonzero = _mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(dd, _mm512_setzero_ps());
        let id = _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(1.0), dd);
        let mut ids = [0f32; GROUP];
        // SAFETY: sixteen floats.
        unsafe { _mm512_storeu_ps(ids.as_mut_ptr(), id) };
        let mut sums = _mm512_setzero_si512();
        for b in 0..n {
            // SAFETY: block b of the group is inside `xg`.
            let v = unsafe { load_block(xg.as_ptr().add(b * QK8)) };
            let idb = _mm512_set1_ps(ids[b]);
            let q = v.map(|v| _mm512_cvtps_epi32(round_away(_mm512_mul_ps(v, idb))));
            let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q[0], q[1]));
            sums = _mm512_mask_mov_epi32(sums, 1 << b, _mm512_set1_epi32(sum));
            let out = qs[g0 + b].0.as_mut_ptr() as *mut __m128i;
            // SAFETY: `Q8Block` is 32 bytes: two 16-byte stores.
            unsafe {
                _mm_storeu_si128(out, _mm512_cvtsepi32_epi8(q[0]));
                _mm_storeu_si128(out.add(1), _mm512_cvtsepi32_epi8(q[1]));
            }
        }
        let sum = _mm512_cvtepi32_ps(sums);
        let d16 = round_f16(dd);
        // As `super::block_sum`.
        let sb = match format {
            ActFormat::Q8_1 => round_f16(_mm512_mul_ps(sum, dd)),
            _ => _mm512_mul_ps(sum, d16),
        };
        let (mut dv, mut sv) = ([0f32; GROUP], [0f32; GROUP]);
        // SAFETY: sixteen floats each.
        unsafe {
            _mm512_storeu_ps(dv.as_mut_ptr(), d16);
            _mm512_storeu_ps(sv.as_mut_ptr(), sb);
        }
        d[g0..g0 + n].copy_from_slice(&dv[..n]);
        s[g0..g0 + n].copy_from_slice(&sv[..n]);
    }
}
