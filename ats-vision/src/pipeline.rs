//! The VLM pipeline: a language model and its projector checked against each
//! other; images decoded and preprocessed; every image encoded and the
//! encoder freed (the vision phase); then the prompt rendered with the chat
//! template (each image placed before the text, as llama.cpp's mtmd does),
//! its image placeholders expanded to one `<|image_pad|>` per image token,
//! and the rows and M-RoPE positions the language engine takes.
//!
//! Order of life: [`Vlm::encode_images`] finishes and frees every vision
//! allocation before the caller creates the language [`Session`] (its KV cache
//! and compute buffers), so a device's peak is max(vision, language).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use ats_core::chat::{ChatMessage, ChatTemplate, ContentPart, TemplateVars};
use ats_core::files::read_bounded;
use ats_core::ledger::Region;
use ats_core::machine::{DeviceId, Machine};
use ats_core::names::clip;
use ats_core::round::{EmbedOverride, Positions};
use ats_core::spec::ModelSpec;
use ats_core::tokenizer::{GuardedText, Tokenizer};
use ats_sched::session::{GenEvent, GenParams, Generation, Session};

use crate::VisionError;
use crate::encoder::{EncoderConfig, ImageEmbedding, VisionEncoder};
use crate::positions::{Span, mrope_positions};
use crate::preprocess::{
    DecodeLimits, PixelValues, PreprocessConfig, planned_tokens, preprocess_bytes,
};
use crate::spec::{ImageTokenIds, VisionSpec};

/// A language model and the projector that feeds it.
pub struct Vlm {
    /// The language model.
    pub lm: Arc<ModelSpec>,
    /// The vision projector.
    pub vision: Arc<VisionSpec>,
    /// The language model's tokenizer.
    pub tokenizer: Tokenizer,
    /// The language model's chat template (ChatML when the file has none).
    pub template: ChatTemplate,
    /// The image token ids.
    pub tokens: ImageTokenIds,
}

impl std::fmt::Debug for Vlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Vlm({:?} + {:?})", self.lm.arch, self.vision.projector)
    }
}

/// The vision phase's result.
#[derive(Clone, Debug)]
pub struct VisionPhase {
    /// Each image's embeddings, in order.
    pub images: Vec<ImageEmbedding>,
    /// Milliseconds encoding took, all images.
    pub encode_ms: f64,
    /// Per device: its role, its name and its ledger's vision-region peak, bytes.
    pub peaks: Vec<(DeviceId, String, u64)>,
}

impl VisionPhase {
    /// The vision peak of the GPU (of the host when the machine has no GPU).
    pub fn device_peak(&self) -> u64 {
        let of = |d: DeviceId| self.peaks.iter().find(|p| p.0 == d).map(|p| p.2);
        of(DeviceId::Gpu)
            .or_else(|| of(DeviceId::Host))
            .unwrap_or(0)
    }
}

/// What the language model takes for a prompt with images.
#[derive(Clone, Debug, PartialEq)]
pub struct VlmInput {
    /// Prompt token ids, one `<|image_pad|>` per image token.
    pub ids: Vec<u32>,
    /// The image embeddings that replace the pads' rows.
    pub embeds: EmbedOverride,
    /// M-RoPE positions of every prompt token.
    pub positions: Positions,
    /// The position the first generated token takes.
    pub next_pos: i64,
}

impl VlmInput {
    /// The arguments of [`Session::prefill_with`] and [`Session::generate_with`].
    pub fn embeds(&self) -> Option<(&EmbedOverride, &Positions, i64)> {
        Some((&self.embeds, &self.positions, self.next_pos))
    }

    /// HF's `rope_deltas`: how far decode positions sit from the token count.
    pub fn rope_delta(&self) -> i64 {
        self.next_pos - self.ids.len() as i64
    }
}

impl Vlm {
    /// Checks that `vision` feeds `lm` and loads the tokenizer and template.
    pub fn new(lm: Arc<ModelSpec>, vision: Arc<VisionSpec>) -> Result<Vlm, VisionError> {
        let tokenizer = Tokenizer::from_gguf(&lm.gguf.metadata).map_err(|e| {
            VisionError::Input(format!("{}: tokenizer: {e}", lm.gguf.path().display()))
        })?;
        let tokens = vision.check_language_model(&lm, &tokenizer)?;
        let template = ChatTemplate::from_gguf(&lm.gguf.metadata).map_err(|e| {
            VisionError::Input(format!("{}: chat template: {e}", lm.gguf.path().display()))
        })?;
        Ok(Vlm {
            lm,
            vision,
            tokenizer,
            template,
            tokens,
        })
    }

    /// Opens both files and checks them against each other.
    pub fn open(model: &Path, mmproj: &Path) -> Result<Vlm, VisionError> {
        let lm = ModelSpec::open(model)
            .map_err(|e| VisionError::Input(format!("{}: {e}", model.display())))?;
        let vision = VisionSpec::open(mmproj)?;
        Vlm::new(Arc::new(lm), Arc::new(vision))
    }

