//! Random test data: weight rows of every type and activations with varied
//! block magnitudes.
//!
//! Weights are random bit patterns with the float fields (scales, mins)
//! overwritten by sane values: every bit pattern of the quants is a valid
//! block (including ones real quantisers never emit, such as -128 in Q8_0),
//! so this exercises the kernels more than quantised smooth data would.

use ats_core::DType;
use half::{bf16, f16};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

/// A seeded generator.
pub(super) fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

fn put_f16(b: &mut [u8], at: usize, v: f32) {
    b[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
}

/// A random scale of either sign, log-uniform over two decades.
fn scale(r: &mut StdRng, lo: f32) -> f32 {
    let s = lo * 10f32.powf(r.random_range(0.0..2.0));
    if r.random_bool(0.5) { s } else { -s }
}

/// `rows` random rows of `cols` elements of `dtype`.
pub(super) fn weights(dtype: DType, rows: usize, cols: usize, r: &mut StdRng) -> Vec<u8> {
    let n = rows * cols;
    match dtype {
        DType::F32 => (0..n)
            .flat_map(|_| r.random_range(-1f32..1.0).to_le_bytes())
            .collect(),
        DType::F16 => (0..n)
            .flat_map(|_| f16::from_f32(r.random_range(-1f32..1.0)).to_le_bytes())
            .collect(),
        DType::BF16 => (0..n)
            .flat_map(|_| bf16::from_f32(r.random_range(-1f32..1.0)).to_le_bytes())
            .collect(),
        _ => {
            let mut data = vec![0u8; dtype.row_bytes(cols).unwrap() * rows];
            r.fill_bytes(&mut data);
            set_scales(dtype, &mut data, r);
            data
        }
    }
}

/// `rows` rows of `cols` elements of a block type with every quant bit set
/// (the largest unsigned levels, scales and mins of the K-quants) and sane
/// float scales: the integer sums at their bounds.
pub(super) fn saturated(dtype: DType, rows: usize, cols: usize, r: &mut StdRng) -> Vec<u8> {
    let mut data = vec![0xffu8; dtype.row_bytes(cols).unwrap() * rows];
    set_scales(dtype, &mut data, r);
    data
}

/// Overwrites the float fields of each block of `data` with random sane
/// values.
fn set_scales(dtype: DType, data: &mut [u8], r: &mut StdRng) {
    for b in data.chunks_exact_mut(dtype.type_size()) {
        match dtype {
            DType::Q8_0 | DType::Q4_0 | DType::Q5_0 => put_f16(b, 0, scale(r, 1e-3)),
            DType::Q4_1 | DType::Q5_1 => {
                put_f16(b, 0, scale(r, 1e-3));
                put_f16(b, 2, scale(r, 1e-3));
            }
            DType::Q2K => {
                put_f16(b, 80, scale(r, 1e-3));
                put_f16(b, 82, scale(r, 1e-3));
            }
            DType::Q3K => put_f16(b, 108, scale(r, 1e-3)),
            DType::Q4K | DType::Q5K => {
                put_f16(b, 0, scale(r, 1e-4));
                put_f16(b, 2, scale(r, 1e-4));
            }
            DType::Q6K => put_f16(b, 208, scale(r, 1e-4)),
            DType::IQ4NL => put_f16(b, 0, scale(r, 1e-4)),
            DType::IQ4XS => put_f16(b, 0, scale(r, 1e-5)),
            // 2^(e - 128) for e in 100..140: scales from 4e-9 to 4e3
            DType::MXFP4 => b[0] = r.random_range(100..140),
            _ => unreachable!(),
        }
    }
}

/// `n` random activations: roughly normal, each 32-block scaled by a random
/// magnitude (some tiny, so the f16 block scale is subnormal), with a few
/// outliers and, for long inputs, one all-zero block.
pub(super) fn activations(n: usize, r: &mut StdRng) -> Vec<f32> {
    let mut x: Vec<f32> = (0..n)
        .map(|_| (0..4).map(|_| r.random_range(-1f32..1.0)).sum::<f32>())
        .collect();
    for b in x.chunks_mut(32) {
        let m = 10f32.powf(r.random_range(-4.0..1.0));
        b.iter_mut().for_each(|v| *v *= m);
        if r.random_bool(0.2) {
            let k = r.random_range(0..b.len());
            b[k] *= 20.0;
        }
    }
    if n >= 128 {
        x[64..96].fill(0.0);
    }
    x
}
