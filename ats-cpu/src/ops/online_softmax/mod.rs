//! One attention head over one block of keys: the scores, then the online
//! softmax update of the head's running maximum `m`, sum `l` and weighted
//! values `acc`. Both attention paths call it for every KV head's group of
//! query heads and key block ([`update_heads`]). Where AVX-512 F is
//! detected, [`avx512`] takes up to four of the group's heads at once; the
//! AVX2 path takes them two at a time. Both load (and widen) each key and
//! value once for the heads they take, keep the accumulators in registers
//! across the block's keys, take the exponentials a register at a time and
//! read an f16 cache where it lies, widening the values in a register.

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

    /// Sixteen values from `p`, widened to f32.
    ///
    /// # Safety
    /// AVX-512 F; sixteen values readable at `p`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load16(p: *const Self) -> std::arch::x86_64::__m512;
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

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    unsafe fn load16(p: *const f32) -> std::arch::x86_64::__m512 {
        // SAFETY: sixteen f32 readable at p (caller).
        unsafe { std::arch::x86_64::_mm512_loadu_ps(p) }
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

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    unsafe fn load16(p: *const f16) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        // SAFETY: sixteen f16 (32 bytes) readable at p (caller); AVX-512 F
        // present.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
    }
}

/// Updates `st` with the keys of `b` for query `q` (scores scaled by `scale`).
pub(crate) fn update(q: &[f32], b: Block<'_>, scale_by: f32, st: State<'_>) {
    debug_assert!(b.n <= MAX_KEYS);
    #[cfg(target_arch = "x86_64")]
    if wide_takes(q.len(), &b) {
        // SAFETY: the 512-bit kernels take the head's length and block.
        return unsafe { update_wide([q], b, scale_by, [st]) };
    }
    #[cfg(target_arch = "x86_64")]
    if avx2_takes(q.len(), &b) {
        // SAFETY: the AVX2 kernels take the head's length and block.
        return unsafe { update_avx2(q, b, scale_by, st) };
    }
    update_scalar(q, b, scale_by, st)
}

/// [`update`] on 256-bit registers.
///
/// # Safety
/// [`avx2_takes`] for the head's length and `b`.
#[cfg(target_arch = "x86_64")]
unsafe fn update_avx2(q: &[f32], b: Block<'_>, scale_by: f32, st: State<'_>) {
    let (stride, n) = (b.stride, b.n);
    // SAFETY: AVX2/FMA/F16C detected; the head size is a multiple of 8 up
    // to 256 (the accumulator tiles); rows 0..n lie inside the slices
    // (asserted by `avx2_takes`, the caller).
    unsafe {
        match b.kv {
            KvData::F32 { k, v } => avx2::update(q, Typed { k, v, stride, n }, scale_by, st),
            KvData::F16 { k, v } => avx2::update(q, Typed { k, v, stride, n }, scale_by, st),
        }
    }
}

/// Whether the AVX2 kernels take heads of `hd` values over `b`: AVX2
/// detected and `hd` a multiple of 8 up to 256 (their accumulator tiles).
/// Asserts that the block's rows lie inside its slices, which the kernels
/// read unchecked.
#[cfg(target_arch = "x86_64")]
fn avx2_takes(hd: usize, b: &Block<'_>) -> bool {
    if !(super::vec::has_avx2() && hd.is_multiple_of(8) && hd <= 256) {
        return false;
    }
    let need = if b.n == 0 {
        0
    } else {
        (b.n - 1) * b.stride + hd
    };
    assert!(need <= b.kv.len(), "attention block past its rows");
    true
}

/// Whether the 512-bit kernels take heads of `hd` values over `b`
/// (asserting, as [`avx2_takes`], that the block's rows lie inside its
/// slices).
#[cfg(target_arch = "x86_64")]
fn wide_takes(hd: usize, b: &Block<'_>) -> bool {
    avx512::takes(hd) && avx2_takes(hd, b)
}

