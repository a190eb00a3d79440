//! The formats against the reference fixtures (`dequant/` in the shared
//! fixtures: one [2, 512] tensor per type, quantised by gguf-py / ggml from
//! one f32 source, and gguf-py's dequantisation of each), plus the length
//! checks and hostile inputs.

use std::path::{Path, PathBuf};

use safetensors::SafeTensors;

use super::*;
use crate::dtype::{ALL_DTYPES, QK_K};
use crate::gguf::GgufFile;

const K_QUANTS: [DType; 5] = [DType::Q2K, DType::Q3K, DType::Q4K, DType::Q5K, DType::Q6K];
/// The types the shared dequantisation fixture lacks; `tests/data/iq4_mxfp4_ref.gguf` has them.
const NOT_IN_FIXTURE: [DType; 2] = [DType::IQ4NL, DType::IQ4XS];
const ROW: usize = 512;

/// Every type the shared fixture (`dequant/`) holds a tensor of.
fn fixture_types() -> impl Iterator<Item = DType> {
    ALL_DTYPES
        .into_iter()
        .filter(|d| !NOT_IN_FIXTURE.contains(d))
}

fn fixture_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest
        .ancestors()
        .find(|d| {
            std::fs::read_to_string(d.join("Cargo.toml")).is_ok_and(|s| s.contains("[workspace]"))
        })
        .expect("no workspace Cargo.toml above CARGO_MANIFEST_DIR");
    root.join("../shared/fixtures/dequant")
}

struct Fixture {
    gguf: GgufFile,
    tensors: Vec<u8>,
    json: serde_json::Value,
}

impl Fixture {
    fn load() -> Fixture {
        let dir = fixture_dir();
        let read =
            |name: &str| std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        Fixture {
            gguf: GgufFile::open(dir.join("dequant.gguf")).expect("dequant.gguf"),
            tensors: read("dequant.safetensors"),
            json: serde_json::from_slice(&read("dequant.json")).expect("dequant.json"),
        }
    }

    /// An f32 [2, 512] tensor of dequant.safetensors, row-major.
    fn floats(&self, name: &str) -> Vec<f32> {
        let st = SafeTensors::deserialize(&self.tensors).expect("dequant.safetensors");
        let t = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(t.dtype(), safetensors::Dtype::F32, "{name}");
        assert_eq!(t.shape(), [2, ROW], "{name}");
        let (words, rest) = t.data().as_chunks::<4>();
        assert!(rest.is_empty());
        words.iter().map(|w| f32::from_le_bytes(*w)).collect()
    }

    /// The stored bytes of the GGUF tensor named like `dtype`.
    fn bytes(&self, dtype: DType) -> &[u8] {
        let info = self
            .gguf
            .tensor(dtype.name())
            .expect("tensor in dequant.gguf");
        assert_eq!(info.dtype(), Ok(dtype));
        assert_eq!(info.shape(), [2, ROW]);
        self.gguf.tensor_data(info)
    }

    /// ggml's RMS quantisation error for `dtype`, as dequant.json records it.
    fn ggml_rmse(&self, dtype: DType) -> f64 {
        self.json["types"][dtype.name()]["rmse_vs_source"]
            .as_f64()
            .expect("rmse_vs_source")
    }
}

fn rms_diff(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let s: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
        .sum();
    (s / a.len() as f64).sqrt()
}

fn assert_bits_eq(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.to_bits(), w.to_bits(), "{what}: element {i}: {g} vs {w}");
    }
}

