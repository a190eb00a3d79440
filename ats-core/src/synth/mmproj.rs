//! Synthetic vision projectors (mmproj files) with the shapes of real
//! Qwen2-VL / Qwen2.5-VL vision towers and random, numerically sane weights,
//! for high-resolution memory tests and benchmarks.

use std::io;
use std::path::Path;

use super::write_blocks;
use crate::dtype::DType;
use crate::gguf::{GgufWriter, TensorSpec, Value};
use crate::names::{self, clip, clip::tensor as t};

/// The shape of a synthetic mmproj.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthMmproj {
    /// Projector type ([`clip::PROJ_QWEN2VL`] or [`clip::PROJ_QWEN25VL`]).
    pub projector: String,
    /// Vision hidden size.
    pub n_embd: usize,
    /// Vision heads.
    pub n_head: usize,
    /// MLP size.
    pub n_ff: usize,
    /// Vision blocks.
    pub n_layer: usize,
    /// Output size (the language model's hidden size).
    pub projection_dim: usize,
    /// Patch side in pixels.
    pub patch_size: usize,
    /// Every n-th block uses full attention, the rest windows (0: all full).
    pub n_wa_pattern: usize,
    /// Type of the matrices (those whose rows do not hold whole blocks stay F16).
    pub main_type: DType,
}

impl SynthMmproj {
    /// Named presets with the vision widths of released models:
    /// `qwen2.5-vl-3b`, `qwen2.5-vl-7b`, `qwen2-vl-2b`, and `tiny` (tests).
    pub fn preset(name: &str) -> Option<SynthMmproj> {
        let q25 = SynthMmproj {
            projector: clip::PROJ_QWEN25VL.into(),
            n_embd: 1280,
            n_head: 16,
            n_ff: 3420,
            n_layer: 32,
            projection_dim: 2048,
            patch_size: 14,
            n_wa_pattern: 8,
            main_type: DType::F16,
        };
        Some(match name {
            "qwen2.5-vl-3b" => q25,
            "qwen2.5-vl-7b" => SynthMmproj {
                projection_dim: 3584,
                ..q25
            },
            "qwen2-vl-2b" => SynthMmproj {
                projector: clip::PROJ_QWEN2VL.into(),
                n_ff: 5120,
                projection_dim: 1536,
                n_wa_pattern: 0,
                ..q25
            },
            "tiny" => SynthMmproj {
                n_embd: 64,
                n_head: 4,
                n_ff: 128,
                n_layer: 2,
                projection_dim: 96,
                n_wa_pattern: 2,
                ..q25
            },
            _ => return None,
        })
    }

