//! Inputs the benchmarks and the timing examples share (the examples take
//! this file by `#[path]`): the same pseudo-random data on every run, so
//! that two builds timed one after the other see the same work.

// Each benchmark and example uses part of this module.
#![allow(dead_code)]

use ats_core::dtype::DType;
use ats_cpu::matmul::weight_bytes;

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
