//! Hyperparameters read from `{arch}.*` metadata keys.

use serde::Serialize;

use super::{Arch, SpecError};
use crate::gguf::GgufFile;
use crate::graph::{Gating, Routing, Yarn};
use crate::names::{hp, tensor};

/// A text model's hyperparameters.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HParams {
    /// Vocabulary size (rows of the embedding table).
    pub n_vocab: usize,
    /// Training context length.
    pub n_ctx_train: usize,
    /// Hidden size.
    pub n_embd: usize,
    /// Decoder blocks.
    pub n_layer: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Columns per head.
    pub head_dim: usize,
    /// FFN intermediate size (dense layers).
    pub n_ff: usize,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// LayerNorm epsilon (architectures that normalise with LayerNorm).
    pub ln_eps: f32,
    /// RoPE frequency base.
    pub rope_theta: f32,
    /// Rotated dimensions per head.
    pub rope_dim: usize,
    /// M-RoPE sections (pairs per t/h/w/extra); zeros when not M-RoPE.
    pub rope_sections: [usize; 4],
    /// Experts per MoE layer (0 for dense models).
    pub n_expert: usize,
    /// Experts used per token.
    pub n_expert_used: usize,
    /// Expert FFN size.
    pub n_ff_expert: usize,
    /// Shared experts beside the routed ones (one FFN of `n_expert_shared *
    /// n_ff_expert`), 0 for none.
    pub n_expert_shared: usize,
    /// Leading blocks whose FFN is dense (`n_ff`) in an MoE model.
    pub n_dense_lead: usize,
    /// How the MoE layers' routers weigh experts.
    pub routing: Routing,
    /// Keys a sliding-window layer sees (0: no sliding window).
    pub n_swa: usize,
    /// Per layer: whether it uses the sliding window.
    pub swa_layers: Vec<bool>,
    /// YaRN context extension of RoPE, when the file asks for it.
    pub yarn: Option<Yarn>,
}

struct Keys<'a> {
    f: &'a GgufFile,
    arch: Arch,
}

impl Keys<'_> {
    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch.name())
    }

    fn opt_usize(&self, k: &str) -> Result<Option<usize>, SpecError> {
        let key = self.key(k);
        match self.f.metadata.get(&key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|x| usize::try_from(x).ok())
                .map(Some)
                .ok_or_else(|| SpecError::BadKey {
                    key,
                    problem: format!("expected a non-negative integer, found {v}"),
                }),
        }
    }

    fn usize(&self, k: &str) -> Result<usize, SpecError> {
        self.opt_usize(k)?
            .ok_or_else(|| SpecError::MissingKey(self.key(k)))
    }

    fn positive(&self, k: &str) -> Result<usize, SpecError> {
        let v = self.usize(k)?;
        if v == 0 {
            return Err(SpecError::BadKey {
                key: self.key(k),
                problem: "must be positive".into(),
            });
        }
        Ok(v)
    }

    fn opt_f32(&self, k: &str) -> Result<Option<f32>, SpecError> {
        match self.f.metadata.get(&self.key(k)) {
            None => Ok(None),
            Some(_) => self.f32_or(k, 0.0).map(Some),
        }
    }

    fn f32_or(&self, k: &str, default: f32) -> Result<f32, SpecError> {
        let key = self.key(k);
        match self.f.metadata.get(&key) {
            None => Ok(default),
            Some(v) => v
                .as_f64()
                .map(|x| x as f32)
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| SpecError::BadKey {
                    key,
                    problem: format!("expected a positive number, found {v}"),
                }),
        }
    }
}

