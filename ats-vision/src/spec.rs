//! The vision projector of an mmproj file: projector type, hyperparameters
//! from `clip.*` metadata, the checked tensor table, and the check that it
//! belongs to a language model.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ats_core::gguf::GgufFile;
use ats_core::graph::{GeluKind, SubLayer, WeightInfo};
use ats_core::names::{self, clip};
use ats_core::spec::ModelSpec;
use ats_core::tokenizer::Tokenizer;

use crate::VisionError;
use crate::graph::VisionGraph;
use crate::preprocess::PreprocessConfig;

/// A supported projector (`clip.projector_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Projector {
    /// Qwen2-VL: LayerNorm, QuickGELU MLP, full attention everywhere.
    Qwen2Vl,
    /// Qwen2.5-VL: RMSNorm, SwiGLU MLP, window attention except every n-th block.
    Qwen25Vl,
}

impl Projector {
    /// The projector named in the file.
    pub fn from_name(name: &str) -> Option<Projector> {
        match name {
            clip::PROJ_QWEN2VL => Some(Projector::Qwen2Vl),
            clip::PROJ_QWEN25VL => Some(Projector::Qwen25Vl),
            _ => None,
        }
    }

    /// The name in mmproj files.
    pub fn name(self) -> &'static str {
        match self {
            Projector::Qwen2Vl => clip::PROJ_QWEN2VL,
            Projector::Qwen25Vl => clip::PROJ_QWEN25VL,
        }
    }

    /// The model family, for people.
    pub fn family(self) -> &'static str {
        match self {
            Projector::Qwen2Vl => "Qwen2-VL",
            Projector::Qwen25Vl => "Qwen2.5-VL",
        }
    }

    /// The family a model's `general.name` says it is, when it says: the
    /// text models of Qwen2-VL and Qwen2.5-VL share an architecture
    /// (`qwen2vl`) and shapes, and only their names tell them apart.
    pub fn named_in(name: &str) -> Option<Projector> {
        let n: String = name
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect::<String>()
            .to_ascii_lowercase();
        if n.contains("qwen25vl") {
            Some(Projector::Qwen25Vl)
        } else if n.contains("qwen2vl") {
            Some(Projector::Qwen2Vl)
        } else {
            None
        }
    }
}

/// The norm of the vision blocks and the merger.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum VisionNorm {
    /// LayerNorm with weight and bias (Qwen2-VL).
    Layer,
    /// RMSNorm with weight (Qwen2.5-VL).
    Rms,
}

/// The MLP of a vision block.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub enum VisionMlp {
    /// `fc2(act(fc1 x))` (Qwen2-VL: QuickGELU).
    Plain(GeluKind),
    /// `down(silu(gate x) * up x)` (Qwen2.5-VL).
    SwiGlu,
}

/// Hyperparameters of a vision tower and its merger.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct VisionHParams {
    /// Hidden size.
    pub n_embd: usize,
    /// Attention heads.
    pub n_head: usize,
    /// Columns per head.
    pub head_dim: usize,
    /// MLP size.
    pub n_ff: usize,
    /// Blocks.
    pub n_layer: usize,
    /// Patch side in pixels.
    pub patch_size: usize,
    /// Patches merged per side by the merger.
    pub merge_size: usize,
    /// Frames per temporal patch (the Conv3d's depth).
    pub temporal_patch: usize,
    /// Output size (the language model's hidden size).
    pub projection_dim: usize,
    /// Norm epsilon.
    pub eps: f32,
    /// Norm kind.
    pub norm: VisionNorm,
    /// MLP kind.
    pub mlp: VisionMlp,
    /// Every n-th block (1-based) uses full attention, the others windows; 0: no windows.
    pub n_wa_pattern: usize,
    /// Window side in pixels.
    pub window_size: usize,
    /// 2D RoPE frequency base.
    pub rope_theta: f32,
    /// Pixel mean per channel.
    pub image_mean: [f32; 3],
    /// Pixel standard deviation per channel.
    pub image_std: [f32; 3],
    /// The file's recommended smallest image area, if it states one.
    pub min_pixels: Option<u64>,
    /// The file's recommended largest image area, if it states one.
    pub max_pixels: Option<u64>,
}

impl VisionHParams {
    /// Whether block `il` attends over the whole image (else within windows).
    pub fn full_attention(&self, il: usize) -> bool {
        self.n_wa_pattern == 0 || (il + 1).is_multiple_of(self.n_wa_pattern)
    }

    /// Whether any block uses window attention.
    pub fn uses_windows(&self) -> bool {
        (0..self.n_layer).any(|il| !self.full_attention(il))
    }

