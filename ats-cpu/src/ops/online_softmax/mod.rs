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
mod avx2;

#[cfg(test)]
mod tests;