impl HParams {
    /// Reads and checks the hyperparameters of `arch`.
    pub fn from_gguf(arch: Arch, f: &GgufFile) -> Result<HParams, SpecError> {
        let k = Keys { f, arch };
        let n_embd = k.positive(hp::EMBEDDING_LENGTH)?;
        let n_head = k.positive(hp::HEAD_COUNT)?;
        let n_head_kv = k.opt_usize(hp::HEAD_COUNT_KV)?.unwrap_or(n_head);
        if n_head_kv == 0 || n_head % n_head_kv != 0 {
            return Err(SpecError::BadKey {
                key: k.key(hp::HEAD_COUNT_KV),
                problem: format!("{n_head_kv} does not divide the {n_head} query heads"),
            });
        }
        let head_dim = match k.opt_usize(hp::KEY_LENGTH)? {
            Some(d) => d,
            None if n_embd % n_head == 0 => n_embd / n_head,
            None => {
                return Err(SpecError::BadKey {
                    key: k.key(hp::HEAD_COUNT),
                    problem: format!("{n_head} heads do not divide hidden size {n_embd}"),
                });
            }
        };
        if let Some(vl) = k.opt_usize(hp::VALUE_LENGTH)?
            && vl != head_dim
        {
            return Err(SpecError::Unsupported(format!(
                "value head size {vl} differs from key head size {head_dim}"
            )));
        }
        if head_dim == 0 || head_dim % 2 != 0 {
            return Err(SpecError::BadKey {
                key: k.key(hp::KEY_LENGTH),
                problem: format!("head size {head_dim} must be even and positive"),
            });
        }
        let rope_dim = k.opt_usize(hp::ROPE_DIM)?.unwrap_or(head_dim);
        if rope_dim == 0 || rope_dim > head_dim || rope_dim % 2 != 0 {
            return Err(SpecError::BadKey {
                key: k.key(hp::ROPE_DIM),
                problem: format!("{rope_dim} must be even and at most the head size {head_dim}"),
            });
        }
        let yarn = match f.metadata.get_str(&k.key(hp::ROPE_SCALING_TYPE)) {
            None | Some("none") => None,
            Some("yarn") if arch == Arch::GptOss => Some(yarn(&k)?),
            Some(t) => {
                return Err(SpecError::Unsupported(format!(
                    "RoPE scaling type {t:?} ({}) is not supported for {}",
                    k.key(hp::ROPE_SCALING_TYPE),
                    arch.name()
                )));
            }
        };
        let mut rope_sections = [0usize; 4];
        if arch.uses_mrope() {
            let key = k.key(hp::ROPE_SECTIONS);
            let arr = f
                .metadata
                .get_array(&key)
                .ok_or_else(|| SpecError::MissingKey(key.clone()))?;
            let vals: Option<Vec<usize>> = arr
                .iter()
                .map(|v| v.as_u64().and_then(|x| usize::try_from(x).ok()))
                .collect();
            let vals = vals
                .filter(|v| !v.is_empty() && v.len() <= 4)
                .ok_or_else(|| SpecError::BadKey {
                    key: key.clone(),
                    problem: "expected up to 4 non-negative integers".into(),
                })?;
            rope_sections[..vals.len()].copy_from_slice(&vals);
            if rope_sections.iter().sum::<usize>() * 2 != rope_dim {
                return Err(SpecError::BadKey {
                    key,
                    problem: format!(
                        "sections {rope_sections:?} must cover the {} rotation pairs",
                        rope_dim / 2
                    ),
                });
            }
        }
        let n_expert = k.opt_usize(hp::EXPERT_COUNT)?.unwrap_or(0);
        let n_expert_used = k.opt_usize(hp::EXPERT_USED_COUNT)?.unwrap_or(0);
        if arch.is_moe() && (n_expert == 0 || n_expert_used == 0 || n_expert_used > n_expert) {
            return Err(SpecError::BadKey {
                key: k.key(hp::EXPERT_USED_COUNT),
                problem: format!("{n_expert_used} experts used of {n_expert}"),
            });
        }
        let n_ff_expert = k.opt_usize(hp::EXPERT_FF_LENGTH)?.unwrap_or(0);
        let n_layer = main_layers(&k)?;
        let n_dense_lead = k.opt_usize(hp::LEADING_DENSE_BLOCK_COUNT)?.unwrap_or(0);
        if n_dense_lead > n_layer {
            return Err(SpecError::BadKey {
                key: k.key(hp::LEADING_DENSE_BLOCK_COUNT),
                problem: format!("{n_dense_lead} dense blocks of {n_layer}"),
            });
        }
        let n_ff = if arch.is_moe() && n_dense_lead == 0 {
            k.opt_usize(hp::FEED_FORWARD_LENGTH)?.unwrap_or(0)
        } else {
            k.positive(hp::FEED_FORWARD_LENGTH)?
        };
        let (n_swa, swa_layers) = sliding_window(&k, arch, n_layer)?;
        let embd = f
            .tensor(tensor::TOKEN_EMBD)
            .ok_or_else(|| SpecError::MissingTensor(tensor::TOKEN_EMBD.into()))?;
        let n_vocab = embd.ne.get(1).copied().unwrap_or(0) as usize;
        if let Some(v) = k.opt_usize(hp::VOCAB_SIZE)?
            && v != n_vocab
        {
            return Err(SpecError::BadKey {
                key: k.key(hp::VOCAB_SIZE),
                problem: format!("{v} differs from the embedding table's {n_vocab} rows"),
            });
        }
        let hp = HParams {
            n_vocab,
            n_ctx_train: k.positive(hp::CONTEXT_LENGTH)?,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            head_dim,
            n_ff,
            rms_eps: k.f32_or(hp::RMS_EPS, 1e-5)?,
            ln_eps: k.f32_or(hp::LN_EPS, 1e-5)?,
            rope_theta: k.f32_or(hp::ROPE_FREQ_BASE, 10000.0)?,
            rope_dim,
            rope_sections,
            n_expert,
            n_expert_used,
            n_ff_expert,
            n_expert_shared: k.opt_usize(hp::EXPERT_SHARED_COUNT)?.unwrap_or(0),
            n_dense_lead,
            routing: routing(&k)?,
            n_swa,
            swa_layers,
            yarn,
        };
        Ok(hp)
    }