    /// Window side in merge groups (the merged grid).
    pub fn window_groups(&self) -> usize {
        self.window_size / (self.patch_size * self.merge_size)
    }

    /// Values per pixel row: 3 channels x frames x patch x patch.
    pub fn row_len(&self) -> usize {
        3 * self.temporal_patch * self.patch_size * self.patch_size
    }
}

/// The token ids a VLM prompt needs from the language model's vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageTokenIds {
    /// `<|vision_start|>`.
    pub vision_start: u32,
    /// `<|vision_end|>`.
    pub vision_end: u32,
    /// `<|image_pad|>`.
    pub image_pad: u32,
}

/// A loaded, checked vision projector.
#[derive(Clone, Debug)]
pub struct VisionSpec {
    /// Projector type.
    pub projector: Projector,
    /// Hyperparameters.
    pub hp: VisionHParams,
    /// The mapped mmproj file the weights are read from.
    pub gguf: Arc<GgufFile>,
}

struct Keys<'a> {
    f: &'a GgufFile,
}

impl Keys<'_> {
    fn file(&self) -> PathBuf {
        self.f.path().to_path_buf()
    }

    fn bad(&self, key: &str, problem: String) -> VisionError {
        VisionError::BadKey {
            file: self.file(),
            key: key.into(),
            problem,
        }
    }

    fn opt_usize(&self, key: &str) -> Result<Option<usize>, VisionError> {
        match self.f.metadata.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|x| usize::try_from(x).ok())
                .map(Some)
                .ok_or_else(|| {
                    self.bad(key, format!("expected a non-negative integer, found {v}"))
                }),
        }
    }

    fn positive(&self, key: &str) -> Result<usize, VisionError> {
        match self.opt_usize(key)? {
            None => Err(VisionError::MissingKey {
                file: self.file(),
                key: key.into(),
            }),
            Some(0) => Err(self.bad(key, "must be positive".into())),
            // sizes beyond this are not images a vision tower was trained on;
            // refusing them keeps every product below in range
            Some(v) if v > 1 << 20 => Err(self.bad(key, format!("{v} is implausibly large"))),
            Some(v) => Ok(v),
        }
    }

    fn bool(&self, key: &str) -> Result<bool, VisionError> {
        match self.f.metadata.get(key) {
            None => Ok(false),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| self.bad(key, format!("expected a bool, found {v}"))),
        }
    }

    fn triple(&self, key: &str, default: [f32; 3]) -> Result<[f32; 3], VisionError> {
        let Some(arr) = self.f.metadata.get_array(key) else {
            return Ok(default);
        };
        let vals: Option<Vec<f32>> = arr.iter().map(|v| v.as_f64().map(|x| x as f32)).collect();
        match vals.as_deref() {
            Some([a, b, c]) if [a, b, c].iter().all(|x| x.is_finite()) => Ok([*a, *b, *c]),
            _ => Err(self.bad(key, "expected 3 finite numbers".into())),
        }
    }
}

impl VisionSpec {
    /// Opens and checks an mmproj file.
    pub fn open(path: impl AsRef<Path>) -> Result<VisionSpec, VisionError> {
        Self::from_gguf(Arc::new(GgufFile::open(path)?))
    }

    /// Reads the projector type and hyperparameters, then builds the graph
    /// of a small image to check every tensor's presence, type and shape.
    pub fn from_gguf(gguf: Arc<GgufFile>) -> Result<VisionSpec, VisionError> {
        let k = Keys { f: &gguf };
        let arch = gguf.metadata.get_str(names::ARCH).unwrap_or("");
        let has_vision = gguf.metadata.get_bool(clip::HAS_VISION).unwrap_or(false);
        if arch != clip::ARCH_CLIP || !has_vision {
            return Err(VisionError::NotMmproj {
                file: k.file(),
                found: if arch.is_empty() {
                    "(none)".into()
                } else {
                    arch.into()
                },
            });
        }
        let proj_name = gguf
            .metadata
            .get_str(clip::VISION_PROJECTOR_TYPE)
            .or_else(|| gguf.metadata.get_str(clip::PROJECTOR_TYPE))
            .ok_or_else(|| VisionError::MissingKey {
                file: k.file(),
                key: clip::PROJECTOR_TYPE.into(),
            })?;
        let projector =
            Projector::from_name(proj_name).ok_or_else(|| VisionError::UnsupportedProjector {
                file: k.file(),
                found: proj_name.into(),
            })?;
        let hp = Self::hparams(&k, projector)?;
        let spec = VisionSpec {
            projector,
            hp,
            gguf: gguf.clone(),
        };
        // the smallest image: one merge group per window side
        let side = spec.hp.merge_size * spec.hp.window_groups().max(1);
        spec.graph([1, side, side])?;
        Ok(spec)
    }

