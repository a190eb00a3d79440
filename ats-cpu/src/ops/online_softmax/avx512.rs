//! The online softmax update on 512-bit registers, for up to [`MAX_HEADS`]
//! query heads of one KV head's group at once: each key and value is loaded
//! and widened once for all of them, sixteen lanes at a time. Widening f16
//! is what bounds the AVX2 path (it widens every key and value once per
//! pair of heads, eight lanes at a time); and on the Xeon it was measured
//! on, 512-bit FMAs issue at the rate of 256-bit ones, so twice the lanes.
//!
//! Each head gets the same operations whichever heads it is taken with, so
//! the same bits. They differ from the AVX2 path's (sixteen partial sums,
//! not eight); both are checked against the portable path.

use std::arch::x86_64::*;

use super::{KvElem, MAX_KEYS, State, Typed};
use crate::ops::exp::avx512::exp16;

/// Most heads one call takes (their accumulators fill 16 of the 32
/// registers).
pub(super) const MAX_HEADS: usize = 4;

/// Whether these kernels take heads of `hd` values: AVX-512 F detected and
/// `hd` a multiple of 16 up to 256.
pub(super) fn takes(hd: usize) -> bool {
    crate::ops::vec::has_avx512f() && hd.is_multiple_of(16) && hd <= 256
}

/// Updates each head's state `st[h]` with the keys of `b` for query `q[h]`
/// (scores scaled by `scale_by`).
///
/// # Safety
/// AVX-512 F, AVX2, FMA and F16C; every `q[h]` of one length, a multiple
/// of 16 up to 256; rows `0..n` of `k` and `v` (at `j * stride`, `q[h].len()`
/// long) inside the slices; each `st[h].acc` at least `q[h].len()` long;
/// `n <= MAX_KEYS`.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(super) unsafe fn update_group<E: KvElem, const H: usize>(
    q: [&[f32]; H],
    b: Typed<'_, E>,
    scale_by: f32,
    st: [State<'_>; H],
) {
    let mut sc = [[0f32; MAX_KEYS]; H];
    // SAFETY: as the caller guarantees.
    unsafe { scores::<E, H>(q, b, scale_by, &mut sc) };
    let mut st = st;
    let corr = probabilities(&mut sc, b.n, &mut st);
    let acc = st.map(|s| s.acc.as_mut_ptr());
    let p = sc.each_ref().map(|p| &p[..b.n]);
    // SAFETY: as the caller guarantees, for every head's accumulator.
    unsafe { weigh_all::<E, H>(acc, corr, q[0].len(), b, p) };
}

