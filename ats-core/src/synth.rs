//! Synthetic models: GGUF files of a real architecture's shapes filled with
//! random but numerically sane quantised weights, written block by block
//! without a float intermediate, so an 8B model takes seconds. They exist for
//! benchmarks and planner experiments (there is no model hub here); they carry
//! no tokenizer, so they run from token ids, unless one is copied from a
//! real model ([`DonorVocab`]).

mod mmproj;
mod vocab;

pub use mmproj::SynthMmproj;
pub use vocab::{DonorVocab, VocabError};

use std::io::{self, Write};
use std::path::Path;

use half::f16;

use crate::dtype::DType;
use crate::gguf::{GgufWriter, TensorSpec, Value};
use crate::names::{self, hp, tensor as t};

/// The shape of a synthetic model.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthSpec {
    /// Architecture name (`llama`, `qwen3`, `qwen3moe`, `glm4moe`).
    pub arch: String,
    /// Hidden size.
    pub n_embd: usize,
    /// Blocks.
    pub n_layer: usize,
    /// Query heads.
    pub n_head: usize,
    /// KV heads.
    pub n_head_kv: usize,
    /// Head size.
    pub head_dim: usize,
    /// Dense FFN size.
    pub n_ff: usize,
    /// Vocabulary.
    pub n_vocab: usize,
    /// Experts (0: dense).
    pub n_expert: usize,
    /// Experts per token.
    pub n_expert_used: usize,
    /// Expert FFN size.
    pub n_ff_expert: usize,
    /// Shared experts beside the routed ones (`glm4moe`).
    pub n_expert_shared: usize,
    /// Leading blocks with a dense FFN in an MoE model (`glm4moe`).
    pub n_dense_lead: usize,
    /// Whether the output projection is the embedding table.
    pub tied: bool,
    /// Type of most matrices.
    pub main_type: DType,
    /// Type of attn_v, ffn_down and the output projection (llama.cpp's Q4_K_M gives them more bits).
    pub more_bits_type: DType,
}

impl SynthSpec {
    /// Named presets: `llama-1b` (Llama 3.2 1B shapes), `llama-8b` (Llama 3 8B),
    /// `qwen3-8b`, `qwen3-30b-a3b` (the MoE), `glm4.5-air` (106B-A12B: a
    /// dense lead, 128 experts and a shared one), `tiny` and `tiny-glm4moe`
    /// (tests), all Q4_K_M-like.
    pub fn preset(name: &str) -> Option<SynthSpec> {
        let base = SynthSpec {
            arch: "llama".into(),
            n_embd: 2048,
            n_layer: 16,
            n_head: 32,
            n_head_kv: 8,
            head_dim: 64,
            n_ff: 8192,
            n_vocab: 128256,
            n_expert: 0,
            n_expert_used: 0,
            n_ff_expert: 0,
            n_expert_shared: 0,
            n_dense_lead: 0,
            tied: true,
            main_type: DType::Q4K,
            more_bits_type: DType::Q6K,
        };
        Some(match name {
            "llama-1b" => base,
            "llama-8b" => SynthSpec {
                n_embd: 4096,
                n_layer: 32,
                head_dim: 128,
                n_ff: 14336,
                tied: false,
                ..base
            },
            "qwen3-8b" => SynthSpec {
                arch: "qwen3".into(),
                n_embd: 4096,
                n_layer: 36,
                head_dim: 128,
                n_ff: 12288,
                n_vocab: 151936,
                tied: false,
                ..base
            },
            "qwen3-30b-a3b" => SynthSpec {
                arch: "qwen3moe".into(),
                n_embd: 2048,
                n_layer: 48,
                n_head: 32,
                n_head_kv: 4,
                head_dim: 128,
                n_ff: 6144,
                n_vocab: 151936,
                n_expert: 128,
                n_expert_used: 8,
                n_ff_expert: 768,
                tied: false,
                ..base
            },
            "glm4.5-air" => SynthSpec {
                arch: "glm4moe".into(),
                n_embd: 4096,
                n_layer: 46,
                n_head: 96,
                n_head_kv: 8,
                head_dim: 128,
                n_ff: 10944,
                n_vocab: 151552,
                n_expert: 128,
                n_expert_used: 8,
                n_ff_expert: 1408,
                n_expert_shared: 1,
                n_dense_lead: 1,
                tied: false,
                ..base
            },
            "tiny" => SynthSpec {
                n_embd: 256,
                n_layer: 4,
                n_head: 4,
                n_head_kv: 2,
                head_dim: 64,
                n_ff: 512,
                n_vocab: 1024,
                ..base
            },
            "tiny-glm4moe" => SynthSpec {
                arch: "glm4moe".into(),
                n_expert: 8,
                n_expert_used: 2,
                n_ff_expert: 256,
                n_expert_shared: 1,
                n_dense_lead: 1,
                tied: false,
                ..SynthSpec::preset("tiny")?
            },
            _ => return None,
        })
    }

