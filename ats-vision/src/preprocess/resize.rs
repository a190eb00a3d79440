//! Pillow's BICUBIC resize, reproduced bit for bit, fed one source row at a time.
//!
//! HF's `Qwen2VLImageProcessorPil` resizes with `PIL.Image.resize(size, BICUBIC)`. Pillow
//! resamples separably, one pass per axis, each pass rounded and clamped to u8. Pillow 13 runs
//! the vertical pass first when the height shrinks by more than twice as many pixels as the
//! width (older releases always ran the horizontal pass first; results differ slightly when
//! that rule fires). Each output sample has its own taps of the Keys cubic (a = -0.5)
//! stretched by the downscale factor (support 2 * max(1, in/out), so downscaling low-passes),
//! normalised to sum 1 and turned into 22-bit fixed point; sums start at half a unit and are
//! shifted back and clamped. Doing the same integer arithmetic gives the same bytes. Rows
//! stream through a ring of buffered rows, so the source never has to be in memory at once.

use image::RgbImage;

use super::PreprocessError;

/// Fixed-point fraction bits of the weights (Pillow: 32 - 8 - 2).
const PRECISION_BITS: u32 = 22;
/// Rounding offset the sums start from.
const HALF: i32 = 1 << (PRECISION_BITS - 1);

/// Keys' cubic convolution kernel with a = -0.5, written as Pillow evaluates it.
fn bicubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

/// Fixed-point taps for every output sample along one axis.
#[derive(Debug)]
struct Taps {
    /// Stride of `weights` per output sample (the most taps any sample can have).
    ksize: usize,
    /// (first source index, number of taps) per output sample.
    bounds: Vec<(usize, usize)>,
    /// `ksize` weights per output sample, in 1 << PRECISION_BITS units.
    weights: Vec<i32>,
}

impl Taps {
    /// Taps mapping `in_size` samples onto `out_size` (both > 0).
    fn bicubic(in_size: usize, out_size: usize) -> Self {
        // Pillow takes the box edges as f32, then works in f64.
        let scale = f64::from(in_size as f32) / out_size as f64;
        let filterscale = scale.max(1.0);
        let support = 2.0 * filterscale;
        let ksize = support.ceil() as usize * 2 + 1;
        let ss = 1.0 / filterscale;
        let mut bounds = Vec::with_capacity(out_size);
        let mut weights = vec![0i32; out_size * ksize];
        let mut w = vec![0f64; ksize];
        for (xx, out) in weights.chunks_exact_mut(ksize).enumerate() {
            let center = (xx as f64 + 0.5) * scale;
            // `as` truncates toward zero like C's (int) cast; negatives clamp to 0 anyway.
            let xmin = ((center - support + 0.5) as i64).max(0) as usize;
            let xend = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
            let n = xend.saturating_sub(xmin).min(ksize);
            let mut total = 0.0;
            for (x, wx) in w[..n].iter_mut().enumerate() {
                *wx = bicubic(((x + xmin) as f64 - center + 0.5) * ss);
                total += *wx;
            }
            for (o, &wx) in out.iter_mut().zip(&w[..n]) {
                let k = if total != 0.0 { wx / total } else { wx };
                let scaled = k * f64::from(1u32 << PRECISION_BITS);
                // Round half away from zero, as Pillow's normalize_coeffs_8bpc.
                *o = if k < 0.0 {
                    (scaled - 0.5) as i32
                } else {
                    (scaled + 0.5) as i32
                };
            }
            bounds.push((xmin, n));
        }
        Self {
            ksize,
            bounds,
            weights,
        }
    }

    /// The (first source index, weights) of output sample `i`.
    fn tap(&self, i: usize) -> (usize, &[i32]) {
        let (start, n) = self.bounds[i];
        (start, &self.weights[i * self.ksize..i * self.ksize + n])
    }
}