/// Deterministic pseudo-random numbers (xorshift64*), no dependency needed.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Roughly normal: the sum of 4 uniforms, centred and scaled.
    fn normal(&mut self) -> f32 {
        let u: f32 = (0..4)
            .map(|_| (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
            .sum();
        (u - 2.0) * 1.7
    }
}

#[test]
fn block_geometry_matches_dtype() {
    let geometry = [
        (DType::Q8_0, q8_0::BLOCK_ELEMS, q8_0::BLOCK_BYTES),
        (DType::Q4_0, q4_0::BLOCK_ELEMS, q4_0::BLOCK_BYTES),
        (DType::Q4_1, q4_1::BLOCK_ELEMS, q4_1::BLOCK_BYTES),
        (DType::Q5_0, q5_0::BLOCK_ELEMS, q5_0::BLOCK_BYTES),
        (DType::Q5_1, q5_1::BLOCK_ELEMS, q5_1::BLOCK_BYTES),
        (DType::Q2K, q2_k::BLOCK_ELEMS, q2_k::BLOCK_BYTES),
        (DType::Q3K, q3_k::BLOCK_ELEMS, q3_k::BLOCK_BYTES),
        (DType::Q4K, q4_k::BLOCK_ELEMS, q4_k::BLOCK_BYTES),
        (DType::Q5K, q5_k::BLOCK_ELEMS, q5_k::BLOCK_BYTES),
        (DType::Q6K, q6_k::BLOCK_ELEMS, q6_k::BLOCK_BYTES),
        (DType::IQ4NL, iq4_nl::BLOCK_ELEMS, iq4_nl::BLOCK_BYTES),
        (DType::IQ4XS, iq4_xs::BLOCK_ELEMS, iq4_xs::BLOCK_BYTES),
        (DType::MXFP4, mxfp4::BLOCK_ELEMS, mxfp4::BLOCK_BYTES),
    ];
    for (dtype, elems, bytes) in geometry {
        assert_eq!(
            (dtype.block_size(), dtype.type_size()),
            (elems, bytes),
            "{dtype}"
        );
    }
}

#[test]
fn dequantization_is_bit_exact_with_the_reference() {
    let fx = Fixture::load();
    for dtype in fixture_types() {
        let bytes = fx.bytes(dtype);
        let want = fx.floats(dtype.name());
        let got = dequantize(dtype, bytes, 2 * ROW).unwrap();
        assert_bits_eq(&got, &want, dtype.name());
        // Row by row through the slice API as well.
        let row_bytes = dtype.row_bytes(ROW).unwrap();
        for r in 0..2 {
            let mut y = vec![f32::NAN; ROW];
            dequantize_row(dtype, &bytes[r * row_bytes..][..row_bytes], &mut y).unwrap();
            assert_bits_eq(&y, &want[r * ROW..][..ROW], dtype.name());
        }
    }
}

/// `tests/data/iq4_mxfp4_ref.gguf`: a [4, 512] f32 `source` (the shared
/// fixture's two rows, then a row with silent, quiet and sub-epsilon blocks
/// and a row ending in a silent super-block), quantised by ggml's
/// `ggml_quantize_chunk` (what `llama-quantize` runs) to IQ4_NL, IQ4_XS and
/// MXFP4, and each dequantised by gguf-py (`<TYPE>.deq`). Made by
/// `scripts/quant-refs/make_ref.py`.
fn iq_reference() -> GgufFile {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/iq4_mxfp4_ref.gguf");
    GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const IQ_TYPES: [DType; 3] = [DType::IQ4NL, DType::IQ4XS, DType::MXFP4];

#[test]
fn iq4_and_mxfp4_dequantise_bit_exactly_like_gguf_py() {
    let f = iq_reference();
    for dtype in IQ_TYPES {
        let info = f.tensor(dtype.name()).expect("quantised tensor");
        assert_eq!(info.dtype(), Ok(dtype));
        assert_eq!(info.shape(), [4, ROW]);
        let want = f32_tensor(&f, &format!("{}.deq", dtype.name()));
        let got = dequantize(dtype, f.tensor_data(info), 4 * ROW).unwrap();
        assert_bits_eq(&got, &want, dtype.name());
    }
}

#[test]
fn iq4_and_mxfp4_quantisers_reproduce_ggml_bytes() {
    let f = iq_reference();
    let source = f32_tensor(&f, "source");
    for dtype in IQ_TYPES {
        let want = f.tensor_data(f.tensor(dtype.name()).unwrap());
        let got = quantize(dtype, &source).unwrap();
        if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
            panic!(
                "{dtype}: byte {i} (block {}) differs ({} vs {})",
                i / dtype.type_size(),
                got[i],
                want[i]
            );
        }
        assert_eq!(got.len(), want.len());
    }
}

#[test]
fn quantisers_reproduce_the_stored_bytes() {
    // gguf-py wrote the legacy types, ggml's reference quantiser the K-quants:
    // the search for scales and mins follows it step for step.
    let fx = Fixture::load();
    let source = fx.floats("source");
    for dtype in fixture_types() {
        let got = quantize(dtype, &source).unwrap();
        let want = fx.bytes(dtype);
        if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
            panic!("{dtype}: byte {i} differs ({} vs {})", got[i], want[i]);
        }
        assert_eq!(got.len(), want.len());
    }
}