    /// The preset names.
    pub const PRESETS: [&'static str; 7] = [
        "tiny",
        "tiny-glm4moe",
        "llama-1b",
        "llama-8b",
        "qwen3-8b",
        "qwen3-30b-a3b",
        "glm4.5-air",
    ];

    /// The tensors of the file, in order.
    pub fn tensors(&self) -> Vec<TensorSpec> {
        let (d, v) = (self.n_embd as u64, self.n_vocab as u64);
        let (dq, dkv) = (
            (self.n_head * self.head_dim) as u64,
            (self.n_head_kv * self.head_dim) as u64,
        );
        let mut out = Vec::new();
        let mut add = |name: String, ne: Vec<u64>, dtype: DType| {
            let dtype = row_fallback(dtype, ne[0]);
            out.push(TensorSpec { name, ne, dtype })
        };
        add(t::TOKEN_EMBD.into(), vec![d, v], self.main_type);
        let glm = self.arch == "glm4moe";
        for il in 0..self.n_layer {
            let b = |n: &str| t::blk(il, n);
            add(b(t::ATTN_NORM), vec![d], DType::F32);
            add(b(t::ATTN_Q), vec![d, dq], self.main_type);
            add(b(t::ATTN_K), vec![d, dkv], self.main_type);
            add(b(t::ATTN_V), vec![d, dkv], self.more_bits_type);
            if glm {
                add(b(t::ATTN_Q_BIAS), vec![dq], DType::F32);
                add(b(t::ATTN_K_BIAS), vec![dkv], DType::F32);
                add(b(t::ATTN_V_BIAS), vec![dkv], DType::F32);
            } else if self.arch != "llama" {
                add(b(t::ATTN_Q_NORM), vec![self.head_dim as u64], DType::F32);
                add(b(t::ATTN_K_NORM), vec![self.head_dim as u64], DType::F32);
            }
            add(b(t::ATTN_OUT), vec![dq, d], self.main_type);
            // GLM-4.5 names its FFN input norm the post-attention norm
            let ffn_norm = if glm { t::ATTN_POST_NORM } else { t::FFN_NORM };
            add(b(ffn_norm), vec![d], DType::F32);
            if self.n_expert > 0 && il >= self.n_dense_lead {
                let (e, f) = (self.n_expert as u64, self.n_ff_expert as u64);
                add(b(t::FFN_GATE_INP), vec![d, e], DType::F32);
                if glm {
                    add(b(t::FFN_EXP_PROBS_B), vec![e], DType::F32);
                }
                add(b(t::FFN_GATE_EXPS), vec![d, f, e], self.main_type);
                add(b(t::FFN_UP_EXPS), vec![d, f, e], self.main_type);
                add(b(t::FFN_DOWN_EXPS), vec![f, d, e], self.more_bits_type);
                if self.n_expert_shared > 0 {
                    let fs = f * self.n_expert_shared as u64;
                    add(b(t::FFN_GATE_SHEXP), vec![d, fs], self.main_type);
                    add(b(t::FFN_UP_SHEXP), vec![d, fs], self.main_type);
                    add(b(t::FFN_DOWN_SHEXP), vec![fs, d], self.more_bits_type);
                }
            } else {
                let f = self.n_ff as u64;
                add(b(t::FFN_GATE), vec![d, f], self.main_type);
                add(b(t::FFN_UP), vec![d, f], self.main_type);
                add(b(t::FFN_DOWN), vec![f, d], self.more_bits_type);
            }
        }
        add(t::OUTPUT_NORM.into(), vec![d], DType::F32);
        if !self.tied {
            add(t::OUTPUT.into(), vec![d, v], self.more_bits_type);
        }
        out
    }

