//! `ats-cli vlm`: describe images with a vision-language model inside a VRAM
//! budget. Every image is encoded first and the encoder freed; only then are
//! the language model's KV cache and buffers made, so the device's peak is
//! max(vision, language). The answer goes to standard output; timings and
//! the peak memory of each phase to standard error.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use ats_core::machine::Machine;
use ats_sched::session::{GenEvent, GenParams, Session};
use ats_sched::size::fmt_bytes;
use ats_vision::pipeline::read_image;
use ats_vision::preprocess::{DecodeLimits, PixelValues, PreprocessConfig};
use ats_vision::{EncoderConfig, VisionPhase, Vlm, VlmInput, pipeline};
use clap::Args;

use crate::args::{ModelArgs, SampleArgs};
use crate::usage::usage_bail;
use crate::{load, report};

/// The image options `vlm` and `eval` share.
#[derive(Args, Debug, Clone)]
pub struct ImageArgs {
    /// The model's vision projector (mmproj GGUF).
    #[arg(long = "mmproj", value_name = "FILE")]
    pub mmproj: Option<PathBuf>,
    /// An image (PNG, JPEG, WebP, GIF, BMP); repeat for several, in order.
    #[arg(long = "image", value_name = "FILE")]
    pub images: Vec<PathBuf>,
    /// Fewest pixels an image is resized to (default: the model's, else 3136).
    #[arg(long = "min-pixels", value_name = "N")]
    pub min_pixels: Option<u64>,
    /// Most pixels an image is resized to (default: the model's, else 1003520);
    /// larger images are scaled down to fit. At most what the context can
    /// hold (-c x 784 pixels, one token per 28x28): more is lowered to that.
    #[arg(long = "max-pixels", value_name = "N")]
    pub max_pixels: Option<u64>,
}

impl ImageArgs {
    /// The projector path, or the one-line error for images without one.
    pub fn mmproj(&self) -> Result<Option<&Path>> {
        match (&self.mmproj, self.images.is_empty()) {
            (Some(p), _) => Ok(Some(p)),
            (None, false) => bail!("--image needs --mmproj FILE (the model's vision projector)"),
            (None, true) => Ok(None),
        }
    }
}

/// Describe images.
#[derive(Args, Debug)]
pub struct VlmArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    image: ImageArgs,
    #[command(flatten)]
    sample: SampleArgs,
    /// The text that follows the images in the user message.
    #[arg(short = 'p', long = "prompt", default_value = "Describe this image.")]
    prompt: String,
    /// A system message.
    #[arg(long = "system")]
    system: Option<String>,
    /// Tokens to generate.
    #[arg(short = 'n', long = "n-predict", default_value_t = 256)]
    n_predict: usize,
    /// Keep generating past end-of-generation tokens.
    #[arg(long = "ignore-eos")]
    ignore_eos: bool,
    /// Write the timings and peak memory as JSON to this file.
    #[arg(long = "timings-json", value_name = "FILE")]
    timings_json: Option<PathBuf>,
}

/// The vision phase and the language session, in that order of life.
pub struct Prepared {
    /// What encoding did.
    pub vision: VisionPhase,
    /// Milliseconds to read and preprocess the images.
    pub preprocess_ms: f64,
    /// The language session (made after the encoder was freed).
    pub session: Session,
    /// Milliseconds to plan and load the language model.
    pub load_ms: f64,
    /// The prompt for the session.
    pub input: VlmInput,
}

