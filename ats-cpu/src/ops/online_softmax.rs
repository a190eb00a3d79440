//! One attention head over one block of keys: the scores, then the online
//! softmax update of the head's running maximum `m`, sum `l` and weighted
//! values `acc`. Both attention paths call it for every (head, key block);
//! the AVX2 path keeps the accumulators in registers across the block's keys,
//! takes the exponentials eight at a time and reads an f16 cache where it
//! lies, widening each eight values in a register.

use half::f16;

use super::attention::KvData;
use super::vec::{axpy, dot, f16_to_f32, scale};

/// Keys and values of one block for one head: row `j` of the keys is
/// `k[j * stride..][..head_dim]`, likewise the values.
#[derive(Clone, Copy)]
pub(crate) struct Block<'a> {
    /// Keys and values, from the first row's head offset.
    pub kv: KvData<'a>,
    /// Values from one row to the next.
    pub stride: usize,
    /// Rows in the block (at most [`MAX_KEYS`]).
    pub n: usize,
}

impl<'a> Block<'a> {
    /// Rows `from..from + n` of the block.
    pub fn rows(self, from: usize, n: usize) -> Block<'a> {
        debug_assert!(from + n <= self.n);
        Block {
            kv: self.kv.skip(from * self.stride),
            n,
            ..self
        }
    }

    /// The block from column `col` of each row (another head's columns).
    pub fn cols(self, col: usize) -> Block<'a> {
        Block {
            kv: self.kv.skip(col),
            ..self
        }
    }
}

/// A [`Block`] whose rows are of one element type.
#[derive(Clone, Copy)]
struct Typed<'a, E> {
    k: &'a [E],
    v: &'a [E],
    stride: usize,
    n: usize,
}

/// Most keys a block holds.
pub(crate) const MAX_KEYS: usize = 64;

/// The running softmax state of one head: maximum, sum, weighted values.
pub(crate) struct State<'a> {
    /// Largest score seen.
    pub m: &'a mut f32,
    /// Sum of `exp(score - m)`.
    pub l: &'a mut f32,
    /// Sum of `exp(score - m) * value`.
    pub acc: &'a mut [f32],
}

/// A cache element the kernels read directly.
pub(crate) trait KvElem: Copy {
    /// `row` as f32 (exact): itself, or widened into `buf` (at least as long).
    fn widen<'b>(row: &'b [Self], buf: &'b mut [f32]) -> &'b [f32];

    /// Eight values from `p`, widened to f32.
    ///
    /// # Safety
    /// AVX2 and F16C; eight values readable at `p`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
}

