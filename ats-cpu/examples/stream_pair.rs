//! Block products with the weights coming from memory, as in a model's
//! decode: copies of one matrix, more bytes in all than the caches hold,
//! multiplied one after another by the same tokens on a team of threads;
//! prints the minimum and median microseconds per matrix over ROUNDS
//! sweeps. `isa_pair` times products in cache, which can rank two kernels
//! the other way round (a 16-row Q6_K tile: faster in cache, no faster
//! end to end). Run two builds one after the other, alternating.
//!
//!     cargo run --release -p ats-cpu --example stream_pair -- \
//!         [ROUNDS [TYPE ROWSxCOLS [TOKENS [THREADS [MIB]]]]]
//!
//! e.g. `stream_pair 20 q6_k 2048x8192 8 2 1024` (a 1B model's Q6_K
//! `ffn_down` for a round of 8 sequences).

#[path = "../benches/common/mod.rs"]
mod common;

use std::time::Instant;

use ats_core::dtype::ALL_DTYPES;
use ats_cpu::matmul::{Isa, MatmulScratch, WeightMatrix, matmul_with};
use common::weights;

fn arg(n: usize) -> Option<String> {
    std::env::args().nth(n)
}

fn main() {
    let rounds: usize = arg(1).and_then(|a| a.parse().ok()).unwrap_or(20);
    let name = arg(2).unwrap_or_else(|| "q6_k".into());
    let dtype = ALL_DTYPES
        .into_iter()
        .find(|d| d.to_string().eq_ignore_ascii_case(&name))
        .unwrap_or_else(|| panic!("unknown type {name}"));
    let shape = arg(3).unwrap_or_else(|| "2048x8192".into());
    let (rows, cols) = shape
        .split_once('x')
        .and_then(|(r, c)| Some((r.parse().ok()?, c.parse().ok()?)))
        .unwrap_or_else(|| panic!("shape {shape}: want ROWSxCOLS"));
    let n: usize = arg(4).and_then(|a| a.parse().ok()).unwrap_or(8);
    let threads: usize = arg(5).and_then(|a| a.parse().ok()).unwrap_or(2);
    let mib: usize = arg(6).and_then(|a| a.parse().ok()).unwrap_or(1024);
    let isa = Isa::detect();

    let one = weights(dtype, rows, cols, 1);
    let copies = (mib << 20).div_ceil(one.len()).max(2);
    // separate allocations, each its own pages, as a model's tensors
    let data: Vec<Vec<u8>> = (0..copies).map(|_| one.clone()).collect();
    let mats: Vec<WeightMatrix<'_>> = data
        .iter()
        .map(|d| WeightMatrix::new(dtype, rows, cols, d).unwrap())
        .collect();
    let x: Vec<f32> = (0..n * cols)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect();
    let mut y = vec![0f32; n * rows];
    let mut scratch = MatmulScratch::new();
    let pool = ats_cpu::team::Team::new(threads, "stream-pair").unwrap();
    let mut times = Vec::with_capacity(rounds);
    pool.install(|| {
        for _ in 0..rounds {
            let t = Instant::now();
            for w in &mats {
                matmul_with(w, &x, n, &mut y, isa, &mut scratch).unwrap();
            }
            times.push(t.elapsed().as_secs_f64() * 1e6 / copies as f64);
        }
    });
    times.sort_by(f64::total_cmp);
    println!(
        "{name} {rows}x{cols}, {n} tokens, {threads} threads, {copies} copies ({} MiB), {isa}: \
         min {:.1} us, median {:.1} us per matrix",
        (copies * one.len()) >> 20,
        times[0],
        times[times.len() / 2]
    );
}
