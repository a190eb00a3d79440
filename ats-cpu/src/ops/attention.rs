//! Flash attention on the CPU: online softmax over blocks of keys, so no
//! score matrix is ever stored; causal, full and segment (window) masks.
//! Keys and values are read where they lie in the cache, except f16 blocks
//! that a task reads many times (several query rows), which it converts
//! once into a `Stage` (staged f32 rows).

use crate::team;
use half::f16;

use super::decode_attention;
use super::online_softmax::{self, Block, Heads, MAX_KEYS};
use super::vec::{f16_to_f32, scale};

/// Keys and values: rows of `n_kv_heads * head_dim`.
#[derive(Clone, Copy, Debug)]
pub enum KvData<'a> {
    /// Single precision (vision, or an f32 cache).
    F32 {
        /// Keys.
        k: &'a [f32],
        /// Values.
        v: &'a [f32],
    },
    /// Half precision cache.
    F16 {
        /// Keys.
        k: &'a [f16],
        /// Values.
        v: &'a [f16],
    },
}

impl<'a> KvData<'a> {
    /// Values in each of the two slices (the shorter).
    pub(crate) fn len(&self) -> usize {
        match self {
            KvData::F32 { k, v } => k.len().min(v.len()),
            KvData::F16 { k, v } => k.len().min(v.len()),
        }
    }

    /// Asks for `rows` rows of `cols` values from value `at`, `stride`
    /// apart, of the keys and of the values: hints only, never read.
    fn prefetch(&self, at: usize, rows: usize, stride: usize, cols: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            let (k, v, size) = match self {
                KvData::F32 { k, v } => (k.as_ptr().cast::<u8>(), v.as_ptr().cast::<u8>(), 4),
                KvData::F16 { k, v } => (k.as_ptr().cast::<u8>(), v.as_ptr().cast::<u8>(), 2),
            };
            for j in 0..rows {
                let row = (at + j * stride) * size;
                for line in (0..cols * size).step_by(64) {
                    // SAFETY: SSE is part of every x86_64 CPU; a prefetch
                    // reads nothing, so any address is sound.
                    unsafe {
                        _mm_prefetch::<_MM_HINT_T0>(k.wrapping_add(row + line).cast());
                        _mm_prefetch::<_MM_HINT_T0>(v.wrapping_add(row + line).cast());
                    }
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (at, rows, stride, cols);
    }

    /// Both slices from value `n`.
    pub(crate) fn skip(self, n: usize) -> KvData<'a> {
        match self {
            KvData::F32 { k, v } => KvData::F32 {
                k: &k[n..],
                v: &v[n..],
            },
            KvData::F16 { k, v } => KvData::F16 {
                k: &k[n..],
                v: &v[n..],
            },
        }
    }
}

/// Where key `t` of a sequence is among the rows of [`KvData`].
#[derive(Clone, Copy, Debug)]
pub enum RowMap<'a> {
    /// Row `t`.
    Contiguous,
    /// Row `blocks[t / block_tokens] * block_tokens + t % block_tokens`.
    Blocks {
        /// The sequence's blocks, in token order.
        blocks: &'a [u32],
        /// Rows per block.
        block_tokens: usize,
    },
}

impl RowMap<'_> {
    /// The row of key `t`.
    #[inline]
    pub fn row(&self, t: usize) -> usize {
        match *self {
            RowMap::Contiguous => t,
            RowMap::Blocks {
                blocks,
                block_tokens,
            } => blocks[t / block_tokens] as usize * block_tokens + t % block_tokens,
        }
    }

    /// The run of consecutive rows from key `t` to its block's end, where
    /// `t` lies in a block of the table (`None` for contiguous rows).
    fn run_at(&self, t: usize) -> Option<(usize, usize)> {
        match *self {
            RowMap::Contiguous => None,
            RowMap::Blocks {
                blocks,
                block_tokens,
            } => (t / block_tokens < blocks.len())
                .then(|| (self.row(t), block_tokens - t % block_tokens)),
        }
    }

    /// Keys `t0..t0 + n` as runs of consecutive rows: `(first row, keys)`.
    /// A run ends at every block's end, even where the next block follows
    /// among the rows: the kernels then split a sequence's keys the same
    /// way wherever the pool put its blocks, so a sequence alone and in a
    /// batch get the same bits (merging adjacent blocks changed them).
    pub fn runs(&self, t0: usize, n: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        let step = match *self {
            RowMap::Contiguous => n.max(1),
            RowMap::Blocks { block_tokens, .. } => block_tokens,
        };
        let mut t = t0;
        std::iter::from_fn(move || {
            if t >= t0 + n {
                return None;
            }
            let len = (step - t % step).min(t0 + n - t);
            let run = (self.row(t), len);
            t += len;
            Some(run)
        })
    }
}

