//! Agreement with Pillow and transformers, from references made by
//! `test-data/preprocess/gen_reference.py` (Pillow 13.0, transformers 5.24).

mod common;

use std::io::Cursor;

use ats_vision::preprocess::{
    DecodeLimits, PreprocessConfig, decode_image, load_resized, preprocess, preprocess_bytes,
    resize_bicubic,
};
use common::{read, test_data};
use image::{DynamicImage, ImageFormat, Rgb, RgbImage};
use safetensors::SafeTensors;
use serde_json::Value;

fn manifest() -> Value {
    serde_json::from_slice(&read(&test_data().join("manifest.json"))).unwrap()
}

fn load(name: &str) -> RgbImage {
    decode_image(&read(&test_data().join(name))).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// (max |diff|, differing samples) between two same-sized images.
fn diff(a: &RgbImage, b: &RgbImage) -> (u8, usize) {
    assert_eq!(a.dimensions(), b.dimensions());
    a.as_raw()
        .iter()
        .zip(b.as_raw())
        .fold((0, 0), |(m, n), (x, y)| {
            (m.max(x.abs_diff(*y)), n + usize::from(x != y))
        })
}

#[test]
fn bicubic_resize_matches_pillow_exactly() {
    let m = manifest();
    let mut worst = 0;
    for case in m["resize"].as_array().unwrap() {
        let src = load(case["src"].as_str().unwrap());
        let (w, h) = (
            case["width"].as_u64().unwrap() as u32,
            case["height"].as_u64().unwrap() as u32,
        );
        let want = load(case["expected"].as_str().unwrap());
        let got = resize_bicubic(&src, w, h).unwrap();
        let (max, n) = diff(&got, &want);
        println!(
            "{}x{} -> {w}x{h}: max diff {max}, {n} samples differ",
            src.width(),
            src.height()
        );
        worst = worst.max(max);
    }
    assert_eq!(
        worst, 0,
        "Pillow's bicubic should be reproduced bit for bit"
    );
}

/// The 2560x1440 source of `pil_pattern_1316x728.png` (same formula as gen_reference.py).
fn pattern() -> RgbImage {
    RgbImage::from_fn(2560, 1440, |x, y| {
        let (x, y) = (i64::from(x), i64::from(y));
        if (x + 2 * y) % 401 < 3 {
            return Rgb([255; 3]);
        }
        let b = ((x / 160 + y / 160) % 2) * 200 + 30;
        Rgb([
            ((x / 160) * 37 % 256) as u8,
            ((y / 90) * 53 % 256) as u8,
            b as u8,
        ])
    })
}

fn png_bytes(img: DynamicImage) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, ImageFormat::Png).unwrap();
    out.into_inner()
}

#[test]
fn screen_sized_input_fits_max_pixels_and_matches_pillow() {
    let cfg = PreprocessConfig::default();
    let img = pattern();
    let pv = preprocess(&img, &cfg).unwrap();
    // smart_resize(1440, 2560) = (728, 1316): 52 x 94 patches, 958048 <= 1003520 pixels.
    assert_eq!(pv.grid_thw, [1, 52, 94]);
    assert_eq!(pv.n_patches, 52 * 94);
    assert_eq!(pv.data.len(), 52 * 94 * 1176);
    assert!(52 * 14 * 94 * 14 <= cfg.max_pixels);

    let want = load(manifest()["pattern_2560x1440"].as_str().unwrap());
    let resized = resize_bicubic(&img, 1316, 728).unwrap();
    let (max, n) = diff(&resized, &want);
    println!("2560x1440 -> 1316x728: max diff {max}, {n} samples differ");
    assert_eq!(max, 0);

    // Streamed PNG decode (forced by a small max_alloc) gives the same bytes, in every
    // PNG colour layout that converts to the same RGB.
    let stream = DecodeLimits {
        max_alloc: 4 << 20,
        ..Default::default()
    };
    let full = DecodeLimits::default();
    let rgb = DynamicImage::ImageRgb8(img.clone());
    let layouts = [
        ("rgb8", rgb.clone()),
        ("rgba8", DynamicImage::ImageRgba8(rgb.to_rgba8())),
        ("rgb16", DynamicImage::ImageRgb16(rgb.to_rgb16())),
    ];
    for (name, layout) in layouts {
        let bytes = png_bytes(layout);
        let streamed = load_resized(&bytes, &cfg, &stream).unwrap();
        assert_eq!(diff(&streamed, &want), (0, 0), "{name}: streamed");
        assert_eq!(
            load_resized(&bytes, &cfg, &full).unwrap(),
            streamed,
            "{name}: in memory"
        );
    }
    for (name, layout) in [
        ("l8", rgb.grayscale()),
        ("la8", DynamicImage::ImageLumaA8(rgb.to_luma_alpha8())),
    ] {
        let bytes = png_bytes(layout);
        let streamed = load_resized(&bytes, &cfg, &stream).unwrap();
        assert_eq!(
            load_resized(&bytes, &cfg, &full).unwrap(),
            streamed,
            "{name}"
        );
    }
    // A JPEG that large is not streamed: refused, not decoded.
    let mut jpeg = Cursor::new(Vec::new());
    rgb.write_to(&mut jpeg, ImageFormat::Jpeg).unwrap();
    let err = load_resized(jpeg.get_ref(), &cfg, &stream).unwrap_err();
    assert!(err.to_string().contains("only PNG is streamed"), "{err}");
}