#[test]
fn k_quant_errors_are_within_ten_percent_of_ggml() {
    let fx = Fixture::load();
    let source = fx.floats("source");
    for dtype in K_QUANTS {
        let reference = fx.floats(dtype.name());
        // The fixture's own figure is the error of its stored bytes.
        let ggml_total = rms_diff(&reference, &source);
        assert!(
            (ggml_total - fx.ggml_rmse(dtype)).abs() < 1e-6 * ggml_total,
            "{dtype}"
        );
        let ours = dequantize(dtype, &quantize(dtype, &source).unwrap(), 2 * ROW).unwrap();
        for r in 0..2 {
            let row = r * ROW..(r + 1) * ROW;
            let ggml = rms_diff(&reference[row.clone()], &source[row.clone()]);
            let mine = rms_diff(&ours[row.clone()], &source[row]);
            assert!(
                mine <= 1.1 * ggml,
                "{dtype} row {r}: rms error {mine} vs ggml {ggml}"
            );
        }
    }
}

/// Rows that exercise the corners of the scale searches: Gaussian values
/// with outliers, sub-blocks a thousand times quieter than their
/// neighbours (their scales round to 0), and silent sub-blocks.
fn awkward_rows(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed);
    (0..n)
        .map(|i| {
            let v = rng.normal();
            match (i / 16) % 23 {
                5 => v * 1e-3,
                11 => 0.0,
                _ if i % 97 == 0 => v * 8.0,
                _ => v,
            }
        })
        .collect()
}

#[test]
fn requantising_dequantised_values_is_lossless() {
    // quantise -> dequantise -> quantise must give back the same values bit
    // for bit (ggml's own search alone does not: see `exact`), and the same
    // bytes where no sub-block has a zero scale (whose levels carry no value).
    // IQ4_NL / IQ4_XS keep ggml's search as it is: its first guess maps the
    // largest element to the level -127, so a block whose largest element
    // sits on another level is not found again. Nothing in ATS requantises
    // IQ4 weights (they are read, never written), so no exact re-encoder.
    let fx = Fixture::load();
    let source = fx.floats("source");
    let mut rng = Rng(99);
    let uniform: Vec<f32> = (0..256 * 64)
        .map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
        .collect();
    let rows = [
        awkward_rows(256 * 256, 7),
        awkward_rows(256 * 64, 8).iter().map(|v| v * 1e-5).collect(),
        awkward_rows(256 * 64, 9).iter().map(|v| v * 3e3).collect(),
        awkward_rows(256 * 64, 10)
            .iter()
            .map(|v| v.abs() + 0.5)
            .collect(),
        uniform,
    ];
    let lossless = ALL_DTYPES
        .into_iter()
        .filter(|d| !matches!(d, DType::IQ4NL | DType::IQ4XS));
    for dtype in lossless {
        let q1 = quantize(dtype, &source).unwrap();
        let y1 = dequantize(dtype, &q1, source.len()).unwrap();
        assert_eq!(
            quantize(dtype, &y1).unwrap(),
            q1,
            "{dtype}: the bytes changed"
        );
        for x in &rows {
            let y1 = dequantize(dtype, &quantize(dtype, x).unwrap(), x.len()).unwrap();
            let y2 = dequantize(dtype, &quantize(dtype, &y1).unwrap(), x.len()).unwrap();
            assert_bits_eq(&y2, &y1, dtype.name());
        }
    }
}

/// Rows that look like a grid without being one, or are one trivially.
fn structured_rows(n: usize) -> Vec<Vec<f32>> {
    let mut rng = Rng(5);
    let mut rows = vec![
        vec![0.25; n],
        vec![0.0; n],
        (0..n).map(|i| (i % 7) as f32 - 3.0).collect(),
        (0..n).map(|_| (rng.next_u64() % 9) as f32 - 4.0).collect(),
        (0..n)
            .map(|_| {
                if rng.next_u64().is_multiple_of(2) {
                    0.5
                } else {
                    -0.5
                }
            })
            .collect(),
    ];
    rows.push(
        (0..n)
            .map(|i| if i % 50 == 0 { rng.normal() } else { 0.0 })
            .collect(),
    );
    rows
}

