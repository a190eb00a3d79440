//! Matmul benchmarks on the SmolLM2-135M shapes (Q4_1 layers, Q8_0 output
//! head), at 1 and 2 threads:
//! - `decode/*`: 1 token; throughput in bytes of weights read (also two
//!   Llama-3-8B Q4_K_M shapes, Q4_K and Q6_K). The weights
//!   rotate through copies totalling well over the L3 cache, so every call
//!   streams from DRAM as in a real decode step.
//! - `prefill/*`: 512 tokens; throughput in elements = FLOPs (2 * rows * cols * tokens).
//! - `model/*`: all matmuls of one decode step / one 512-token prefill of the
//!   30-layer model, in order, with distinct weights; `decode_batch4` /
//!   `decode_batch8`: one decode step of 4 / 8 sequences (the head too for
//!   every token), the rounds of `bench --parallel`.
//! - `overhead/*`: fixed cost of a tiny call (8 x 32 Q4_1, 1 token).
//! - `membw/*`: streaming read of 512 MiB, for the machine's bandwidth.

mod common;

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ats_core::DType;
use ats_cpu::matmul::{Isa, MatmulScratch, WeightMatrix, matmul_with, weight_bytes};
use ats_cpu::team::{self, Team};
use common::weights;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

/// SmolLM2-135M: (name, rows, cols, dtype) of the matmuls of one layer, then the head.
const LAYER: [(&str, usize, usize); 7] = [
    ("q", 576, 576),
    ("k", 192, 576),
    ("v", 192, 576),
    ("o", 576, 576),
    ("gate", 1536, 576),
    ("up", 1536, 576),
    ("down", 576, 1536),
];
const HEAD: (usize, usize) = (49152, 576);
const N_LAYERS: usize = 30;
/// Rotate decode weights over at least this many bytes (L3 is 32 MiB here).
const COLD_BYTES: usize = 256 << 20;

fn activations(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect()
}

fn pool(threads: usize) -> Team {
    Team::new(threads, "bench").unwrap()
}

fn shapes() -> Vec<(String, DType, usize, usize)> {
    let mut v: Vec<_> = [LAYER[0], LAYER[1], LAYER[4], LAYER[6]]
        .iter()
        .map(|&(name, r, c)| (format!("{name}_{r}x{c}_q4_1"), DType::Q4_1, r, c))
        .collect();
    v.push((
        format!("head_{}x{}_q8_0", HEAD.0, HEAD.1),
        DType::Q8_0,
        HEAD.0,
        HEAD.1,
    ));
    // Llama-3-8B Q4_K_M: the products a hybrid decode leaves on the CPU most
    v.push(("gate_14336x4096_q4_k".into(), DType::Q4K, 14336, 4096));
    v.push(("down_4096x14336_q6_k".into(), DType::Q6K, 4096, 14336));
    // Q5_K_M: gate/up in Q5_K
    v.push(("gate_14336x4096_q5_k".into(), DType::Q5K, 14336, 4096));
    // the same matrix in the table formats of IQ4_XS / IQ4_NL downloads
    v.push(("gate_14336x4096_iq4_xs".into(), DType::IQ4XS, 14336, 4096));
    v.push(("gate_14336x4096_iq4_nl".into(), DType::IQ4NL, 14336, 4096));
    // gpt-oss-20b: one expert's gate/up projection (2880 x 2880) in MXFP4
    v.push(("expert_2880x2880_mxfp4".into(), DType::MXFP4, 2880, 2880));
    v
}

fn decode(c: &mut Criterion) {
    let isa = Isa::detect();
    let mut g = c.benchmark_group("decode");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (name, dtype, rows, cols) in shapes() {
        let bytes = weight_bytes(dtype, rows, cols).unwrap();
        let copies: Vec<Vec<u8>> = (0..COLD_BYTES.div_ceil(bytes).max(2))
            .map(|i| weights(dtype, rows, cols, i as u64))
            .collect();
        let x = activations(cols);
        let mut y = vec![0f32; rows];
        g.throughput(Throughput::Bytes(bytes as u64));
        for threads in [1, 2] {
            let p = pool(threads);
            let mut scratch = MatmulScratch::new();
            let mut i = 0;
            g.bench_function(BenchmarkId::new(&name, format!("{threads}t")), |b| {
                p.install(|| {
                    b.iter(|| {
                        i = (i + 1) % copies.len();
                        let w = WeightMatrix::new(dtype, rows, cols, &copies[i]).unwrap();
                        matmul_with(&w, &x, 1, &mut y, isa, &mut scratch).unwrap();
                        black_box(&y);
                    })
                })
            });
        }
    }
    g.finish();
}

fn prefill(c: &mut Criterion) {
    let isa = Isa::detect();
    let n = 512;
    let mut g = c.benchmark_group("prefill");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for (name, dtype, rows, cols) in shapes() {
        let data = weights(dtype, rows, cols, 1);
        let w = WeightMatrix::new(dtype, rows, cols, &data).unwrap();
        let x = activations(n * cols);
        let mut y = vec![0f32; n * rows];
        g.throughput(Throughput::Elements((2 * rows * cols * n) as u64));
        for threads in [1, 2] {
            let p = pool(threads);
            let mut scratch = MatmulScratch::new();
            g.bench_function(BenchmarkId::new(&name, format!("{threads}t")), |b| {
                p.install(|| b.iter(|| matmul_with(&w, &x, n, &mut y, isa, &mut scratch).unwrap()))
            });
        }
    }
    g.finish();
}