    /// The preset names.
    pub const PRESETS: [&'static str; 4] =
        ["tiny", "qwen2.5-vl-3b", "qwen2.5-vl-7b", "qwen2-vl-2b"];

    fn is_qwen25(&self) -> bool {
        self.projector == clip::PROJ_QWEN25VL
    }

    /// The type of a matrix with `cols` elements per row.
    fn matrix_type(&self, cols: u64) -> DType {
        if cols.is_multiple_of(self.main_type.block_size() as u64) {
            self.main_type
        } else {
            DType::F16
        }
    }

    /// The tensors of the file, in order.
    pub fn tensors(&self) -> Vec<TensorSpec> {
        let (d, f, p) = (self.n_embd as u64, self.n_ff as u64, self.patch_size as u64);
        let (m, o) = (4 * d, self.projection_dim as u64);
        let q25 = self.is_qwen25();
        let mut out = Vec::new();
        let mut add =
            |name: String, ne: Vec<u64>, dtype: DType| out.push(TensorSpec { name, ne, dtype });
        add(t::PATCH_EMBD.into(), vec![p, p, 3, d], DType::F16);
        add(t::PATCH_EMBD_1.into(), vec![p, p, 3, d], DType::F16);
        for il in 0..self.n_layer {
            let b = |n: &str| t::blk(il, n);
            add(b(t::LN1), vec![d], DType::F32);
            if !q25 {
                add(b(t::LN1_BIAS), vec![d], DType::F32);
            }
            for (w, bias) in [
                (t::ATTN_Q, t::ATTN_Q_BIAS),
                (t::ATTN_K, t::ATTN_K_BIAS),
                (t::ATTN_V, t::ATTN_V_BIAS),
                (t::ATTN_OUT, t::ATTN_OUT_BIAS),
            ] {
                add(b(w), vec![d, d], self.matrix_type(d));
                add(b(bias), vec![d], DType::F32);
            }
            add(b(t::LN2), vec![d], DType::F32);
            if !q25 {
                add(b(t::LN2_BIAS), vec![d], DType::F32);
            }
            if q25 {
                add(b(t::FFN_GATE), vec![d, f], self.matrix_type(d));
                add(b(t::FFN_GATE_BIAS), vec![f], DType::F32);
            }
            add(b(t::FFN_UP), vec![d, f], self.matrix_type(d));
            add(b(t::FFN_UP_BIAS), vec![f], DType::F32);
            add(b(t::FFN_DOWN), vec![f, d], self.matrix_type(f));
            add(b(t::FFN_DOWN_BIAS), vec![d], DType::F32);
        }
        add(t::POST_LN.into(), vec![d], DType::F32);
        if !q25 {
            add(t::POST_LN_BIAS.into(), vec![d], DType::F32);
        }
        add(t::MM_0.into(), vec![m, m], self.matrix_type(m));
        add(t::MM_0_BIAS.into(), vec![m], DType::F32);
        add(t::MM_2.into(), vec![m, o], self.matrix_type(m));
        add(t::MM_2_BIAS.into(), vec![o], DType::F32);
        out
    }

    /// Total bytes of weights (an error names a tensor whose shape is not
    /// whole blocks of its type).
    pub fn weight_bytes(&self) -> io::Result<u64> {
        self.tensors().iter().map(|t| t.bytes()).sum()
    }

    /// The GGUF writer with metadata and tensor headers.
    pub fn writer(&self) -> io::Result<GgufWriter> {
        let mut w = GgufWriter::new();
        let u = |v: usize| Value::U32(v as u32);
        w.kv(names::ARCH, Value::str(clip::ARCH_CLIP));
        w.kv(
            names::NAME,
            Value::str(format!("synthetic {} (random weights)", self.projector)),
        );
        w.kv(clip::PROJECTOR_TYPE, Value::str(&self.projector));
        w.kv(clip::HAS_VISION, Value::Bool(true));
        w.kv(clip::PROJECTION_DIM, u(self.projection_dim));
        w.kv(clip::IMAGE_SIZE, u(560));
        w.kv(clip::PATCH_SIZE, u(self.patch_size));
        w.kv(clip::EMBEDDING_LENGTH, u(self.n_embd));
        w.kv(clip::FEED_FORWARD_LENGTH, u(self.n_ff));
        w.kv(clip::BLOCK_COUNT, u(self.n_layer));
        w.kv(clip::HEAD_COUNT, u(self.n_head));
        w.kv(clip::LAYER_NORM_EPS, Value::F32(1e-6));
        w.kv(
            clip::IMAGE_MEAN,
            Value::f32s([0.481_454_67, 0.457_827_5, 0.408_210_73]),
        );
        w.kv(
            clip::IMAGE_STD,
            Value::f32s([0.268_629_55, 0.261_302_6, 0.275_777_1]),
        );
        if self.is_qwen25() {
            w.kv(clip::USE_SILU, Value::Bool(true));
            w.kv(clip::N_WA_PATTERN, u(self.n_wa_pattern));
        }
        for ts in self.tensors() {
            w.tensor(ts.name, ts.ne, ts.dtype)?;
        }
        Ok(w)
    }

    /// Writes the file to `path`.
    pub fn write(&self, path: &Path, seed: u64) -> io::Result<()> {
        super::write_random(self.writer()?, path, seed, |ts, rng, w| {
            if ts.ne.len() == 1 {
                // norms near one, biases small
                let v = if ts.name.ends_with(".bias") {
                    super::random_f32(ts.ne[0], 0.0, 0.02, rng)
                } else {
                    super::random_f32(ts.ne[0], 1.0, 0.05, rng)
                };
                return w.write_all(&v);
            }
            // the Conv3d's fan-in spans both temporal halves
            let fan_in = if ts.ne.len() == 4 {
                2 * ts.ne[..3].iter().product::<u64>()
            } else {
                ts.ne[0]
            } as f32;
            let n_blocks = ts.bytes()? / ts.dtype.type_size() as u64;
            write_blocks(w, ts.dtype, n_blocks, (3.0 / fan_in).sqrt(), rng)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::GgufFile;

    #[test]
    fn presets_have_the_released_vision_sizes() {
        // Qwen2.5-VL-3B's vision tower and merger: about 670M parameters
        let p = SynthMmproj::preset("qwen2.5-vl-3b").unwrap();
        let params: u64 = p
            .tensors()
            .iter()
            .map(|t| t.ne.iter().product::<u64>())
            .sum();
        assert!((660e6..680e6).contains(&(params as f64)), "{params}");
        // F16 matrices take 2 bytes per element, the F32 vectors 4
        let f32_elems: u64 = p
            .tensors()
            .iter()
            .filter(|t| t.dtype == DType::F32)
            .map(|t| t.ne.iter().product::<u64>())
            .sum();
        assert_eq!(p.weight_bytes().unwrap(), 2 * params + 2 * f32_elems);
        for name in SynthMmproj::PRESETS {
            assert!(SynthMmproj::preset(name).is_some(), "{name}");
        }
    }

    #[test]
    fn tiny_preset_writes_a_readable_file_with_sane_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mmproj.gguf");
        let p = SynthMmproj::preset("tiny").unwrap();
        p.write(&path, 3).unwrap();
        let f = GgufFile::open(&path).unwrap();
        assert_eq!(
            f.metadata.get_str(clip::PROJECTOR_TYPE),
            Some(clip::PROJ_QWEN25VL)
        );
        assert_eq!(f.tensors().len(), p.tensors().len());
        let w = f.tensor(&t::blk(1, t::FFN_DOWN)).unwrap();
        let vals = crate::quant::dequantize(
            w.dtype().unwrap(),
            f.tensor_data(w),
            w.n_elements() as usize,
        )
        .unwrap();
        let var = vals.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / vals.len() as f64;
        let want = 1.0 / p.n_ff as f64;
        assert!(
            var > want * 0.3 && var < want * 3.0,
            "variance {var}, want {want}"
        );
        let b = f.tensor(&t::blk(0, t::ATTN_Q_BIAS)).unwrap();
        let bias: &[u8] = f.tensor_data(b);
        assert!(
            bias.chunks_exact(4)
                .all(|c| f32::from_le_bytes(c.try_into().unwrap()).abs() <= 0.02)
        );
    }
}
