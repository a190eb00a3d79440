//! Image preprocessing for Qwen2-VL / Qwen2.5-VL, matching HF's `Qwen2VLImageProcessorPil`.
//!
//! bytes -> [`decode_image`] (RGB8 as Pillow's `convert("RGB")`) -> [`smart_resize`] target ->
//! [`resize_bicubic`] (Pillow's BICUBIC, bit-exact) -> [`patchify`] (scale, normalise, rows
//! in merge-group order) -> [`PixelValues`].
//!
//! Very large inputs: [`decode_image`] refuses images whose decode would exceed
//! [`DecodeLimits::max_alloc`] (256 MiB by default) after reading only the header.
//! [`load_resized`] and [`preprocess_bytes`] instead stream such PNGs row by row through the
//! resizer, so e.g. a 20000x20000 PNG becomes 980x980 without holding its 1.2 GB of pixels;
//! other formats that large are refused. (Pillow itself refuses images above ~179 Mpx.)

mod config;
mod decode;
mod error;
mod patchify;
mod png_stream;
mod resize;
mod smart_resize;

use std::borrow::Cow;

use image::{ImageFormat, RgbImage};

pub use config::PreprocessConfig;
pub use decode::{DecodeLimits, decode_image, decode_image_with_limits};
pub use error::PreprocessError;
pub use patchify::{PixelValues, patchify};
pub use resize::resize_bicubic;
pub use smart_resize::smart_resize;

/// The size `cfg` resizes an image of `width` x `height` to, as (width, height).
fn target_size(
    width: u32,
    height: u32,
    cfg: &PreprocessConfig,
) -> Result<(u32, u32), PreprocessError> {
    let (h, w) = smart_resize(height, width, cfg.factor(), cfg.min_pixels, cfg.max_pixels)?;
    Ok((w, h))
}

/// Resizes `img` to its [`smart_resize`] size with Pillow's bicubic, then [`patchify`]s it:
/// the pixel values and grid HF's processor gives for this image.
pub fn preprocess(img: &RgbImage, cfg: &PreprocessConfig) -> Result<PixelValues, PreprocessError> {
    cfg.validate()?;
    let (w, h) = target_size(img.width(), img.height(), cfg)?;
    let resized = if img.dimensions() == (w, h) {
        Cow::Borrowed(img)
    } else {
        Cow::Owned(resize_bicubic(img, w, h)?)
    };
    patchify(&resized, cfg)
}

/// Decodes `bytes` at the size [`preprocess`] would resize them to, under `limits`.
///
/// Same pixels as `resize_bicubic(&decode_image(bytes)?, ..)`; PNGs whose full decode would
/// exceed `limits.max_alloc` are streamed instead of refused (see the module docs).
pub fn load_resized(
    bytes: &[u8],
    cfg: &PreprocessConfig,
    limits: &DecodeLimits,
) -> Result<RgbImage, PreprocessError> {
    cfg.validate()?;
    let header = decode::read_header(bytes, limits)?;
    let (w, h) = target_size(header.width, header.height, cfg)?;
    let name = decode::name_of(header.format);
    let out_bytes = u64::from(w) * u64::from(h) * 3;
    if out_bytes > limits.max_alloc {
        return Err(PreprocessError::TooLarge {
            format: name,
            width: header.width,
            height: header.height,
            limit: format!(
                "the resized {w}x{h} image needs {out_bytes} bytes, max_alloc is {}",
                limits.max_alloc
            ),
        });
    }
    if header.in_memory_bytes <= limits.max_alloc {
        let img = decode_image_with_limits(bytes, limits)?;
        return if img.dimensions() == (w, h) {
            Ok(img)
        } else {
            resize_bicubic(&img, w, h)
        };
    }
    if header.format == ImageFormat::Png {
        return png_stream::decode_png_resized(bytes, w, h, limits);
    }
    Err(PreprocessError::TooLarge {
        format: name,
        width: header.width,
        height: header.height,
        limit: format!(
            "decoding in memory needs {} bytes, max_alloc is {} (only PNG is streamed)",
            header.in_memory_bytes, limits.max_alloc
        ),
    })
}

/// The language tokens an image will take, from its header alone (no pixel
/// is decoded): its resized size in patches, merged `merge_size` x
/// `merge_size` into one token each. Lets a caller refuse an image the
/// context cannot hold before spending time on it.
pub fn planned_tokens(
    bytes: &[u8],
    cfg: &PreprocessConfig,
    limits: &DecodeLimits,
) -> Result<usize, PreprocessError> {
    cfg.validate()?;
    let header = decode::read_header(bytes, limits)?;
    let (w, h) = target_size(header.width, header.height, cfg)?;
    let merged = u64::from(cfg.factor());
    Ok(((u64::from(w) / merged) * (u64::from(h) / merged)) as usize)
}

/// [`load_resized`] then [`patchify`]: image file bytes to pixel values.
pub fn preprocess_bytes(
    bytes: &[u8],
    cfg: &PreprocessConfig,
    limits: &DecodeLimits,
) -> Result<PixelValues, PreprocessError> {
    patchify(&load_resized(bytes, cfg, limits)?, cfg)
}