    /// Total bytes of weights (an error names a tensor whose shape is not
    /// whole blocks of its type).
    pub fn weight_bytes(&self) -> io::Result<u64> {
        self.tensors().iter().map(|t| t.bytes()).sum()
    }

    /// Parameters.
    pub fn n_params(&self) -> u64 {
        self.tensors()
            .iter()
            .map(|t| t.ne.iter().product::<u64>())
            .sum()
    }

    /// The GGUF writer with metadata and tensor headers.
    pub fn writer(&self) -> io::Result<GgufWriter> {
        self.writer_with(None)
    }

    /// This shape with `vocab`'s vocabulary size.
    pub fn with_vocab(&self, vocab: &DonorVocab) -> SynthSpec {
        SynthSpec {
            n_vocab: vocab.n_vocab(),
            ..self.clone()
        }
    }

    /// [`SynthSpec::writer`], with the tokenizer metadata of `vocab` (whose
    /// size must be this shape's: see [`SynthSpec::with_vocab`]).
    pub fn writer_with(&self, vocab: Option<&DonorVocab>) -> io::Result<GgufWriter> {
        if let Some(v) = vocab
            && v.n_vocab() != self.n_vocab
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a vocabulary of {} tokens for a model shaped for {}",
                    v.n_vocab(),
                    self.n_vocab
                ),
            ));
        }
        let mut w = GgufWriter::new();
        let a = self.arch.as_str();
        let k = |s: &str| format!("{a}.{s}");
        w.kv(names::ARCH, Value::str(a));
        w.kv(
            names::NAME,
            Value::str(format!("synthetic {a} (random weights)")),
        );
        w.kv(k(hp::CONTEXT_LENGTH), Value::U32(32768));
        w.kv(k(hp::EMBEDDING_LENGTH), Value::U32(self.n_embd as u32));
        w.kv(k(hp::BLOCK_COUNT), Value::U32(self.n_layer as u32));
        w.kv(k(hp::FEED_FORWARD_LENGTH), Value::U32(self.n_ff as u32));
        w.kv(k(hp::HEAD_COUNT), Value::U32(self.n_head as u32));
        w.kv(k(hp::HEAD_COUNT_KV), Value::U32(self.n_head_kv as u32));
        w.kv(k(hp::KEY_LENGTH), Value::U32(self.head_dim as u32));
        w.kv(k(hp::VALUE_LENGTH), Value::U32(self.head_dim as u32));
        w.kv(k(hp::RMS_EPS), Value::F32(1e-5));
        w.kv(k(hp::ROPE_FREQ_BASE), Value::F32(500000.0));
        if self.n_expert > 0 {
            w.kv(k(hp::EXPERT_COUNT), Value::U32(self.n_expert as u32));
            w.kv(
                k(hp::EXPERT_USED_COUNT),
                Value::U32(self.n_expert_used as u32),
            );
            w.kv(k(hp::EXPERT_FF_LENGTH), Value::U32(self.n_ff_expert as u32));
        }
        if self.arch == "glm4moe" {
            // GLM-4.5's routing and layout keys, as llama.cpp's converter writes them
            let u = |n: usize| Value::U32(n as u32);
            w.kv(k(hp::EXPERT_SHARED_COUNT), u(self.n_expert_shared));
            w.kv(k(hp::LEADING_DENSE_BLOCK_COUNT), u(self.n_dense_lead));
            w.kv(k(hp::EXPERT_GATING_FUNC), u(2));
            w.kv(k(hp::EXPERT_WEIGHTS_NORM), Value::Bool(true));
            w.kv(k(hp::EXPERT_WEIGHTS_SCALE), Value::F32(1.0));
            w.kv(k(hp::ROPE_DIM), u(self.head_dim / 2));
        }
        for (k, v) in vocab.map_or(&[][..], DonorVocab::entries) {
            w.kv(k.clone(), v.clone());
        }
        for ts in self.tensors() {
            w.tensor(ts.name, ts.ne, ts.dtype)?;
        }
        Ok(w)
    }

    /// Writes the model to `path`.
    pub fn write(&self, path: &Path, seed: u64) -> io::Result<()> {
        self.write_with(path, seed, None)
    }

    /// Writes the model to `path`, with `vocab`'s tokenizer if given.
    pub fn write_with(&self, path: &Path, seed: u64, vocab: Option<&DonorVocab>) -> io::Result<()> {
        write_random(self.writer_with(vocab)?, path, seed, |ts, rng, w| {
            if ts.ne.len() == 1 {
                // norm weights near one
                return w.write_all(&random_f32(ts.ne[0], 1.0, 0.05, rng));
            }
            // weights ~ uniform(-a, a) with variance 1/fan_in
            let fan_in = ts.ne[0] as f32;
            let n_blocks = ts.bytes()? / ts.dtype.type_size() as u64;
            write_blocks(w, ts.dtype, n_blocks, (3.0 / fan_in).sqrt(), rng)
        })
    }
}