#[test]
fn exact_reencoding_only_replaces_ggml_blocks_by_exact_ones() {
    fn check<const B: usize>(dtype: DType, reference: fn(&[f32; QK_K], &mut [u8; B])) {
        let mut rows = structured_rows(QK_K * 32);
        rows.push(awkward_rows(QK_K * 64, 11));
        let grid = dequantize(dtype, &quantize(dtype, &rows[6]).unwrap(), rows[6].len()).unwrap();
        rows.push(grid);
        let (mut replaced, mut exact) = (0, 0);
        for x in &rows {
            let q = quantize(dtype, x).unwrap();
            let y = dequantize(dtype, &q, x.len()).unwrap();
            let (xs, _) = x.as_chunks::<QK_K>();
            let (qs, _) = q.as_chunks::<B>();
            for (i, (xb, qb)) in xs.iter().zip(qs).enumerate() {
                let mut want = [0u8; B];
                reference(xb, &mut want);
                let yb = &y[i * QK_K..][..QK_K];
                let is_exact = xb.iter().zip(yb).all(|(a, b)| a.to_bits() == b.to_bits());
                exact += usize::from(is_exact);
                if *qb != want {
                    replaced += 1;
                    assert!(
                        is_exact,
                        "{dtype} block {i}: replaced by an inexact encoding"
                    );
                }
            }
        }
        // The dequantised row at least re-encodes exactly everywhere.
        assert!(exact >= 64, "{dtype}: {exact} exact blocks");
        assert!(replaced > 0, "{dtype}: the re-encoder never ran");
    }
    check(DType::Q2K, q2_k::reference_block);
    check(DType::Q3K, q3_k::reference_block);
    check(DType::Q4K, q4_k::reference_block);
    check(DType::Q5K, q5_k::reference_block);
    check(DType::Q6K, q6_k::reference_block);
}

/// `llama/llama-f32.gguf` and what `llama-quantize --pure` made of it.
fn llama_quant_files() -> (GgufFile, Vec<GgufFile>) {
    let dir = fixture_dir().join("..");
    let f32_model = GgufFile::open(dir.join("llama/llama-f32.gguf")).expect("llama-f32.gguf");
    let quantised = [
        "Q8_0",
        "Q4_0",
        "Q4_1",
        "Q4_K_M",
        "Q5_K_M",
        "Q6_K",
        "Q4_K_M-mix",
    ]
    .iter()
    .map(|v| {
        let path = dir.join(format!("llama_quant/llama-{v}.gguf"));
        GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    })
    .collect();
    (f32_model, quantised)
}

fn f32_tensor(f: &GgufFile, name: &str) -> Vec<f32> {
    let info = f.tensor(name).unwrap_or_else(|| panic!("no tensor {name}"));
    assert_eq!(info.dtype(), Ok(DType::F32), "{name}");
    let n = info.n_elements() as usize;
    dequantize(DType::F32, f.tensor_data(info), n).unwrap()
}

#[test]
fn llama_quantize_files_are_reproduced_byte_for_byte() {
    let (f32_model, variants) = llama_quant_files();
    let mut checked = std::collections::BTreeMap::<DType, usize>::new();
    for file in &variants {
        for info in file.tensors() {
            let dtype = info.dtype().unwrap();
            if dtype == DType::F32 {
                continue;
            }
            let x = f32_tensor(&f32_model, &info.name);
            let want = file.tensor_data(info);
            let got = quantize(dtype, &x).unwrap();
            if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
                panic!(
                    "{dtype} {}: byte {i} (block {}) differs",
                    info.name,
                    i / dtype.type_size()
                );
            }
            // And the dequantised weights requantise to the same bytes.
            let y = dequantize(dtype, want, x.len()).unwrap();
            let again = quantize(dtype, &y).unwrap();
            let y2 = dequantize(dtype, &again, x.len()).unwrap();
            assert_bits_eq(&y2, &y, &info.name);
            *checked.entry(dtype).or_default() += x.len();
        }
    }
    let types: Vec<DType> = checked.keys().copied().collect();
    assert_eq!(
        types,
        [
            DType::Q8_0,
            DType::Q4_0,
            DType::Q4_1,
            DType::Q4K,
            DType::Q5K,
            DType::Q6K
        ]
    );
}