/// A sequence's keys and values: the rows and where each key is among them.
#[derive(Clone, Copy, Debug)]
pub struct KvRows<'a> {
    /// The rows.
    pub data: KvData<'a>,
    /// Key `t`'s row.
    pub map: RowMap<'a>,
}

impl<'a> KvRows<'a> {
    /// Keys and values whose key `t` is row `t`.
    pub fn contiguous(data: KvData<'a>) -> Self {
        KvRows {
            data,
            map: RowMap::Contiguous,
        }
    }

    /// Keys `t0..t0 + n` (at most [`MAX_KEYS`]) of the columns `cols` of
    /// rows of `width` values, handed to `f` as `(first key, block)`: read in
    /// place, or, with a `stage` and f16 rows, converted once into the stage.
    pub(crate) fn visit(
        &self,
        t0: usize,
        n: usize,
        width: usize,
        cols: std::ops::Range<usize>,
        stage: Option<&mut Stage>,
        mut f: impl FnMut(usize, Block<'_>),
    ) {
        debug_assert!(n <= MAX_KEYS);
        match (stage, self.data) {
            (Some(st), KvData::F16 { .. }) => {
                let w = cols.len();
                self.gather(t0, n, width, cols, &mut st.k, &mut st.v);
                let kv = KvData::F32 {
                    k: &st.k[..n * w],
                    v: &st.v[..n * w],
                };
                f(t0, Block { kv, stride: w, n });
            }
            (_, data) => {
                // One block per run of consecutive rows (n <= MAX_KEYS).
                // One head's columns of rows a pool's block apart are asked
                // for a block ahead: the hardware's stream prefetch loses
                // them at every block's end (whole rows, read one after
                // another, it keeps).
                let ask = cols.len() < width;
                let mut key = t0;
                for (row, len) in self.map.runs(t0, n) {
                    if ask && let Some((next, rows)) = self.map.run_at(key + len) {
                        data.prefetch(next * width + cols.start, rows, width, cols.len());
                    }
                    let kv = data.skip(row * width + cols.start);
                    f(
                        key,
                        Block {
                            kv,
                            stride: width,
                            n: len,
                        },
                    );
                    key += len;
                }
            }
        }
    }

    /// Keys and values `t0..t0 + n` of the head columns `cols` as f32, one
    /// key after another (`cols.len()` values each).
    fn gather(
        &self,
        t0: usize,
        n: usize,
        width: usize,
        cols: std::ops::Range<usize>,
        kd: &mut [f32],
        vd: &mut [f32],
    ) {
        let w = cols.len();
        let mut at = 0;
        for (row, len) in self.map.runs(t0, n) {
            for j in 0..len {
                let src = (row + j) * width + cols.start;
                let (ko, vo) = (&mut kd[at * w..][..w], &mut vd[at * w..][..w]);
                match self.data {
                    KvData::F32 { k, v } => {
                        ko.copy_from_slice(&k[src..src + w]);
                        vo.copy_from_slice(&v[src..src + w]);
                    }
                    KvData::F16 { k, v } => {
                        f16_to_f32(&k[src..src + w], ko);
                        f16_to_f32(&v[src..src + w], vo);
                    }
                }
                at += 1;
            }
        }
    }
}

/// f32 copies of one block of keys and values: where a task converts an f16
/// block once for all the query rows that read it.
pub(crate) struct Stage {
    k: Vec<f32>,
    v: Vec<f32>,
}

impl Stage {
    /// Room for `keys` keys of `width` values.
    pub(crate) fn new(keys: usize, width: usize) -> Stage {
        Stage {
            k: vec![0.0; keys * width],
            v: vec![0.0; keys * width],
        }
    }