impl SynthSpec {
    /// Writes a file of this model's shape whose weights are all zero,
    /// stored sparsely (the data takes no disk and no time to write): for
    /// machine models that only time the work (`compute=off`), where a
    /// model of billions of parameters is planned and run without reading
    /// a weight. With `vocab`, the donor's tokenizer goes in as
    /// [`SynthSpec::write_with`] puts it.
    pub fn write_zeros(&self, path: &Path, vocab: Option<&DonorVocab>) -> io::Result<()> {
        let f = std::fs::File::create(path)?;
        let mut out = SparseZeros { f, len: 0 };
        let zeros = vec![0u8; 1 << 20];
        self.writer_with(vocab)?.write(&mut out, |_, ts, w| {
            let mut left = ts.bytes()?;
            while left > 0 {
                let n = left.min(zeros.len() as u64) as usize;
                w.write_all(&zeros[..n])?;
                left -= n as u64;
            }
            Ok(())
        })?;
        out.f.set_len(out.len)
    }
}

/// The type a quantiser stores rows of `cols` values in when they are not
/// whole blocks of `dtype` (GLM-4.5-Air's FFNs of 10944 and 1408): a
/// 32-value type of about the same bits, as llama.cpp's quantiser falls back.
fn row_fallback(dtype: DType, cols: u64) -> DType {
    if cols.is_multiple_of(dtype.block_size() as u64) {
        return dtype;
    }
    match dtype {
        DType::Q4K => DType::Q5_0,
        DType::Q5K => DType::Q5_1,
        DType::Q6K => DType::Q8_0,
        DType::Q2K | DType::Q3K | DType::IQ4XS => DType::Q4_0,
        other => other,
    }
}

/// A file writer that skips runs of zeros with a seek (a sparse file).
struct SparseZeros {
    f: std::fs::File,
    len: u64,
}

impl Write for SparseZeros {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        use std::io::{Seek, SeekFrom};
        if buf.iter().all(|&b| b == 0) {
            self.f.seek(SeekFrom::Current(buf.len() as i64))?;
        } else {
            self.f.write_all(buf)?;
        }
        self.len += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.f.flush()
    }
}

/// Writes `writer`'s file to `path`, each tensor's data from `data` with a
/// generator seeded by `seed`.
fn write_random(
    writer: GgufWriter,
    path: &Path,
    seed: u64,
    mut data: impl FnMut(&TensorSpec, &mut Rng, &mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let f = std::fs::File::create(path)?;
    let mut out = io::BufWriter::with_capacity(8 << 20, f);
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    writer.write(&mut out, |_, ts, w| data(ts, &mut rng, w))?;
    out.flush()
}

/// `n` f32 values `center + spread * u`, `u` uniform in [-1, 1), as bytes.
fn random_f32(n: u64, center: f32, spread: f32, rng: &mut Rng) -> Vec<u8> {
    (0..n)
        .flat_map(|_| (center + spread * rng.sym()).to_le_bytes())
        .collect()
}

/// xorshift64*: fast, seeded, good enough for weights.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [-1, 1).
    fn sym(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let r = self.next().to_le_bytes();
            c.copy_from_slice(&r[..c.len()]);
        }
    }
}

