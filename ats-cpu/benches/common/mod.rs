//! Inputs the benchmarks and the timing examples share (the examples take
//! this file by `#[path]`): the same pseudo-random data on every run, so
//! that two builds timed one after the other see the same work.

// Each benchmark and example uses part of this module.
#![allow(dead_code)]

use std::time::Instant;

use ats_core::dtype::DType;
use ats_cpu::matmul::weight_bytes;
use ats_cpu::ops::attention::AttnShape;
use half::f16;

/// Command-line argument `i` as a number, or `default` when it is absent or
/// not one.
pub fn arg_or(i: usize, default: usize) -> usize {
    std::env::args()
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

/// `n` values in [-1, 1] from a xorshift32 seeded with `seed`.
pub fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// A `rows` x `cols` weight matrix of `dtype`: random quants (xorshift64
/// from `seed`) with a small f16 scale (and min) in every block, so that
/// no product overflows; the values do not matter for speed.
pub fn weights(dtype: DType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let n = weight_bytes(dtype, rows, cols).expect("whole blocks");
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut data: Vec<u8> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect();
    let scale = half::f16::from_f32(0.01).to_le_bytes();
    let scales: &[usize] = match dtype {
        DType::Q4_1 | DType::Q4K | DType::Q5K => &[0, 2],
        DType::Q6K => &[208],
        _ => &[0],
    };
    for b in data.chunks_exact_mut(dtype.type_size()) {
        for &at in scales {
            b[at..at + 2].copy_from_slice(&scale);
        }
    }
    data
}

/// Attention of `n_queries` rows over `n_keys` keys, `heads` query heads
/// and `kv_heads` KV heads of `hd`, scaled by `1 / sqrt(hd)`, no Q chunk.
pub fn attn_shape(
    (heads, kv_heads, hd): (usize, usize, usize),
    n_queries: usize,
    n_keys: usize,
) -> AttnShape {
    AttnShape {
        n_heads: heads,
        n_kv_heads: kv_heads,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
        n_queries,
        n_keys,
        q_block: 0,
    }
}

/// The inputs and output of one attention call over an f16 cache.
pub struct AttnCase {
    /// Queries (`n_queries x n_heads x head_dim`).
    pub q: Vec<f32>,
    /// Keys (`n_keys x n_kv_heads x head_dim`).
    pub k: Vec<f16>,
    /// Values, as the keys.
    pub v: Vec<f16>,
    /// The output, as the queries.
    pub out: Vec<f32>,
    /// The shape ([`attn_shape`]).
    pub shape: AttnShape,
}

/// [`attn_shape`]'s call with [`values`] for its inputs (seeds 1, 2, 3).
pub fn attn_case(heads: (usize, usize, usize), n_queries: usize, n_keys: usize) -> AttnCase {
    let (n_heads, kv_heads, hd) = heads;
    let f16s = |seed| -> Vec<f16> {
        values(n_keys * kv_heads * hd, seed)
            .into_iter()
            .map(f16::from_f32)
            .collect()
    };
    AttnCase {
        q: values(n_queries * n_heads * hd, 1),
        k: f16s(2),
        v: f16s(3),
        out: vec![0f32; n_queries * n_heads * hd],
        shape: attn_shape(heads, n_queries, n_keys),
    }
}

/// The minimum and median microseconds of `rounds` runs of `f`.
pub fn min_median_us(rounds: usize, mut f: impl FnMut()) -> (f64, f64) {
    let mut times: Vec<f64> = (0..rounds.max(1))
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    times.sort_by(f64::total_cmp);
    (times[0], times[times.len() / 2])
}