/// Opens both models, checks from the images' headers that the prompt fits
/// the context, encodes every image on the devices, frees the encoder, then
/// loads the language model and builds the prompt.
pub fn prepare(
    model: &ModelArgs,
    image: &ImageArgs,
    prompt: &str,
    system: Option<&str>,
    all_logits: bool,
    quiet: bool,
) -> Result<Prepared> {
    let mmproj = image
        .mmproj()?
        .context("vlm needs --mmproj FILE (the model's vision projector)")?;
    let vision = ats_vision::spec::VisionSpec::open(mmproj)?;
    let vlm = Vlm::new(load::open_model(model)?, std::sync::Arc::new(vision))?;
    let n_ctx = model.run_config(&vlm.lm, all_logits)?.n_ctx;
    let t0 = Instant::now();
    let rendered = vlm.render_prompt(prompt, image.images.len(), system)?;
    let cfg = pixel_bounds(&vlm, image, &rendered, n_ctx)?;
    let limits = DecodeLimits::default();
    let bytes: Vec<Vec<u8>> = image
        .images
        .iter()
        .map(|p| read_image(p, &limits))
        .collect::<Result<_, _>>()?;
    check_fits(&vlm, image, &bytes, &cfg, &limits, &rendered, n_ctx)?;
    let pixels: Vec<PixelValues> = image
        .images
        .iter()
        .zip(&bytes)
        .map(|(p, b)| vlm.preprocess_image(p, b, &cfg, &limits))
        .collect::<Result<_, _>>()?;
    drop(bytes);
    let preprocess_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let built = load::machine(&model.devices)?;
    let vision = vlm.encode_images(&built.machine, EncoderConfig::default(), &pixels)?;
    if !quiet {
        for (path, img) in image.images.iter().zip(&vision.images) {
            if let Some(n) = &img.stats.note {
                eprintln!("ats: note: {n}");
            }
            eprintln!(
                "ats: image {}: {}x{} patches -> {} tokens, encoded on {} in {:.1} ms (Q chunk {})",
                path.display(),
                img.grid[1] * 2,
                img.grid[2] * 2,
                img.n_tokens,
                img.stats.device,
                img.stats.ms,
                img.stats.q_block
            );
        }
    }
    let t1 = Instant::now();
    let loaded = load::load_on(model, vlm.lm.clone(), built, all_logits)?;
    let load_ms = t1.elapsed().as_secs_f64() * 1000.0;
    let input = vlm.input(&rendered, &vision.images)?;
    tracing::debug!(n_tokens = input.ids.len(), ids = ?input.ids, "prompt");
    if input.ids.len() >= loaded.session.n_ctx() {
        bail!(
            "the prompt has {} tokens (images included), more than the context of {} leaves room for (-c)",
            input.ids.len(),
            loaded.session.n_ctx()
        );
    }
    Ok(Prepared {
        vision,
        preprocess_ms,
        session: loaded.session,
        load_ms,
        input,
    })
}

/// The projector's pixel bounds with the flags applied, and the most
/// pixels lowered (and said so) to what the context holds beside the
/// prompt's text: an equal share of the room left for each image, one
/// token per `factor` x `factor` pixels.
fn pixel_bounds(
    vlm: &Vlm,
    image: &ImageArgs,
    rendered: &ats_core::tokenizer::GuardedText,
    n_ctx: usize,
) -> Result<PreprocessConfig> {
    let mut cfg = vlm.preprocess_config(image.min_pixels, image.max_pixels)?;
    let n = image.images.len().max(1);
    let text = vlm.prompt_len(rendered, &vec![0; image.images.len()])?;
    let room = n_ctx.saturating_sub(1).saturating_sub(text) / n;
    let most = (room as u64).saturating_mul(u64::from(cfg.factor()).pow(2));
    if cfg.max_pixels > most {
        let why = format!(
            "a context of {n_ctx} tokens (-c) holds {room} tokens per image beside {text} of text"
        );
        match image.max_pixels {
            Some(flag) => tracing::warn!("--max-pixels {flag} is more than {why}: using {most}"),
            None => tracing::info!("images are resized to at most {most} pixels: {why}"),
        }
        cfg.max_pixels = most;
    }
    if cfg.min_pixels > cfg.max_pixels {
        usage_bail!(
            "{} pixels per image at least (--min-pixels) do not fit: the context of {n_ctx} tokens (-c) holds {} beside the text",
            cfg.min_pixels,
            cfg.max_pixels
        );
    }
    Ok(cfg)
}

/// Refuses a prompt whose images (counted from their headers) and text do
/// not fit the context, before any image is decoded or encoded.
fn check_fits(
    vlm: &Vlm,
    image: &ImageArgs,
    bytes: &[Vec<u8>],
    cfg: &PreprocessConfig,
    limits: &DecodeLimits,
    rendered: &ats_core::tokenizer::GuardedText,
    n_ctx: usize,
) -> Result<()> {
    let tokens: Vec<usize> = image
        .images
        .iter()
        .zip(bytes)
        .map(|(p, b)| vlm.image_tokens(p, b, cfg, limits))
        .collect::<Result<_, _>>()?;
    let total = vlm.prompt_len(rendered, &tokens)?;
    if total >= n_ctx {
        let each: Vec<String> = tokens.iter().map(usize::to_string).collect();
        bail!(
            "the prompt has {total} tokens (images {}), more than the context of {n_ctx} leaves room for (-c): raise -c or lower --max-pixels",
            each.join(" + ")
        );
    }
    tracing::debug!(total, ?tokens, "prompt tokens before encoding");
    Ok(())
}

