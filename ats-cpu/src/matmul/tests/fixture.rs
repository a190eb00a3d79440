//! The dequantisation fixture (`dequant.gguf` + gguf-py's values; for
//! IQ4_NL and IQ4_XS, which it lacks, ats-core's `tests/data/iq4_mxfp4_ref.gguf`
//! made the same way): the test reference dequantiser and the kernels' own
//! block decoding must both match it bit for bit, and the matmul of its rows
//! must match the f64 reference.

use std::path::PathBuf;

use ats_core::DType;
use ats_core::dtype::ALL_DTYPES;
use ats_core::gguf::GgufFile;

use super::random;
use super::reference::{dequantize, expect, quantize_acts};
use crate::matmul::kernels::testing::decode_row;
use crate::matmul::{Isa, WeightMatrix, matmul};

fn fixture_dir() -> PathBuf {
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    while !dir.join("Cargo.toml").is_file()
        || !std::fs::read_to_string(dir.join("Cargo.toml"))
            .unwrap()
            .contains("[workspace]")
    {
        assert!(dir.pop(), "no workspace root above CARGO_MANIFEST_DIR");
    }
    dir.join("../shared/fixtures/dequant")
}

struct Fixture {
    gguf: GgufFile,
    values: Vec<u8>,
    /// [4, 512] rows of IQ4_NL, IQ4_XS and MXFP4 by ggml, and gguf-py's
    /// values (`<TYPE>.deq`); its first two source rows are the fixture's.
    iq: GgufFile,
}

fn load() -> Fixture {
    let dir = fixture_dir();
    let gguf = GgufFile::open(dir.join("dequant.gguf")).expect("dequant.gguf");
    let values = std::fs::read(dir.join("dequant.safetensors")).expect("dequant.safetensors");
    let iq =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ats-core/tests/data/iq4_mxfp4_ref.gguf");
    let iq = GgufFile::open(&iq).unwrap_or_else(|e| panic!("{}: {e}", iq.display()));
    Fixture { gguf, values, iq }
}

/// The f32 rows the reference dequantises `name` (a type, or `source`) to.
fn expected(f: &Fixture, name: &str) -> Vec<f32> {
    let st = safetensors::SafeTensors::deserialize(&f.values).unwrap();
    let data = match st.tensor(name) {
        Ok(t) => {
            assert_eq!(t.shape(), &[2, 512]);
            t.data()
        }
        Err(_) => {
            let info = f.iq.tensor(&format!("{name}.deq")).expect(name);
            f.iq.tensor_data(info)
        }
    };
    data.chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn weights<'a>(f: &'a Fixture, dtype: DType) -> WeightMatrix<'a> {
    let (file, info) = match f.gguf.tensor(dtype.name()) {
        Some(info) => (&f.gguf, info),
        None => (
            &f.iq,
            f.iq.tensor(dtype.name()).expect("tensor of the type"),
        ),
    };
    assert_eq!(info.dtype().unwrap(), dtype);
    assert_eq!(info.row_len(), 512);
    let rows = info.n_rows();
    WeightMatrix::new(dtype, rows, 512, file.tensor_data(info)).unwrap()
}

#[test]
fn reference_dequantiser_is_bit_exact() {
    let f = load();
    for dtype in ALL_DTYPES {
        let w = weights(&f, dtype);
        let want = expected(&f, dtype.name());
        let rb = w.row_bytes().unwrap();
        for r in 0..w.rows {
            let got = dequantize(dtype, &w.data[r * rb..(r + 1) * rb], 512).w;
            for (k, (g, e)) in got.iter().zip(&want[r * 512..]).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    e.to_bits(),
                    "{dtype} row {r} element {k}: {g} vs {e}"
                );
            }
        }
    }
}

/// Bit-identical, except that the kernels' `d * q + c` may give +0 where
/// ggml's `(q - 8) * d` gives -0 (same value in every product).
fn same_value(got: f32, want: f32) -> bool {
    got.to_bits() == want.to_bits() || (got == 0.0 && want == 0.0)
}

#[test]
fn kernel_block_decoding_is_exact_on_every_isa() {
    let f = load();
    for isa in Isa::available() {
        for dtype in ALL_DTYPES {
            let w = weights(&f, dtype);
            let want = expected(&f, dtype.name());
            let rb = w.row_bytes().unwrap();
            for r in 0..w.rows {
                let got = decode_row(dtype, &w.data[r * rb..(r + 1) * rb], isa);
                for (k, (g, e)) in got.iter().zip(&want[r * 512..]).enumerate() {
                    assert!(
                        same_value(*g, *e),
                        "{isa} {dtype} row {r} element {k}: {g} vs {e}"
                    );
                }
            }
        }
    }
}

#[test]
fn kernel_block_decoding_matches_reference_on_random_blocks() {
    let mut r = random::rng(7);
    for isa in Isa::available() {
        for dtype in ALL_DTYPES {
            let cols = if dtype.block_size() == 256 { 1024 } else { 512 };
            let data = random::weights(dtype, 8, cols, &mut r);
            let rb = dtype.row_bytes(cols).unwrap();
            for row in data.chunks_exact(rb) {
                let want = dequantize(dtype, row, cols).w;
                let got = decode_row(dtype, row, isa);
                for (k, (g, e)) in got.iter().zip(&want).enumerate() {
                    assert!(same_value(*g, *e), "{isa} {dtype} element {k}: {g} vs {e}");
                }
            }
        }
    }
}

#[test]
fn fixture_rows_times_fixture_source() {
    // The fixture's own float source as activations (2 tokens), times each
    // type's 2 rows: a matmul on real quantiser output.
    let f = load();
    let x = expected(&f, "source");
    for isa in Isa::available() {
        for dtype in ALL_DTYPES {
            let w = weights(&f, dtype);
            let mut y = vec![0f32; 2 * w.rows];
            matmul(&w, &x, 2, &mut y, isa).unwrap();
            let rb = w.row_bytes().unwrap();
            for t in 0..2 {
                let xt = &x[t * 512..(t + 1) * 512];
                let a = quantize_acts(dtype, xt);
                for r in 0..w.rows {
                    let deq = dequantize(dtype, &w.data[r * rb..(r + 1) * rb], 512);
                    let e = expect(dtype, &deq, xt, &a);
                    let got = y[t * w.rows + r] as f64;
                    assert!(
                        (got - e.emulated).abs() <= e.tol_emulated,
                        "{isa} {dtype} t{t} r{r}: {got} vs {}",
                        e.emulated
                    );
                    assert!(
                        (got - e.exact).abs() <= e.tol_exact,
                        "{isa} {dtype} t{t} r{r}: {got} vs exact {}",
                        e.exact
                    );
                }
            }
        }
    }
}
