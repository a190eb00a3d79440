//! Flash attention on the CPU: online softmax over blocks of keys, so no
//! score matrix is ever stored; grouped-query heads share each converted
//! key/value block; causal, full and segment (window) masks.

use half::f16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

use super::vec::{axpy, dot, scale};

/// Keys and values: rows of `n_kv_heads * head_dim`.
#[derive(Clone, Copy, Debug)]
pub enum KvRows<'a> {
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

/// Which keys query row `r` sees.
#[derive(Clone, Copy, Debug)]
pub enum KeyRange<'a> {
    /// Keys `0..=offset + r` (query row r sits at absolute position offset + r).
    Causal {
        /// Keys before the first query.
        offset: usize,
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
    fn of(&self, r: usize, n_keys: usize) -> (usize, usize) {
        match *self {
            KeyRange::Causal { offset } => (0, (offset + r + 1).min(n_keys)),
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
}

/// Query rows per task and keys per block. Small enough that a block's
/// scratch stays in L1/L2; the scratch per task is O(block), never O(n^2).
const Q_BLOCK: usize = 16;
const K_BLOCK: usize = 64;

/// `out[r, h] = softmax(q[r, h] K_g^T * scale) V_g` over the keys `range` allows,
/// with `g = h / (n_heads / n_kv_heads)`.
pub fn flash_attention(
    q: &[f32],
    kv: KvRows<'_>,
    range: KeyRange<'_>,
    out: &mut [f32],
    s: AttnShape,
) {
    let hd = s.head_dim;
    let group = s.n_heads / s.n_kv_heads;
    let q_width = s.n_heads * hd;
    let n_qb = s.n_queries.div_ceil(Q_BLOCK);
    let tasks: Vec<(usize, usize)> = (0..s.n_kv_heads)
        .flat_map(|g| (0..n_qb).map(move |b| (g, b)))
        .collect();
    let results: Vec<Vec<f32>> = tasks
        .par_iter()
        .map(|&(g, b)| block(q, kv, range, s, g, b))
        .collect();
    for (&(g, b), res) in tasks.iter().zip(&results) {
        let r0 = b * Q_BLOCK;
        let rows = Q_BLOCK.min(s.n_queries - r0);
        for i in 0..rows {
            let dst = &mut out[(r0 + i) * q_width + g * group * hd..][..group * hd];
            dst.copy_from_slice(&res[i * group * hd..][..group * hd]);
        }
    }
}

/// One (kv head, query block) task; returns `rows x group x head_dim` outputs.
fn block(
    q: &[f32],
    kv: KvRows<'_>,
    range: KeyRange<'_>,
    s: AttnShape,
    g: usize,
    b: usize,
) -> Vec<f32> {
    let hd = s.head_dim;
    let group = s.n_heads / s.n_kv_heads;
    let q_width = s.n_heads * hd;
    let kv_width = s.n_kv_heads * hd;
    let r0 = b * Q_BLOCK;
    let rows = Q_BLOCK.min(s.n_queries - r0);
    let bounds: Vec<(usize, usize)> = (0..rows).map(|i| range.of(r0 + i, s.n_keys)).collect();
    let k_lo = bounds.iter().map(|x| x.0).min().unwrap_or(0);
    let k_hi = bounds.iter().map(|x| x.1).max().unwrap_or(0);

    let mut acc = vec![0.0f32; rows * group * hd];
    let mut m = vec![f32::NEG_INFINITY; rows * group];
    let mut l = vec![0.0f32; rows * group];
    let mut kbuf = vec![0.0f32; K_BLOCK * hd];
    let mut vbuf = vec![0.0f32; K_BLOCK * hd];
    let mut scores = [0.0f32; K_BLOCK];

    let mut kb = k_lo;
    while kb < k_hi {
        let n = K_BLOCK.min(k_hi - kb);
        // gather this kv head's rows of the block as f32, once for all heads of the group
        for j in 0..n {
            let src = (kb + j) * kv_width + g * hd;
            let (kd, vd) = (&mut kbuf[j * hd..][..hd], &mut vbuf[j * hd..][..hd]);
            match kv {
                KvRows::F32 { k, v } => {
                    kd.copy_from_slice(&k[src..src + hd]);
                    vd.copy_from_slice(&v[src..src + hd]);
                }
                KvRows::F16 { k, v } => {
                    k[src..src + hd].convert_to_f32_slice(kd);
                    v[src..src + hd].convert_to_f32_slice(vd);
                }
            }
        }
        for (i, &(lo, hi)) in bounds.iter().enumerate() {
            let (j0, j1) = (lo.max(kb), hi.min(kb + n));
            if j0 >= j1 {
                continue;
            }
            for h in 0..group {
                let qh = &q[(r0 + i) * q_width + (g * group + h) * hd..][..hd];
                let idx = i * group + h;
                let mut mx = m[idx];
                for j in j0..j1 {
                    let sc = dot(qh, &kbuf[(j - kb) * hd..][..hd]) * s.scale;
                    scores[j - kb] = sc;
                    mx = mx.max(sc);
                }
                let a = &mut acc[idx * hd..][..hd];
                if mx > m[idx] {
                    // rescale what was accumulated under the old maximum
                    let corr = (m[idx] - mx).exp();
                    l[idx] *= corr;
                    scale(a, corr);
                    m[idx] = mx;
                }
                for j in j0..j1 {
                    let p = (scores[j - kb] - mx).exp();
                    l[idx] += p;
                    axpy(a, p, &vbuf[(j - kb) * hd..][..hd]);
                }
            }
        }
        kb += n;
    }
    for idx in 0..rows * group {
        let inv = if l[idx] > 0.0 { 1.0 / l[idx] } else { 0.0 };
        scale(&mut acc[idx * hd..][..hd], inv);
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain softmax attention with the full score row, in f64.
    fn naive(q: &[f32], k: &[f32], v: &[f32], range: KeyRange<'_>, s: AttnShape) -> Vec<f32> {
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
                let mx = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = sc.iter().map(|x| (x - mx).exp()).collect();
                let z: f64 = e.iter().sum();
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
    fn matches_naive_attention_for_every_mask() {
        let bounds = [5usize, 37, 70, 100];
        for (nq, nk, range) in [
            (1usize, 130usize, KeyRange::Causal { offset: 129 }),
            (40, 40, KeyRange::Causal { offset: 0 }),
            (33, 100, KeyRange::Causal { offset: 67 }),
            (100, 100, KeyRange::Full),
            (100, 100, KeyRange::Segments { bounds: &bounds }),
        ] {
            let s = AttnShape {
                n_heads: 4,
                n_kv_heads: 2,
                head_dim: 16,
                scale: 0.25,
                n_queries: nq,
                n_keys: nk,
            };
            let q = data(nq * 64, 1.0);
            let k = data(nk * 32, 2.0);
            let v = data(nk * 32, 3.0);
            let want = naive(&q, &k, &v, range, s);
            let mut out = vec![0.0; nq * 64];
            flash_attention(&q, KvRows::F32 { k: &k, v: &v }, range, &mut out, s);
            let err = want
                .iter()
                .zip(&out)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(err < 1e-5, "f32 err {err}");
            let kh: Vec<f16> = k.iter().map(|&x| f16::from_f32(x)).collect();
            let vh: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
            flash_attention(&q, KvRows::F16 { k: &kh, v: &vh }, range, &mut out, s);
            let err = want
                .iter()
                .zip(&out)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(err < 2e-3, "f16 err {err}");
        }
    }
}
