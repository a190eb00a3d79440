//! The fuzz target `image_preprocess`: image bytes through decoding and the
//! vision preprocessing, within the decoder's limits.

use std::io::Cursor;

use ats_vision::preprocess::{DecodeLimits, PreprocessConfig, preprocess_bytes};

use super::{Target, err, words};
use crate::fixtures;

/// Image bytes of every format ATS decodes, re-encoded from the fixture
/// images; decode limits small enough that no input can cost more than a few
/// tens of MB or milliseconds.
pub struct ImagePreprocess {
    cfg: PreprocessConfig,
    limits: DecodeLimits,
}

impl Target for ImagePreprocess {
    const NAME: &'static str = "image_preprocess";
    const MAX_LEN: usize = 1 << 18;

    fn new() -> Self {
        ImagePreprocess {
            cfg: PreprocessConfig::default(),
            limits: DecodeLimits {
                max_side: 8192,
                max_pixels: 4 << 20,
                max_alloc: 32 << 20,
            },
        }
    }

    fn seeds() -> Vec<Vec<u8>> {
        let mut seeds = Vec::new();
        for name in ["small.png", "large.png"] {
            let png = std::fs::read(fixtures().join("vl_images").join(name)).unwrap();
            let img = image::load_from_memory(&png).unwrap();
            seeds.push(png);
            for fmt in [
                image::ImageFormat::Jpeg,
                image::ImageFormat::WebP,
                image::ImageFormat::Gif,
                image::ImageFormat::Bmp,
            ] {
                let mut out = Cursor::new(Vec::new());
                img.to_rgba8().write_to(&mut out, fmt).unwrap_or_else(|_| {
                    img.to_rgb8().write_to(&mut out, fmt).unwrap();
                });
                seeds.push(out.into_inner());
            }
        }
        seeds
    }

    fn dict() -> Vec<Vec<u8>> {
        words(&[
            "\u{89}PNG\r\n\u{1a}\n",
            "IHDR",
            "IDAT",
            "IEND",
            "PLTE",
            "tRNS",
            "RIFF",
            "WEBPVP8L",
            "VP8X",
            "GIF89a",
            "BM",
        ])
    }

    fn run(&self, b: &[u8]) -> Result<String, String> {
        let pv = preprocess_bytes(b, &self.cfg, &self.limits).map_err(err)?;
        let [t, h, w] = pv.grid_thw;
        assert_eq!(pv.n_patches, t * h * w);
        assert_eq!(pv.data.len(), pv.n_patches * pv.row_len);
        assert!(pv.data.iter().all(|v| v.is_finite()));
        Ok(format!("{t}x{h}x{w}"))
    }
}
