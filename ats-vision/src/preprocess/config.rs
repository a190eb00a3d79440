//! Preprocessing settings, defaulting to HF's Qwen2-VL image processor.

use super::PreprocessError;

/// OpenAI CLIP channel means, as HF's `OPENAI_CLIP_MEAN` (Python floats).
const CLIP_MEAN: [f64; 3] = [0.48145466, 0.4578275, 0.40821073];
/// OpenAI CLIP channel standard deviations, as HF's `OPENAI_CLIP_STD`.
const CLIP_STD: [f64; 3] = [0.26862954, 0.26130258, 0.27577711];

/// How images become Qwen2-VL / Qwen2.5-VL pixel rows.
#[derive(Debug, Clone, PartialEq)]
pub struct PreprocessConfig {
    /// Side of one vision patch in pixels (14).
    pub patch_size: u32,
    /// Frames per temporal patch (2); a single image is repeated to fill them.
    pub temporal_patch_size: u32,
    /// Patches merged per side by the projector (2); sides are multiples of `patch * merge`.
    pub merge_size: u32,
    /// Fewest pixels after resizing (HF `shortest_edge`, 56*56).
    pub min_pixels: u64,
    /// Most pixels after resizing (HF `longest_edge`, 28*28*1280).
    pub max_pixels: u64,
    /// Per-channel mean subtracted after scaling to [0, 1].
    pub mean: [f32; 3],
    /// Per-channel standard deviation divided by after subtracting the mean.
    pub std: [f32; 3],
}

impl Default for PreprocessConfig {
    fn default() -> Self {
        // numpy builds the f32 mean/std from Python floats: f64 then rounded to f32.
        Self {
            patch_size: 14,
            temporal_patch_size: 2,
            merge_size: 2,
            min_pixels: 56 * 56,
            max_pixels: 28 * 28 * 1280,
            mean: CLIP_MEAN.map(|v| v as f32),
            std: CLIP_STD.map(|v| v as f32),
        }
    }
}

impl PreprocessConfig {
    /// Side alignment of resized images: `patch_size * merge_size` (28).
    pub fn factor(&self) -> u32 {
        self.patch_size.saturating_mul(self.merge_size)
    }

    /// Values in one pixel row: 3 channels x temporal x patch x patch (1176).
    pub fn row_len(&self) -> usize {
        3 * self.temporal_patch_size as usize * (self.patch_size as usize).pow(2)
    }

    /// Checks the values can work, naming the first one that cannot.
    pub fn validate(&self) -> Result<(), PreprocessError> {
        let bad = |msg: String| Err(PreprocessError::Config(msg));
        if self.patch_size == 0 || self.merge_size == 0 || self.temporal_patch_size == 0 {
            return bad(format!(
                "patch_size {}, merge_size {} and temporal_patch_size {} must be positive",
                self.patch_size, self.merge_size, self.temporal_patch_size
            ));
        }
        if self.patch_size.checked_mul(self.merge_size).is_none() {
            return bad("patch_size * merge_size overflows u32".into());
        }
        if self.min_pixels == 0 || self.min_pixels > self.max_pixels {
            return bad(format!(
                "need 0 < min_pixels ({}) <= max_pixels ({})",
                self.min_pixels, self.max_pixels
            ));
        }
        if let Some(c) = (0..3).find(|&c| !(self.std[c].is_finite() && self.std[c] != 0.0)) {
            return bad(format!(
                "std[{c}] = {} must be finite and non-zero",
                self.std[c]
            ));
        }
        if let Some(c) = (0..3).find(|&c| !self.mean[c].is_finite()) {
            return bad(format!("mean[{c}] = {} must be finite", self.mean[c]));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_hf_preprocessor_config() {
        let c = PreprocessConfig::default();
        assert_eq!(
            (c.patch_size, c.temporal_patch_size, c.merge_size),
            (14, 2, 2)
        );
        assert_eq!((c.min_pixels, c.max_pixels), (3136, 1_003_520));
        assert_eq!((c.factor(), c.row_len()), (28, 1176));
        assert_eq!(
            c.mean,
            [
                0.48145466f64 as f32,
                0.4578275f64 as f32,
                0.40821073f64 as f32
            ]
        );
        assert_eq!(
            c.std,
            [
                0.26862954f64 as f32,
                0.26130258f64 as f32,
                0.27577711f64 as f32
            ]
        );
        c.validate().unwrap();
    }

    #[test]
    fn validate_names_the_bad_value() {
        let mut c = PreprocessConfig {
            merge_size: 0,
            ..Default::default()
        };
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("merge_size 0")
        );
        c = PreprocessConfig {
            min_pixels: 10,
            max_pixels: 5,
            ..Default::default()
        };
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("min_pixels (10)")
        );
        c = PreprocessConfig {
            std: [1.0, 0.0, 1.0],
            ..Default::default()
        };
        assert!(c.validate().unwrap_err().to_string().contains("std[1]"));
        c = PreprocessConfig {
            mean: [f32::NAN, 0.0, 1.0],
            ..Default::default()
        };
        assert!(c.validate().unwrap_err().to_string().contains("mean[0]"));
    }
}