impl KvElem for f32 {
    #[inline]
    fn widen<'b>(row: &'b [f32], _: &'b mut [f32]) -> &'b [f32] {
        row
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(p: *const f32) -> std::arch::x86_64::__m256 {
        // SAFETY: eight f32 readable at p (caller).
        unsafe { std::arch::x86_64::_mm256_loadu_ps(p) }
    }
}

impl KvElem for f16 {
    #[inline]
    fn widen<'b>(row: &'b [f16], buf: &'b mut [f32]) -> &'b [f32] {
        f16_to_f32(row, buf);
        &buf[..row.len()]
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(p: *const f16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: eight f16 (16 bytes) readable at p (caller); F16C present.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }
}

/// Updates `st` with the keys of `b` for query `q` (scores scaled by `scale`).
pub(crate) fn update(q: &[f32], b: Block<'_>, scale_by: f32, st: State<'_>) {
    debug_assert!(b.n <= MAX_KEYS);
    #[cfg(target_arch = "x86_64")]
    if super::vec::has_avx2() && q.len().is_multiple_of(8) && q.len() <= 256 {
        let need = if b.n == 0 {
            0
        } else {
            (b.n - 1) * b.stride + q.len()
        };
        assert!(need <= b.kv.len(), "attention block past its rows");
        let (stride, n) = (b.stride, b.n);
        // SAFETY: AVX2/FMA/F16C detected; the head size is a multiple of 8
        // up to 256 (the accumulator tiles); rows 0..n lie inside the
        // slices (asserted above).
        return unsafe {
            match b.kv {
                KvData::F32 { k, v } => avx2::update(q, Typed { k, v, stride, n }, scale_by, st),
                KvData::F16 { k, v } => avx2::update(q, Typed { k, v, stride, n }, scale_by, st),
            }
        };
    }
    update_scalar(q, b, scale_by, st)
}

/// [`update`], portable.
pub(crate) fn update_scalar(q: &[f32], b: Block<'_>, scale_by: f32, st: State<'_>) {
    let (stride, n) = (b.stride, b.n);
    match b.kv {
        KvData::F32 { k, v } => update_rows(q, Typed { k, v, stride, n }, scale_by, st),
        KvData::F16 { k, v } => update_rows(q, Typed { k, v, stride, n }, scale_by, st),
    }
}

/// [`update_scalar`] for one element type.
fn update_rows<E: KvElem>(q: &[f32], b: Typed<'_, E>, scale_by: f32, st: State<'_>) {
    let Typed { k, v, stride, n } = b;
    let hd = q.len();
    let mut sc = [0f32; MAX_KEYS];
    let mut mx = *st.m;
    for (j, s) in sc.iter_mut().enumerate().take(n) {
        let mut sum = 0.0;
        widened(&k[j * stride..][..hd], |at, x| {
            sum += dot(&q[at..][..x.len()], x)
        });
        *s = sum * scale_by;
        mx = mx.max(*s);
    }
    if mx > *st.m {
        // rescale what was accumulated under the old maximum
        let corr = (*st.m - mx).exp();
        *st.l *= corr;
        scale(st.acc, corr);
        *st.m = mx;
    }
    for (j, &s) in sc.iter().enumerate().take(n) {
        let p = (s - mx).exp();
        *st.l += p;
        widened(&v[j * stride..][..hd], |at, x| {
            axpy(&mut st.acc[at..][..x.len()], p, x)
        });
    }
}

/// Values widened at a time by [`widened`]: a stack buffer, since the
/// portable path runs per key and must not allocate.
const WIDEN: usize = 64;

/// Hands `row` to `f` as f32 pieces of at most [`WIDEN`] values, each with
/// its offset in the row.
fn widened<E: KvElem>(row: &[E], mut f: impl FnMut(usize, &[f32])) {
    let mut buf = [0f32; WIDEN];
    for (i, piece) in row.chunks(WIDEN).enumerate() {
        f(i * WIDEN, E::widen(piece, &mut buf));
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
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
    // Index loops: iterator adapters were left as calls in this kernel.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn update<E: KvElem>(
        q: &[f32],
        b: Typed<'_, E>,
        scale_by: f32,
        st: State<'_>,
    ) {
        let Typed { k, v, stride, n } = b;
        let hd = q.len();
        let (pq, pk, pv) = (q.as_ptr(), k.as_ptr(), v.as_ptr());
        let mut sc = [0f32; MAX_KEYS];
        // scores four keys at a time: four independent FMA chains, q loaded once
        let mut j = 0;
        while j + 4 <= n {
            let mut a = [_mm256_setzero_ps(); 4];
            // SAFETY: rows j..j+4 are inside k (caller); i + 8 <= hd.
            unsafe {
                let rows = [
                    pk.add(j * stride),
                    pk.add((j + 1) * stride),
                    pk.add((j + 2) * stride),
                    pk.add((j + 3) * stride),
                ];
                for i in (0..hd).step_by(8) {
                    let qv = _mm256_loadu_ps(pq.add(i));
                    for (t, acc) in a.iter_mut().enumerate() {
                        *acc = _mm256_fmadd_ps(qv, E::load8(rows[t].add(i)), *acc);
                    }
                }
            }
            // [a0 a1 a2 a3] summed across lanes at once
            let t = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
            let s4 = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
            let s4 = _mm_mul_ps(s4, _mm_set1_ps(scale_by));
            // SAFETY: j + 4 <= n <= MAX_KEYS.
            unsafe { _mm_storeu_ps(sc.as_mut_ptr().add(j), s4) };
            j += 4;
        }
        // (index loops here and below: iterator adapters were left as calls
        // in this kernel, each spilling the vector registers)
        for jj in j..n {
            let mut a0 = _mm256_setzero_ps();
            // SAFETY: row jj's hd values are inside k (caller); i + 8 <= hd.
            unsafe {
                let row = pk.add(jj * stride);
                for i in (0..hd).step_by(8) {
                    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(pq.add(i)), E::load8(row.add(i)), a0);
                }
            }
            sc[jj] = hsum(a0) * scale_by;
        }
        let mx = sc[..n].iter().fold(*st.m, |m, &x| m.max(x));
        if mx > *st.m {
            let corr = (*st.m - mx).exp();
            *st.l *= corr;
            for a in st.acc[..hd].iter_mut() {
                *a *= corr;
            }
            *st.m = mx;
        }
        // probabilities, eight at a time (the tail lanes are exp(-inf - mx) = 0)
        let n8 = n.div_ceil(8) * 8;
        sc[n..n8].fill(f32::NEG_INFINITY);
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
        // weighted values: up to 64 columns of accumulators in registers
        // per pass, the pass's width fixed at compile time
        let pa = st.acc.as_mut_ptr();
        let mut c0 = 0;
        while c0 < hd {
            let w = (hd - c0).min(64) / 8;
            // SAFETY: columns c0..c0 + 8w are inside acc (hd long) and the
            // rows 0..n of v (caller).
            unsafe {
                let (acc, row) = (pa.add(c0), pv.add(c0));
                match w {
                    8 => weigh::<E, 8>(acc, row, stride, &sc[..n]),
                    7 => weigh::<E, 7>(acc, row, stride, &sc[..n]),
                    6 => weigh::<E, 6>(acc, row, stride, &sc[..n]),
                    5 => weigh::<E, 5>(acc, row, stride, &sc[..n]),
                    4 => weigh::<E, 4>(acc, row, stride, &sc[..n]),
                    3 => weigh::<E, 3>(acc, row, stride, &sc[..n]),
                    2 => weigh::<E, 2>(acc, row, stride, &sc[..n]),
                    _ => weigh::<E, 1>(acc, row, stride, &sc[..n]),
                }
            }
            c0 += 8 * w;
        }
    }

