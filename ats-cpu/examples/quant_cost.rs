//! What quantising a round's activations costs, for the round analysis in
//! docs/benchmarks.md: a Q4_1 product of 16 rows (a tile's worth, so the
//! quantiser dominates) on one thread, once with a fresh input every call
//! (quantised every time) and once with the same input (quantised once and
//! reused); the difference is the quantiser's time.
//!
//! `cargo run --release -p ats-cpu --example quant_cost -- [COLS] [TOKENS] [CALLS]`

use std::hint::black_box;
use std::time::Instant;

use ats_core::DType;
use ats_cpu::matmul::{Isa, WeightMatrix, matmul};

#[path = "../benches/common/mod.rs"]
mod common;

use common::{arg_or, values, weights};

/// Rows of the product: one 16-row tile.
const ROWS: usize = 16;

/// Microseconds per call, alternating between `inputs`.
fn us_per_call(m: &WeightMatrix<'_>, inputs: &[Vec<f32>], tokens: usize, calls: usize) -> f64 {
    let mut y = vec![0f32; tokens * ROWS];
    let start = Instant::now();
    for i in 0..calls {
        matmul(m, &inputs[i % inputs.len()], tokens, &mut y, Isa::detect()).expect("shapes");
        black_box(&y);
    }
    start.elapsed().as_secs_f64() * 1e6 / calls as f64
}

fn main() {
    let cols: usize = arg_or(1, 576);
    let tokens: usize = arg_or(2, 8);
    let calls: usize = arg_or(3, 200_000);
    let w = weights(DType::Q4_1, ROWS, cols, 1);
    let m = WeightMatrix::new(DType::Q4_1, ROWS, cols, &w).expect("shape");
    let inputs: Vec<Vec<f32>> = (1..=2).map(|seed| values(tokens * cols, seed)).collect();
    let fresh = us_per_call(&m, &inputs, tokens, calls);
    let reused = us_per_call(&m, &inputs[..1], tokens, calls);
    println!(
        "{tokens} tokens x {cols} columns: {fresh:.2} us a call quantising, {reused:.2} reusing, quantiser {:.2} us",
        fresh - reused
    );
}
