//! Image bytes to RGB8 the way HF sees them: `PIL.Image.open(f).convert("RGB")`.
//!
//! Pillow's `convert("RGB")` drops alpha (it does not blend onto a background), repeats grey
//! into the three channels, looks palettes up (transparent entries keep their colour), and
//! keeps the high byte of 16-bit colour samples; [`decode_image`] does the same. One
//! deliberate difference: Pillow opens 16-bit greyscale PNGs as mode `I;16` and clamps them to
//! 255 on conversion (nearly all white); we keep the high byte as for colour. EXIF orientation
//! is not applied (HF's processor does not either when handed an opened image;
//! `transformers.image_utils.load_image` would). PNG, GIF, BMP and WebP (lossless and lossy)
//! give Pillow's bytes exactly. JPEG is decoded by zune-jpeg, not libjpeg-turbo; their IDCT
//! and chroma upsampling differ by a few levels (up to 8 measured at 4:2:0).

use std::io::{self, Cursor};

use image::{DynamicImage, ImageDecoder, ImageError, ImageFormat, ImageReader, RgbImage};

use super::PreprocessError;

/// What decoding may cost. The header is read first and checked against these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Largest accepted width or height, in pixels.
    pub max_side: u32,
    /// Largest accepted width * height. Streamed PNGs cost time, not memory, in proportion.
    pub max_pixels: u64,
    /// Largest memory (bytes) a full in-memory decode may take: the decoder's native buffer
    /// plus the RGB8 copy when the native layout is not RGB8. Bigger images are refused by
    /// [`decode_image`]; [`load_resized`](super::load_resized) streams them if they are PNG.
    pub max_alloc: u64,
}

impl Default for DecodeLimits {
    /// 65535 per side, 2^30 pixels, 256 MiB in memory.
    fn default() -> Self {
        Self {
            max_side: 65_535,
            max_pixels: 1 << 30,
            max_alloc: 256 << 20,
        }
    }
}

/// What the header says about an image.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Header {
    /// Container format.
    pub format: ImageFormat,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Bytes a full decode holds at its peak (native buffer + RGB8 copy).
    pub in_memory_bytes: u64,
}

/// Display name of a supported format, None for the rest.
pub(crate) fn format_name(format: ImageFormat) -> Option<&'static str> {
    Some(match format {
        ImageFormat::Png => "PNG",
        ImageFormat::Jpeg => "JPEG",
        ImageFormat::WebP => "WebP",
        ImageFormat::Gif => "GIF",
        ImageFormat::Bmp => "BMP",
        _ => return None,
    })
}

/// Name of `format` for messages.
pub(crate) fn name_of(format: ImageFormat) -> &'static str {
    format_name(format).unwrap_or("image")
}

/// Reads the header and checks it against `limits`; returns it with a decoder ready to run.
fn open<'a>(
    bytes: &'a [u8],
    limits: &DecodeLimits,
) -> Result<(Header, impl ImageDecoder + 'a), PreprocessError> {
    if bytes.is_empty() {
        return Err(PreprocessError::Empty);
    }
    let format = image::guess_format(bytes).map_err(|_| PreprocessError::UnknownFormat {
        head: bytes[..bytes.len().min(8)].to_vec(),
    })?;
    let Some(name) = format_name(format) else {
        return Err(PreprocessError::Unsupported {
            format: format!("{format:?}"),
            detail: "only PNG, JPEG, WebP, GIF and BMP are built in".into(),
        });
    };
    // a size no decoder takes (PNG and BMP can declare 2^31) is refused,
    // and named, before a decoder refuses it without saying it
    if let Some((width, height)) = declared_size(format, bytes)
        && width.max(height) > limits.max_side
    {
        check_dimensions(name, width, height, limits)?;
    }
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    // Dimensions are checked below, with a clearer message than the decoder's.
    let mut img_limits = image::Limits::default();
    img_limits.max_alloc = Some(limits.max_alloc);
    reader.limits(img_limits);
    let decoder = reader
        .into_decoder()
        .map_err(|e| map_image_error(name, e))?;
    let (width, height) = decoder.dimensions();
    check_dimensions(name, width, height, limits)?;
    let native = decoder.total_bytes();
    let rgb = u64::from(width) * u64::from(height) * 3;
    let in_memory_bytes = if decoder.color_type() == image::ColorType::Rgb8 {
        native
    } else {
        native.saturating_add(rgb)
    };
    Ok((
        Header {
            format,
            width,
            height,
            in_memory_bytes,
        },
        decoder,
    ))
}

