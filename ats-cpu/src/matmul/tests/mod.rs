//! Tests of the matmul: every weight type x every available instruction set
//! x shapes against f64 references, cross-ISA agreement, bit-identical
//! results across thread counts and batch sizes, activation quantisation,
//! and input errors.

mod acts;
mod fixture;
mod random;
mod reference;

use ats_core::DType;
use ats_core::dtype::ALL_DTYPES;

use super::{Isa, MatmulError, WeightMatrix, matmul};
use reference::{dequantize, expect, quantize_acts};

const TOKENS: [usize; 9] = [1, 2, 3, 4, 7, 8, 12, 16, 64];
/// Not multiples of any tile height (2, 3, 4, 16); 37 takes the 16-row
/// one-token kernel twice, then a tail.
const ROWS: [usize; 4] = [1, 5, 13, 37];

/// Columns to test: 1..n blocks (and, for floats, vector tails; for the
/// 32-blocks, more than the 32 blocks the one-token kernel takes per pass).
fn cols_for(dtype: DType) -> Vec<usize> {
    match dtype.block_size() {
        1 => vec![1, 7, 8, 33, 100],
        32 => vec![32, 64, 96, 160, 1088],
        _ => vec![256, 512, 768],
    }
}

/// Runs one random case and checks every output against the references;
/// returns the outputs.
fn check_case(dtype: DType, isa: Isa, rows: usize, cols: usize, n: usize, seed: u64) -> Vec<f32> {
    let mut r = random::rng(seed);
    let data = random::weights(dtype, rows, cols, &mut r);
    let x = random::activations(n * cols, &mut r);
    check_product(dtype, isa, (rows, cols), &data, &x, n)
}

/// Runs `data` (`rows` x `cols` of `dtype`) against `n` tokens of `x` on
/// `isa` and checks every output against the references; returns the
/// outputs.
fn check_product(
    dtype: DType,
    isa: Isa,
    (rows, cols): (usize, usize),
    data: &[u8],
    x: &[f32],
    n: usize,
) -> Vec<f32> {
    let w = WeightMatrix::new(dtype, rows, cols, data).unwrap();
    let mut y = vec![f32::NAN; n * rows];
    matmul(&w, &x[..n * cols], n, &mut y, isa).unwrap();
    let rb = w.row_bytes().unwrap();
    let deq: Vec<_> = (0..rows)
        .map(|i| dequantize(dtype, &data[i * rb..(i + 1) * rb], cols))
        .collect();
    for t in 0..n {
        let xt = &x[t * cols..(t + 1) * cols];
        let a = quantize_acts(dtype, xt);
        for (i, d) in deq.iter().enumerate() {
            let e = expect(dtype, d, xt, &a);
            let got = y[t * rows + i] as f64;
            let case = format!("{dtype} {isa} rows {rows} cols {cols} tokens {n}: t{t} r{i}");
            assert!(
                (got - e.emulated).abs() <= e.tol_emulated,
                "{case}: {got} vs emulated {} (tol {})",
                e.emulated,
                e.tol_emulated
            );
            assert!(
                (got - e.exact).abs() <= e.tol_exact,
                "{case}: {got} vs exact {} (tol {})",
                e.exact,
                e.tol_exact
            );
        }
    }
    y
}

