//! Small AVX2 helpers shared by the kernels.

use std::arch::x86_64::*;

/// Sum of the eight lanes of `v`, always in the same order (so that a dot
/// product does not depend on which tile computed it).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// 16 bytes at `p` as 32 nibbles: low nibbles in bytes 0..16, high in 16..32.
///
/// # Safety
/// `p` must be valid for reading 16 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn nibbles(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes.
    let q = unsafe { _mm_loadu_si128(p as *const __m128i) };
    let both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0f))
}

/// The 32 bits at `p` as 32 bytes: byte k is `0x10` if bit k is set, else 0
/// (the fifth bit of Q5_0 / Q5_1 values).
///
/// # Safety
/// `p` must be valid for reading 4 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn high_bits(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 4 readable bytes.
    let h = unsafe { (p as *const u32).read_unaligned() };
    let v = _mm256_set1_epi32(h as i32);
    // Byte k takes source byte k / 8, then tests bit k % 8.
    let spread = _mm256_shuffle_epi8(
        v,
        _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3,
            3, 3, 3,
        ),
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// Stores the accumulators of a narrow tile, lanes (row pair x token):
/// `acc[p]` holds rows `2p, 2p + 1` of token 0, then of tokens 1, 2, 3,
/// into `out[token][row]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn store_pairs4(acc: [__m256; 2], out: &mut [[f32; 4]; 4]) {
    let (a, b) = (_mm256_castps_pd(acc[0]), _mm256_castps_pd(acc[1]));
    // Tokens 0 and 2, then 1 and 3, rows 0..4 each.
    let even = _mm256_castpd_ps(_mm256_unpacklo_pd(a, b));
    let odd = _mm256_castpd_ps(_mm256_unpackhi_pd(a, b));
    let p = out.as_mut_ptr() as *mut f32;
    // SAFETY: `out` is 4 x 4 contiguous floats.
    unsafe {
        _mm_storeu_ps(p, _mm256_castps256_ps128(even));
        _mm_storeu_ps(p.add(4), _mm256_castps256_ps128(odd));
        _mm_storeu_ps(p.add(8), _mm256_extractf128_ps(even, 1));
        _mm_storeu_ps(p.add(12), _mm256_extractf128_ps(odd, 1));
    }
}

/// One super-block of a row added to its 8 token lanes: `acc + isum x (d x
/// dx) + msum x (-dmin x dx)`, the two FMAs of every K-quant path in that
/// order, `dx` the tokens' scales.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn add_block8(
    acc: __m256,
    (isum, msum): (__m256i, __m256i),
    (d, dmin): (f32, f32),
    dx: __m256,
) -> __m256 {
    let d = _mm256_mul_ps(_mm256_set1_ps(d), dx);
    let dmin = _mm256_mul_ps(_mm256_set1_ps(-dmin), dx);
    let acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), d, acc);
    _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), dmin, acc)
}

/// Stores `MR` accumulators of 8 token lanes each (rows x tokens) into
/// `out[token][row]`, transposing 4 rows at a time in registers.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn store_tokens8<const MR: usize>(acc: [__m256; MR], out: &mut [[f32; MR]; 8]) {
    if MR == 4 {
        let (a0, a1, a2, a3) = (acc[0], acc[1 % MR], acc[2 % MR], acc[3 % MR]);
        let t0 = _mm256_unpacklo_ps(a0, a1);
        let t1 = _mm256_unpackhi_ps(a0, a1);
        let t2 = _mm256_unpacklo_ps(a2, a3);
        let t3 = _mm256_unpackhi_ps(a2, a3);
        // u[k]: token k in the low half, token k + 4 in the high half.
        let u = [
            _mm256_shuffle_ps(t0, t2, 0x44),
            _mm256_shuffle_ps(t0, t2, 0xee),
            _mm256_shuffle_ps(t1, t3, 0x44),
            _mm256_shuffle_ps(t1, t3, 0xee),
        ];
        let p = out.as_mut_ptr() as *mut f32;
        for (k, u) in u.into_iter().enumerate() {
            // SAFETY: `out` is 8 x 4 contiguous floats; tokens k and k + 4.
            unsafe {
                _mm_storeu_ps(p.add(4 * k), _mm256_castps256_ps128(u));
                _mm_storeu_ps(p.add(4 * (k + 4)), _mm256_extractf128_ps(u, 1));
            }
        }
    } else {
        for (i, a) in acc.into_iter().enumerate() {
            let mut v = [0f32; 8];
            // SAFETY: 8 floats.
            unsafe { _mm256_storeu_ps(v.as_mut_ptr(), a) };
            for (o, v) in out.iter_mut().zip(v) {
                o[i] = v;
            }
        }
    }
}

/// 16 bytes of packed 4-bit indices at `p` looked up in a 16-entry byte
/// table (IQ4_NL, IQ4_XS, MXFP4): entry of the low nibbles in bytes 0..16,
/// of the high ones in 16..32.
///
/// # Safety
/// `p` must be valid for reading 16 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn table_nibbles(p: *const u8, table: &[i8; 16]) -> __m256i {
    // SAFETY: 16 readable bytes at `p` (caller); `table` is 16 bytes.
    let (idx, t) = unsafe {
        (
            nibbles(p),
            _mm_loadu_si128(table.as_ptr() as *const __m128i),
        )
    };
    // the shuffle looks up within each 128-bit lane: the table in both
    _mm256_shuffle_epi8(_mm256_set_m128i(t, t), idx)
}