/// The size a PNG (IHDR) or BMP (info header) declares, read from its bytes.
fn declared_size(format: ImageFormat, bytes: &[u8]) -> Option<(u32, u32)> {
    let be = |at: usize| Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    let le = |at: usize| {
        let v = i32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?);
        Some(v.unsigned_abs())
    };
    match format {
        ImageFormat::Png if bytes.get(12..16)? == b"IHDR" => Some((be(16)?, be(20)?)),
        // BITMAPINFOHEADER and later; the old 12-byte core header has u16 sides
        ImageFormat::Bmp if le(14)? >= 40 => Some((le(18)?, le(22)?)),
        _ => None,
    }
}

/// Refuses zero-sized images and those above the side and pixel-count limits.
pub(crate) fn check_dimensions(
    format: &'static str,
    width: u32,
    height: u32,
    limits: &DecodeLimits,
) -> Result<(), PreprocessError> {
    if width == 0 || height == 0 {
        return Err(PreprocessError::ZeroSized { width, height });
    }
    let too_large = |limit: String| {
        Err(PreprocessError::TooLarge {
            format,
            width,
            height,
            limit,
        })
    };
    if width.max(height) > limits.max_side {
        return too_large(format!("max_side is {}", limits.max_side));
    }
    if u64::from(width) * u64::from(height) > limits.max_pixels {
        return too_large(format!("max_pixels is {}", limits.max_pixels));
    }
    Ok(())
}

/// Reads only the header of `bytes`, checked against `limits`.
pub(crate) fn read_header(bytes: &[u8], limits: &DecodeLimits) -> Result<Header, PreprocessError> {
    open(bytes, limits).map(|(h, _)| h)
}

/// Decodes PNG, JPEG, WebP, GIF (first frame) or BMP bytes to RGB8 with default limits.
pub fn decode_image(bytes: &[u8]) -> Result<RgbImage, PreprocessError> {
    decode_image_with_limits(bytes, &DecodeLimits::default())
}

/// Decodes like [`decode_image`] under explicit limits, refusing before any pixel is decoded
/// when the header shows the image would break them.
pub fn decode_image_with_limits(
    bytes: &[u8],
    limits: &DecodeLimits,
) -> Result<RgbImage, PreprocessError> {
    let (header, decoder) = open(bytes, limits)?;
    let name = name_of(header.format);
    if header.in_memory_bytes > limits.max_alloc {
        return Err(PreprocessError::TooLarge {
            format: name,
            width: header.width,
            height: header.height,
            limit: format!(
                "decoding in memory needs {} bytes, max_alloc is {}",
                header.in_memory_bytes, limits.max_alloc
            ),
        });
    }
    let img = DynamicImage::from_decoder(decoder).map_err(|e| map_image_error(name, e))?;
    to_rgb8_like_pil(name, img)
}

/// Converts any decoded layout to RGB8 as Pillow's `convert("RGB")` does (see module docs).
fn to_rgb8_like_pil(format: &'static str, img: DynamicImage) -> Result<RgbImage, PreprocessError> {
    let (w, h) = (img.width(), img.height());
    let raw = match img {
        DynamicImage::ImageRgb8(i) => return Ok(i),
        DynamicImage::ImageRgba8(i) => samples_to_rgb(i.as_raw(), 4, |v| v),
        DynamicImage::ImageLuma8(i) => samples_to_rgb(i.as_raw(), 1, |v| v),
        DynamicImage::ImageLumaA8(i) => samples_to_rgb(i.as_raw(), 2, |v| v),
        DynamicImage::ImageRgb16(i) => samples_to_rgb(i.as_raw(), 3, high_byte),
        DynamicImage::ImageRgba16(i) => samples_to_rgb(i.as_raw(), 4, high_byte),
        DynamicImage::ImageLuma16(i) => samples_to_rgb(i.as_raw(), 1, high_byte),
        DynamicImage::ImageLumaA16(i) => samples_to_rgb(i.as_raw(), 2, high_byte),
        DynamicImage::ImageRgb32F(i) => samples_to_rgb(i.as_raw(), 3, unit_to_u8),
        DynamicImage::ImageRgba32F(i) => samples_to_rgb(i.as_raw(), 4, unit_to_u8),
        other => other.to_rgb8().into_raw(),
    };
    RgbImage::from_raw(w, h, raw).ok_or_else(|| PreprocessError::Corrupt {
        format,
        detail: format!("decoder returned too few samples for {w}x{h}"),
    })
}

/// Top 8 bits of a 16-bit sample (Pillow's `RGB;16B` unpacking).
fn high_byte(v: u16) -> u8 {
    (v >> 8) as u8
}

/// A [0, 1] float sample to u8, rounded and clamped.
fn unit_to_u8(v: f32) -> u8 {
    (v.clamp(0.0, 1.0) * 255.0).round() as u8
}