    /// The projector's preprocessing with optional pixel bounds.
    pub fn preprocess_config(
        &self,
        min_pixels: Option<u64>,
        max_pixels: Option<u64>,
    ) -> Result<PreprocessConfig, VisionError> {
        let mut c = self.vision.preprocess_config();
        // what the file says is the file's fault, not the flags'
        c.validate().map_err(|source| VisionError::Image {
            image: format!(
                "{} (its preprocessing metadata)",
                self.vision.path().display()
            ),
            source,
        })?;
        if let Some(v) = min_pixels {
            c.min_pixels = v;
        }
        if let Some(v) = max_pixels {
            c.max_pixels = v;
        }
        c.validate().map_err(|source| VisionError::Image {
            image: "--min-pixels/--max-pixels".into(),
            source,
        })?;
        Ok(c)
    }

    /// Reads and preprocesses an image file; errors name the file.
    pub fn load_image(
        &self,
        path: &Path,
        cfg: &PreprocessConfig,
        limits: &DecodeLimits,
    ) -> Result<PixelValues, VisionError> {
        let bytes = read_image(path, limits)?;
        self.preprocess_image(path, &bytes, cfg, limits)
    }

    /// Preprocesses image bytes read from `path` (named in errors).
    pub fn preprocess_image(
        &self,
        path: &Path,
        bytes: &[u8],
        cfg: &PreprocessConfig,
        limits: &DecodeLimits,
    ) -> Result<PixelValues, VisionError> {
        preprocess_bytes(bytes, cfg, limits).map_err(|source| VisionError::Image {
            image: path.display().to_string(),
            source,
        })
    }

    /// The language tokens an image (bytes read from `path`) will take,
    /// from its header alone ([`planned_tokens`]).
    pub fn image_tokens(
        &self,
        path: &Path,
        bytes: &[u8],
        cfg: &PreprocessConfig,
        limits: &DecodeLimits,
    ) -> Result<usize, VisionError> {
        planned_tokens(bytes, cfg, limits).map_err(|source| VisionError::Image {
            image: path.display().to_string(),
            source,
        })
    }

    /// The prompt's length in tokens once images of `image_tokens` tokens
    /// each fill its markers: known before any image is encoded.
    pub fn prompt_len(
        &self,
        rendered: &GuardedText,
        image_tokens: &[usize],
    ) -> Result<usize, VisionError> {
        let text: usize = self
            .text_pieces(rendered, image_tokens.len())?
            .iter()
            .map(Vec::len)
            .sum();
        // each image is its tokens between <|vision_start|> and <|vision_end|>
        Ok(text + image_tokens.iter().map(|n| n + 2).sum::<usize>())
    }

    /// The vision phase: encodes every image on `machine`, then drops the
    /// encoder so nothing of it stays on any device, and restarts each
    /// ledger's total peak for the language phase (the vision region keeps its peak).
    pub fn encode_images(
        &self,
        machine: &Machine,
        cfg: EncoderConfig,
        images: &[PixelValues],
    ) -> Result<VisionPhase, VisionError> {
        let t0 = Instant::now();
        let encoder = VisionEncoder::new(self.vision.clone(), machine.clone(), cfg)?;
        let mut out = Vec::with_capacity(images.len());
        for pv in images {
            out.push(encoder.encode(pv)?);
        }
        drop(encoder);
        let peaks = machine
            .iter()
            .map(|(id, d)| {
                let l = d.ledger();
                debug_assert_eq!(
                    l.used_in(Region::Vision),
                    0,
                    "vision memory outlived the encoder"
                );
                l.reset_total_peak();
                (id, d.info().name.clone(), l.peak_in(Region::Vision))
            })
            .collect();
        Ok(VisionPhase {
            images: out,
            encode_ms: t0.elapsed().as_secs_f64() * 1000.0,
            peaks,
        })
    }

    /// The prompt text for a user message with `n_images` images: the
    /// template rendered with one image marker per image before the text
    /// (unless the text places its own markers), ending where the assistant
    /// replies. Message text stays plain text: turn markers in it are not
    /// control tokens ([`ChatTemplate::render_guarded`]).
    pub fn render_prompt(
        &self,
        user: &str,
        n_images: usize,
        system: Option<&str>,
    ) -> Result<GuardedText, VisionError> {
        let content = if user.contains(clip::MEDIA_MARKER) {
            user.to_string()
        } else {
            clip::MEDIA_MARKER.repeat(n_images) + user
        };
        let mut msgs = Vec::new();
        if let Some(s) = system {
            msgs.push(ChatMessage::text("system", s));
        }
        msgs.push(ChatMessage::text("user", content));
        self.template
            .render_guarded(&msgs, true, &self.tokenizer)
            .map_err(|e| VisionError::Input(format!("chat template: {e}")))
    }