/// Random bytes of `n_elements` values of `dtype` (a whole number of blocks),
/// spread over about `[-a, a]`: weights for micro-benchmarks and tests.
pub fn random_tensor(dtype: DType, n_elements: usize, a: f32, seed: u64) -> Vec<u8> {
    let n_blocks = n_elements / dtype.block_size();
    let mut out = Vec::with_capacity(n_blocks * dtype.type_size());
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    write_blocks(&mut out, dtype, n_blocks as u64, a, &mut rng)
        .expect("writing to a Vec cannot fail");
    out
}

/// Writes `n` random blocks of `dtype` whose values spread over about [-a, a].
fn write_blocks(w: &mut dyn Write, dtype: DType, n: u64, a: f32, rng: &mut Rng) -> io::Result<()> {
    let ts = dtype.type_size();
    let per_chunk = (1 << 20) / ts.max(1);
    let mut buf = vec![0u8; per_chunk * ts];
    let mut left = n as usize;
    while left > 0 {
        let k = left.min(per_chunk);
        let chunk = &mut buf[..k * ts];
        rng.fill(chunk);
        for b in chunk.chunks_exact_mut(ts) {
            // 10% jitter of the block scale keeps blocks distinct
            let jitter = 1.0 + 0.1 * rng.sym();
            fix_block(dtype, b, a * jitter);
        }
        w.write_all(chunk)?;
        left -= k;
    }
    Ok(())
}