/// Packs pixels of `channels` samples (1 grey, 2 grey+alpha, 3 RGB, 4 RGBA) into RGB8,
/// replicating grey and dropping alpha.
pub(crate) fn samples_to_rgb<T: Copy>(
    samples: &[T],
    channels: usize,
    to8: impl Fn(T) -> u8,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(samples.len() / channels.max(1) * 3);
    for px in samples.chunks_exact(channels.max(1)) {
        if channels >= 3 {
            out.extend([to8(px[0]), to8(px[1]), to8(px[2])]);
        } else {
            let v = to8(px[0]);
            out.extend([v, v, v]);
        }
    }
    out
}

/// True when `err` or one of its sources is an unexpected end of input.
fn is_eof(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<io::Error>()
            && io.kind() == io::ErrorKind::UnexpectedEof
        {
            return true;
        }
        let msg = e.to_string().to_ascii_lowercase();
        let markers = [
            "unexpected eof",
            "end of file",
            "unexpected end",
            "not enough bytes",
            "no more bytes",
        ];
        if markers.iter().any(|m| msg.contains(m)) {
            return true;
        }
        cur = e.source();
    }
    false
}

/// Maps an `image` error to ours, telling truncation from corruption.
pub(crate) fn map_image_error(format: &'static str, err: ImageError) -> PreprocessError {
    let detail = err.to_string();
    match err {
        ImageError::Limits(_) => PreprocessError::TooLarge {
            format,
            width: 0,
            height: 0,
            limit: format!("the decoder refused: {detail}"),
        },
        ImageError::Unsupported(_) => PreprocessError::Unsupported {
            format: format.into(),
            detail,
        },
        ImageError::IoError(ref e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            PreprocessError::Truncated { format, detail }
        }
        ref e if is_eof(e) => PreprocessError::Truncated { format, detail },
        _ => PreprocessError::Corrupt { format, detail },
    }
}

/// Maps a `png` crate error to ours.
pub(crate) fn map_png_error(err: png::DecodingError) -> PreprocessError {
    let detail = err.to_string();
    match err {
        png::DecodingError::LimitsExceeded => PreprocessError::TooLarge {
            format: "PNG",
            width: 0,
            height: 0,
            limit: format!("the decoder refused: {detail}"),
        },
        ref e if is_eof(e) => PreprocessError::Truncated {
            format: "PNG",
            detail,
        },
        _ => PreprocessError::Corrupt {
            format: "PNG",
            detail,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_to_rgb_drops_alpha_and_repeats_grey() {
        assert_eq!(
            samples_to_rgb(&[1u8, 2, 3, 4, 5, 6, 7, 8], 4, |v| v),
            [1, 2, 3, 5, 6, 7]
        );
        assert_eq!(
            samples_to_rgb(&[9u8, 0, 4, 255], 2, |v| v),
            [9, 9, 9, 4, 4, 4]
        );
        assert_eq!(
            samples_to_rgb(&[0x12ffu16, 0xff00, 0x00ff], 3, high_byte),
            [0x12, 0xff, 0]
        );
    }

    #[test]
    fn sixteen_bit_grey_keeps_the_high_byte() {
        let grey = image::ImageBuffer::from_raw(3, 1, vec![0x00ffu16, 0x8000, 0xffff]).unwrap();
        let rgb = to_rgb8_like_pil("PNG", DynamicImage::ImageLuma16(grey)).unwrap();
        assert_eq!(rgb.as_raw(), &[0, 0, 0, 0x80, 0x80, 0x80, 0xff, 0xff, 0xff]);
        let la = image::ImageBuffer::from_raw(1, 1, vec![0x1234u16, 0]).unwrap();
        let rgb = to_rgb8_like_pil("PNG", DynamicImage::ImageLumaA16(la)).unwrap();
        assert_eq!(rgb.as_raw(), &[0x12; 3]);
    }

    #[test]
    fn limits_refuse_before_decoding() {
        let limits = DecodeLimits {
            max_side: 100,
            max_pixels: 50,
            max_alloc: 1 << 20,
        };
        assert!(matches!(
            check_dimensions("PNG", 0, 7, &limits),
            Err(PreprocessError::ZeroSized { .. })
        ));
        let err = check_dimensions("PNG", 101, 1, &limits).unwrap_err();
        assert!(
            err.to_string()
                .contains("101x1 exceeds the decode limit: max_side is 100"),
            "{err}"
        );
        let err = check_dimensions("PNG", 10, 6, &limits).unwrap_err();
        assert!(err.to_string().contains("max_pixels is 50"), "{err}");
        check_dimensions("PNG", 10, 5, &limits).unwrap();
    }
}