/// [`update`] for the `H` heads `q` (of one length) on 512-bit registers.
///
/// # Safety
/// [`wide_takes`] for the heads' length and `b`.
#[cfg(target_arch = "x86_64")]
unsafe fn update_wide<const H: usize>(
    q: [&[f32]; H],
    b: Block<'_>,
    scale_by: f32,
    st: [State<'_>; H],
) {
    let hd = q[0].len();
    assert!(
        q.iter().all(|q| q.len() == hd) && st.iter().all(|s| s.acc.len() >= hd),
        "attention heads of one length"
    );
    debug_assert!(b.n <= MAX_KEYS);
    let (stride, n) = (b.stride, b.n);
    // SAFETY: AVX-512 F detected, the head length a multiple of 16 up to
    // 256 and the block's rows inside its slices (`wide_takes`, the
    // caller); queries and accumulators of that length (asserted).
    unsafe {
        match b.kv {
            KvData::F32 { k, v } => {
                avx512::update_group(q, Typed { k, v, stride, n }, scale_by, st)
            }
            KvData::F16 { k, v } => {
                avx512::update_group(q, Typed { k, v, stride, n }, scale_by, st)
            }
        }
    }
}

/// [`update_heads`] on 512-bit registers: the heads in as few runs of up
/// to [`avx512::MAX_HEADS`] as there can be, of sizes as even as can be.
///
/// # Safety
/// [`wide_takes`] for `hd` and `b`.
#[cfg(target_arch = "x86_64")]
unsafe fn update_heads_wide(q: &[f32], b: Block<'_>, scale_by: f32, st: Heads<'_>, hd: usize) {
    let n = st.m.len();
    let runs = n.div_ceil(avx512::MAX_HEADS);
    let Heads {
        mut m,
        mut l,
        mut acc,
    } = st;
    let mut q = q;
    for i in 0..runs {
        let size = n / runs + usize::from(i < n % runs);
        let (qh, qr) = q.split_at(size * hd);
        let (mh, mr) = std::mem::take(&mut m).split_at_mut(size);
        let (lh, lr) = std::mem::take(&mut l).split_at_mut(size);
        let (ah, ar) = std::mem::take(&mut acc).split_at_mut(size * hd);
        (q, m, l, acc) = (qr, mr, lr, ar);
        let heads = Heads {
            m: mh,
            l: lh,
            acc: ah,
        };
        // SAFETY: as the caller guarantees.
        unsafe {
            match size {
                1 => update_heads_wide_n::<1>(qh, b, scale_by, heads),
                2 => update_heads_wide_n::<2>(qh, b, scale_by, heads),
                3 => update_heads_wide_n::<3>(qh, b, scale_by, heads),
                _ => update_heads_wide_n::<4>(qh, b, scale_by, heads),
            }
        }
    }
}

/// [`update_wide`] for the `H` heads of `st` (queries `q`, one after
/// another).
///
/// # Safety
/// As [`update_wide`].
#[cfg(target_arch = "x86_64")]
unsafe fn update_heads_wide_n<const H: usize>(
    q: &[f32],
    b: Block<'_>,
    scale_by: f32,
    st: Heads<'_>,
) {
    let hd = q.len() / H;
    let qs: [&[f32]; H] = std::array::from_fn(|h| &q[h * hd..][..hd]);
    let mut heads =
        st.m.iter_mut()
            .zip(st.l.iter_mut())
            .zip(st.acc.chunks_exact_mut(hd))
            .map(|((m, l), acc)| State { m, l, acc });
    let states: [State<'_>; H] =
        std::array::from_fn(|_| heads.next().expect("a state for every head"));
    // SAFETY: as the caller guarantees.
    unsafe { update_wide(qs, b, scale_by, states) }
}

/// The running states of consecutive query heads (a KV head's group):
/// head `h`'s maximum `m[h]`, sum `l[h]` and weighted values
/// `acc[h * head_dim..][..head_dim]`.
pub(crate) struct Heads<'a> {
    /// Largest scores.
    pub m: &'a mut [f32],
    /// Sums of `exp(score - m)`.
    pub l: &'a mut [f32],
    /// Weighted values, one head after another.
    pub acc: &'a mut [f32],
}

/// [`update`] for consecutive query heads `q` (`m.len()` heads, one after
/// another) that read the keys and values of `b`: up to four at a time on
/// 512-bit registers, else two at a time, each key and value loaded once
/// for the heads taken together (the same bits as one at a time).
pub(crate) fn update_heads(q: &[f32], b: Block<'_>, scale_by: f32, st: Heads<'_>) {
    let n = st.m.len();
    if n == 0 {
        return;
    }
    let hd = q.len() / n;
    debug_assert!(q.len() == n * hd && st.l.len() == n && st.acc.len() >= n * hd);
    #[cfg(target_arch = "x86_64")]
    if wide_takes(hd, &b) {
        // SAFETY: the 512-bit kernels take the heads' length and block.
        return unsafe { update_heads_wide(q, b, scale_by, st, hd) };
    }
    let mut heads = q
        .chunks_exact(hd)
        .zip(st.m.iter_mut().zip(st.l.iter_mut()))
        .zip(st.acc.chunks_exact_mut(hd))
        .map(|((q, (m, l)), acc)| (q, State { m, l, acc }));
    while let Some((q0, s0)) = heads.next() {
        match heads.next() {
            Some((q1, s1)) => update_pair([q0, q1], b, scale_by, [s0, s1]),
            None => update(q0, b, scale_by, s0),
        }
    }
}

/// [`update`] for two heads of one length.
fn update_pair(q: [&[f32]; 2], b: Block<'_>, scale_by: f32, st: [State<'_>; 2]) {
    debug_assert!(b.n <= MAX_KEYS && q[0].len() == q[1].len());
    #[cfg(target_arch = "x86_64")]
    if avx2_takes(q[0].len(), &b) {
        let (stride, n) = (b.stride, b.n);
        // SAFETY: as in `update`, for both heads (of one length).
        return unsafe {
            match b.kv {
                KvData::F32 { k, v } => {
                    avx2::update_pair(q, Typed { k, v, stride, n }, scale_by, st)
                }
                KvData::F16 { k, v } => {
                    avx2::update_pair(q, Typed { k, v, stride, n }, scale_by, st)
                }
            }
        };
    }
    let [s0, s1] = st;
    update_scalar(q[0], b, scale_by, s0);
    update_scalar(q[1], b, scale_by, s1);
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
mod avx512;

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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: f32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as f32 + seed) * 0.731).sin() * 2.0)
            .collect()
    }

    /// `x` in f16.
    fn halves(x: &[f32]) -> Vec<f16> {
        x.iter().map(|&v| f16::from_f32(v)).collect()
    }

    /// Runs [`update`] and [`update_scalar`] twice on `b` (from a fresh
    /// state, then on top of it: the rescale) and compares the states.
    fn check(q: &[f32], b: Block<'_>, what: &str) {
        check_with(update, q, b, what)
    }

    /// [`check`] for the update `f`.
    fn check_with(
        f: impl Fn(&[f32], Block<'_>, f32, State<'_>),
        q: &[f32],
        b: Block<'_>,
        what: &str,
    ) {
        let hd = q.len();
        let (mut m1, mut l1, mut a1) = (f32::NEG_INFINITY, 0f32, vec![0f32; hd]);
        let (mut m2, mut l2, mut a2) = (f32::NEG_INFINITY, 0f32, vec![0f32; hd]);
        for s in [0.1, 0.7] {
            let st1 = State {
                m: &mut m1,
                l: &mut l1,
                acc: &mut a1,
            };
            f(q, b, s, st1);
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
            let (kh, vh) = (halves(&k), halves(&v));
            let kv = KvData::F16 { k: &kh, v: &vh };
            check(&q, Block { kv, stride, n }, &format!("f16 hd {hd}"));
        }
    }

    /// Both x86 paths against the portable one, whichever `update` picks
    /// here: the 512-bit one takes every head length the AVX2 one takes
    /// that is a multiple of 16.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn each_x86_path_matches_the_portable_one() {
        let mut ran = 0;
        for (hd, n, stride) in [(64, 64, 192), (64, 13, 64), (128, 33, 256), (256, 7, 256)] {
            let q = values(hd, 1.0);
            let k = values(n * stride, 2.0);
            let v = values(n * stride, 3.0);
            let (kh, vh) = (halves(&k), halves(&v));
            for kv in [KvData::F32 { k: &k, v: &v }, KvData::F16 { k: &kh, v: &vh }] {
                let b = Block { kv, stride, n };
                if avx2_takes(hd, &b) {
                    // SAFETY: the AVX2 kernels take it (checked just now).
                    let f = |q: &[f32], b: Block<'_>, s, st: State<'_>| unsafe {
                        update_avx2(q, b, s, st)
                    };
                    check_with(f, &q, b, &format!("avx2, hd {hd}, {n} keys"));
                    ran += 1;
                }
                if wide_takes(hd, &b) {
                    // SAFETY: the 512-bit kernels take it (checked just now).
                    let f = |q: &[f32], b: Block<'_>, s, st: State<'_>| unsafe {
                        update_wide([q], b, s, [st])
                    };
                    check_with(f, &q, b, &format!("avx512, hd {hd}, {n} keys"));
                    ran += 1;
                }
            }
        }
        eprintln!("{ran} x86 cases");
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_vector_maximum_is_the_scalar_fold() {
        if !crate::ops::vec::has_avx2() {
            return;
        }
        let mut x = values(64, 4.0);
        x[37] = 9.5;
        // NaNs in the first and last eight, in every lane of the last
        x[5] = f32::NAN;
        x[56..64].fill(f32::NAN);
        x[50] = f32::NEG_INFINITY;
        for from in [f32::NEG_INFINITY, 0.5, 12.0] {
            let want = x.iter().fold(from, |m, &v| m.max(v));
            // SAFETY: AVX2 detected above.
            let got = unsafe { avx2::max8(&x, from) };
            assert_eq!(got.to_bits(), want.to_bits(), "from {from}");
        }
    }

    #[test]
    fn heads_two_at_a_time_give_the_bits_of_one_at_a_time() {
        for (heads, hd, n, stride) in [
            (3, 64, 37, 192),
            (7, 64, 20, 448),
            (8, 64, 64, 512),
            (9, 64, 3, 576),
            (2, 80, 64, 80),
            (4, 8, 1, 8),
            (5, 256, 9, 512),
            (2, 128, 4, 128),
        ] {
            let q = values(heads * hd, 1.0);
            let k = values(n * stride, 2.0);
            let v = values(n * stride, 3.0);
            let (kh, vh) = (halves(&k), halves(&v));
            for kv in [KvData::F32 { k: &k, v: &v }, KvData::F16 { k: &kh, v: &vh }] {
                let b = Block { kv, stride, n };
                let fresh = || {
                    (
                        vec![f32::NEG_INFINITY; heads],
                        vec![0f32; heads],
                        vec![0f32; heads * hd],
                    )
                };
                let (mut m1, mut l1, mut a1) = fresh();
                let (mut m2, mut l2, mut a2) = fresh();
                // twice: from fresh states, then on top of them (the rescale)
                for s in [0.1, 0.7] {
                    let st = Heads {
                        m: &mut m1,
                        l: &mut l1,
                        acc: &mut a1,
                    };
                    update_heads(&q, b, s, st);
                    for h in 0..heads {
                        let st = State {
                            m: &mut m2[h],
                            l: &mut l2[h],
                            acc: &mut a2[h * hd..][..hd],
                        };
                        update(&q[h * hd..][..hd], b, s, st);
                    }
                }
                let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                let what = format!("{heads} heads of {hd}, {n} keys");
                assert_eq!(bits(&m1), bits(&m2), "{what}: m");
                assert_eq!(bits(&l1), bits(&l2), "{what}: l");
                assert_eq!(bits(&a1), bits(&a2), "{what}: acc");
                assert!(
                    a1.iter().any(|&x| x != 0.0),
                    "{what}: something accumulated"
                );
            }
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