/// The online softmax step of the `H` heads at once (their latency chains
/// side by side): each head's maximum over the block and its running one,
/// the factor `corr[h]` its sum `l` and weighted values are rescaled by to
/// that maximum (1 where it did not grow; the sum is rescaled here, the
/// values by [`weigh`] as it loads them), and `sc[h][..n]` turned into
/// probabilities, sixteen at a time, added to `l`. Returns `corr`.
#[inline]
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
fn probabilities<const H: usize>(
    sc: &mut [[f32; MAX_KEYS]; H],
    n: usize,
    st: &mut [State<'_>; H],
) -> [__m512; H] {
    // the tail lanes are -inf: no maximum, and exp(-inf - mx) = 0
    let n16 = n.div_ceil(16) * 16;
    for s in sc.iter_mut() {
        s[n..n16].fill(f32::NEG_INFINITY);
    }
    // `maxps` keeps its second operand, the running maximum, where the
    // first is NaN: a NaN score is passed over, as `f32::max` passes it
    let mut m: [__m512; H] = std::array::from_fn(|h| _mm512_set1_ps(*st[h].m));
    for c in (0..n16).step_by(16) {
        for h in 0..H {
            // SAFETY: c + 16 <= n16 <= MAX_KEYS.
            m[h] = _mm512_max_ps(unsafe { _mm512_loadu_ps(sc[h].as_ptr().add(c)) }, m[h]);
        }
    }
    let mx = m.map(|m| _mm512_reduce_max_ps(m));
    // exp(old - new) where the maximum grew, exp(0) = 1 elsewhere
    let mut d = [0f32; 16];
    for h in 0..H {
        if mx[h] > *st[h].m {
            d[h] = *st[h].m - mx[h];
        }
    }
    let mut corr = [0f32; 16];
    // SAFETY: sixteen floats each.
    unsafe { _mm512_storeu_ps(corr.as_mut_ptr(), exp16(_mm512_loadu_ps(d.as_ptr()))) };
    let mut lsum = [_mm512_setzero_ps(); H];
    for c in (0..n16).step_by(16) {
        for h in 0..H {
            // SAFETY: c + 16 <= n16 <= MAX_KEYS.
            unsafe {
                let x = _mm512_sub_ps(
                    _mm512_loadu_ps(sc[h].as_ptr().add(c)),
                    _mm512_set1_ps(mx[h]),
                );
                let p = exp16(x);
                _mm512_storeu_ps(sc[h].as_mut_ptr().add(c), p);
                lsum[h] = _mm512_add_ps(lsum[h], p);
            }
        }
    }
    for h in 0..H {
        *st[h].l = *st[h].l * corr[h] + _mm512_reduce_add_ps(lsum[h]);
        if mx[h] > *st[h].m {
            *st[h].m = mx[h];
        }
    }
    std::array::from_fn(|h| _mm512_set1_ps(corr[h]))
}

/// Four keys' sums across lanes at once: lane `t` of the result is the sum
/// of `a[t]`'s sixteen lanes.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
fn sum4(a: [__m512; 4]) -> __m128 {
    // pairs of lanes: (a0 a1 a0 a1) in every 128-bit lane
    let s01 = _mm512_add_ps(
        _mm512_unpacklo_ps(a[0], a[1]),
        _mm512_unpackhi_ps(a[0], a[1]),
    );
    let s23 = _mm512_add_ps(
        _mm512_unpacklo_ps(a[2], a[3]),
        _mm512_unpackhi_ps(a[2], a[3]),
    );
    // (a0 a1 a2 a3) in every 128-bit lane
    let s = _mm512_add_ps(
        _mm512_shuffle_ps::<0x44>(s01, s23),
        _mm512_shuffle_ps::<0xEE>(s01, s23),
    );
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(s)));
    let y = _mm256_add_ps(_mm512_castps512_ps256(s), hi);
    _mm_add_ps(_mm256_castps256_ps128(y), _mm256_extractf128_ps::<1>(y))
}

/// The scaled scores of the `H` queries against keys `0..n`, into
/// `sc[h][..n]`: four keys at a time (each loaded once for every head, four
/// independent FMA chains a head), then the rest one at a time.
///
/// # Safety
/// As [`update_group`].
#[allow(clippy::needless_range_loop)]
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn scores<E: KvElem, const H: usize>(
    q: [&[f32]; H],
    b: Typed<'_, E>,
    scale_by: f32,
    sc: &mut [[f32; MAX_KEYS]; H],
) {
    let Typed { k, stride, n, .. } = b;
    let hd = q[0].len();
    let pk = k.as_ptr();
    let mut j = 0;
    while j + 4 <= n {
        let mut a = [[_mm512_setzero_ps(); 4]; H];
        // SAFETY: rows j..j+4 are inside k (caller); i + 16 <= hd.
        unsafe {
            let rows = [0, 1, 2, 3].map(|t| pk.add((j + t) * stride));
            for i in (0..hd).step_by(16) {
                let kv = rows.map(|r| E::load16(r.add(i)));
                for h in 0..H {
                    let qv = _mm512_loadu_ps(q[h].as_ptr().add(i));
                    for t in 0..4 {
                        a[h][t] = _mm512_fmadd_ps(qv, kv[t], a[h][t]);
                    }
                }
            }
        }
        for h in 0..H {
            let s4 = _mm_mul_ps(sum4(a[h]), _mm_set1_ps(scale_by));
            // SAFETY: j + 4 <= n <= MAX_KEYS.
            unsafe { _mm_storeu_ps(sc[h].as_mut_ptr().add(j), s4) };
        }
        j += 4;
    }
    for jj in j..n {
        let mut a = [_mm512_setzero_ps(); H];
        // SAFETY: row jj's hd values are inside k (caller); i + 16 <= hd.
        unsafe {
            let row = pk.add(jj * stride);
            for i in (0..hd).step_by(16) {
                let kv = E::load16(row.add(i));
                for h in 0..H {
                    let qv = _mm512_loadu_ps(q[h].as_ptr().add(i));
                    a[h] = _mm512_fmadd_ps(qv, kv, a[h]);
                }
            }
        }
        for h in 0..H {
            sc[h][jj] = _mm512_reduce_add_ps(a[h]) * scale_by;
        }
    }
}

