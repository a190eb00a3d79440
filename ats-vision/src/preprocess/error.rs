//! Errors of image decoding and preprocessing.

use thiserror::Error;

/// Why image bytes or an image could not be turned into pixel values.
#[derive(Debug, Error)]
pub enum PreprocessError {
    /// The input held no bytes at all.
    #[error("image data is empty (0 bytes)")]
    Empty,
    /// The bytes match no known image signature.
    #[error("unrecognised image data (not PNG, JPEG, WebP, GIF or BMP); first bytes {head:02x?}")]
    UnknownFormat {
        /// Up to 8 leading bytes of the input.
        head: Vec<u8>,
    },
    /// A recognised format or format feature this build does not decode (e.g. TIFF).
    #[error("unsupported image format {format}: {detail}")]
    Unsupported {
        /// Format name.
        format: String,
        /// What the decoder reported.
        detail: String,
    },
    /// The data ends before the image does.
    #[error("truncated {format} image: {detail}")]
    Truncated {
        /// Format name.
        format: &'static str,
        /// What the decoder reported.
        detail: String,
    },
    /// The data violates the format.
    #[error("corrupt {format} image: {detail}")]
    Corrupt {
        /// Format name.
        format: &'static str,
        /// What the decoder reported.
        detail: String,
    },
    /// Width or height is zero (of a decoded image or of a resize target).
    #[error("image has no pixels ({width}x{height})")]
    ZeroSized {
        /// Width in pixels.
        width: u32,
        /// Height in pixels.
        height: u32,
    },
    /// The image is larger than the [`DecodeLimits`](super::DecodeLimits) allow.
    #[error("{format} image {width}x{height} exceeds the decode limit: {limit}")]
    TooLarge {
        /// Format name.
        format: &'static str,
        /// Width in pixels (0 when the decoder refused before reporting it).
        width: u32,
        /// Height in pixels (0 when the decoder refused before reporting it).
        height: u32,
        /// Which limit, with its value.
        limit: String,
    },
    /// Like HF's `smart_resize`, aspect ratios above 200 are refused.
    #[error("image {height}x{width} (HxW) has aspect ratio {ratio:.1}, above the limit of 200")]
    AspectRatio {
        /// Height in pixels.
        height: u32,
        /// Width in pixels.
        width: u32,
        /// max(h, w) / min(h, w).
        ratio: f64,
    },
    /// Configuration values that cannot work.
    #[error("invalid preprocess config: {0}")]
    Config(String),
}
