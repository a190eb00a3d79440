//! Attention of a few query rows over many keys (decode): tasks take key
//! splits rather than KV heads, so each streams whole cache rows (all heads
//! of a key are contiguous) and there are enough tasks for every thread even
//! with few KV heads; the splits' softmax states are merged after. The
//! general path (one task per KV head) read 256-byte pieces 2 KB apart and
//! had 8 tasks for a Llama-3-8B decode step.

use crate::team;

use super::attention::{AttnShape, KeyRange, KvRows, Stage};
use super::online_softmax::{self, Heads, MAX_KEYS};
use super::vec::{axpy, scale};

/// Most query rows the split path takes.
const MAX_QUERIES: usize = 8;
/// Fewest keys per split.
const SPLIT_MIN_KEYS: usize = 128;
/// Most splits: bounds the partial states whatever the context.
const MAX_SPLITS: usize = 64;
/// Cache rows every query head meets before the next rows, with several
/// query rows (converted to f32 at once from an f16 cache: every query head
/// of every row reads them).
const ROWS: usize = 16;

/// Key splits for `s`, or `None` when the general path takes the shape.
/// Depends on the shape only, so results do not depend on the thread count.
pub(crate) fn splits(s: &AttnShape) -> Option<usize> {
    (s.n_queries <= MAX_QUERIES && s.n_keys >= 2 * SPLIT_MIN_KEYS)
        .then(|| s.n_keys.div_ceil(SPLIT_MIN_KEYS).min(MAX_SPLITS))
}

/// Scratch bytes of the split path on `threads` threads: the partial states
/// of every split, and per running task its stage of converted rows (with
/// several query rows).
pub(crate) fn scratch_bytes(s: &AttnShape, splits: usize, threads: usize) -> u64 {
    let states = (s.n_queries * s.n_heads * (s.head_dim + 2)) as u64;
    let task = if s.n_queries > 1 {
        Stage::bytes(ROWS, s.n_kv_heads * s.head_dim) + 4 * ROWS as u64
    } else {
        0
    };
    4 * splits as u64 * states + splits.min(threads.max(1)) as u64 * task
}

/// [`super::attention::flash_attention_sinks`] over `splits` key splits.
pub(crate) fn split_attention(
    q: &[f32],
    kv: KvRows<'_>,
    range: KeyRange<'_>,
    sinks: Option<&[f32]>,
    out: &mut [f32],
    s: AttnShape,
    splits: usize,
) {
    let (hd, nh) = (s.head_dim, s.n_heads);
    let group = nh / s.n_kv_heads;
    let kvw = s.n_kv_heads * hd;
    let states = s.n_queries * nh;
    // per split: acc[states][hd], then m[states], then l[states]
    let stride = states * (hd + 2);
    // the splits share the keys some query sees (all of them but with a
    // sliding window, whose earlier keys are never read)
    let (k_lo, k_hi) = (0..s.n_queries)
        .map(|r| range.of(r, s.n_keys))
        .fold((s.n_keys, 0), |(a, b), (lo, hi)| (a.min(lo), b.max(hi)));
    let k_lo = k_lo.min(k_hi);
    let per = (k_hi - k_lo).div_ceil(splits);
    let mut parts = vec![0f32; splits * stride];
    let mut chunks: Vec<&mut [f32]> = parts.chunks_mut(stride).collect();
    // One query row reads each row once per pair of a group's heads:
    // widened where it lies, in blocks as long as the kernel takes. More
    // rows read it often enough to stage it as f32.
    let staged = s.n_queries > 1;
    let step = if staged { ROWS } else { MAX_KEYS };
    team::for_each_mut_init(
        &mut chunks,
        || staged.then(|| Stage::new(ROWS, kvw)),
        |stage, i, part| {
            let (a, b) = (k_lo + i * per, (k_lo + (i + 1) * per).min(k_hi));
            let (acc, ml) = part.split_at_mut(states * hd);
            let (m, l) = ml.split_at_mut(states);
            m.fill(f32::NEG_INFINITY);
            for j0 in (a..b).step_by(step) {
                let n = step.min(b - j0);
                kv.visit(j0, n, kvw, 0..kvw, stage.as_mut(), |t, blk| {
                    for r in 0..s.n_queries {
                        let (lo, hi) = range.of(r, s.n_keys);
                        let (x0, x1) = (lo.max(t), hi.min(t + blk.n));
                        if x0 >= x1 {
                            continue;
                        }
                        let rows = blk.rows(x0 - t, x1 - x0);
                        for g in 0..s.n_kv_heads {
                            // the group's query heads: consecutive states
                            let idx = r * nh + g * group;
                            let st = Heads {
                                m: &mut m[idx..idx + group],
                                l: &mut l[idx..idx + group],
                                acc: &mut acc[idx * hd..(idx + group) * hd],
                            };
                            let q = &q[idx * hd..(idx + group) * hd];
                            online_softmax::update_heads(q, rows.cols(g * hd), s.scale, st);
                        }
                    }
                });
            }
        },
    );
    // out = sum_i acc_i e^(m_i - M) / (sum_i l_i e^(m_i - M) + e^(sink - M))
    for idx in 0..states {
        let o = &mut out[idx * hd..][..hd];
        o.fill(0.0);
        let mx = (0..splits)
            .map(|i| parts[i * stride + states * hd + idx])
            .fold(f32::NEG_INFINITY, f32::max);
        if mx == f32::NEG_INFINITY {
            continue; // no key in range: zeros, as the general path gives
        }
        let sink = sinks.map(|sk| sk[idx % nh]);
        let mx = sink.map_or(mx, |x| mx.max(x));
        let mut total = sink.map_or(0.0, |x| (x - mx).exp());
        for i in 0..splits {
            let p = &parts[i * stride..][..stride];
            let mi = p[states * hd + idx];
            if mi == f32::NEG_INFINITY {
                continue;
            }
            let e = (mi - mx).exp();
            total += p[states * hd + states + idx] * e;
            axpy(o, e, &p[idx * hd..][..hd]);
        }
        scale(o, 1.0 / total);
    }
}