    fn hparams(k: &Keys<'_>, projector: Projector) -> Result<VisionHParams, VisionError> {
        let n_embd = k.positive(clip::EMBEDDING_LENGTH)?;
        let n_head = k.positive(clip::HEAD_COUNT)?;
        let head_dim = match k.opt_usize(clip::HEAD_DIM)? {
            Some(d) => d,
            None if n_embd.is_multiple_of(n_head) => n_embd / n_head,
            None => {
                return Err(k.bad(
                    clip::HEAD_COUNT,
                    format!("{n_head} heads do not divide the hidden size {n_embd}"),
                ));
            }
        };
        if head_dim * n_head != n_embd || !head_dim.is_multiple_of(4) {
            return Err(k.bad(
                clip::HEAD_COUNT,
                format!(
                    "{n_head} heads of {head_dim} must cover the hidden size {n_embd}, and 2D RoPE needs a head size divisible by 4"
                ),
            ));
        }
        let merge_size = k.opt_usize(clip::SPATIAL_MERGE_SIZE)?.unwrap_or(2);
        if merge_size != 2 {
            return Err(VisionError::Unsupported {
                file: k.file(),
                what: format!("spatial merge size {merge_size} (the Qwen-VL merger is 2x2)"),
            });
        }
        let eps = match k.f.metadata.get(clip::LAYER_NORM_EPS) {
            None => 1e-6,
            Some(v) => v
                .as_f64()
                .map(|x| x as f32)
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| {
                    k.bad(
                        clip::LAYER_NORM_EPS,
                        format!("expected a positive number, found {v}"),
                    )
                })?,
        };
        let (use_gelu, use_silu) = (k.bool(clip::USE_GELU)?, k.bool(clip::USE_SILU)?);
        if use_gelu && use_silu {
            return Err(k.bad(
                clip::USE_SILU,
                "both clip.use_gelu and clip.use_silu are set".into(),
            ));
        }
        // as llama.cpp reads the keys: SiLU, GELU, else QuickGELU (Qwen2-VL's `quick_gelu`)
        let (norm, mlp) = match projector {
            Projector::Qwen2Vl => {
                let act = if use_gelu {
                    GeluKind::Erf
                } else if use_silu {
                    return Err(VisionError::Unsupported {
                        file: k.file(),
                        what: "a SiLU MLP without a gate in a qwen2vl_merger projector".into(),
                    });
                } else {
                    GeluKind::Quick
                };
                (VisionNorm::Layer, VisionMlp::Plain(act))
            }
            Projector::Qwen25Vl => {
                if use_gelu {
                    return Err(VisionError::Unsupported {
                        file: k.file(),
                        what: "a gated GELU MLP in a qwen2.5vl_merger projector".into(),
                    });
                }
                (VisionNorm::Rms, VisionMlp::SwiGlu)
            }
        };
        let patch_size = k.positive(clip::PATCH_SIZE)?;
        let n_wa_pattern = match projector {
            Projector::Qwen2Vl => 0,
            Projector::Qwen25Vl => {
                k.opt_usize(clip::N_WA_PATTERN)?
                    .ok_or_else(|| VisionError::MissingKey {
                        file: k.file(),
                        key: clip::N_WA_PATTERN.into(),
                    })?
            }
        };
        // llama.cpp's default, and every released Qwen2.5-VL's window_size
        let window_size = k.opt_usize(clip::WINDOW_SIZE)?.unwrap_or(112);
        if n_wa_pattern > 0
            && (window_size == 0 || !window_size.is_multiple_of(patch_size * merge_size))
        {
            return Err(k.bad(
                clip::WINDOW_SIZE,
                format!(
                    "window size {window_size} is not a positive multiple of {}",
                    patch_size * merge_size
                ),
            ));
        }
        let projection_dim = k.positive(clip::PROJECTION_DIM)?;
        let pixels = |key| k.opt_usize(key).map(|v| v.map(|x| x as u64));
        let image_std = k.triple(clip::IMAGE_STD, PreprocessConfig::default().std)?;
        if let Some(c) = image_std.iter().position(|&v| v == 0.0) {
            return Err(k.bad(
                clip::IMAGE_STD,
                format!("channel {c} is 0, and pixels are divided by it"),
            ));
        }
        Ok(VisionHParams {
            n_embd,
            n_head,
            head_dim,
            n_ff: k.positive(clip::FEED_FORWARD_LENGTH)?,
            n_layer: k.positive(clip::BLOCK_COUNT)?,
            patch_size,
            merge_size,
            temporal_patch: 2,
            projection_dim,
            eps,
            norm,
            mlp,
            n_wa_pattern,
            window_size,
            rope_theta: 10000.0,
            image_mean: k.triple(clip::IMAGE_MEAN, PreprocessConfig::default().mean)?,
            image_std,
            min_pixels: pixels(clip::IMAGE_MIN_PIXELS)?,
            max_pixels: pixels(clip::IMAGE_MAX_PIXELS)?,
        })
    }

    /// The mmproj file's path.
    pub fn path(&self) -> &Path {
        self.gguf.path()
    }

    /// The graph and round inputs of one image of `grid` (t, h, w) patches.
    pub fn graph(&self, grid: [usize; 3]) -> Result<VisionGraph, VisionError> {
        crate::graph::build(self, grid)
    }

    /// A weight's info, checked against the expected GGML dimensions
    /// (innermost first). `view` replaces the dimensions the graph sees
    /// (the same bytes as another matrix shape: the Conv3d halves as `[3 p p, d]`).
    pub fn weight(
        &self,
        name: &str,
        ne: &[usize],
        view: Option<&[usize]>,
    ) -> Result<WeightInfo, VisionError> {
        let file = || self.path().to_path_buf();
        let tinfo = self
            .gguf
            .tensor(name)
            .ok_or_else(|| VisionError::MissingTensor {
                file: file(),
                name: name.into(),
            })?;
        let dtype = tinfo.dtype().map_err(|source| VisionError::TensorType {
            file: file(),
            name: name.into(),
            source,
        })?;
        let found: Vec<usize> = tinfo.ne.iter().map(|&d| d as usize).collect();
        if found != ne {
            return Err(VisionError::BadShape {
                file: file(),
                name: name.into(),
                expected: ne.to_vec(),
                found,
            });
        }
        if let Some(v) = view
            && v[0] % dtype.block_size() != 0
        {
            return Err(VisionError::Unsupported {
                file: file(),
                what: format!("tensor {name:?} of type {dtype:?} cannot be viewed as {v:?}"),
            });
        }
        Ok(WeightInfo {
            name: name.into(),
            dtype,
            ne: view.map_or(found, <[usize]>::to_vec),
            bytes: tinfo.bytes,
            file_offset: tinfo.file_offset,
            layer: None,
            sublayer: SubLayer::Vision,
        })
    }

    /// Whether the file holds a tensor.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.gguf.tensor(name).is_some()
    }

    /// The preprocessing this tower expects (its patch, merge, mean and std),
    /// with HF's default pixel bounds unless the file states its own.
    pub fn preprocess_config(&self) -> PreprocessConfig {
        let d = PreprocessConfig::default();
        PreprocessConfig {
            patch_size: self.hp.patch_size as u32,
            temporal_patch_size: self.hp.temporal_patch as u32,
            merge_size: self.hp.merge_size as u32,
            min_pixels: self.hp.min_pixels.unwrap_or(d.min_pixels),
            max_pixels: self.hp.max_pixels.unwrap_or(d.max_pixels),
            mean: self.hp.image_mean,
            std: self.hp.image_std,
        }
    }

    /// Checks that this projector feeds `lm`: the embedding size, M-RoPE,
    /// and the image tokens in its vocabulary. Returns those token ids.
    pub fn check_language_model(
        &self,
        lm: &ModelSpec,
        tok: &Tokenizer,
    ) -> Result<ImageTokenIds, VisionError> {
        let mismatch = |problem: String| VisionError::Mismatch {
            mmproj: self.path().to_path_buf(),
            model: lm.gguf.path().to_path_buf(),
            problem,
        };
        if self.hp.projection_dim != lm.hp.n_embd {
            return Err(mismatch(format!(
                "it projects to {} values per image token, the model's embedding size is {}",
                self.hp.projection_dim, lm.hp.n_embd
            )));
        }
        let lm_name = lm.gguf.metadata.get_str(names::NAME).unwrap_or("");
        if let Some(family) = Projector::named_in(lm_name)
            && family != self.projector
        {
            return Err(mismatch(format!(
                "the model is named {lm_name:?}, a {} model, and this projector is {} (a {} one)",
                family.family(),
                self.projector.name(),
                self.projector.family()
            )));
        }
        if !lm.arch.uses_mrope() {
            return Err(mismatch(format!(
                "the model's architecture {} has no multimodal RoPE ({} needs qwen2vl)",
                lm.arch.name(),
                self.projector.name()
            )));
        }
        let id = |text: &str| {
            tok.token_id(text)
                .ok_or_else(|| mismatch(format!("the model's vocabulary has no {text} token")))
        };
        Ok(ImageTokenIds {
            vision_start: id(clip::VISION_START_TOKEN)?,
            vision_end: id(clip::VISION_END_TOKEN)?,
            image_pad: id(clip::IMAGE_PAD_TOKEN)?,
        })
    }
}