#[test]
fn decoding_matches_pillow_convert_rgb() {
    let m = manifest();
    for case in m["decode"].as_array().unwrap() {
        let file = case["file"].as_str().unwrap();
        let got = load(file);
        let want = load(case["expected"].as_str().unwrap());
        let (max, n) = diff(&got, &want);
        println!(
            "{file} (PIL mode {}): max diff {max}, {n} of {} samples differ",
            case["pil_mode"],
            want.as_raw().len()
        );
        // JPEG goes through zune-jpeg, not libjpeg-turbo: other IDCT and chroma upsampling,
        // so levels differ (measured: 4:2:0 up to 8, 4:4:4 up to 2, grey up to 1).
        // Everything else, lossy WebP included, decodes exactly as Pillow.
        let bound = match file {
            "dec_rgb.jpg" => 8,
            "dec_rgb444.jpg" => 2,
            "dec_gray.jpg" => 1,
            _ => 0,
        };
        assert!(max <= bound, "{file}: max diff {max} > {bound}");
    }
}

#[test]
fn end_to_end_matches_transformers() {
    let bytes = read(&test_data().join("hf_e2e.safetensors"));
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let cases = [
        ("a", "src_a.png", PreprocessConfig::default(), [1, 4, 4]),
        (
            "b",
            "src_b.png",
            PreprocessConfig {
                min_pixels: 784,
                max_pixels: 3136,
                ..Default::default()
            },
            [1, 2, 4],
        ),
        (
            "f",
            "src_f.png",
            PreprocessConfig {
                min_pixels: 784,
                max_pixels: 6272,
                ..Default::default()
            },
            [1, 10, 2],
        ),
    ];
    for (key, src, cfg, grid) in cases {
        let t = st.tensor(&format!("{key}.pixel_values")).unwrap();
        let want: Vec<f32> = t
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let thw = st.tensor(&format!("{key}.image_grid_thw")).unwrap();
        let thw: Vec<i64> = thw
            .data()
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let img = load(src);
        let got = preprocess(&img, &cfg).unwrap();
        assert_eq!(got.grid_thw, grid, "{key}");
        assert_eq!(thw, grid.map(|v| v as i64), "{key}");
        assert_eq!([got.n_patches, got.row_len], [t.shape()[0], t.shape()[1]]);
        let differing = got
            .data
            .iter()
            .zip(&want)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        println!(
            "{key}: {}x{} -> grid {grid:?}, {differing} values differ",
            img.width(),
            img.height()
        );
        assert_eq!(differing, 0, "{key}: expected bit-exact");
        let from_bytes = preprocess_bytes(
            &read(&test_data().join(src)),
            &cfg,
            &DecodeLimits::default(),
        )
        .unwrap();
        assert_eq!(from_bytes, got);
    }
}
