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

use common::{arg_or, values};

/// Rows of the product: one 16-row tile.
const ROWS: usize = 16;

/// Q4_1 rows with scale and minimum 1/16 and varied nibbles.
fn weights(cols: usize) -> Vec<u8> {
    let rb = DType::Q4_1.row_bytes(cols).expect("whole blocks");
    let mut w: Vec<u8> = (0..ROWS * rb).map(|i| (i * 37 % 251) as u8).collect();
    for block in w.chunks_exact_mut(20) {
        block[..4].copy_from_slice(&[0x00, 0x2c, 0x00, 0x2c]);
    }
    w
}

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
    let w = weights(cols);
    let m = WeightMatrix::new(DType::Q4_1, ROWS, cols, &w).expect("shape");
    let inputs: Vec<Vec<f32>> = (1..=2).map(|seed| values(tokens * cols, seed)).collect();
    let fresh = us_per_call(&m, &inputs, tokens, calls);
    let reused = us_per_call(&m, &inputs[..1], tokens, calls);
    println!(
        "{tokens} tokens x {cols} columns: {fresh:.2} us a call quantising, {reused:.2} reusing, quantiser {:.2} us",
        fresh - reused
    );
}