    /// Bytes of a stage of `keys` keys of `width` values.
    pub(crate) fn bytes(keys: usize, width: usize) -> u64 {
        8 * (keys * width) as u64
    }
}

/// Which keys query row `r` sees.
#[derive(Clone, Copy, Debug)]
pub enum KeyRange<'a> {
    /// Keys `0..=offset + r` (query row r sits at absolute position offset + r).
    Causal {
        /// Keys before the first query.
        offset: usize,
    },
    /// The last `window` keys up to the query's own: `offset + r + 1 - window
    /// ..= offset + r` (sliding-window attention).
    Sliding {
        /// Keys before the first query.
        offset: usize,
        /// Keys each query sees at most, its own included.
        window: usize,
    },
    /// All keys.
    Full,
    /// The keys of the query's segment; `bounds` are cumulative row counts from 0.
    Segments {
        /// Cumulative segment ends.
        bounds: &'a [usize],
    },
}

impl KeyRange<'_> {
    pub(crate) fn of(&self, r: usize, n_keys: usize) -> (usize, usize) {
        match *self {
            KeyRange::Causal { offset } => (0, (offset + r + 1).min(n_keys)),
            KeyRange::Sliding { offset, window } => {
                let hi = (offset + r + 1).min(n_keys);
                ((offset + r + 1).saturating_sub(window).min(hi), hi)
            }
            KeyRange::Full => (0, n_keys),
            KeyRange::Segments { bounds } => {
                let s = bounds.partition_point(|&b| b <= r);
                let lo = if s == 0 { 0 } else { bounds[s - 1] };
                let hi = bounds.get(s).copied().unwrap_or(n_keys).min(n_keys);
                (lo.min(hi), hi)
            }
        }
    }
}

/// Shape of an attention call.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Columns per head.
    pub head_dim: usize,
    /// Score scale.
    pub scale: f32,
    /// Query rows.
    pub n_queries: usize,
    /// Key rows available.
    pub n_keys: usize,
    /// Query rows per task (the Q chunk); 0: [`DEFAULT_Q_BLOCK`].
    pub q_block: usize,
}

impl AttnShape {
    /// The query rows each task takes, at least 1 and at most the queries.
    pub fn q_rows(&self) -> usize {
        let b = if self.q_block == 0 {
            DEFAULT_Q_BLOCK
        } else {
            self.q_block
        };
        b.min(self.n_queries).max(1)
    }

    /// Tasks: one per (key/value head, query block).
    pub fn tasks(&self) -> usize {
        self.n_kv_heads * self.n_queries.div_ceil(self.q_rows())
    }

    /// Scratch bytes one task holds: its accumulators and softmax state for
    /// `q_rows x group` heads, and a `Stage` of one key block. Independent
    /// of the key count: no score matrix is ever stored.
    pub fn task_scratch_bytes(&self) -> u64 {
        let (qb, hd) = (self.q_rows() as u64, self.head_dim as u64);
        let group = (self.n_heads / self.n_kv_heads.max(1)) as u64;
        4 * (qb * group * (hd + 2) + K_BLOCK as u64)
            + 16 * qb
            + Stage::bytes(K_BLOCK, self.head_dim)
    }

    /// Scratch bytes of a whole call on `threads` threads (each runs one
    /// task at a time); decode shapes take the key-split path's.
    pub fn scratch_bytes(&self, threads: usize) -> u64 {
        if let Some(splits) = decode_attention::splits(self) {
            return decode_attention::scratch_bytes(self, splits, threads);
        }
        self.tasks().min(threads.max(1)) as u64 * self.task_scratch_bytes()
    }
}

/// Query rows per task when the caller does not choose: small enough that a
/// task's scratch stays in L1/L2.
pub const DEFAULT_Q_BLOCK: usize = 16;
/// Keys per block: the rows of every query of a task meet one block of keys
/// before the next, so the block (or its stage) stays in cache.
const K_BLOCK: usize = MAX_KEYS;

