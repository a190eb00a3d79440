//! PNGs too large to hold decoded: inflate row by row straight into the resizer.

use std::io::Cursor;

use image::RgbImage;

use super::decode::{map_png_error, samples_to_rgb};
use super::resize::RowResizer;
use super::{DecodeLimits, PreprocessError};

/// Decodes a non-interlaced PNG directly to `out_w` x `out_h` with Pillow's bicubic resize.
///
/// Gives the same bytes as decoding fully and then resizing, while holding only one source
/// row and a few resampled rows (plus the output). Interlaced PNGs deliver rows out of order
/// and are refused as [`PreprocessError::TooLarge`].
pub(crate) fn decode_png_resized(
    bytes: &[u8],
    out_w: u32,
    out_h: u32,
    limits: &DecodeLimits,
) -> Result<RgbImage, PreprocessError> {
    let budget = usize::try_from(limits.max_alloc).unwrap_or(usize::MAX);
    let mut decoder =
        png::Decoder::new_with_limits(Cursor::new(bytes), png::Limits { bytes: budget });
    // Palette -> RGB(A), low bit depths -> 8, 16-bit -> high byte: what Pillow does on open.
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().map_err(map_png_error)?;
    let info = reader.info();
    let (w, h) = (info.width, info.height);
    if info.interlaced {
        return Err(PreprocessError::TooLarge {
            format: "PNG",
            width: w,
            height: h,
            limit: format!(
                "interlaced PNGs cannot be streamed and a full decode exceeds max_alloc ({})",
                limits.max_alloc
            ),
        });
    }
    let channels = reader.output_color_type().0.samples();
    let mut resizer = RowResizer::new(w, h, out_w, out_h)?;
    while let Some(row) = reader.next_row().map_err(map_png_error)? {
        resizer.push_row(&samples_to_rgb(row.data(), channels, |v| v));
    }
    let rows = resizer.rows_in();
    resizer.finish().ok_or_else(|| PreprocessError::Truncated {
        format: "PNG",
        detail: format!("image data ends after {rows} of {h} rows"),
    })
}
