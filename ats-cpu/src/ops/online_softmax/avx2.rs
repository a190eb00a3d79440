//! The online softmax update on 256-bit registers (AVX2 and FMA), one or
//! two query heads at a time: the path for CPUs without AVX-512 F and for
//! head sizes the 512-bit path does not take.

use std::arch::x86_64::*;

use super::{KvElem, MAX_KEYS, State, Typed};
use crate::ops::exp::avx2::exp8;

#[inline]
#[target_feature(enable = "avx2,fma")]
fn hsum(v: __m256) -> f32 {
    let s4 = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)))
}

/// # Safety
/// AVX2, FMA and F16C; `q.len()` a multiple of 8 up to 256; rows `0..n`
/// of `k` and `v` (at `j * stride`, `q.len()` long) inside the slices;
/// `st.acc` at least `q.len()` long; `n <= MAX_KEYS`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn update<E: KvElem>(
    q: &[f32],
    b: Typed<'_, E>,
    scale_by: f32,
    mut st: State<'_>,
) {
    let mut sc = [0f32; MAX_KEYS];
    // SAFETY: as the caller guarantees.
    unsafe { scores::<E, 1>([q], b, scale_by, [&mut sc]) };
    probabilities(&mut sc, b.n, &mut st);
    // SAFETY: acc is hd long and rows 0..n of v are inside it (caller).
    unsafe { weigh_all::<E, 1>([st.acc.as_mut_ptr()], q.len(), b, [&sc[..b.n]]) };
}

/// [`update`] for two heads that read the same keys and values: each
/// key and value is loaded (and widened) once for both, and each head
/// gets exactly [`update`]'s operations, so the same bits.
///
/// # Safety
/// As [`update`], for both queries (of one length) and states.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn update_pair<E: KvElem>(
    q: [&[f32]; 2],
    b: Typed<'_, E>,
    scale_by: f32,
    st: [State<'_>; 2],
) {
    let [mut s0, mut s1] = st;
    let (mut p0, mut p1) = ([0f32; MAX_KEYS], [0f32; MAX_KEYS]);
    // SAFETY: as the caller guarantees.
    unsafe { scores::<E, 2>(q, b, scale_by, [&mut p0, &mut p1]) };
    probabilities(&mut p0, b.n, &mut s0);
    probabilities(&mut p1, b.n, &mut s1);
    let acc = [s0.acc.as_mut_ptr(), s1.acc.as_mut_ptr()];
    // SAFETY: as in `update`, for both accumulators.
    unsafe { weigh_all::<E, 2>(acc, q[0].len(), b, [&p0[..b.n], &p1[..b.n]]) };
}

/// Each head's `acc[h][..hd]` += its weighted values, in passes of
/// `64 / H` columns: the `H` heads' accumulators of a pass fill 8 of
/// the 16 registers.
///
/// # Safety
/// As [`weigh`], for `hd` columns of each head.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn weigh_all<E: KvElem, const H: usize>(
    acc: [*mut f32; H],
    hd: usize,
    b: Typed<'_, E>,
    p: [&[f32]; H],
) {
    let mut c0 = 0;
    while c0 < hd {
        let w = (hd - c0).min(64 / H) / 8;
        // SAFETY: columns c0..c0 + 8w are inside each acc and the rows
        // 0..n of v (caller).
        unsafe { weigh_cols::<E, H>(acc, c0, w, b, p) };
        c0 += 8 * w;
    }
}

/// The scaled scores of the `H` queries against keys `0..n`, into
/// `sc[h][..n]`: four keys at a time (four independent FMA chains per
/// query, each key loaded once), then the rest one at a time.
///
/// # Safety
/// As [`update`], for each query.
// Index loops: iterator adapters were left as calls in this kernel.
#[allow(clippy::needless_range_loop)]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scores<E: KvElem, const H: usize>(
    q: [&[f32]; H],
    b: Typed<'_, E>,
    scale_by: f32,
    sc: [&mut [f32; MAX_KEYS]; H],
) {
    let Typed { k, stride, n, .. } = b;
    let hd = q[0].len();
    let pk = k.as_ptr();
    let mut j = 0;
    while j + 4 <= n {
        let mut a = [[_mm256_setzero_ps(); 4]; H];
        // SAFETY: rows j..j+4 are inside k (caller); i + 8 <= hd.
        unsafe {
            let rows = [
                pk.add(j * stride),
                pk.add((j + 1) * stride),
                pk.add((j + 2) * stride),
                pk.add((j + 3) * stride),
            ];
            for i in (0..hd).step_by(8) {
                let kv = [0, 1, 2, 3].map(|t| E::load8(rows[t].add(i)));
                for h in 0..H {
                    let qv = _mm256_loadu_ps(q[h].as_ptr().add(i));
                    for t in 0..4 {
                        a[h][t] = _mm256_fmadd_ps(qv, kv[t], a[h][t]);
                    }
                }
            }
        }
        for h in 0..H {
            // [a0 a1 a2 a3] summed across lanes at once
            let a = &a[h];
            let t = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
            let s4 = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
            let s4 = _mm_mul_ps(s4, _mm_set1_ps(scale_by));
            // SAFETY: j + 4 <= n <= MAX_KEYS.
            unsafe { _mm_storeu_ps(sc[h].as_mut_ptr().add(j), s4) };
        }
        j += 4;
    }
    for jj in j..n {
        for h in 0..H {
            let mut a0 = _mm256_setzero_ps();
            // SAFETY: row jj's hd values are inside k (caller); i + 8 <= hd.
            unsafe {
                let row = pk.add(jj * stride);
                for i in (0..hd).step_by(8) {
                    let qv = _mm256_loadu_ps(q[h].as_ptr().add(i));
                    a0 = _mm256_fmadd_ps(qv, E::load8(row.add(i)), a0);
                }
            }
            sc[h][jj] = hsum(a0) * scale_by;
        }
    }
}

