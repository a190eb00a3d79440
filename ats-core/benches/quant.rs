//! Single-threaded throughput of the reference quantisers and dequantisers,
//! in bytes of f32 data per second (`cargo bench -p ats-core --bench quant`).

use ats_core::dtype::ALL_DTYPES;
use ats_core::quant::{dequantize_row, quantize_row};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// One million roughly Gaussian weights with a few outliers, like a layer.
fn weights() -> Vec<f32> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    (0..1 << 20)
        .map(|i| {
            let u: f32 = (0..4)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    (s >> 40) as f32 / (1u64 << 24) as f32
                })
                .sum();
            let v = (u - 2.0) * 0.03;
            if i % 997 == 0 { v * 10.0 } else { v }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let x = weights();
    for dtype in ALL_DTYPES {
        let mut q = vec![0u8; dtype.row_bytes(x.len()).unwrap()];
        let mut y = vec![0.0f32; x.len()];
        let mut g = c.benchmark_group(dtype.name());
        g.throughput(Throughput::Bytes(4 * x.len() as u64));
        g.sample_size(10);
        g.bench_function("quantize", |b| {
            b.iter(|| quantize_row(dtype, &x, &mut q).unwrap())
        });
        g.bench_function("dequantize", |b| {
            b.iter(|| dequantize_row(dtype, &q, &mut y).unwrap())
        });
        // Requantising dequantised values goes through the exact re-encoder.
        dequantize_row(dtype, &q, &mut y).unwrap();
        let grid = y.clone();
        g.bench_function("requantize", |b| {
            b.iter(|| quantize_row(dtype, &grid, &mut q).unwrap())
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