    /// `acc[..8W] += sum_j p[j] x v_j[..8W]`, `v_j` at `row + j * stride`.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `8 W` values readable at `row + j * stride` for
    /// each `j < p.len()`, and writable at `acc`.
    #[inline]
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn weigh<E: KvElem, const W: usize>(
        acc: *mut f32,
        row: *const E,
        stride: usize,
        p: &[f32],
    ) {
        let mut a = [_mm256_setzero_ps(); W];
        // SAFETY: as the caller guarantees.
        unsafe {
            for t in 0..W {
                a[t] = _mm256_loadu_ps(acc.add(8 * t));
            }
            for j in 0..p.len() {
                let vp = _mm256_set1_ps(p[j]);
                let row = row.add(j * stride);
                for t in 0..W {
                    a[t] = _mm256_fmadd_ps(vp, E::load8(row.add(8 * t)), a[t]);
                }
            }
            for t in 0..W {
                _mm256_storeu_ps(acc.add(8 * t), a[t]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: f32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as f32 + seed) * 0.731).sin() * 2.0)
            .collect()
    }

    /// Runs [`update`] and [`update_scalar`] twice on `b` (from a fresh
    /// state, then on top of it: the rescale) and compares the states.
    fn check(q: &[f32], b: Block<'_>, what: &str) {
        let hd = q.len();
        let (mut m1, mut l1, mut a1) = (f32::NEG_INFINITY, 0f32, vec![0f32; hd]);
        let (mut m2, mut l2, mut a2) = (f32::NEG_INFINITY, 0f32, vec![0f32; hd]);
        for s in [0.1, 0.7] {
            let st1 = State {
                m: &mut m1,
                l: &mut l1,
                acc: &mut a1,
            };
            update(q, b, s, st1);
            let st2 = State {
                m: &mut m2,
                l: &mut l2,
                acc: &mut a2,
            };
            update_scalar(q, b, s, st2);
        }
        // the portable path sums a score in 64-value pieces, the AVX2 one in
        // eight lanes: a few ulp apart, carried by the exponentials
        let tol = 3e-5;
        assert!(
            (m1 - m2).abs() <= tol * m2.abs().max(1.0),
            "{what}: m {m1} vs {m2}"
        );
        assert!((l1 - l2).abs() <= tol * l2, "{what}: l {l1} vs {l2}");
        for (x, y) in a1.iter().zip(&a2) {
            assert!((x - y).abs() <= tol * l2, "{what}: acc {x} vs {y}");
        }
    }

