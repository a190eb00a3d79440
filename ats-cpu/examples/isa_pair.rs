//! Paired timing of block products on each available instruction set,
//! alternating run by run so that load on the machine hits all alike;
//! prints each set's minimum and median microseconds. One thread, weights
//! in cache (SmolLM2's MLP in Q4_1 and a slice of its output in Q8_0 for 1 and 8
//! tokens, and in the block formats for 64; a 1B model's 2048-wide rows in
//! Q4_K, Q5_K and Q6_K for 1 to 16). A second argument keeps only the shapes
//! whose name holds it.
//!
//!     cargo run --release -p ats-cpu --example isa_pair [ROUNDS [FILTER]]

#[path = "../benches/common/mod.rs"]
mod common;

use std::time::Instant;

use ats_core::dtype::DType;
use ats_cpu::matmul::{Isa, MatmulScratch, WeightMatrix, matmul_with};
use common::{arg_or, weights};

fn main() {
    let rounds = arg_or(1, 400);
    let filter = std::env::args().nth(2).unwrap_or_default();
    let isas: Vec<Isa> = Isa::available()
        .into_iter()
        .filter(|i| *i != Isa::Scalar)
        .collect();
    let pool = ats_cpu::team::Team::new(1, "isa-pair").unwrap();
    for (name, dtype, rows, cols, n) in [
        ("mlp 1536x576 q4_1", DType::Q4_1, 1536, 576, 1),
        ("output 4096x576 q8_0", DType::Q8_0, 4096, 576, 1),
        ("mlp 1536x576 q4_1", DType::Q4_1, 1536, 576, 8),
        ("mlp 1536x576 q4_1", DType::Q4_1, 1536, 576, 16),
        ("output 4096x576 q8_0", DType::Q8_0, 4096, 576, 8),
        ("1024x2048 q4_k", DType::Q4K, 1024, 2048, 1),
        ("1024x2048 q4_k", DType::Q4K, 1024, 2048, 4),
        ("1024x2048 q4_k", DType::Q4K, 1024, 2048, 8),
        ("1024x2048 q4_k", DType::Q4K, 1024, 2048, 16),
        ("1024x2048 q6_k", DType::Q6K, 1024, 2048, 1),
        ("1024x2048 q6_k", DType::Q6K, 1024, 2048, 2),
        ("1024x2048 q6_k", DType::Q6K, 1024, 2048, 4),
        ("1024x2048 q6_k", DType::Q6K, 1024, 2048, 8),
        ("1024x2048 q6_k", DType::Q6K, 1024, 2048, 16),
        ("1024x2048 q5_k", DType::Q5K, 1024, 2048, 8),
        ("prompt 1536x576 q4_0", DType::Q4_0, 1536, 576, 64),
        ("prompt 1536x576 q4_1", DType::Q4_1, 1536, 576, 64),
        ("prompt 1536x576 q8_0", DType::Q8_0, 1536, 576, 64),
        ("prompt 1536x576 iq4_nl", DType::IQ4NL, 1536, 576, 64),
        ("prompt 1536x576 mxfp4", DType::MXFP4, 1536, 576, 64),
        ("prompt 1024x2048 iq4_xs", DType::IQ4XS, 1024, 2048, 64),
        ("prompt 1024x2048 q6_k", DType::Q6K, 1024, 2048, 64),
        ("prompt 1024x2048 q5_k", DType::Q5K, 1024, 2048, 64),
        ("prompt 1024x2048 q4_k", DType::Q4K, 1024, 2048, 64),
        ("prompt 4096x512 q4_k", DType::Q4K, 4096, 512, 64),
        ("prompt 1024x2048 q4_0", DType::Q4_0, 1024, 2048, 64),
        ("down 576x1536 iq4_nl", DType::IQ4NL, 576, 1536, 1),
        ("down 576x1536 iq4_xs", DType::IQ4XS, 576, 1536, 1),
        ("mlp 1536x576 iq4_nl", DType::IQ4NL, 1536, 576, 1),
        ("mlp 1536x576 mxfp4", DType::MXFP4, 1536, 576, 1),
    ] {
        if !name.contains(&filter) {
            continue;
        }
        let data = weights(dtype, rows, cols, 1);
        let w = WeightMatrix::new(dtype, rows, cols, &data).unwrap();
        let x: Vec<f32> = (0..n * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let mut y = vec![0f32; n * rows];
        let mut scratch = MatmulScratch::new();
        let mut times = vec![Vec::with_capacity(rounds); isas.len()];
        pool.install(|| {
            for _ in 0..rounds {
                for (k, &isa) in isas.iter().enumerate() {
                    let t = Instant::now();
                    matmul_with(&w, &x, n, &mut y, isa, &mut scratch).unwrap();
                    times[k].push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
        });
        for (isa, t) in isas.iter().zip(&mut times) {
            t.sort_by(f64::total_cmp);
            println!(
                "{name}, {n} tokens, {isa}: min {:.1} us, median {:.1} us",
                t[0],
                t[t.len() / 2]
            );
        }
    }
}