/// Pillow's clip8: shift out the fraction bits (floor) and clamp to u8.
#[inline]
fn clip8(v: i32) -> u8 {
    (v >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Horizontal pass over one RGB row: `src` has the input width, `dst` the output width.
fn resample_row(taps: &Taps, src: &[u8], dst: &mut [u8]) {
    for (xx, px) in dst.chunks_exact_mut(3).enumerate() {
        let (start, k) = taps.tap(xx);
        let (mut r, mut g, mut b) = (HALF, HALF, HALF);
        for (&w, s) in k.iter().zip(src[start * 3..].chunks_exact(3)) {
            r += i32::from(s[0]) * w;
            g += i32::from(s[1]) * w;
            b += i32::from(s[2]) * w;
        }
        px.copy_from_slice(&[clip8(r), clip8(g), clip8(b)]);
    }
}

/// Whether Pillow (13) runs the horizontal pass first: yes unless the height shrinks by more
/// than twice as many pixels as the width does. (Older Pillow always went horizontal first.)
fn horizontal_first(in_w: usize, in_h: usize, out_w: usize, out_h: usize) -> bool {
    let dh = in_h as i64 - out_h as i64;
    let dw = in_w as i64 - out_w as i64;
    !(dh > 0 && dh > dw * 2)
}

/// Resizes an RGB8 image fed top to bottom, one row per [`push_row`](Self::push_row).
///
/// Memory is the output plus `ksize` buffered rows (about 4 * vertical downscale + 1), so a
/// source far larger than RAM can be reduced while it is being decoded.
pub(crate) struct RowResizer {
    in_w: usize,
    in_h: usize,
    out_w: usize,
    out_h: usize,
    /// None when the width is unchanged (Pillow skips that pass).
    horiz: Option<Taps>,
    /// None when the height is unchanged.
    vert: Option<Taps>,
    /// Pass order when both passes run.
    h_first: bool,
    /// Rows waiting for the vertical pass (source row r in slot r % ksize): resampled
    /// horizontally already (`out_w` wide) or not yet (`in_w` wide).
    ring: Vec<u8>,
    /// Width in pixels of the ring's rows.
    ring_w: usize,
    /// Vertical accumulators for one row of the ring's width.
    acc: Vec<i32>,
    /// Vertically resampled row awaiting the horizontal pass (vertical-first order).
    tmp: Vec<u8>,
    rows_in: usize,
    rows_out: usize,
    out: Vec<u8>,
}

impl RowResizer {
    /// A resizer from `in_w` x `in_h` to `out_w` x `out_h`; zero sides are refused.
    pub(crate) fn new(
        in_w: u32,
        in_h: u32,
        out_w: u32,
        out_h: u32,
    ) -> Result<Self, PreprocessError> {
        if in_w == 0 || in_h == 0 {
            return Err(PreprocessError::ZeroSized {
                width: in_w,
                height: in_h,
            });
        }
        if out_w == 0 || out_h == 0 {
            return Err(PreprocessError::ZeroSized {
                width: out_w,
                height: out_h,
            });
        }
        let (in_w, in_h, out_w, out_h) =
            (in_w as usize, in_h as usize, out_w as usize, out_h as usize);
        let horiz = (in_w != out_w).then(|| Taps::bicubic(in_w, out_w));
        let vert = (in_h != out_h).then(|| Taps::bicubic(in_h, out_h));
        let h_first = horizontal_first(in_w, in_h, out_w, out_h);
        let ring_w = if h_first { out_w } else { in_w };
        let ring_rows = vert.as_ref().map_or(0, |t| t.ksize);
        let vertical = ring_rows > 0;
        Ok(Self {
            in_w,
            in_h,
            out_w,
            out_h,
            horiz,
            vert,
            h_first,
            ring: vec![0; ring_rows * ring_w * 3],
            ring_w,
            acc: vec![0; if vertical { ring_w * 3 } else { 0 }],
            tmp: vec![0; if vertical && !h_first { in_w * 3 } else { 0 }],
            rows_in: 0,
            rows_out: 0,
            out: vec![0; out_w * out_h * 3],
        })
    }

    /// Feeds the next source row (`in_w * 3` bytes of RGB). Rows past the height are ignored.
    pub(crate) fn push_row(&mut self, row: &[u8]) {
        debug_assert_eq!(row.len(), self.in_w * 3);
        if self.rows_in >= self.in_h {
            return;
        }
        let r = self.rows_in;
        match &self.vert {
            None => {
                let w3 = self.out_w * 3;
                resample_or_copy(
                    self.horiz.as_ref(),
                    row,
                    &mut self.out[r * w3..(r + 1) * w3],
                );
            }
            Some(t) => {
                let w3 = self.ring_w * 3;
                let slot = (r % t.ksize) * w3;
                let dst = &mut self.ring[slot..slot + w3];
                let horiz = if self.h_first {
                    self.horiz.as_ref()
                } else {
                    None
                };
                resample_or_copy(horiz, row, dst);
            }
        }
        self.rows_in += 1;
        self.emit_ready_rows();
    }

    /// Vertical pass (and, vertical-first, the horizontal one) for every output row whose
    /// source rows have all arrived.
    fn emit_ready_rows(&mut self) {
        let Some(t) = &self.vert else { return };
        let ring3 = self.ring_w * 3;
        let out3 = self.out_w * 3;
        while self.rows_out < self.out_h {
            let (start, k) = t.tap(self.rows_out);
            if start + k.len() > self.rows_in {
                break;
            }
            self.acc.fill(HALF);
            for (j, &w) in k.iter().enumerate() {
                let slot = ((start + j) % t.ksize) * ring3;
                for (a, &s) in self.acc.iter_mut().zip(&self.ring[slot..slot + ring3]) {
                    *a += i32::from(s) * w;
                }
            }
            let dst = &mut self.out[self.rows_out * out3..(self.rows_out + 1) * out3];
            if self.h_first {
                for (d, &a) in dst.iter_mut().zip(&self.acc) {
                    *d = clip8(a);
                }
            } else {
                for (d, &a) in self.tmp.iter_mut().zip(&self.acc) {
                    *d = clip8(a);
                }
                resample_or_copy(self.horiz.as_ref(), &self.tmp, dst);
            }
            self.rows_out += 1;
        }
    }

    /// Source rows fed so far.
    pub(crate) fn rows_in(&self) -> usize {
        self.rows_in
    }

    /// The resized image, or None when fewer than `in_h` rows were fed.
    pub(crate) fn finish(self) -> Option<RgbImage> {
        if self.rows_in < self.in_h {
            return None;
        }
        RgbImage::from_raw(self.out_w as u32, self.out_h as u32, self.out)
    }
}

/// Horizontal pass with `taps`, or a plain copy when the width does not change.
fn resample_or_copy(taps: Option<&Taps>, src: &[u8], dst: &mut [u8]) {
    match taps {
        Some(t) => resample_row(t, src, dst),
        None => dst.copy_from_slice(src),
    }
}

/// Resizes `img` to `width` x `height` exactly as Pillow's `Image.resize(..., BICUBIC)`.
pub fn resize_bicubic(
    img: &RgbImage,
    width: u32,
    height: u32,
) -> Result<RgbImage, PreprocessError> {
    if img.dimensions() == (width, height) {
        return Ok(img.clone());
    }
    let mut rs = RowResizer::new(img.width(), img.height(), width, height)?;
    for row in img.as_raw().chunks_exact(img.width() as usize * 3) {
        rs.push_row(row);
    }
    rs.finish()
        .ok_or(PreprocessError::ZeroSized { width, height })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_values() {
        assert_eq!(bicubic(0.0), 1.0);
        assert_eq!(bicubic(1.0), 0.0);
        assert_eq!(bicubic(0.5), 0.5625);
        assert_eq!(bicubic(-1.5), -0.0625);
        assert_eq!(bicubic(2.0), 0.0);
    }

    #[test]
    fn same_size_taps_are_identity() {
        let t = Taps::bicubic(7, 7);
        for i in 0..7 {
            let (start, k) = t.tap(i);
            let unit = k.iter().position(|&w| w == 1 << PRECISION_BITS).unwrap();
            assert_eq!(start + unit, i);
            assert_eq!(k.iter().filter(|&&w| w != 0).count(), 1);
        }
    }

    #[test]
    fn taps_sum_to_one_and_stay_in_bounds() {
        for (i, o) in [
            (61, 56),
            (300, 29),
            (3, 200),
            (1, 28),
            (2560, 1316),
            (17, 5),
        ] {
            let t = Taps::bicubic(i, o);
            for x in 0..o {
                let (start, k) = t.tap(x);
                assert!(start + k.len() <= i && !k.is_empty() && k.len() <= t.ksize);
                let s: i32 = k.iter().sum();
                assert!(
                    (s - (1 << PRECISION_BITS)).abs() <= k.len() as i32,
                    "{i}->{o} at {x}: {s}"
                );
            }
        }
    }

    #[test]
    fn flat_image_stays_flat() {
        let img = RgbImage::from_pixel(37, 23, image::Rgb([12, 200, 255]));
        for (w, h) in [(5, 3), (56, 84), (37, 100), (200, 23)] {
            let out = resize_bicubic(&img, w, h).unwrap();
            assert_eq!(out.dimensions(), (w, h));
            assert!(out.pixels().all(|p| p.0 == [12, 200, 255]), "{w}x{h}");
        }
    }

    #[test]
    fn zero_sizes_are_errors() {
        let img = RgbImage::new(4, 4);
        assert!(matches!(
            resize_bicubic(&img, 0, 4),
            Err(PreprocessError::ZeroSized { .. })
        ));
        assert!(RowResizer::new(0, 3, 4, 4).is_err());
    }

    #[test]
    fn pass_order_follows_pillow_13() {
        assert!(horizontal_first(61, 45, 56, 56)); // height grows
        assert!(horizontal_first(300, 200, 29, 17)); // dh 183 < 2 * dw 542
        assert!(!horizontal_first(3, 200, 28, 196)); // dh 4 > 2 * dw -50
        assert!(!horizontal_first(3, 200, 1, 57)); // dh 143 > 2 * dw 4
        assert!(horizontal_first(10, 10, 4, 4)); // equal shrink
    }

    #[test]
    fn missing_rows_give_none() {
        let mut rs = RowResizer::new(4, 4, 2, 2).unwrap();
        rs.push_row(&[0; 12]);
        assert_eq!(rs.rows_in(), 1);
        assert!(rs.finish().is_none());
    }
}