    /// The prompt text for a conversation whose messages may hold images
    /// (`chat`, `serve`): each image part becomes one image marker where it
    /// stands, the template renders the rest as text (guarded, as
    /// [`Vlm::render_prompt`]) and ends where the assistant replies. A user
    /// message of one image then text renders as `vlm` renders its prompt.
    pub fn render_messages(&self, messages: &[ChatMessage]) -> Result<GuardedText, VisionError> {
        self.render_messages_with(messages, &TemplateVars::default())
    }

    /// [`Self::render_messages`] with the caller's template variables.
    pub fn render_messages_with(
        &self,
        messages: &[ChatMessage],
        vars: &TemplateVars,
    ) -> Result<GuardedText, VisionError> {
        let marked: Vec<ChatMessage> = messages
            .iter()
            .map(|m| {
                let parts = m.content.iter().map(|p| match p {
                    ContentPart::Image => ContentPart::Text(clip::MEDIA_MARKER.into()),
                    text => text.clone(),
                });
                ChatMessage::new(m.role.clone(), parts.collect())
            })
            .collect();
        self.template
            .render_guarded_with(&marked, vars, true, &self.tokenizer)
            .map_err(|e| VisionError::Input(format!("chat template: {e}")))
    }

    /// The token ids of the text between image markers (one piece more
    /// than there are images).
    fn text_pieces(
        &self,
        rendered: &GuardedText,
        n_images: usize,
    ) -> Result<Vec<Vec<u32>>, VisionError> {
        let pieces: Vec<&str> = rendered.text.split(clip::MEDIA_MARKER).collect();
        if pieces.len() != n_images + 1 {
            return Err(VisionError::Input(format!(
                "the prompt has {} image markers ({}) for {} images",
                pieces.len() - 1,
                clip::MEDIA_MARKER,
                n_images
            )));
        }
        pieces
            .iter()
            .enumerate()
            .map(|(i, piece)| {
                self.tokenizer
                    .encode_guarded(piece, rendered.guards, i == 0, usize::MAX)
                    .map_err(|e| VisionError::Input(format!("tokenizer: {e}")))
            })
            .collect()
    }

    /// Tokenizes a rendered prompt, expands each image marker to
    /// `<|vision_start|>`, one `<|image_pad|>` per image token and
    /// `<|vision_end|>`, and computes the override rows and M-RoPE positions.
    pub fn input(
        &self,
        rendered: &GuardedText,
        images: &[ImageEmbedding],
    ) -> Result<VlmInput, VisionError> {
        let pieces = self.text_pieces(rendered, images.len())?;
        let n_embd = self.lm.hp.n_embd;
        let mut ids = Vec::new();
        let mut spans = Vec::new();
        let mut embeds = EmbedOverride::default();
        // text tokens since the last image (the end token of an image is text)
        let mut text_run = 0usize;
        for (i, text) in pieces.into_iter().enumerate() {
            text_run += text.len();
            ids.extend(text);
            let Some(img) = images.get(i) else {
                continue;
            };
            if img.n_embd != n_embd || img.data.len() != img.n_tokens * n_embd {
                return Err(VisionError::Input(format!(
                    "image {} has {} values of width {}, the model's embedding size is {n_embd}",
                    i + 1,
                    img.data.len(),
                    img.n_embd
                )));
            }
            ids.push(self.tokens.vision_start);
            spans.push(Span::Text(text_run + 1));
            embeds.rows.extend(ids.len()..ids.len() + img.n_tokens);
            embeds.data.extend_from_slice(&img.data);
            ids.extend(std::iter::repeat_n(self.tokens.image_pad, img.n_tokens));
            let [t, h, w] = img.grid;
            spans.push(Span::Image { t, h, w });
            ids.push(self.tokens.vision_end);
            text_run = 1;
        }
        spans.push(Span::Text(text_run));
        debug_assert_eq!(ids.len(), spans.iter().map(Span::len).sum::<usize>());
        let (positions, next_pos) = mrope_positions(&spans);
        Ok(VlmInput {
            ids,
            embeds,
            positions,
            next_pos,
        })
    }
}

/// Reads an image file, refusing devices and files larger than a full
/// decode may take (`limits.max_alloc`: an encoded image is not bigger
/// than its pixels).
pub fn read_image(path: &Path, limits: &DecodeLimits) -> Result<Vec<u8>, VisionError> {
    read_bounded(path, limits.max_alloc, "images").map_err(|e| VisionError::Input(e.to_string()))
}

/// Generates after a VLM prompt (the session must be empty).
pub fn generate(
    session: &mut Session,
    input: &VlmInput,
    params: &GenParams,
    on_event: &mut dyn FnMut(GenEvent<'_>) -> bool,
) -> Result<Generation, VisionError> {
    Ok(session.generate_with(&input.ids, input.embeds(), params, on_event)?)
}

/// Logits at every prompt position (`ids.len() x vocab`), from an empty context.
pub fn eval(session: &mut Session, input: &VlmInput) -> Result<Vec<f32>, VisionError> {
    session.reset();
    Ok(session.prefill_with(&input.ids, true, input.embeds())?)
}