    #[test]
    fn simd_update_matches_the_portable_one_in_f32_and_f16() {
        for (hd, n, stride) in [
            (64, 16, 192),
            (128, 64, 1024),
            (8, 1, 8),
            (256, 37, 512),
            (80, 5, 80),
        ] {
            let q = values(hd, 1.0);
            let k = values(n * stride, 2.0);
            let v = values(n * stride, 3.0);
            let kv = KvData::F32 { k: &k, v: &v };
            check(&q, Block { kv, stride, n }, &format!("f32 hd {hd}"));
            let kh: Vec<f16> = k.iter().map(|&x| f16::from_f32(x)).collect();
            let vh: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
            let kv = KvData::F16 { k: &kh, v: &vh };
            check(&q, Block { kv, stride, n }, &format!("f16 hd {hd}"));
        }
    }

    #[test]
    fn f16_blocks_give_what_their_f32_values_give() {
        // the f16 path widens in registers: exactly the f32 path on the
        // same (f16-representable) values
        let (hd, n, stride) = (64, 37, 192);
        let q = values(hd, 1.0);
        let kh: Vec<f16> = values(n * stride, 2.0)
            .iter()
            .map(|&x| f16::from_f32(x))
            .collect();
        let vh: Vec<f16> = values(n * stride, 3.0)
            .iter()
            .map(|&x| f16::from_f32(x))
            .collect();
        let (k, v): (Vec<f32>, Vec<f32>) = (
            kh.iter().map(|x| x.to_f32()).collect(),
            vh.iter().map(|x| x.to_f32()).collect(),
        );
        let run = |kv: KvData<'_>| {
            let (mut m, mut l, mut a) = (f32::NEG_INFINITY, 0f32, vec![0f32; hd]);
            let b = Block { kv, stride, n }.rows(2, 30).cols(64);
            let st = State {
                m: &mut m,
                l: &mut l,
                acc: &mut a,
            };
            update(&q, b, 0.3, st);
            (m, l, a)
        };
        let want = run(KvData::F32 { k: &k, v: &v });
        assert_eq!(run(KvData::F16 { k: &kh, v: &vh }), want);
        // another head's columns give another answer (the test can fail)
        let other = {
            let (mut m, mut l, mut a) = (f32::NEG_INFINITY, 0f32, vec![0f32; hd]);
            let kv = KvData::F32 { k: &k, v: &v };
            let st = State {
                m: &mut m,
                l: &mut l,
                acc: &mut a,
            };
            update(&q, Block { kv, stride, n }.rows(2, 30), 0.3, st);
            (m, l, a)
        };
        assert_ne!(other, want);
    }
}