/// Each head's `acc[h][..hd]` += its weighted values, in passes of up to
/// `16 / H` registers (at most 8) of columns: the `H` heads' accumulators
/// of a pass fill up to 16 of the 32 registers.
///
/// # Safety
/// As [`weigh`], for `hd` (a multiple of 16) columns of each head.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn weigh_all<E: KvElem, const H: usize>(
    acc: [*mut f32; H],
    corr: [__m512; H],
    hd: usize,
    b: Typed<'_, E>,
    p: [&[f32]; H],
) {
    let mut c0 = 0;
    while c0 < hd {
        let w = ((hd - c0) / 16).min(16 / H).min(8);
        let row = b.v.as_ptr().wrapping_add(c0);
        let at = acc.map(|a| a.wrapping_add(c0));
        // SAFETY: columns c0..c0 + 16w are inside each acc and the rows
        // 0..n of v (caller); the pass's width fixed at compile time.
        unsafe {
            match w {
                8 => weigh::<E, H, 8>(at, corr, row, b.stride, p),
                7 => weigh::<E, H, 7>(at, corr, row, b.stride, p),
                6 => weigh::<E, H, 6>(at, corr, row, b.stride, p),
                5 => weigh::<E, H, 5>(at, corr, row, b.stride, p),
                4 => weigh::<E, H, 4>(at, corr, row, b.stride, p),
                3 => weigh::<E, H, 3>(at, corr, row, b.stride, p),
                2 => weigh::<E, H, 2>(at, corr, row, b.stride, p),
                _ => weigh::<E, H, 1>(at, corr, row, b.stride, p),
            }
        }
        c0 += 16 * w;
    }
}

/// `acc[h][..16W] = acc[h][..16W] x corr[h] + sum_j p[h][j] x v_j[..16W]`
/// for each head `h`, `v_j` at `row + j * stride` (loaded and widened once
/// for all heads).
///
/// # Safety
/// AVX-512 F, AVX2, FMA and F16C; `16 W` values readable at `row + j *
/// stride` for each `j < p[h].len()` (all of one length), and writable at
/// each `acc[h]`.
#[inline]
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn weigh<E: KvElem, const H: usize, const W: usize>(
    acc: [*mut f32; H],
    corr: [__m512; H],
    row: *const E,
    stride: usize,
    p: [&[f32]; H],
) {
    let mut a = [[_mm512_setzero_ps(); W]; H];
    // SAFETY: as the caller guarantees.
    unsafe {
        for h in 0..H {
            for t in 0..W {
                a[h][t] = _mm512_mul_ps(_mm512_loadu_ps(acc[h].add(16 * t)), corr[h]);
            }
        }
        for j in 0..p[0].len() {
            let row = row.add(j * stride);
            let vp = p.map(|p| _mm512_set1_ps(p[j]));
            for t in 0..W {
                let v = E::load16(row.add(16 * t));
                for h in 0..H {
                    a[h][t] = _mm512_fmadd_ps(vp[h], v, a[h][t]);
                }
            }
        }
        for h in 0..H {
            for t in 0..W {
                _mm512_storeu_ps(acc[h].add(16 * t), a[h][t]);
            }
        }
    }
}