    /// Bytes of K plus V per token per layer, at `elem` bytes per element.
    pub fn kv_bytes_per_token(&self, elem: usize) -> usize {
        2 * self.n_head_kv * self.head_dim * elem
    }
}

/// The blocks a forward pass runs: `block_count` less the trailing
/// multi-token-prediction blocks, whose tensors the file carries unused.
/// Every block has tensors of its own, so a count beyond the file's tensors
/// is refused here, before anything is built per block (a 32 KB fuzzed
/// gpt-oss header asking for 3.7 billion blocks took 3.6 GB for its
/// sliding-window pattern).
fn main_layers(k: &Keys<'_>) -> Result<usize, SpecError> {
    let blocks = k.positive(hp::BLOCK_COUNT)?;
    let tensors = k.f.tensors().len();
    if blocks > tensors {
        return Err(SpecError::BadKey {
            key: k.key(hp::BLOCK_COUNT),
            problem: format!("{blocks} blocks, but the file holds {tensors} tensors"),
        });
    }
    match k.opt_usize(hp::NEXTN_PREDICT_LAYERS)?.unwrap_or(0) {
        0 => Ok(blocks),
        n if n < blocks => Ok(blocks - n),
        n => Err(SpecError::BadKey {
            key: k.key(hp::NEXTN_PREDICT_LAYERS),
            problem: format!("{n} prediction blocks leave none of the {blocks} blocks to run"),
        }),
    }
}

/// How the routers weigh experts. Qwen3 MoE and gpt-oss route one way
/// whatever their keys say (as llama.cpp does); GLM-4.5 by its keys, with
/// llama.cpp's defaults (sigmoid, no renormalisation, scale 1).
fn routing(k: &Keys<'_>) -> Result<Routing, SpecError> {
    if k.arch != Arch::Glm4Moe {
        return Ok(Routing::SOFTMAX_NORM);
    }
    let groups = k.opt_usize(hp::EXPERT_GROUP_COUNT)?.unwrap_or(1);
    let used = k.opt_usize(hp::EXPERT_GROUP_USED_COUNT)?.unwrap_or(groups);
    if groups > 1 && used < groups {
        return Err(SpecError::Unsupported(format!(
            "group-limited routing ({} = {used} of {groups} groups)",
            k.key(hp::EXPERT_GROUP_USED_COUNT)
        )));
    }
    let gating = match k.opt_usize(hp::EXPERT_GATING_FUNC)? {
        None | Some(2) => Gating::Sigmoid,
        Some(1) => Gating::Softmax,
        Some(g) => {
            return Err(SpecError::Unsupported(format!(
                "{} = {g} (1 softmax and 2 sigmoid are supported)",
                k.key(hp::EXPERT_GATING_FUNC)
            )));
        }
    };
    let key = k.key(hp::EXPERT_WEIGHTS_NORM);
    let norm_topk = match k.f.metadata.get(&key) {
        None => false,
        Some(v) => v.as_bool().ok_or_else(|| SpecError::BadKey {
            key,
            problem: format!("expected a boolean, found {v}"),
        })?,
    };
    Ok(Routing {
        gating,
        norm_topk,
        scale: k.f32_or(hp::EXPERT_WEIGHTS_SCALE, 1.0)?,
    })
}