#[test]
fn lengths_are_checked() {
    for dtype in ALL_DTYPES {
        let bs = dtype.block_size();
        let n = 2 * bs;
        let bytes = dtype.row_bytes(n).unwrap();
        let src = vec![0u8; bytes];
        let mut dst = vec![0.0f32; n];
        assert_eq!(dequantize_row(dtype, &src, &mut dst), Ok(()));

        let short = dequantize_row(dtype, &src[..bytes - 1], &mut dst);
        assert_eq!(
            short,
            Err(QuantError::ByteLength {
                dtype,
                n,
                expected: bytes,
                actual: bytes - 1
            })
        );
        let long = vec![0u8; bytes + 1];
        assert!(matches!(
            dequantize_row(dtype, &long, &mut dst),
            Err(QuantError::ByteLength { .. })
        ));
        let mut out = vec![0u8; bytes + 1];
        assert!(matches!(
            quantize_row(dtype, &dst, &mut out),
            Err(QuantError::ByteLength { .. })
        ));
        assert!(matches!(
            dequantize(dtype, &src, n + bs),
            Err(QuantError::ByteLength { .. })
        ));

        if bs > 1 {
            let partial = QuantError::PartialBlock {
                dtype,
                n: n - 1,
                block_size: bs,
            };
            assert_eq!(dequantize_row(dtype, &src, &mut dst[..n - 1]), Err(partial));
            assert_eq!(quantize(dtype, &dst[..n - 1]), Err(partial));
            assert_eq!(dequantize(dtype, &src, n - 1), Err(partial));
            let msg = partial.to_string();
            assert!(
                msg.contains(dtype.name()) && msg.contains(&format!("{bs}-element")),
                "{msg}"
            );
        }
        // A huge element count is refused before anything is allocated: its
        // byte size overflows when a block takes more bytes than elements,
        // and is a length mismatch otherwise.
        let huge = usize::MAX / bs * bs;
        let err = dequantize(dtype, &src, huge).unwrap_err();
        if dtype.type_size() > bs {
            assert_eq!(err, QuantError::TooLarge { dtype, n: huge });
        } else {
            assert!(matches!(err, QuantError::ByteLength { .. }), "{err}");
        }
    }
}

#[test]
fn empty_rows_are_fine() {
    for dtype in ALL_DTYPES {
        assert_eq!(quantize(dtype, &[]), Ok(vec![]));
        assert_eq!(dequantize(dtype, &[], 0), Ok(vec![]));
    }
}

#[test]
fn hostile_inputs_never_panic_and_stay_in_their_block() {
    let mut rng = Rng(0x5eed);
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE / 4.0, // subnormal
        -0.0,
        1e30,
        -1e-30,
    ];
    for dtype in ALL_DTYPES {
        let bs = dtype.block_size().max(32);
        let clean: Vec<f32> = (0..bs).map(|_| rng.normal()).collect();
        let clean_q = quantize(dtype, &clean).unwrap();
        let mut cases: Vec<Vec<f32>> = specials.iter().map(|&s| vec![s; bs]).collect();
        for &s in &specials {
            let mut v: Vec<f32> = (0..bs).map(|_| rng.normal()).collect();
            v[bs / 3] = s;
            cases.push(v);
        }
        cases.push(vec![0.0; bs]);
        cases.push(vec![-1.5; bs]);
        for poisoned in cases {
            // A clean block followed by a poisoned one.
            let row: Vec<f32> = clean.iter().chain(&poisoned).copied().collect();
            let q = quantize(dtype, &row).unwrap();
            assert_eq!(
                &q[..clean_q.len()],
                &clean_q[..],
                "{dtype}: the clean block changed"
            );
            let y = dequantize(dtype, &q, row.len()).unwrap();
            assert_eq!(y.len(), row.len());
        }
    }
}

#[test]
fn any_bytes_dequantise_without_panicking() {
    let mut rng = Rng(42);
    for dtype in ALL_DTYPES {
        let n = 4 * dtype.block_size().max(64);
        let bytes: Vec<u8> = (0..dtype.row_bytes(n).unwrap())
            .map(|_| rng.next_u64() as u8)
            .collect();
        let y = dequantize(dtype, &bytes, n).unwrap();
        assert_eq!(y.len(), n);
    }
}

#[test]
fn all_zero_input_quantises_to_zeros() {
    for dtype in ALL_DTYPES {
        let n = dtype.block_size().max(32);
        let q = quantize(dtype, &vec![0.0; n]).unwrap();
        let y = dequantize(dtype, &q, n).unwrap();
        assert!(y.iter().all(|&v| v == 0.0), "{dtype}: {y:?}");
    }
}