/// Overwrites the scale fields of a block of random bytes so its values lie in about [-a, a].
fn fix_block(dtype: DType, b: &mut [u8], a: f32) {
    let h = |x: f32| f16::from_f32(x).to_le_bytes();
    match dtype {
        DType::F32 => {
            for c in b.chunks_exact_mut(4) {
                let v = (u32::from_le_bytes([c[0], c[1], c[2], c[3]]) >> 8) as f32
                    / (1 << 23) as f32
                    * 2.0
                    - 1.0;
                c.copy_from_slice(&(v * a).to_le_bytes());
            }
        }
        DType::F16 | DType::BF16 => {
            for c in b.chunks_exact_mut(2) {
                let v = (u16::from_le_bytes([c[0], c[1]]) as f32 / 65535.0 * 2.0 - 1.0) * a;
                let bytes = if dtype == DType::F16 {
                    h(v)
                } else {
                    half::bf16::from_f32(v).to_le_bytes()
                };
                c.copy_from_slice(&bytes);
            }
        }
        // q in [-127, 127] (random bytes; -128 clamped)
        DType::Q8_0 => {
            b[..2].copy_from_slice(&h(a / 127.0));
            for q in &mut b[2..] {
                if *q == 0x80 {
                    *q = 0x81;
                }
            }
        }
        // w = d (q - 8)
        DType::Q4_0 => b[..2].copy_from_slice(&h(a / 8.0)),
        // w = d q + m
        DType::Q4_1 => {
            b[..2].copy_from_slice(&h(a / 7.5));
            b[2..4].copy_from_slice(&h(-a));
        }
        DType::Q5_0 => b[..2].copy_from_slice(&h(a / 16.0)),
        DType::Q5_1 => {
            b[..2].copy_from_slice(&h(a / 15.5));
            b[2..4].copy_from_slice(&h(-a));
        }
        // w = d sc q - dmin m, sc = m = 32 everywhere (the packed 6-bit layout)
        DType::Q4K | DType::Q5K => {
            let qmax = if dtype == DType::Q4K { 15.0 } else { 31.0 };
            let d = a / (32.0 * qmax / 2.0);
            b[..2].copy_from_slice(&h(d));
            b[2..4].copy_from_slice(&h(d * qmax / 2.0));
            b[4..8].fill(0xA0);
            b[8..12].fill(0xA0);
            b[12..16].fill(0x00);
        }
        // w = d sc (q - 32), sc = 16
        DType::Q6K => {
            b[192..208].fill(16);
            b[208..210].copy_from_slice(&h(a / 512.0));
        }
        // w = d sc (q - 4) with sc the low nibble of 16 sub-block bytes
        DType::Q3K => {
            b[96..108].fill(0x88);
            b[108..110].copy_from_slice(&h(a / 16.0));
        }
        // w = d sc q - dmin m with 4-bit sc/m
        DType::Q2K => {
            b[..16].fill(0x88);
            b[80..82].copy_from_slice(&h(a / 12.0));
            b[82..84].copy_from_slice(&h(a / 8.0));
        }
        // w = d * level, levels in [-127, 113]
        DType::IQ4NL => b[..2].copy_from_slice(&h(a / 127.0)),
        // w = d (ls - 32) level with every ls = 33 (low nibbles 1, high bits 2)
        DType::IQ4XS => {
            b[..2].copy_from_slice(&h(a / 127.0));
            b[2..4].copy_from_slice(&0xaaaau16.to_le_bytes());
            b[4..8].fill(0x11);
        }
        // w = 2^(e - 128) * level, levels in [-12, 12]
        DType::MXFP4 => b[0] = (128.0 + (a / 12.0).log2().round()).clamp(0.0, 255.0) as u8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::ModelSpec;

    #[test]
    fn tiny_synthetic_model_loads_and_has_sane_weights() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.gguf");
        let spec = SynthSpec::preset("tiny").unwrap();
        spec.write(&path, 7).unwrap();
        let m = ModelSpec::open(&path).unwrap();
        assert_eq!(m.hp.n_layer, 4);
        assert_eq!(m.gguf.tensors().len(), spec.tensors().len());
        let g = m.graph();
        assert_eq!(g.weight_bytes(), spec.weight_bytes().unwrap());
        for name in [
            "blk.0.attn_q.weight",
            "blk.3.ffn_down.weight",
            "token_embd.weight",
        ] {
            let t = m.gguf.tensor(name).unwrap();
            let vals = crate::quant::dequantize(
                t.dtype().unwrap(),
                m.gguf.tensor_data(t),
                t.n_elements() as usize,
            )
            .unwrap();
            let var = vals.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / vals.len() as f64;
            let want = 1.0 / t.ne[0] as f64;
            assert!(vals.iter().all(|v| v.is_finite()));
            assert!(
                var > want * 0.3 && var < want * 3.0,
                "{name}: variance {var}, want about {want}"
            );
        }
    }

    #[test]
    fn presets_have_the_advertised_sizes() {
        let p = SynthSpec::preset("llama-8b").unwrap();
        let n = p.n_params() as f64 / 1e9;
        assert!((7.9..8.2).contains(&n), "{n}");
        let moe = SynthSpec::preset("qwen3-30b-a3b").unwrap();
        let n = moe.n_params() as f64 / 1e9;
        assert!((30.0..31.0).contains(&n), "{n}");
        let one = SynthSpec::preset("llama-1b").unwrap();
        let dir = std::env::temp_dir().join(format!("ats-zeros-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("zeros.gguf");
        p.write_zeros(&path, None).unwrap();
        let spec = crate::spec::ModelSpec::open(&path).unwrap();
        assert_eq!(spec.hp.n_layer, p.n_layer);
        assert_eq!(
            spec.gguf.file_len(),
            std::fs::metadata(&path).unwrap().len()
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert!((1.2..1.3).contains(&(one.n_params() as f64 / 1e9)));
    }

    #[test]
    fn glm4moe_presets_read_as_glm_4_5() {
        // GLM-4.5-Air: 106B parameters, 12B of them active per token
        let air = SynthSpec::preset("glm4.5-air").unwrap();
        let n = air.n_params() as f64 / 1e9;
        assert!((106.0..111.0).contains(&n), "{n}");
        // its first three blocks (the dense one and two MoE ones) read back
        // as GLM-4.5; all 46 would write 77 GB of zeros for nothing more
        let short = SynthSpec { n_layer: 3, ..air };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("air.gguf");
        short.write_zeros(&path, None).unwrap();
        let m = ModelSpec::open(&path).unwrap();
        assert_eq!(
            (m.hp.n_layer, m.hp.n_dense_lead, m.hp.n_expert_shared),
            (3, 1, 1)
        );
        assert_eq!(m.graph().weight_bytes(), short.weight_bytes().unwrap());
        // the tiny one runs: every tensor consumed, the routing GLM's
        let tiny = SynthSpec::preset("tiny-glm4moe").unwrap();
        let path = dir.path().join("tiny.gguf");
        tiny.write(&path, 5).unwrap();
        let m = ModelSpec::open(&path).unwrap();
        assert_eq!(m.graph().weights.len(), m.gguf.tensors().len());
        assert_eq!(m.hp.routing.gating, crate::graph::Gating::Sigmoid);
        assert!(m.hp.routing.norm_topk);
    }
}
