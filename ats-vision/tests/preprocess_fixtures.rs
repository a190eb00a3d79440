//! The shared VL fixture images reproduce HF's pixel_values and image_grid_thw exactly.

mod common;

use ats_vision::preprocess::{
    DecodeLimits, PixelValues, PreprocessConfig, decode_image, preprocess, preprocess_bytes,
};
use common::{read, vl_images};
use safetensors::{Dtype, SafeTensors};

fn f32s(st: &SafeTensors, name: &str) -> (Vec<usize>, Vec<f32>) {
    let t = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(t.dtype(), Dtype::F32, "{name}");
    let v = t
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (t.shape().to_vec(), v)
}

fn i64s(st: &SafeTensors, name: &str) -> Vec<i64> {
    let t = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(t.dtype(), Dtype::I64, "{name}");
    t.data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// Max |a - b| and the number of bit-different values.
fn compare(got: &PixelValues, shape: &[usize], want: &[f32]) -> (f32, usize) {
    assert_eq!([got.n_patches, got.row_len], shape);
    assert_eq!(got.data.len(), want.len());
    let mut max = 0f32;
    let mut differing = 0;
    for (a, b) in got.data.iter().zip(want) {
        max = max.max((a - b).abs());
        differing += usize::from(a.to_bits() != b.to_bits());
    }
    (max, differing)
}

#[test]
fn fixture_images_match_hf_pixel_values() {
    let bytes = read(&vl_images().join("pixel_values.safetensors"));
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let cfg = PreprocessConfig::default();
    for (kind, grid) in [("small", [1, 12, 16]), ("large", [1, 18, 28])] {
        let png = read(&vl_images().join(format!("{kind}.png")));
        let img = decode_image(&png).unwrap();
        let got = preprocess(&img, &cfg).unwrap();
        let (shape, want) = f32s(&st, &format!("{kind}.pixel_values"));
        let (max, differing) = compare(&got, &shape, &want);
        println!(
            "{kind}: {} values, max |diff| {max:e}, {differing} not bit-identical",
            want.len()
        );
        assert!(max <= 1e-6, "{kind}: max diff {max}");
        assert_eq!(differing, 0, "{kind}: expected bit-exact");
        assert_eq!(got.grid_thw, grid);
        let thw = i64s(&st, &format!("{kind}.image_grid_thw"));
        assert_eq!(thw, got.grid_thw.map(|v| v as i64));
        assert_eq!(got.n_patches, grid.iter().product::<usize>());

        // The bytes path gives the same.
        let from_bytes = preprocess_bytes(&png, &cfg, &DecodeLimits::default()).unwrap();
        assert_eq!(from_bytes, got, "{kind}: preprocess_bytes");
    }
}
