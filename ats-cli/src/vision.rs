//! Images in conversations (`chat`, `serve`): the projector opened beside
//! the session's model and checked against it; a conversation rendered with
//! one marker per image; each image's tokens counted from its header, so a
//! prompt the context cannot hold is refused before any pixel is decoded;
//! images preprocessed as `vlm` does, encoded on the session's machine in
//! what its layout leaves free (the encoder sizes its Q chunk to that, or
//! runs on the CPU and says so), and kept by their bytes, so an image sent
//! again (every turn of an OpenAI conversation resends it) is neither
//! decoded nor encoded again, and its rows match the KV pool's cached ones.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ats_core::chat::{ChatMessage, TemplateVars};
use ats_core::machine::Machine;
use ats_core::round::{EmbedOverride, Positions};
use ats_core::spec::ModelSpec;
use ats_core::tokenizer::GuardedText;
use ats_vision::preprocess::{DecodeLimits, PixelValues, PreprocessConfig};
use ats_vision::{
    EmbeddingCache, EncoderConfig, ImageEmbedding, ImageKey, VisionEncoder, VisionError,
    VisionSpec, Vlm,
};
use serde::Serialize;

/// Most pixels of an image sent with `detail: "low"`: 448 x 448, 256 tokens
/// (OpenAI's low detail is one small fixed-size view of the image).
pub const LOW_DETAIL_PIXELS: u64 = 448 * 448;

/// Why a conversation's images cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// An image that cannot be read (the message names it by its place in
    /// the request: "image 2").
    #[error("{0}")]
    Unreadable(String),
    /// The prompt, images counted from their headers, is over the limit.
    #[error(
        "the prompt has {tokens} tokens (images {images}), more than the limit of {limit} (--max-prompt-tokens, -c)"
    )]
    TooLong {
        /// Tokens of text and images.
        tokens: usize,
        /// Each image's tokens, joined by " + ".
        images: String,
        /// The limit.
        limit: usize,
    },
    /// The template or the image markers did not work out.
    #[error("{0}")]
    Prompt(VisionError),
    /// Encoding failed.
    #[error("the vision encoder failed: {0}")]
    Encode(VisionError),
}

/// An image of a request: its file bytes and how much detail it asks for.
#[derive(Debug, Clone)]
pub struct ImageInput {
    /// The file (PNG, JPEG, WebP, GIF, BMP).
    pub bytes: Vec<u8>,
    /// OpenAI's `detail: "low"`: at most [`LOW_DETAIL_PIXELS`].
    pub low_detail: bool,
}

/// An image ready for the encoder, or already encoded.
#[derive(Debug, Clone)]
enum Prepared {
    Cached(Arc<ImageEmbedding>),
    Pixels(ImageKey, PixelValues),
}

/// A conversation with images, rendered and preprocessed: what the engine
/// thread encodes and feeds.
#[derive(Debug, Clone)]
pub struct VisionPrompt {
    rendered: GuardedText,
    images: Vec<Prepared>,
    /// Tokens of the prompt, images included.
    pub n_tokens: usize,
}

/// What a prompt's images took: the timings' `vision` part.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct VisionUse {
    /// Images in the prompt.
    pub images: usize,
    /// Of those, found in the embedding cache (neither decoded nor encoded).
    pub cached: usize,
    /// Image tokens in the prompt.
    pub image_tokens: usize,
    /// Milliseconds encoding took.
    pub encode_ms: f64,
    /// Where the encoder ran (the last image encoded).
    pub device: Option<String>,
    /// The encoder's Q chunk (the last image encoded).
    pub q_block: usize,
    /// The encoder's planned peak on its device, bytes (the largest image).
    pub planned_bytes: u64,
    /// Notes of the encoder (where it did not run where it could).
    pub notes: Vec<String>,
}

/// The language input of a prompt with images.
#[derive(Debug)]
pub struct VisionInput {
    /// Prompt token ids, one pad per image token.
    pub ids: Vec<u32>,
    /// Image rows, their positions, and the position after the prompt.
    pub embeds: (EmbedOverride, Positions, i64),
    /// What the images took.
    pub used: VisionUse,
}

/// A session's model with its projector.
pub struct VisionFront {
    vlm: Vlm,
    cfg: PreprocessConfig,
    limits: DecodeLimits,
    cache: Mutex<EmbeddingCache>,
}

impl std::fmt::Debug for VisionFront {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VisionFront({:?})", self.vlm)
    }
}

impl VisionFront {
    /// The projector at `mmproj` for `lm`, with the pixel bounds asked for
    /// (the most lowered to what `max_prompt` tokens hold, saying so), and
    /// an embedding cache of `cache_bytes`.
    pub fn open(
        lm: Arc<ModelSpec>,
        mmproj: &Path,
        min_pixels: Option<u64>,
        max_pixels: Option<u64>,
        max_prompt: usize,
        cache_bytes: usize,
    ) -> anyhow::Result<VisionFront> {
        let vision = VisionSpec::open(mmproj)?;
        let vlm = Vlm::new(lm, Arc::new(vision))?;
        let mut cfg = vlm.preprocess_config(min_pixels, max_pixels)?;
        let most = (max_prompt as u64).saturating_mul(u64::from(cfg.factor()).pow(2));
        if cfg.max_pixels > most {
            tracing::info!(
                "images are resized to at most {most} pixels: a prompt holds {max_prompt} tokens"
            );
            cfg.max_pixels = most;
        }
        if cfg.min_pixels > cfg.max_pixels {
            crate::usage::usage_bail!(
                "--min-pixels {} does not fit a prompt of {max_prompt} tokens ({} pixels at most)",
                cfg.min_pixels,
                cfg.max_pixels
            );
        }
        Ok(VisionFront {
            vlm,
            cfg,
            limits: DecodeLimits::default(),
            cache: Mutex::new(EmbeddingCache::new(cache_bytes)),
        })
    }

