//! The attention and decode matrix-vector kernels run on the host under the emulator in
//! `tests/emulate` (every CUDA thread a host thread, barriers for
//! `__syncthreads` and shuffles), launched with the geometry the backend
//! uses, against attention computed here in f64. This checks the kernels'
//! logic (indexing, masks, online softmax, warp and split merges) on
//! machines without a GPU; speed and the device's own rounding are for the
//! GPU tests (`tests/tests/gpu.rs`).
//!
//! Needs a C++20 compiler (`$CXX`, else `c++`). Without one the test says why
//! and passes, unless `ATS_REQUIRE_EMULATION=1` (CI) makes it fail.

use std::path::{Path, PathBuf};
use std::process::Command;

use ats_core::dtype::DType;
use ats_core::quant;
use ats_cuda::geometry::{self, AttnDims, SplitBudget, attn_splits, attn_tiles, decode_launch};
use ats_cuda::kernels::Module;
use half::f16;

const CAUSAL: i32 = 0;
const FULL: i32 = 1;

/// `module` with `driver` after it, compiled into `dir`; `Err` (why) when
/// there is no C++ compiler to run.
fn build(dir: &Path, module: Module, driver: &str) -> Result<PathBuf, String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/emulate");
    let driver = std::fs::read_to_string(here.join(driver)).map_err(|e| e.to_string())?;
    let src = format!(
        "#include \"{}\"\n{}\n{}",
        here.join("emu.h").display(),
        module.source(),
        driver
    );
    let cpp = dir.join("emu.cpp");
    let exe = dir.join("emu");
    std::fs::write(&cpp, src).map_err(|e| e.to_string())?;
    // AddressSanitizer turns a kernel's read or write outside its buffers into
    // a failure; a compiler without its runtime builds without it, unless CI
    // requires the emulator (then both are required)
    let compile = |asan: bool| {
        let mut c = Command::new(&cxx);
        c.args([
            "-std=c++20",
            "-O2",
            "-pthread",
            "-fno-strict-aliasing",
            "-ffp-contract=off",
            "-w",
        ]);
        if asan {
            c.args(["-fsanitize=address", "-fno-omit-frame-pointer"]);
        }
        c.arg(&cpp)
            .arg("-o")
            .arg(&exe)
            .output()
            .map_err(|e| format!("cannot run the C++ compiler `{cxx}`: {e}"))
    };
    let with_asan = compile(true)?;
    if with_asan.status.success() {
        return Ok(exe);
    }
    let out = compile(false)?;
    if !out.status.success() {
        // a compiler that runs but rejects the source is a failure, not a skip
        panic!(
            "{} does not compile under the emulator:\n{}",
            module.file_name(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        !required(),
        "ATS_REQUIRE_EMULATION=1 but `{cxx}` cannot build with AddressSanitizer:\n{}",
        String::from_utf8_lossy(&with_asan.stderr)
    );
    eprintln!("emulating {} without AddressSanitizer", module.file_name());
    Ok(exe)
}

/// Whether CI asks for the emulator (`ATS_REQUIRE_EMULATION=1`).
fn required() -> bool {
    std::env::var("ATS_REQUIRE_EMULATION").is_ok_and(|v| v == "1")
}

/// A scratch folder and the emulated `module`, or `None` (the test passes
/// with a printed reason) when no compiler is there and CI does not require one.
fn emulator(test: &str, module: Module, driver: &str) -> Option<(PathBuf, PathBuf)> {
    let dir = std::env::temp_dir().join(format!("ats-emu-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    match build(&dir, module, driver) {
        Ok(exe) => Some((dir, exe)),
        Err(why) => {
            assert!(
                !required(),
                "ATS_REQUIRE_EMULATION=1 but the emulator cannot be built: {why}"
            );
            eprintln!("skipping the kernel emulation: {why}");
            None
        }
    }
}

/// Runs `exe` on `input` and reads the f32 values it writes.
fn run(exe: &Path, dir: &Path, input: Vec<u8>) -> Vec<f32> {
    let (inp, out) = (dir.join("case.bin"), dir.join("out.bin"));
    std::fs::write(&inp, input).unwrap();
    let r = Command::new(exe).arg(&inp).arg(&out).output().unwrap();
    assert!(
        r.status.success(),
        "the emulated kernel failed ({}):\n{}",
        r.status,
        String::from_utf8_lossy(&r.stderr)
    );
    std::fs::read(&out)
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// A small deterministic generator of values in [-amp, amp).
fn values(seed: &mut u64, n: usize, amp: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((*seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * amp
        })
        .collect()
}

/// One attention call: shapes, mask and data.
struct Case {
    n_q: usize,
    n_keys: usize,
    n_heads: usize,
    n_kv: usize,
    d: usize,
    mask: i32,
    f16: bool,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    /// Sliding window: keys each query sees at most (0: all).
    window: usize,
    /// Per-head sink logits.
    sinks: Option<Vec<f32>>,
}

impl Case {
    fn new(
        n_q: usize,
        n_keys: usize,
        heads: (usize, usize),
        d: usize,
        mask: i32,
        f16: bool,
    ) -> Case {
        let mut seed = (n_q * 7919 + n_keys * 31 + d + heads.0) as u64;
        let mut rnd = |n: usize, amp: f32| values(&mut seed, n, amp);
        let q = rnd(n_q * heads.0 * d, 1.0);
        let kv = n_keys * heads.1 * d;
        // keys large enough that the softmax is far from uniform
        let (mut k, mut v) = (rnd(kv, 2.0), rnd(kv, 1.0));
        if f16 {
            // the cache holds halves: the reference sees the same values
            for x in k.iter_mut().chain(v.iter_mut()) {
                *x = f16::from_f32(*x).to_f32();
            }
        }
        Case {
            n_q,
            n_keys,
            n_heads: heads.0,
            n_kv: heads.1,
            d,
            mask,
            f16,
            q,
            k,
            v,
            window: 0,
            sinks: None,
        }
    }

    /// The case with a sliding window and sink logits (near the scores'
    /// range, so they take a real share of each softmax).
    fn gpt_oss(mut self, window: usize, sinks: bool) -> Case {
        self.window = window;
        if sinks {
            let mut seed = self.n_heads as u64 * 977 + 5;
            self.sinks = Some(values(&mut seed, self.n_heads, 3.0));
        }
        self
    }

    fn scale(&self) -> f32 {
        1.0 / (self.d as f32).sqrt()
    }

    /// Softmax attention in f64 with the full score row.
    fn reference(&self) -> Vec<f32> {
        let (d, group) = (self.d, self.n_heads / self.n_kv);
        let offset = self.n_keys - self.n_q;
        let mut out = vec![0f32; self.n_q * self.n_heads * d];
        for r in 0..self.n_q {
            let hi = if self.mask == CAUSAL {
                offset + r + 1
            } else {
                self.n_keys
            };
            let lo = if self.mask == CAUSAL && self.window > 0 {
                hi.saturating_sub(self.window)
            } else {
                0
            };
            for h in 0..self.n_heads {
                let g = h / group;
                let qv = &self.q[(r * self.n_heads + h) * d..][..d];
                let s: Vec<f64> = (lo..hi)
                    .map(|j| {
                        let kr = &self.k[(j * self.n_kv + g) * d..][..d];
                        qv.iter()
                            .zip(kr)
                            .map(|(&a, &b)| a as f64 * b as f64)
                            .sum::<f64>()
                            * self.scale() as f64
                    })
                    .collect();
                let sink = self.sinks.as_ref().map(|sk| sk[h] as f64);
                let mx = s
                    .iter()
                    .cloned()
                    .chain(sink)
                    .fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
                let l: f64 = e.iter().sum::<f64>() + sink.map_or(0.0, |x| (x - mx).exp());
                for c in 0..d {
                    let o: f64 = (lo..hi)
                        .map(|j| e[j - lo] * self.v[(j * self.n_kv + g) * d + c] as f64)
                        .sum();
                    out[(r * self.n_heads + h) * d + c] = (o / l) as f32;
                }
            }
        }
        out
    }

    /// Runs the case through the emulated kernel: `decode` picks
    /// `attn_decode_*` (as the backend does for it), else the general kernel.
    fn emulate(&self, exe: &Path, dir: &Path, decode: bool, sm_count: usize) -> Vec<f32> {
        self.emulate_paged(exe, dir, decode, sm_count, None)
    }

    /// [`Case::emulate`] with the keys and values in blocks of `2^shift`
    /// rows laid out in reverse order, read through a block table.
    fn emulate_paged(
        &self,
        exe: &Path,
        dir: &Path,
        decode: bool,
        sm_count: usize,
        shift: Option<u32>,
    ) -> Vec<f32> {
        let offset = (self.n_keys - self.n_q) as i32;
        let dims = AttnDims {
            n_q: self.n_q,
            n_heads: self.n_heads,
            n_kv: self.n_kv,
            d: self.d,
            n_keys: self.n_keys,
        };
        let budget = SplitBudget {
            sm_count,
            scratch_floats: 1 << 20,
        };
        let (kernel, splits, split_keys, q_tiles, r, bk, shared) = if decode {
            let l = decode_launch(&dims, self.f16, budget).expect("a decode shape");
            (1, l.splits, l.split_keys, 0, 0, 0, l.shared_bytes)
        } else {
            let group = self.n_heads / self.n_kv;
            let t = attn_tiles(self.d, group).unwrap();
            let q_tiles = self.n_q.div_ceil(t.rows(group));
            let (s, sk) = attn_splits(&dims, q_tiles, budget);
            (0, s, sk, q_tiles, t.r, t.bk, t.shared_bytes)
        };
        let mut bytes = Vec::new();
        let ints = [
            kernel,
            self.n_q as i32,
            self.n_keys as i32,
            self.n_heads as i32,
            self.n_kv as i32,
            self.d as i32,
            self.mask,
            offset,
            self.f16 as i32,
            splits as i32,
            split_keys as i32,
            q_tiles as i32,
            r as i32,
            bk as i32,
            shared as i32,
        ];
        ints.iter().for_each(|i| bytes.extend(i.to_le_bytes()));
        bytes.extend(self.scale().to_le_bytes());
        let w = self.n_kv * self.d;
        let (n_blocks, table, k, v) = match shift {
            None => (0, Vec::new(), self.k.clone(), self.v.clone()),
            Some(s) => {
                let bt = 1usize << s;
                let n_blocks = self.n_keys.div_ceil(bt);
                let table: Vec<u32> = (0..n_blocks as u32).rev().collect();
                let (mut k, mut v) = (vec![0f32; n_blocks * bt * w], vec![0f32; n_blocks * bt * w]);
                for t in 0..self.n_keys {
                    let row = table[t / bt] as usize * bt + t % bt;
                    k[row * w..(row + 1) * w].copy_from_slice(&self.k[t * w..(t + 1) * w]);
                    v[row * w..(row + 1) * w].copy_from_slice(&self.v[t * w..(t + 1) * w]);
                }
                (n_blocks, table, k, v)
            }
        };
        for i in [
            n_blocks as i32,
            shift.unwrap_or(0) as i32,
            self.window as i32,
            self.sinks.is_some() as i32,
        ] {
            bytes.extend(i.to_le_bytes());
        }
        self.q.iter().for_each(|x| bytes.extend(x.to_le_bytes()));
        for x in k.iter().chain(&v) {
            if self.f16 {
                bytes.extend(f16::from_f32(*x).to_bits().to_le_bytes());
            } else {
                bytes.extend(x.to_le_bytes());
            }
        }
        table.iter().for_each(|b| bytes.extend(b.to_le_bytes()));
        for x in self.sinks.iter().flatten() {
            bytes.extend(x.to_le_bytes());
        }
        run(exe, dir, bytes)
    }
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(
            0.0,
            |m, d| if d.is_nan() { f32::INFINITY } else { m.max(d) },
        )
}

#[test]
fn attention_kernels_match_the_reference_under_emulation() {
    let Some((dir, exe)) = emulator("attention", Module::Attention, "attention_driver.cpp") else {
        return;
    };
    // (queries, keys, (heads, kv heads), head size, mask, f16 cache, SMs)
    let decode_cases = [
        (1, 300, (32, 8), 128, CAUSAL, true, 132), // Llama-3-8B decode, 3 splits
        (1, 300, (32, 8), 128, CAUSAL, true, 1),   // the same in one split
        (1, 77, (9, 3), 64, CAUSAL, false, 132),   // SmolLM2 heads, a partial tile
        (2, 161, (8, 2), 256, CAUSAL, true, 132),  // two rows: the second sees one key more
        (1, 1, (8, 1), 64, CAUSAL, false, 132),    // the first token
        (1, 520, (8, 8), 128, FULL, false, 64),    // no grouping, full mask
    ];
    for (n_q, n_keys, heads, d, mask, f16, sm) in decode_cases {
        let c = Case::new(n_q, n_keys, heads, d, mask, f16);
        let got = c.emulate(&exe, &dir, true, sm);
        let diff = max_diff(&got, &c.reference());
        eprintln!(
            "decode {n_q}x{n_keys} heads {heads:?} d {d} mask {mask} f16 {f16}: max |diff| {diff:.2e}"
        );
        assert!(
            diff < 2e-5,
            "decode {n_q}x{n_keys} {heads:?} d {d}: max |diff| {diff}"
        );
    }
    // the general kernel, which the GPU tests already check on a device:
    // agreement here is what says the emulator itself is right
    for (n_q, n_keys, heads, d, mask, f16) in [
        (5, 40, (8, 2), 64, CAUSAL, true),
        (1, 600, (4, 2), 64, CAUSAL, false),
    ] {
        let c = Case::new(n_q, n_keys, heads, d, mask, f16);
        let diff = max_diff(&c.emulate(&exe, &dir, false, 132), &c.reference());
        eprintln!("general {n_q}x{n_keys} heads {heads:?} d {d}: max |diff| {diff:.2e}");
        assert!(
            diff < 2e-5,
            "general {n_q}x{n_keys} {heads:?} d {d}: max |diff| {diff}"
        );
    }
    // keys in KV blocks (reverse order, a partial last block) read through
    // the block table give the same answer as keys in row order
    for (n_q, n_keys, heads, d, f16, decode, shift) in [
        (1, 300, (32, 8), 128, true, true, 5),
        (1, 77, (9, 3), 64, false, true, 4),
        (3, 70, (8, 2), 64, true, false, 5),
        (1, 600, (4, 2), 64, false, false, 6),
    ] {
        let c = Case::new(n_q, n_keys, heads, d, CAUSAL, f16);
        let got = c.emulate_paged(&exe, &dir, decode, 132, Some(shift));
        let diff = max_diff(&got, &c.reference());
        eprintln!(
            "paged {n_q}x{n_keys} blocks of {}: max |diff| {diff:.2e}",
            1 << shift
        );
        assert!(
            diff < 2e-5,
            "paged {n_q}x{n_keys} decode {decode}: max |diff| {diff}"
        );
    }
    // gpt-oss: a sliding window (decode past it, in several splits; a
    // prefill chunk whose rows see different windows) and sink logits, on
    // the decode and the general kernel, through a block table
    for (n_q, n_keys, heads, d, f16, decode, window, sinks, shift) in [
        (1, 300, (8, 2), 64, true, true, 128, true, None),
        (1, 300, (8, 2), 64, false, true, 0, true, Some(5)),
        (2, 161, (8, 2), 64, true, true, 32, false, None),
        (1, 5, (4, 2), 64, false, true, 8, true, None),
        (12, 40, (4, 2), 64, true, false, 8, true, None),
        (7, 600, (4, 2), 64, false, false, 128, true, Some(6)),
        (5, 40, (8, 2), 64, false, false, 0, true, None),
    ] {
        let c = Case::new(n_q, n_keys, heads, d, CAUSAL, f16).gpt_oss(window, sinks);
        let got = c.emulate_paged(&exe, &dir, decode, 132, shift);
        let diff = max_diff(&got, &c.reference());
        eprintln!(
            "gpt-oss {n_q}x{n_keys} window {window} sinks {sinks} decode {decode}: max |diff| {diff:.2e}"
        );
        assert!(
            diff < 2e-5,
            "gpt-oss {n_q}x{n_keys} window {window} sinks {sinks}: max |diff| {diff}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A decode product: `x` holds `x.len() / cols` tokens.
struct Product<'a> {
    dtype: DType,
    rows: usize,
    cols: usize,
    w: &'a [u8],
    x: &'a [f32],
    bias: Option<&'a [f32]>,
}

impl Product<'_> {
    /// `y` through the emulated `matvec_*` (chunked) or `matvec_wide_*` kernel.
    fn emulate(&self, exe: &Path, dir: &Path, wide: bool) -> Vec<f32> {
        let cfg = if wide {
            geometry::matvec_wide(self.rows)
        } else {
            geometry::matvec(self.rows)
        };
        let id = type_id(self.dtype);
        let ints = [
            wide as i32,
            id,
            self.rows as i32,
            self.cols as i32,
            (self.x.len() / self.cols) as i32,
            (self.w.len() / self.rows) as i32,
            self.bias.is_some() as i32,
            cfg.grid_dim.0 as i32,
            cfg.block_dim.0 as i32,
            0,
            0,
            0,
            0,
        ];
        let mut bytes: Vec<u8> = ints.iter().flat_map(|i| i.to_le_bytes()).collect();
        bytes.extend_from_slice(self.w);
        self.x
            .iter()
            .chain(self.bias.unwrap_or(&[]))
            .for_each(|v| bytes.extend(v.to_le_bytes()));
        run(exe, dir, bytes)
    }

    /// `y[slot]` through the emulated `matvec_wide_moe_*`: `w` holds
    /// `n_expert` matrices, `routing` a row of ids then weights per token.
    fn emulate_routed(&self, exe: &Path, dir: &Path, routed: Routed<'_>) -> Vec<f32> {
        let slots = routed.routing.len() / 2;
        let cfg = geometry::matvec_wide_moe(self.rows, slots);
        assert_eq!(cfg.grid_dim.1 as usize, slots);
        let id = type_id(self.dtype);
        let ints = [
            2,
            id,
            self.rows as i32,
            self.cols as i32,
            (self.x.len() / self.cols) as i32,
            (self.w.len() / routed.n_expert / self.rows) as i32,
            0,
            cfg.grid_dim.0 as i32,
            cfg.block_dim.0 as i32,
            routed.n_expert as i32,
            routed.top_k as i32,
            routed.x_div as i32,
            slots as i32,
        ];
        let mut bytes: Vec<u8> = ints.iter().flat_map(|i| i.to_le_bytes()).collect();
        bytes.extend_from_slice(self.w);
        self.x
            .iter()
            .chain(routed.routing)
            .for_each(|v| bytes.extend(v.to_le_bytes()));
        run(exe, dir, bytes)
    }
}

/// The GGML type id the driver dispatches on.
fn type_id(dtype: DType) -> i32 {
    match dtype {
        DType::Q8_0 => 8,
        DType::Q4K => 12,
        DType::Q5K => 13,
        DType::Q6K => 14,
        DType::IQ4NL => 20,
        DType::IQ4XS => 23,
        DType::MXFP4 => 39,
        _ => unreachable!("the test's types"),
    }
}

/// How routed slots find their expert and their activation row.
#[derive(Clone, Copy)]
struct Routed<'a> {
    n_expert: usize,
    top_k: usize,
    /// Slots per activation row.
    x_div: usize,
    /// Per token: top_k expert ids, then top_k weights.
    routing: &'a [f32],
}

#[test]
fn decode_matvec_kernels_match_the_reference_under_emulation() {
    let Some((dir, exe)) = emulator("matvec", Module::Matvec, "matvec_driver.cpp") else {
        return;
    };
    let mut seed = 17u64;
    // (type, rows, cols, tokens, bias): odd row counts leave a warp half full
    let cases = [
        (DType::Q4K, 19, 512, 1, false),
        (DType::Q4K, 8, 2304, 3, true),
        (DType::Q6K, 19, 512, 1, true),
        (DType::Q6K, 5, 768, 8, false), // 3 blocks a row: rows 2-byte aligned only
        (DType::Q5K, 19, 512, 1, true),
        (DType::Q5K, 6, 768, 5, false),
        (DType::Q8_0, 19, 96, 1, true), // 3 blocks of 34 bytes a row
        (DType::Q8_0, 7, 1024, 8, false),
    ];
    for (dtype, rows, cols, n_tok, with_bias) in cases {
        let wf = values(&mut seed, rows * cols, 1.0);
        let w = quant::quantize(dtype, &wf).unwrap();
        let deq = quant::dequantize(dtype, &w, rows * cols).unwrap();
        let x = values(&mut seed, n_tok * cols, 1.0);
        let bias = with_bias.then(|| values(&mut seed, rows, 1.0));
        let want: Vec<f32> = (0..n_tok)
            .flat_map(|t| {
                let (x, deq, bias) = (&x, &deq, &bias);
                (0..rows).map(move |r| {
                    let dot: f64 = (0..cols)
                        .map(|c| deq[r * cols + c] as f64 * x[t * cols + c] as f64)
                        .sum();
                    (dot + bias.as_ref().map_or(0.0, |b| b[r] as f64)) as f32
                })
            })
            .collect();
        let p = Product {
            dtype,
            rows,
            cols,
            w: &w,
            x: &x,
            bias: bias.as_deref(),
        };
        for wide in [false, true] {
            let got = p.emulate(&exe, &dir, wide);
            let diff = max_diff(&got, &want);
            eprintln!("{dtype} {rows}x{cols}, {n_tok} tokens, wide {wide}: max |diff| {diff:.2e}");
            // sums of up to 2304 products of values near 1
            assert!(
                diff < 1e-4,
                "{dtype} {rows}x{cols} wide {wide}: max |diff| {diff}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// `y = x W^T (+ bias)` in f64 from the dequantised weights.
fn reference_product(deq: &[f32], x: &[f32], bias: Option<&[f32]>, rows: usize) -> Vec<f32> {
    let cols = deq.len() / rows;
    x.chunks_exact(cols)
        .flat_map(|xt| {
            (0..rows).map(move |r| {
                let dot: f64 = (0..cols)
                    .map(|c| deq[r * cols + c] as f64 * xt[c] as f64)
                    .sum();
                (dot + bias.map_or(0.0, |b| b[r] as f64)) as f32
            })
        })
        .collect()
}

#[test]
fn table_format_matvecs_match_the_reference_under_emulation() {
    // IQ4_NL, IQ4_XS and MXFP4 through the chunked kernel (deq32) and the
    // wide one: odd block sizes (18 and 17 bytes) leave rows unaligned
    let Some((dir, exe)) = emulator("matvec_iq", Module::Matvec, "matvec_driver.cpp") else {
        return;
    };
    let mut seed = 23u64;
    let cases = [
        (DType::IQ4NL, 19, 96, 1, true),
        (DType::IQ4NL, 7, 1024, 8, false),
        (DType::IQ4XS, 19, 512, 1, true),
        (DType::IQ4XS, 5, 768, 3, false),
        (DType::MXFP4, 19, 96, 1, true),
        (DType::MXFP4, 6, 544, 8, false),
    ];
    for (dtype, rows, cols, n_tok, with_bias) in cases {
        let wf = values(&mut seed, rows * cols, 1.0);
        let w = quant::quantize(dtype, &wf).unwrap();
        let deq = quant::dequantize(dtype, &w, rows * cols).unwrap();
        let x = values(&mut seed, n_tok * cols, 1.0);
        let bias = with_bias.then(|| values(&mut seed, rows, 1.0));
        let want = reference_product(&deq, &x, bias.as_deref(), rows);
        let p = Product {
            dtype,
            rows,
            cols,
            w: &w,
            x: &x,
            bias: bias.as_deref(),
        };
        for wide in [false, true] {
            let got = p.emulate(&exe, &dir, wide);
            let diff = max_diff(&got, &want);
            eprintln!("{dtype} {rows}x{cols}, {n_tok} tokens, wide {wide}: max |diff| {diff:.2e}");
            assert!(
                diff < 1e-4,
                "{dtype} {rows}x{cols} wide {wide}: max |diff| {diff}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn routed_expert_matvecs_match_the_reference_under_emulation() {
    let Some((dir, exe)) = emulator("moe", Module::Matvec, "matvec_driver.cpp") else {
        return;
    };
    let mut seed = 29u64;
    let (n_expert, top_k, rows) = (4, 2, 21);
    // two tokens: experts 2 and 0, then "none" (id n_expert) and 3
    let routing = [2.0, 0.0, 0.6, 0.4, 4.0, 3.0, 0.0, 1.0];
    for (dtype, cols) in [
        (DType::Q4K, 512),
        (DType::Q5K, 256),
        (DType::Q6K, 768),
        (DType::Q8_0, 160),
        (DType::IQ4NL, 96),
        (DType::IQ4XS, 256),
        (DType::MXFP4, 160), // 85-byte rows: experts at every alignment
    ] {
        let wf = values(&mut seed, n_expert * rows * cols, 1.0);
        let w = quant::quantize(dtype, &wf).unwrap();
        let deq = quant::dequantize(dtype, &w, n_expert * rows * cols).unwrap();
        // gate/up (an activation row per token), then down (a row per slot)
        for x_div in [top_k, 1] {
            let x = values(&mut seed, 4 / x_div * cols, 1.0);
            let p = Product {
                dtype,
                rows,
                cols,
                w: &w,
                x: &x,
                bias: None,
            };
            let r = Routed {
                n_expert,
                top_k,
                x_div,
                routing: &routing,
            };
            let got = p.emulate_routed(&exe, &dir, r);
            for slot in 0..4 {
                let e = routing[(slot / top_k) * 2 * top_k + slot % top_k] as usize;
                let y = &got[slot * rows..][..rows];
                if e >= n_expert {
                    assert!(
                        y.iter().all(|v| v.is_nan()),
                        "slot {slot} has no expert: nothing written"
                    );
                    continue;
                }
                let xr = &x[(slot / x_div) * cols..][..cols];
                let want: Vec<f32> = (0..rows)
                    .map(|r| {
                        let wr = &deq[(e * rows + r) * cols..][..cols];
                        wr.iter()
                            .zip(xr)
                            .map(|(a, b)| *a as f64 * *b as f64)
                            .sum::<f64>() as f32
                    })
                    .collect();
                let diff = max_diff(y, &want);
                eprintln!("{dtype} expert {e} slot {slot} x_div {x_div}: max |diff| {diff:.2e}");
                assert!(diff < 1e-4, "{dtype} slot {slot}: max |diff| {diff}");
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Runs `exe` on `input` and reads the bytes it writes.
fn run_bytes(exe: &Path, dir: &Path, input: Vec<u8>) -> Vec<u8> {
    let (inp, out) = (dir.join("case.bin"), dir.join("out.bin"));
    std::fs::write(&inp, input).unwrap();
    let r = Command::new(exe).arg(&inp).arg(&out).output().unwrap();
    assert!(
        r.status.success(),
        "the emulated kernel failed ({}):\n{}",
        r.status,
        String::from_utf8_lossy(&r.stderr)
    );
    std::fs::read(&out).unwrap()
}

/// `copy_routed_experts` copies exactly the experts some routing row names
/// (ids as floats, weights after them, NaN and out-of-range ids naming none)
/// and leaves every other byte of the destination as it was, with aligned
/// and unaligned expert sizes, under the backend's launch geometry.
#[test]
fn routed_expert_copies_take_only_the_chosen_experts_under_emulation() {
    let Some((dir, exe)) = emulator("routed-copy", Module::Copy, "copy_driver.cpp") else {
        return;
    };
    // (bytes per expert, experts, routing rows of (ids, weights), byte offset)
    let cases: [(u64, usize, Vec<Vec<f32>>, i32); 4] = [
        (4096, 8, vec![vec![3.0, 1.0, 0.6, 0.4]], 0),
        (
            4096,
            8,
            vec![vec![1.0, 6.0, 0.5, 0.5], vec![6.0, 7.0, 0.9, 0.1]],
            0,
        ),
        // an odd size and a start that is not 16-byte aligned: the byte path
        (1000, 5, vec![vec![4.0, 0.0, 0.7, 0.3]], 3),
        // ids that name no expert are ignored, weights are never ids
        (
            64,
            4,
            vec![vec![f32::NAN, 9.0, 2.0, 1.0], vec![-1.0, 2.0, 3.0, 0.0]],
            0,
        ),
    ];
    for (per, n_expert, routing, offset) in cases {
        let top_k = routing[0].len() / 2;
        let n = per as usize * n_expert;
        let src: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8 + 1).collect();
        let before = vec![0xABu8; n];
        let cfg = geometry::routed_copy(per, n_expert, 132).unwrap();
        let mut input = Vec::new();
        input.extend_from_slice(&per.to_le_bytes());
        for v in [
            n_expert as i32,
            routing.len() as i32,
            top_k as i32,
            offset,
            cfg.grid_dim.0 as i32,
            cfg.block_dim.0 as i32,
        ] {
            input.extend_from_slice(&v.to_le_bytes());
        }
        input.extend_from_slice(&src);
        for x in routing.iter().flatten() {
            input.extend_from_slice(&x.to_le_bytes());
        }
        input.extend_from_slice(&before);
        let out = run_bytes(&exe, &dir, input);
        let raw: Vec<u8> = routing
            .iter()
            .flatten()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let hit = ats_core::graph::experts_chosen(&raw, routing.len(), top_k, n_expert);
        for (e, &chosen) in hit.iter().enumerate() {
            let r = e * per as usize..(e + 1) * per as usize;
            let want = if chosen {
                &src[r.clone()]
            } else {
                &before[r.clone()]
            };
            assert_eq!(
                &out[r], want,
                "{per} B x {n_expert}: expert {e} (chosen {chosen})"
            );
        }
        assert!(
            hit.iter().any(|&h| h) && !hit.iter().all(|&h| h),
            "the case chooses some experts"
        );
    }
}

/// `kv_append_rows_f32` writes a sequence's new rows after its past
/// through its block table (and in row order without one), leaving every
/// other cache row as it was.
#[test]
fn cache_appends_go_through_the_block_table_under_emulation() {
    let Some((dir, exe)) = emulator("append", Module::Copy, "append_driver.cpp") else {
        return;
    };
    let (width, shift) = (6usize, 2i32);
    let bt = 1usize << shift;
    // (tokens already cached, new tokens, block table; empty: rows in order)
    let cases: [(usize, usize, Vec<u32>); 3] =
        [(3, 7, vec![4, 1, 7]), (0, 4, vec![2]), (5, 3, Vec::new())];
    for (past, new, table) in cases {
        let cache_rows = 8 * bt;
        let before: Vec<f32> = (0..cache_rows * width).map(|i| -(i as f32)).collect();
        let x: Vec<f32> = (0..new * width).map(|i| 1000.0 + i as f32).collect();
        let n = (new * width) as u64;
        let cfg = geometry::elementwise(n, 132);
        let mut input = Vec::new();
        for v in [past as u64, width as u64, n, cache_rows as u64] {
            input.extend_from_slice(&v.to_le_bytes());
        }
        for v in [
            table.len() as i32,
            shift,
            cfg.grid_dim.0 as i32,
            cfg.block_dim.0 as i32,
        ] {
            input.extend_from_slice(&v.to_le_bytes());
        }
        for v in &x {
            input.extend_from_slice(&v.to_le_bytes());
        }
        for b in &table {
            input.extend_from_slice(&b.to_le_bytes());
        }
        for v in &before {
            input.extend_from_slice(&v.to_le_bytes());
        }
        let got = run(&exe, &dir, input);
        let mut want = before.clone();
        for t in 0..new {
            let tok = past + t;
            let row = if table.is_empty() {
                tok
            } else {
                table[tok / bt] as usize * bt + tok % bt
            };
            want[row * width..(row + 1) * width].copy_from_slice(&x[t * width..(t + 1) * width]);
        }
        assert_eq!(got, want, "past {past}, {new} new, table {table:?}");
    }
}

/// `moe_topk` chooses and weighs experts as the CPU's router does, for
/// softmax routing (gpt-oss, Qwen3 MoE) and sigmoid routing with a
/// selection bias, renormalised or not and scaled (GLM-4.5), over more
/// tokens than one block routes and more experts than a warp has lanes.
#[test]
fn router_top_k_matches_the_cpu_under_emulation() {
    use ats_core::graph::{Gating, Routing};
    let Some((dir, exe)) = emulator("moe", Module::Moe, "moe_driver.cpp") else {
        return;
    };
    let (n_tok, n_expert, top_k) = (9usize, 40usize, 4usize);
    let mut seed = 0x6d6f_6500_0019;
    let logits = values(&mut seed, n_tok * n_expert, 3.0);
    let bias = values(&mut seed, n_expert, 0.5);
    let cases = [
        Routing::SOFTMAX_NORM,
        Routing {
            norm_topk: false,
            ..Routing::SOFTMAX_NORM
        },
        Routing {
            gating: Gating::Sigmoid,
            norm_topk: true,
            scale: 2.5,
        },
        Routing {
            gating: Gating::Sigmoid,
            norm_topk: false,
            scale: 1.0,
        },
    ];
    for routing in cases {
        let sigmoid = routing.gating == Gating::Sigmoid;
        let mut input = Vec::new();
        let header = [
            n_tok as i32,
            n_expert as i32,
            top_k as i32,
            i32::from(routing.norm_topk),
            i32::from(sigmoid),
            geometry::ROUTER_WARPS as i32,
        ];
        for v in header {
            input.extend_from_slice(&v.to_le_bytes());
        }
        input.extend_from_slice(&routing.scale.to_le_bytes());
        for v in logits.iter().chain(&bias) {
            input.extend_from_slice(&v.to_le_bytes());
        }
        let got = run(&exe, &dir, input);
        let mut want = vec![0f32; n_tok * 2 * top_k];
        let select = sigmoid.then_some(&bias[..]);
        ats_cpu::ops::moe::route(&logits, (n_expert, top_k), routing, select, &mut want);
        for (t, (g, w)) in got
            .chunks_exact(2 * top_k)
            .zip(want.chunks_exact(2 * top_k))
            .enumerate()
        {
            assert_eq!(g[..top_k], w[..top_k], "{routing:?}: token {t}'s experts");
            let d = max_diff(&g[top_k..], &w[top_k..]);
            assert!(d < 1e-6, "{routing:?}: token {t}'s weights differ by {d}");
        }
    }
}