/// Peak bytes of the device that matters (the GPU when there is one) since
/// the vision phase ended: the language phase's peak.
pub fn language_peak(machine: &Machine) -> u64 {
    load::reported_device(machine).1.ledger().peak()
}

pub fn run(a: VlmArgs) -> Result<()> {
    if a.n_predict == 0 {
        bail!("-n must be at least 1 (tokens to generate)");
    }
    if a.image.images.is_empty() {
        bail!("give at least one --image FILE");
    }
    let mut p = prepare(
        &a.model,
        &a.image,
        &a.prompt,
        a.system.as_deref(),
        false,
        crate::logging::quiet(),
    )?;
    let params = GenParams {
        max_tokens: a.n_predict,
        sampler: a.sample.config(),
        stop: Vec::new(),
        ignore_eos: a.ignore_eos,
        ..Default::default()
    };
    let mut answer = crate::answer::Answer::new();
    let gen_out = pipeline::generate(&mut p.session, &p.input, &params, &mut |ev| match ev {
        GenEvent::Text(t) => answer.write(t),
        GenEvent::Logprobs(_) => true,
    })?;
    answer.finish()?;
    let t = &gen_out.timings;
    // what the user waits for once the model is loaded: images, encoder, prompt
    let ttft_ms = p.preprocess_ms + p.vision.encode_ms + t.ttft_ms;
    let vision_peak = p.vision.device_peak();
    let language_peak = language_peak(p.session.machine());
    if !crate::logging::quiet() {
        eprintln!();
        eprintln!(
            "ats: vision encode   = {:10.2} ms / {:5} images ({:.2} ms preprocessing)",
            p.vision.encode_ms,
            p.vision.images.len(),
            p.preprocess_ms
        );
        report::print_timings(p.load_ms, t);
        eprintln!("ats: time to first token (images + prompt) = {ttft_ms:.2} ms");
        eprintln!(
            "ats: peak memory: vision {} then language {} (never both at once)",
            fmt_bytes(vision_peak),
            fmt_bytes(language_peak)
        );
        report::print_memory(&p.session);
    }
    if let Some(path) = &a.timings_json {
        let j = serde_json::json!({
            "vision_encode_ms": p.vision.encode_ms,
            "preprocess_ms": p.preprocess_ms,
            "vision_peak_bytes": vision_peak,
            "language_peak_bytes": language_peak,
            "ttft_ms": ttft_ms,
            "prompt_ttft_ms": t.ttft_ms,
            "gen_tokens_per_s": t.gen_tps(),
            "load_ms": p.load_ms,
            "prompt_tokens": t.prompt_tokens,
            "prompt_ms": t.prompt_ms,
            "prompt_tokens_per_s": t.prompt_tps(),
            "gen_tokens": t.gen_tokens,
            "decode_ms": t.decode_ms,
            "stop": gen_out.stop,
            "images": p.vision.images.iter().map(|i| serde_json::json!({
                "tokens": i.n_tokens,
                "grid_thw": i.grid,
                "encode": i.stats,
            })).collect::<Vec<_>>(),
            "vision_peaks": p.vision.peaks,
            "memory": report::memory_json(&p.session),
        });
        std::fs::write(path, serde_json::to_string_pretty(&j)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::ImageArgs;

    fn args(mmproj: Option<&str>, images: &[&str]) -> ImageArgs {
        ImageArgs {
            mmproj: mmproj.map(Into::into),
            images: images.iter().map(Into::into).collect(),
            min_pixels: None,
            max_pixels: None,
        }
    }

    #[test]
    fn an_image_without_a_projector_is_a_one_line_error() {
        let e = args(None, &["scene.png"]).mmproj().unwrap_err().to_string();
        assert_eq!(
            e,
            "--image needs --mmproj FILE (the model's vision projector)"
        );
        assert!(args(None, &[]).mmproj().unwrap().is_none());
        let p = args(Some("mm.gguf"), &["a.png"]);
        assert_eq!(p.mmproj().unwrap().unwrap().to_str(), Some("mm.gguf"));
    }
}