/// The YaRN parameters of a file whose RoPE scaling type is `yarn`.
fn yarn(k: &Keys<'_>) -> Result<Yarn, SpecError> {
    let factor = k
        .opt_f32(hp::ROPE_SCALING_FACTOR)?
        .ok_or_else(|| SpecError::MissingKey(k.key(hp::ROPE_SCALING_FACTOR)))?;
    if factor < 1.0 {
        return Err(SpecError::BadKey {
            key: k.key(hp::ROPE_SCALING_FACTOR),
            problem: format!("YaRN factor {factor} below 1"),
        });
    }
    if let Some(e) = k.opt_f32(hp::ROPE_YARN_EXT_FACTOR)?
        && e != 1.0
    {
        return Err(SpecError::Unsupported(format!(
            "{} = {e}: only full extrapolation mixing (1) is supported",
            k.key(hp::ROPE_YARN_EXT_FACTOR)
        )));
    }
    if k.f.metadata.get(&k.key(hp::ROPE_YARN_LOG_MUL)).is_some() {
        return Err(SpecError::Unsupported(format!(
            "{} (YaRN's log multiplier) is not supported",
            k.key(hp::ROPE_YARN_LOG_MUL)
        )));
    }
    Ok(Yarn {
        factor,
        orig_ctx: k.positive(hp::ROPE_SCALING_ORIG_CTX)?,
        beta_fast: k.f32_or(hp::ROPE_YARN_BETA_FAST, 32.0)?,
        beta_slow: k.f32_or(hp::ROPE_YARN_BETA_SLOW, 1.0)?,
        attn_factor: k.f32_or(hp::ROPE_YARN_ATTN_FACTOR, Yarn::default_attn_factor(factor))?,
        // gpt-oss is the one architecture here with YaRN, and its reference
        // (OpenAI's, and Hugging Face's `truncate: false`) does not round
        // the ramp's ends; llama.cpp does (see the fixtures' README)
        truncate: false,
    })
}

/// The sliding window and which layers use it. A window needs the
/// architecture's layer pattern (gpt-oss: even layers slide, odd are full),
/// which a `sliding_window_pattern` key may override: every n-th layer full
/// (an integer n), or one boolean per layer.
fn sliding_window(
    k: &Keys<'_>,
    arch: Arch,
    n_layer: usize,
) -> Result<(usize, Vec<bool>), SpecError> {
    let Some(default_pattern) = arch.swa_pattern() else {
        return Ok((0, vec![false; n_layer]));
    };
    let n_swa = k.positive(hp::SLIDING_WINDOW)?;
    let key = k.key(hp::SLIDING_WINDOW_PATTERN);
    let every = |n: usize| (0..n_layer).map(|il| n == 0 || il % n < n - 1).collect();
    let layers = match k.f.metadata.get(&key) {
        None => every(default_pattern),
        Some(v) => {
            if let Some(n) = v.as_u64() {
                every(usize::try_from(n).unwrap_or(usize::MAX))
            } else {
                let arr = k.f.metadata.get_array(&key).unwrap_or(&[]);
                let flags: Option<Vec<bool>> = arr.iter().map(|x| x.as_bool()).collect();
                match flags {
                    Some(f) if f.len() == n_layer => f,
                    _ => {
                        return Err(SpecError::BadKey {
                            key,
                            problem: format!(
                                "expected an integer or {n_layer} booleans, found {v}"
                            ),
                        });
                    }
                }
            }
        }
    };
    Ok((n_swa, layers))
}