/// Every matmul of the model in execution order, distinct weights.
fn model(c: &mut Criterion) {
    let isa = Isa::detect();
    let mut mats: Vec<(DType, usize, usize, Vec<u8>)> = Vec::new();
    for l in 0..N_LAYERS {
        for (k, &(_, r, c)) in LAYER.iter().enumerate() {
            mats.push((
                DType::Q4_1,
                r,
                c,
                weights(DType::Q4_1, r, c, (l * 8 + k) as u64),
            ));
        }
    }
    mats.push((
        DType::Q8_0,
        HEAD.0,
        HEAD.1,
        weights(DType::Q8_0, HEAD.0, HEAD.1, 999),
    ));
    let total: usize = mats.iter().map(|m| m.3.len()).sum();
    let mut g = c.benchmark_group("model");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4));
    for n in [1usize, 4, 8, 512] {
        let x = activations(n * 1536);
        let mut y = vec![0f32; n * HEAD.0];
        if n == 1 {
            g.throughput(Throughput::Bytes(total as u64));
        } else {
            g.throughput(Throughput::Elements(n as u64));
        }
        for threads in [1, 2] {
            let p = pool(threads);
            let mut scratch = MatmulScratch::new();
            let id = match n {
                1 => "decode_step".to_string(),
                512 => "prefill_512".to_string(),
                n => format!("decode_batch{n}"),
            };
            g.bench_function(BenchmarkId::new(id, format!("{threads}t")), |b| {
                p.install(|| {
                    b.iter(|| {
                        for (i, (dtype, r, c, data)) in mats.iter().enumerate() {
                            // llama-bench's pp512 computes the head for the last token only.
                            let nt = if i == mats.len() - 1 && n > 8 { 1 } else { n };
                            let w = WeightMatrix::new(*dtype, *r, *c, data).unwrap();
                            matmul_with(&w, &x[..nt * c], nt, &mut y[..nt * r], isa, &mut scratch)
                                .unwrap();
                        }
                    })
                })
            });
        }
    }
    g.finish();
}

fn overhead(c: &mut Criterion) {
    let isa = Isa::detect();
    let data = weights(DType::Q4_1, 8, 32, 5);
    let w = WeightMatrix::new(DType::Q4_1, 8, 32, &data).unwrap();
    let x = activations(32);
    let mut y = vec![0f32; 8];
    let mut g = c.benchmark_group("overhead");
    for threads in [1, 2] {
        let p = pool(threads);
        let mut scratch = MatmulScratch::new();
        g.bench_function(BenchmarkId::new("q4_1_8x32", format!("{threads}t")), |b| {
            p.install(|| b.iter(|| matmul_with(&w, &x, 1, &mut y, isa, &mut scratch).unwrap()))
        });
    }
    // The smallest real matrix (192 x 576), in cache: the fork/join cost shows
    // as the gap between 1 and 2 threads.
    let data = weights(DType::Q4_1, 192, 576, 6);
    let w = WeightMatrix::new(DType::Q4_1, 192, 576, &data).unwrap();
    let x = activations(576);
    let mut y = vec![0f32; 192];
    for threads in [1, 2] {
        let p = pool(threads);
        let mut scratch = MatmulScratch::new();
        g.bench_function(
            BenchmarkId::new("q4_1_192x576_hot", format!("{threads}t")),
            |b| p.install(|| b.iter(|| matmul_with(&w, &x, 1, &mut y, isa, &mut scratch).unwrap())),
        );
    }
    g.finish();
}

fn membw(c: &mut Criterion) {
    let n = (512usize << 20) / 8;
    let buf: Vec<u64> = (0..n as u64).collect();
    let mut g = c.benchmark_group("membw");
    g.sample_size(10)
        .throughput(Throughput::Bytes((n * 8) as u64));
    for threads in [1, 2] {
        let p = pool(threads);
        g.bench_function(
            BenchmarkId::new("read_512MiB", format!("{threads}t")),
            |b| {
                p.install(|| {
                    b.iter(|| {
                        // Four independent sums per chunk so the adds keep up with the loads.
                        let total = AtomicU64::new(0);
                        team::for_each(buf.len().div_ceil(1 << 20), |i| {
                            let ch = &buf[i << 20..buf.len().min((i + 1) << 20)];
                            let mut s = [0u64; 4];
                            for q in ch.chunks_exact(4) {
                                for k in 0..4 {
                                    s[k] = s[k].wrapping_add(q[k]);
                                }
                            }
                            let sum = s.iter().fold(0u64, |a, b| a.wrapping_add(*b));
                            total.fetch_add(sum, Ordering::Relaxed);
                        });
                        total.into_inner()
                    })
                })
            },
        );
    }
    g.finish();
}

/// The 8-token product (a round of 8 sequences' decode tokens) on each
/// available instruction set, side by side: SmolLM2's MLP in Q4_1 and its
/// output matrix in Q8_0, one thread, weights in cache.
fn batch8_isa(c: &mut Criterion) {
    let mut g = c.benchmark_group("batch8_isa");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for (name, dtype, rows, cols) in [
        ("mlp_1536x576_q4_1", DType::Q4_1, 1536, 576),
        ("output_4096x576_q8_0", DType::Q8_0, 4096, 576),
    ] {
        let data = weights(dtype, rows, cols, 9);
        let w = WeightMatrix::new(dtype, rows, cols, &data).unwrap();
        let x: Vec<f32> = (0..8).flat_map(|_| activations(cols)).collect();
        let mut y = vec![0f32; 8 * rows];
        let p = pool(1);
        for isa in Isa::available().into_iter().filter(|i| *i != Isa::Scalar) {
            let mut scratch = MatmulScratch::new();
            g.bench_function(BenchmarkId::new(name, isa.name()), |b| {
                p.install(|| b.iter(|| matmul_with(&w, &x, 8, &mut y, isa, &mut scratch).unwrap()))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, membw, overhead, decode, prefill, model, batch8_isa);
criterion_main!(benches);