/// The output matrix, written by tasks whose rows x head-group regions are disjoint.
struct SharedOut {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: tasks write disjoint regions of the buffer (see `SharedOut::region`)
// and the buffer outlives the parallel loop that shares it.
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// `len` values at `start`.
    ///
    /// # Safety
    /// No two live regions may overlap, and the region must lie in the buffer.
    #[allow(clippy::mut_from_ref)]
    unsafe fn region(&self, start: usize, len: usize) -> &mut [f32] {
        assert!(
            start + len <= self.len,
            "attention output region out of bounds"
        );
        // SAFETY: in bounds (checked above); the caller guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }
}

/// A task's working memory, reused across the tasks a thread runs.
struct Scratch {
    acc: Vec<f32>,
    m: Vec<f32>,
    l: Vec<f32>,
    bounds: Vec<(usize, usize)>,
    /// Made when a task first has several query rows: a decode step never
    /// reads it, and zeroing its 32 KB per call and thread was 0.6% of a
    /// round of 8 decode tokens.
    stage: Option<Stage>,
}

impl Scratch {
    fn new(s: &AttnShape) -> Scratch {
        let (qb, hd) = (s.q_rows(), s.head_dim);
        let group = s.n_heads / s.n_kv_heads;
        Scratch {
            acc: vec![0.0; qb * group * hd],
            m: vec![0.0; qb * group],
            l: vec![0.0; qb * group],
            bounds: Vec::with_capacity(qb),
            stage: None,
        }
    }
}

/// `out[r, h] = softmax(q[r, h] K_g^T * scale) V_g` over the keys `range` allows,
/// with `g = h / (n_heads / n_kv_heads)`. Tasks of `q_rows` query rows and one
/// key/value head run in parallel and write their rows of `out` directly.
pub fn flash_attention(
    q: &[f32],
    kv: KvRows<'_>,
    range: KeyRange<'_>,
    out: &mut [f32],
    s: AttnShape,
) {
    flash_attention_sinks(q, kv, range, None, out, s)
}

/// [`flash_attention`] where head `h`'s softmax also counts `sinks[h]` as
/// one more score whose value is zero: `out = sum_j e^(s_j) v_j / (sum_j
/// e^(s_j) + e^(sinks[h]))` (gpt-oss's attention sinks).
pub fn flash_attention_sinks(
    q: &[f32],
    kv: KvRows<'_>,
    range: KeyRange<'_>,
    sinks: Option<&[f32]>,
    out: &mut [f32],
    s: AttnShape,
) {
    if let Some(sk) = sinks {
        assert!(sk.len() >= s.n_heads, "one sink per query head");
    }
    let hd = s.head_dim;
    let group = s.n_heads / s.n_kv_heads;
    let q_width = s.n_heads * hd;
    let qb = s.q_rows();
    assert!(
        out.len() >= s.n_queries * q_width,
        "attention output too small"
    );
    if let Some(splits) = decode_attention::splits(&s) {
        return decode_attention::split_attention(q, kv, range, sinks, out, s, splits);
    }
    let shared = SharedOut {
        ptr: out.as_mut_ptr(),
        len: out.len(),
    };
    team::for_each_init(
        s.tasks(),
        || Scratch::new(&s),
        |sc, t| {
            let (g, b) = (t / s.n_queries.div_ceil(qb), t % s.n_queries.div_ceil(qb));
            let r0 = b * qb;
            let rows = qb.min(s.n_queries - r0);
            block(q, kv, range, s, Task { g, r0, rows }, sc);
            let group_sinks = sinks.map(|sk| &sk[g * group..(g + 1) * group]);
            finish(sc, rows, group, hd, group_sinks);
            for i in 0..rows {
                // SAFETY: task (g, b) alone writes rows r0..r0+rows, columns of head group g.
                let dst = unsafe { shared.region((r0 + i) * q_width + g * group * hd, group * hd) };
                dst.copy_from_slice(&sc.acc[i * group * hd..][..group * hd]);
            }
        },
    );
}

/// One task's share of the work: all query heads of one key/value head, for
/// a run of query rows.
#[derive(Clone, Copy, Debug)]
struct Task {
    /// The key/value head.
    g: usize,
    /// The first query row.
    r0: usize,
    /// Query rows, from `r0`.
    rows: usize,
}

/// One (kv head `g`, query rows `r0..r0 + rows`) task; leaves `rows x group x head_dim`
/// outputs in `sc.acc`.
fn block(
    q: &[f32],
    kv: KvRows<'_>,
    range: KeyRange<'_>,
    s: AttnShape,
    task: Task,
    sc: &mut Scratch,
) {
    let Task { g, r0, rows } = task;
    let hd = s.head_dim;
    let group = s.n_heads / s.n_kv_heads;
    let q_width = s.n_heads * hd;
    let kv_width = s.n_kv_heads * hd;
    let Scratch {
        acc,
        m,
        l,
        bounds,
        stage,
    } = sc;
    bounds.clear();
    bounds.extend((0..rows).map(|i| range.of(r0 + i, s.n_keys)));
    let k_lo = bounds.iter().map(|x| x.0).min().unwrap_or(0);
    let k_hi = bounds.iter().map(|x| x.1).max().unwrap_or(0);
    let acc = &mut acc[..rows * group * hd];
    acc.fill(0.0);
    let m = &mut m[..rows * group];
    m.fill(f32::NEG_INFINITY);
    let l = &mut l[..rows * group];
    l.fill(0.0);
    // One query row (decode) reads each key once per pair of the group's
    // query heads: in place. More rows read an f16 block often enough to
    // convert it once.
    let mut stage = (rows > 1).then(|| stage.get_or_insert_with(|| Stage::new(K_BLOCK, hd)));

    let mut kb = k_lo;
    while kb < k_hi {
        let n = K_BLOCK.min(k_hi - kb);
        let cols = g * hd..(g + 1) * hd;
        kv.visit(kb, n, kv_width, cols, stage.as_deref_mut(), |t, blk| {
            for (i, &(lo, hi)) in bounds.iter().enumerate() {
                let (j0, j1) = (lo.max(t), hi.min(t + blk.n));
                if j0 >= j1 {
                    continue;
                }
                let b = blk.rows(j0 - t, j1 - j0);
                let qg = &q[(r0 + i) * q_width + g * group * hd..][..group * hd];
                let idx = i * group;
                let st = Heads {
                    m: &mut m[idx..idx + group],
                    l: &mut l[idx..idx + group],
                    acc: &mut acc[idx * hd..(idx + group) * hd],
                };
                online_softmax::update_heads(qg, b, s.scale, st);
            }
        });
        kb += n;
    }
}

/// Normalises a task's `rows x group` accumulators by their softmax sums,
/// counting head `h`'s sink logit `sinks[h]` (of the task's group) as one
/// more term of the sum.
fn finish(sc: &mut Scratch, rows: usize, group: usize, hd: usize, sinks: Option<&[f32]>) {
    for idx in 0..rows * group {
        let acc = &mut sc.acc[idx * hd..][..hd];
        let (m, l) = (sc.m[idx], sc.l[idx]);
        let inv = match sinks {
            _ if m == f32::NEG_INFINITY || l <= 0.0 => 0.0,
            None => 1.0 / l,
            Some(sk) => {
                let sink = sk[idx % group];
                let mx = m.max(sink);
                let c = (m - mx).exp();
                c / (l * c + (sink - mx).exp())
            }
        };
        scale(acc, inv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain softmax attention with the full score row, in f64.
    fn naive(q: &[f32], k: &[f32], v: &[f32], range: KeyRange<'_>, s: AttnShape) -> Vec<f32> {
        naive_sinks(q, k, v, range, None, s)
    }

    /// [`naive`] with each head's sink logit as one more score of no value.
    fn naive_sinks(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        range: KeyRange<'_>,
        sinks: Option<&[f32]>,
        s: AttnShape,
    ) -> Vec<f32> {
        let hd = s.head_dim;
        let group = s.n_heads / s.n_kv_heads;
        let mut out = vec![0.0; s.n_queries * s.n_heads * hd];
        for r in 0..s.n_queries {
            let (lo, hi) = range.of(r, s.n_keys);
            for h in 0..s.n_heads {
                let g = h / group;
                let qh = &q[(r * s.n_heads + h) * hd..][..hd];
                let sc: Vec<f64> = (lo..hi)
                    .map(|j| {
                        let kj = &k[(j * s.n_kv_heads + g) * hd..][..hd];
                        qh.iter()
                            .zip(kj)
                            .map(|(a, b)| *a as f64 * *b as f64)
                            .sum::<f64>()
                            * s.scale as f64
                    })
                    .collect();
                let sink = sinks.map(|sk| sk[h] as f64);
                let mx = sc
                    .iter()
                    .cloned()
                    .chain(sink)
                    .fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = sc.iter().map(|x| (x - mx).exp()).collect();
                let z: f64 = e.iter().sum::<f64>() + sink.map_or(0.0, |x| (x - mx).exp());
                if lo >= hi {
                    continue; // no key: zeros, whatever the sink
                }
                for d in 0..hd {
                    let mut acc = 0.0;
                    for (jj, j) in (lo..hi).enumerate() {
                        acc += e[jj] / z * v[(j * s.n_kv_heads + g) * hd + d] as f64;
                    }
                    out[(r * s.n_heads + h) * hd + d] = acc as f32;
                }
            }
        }
        out
    }

    fn data(n: usize, seed: f32) -> Vec<f32> {
        (0..n).map(|i| ((i as f32 + seed) * 0.731).sin()).collect()
    }

    #[test]
    fn a_block_table_gives_what_the_rows_in_order_give() {
        // keys in blocks of 8 rows, stored last block first (none adjacent),
        // as a KV pool's sequence; the general path (few keys), the
        // key-split path (many) and several query rows
        let (bt, n_kv, hd, heads) = (8usize, 2usize, 16usize, 6usize);
        let width = n_kv * hd;
        for (nq, nk) in [(1usize, 100usize), (3, 100), (1, 300), (20, 60)] {
            let blocks: Vec<u32> = (0..nk.div_ceil(bt) as u32).rev().collect();
            let (k, v) = (data(nk * width, 0.3), data(nk * width, 1.7));
            // key t's row in the table's order
            let (mut kb, mut vb) = (
                vec![0f32; blocks.len() * bt * width],
                vec![0f32; blocks.len() * bt * width],
            );
            for t in 0..nk {
                let row = blocks[t / bt] as usize * bt + t % bt;
                kb[row * width..][..width].copy_from_slice(&k[t * width..][..width]);
                vb[row * width..][..width].copy_from_slice(&v[t * width..][..width]);
            }
            let s = AttnShape {
                n_heads: heads,
                n_kv_heads: n_kv,
                head_dim: hd,
                scale: 0.25,
                n_queries: nq,
                n_keys: nk,
                q_block: 0,
            };
            let q = data(nq * heads * hd, 2.9);
            let range = KeyRange::Causal { offset: nk - nq };
            let mut want = vec![0f32; nq * heads * hd];
            let rows = KvRows::contiguous(KvData::F32 { k: &k, v: &v });
            flash_attention(&q, rows, range, &mut want, s);
            let mut got = vec![0f32; nq * heads * hd];
            let table = KvRows {
                data: KvData::F32 { k: &kb, v: &vb },
                map: RowMap::Blocks {
                    blocks: &blocks,
                    block_tokens: bt,
                },
            };
            flash_attention(&q, table, range, &mut got, s);
            let err = want
                .iter()
                .zip(&got)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(err < 1e-5, "{nq} queries, {nk} keys: {err}");
        }
    }

    #[test]
    fn matches_naive_attention_for_every_mask() {
        let bounds = [5usize, 37, 70, 100];
        let decode_bounds = [300usize, 301, 900];
        for (nq, nk, range) in [
            (1usize, 130usize, KeyRange::Causal { offset: 129 }),
            // decode shapes: the key-split path (uneven last split, 8 splits)
            (1, 1000, KeyRange::Causal { offset: 999 }),
            (3, 700, KeyRange::Causal { offset: 697 }),
            (8, 300, KeyRange::Full),
            (
                4,
                1000,
                KeyRange::Segments {
                    bounds: &decode_bounds,
                },
            ),
            (40, 40, KeyRange::Causal { offset: 0 }),
            (33, 100, KeyRange::Causal { offset: 67 }),
            (100, 100, KeyRange::Full),
            (100, 100, KeyRange::Segments { bounds: &bounds }),
        ] {
            let mut s = AttnShape {
                n_heads: 4,
                n_kv_heads: 2,
                head_dim: 16,
                scale: 0.25,
                n_queries: nq,
                n_keys: nk,
                q_block: 0,
            };
            let q = data(nq * 64, 1.0);
            let k = data(nk * 32, 2.0);
            let v = data(nk * 32, 3.0);
            let want = naive(&q, &k, &v, range, s);
            assert_eq!(decode_attention::splits(&s).is_some(), nk >= 256 && nq <= 8);
            // every Q chunk gives the same result: 1 row, uneven, default, all rows
            for q_block in [1, 7, 0, 1000] {
                s.q_block = q_block;
                let mut out = vec![f32::NAN; nq * 64];
                flash_attention(
                    &q,
                    KvRows::contiguous(KvData::F32 { k: &k, v: &v }),
                    range,
                    &mut out,
                    s,
                );
                let err = want
                    .iter()
                    .zip(&out)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f32::max);
                assert!(err < 1e-5, "f32 err {err} (q_block {q_block})");
            }
            let mut out = vec![0.0; nq * 64];
            let kh: Vec<f16> = k.iter().map(|&x| f16::from_f32(x)).collect();
            let vh: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
            flash_attention(
                &q,
                KvRows::contiguous(KvData::F16 { k: &kh, v: &vh }),
                range,
                &mut out,
                s,
            );
            let err = want
                .iter()
                .zip(&out)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(err < 2e-3, "f16 err {err}");
        }
    }

    #[test]
    fn sliding_windows_and_sinks_match_naive_attention() {
        let sinks = [0.5f32, -1.0, 2.5, 0.0];
        for (nq, nk, range, with_sinks) in [
            // decode past the window: the key-split path, most splits empty
            (
                1usize,
                700usize,
                KeyRange::Sliding {
                    offset: 699,
                    window: 128,
                },
                true,
            ),
            (
                3,
                700,
                KeyRange::Sliding {
                    offset: 697,
                    window: 8,
                },
                true,
            ),
            (1, 700, KeyRange::Causal { offset: 699 }, true),
            // a prefill chunk whose rows see different windows
            (
                40,
                40,
                KeyRange::Sliding {
                    offset: 0,
                    window: 8,
                },
                true,
            ),
            (
                33,
                100,
                KeyRange::Sliding {
                    offset: 67,
                    window: 16,
                },
                false,
            ),
            (20, 20, KeyRange::Causal { offset: 0 }, true),
            (8, 300, KeyRange::Full, true),
        ] {
            let s = AttnShape {
                n_heads: 4,
                n_kv_heads: 2,
                head_dim: 16,
                scale: 0.25,
                n_queries: nq,
                n_keys: nk,
                q_block: 7,
            };
            let q = data(nq * 64, 1.0);
            let k = data(nk * 32, 2.0);
            let v = data(nk * 32, 3.0);
            let sk = with_sinks.then_some(&sinks[..]);
            let want = naive_sinks(&q, &k, &v, range, sk, s);
            let mut out = vec![f32::NAN; nq * 64];
            flash_attention_sinks(
                &q,
                KvRows::contiguous(KvData::F32 { k: &k, v: &v }),
                range,
                sk,
                &mut out,
                s,
            );
            let err = want
                .iter()
                .zip(&out)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(err < 1e-5, "{nq}x{nk} {range:?}: err {err}");
            // the sinks and the window change the answer (the test can fail)
            let plain = naive(&q, &k, &v, KeyRange::Causal { offset: nk - nq }, s);
            if !matches!(range, KeyRange::Full) {
                let moved = plain
                    .iter()
                    .zip(&out)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f32::max);
                assert!(moved > 1e-3 || !with_sinks && matches!(range, KeyRange::Causal { .. }));
            }
        }
    }

    #[test]
    fn scratch_is_per_task_and_independent_of_the_key_count() {
        let mut s = AttnShape {
            n_heads: 16,
            n_kv_heads: 16,
            head_dim: 80,
            scale: 1.0,
            n_queries: 5000,
            n_keys: 5000,
            q_block: 16,
        };
        let small = s.scratch_bytes(4);
        assert_eq!(small, 4 * s.task_scratch_bytes());
        s.n_keys = 50_000;
        assert_eq!(s.scratch_bytes(4), small);
        // a bigger Q chunk costs more, but linearly, never n_queries x n_keys
        s.q_block = 256;
        let big = s.scratch_bytes(4);
        assert!(big > small && big < 4 * 256 * 90 * 4 + 4 * 48 * 1024);
        // one task per head at most: threads beyond the tasks hold nothing
        s.q_block = 5000;
        assert_eq!(s.tasks(), 16);
        assert_eq!(s.scratch_bytes(64), 16 * s.task_scratch_bytes());
        // decode (the key-split path): bounded whatever the context
        s.n_queries = 1;
        let at = |n_keys: usize| AttnShape { n_keys, ..s }.scratch_bytes(16);
        assert_eq!(at(100_000), at(1_000_000));
        assert!(at(1_000_000) < 64 * 16 * 82 * 4 + 16 * (2 * 16 * 16 * 80 + 16) * 4 + 1);
        assert!(at(300) < at(100_000));
    }
}