#[test]
fn every_type_isa_and_shape_matches_the_f64_reference() {
    for dtype in ALL_DTYPES {
        for isa in Isa::available() {
            for &n in &TOKENS {
                for &rows in &ROWS {
                    for cols in cols_for(dtype) {
                        check_case(
                            dtype,
                            isa,
                            rows,
                            cols,
                            n,
                            (rows * 1000 + cols * 10 + n) as u64,
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn isas_give_identical_bits() {
    // Every kernel evaluates the same f32 operations in the same order (exact
    // integer block sums, then one FMA chain per output), whatever the lanes.
    let isas = Isa::available();
    for dtype in ALL_DTYPES {
        let cols = *cols_for(dtype).last().unwrap();
        let mut r = random::rng(11);
        // 16-row kernels, then a tail
        let rows = 41;
        let data = random::weights(dtype, rows, cols, &mut r);
        let x = random::activations(37 * cols, &mut r);
        let w = WeightMatrix::new(dtype, rows, cols, &data).unwrap();
        // narrow, single and whole tiles, whole tiles then a partial one,
        // and whole tiles then a token or two (the row kernels after an
        // 8-token tile without a narrow one)
        for n in [1, 2, 4, 8, 10, 11, 16, 37] {
            let outs: Vec<Vec<u32>> = isas
                .iter()
                .map(|&isa| {
                    let mut y = vec![0f32; n * rows];
                    matmul(&w, &x[..n * cols], n, &mut y, isa).unwrap();
                    y.iter().map(|v| v.to_bits()).collect()
                })
                .collect();
            for (k, y) in outs.iter().enumerate().skip(1) {
                assert_eq!(
                    y, &outs[0],
                    "{dtype} {n} tokens: {} vs {}",
                    isas[k], isas[0]
                );
            }
        }
    }
}

#[test]
fn saturated_blocks_against_the_largest_activations_match_the_reference() {
    // Every quant bit set and activations of one magnitude and sign per
    // token (quantised to +-127) put the kernels' integer sums at their
    // bounds: Q4_K's 8-token tile keeps each half sub-block's sum in 16 bits.
    let (rows, cols) = (37, 512);
    for dtype in ALL_DTYPES.into_iter().filter(|d| d.block_size() > 1) {
        let mut r = random::rng(5);
        let data = random::saturated(dtype, rows, cols, &mut r);
        let x: Vec<f32> = (0..16 * cols)
            .map(|i| if (i / cols) % 2 == 0 { 1.0 } else { -3.0 })
            .collect();
        for isa in Isa::available() {
            for n in [1, 8, 16] {
                check_product(dtype, isa, (rows, cols), &data, &x, n);
            }
        }
    }
}

/// Runs `w x` with `n` tokens on a team of `threads` threads.
fn run_in_pool(w: &WeightMatrix<'_>, x: &[f32], n: usize, isa: Isa, threads: usize) -> Vec<f32> {
    let team = crate::team::Team::new(threads, "test").unwrap();
    let mut y = vec![0f32; n * w.rows];
    team.install(|| matmul(w, &x[..n * w.cols], n, &mut y, isa))
        .unwrap();
    y
}

#[test]
fn thread_counts_and_batch_sizes_give_identical_bits() {
    // Big enough that 2 and 3 threads split rows (decode) and tokens (prefill).
    let rows = 203;
    for dtype in ALL_DTYPES {
        let cols = if dtype.block_size() == 1 { 260 } else { 1024 };
        let mut r = random::rng(3);
        let data = random::weights(dtype, rows, cols, &mut r);
        let x = random::activations(64 * cols, &mut r);
        let w = WeightMatrix::new(dtype, rows, cols, &data).unwrap();
        for isa in Isa::available() {
            for n in [1, 4, 7, 64] {
                let base = run_in_pool(&w, &x, n, isa, 1);
                for threads in [2, 3] {
                    let y = run_in_pool(&w, &x, n, isa, threads);
                    let same = y.iter().zip(&base).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(
                        same,
                        "{dtype} {isa} {n} tokens: {threads} threads differ from 1"
                    );
                }
                // Each token of a batch equals the same token computed alone.
                for t in [0, n / 2, n - 1] {
                    let alone = run_in_pool(&w, &x[t * cols..], 1, isa, 2);
                    let same = alone
                        .iter()
                        .zip(&base[t * rows..])
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(
                        same,
                        "{dtype} {isa}: token {t} of {n} differs from the token alone"
                    );
                }
            }
        }
    }
}

#[test]
fn k_quant_prefill_tiles_match_the_row_by_row_path() {
    // Past 128 tokens the K-quants run the broadcast 8-token tiles (AVX2;
    // the 512-bit kernels stay row by row); up to it, row by row. Both must
    // give each token the bits it gets alone.
    let (rows, cols, n) = (13, 512, 136);
    for dtype in ALL_DTYPES.into_iter().filter(|d| d.block_size() == 256) {
        let mut r = random::rng(5);
        let data = random::weights(dtype, rows, cols, &mut r);
        let x = random::activations(n * cols, &mut r);
        let w = WeightMatrix::new(dtype, rows, cols, &data).unwrap();
        for isa in Isa::available() {
            let all = run_in_pool(&w, &x, n, isa, 2);
            for t in [0, 7, 8, 100, 129, n - 1] {
                let alone = run_in_pool(&w, &x[t * cols..], 1, isa, 1);
                let same = alone
                    .iter()
                    .zip(&all[t * rows..])
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{dtype} {isa}: token {t} of {n} differs from the token alone"
                );
            }
        }
    }
}

#[test]
fn bad_inputs_are_errors() {
    let data = vec![0u8; 2 * 20];
    let e = WeightMatrix::new(DType::Q4_1, 2, 33, &data).unwrap_err();
    assert_eq!(
        e,
        MatmulError::PartialBlock {
            dtype: DType::Q4_1,
            cols: 33,
            block: 32
        }
    );
    let e = WeightMatrix::new(DType::Q4_1, 3, 32, &data).unwrap_err();
    assert_eq!(
        e.to_string(),
        "Q4_1 weight matrix 3x32: 40 bytes given, Some(60) expected"
    );
    let w = WeightMatrix::new(DType::Q4_1, 2, 32, &data).unwrap();
    let mut y = vec![0f32; 2];
    let e = matmul(&w, &[0.0; 31], 1, &mut y, Isa::Scalar).unwrap_err();
    assert_eq!(
        e,
        MatmulError::InputLen {
            got: 31,
            n_tokens: 1,
            cols: 32
        }
    );
    let e = matmul(&w, &[0.0; 64], 2, &mut y, Isa::Scalar).unwrap_err();
    assert_eq!(
        e,
        MatmulError::OutputLen {
            got: 2,
            n_tokens: 2,
            rows: 2
        }
    );
    // An unvalidated struct with wrong bytes is caught by matmul too.
    let bad = WeightMatrix {
        dtype: DType::Q8_0,
        rows: 2,
        cols: 32,
        data: &data,
    };
    assert!(matches!(
        matmul(&bad, &[0.0; 32], 1, &mut y, Isa::Scalar),
        Err(MatmulError::WeightBytes { .. })
    ));
    for isa in super::ALL_ISAS {
        let r = matmul(&w, &[0.0; 32], 1, &mut y, isa);
        assert_eq!(r.is_ok(), isa.is_available(), "{isa}");
        if let Err(e) = r {
            assert!(matches!(e, MatmulError::IsaUnavailable(i, _) if i == isa));
        }
    }
}

#[test]
fn empty_shapes_and_hostile_scales_do_not_panic() {
    for isa in Isa::available() {
        let w = WeightMatrix::new(DType::F32, 3, 0, &[]).unwrap();
        let mut y = vec![1f32; 6];
        matmul(&w, &[], 2, &mut y, isa).unwrap();
        assert_eq!(y, vec![0.0; 6]);
        let w = WeightMatrix::new(DType::Q4K, 0, 256, &[]).unwrap();
        matmul(&w, &[0.0; 512], 2, &mut [], isa).unwrap();
        // NaN and infinite f16 scales: any result, but no panic.
        for dtype in ALL_DTYPES.into_iter().filter(|d| d.is_quantized()) {
            let cols = dtype.block_size();
            let data = vec![0xffu8; dtype.type_size() * 4];
            let w = WeightMatrix::new(dtype, 4, cols, &data).unwrap();
            let mut y = vec![0f32; 8];
            matmul(&w, &vec![f32::INFINITY; 2 * cols], 2, &mut y, isa).unwrap();
        }
    }
}