/// The largest of `from` and `x` (a multiple of 8 long), eight lanes at
/// a time: a maximum is exact in any order, and a NaN score is passed
/// over as `f32::max` passes it over (`maxps` returns its second
/// operand, the running maximum, when the first is NaN). A scalar fold
/// was a chain of 64 dependent `maxss` a block, as long as the block's
/// scores took.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn max8(x: &[f32], from: f32) -> f32 {
    let mut m = _mm256_set1_ps(from);
    for c in x.chunks_exact(8) {
        // SAFETY: 8 floats.
        let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
        m = _mm256_max_ps(v, m);
    }
    let m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps(m2, m2, 1)))
}

/// The online softmax step of one head: rescales `st` to the block's
/// maximum and turns `sc[..n]` into probabilities, adding them to `l`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn probabilities(sc: &mut [f32; MAX_KEYS], n: usize, st: &mut State<'_>) {
    let hd = st.acc.len();
    // the tail lanes are -inf: no maximum, and exp(-inf - mx) = 0
    let n8 = n.div_ceil(8) * 8;
    sc[n..n8].fill(f32::NEG_INFINITY);
    let mx = max8(&sc[..n8], *st.m);
    if mx > *st.m {
        let corr = (*st.m - mx).exp();
        *st.l *= corr;
        for a in st.acc[..hd].iter_mut() {
            *a *= corr;
        }
        *st.m = mx;
    }
    // probabilities, eight at a time
    let vmx = _mm256_set1_ps(mx);
    let mut lsum = _mm256_setzero_ps();
    for c in (0..n8).step_by(8) {
        // SAFETY: c + 8 <= n8 <= MAX_KEYS.
        unsafe {
            let p = exp8(_mm256_sub_ps(_mm256_loadu_ps(sc.as_ptr().add(c)), vmx));
            _mm256_storeu_ps(sc.as_mut_ptr().add(c), p);
            lsum = _mm256_add_ps(lsum, p);
        }
    }
    *st.l += hsum(lsum);
}

/// Columns `c0..c0 + 8w` (`w` in 1..=8, and `H * w <= 8`) of each head's
/// `acc[h]` += its weighted values.
///
/// # Safety
/// As [`weigh`], for each head.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn weigh_cols<E: KvElem, const H: usize>(
    acc: [*mut f32; H],
    c0: usize,
    w: usize,
    b: Typed<'_, E>,
    p: [&[f32]; H],
) {
    let row = b.v.as_ptr().wrapping_add(c0);
    let acc = acc.map(|a| a.wrapping_add(c0));
    // the pass's width fixed at compile time
    // SAFETY: as the caller guarantees.
    unsafe {
        match w {
            8 => weigh::<E, H, 8>(acc, row, b.stride, p),
            7 => weigh::<E, H, 7>(acc, row, b.stride, p),
            6 => weigh::<E, H, 6>(acc, row, b.stride, p),
            5 => weigh::<E, H, 5>(acc, row, b.stride, p),
            4 => weigh::<E, H, 4>(acc, row, b.stride, p),
            3 => weigh::<E, H, 3>(acc, row, b.stride, p),
            2 => weigh::<E, H, 2>(acc, row, b.stride, p),
            _ => weigh::<E, H, 1>(acc, row, b.stride, p),
        }
    }
}

/// `acc[h][..8W] += sum_j p[h][j] x v_j[..8W]` for each head `h`, `v_j`
/// at `row + j * stride` (loaded once for all heads).
///
/// # Safety
/// AVX2, FMA and F16C; `8 W` values readable at `row + j * stride` for
/// each `j < p[h].len()` (all of one length), and writable at each
/// `acc[h]`.
#[inline]
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn weigh<E: KvElem, const H: usize, const W: usize>(
    acc: [*mut f32; H],
    row: *const E,
    stride: usize,
    p: [&[f32]; H],
) {
    let mut a = [[_mm256_setzero_ps(); W]; H];
    // SAFETY: as the caller guarantees.
    unsafe {
        for h in 0..H {
            for t in 0..W {
                a[h][t] = _mm256_loadu_ps(acc[h].add(8 * t));
            }
        }
        for j in 0..p[0].len() {
            let row = row.add(j * stride);
            let mut vp = [_mm256_setzero_ps(); H];
            for h in 0..H {
                vp[h] = _mm256_set1_ps(p[h][j]);
            }
            for t in 0..W {
                let v = E::load8(row.add(8 * t));
                for h in 0..H {
                    a[h][t] = _mm256_fmadd_ps(vp[h], v, a[h][t]);
                }
            }
        }
        for h in 0..H {
            for t in 0..W {
                _mm256_storeu_ps(acc[h].add(8 * t), a[h][t]);
            }
        }
    }
}
