//! Normalisation and the processor's patch-row layout.

use image::RgbImage;

use super::{PreprocessConfig, PreprocessError};

/// Normalised pixel rows ready for the vision tower's patch embedding.
#[derive(Debug, Clone, PartialEq)]
pub struct PixelValues {
    /// `n_patches * row_len` values, row-major.
    pub data: Vec<f32>,
    /// Number of rows (patches): `t * h * w` of `grid_thw`.
    pub n_patches: usize,
    /// Values per row: 3 channels x temporal x patch x patch (1176).
    pub row_len: usize,
    /// (t, h, w) of the grid in patches; t is 1 for one image.
    pub grid_thw: [usize; 3],
}

impl PixelValues {
    /// Row `i` (one patch).
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.row_len..(i + 1) * self.row_len]
    }
}

/// Per channel, the normalised value of each u8 level.
///
/// Same operations as HF: `f32(f64(v) * (1/255))`, then `(x - mean) / std` in f32.
fn level_tables(cfg: &PreprocessConfig) -> [[f32; 256]; 3] {
    let mut lut = [[0f32; 256]; 3];
    for (c, table) in lut.iter_mut().enumerate() {
        for (v, out) in table.iter_mut().enumerate() {
            let x = (v as f64 * (1.0 / 255.0)) as f32;
            *out = (x - cfg.mean[c]) / cfg.std[c];
        }
    }
    lut
}

/// Normalises `img` and lays it out in the processor's row order, without resizing.
///
/// Rows go by 2x2 merge group (raster order over the `h/merge` x `w/merge` grid), and within a
/// group by patch in raster order. A row is `x[c][t][py][px]` for channel, temporal copy (the
/// image repeated `temporal_patch_size` times), and pixel in the patch. Both sides of `img` must
/// be multiples of `patch_size * merge_size`.
pub fn patchify(img: &RgbImage, cfg: &PreprocessConfig) -> Result<PixelValues, PreprocessError> {
    cfg.validate()?;
    let (w, h) = img.dimensions();
    let factor = cfg.factor();
    if w == 0 || h == 0 {
        return Err(PreprocessError::ZeroSized {
            width: w,
            height: h,
        });
    }
    if !w.is_multiple_of(factor) || !h.is_multiple_of(factor) {
        return Err(PreprocessError::Config(format!(
            "patchify needs sides that are multiples of {factor}, got {w}x{h}"
        )));
    }
    let p = cfg.patch_size as usize;
    let m = cfg.merge_size as usize;
    let temporal = cfg.temporal_patch_size as usize;
    let (gh, gw) = (h as usize / p, w as usize / p);
    let n_patches = gh * gw;
    let row_len = cfg.row_len();
    let frame_len = p * p;
    let lut = level_tables(cfg);
    let pixels = img.as_raw();
    let stride = w as usize * 3;

    let mut data = Vec::with_capacity(n_patches * row_len);
    for bh in 0..gh / m {
        for bw in 0..gw / m {
            for mh in 0..m {
                for mw in 0..m {
                    let (y0, x0) = ((bh * m + mh) * p, (bw * m + mw) * p);
                    for (c, table) in lut.iter().enumerate() {
                        let start = data.len();
                        for py in 0..p {
                            let row = &pixels[(y0 + py) * stride + x0 * 3..][..p * 3];
                            data.extend(row.chunks_exact(3).map(|px| table[px[c] as usize]));
                        }
                        // The other temporal slots repeat the frame.
                        for _ in 1..temporal {
                            data.extend_from_within(start..start + frame_len);
                        }
                    }
                }
            }
        }
    }
    debug_assert_eq!(data.len(), n_patches * row_len);
    Ok(PixelValues {
        data,
        n_patches,
        row_len,
        grid_thw: [1, gh, gw],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_order_and_rounding() {
        let cfg = PreprocessConfig::default();
        let lut = level_tables(&cfg);
        for (c, table) in lut.iter().enumerate() {
            for (v, &got) in table.iter().enumerate() {
                // numpy: (f64 * 1/255).astype(f32) equals f32 division for every u8.
                let x = v as f32 / 255.0;
                assert_eq!(got, (x - cfg.mean[c]) / cfg.std[c]);
            }
        }
    }

    #[test]
    fn layout_by_merge_group_then_channel_time_pixel() {
        // 56x28 (w x h): grid 2x4 patches, 2 merge groups side by side.
        let img = RgbImage::from_fn(56, 28, |x, y| image::Rgb([x as u8, y as u8, 7]));
        let cfg = PreprocessConfig::default();
        let pv = patchify(&img, &cfg).unwrap();
        assert_eq!(
            (pv.n_patches, pv.row_len, pv.grid_thw),
            (8, 1176, [1, 2, 4])
        );
        let lut = level_tables(&cfg);
        // Row 5: group 1 (x 28..56), patch (mh 0, mw 1) -> pixel origin x = 42, y = 0.
        let row = pv.row(5);
        for (t, py, px) in [(0, 0, 0), (1, 3, 9), (0, 13, 13)] {
            let off = t * 196 + py * 14 + px;
            assert_eq!(row[off], lut[0][42 + px], "R t{t} py{py} px{px}");
            assert_eq!(row[392 + off], lut[1][py], "G");
            assert_eq!(row[784 + off], lut[2][7], "B");
        }
        // Row 2: group 0, patch (mh 1, mw 0) -> origin x = 0, y = 14.
        assert_eq!(pv.row(2)[392], lut[1][14]);
    }

    #[test]
    fn unaligned_sides_are_refused() {
        let img = RgbImage::new(30, 28);
        let err = patchify(&img, &PreprocessConfig::default()).unwrap_err();
        assert!(
            err.to_string().contains("multiples of 28, got 30x28"),
            "{err}"
        );
    }
}