    /// The largest file an image may be.
    pub fn max_image_bytes(&self) -> u64 {
        self.limits.max_alloc
    }

    /// The preprocessing of an image that asks for `low_detail`.
    fn config(&self, low_detail: bool) -> PreprocessConfig {
        let mut c = self.cfg.clone();
        if low_detail {
            c.max_pixels = c.max_pixels.min(LOW_DETAIL_PIXELS).max(c.min_pixels);
        }
        c
    }

    /// Renders `messages` with the template's variables `vars` (the images
    /// in the order they appear are `images`), refuses the prompt if its text and images (counted from
    /// their headers) pass `max_tokens`, then decodes and preprocesses the
    /// images not in the cache.
    pub fn prompt(
        &self,
        messages: &[ChatMessage],
        vars: &TemplateVars,
        images: &[ImageInput],
        max_tokens: usize,
    ) -> Result<VisionPrompt, ImageError> {
        let rendered = self
            .vlm
            .render_messages_with(messages, vars)
            .map_err(ImageError::Prompt)?;
        let name = |i: usize| Path::new("").join(format!("image {}", i + 1));
        let tokens: Vec<usize> = images
            .iter()
            .enumerate()
            .map(|(i, im)| {
                let cfg = self.config(im.low_detail);
                self.vlm
                    .image_tokens(&name(i), &im.bytes, &cfg, &self.limits)
                    .map_err(|e| ImageError::Unreadable(e.to_string()))
            })
            .collect::<Result<_, _>>()?;
        let n_tokens = self
            .vlm
            .prompt_len(&rendered, &tokens)
            .map_err(ImageError::Prompt)?;
        if n_tokens > max_tokens {
            let each: Vec<String> = tokens.iter().map(usize::to_string).collect();
            return Err(ImageError::TooLong {
                tokens: n_tokens,
                images: each.join(" + "),
                limit: max_tokens,
            });
        }
        let prepared = images
            .iter()
            .enumerate()
            .map(|(i, im)| self.prepare(i, im))
            .collect::<Result<_, _>>()?;
        Ok(VisionPrompt {
            rendered,
            images: prepared,
            n_tokens,
        })
    }

    /// One image: its cached embedding, or its pixel values.
    fn prepare(&self, i: usize, im: &ImageInput) -> Result<Prepared, ImageError> {
        let cfg = self.config(im.low_detail);
        let key = ImageKey::of(&im.bytes, &cfg);
        if let Some(e) = self.lock_cache().get(key) {
            return Ok(Prepared::Cached(e));
        }
        let name = Path::new("").join(format!("image {}", i + 1));
        let pixels = self
            .vlm
            .preprocess_image(&name, &im.bytes, &cfg, &self.limits)
            .map_err(|e| ImageError::Unreadable(e.to_string()))?;
        Ok(Prepared::Pixels(key, pixels))
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, EmbeddingCache> {
        // a panic elsewhere leaves the cache consistent (whole inserts only)
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Encodes `p`'s images not in the cache on `machine` (each allocation
    /// released before the next round) and builds the language input.
    pub fn input(&self, machine: &Machine, p: VisionPrompt) -> Result<VisionInput, ImageError> {
        let t0 = Instant::now();
        let mut used = VisionUse {
            images: p.images.len(),
            ..VisionUse::default()
        };
        let mut embeddings = Vec::with_capacity(p.images.len());
        let mut encoder = None;
        for img in p.images {
            match img {
                Prepared::Cached(e) => {
                    used.cached += 1;
                    embeddings.push(ImageEmbedding::clone(&e));
                }
                Prepared::Pixels(key, pixels) => {
                    let enc = match &mut encoder {
                        Some(enc) => enc,
                        None => encoder.insert(
                            VisionEncoder::new(
                                self.vlm.vision.clone(),
                                machine.clone(),
                                EncoderConfig::default(),
                            )
                            .map_err(ImageError::Encode)?,
                        ),
                    };
                    let e = enc.encode(&pixels).map_err(ImageError::Encode)?;
                    note_encode(&mut used, &e);
                    self.lock_cache().insert(key, Arc::new(e.clone()));
                    embeddings.push(e);
                }
            }
        }
        drop(encoder);
        used.encode_ms = t0.elapsed().as_secs_f64() * 1000.0;
        used.image_tokens = embeddings.iter().map(|e| e.n_tokens).sum();
        let input = self
            .vlm
            .input(&p.rendered, &embeddings)
            .map_err(ImageError::Prompt)?;
        Ok(VisionInput {
            ids: input.ids,
            embeds: (input.embeds, input.positions, input.next_pos),
            used,
        })
    }
}

/// Adds what encoding one image took to `used`.
fn note_encode(used: &mut VisionUse, e: &ImageEmbedding) {
    used.device = Some(e.stats.device.clone());
    used.q_block = e.stats.q_block;
    used.planned_bytes = used.planned_bytes.max(e.stats.planned_bytes);
    if let Some(n) = &e.stats.note
        && !used.notes.contains(n)
    {
        // the one line a fallback always gets
        eprintln!("ats: note: {n}");
        used.notes.push(n.clone());
    }
}
